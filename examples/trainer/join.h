/*
 * Taking new processes into a running elastic job (dp_trainer --elastic).
 *
 *   new process --hello(magic, job token)-->      rank 0's join listener
 *               (waits; rank 0 looks at every step boundary)
 *               <--offer(grow id, new size, rank)--  when the job grows
 *   then the new process: collCommGrow(NULL, size, &id, rank, ...)
 *
 * The job token is a hash of COLL_SECRET (or of COLL_COMM_ID without one), so a
 * process of another job is not taken in.  Plain blocking sockets with short
 * timeouts: rank 0 reads a hello only once poll says a connection is there.
 */
#ifndef TRAINER_JOIN_H
#define TRAINER_JOIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "collective.h"

#define JOIN_MAX_PENDING 64

struct join_listener {
    int fd;                            /* -1: not listening */
    int pending[JOIN_MAX_PENDING];     /* connections that said hello, oldest first */
    int npending;
    long dropped;                      /* connections refused (the first is logged) */
    uint64_t token;
};

/* The job's token, from the environment. */
uint64_t join_token(void);

/* Listens on hostport (SO_REUSEADDR).  0, or -1 with a message in err. */
int join_listen(struct join_listener *jl, const char *hostport, char *err, size_t errlen);

/* Accepts the connections waiting and reads their hellos, without waiting for
 * a connection to come.  Returns the processes waiting for an offer. */
int join_poll(struct join_listener *jl);

/* Offers the first k waiting processes ranks first_rank .. first_rank + k - 1 of
 * nranks with id, and forgets them.  Returns how many offers were sent whole. */
int join_offer(struct join_listener *jl, int k, const collUniqueId *id, int nranks,
               int first_rank);

void join_close(struct join_listener *jl);

/* A new process: says hello at hostport and waits for its offer, reconnecting
 * when the connection is refused or lost (rank 0 may change after a failure),
 * for up to timeout_s.  0, or -1 with a message in err. */
int join_request(const char *hostport, uint64_t token, double timeout_s, collUniqueId *id,
                 int *nranks, int *rank, char *err, size_t errlen);

#endif
