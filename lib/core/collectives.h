/* The collectives' calls (collectives.c) as programs beside other calls in
 * flight: what the progress thread of a stream (stream.c) starts in the set of
 * calls in flight (lib/engine/inflight.h). */
#ifndef COLL_COLLECTIVES_H
#define COLL_COLLECTIVES_H

#include <stdbool.h>
#include <stdint.h>

#include "algo.h"
#include "internal.h"

/* A call started beside others: what its end needs. */
struct coll_call_flight {
    const struct coll_algo *algo;
    uint64_t seq;
};

/* Whether collective f with a runs as a program beside other calls: the
 * algorithm the planner picks builds programs and shares nothing of the comm
 * but its connections, and the ranks do not first agree on each call
 * (COLL_CHECK_MISMATCH).  The progress thread's question. */
bool coll_call_flies(struct coll_comm *comm, enum coll_func f, const struct coll_args *a);
/* Starts the call (sequence number, flight record) and builds its program. */
collResult_t coll_call_fly_begin(struct coll_comm *comm, enum coll_func f,
                                 const struct coll_args *a, struct coll_call_flight *cf,
                                 struct coll_prog **p_p);
/* Ends it with res: what it did recorded, its flight record closed. */
void coll_call_fly_end(struct coll_comm *comm, enum coll_func f, const struct coll_args *a,
                       const struct coll_call_flight *cf, collResult_t res);

#endif
