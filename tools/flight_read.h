/* The flight records of COLL_FLIGHT_DIR as collinfo --flight reads them
 * (flight_read.c; lib/engine/flight.c writes them; flight_report.c analyses them).
 *
 * The file (version 1), one item per line, values without spaces but the
 * free-text ones (name, host, error), which take the rest of their line:
 *
 *   COLL-FLIGHT 1
 *   comm 5e1d2c3b4a596877          shared by every rank of the communicator
 *   name alpha                     commName, when it has one
 *   rank 2
 *   nranks 4
 *   host node7
 *   pid 1234
 *   reason failed                  failed, aborted or revoked
 *   why collTimeout                the failed call's result, collCommAbort, ...
 *   error allreduce #57: ...       the failure's message (failed only)
 *   wait_peer 3                    the peer of the rank's last wait that found
 *                                  nothing to do, -1: none (in the call in progress,
 *                                  the peer it waited for, bytes posted or not)
 *   written_us 1718000000000000    when, in microseconds since 1970
 *   calls 57                       calls recorded in all (the file has the last 32)
 *   call seq=57 name=allreduce algo=ring state=failed result=collTimeout count=4096
 *        dtype=float32 op=sum root=-1 peer=-1 start_us=... end_us=0      (one line)
 *   peer rank=3 sent=16384 sent_posted=16384 recvd=0 recvd_posted=16384
 *                                  bytes with one peer in the call above
 *                                  (rank -1: the other peers together)
 *   end
 *
 * Unknown keys are skipped, so that a later version may add some.
 */
#ifndef COLL_FLIGHT_READ_H
#define COLL_FLIGHT_READ_H

#include <stdbool.h>
#include <stdio.h>

#define FR_MAX_RANKS (1 << 20)

struct fr_peer {
    int rank;                  /* -1: the other peers together */
    unsigned long long sent, sent_posted, recvd, recvd_posted;
};

struct fr_call {
    unsigned long long seq, count;
    char name[40], algo[40], state[16], result[40], dtype[24], op[24]; /* "-": none */
    long long root, peer, start_us, end_us;                            /* -1: none */
    int npeers;
    struct fr_peer *peers;
};

/* One rank's file. */
struct fr_file {
    char *path;
    char comm[17];             /* 16 hex digits, lower case */
    char *name, *host, *error; /* NULL when the file has none */
    int rank, nranks;
    long long pid, written_us, wait_peer;
    unsigned long long calls_total;
    char reason[16], why[48];
    int ncalls;
    struct fr_call *calls;
    /* Its position, set by the analysis (flight_report.c). */
    bool any_done;
    unsigned long long last_done;
    const struct fr_call *cur; /* the first call not completed, NULL: none */
    unsigned long long key;
};

/* A file left out: why, and where. */
struct fr_error {
    char *path;
    int line;                  /* 0: the file as a whole */
    char msg[256];
};

/* What coll_fr_read_dir read. */
struct fr_records {
    const char *dir;
    FILE *err;                 /* where a file left out is named */
    struct fr_file **files;
    int nfiles;
    struct fr_error *errors;
    int nerrors, cap_errors;
};

/* Reads every flight-*.txt of rs->dir, in name order, into rs->files; a file
 * that cannot be read or parsed goes to rs->errors and is named on rs->err with
 * its line.  False when the directory cannot be listed (named on rs->err). */
bool coll_fr_read_dir(struct fr_records *rs);
/* Frees what coll_fr_read_dir allocated. */
void coll_fr_records_free(struct fr_records *rs);

#endif
