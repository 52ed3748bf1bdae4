/* The client of status queries (job_status.c), shared by `collrun status` and
 * `collinfo --status HOST:PORT`: asks every rank of a running job, over its
 * bootstrap listener and with the job's secret, what it is doing, and prints
 * one line per rank and a verdict (docs/collrun.md, "Status of a running job").
 * The rank's side is lib/engine/status.c; the messages are in lib/engine/wire.h. */
#ifndef COLL_JOB_STATUS_H
#define COLL_JOB_STATUS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "socket.h"
#include "wire.h"

/* How long a rank gets to answer, by default: a stopped process never does. */
#define COLL_JOB_STATUS_WAIT_MS 1000

/* One rank to ask: where its bootstrap listener is. */
struct coll_job_rank {
    int rank;
    int pid;
    char host[COLL_STATUS_HOST_BYTES];
    union coll_sockaddr addr;
    socklen_t addrlen;
};

enum coll_job_how {
    COLL_JOB_ANSWERED,  /* rep holds its answer */
    COLL_JOB_NO_ANSWER, /* connected, silent until the deadline: stopped, or its host hangs */
    COLL_JOB_REFUSED,   /* nothing listens there: the rank is gone */
    COLL_JOB_CLOSED,    /* closed unanswered: not this job's secret, or not a rank of it */
    COLL_JOB_BAD,       /* answered something that is not a valid answer */
    COLL_JOB_FAILED,    /* cannot connect: err */
};

struct coll_job_answer {
    enum coll_job_how how;
    int err;                     /* errno of COLL_JOB_FAILED */
    const char *why;             /* COLL_JOB_BAD: what was wrong with it */
    struct coll_status_reply rep;
};

/* Asks the listener at hostport for every rank's listener.  Returns 0 with
 * *ranks_p (malloc'd, *n_p entries), or 1 with the cause on stderr after
 * "prog: ". */
int coll_job_status_table(const char *prog, const char *hostport, const uint8_t *secret,
                          int wait_ms, struct coll_job_rank **ranks_p, int *n_p);

/* Reads a COLL_STATUS_FILE (lib/engine/status.c writes it).  0, or 1 with the
 * cause on stderr. */
int coll_job_status_file(const char *prog, const char *path, struct coll_job_rank **ranks_p,
                         int *n_p);

/* Asks the n ranks at once, each within wait_ms; answers[k] for ranks[k]. */
void coll_job_status_ask(const struct coll_job_rank *ranks, int n, const uint8_t *secret,
                         int wait_ms, struct coll_job_answer *answers);

/* Asks the ranks and prints the report to out: a line per rank and a verdict,
 * or one JSON document.  title heads the text ("collrun job 1234: ./prog").
 * Returns 0 when at least one rank answered; 1, printing only the cause on
 * stderr, when none did. */
int coll_job_status_report(const char *prog, const struct coll_job_rank *ranks, int n,
                           const uint8_t *secret, int wait_ms, bool json, const char *title,
                           FILE *out);

#endif
