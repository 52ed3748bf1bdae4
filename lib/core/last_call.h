/* The record behind collCommGetLastCallInfo (last_call.c): what the last call
 * that ended on a communicator used.  collectives.c and p2p.c record each call
 * at its end, on the thread that ran it, while its flight record is still open. */
#ifndef COLL_LAST_CALL_H
#define COLL_LAST_CALL_H

#include <stddef.h>
#include <stdint.h>

#include "internal.h"

struct coll_algo;

/* One call, as its runner knows it. */
struct coll_last_call_desc {
    uint64_t seq;                  /* comm->seq of the call (its flight record's) */
    const char *func;              /* static: "allreduce", "collSend", "group" */
    const struct coll_algo *algo;  /* the collective's algorithm; NULL: messages ("p2p") */
    int coll_func;                 /* enum coll_func of a collective; -1 for messages */
    size_t count;
    int dtype, op, root;           /* -1: none */
};

/* Records d, which ended with res, as comm's last call.  The peers and
 * transports come from the call's flight record (open still), or from the last
 * call of the same shape. */
void coll_last_call_record(struct coll_comm *comm, const struct coll_last_call_desc *d,
                           collResult_t res);

#endif
