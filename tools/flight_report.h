/* collinfo --flight DIR (flight_report.c): reads the flight records that the ranks
 * wrote to COLL_FLIGHT_DIR and says, per communicator, which ranks are missing,
 * behind or ahead, in which call, and which peer a rank waits for. */
#ifndef COLL_FLIGHT_REPORT_H
#define COLL_FLIGHT_REPORT_H

#include <stdbool.h>
#include <stdio.h>

/* Reads every flight-*.txt of dir and prints the report to out (text, or one JSON
 * document with json); a file that cannot be read or parsed is named on err,
 * with its line, and left out.  Returns 0, or 1 when dir cannot be read, holds
 * no record, or a file was left out (the rest is still reported). */
int coll_flight_report(const char *dir, bool json, FILE *out, FILE *err);

#endif
