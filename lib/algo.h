/* The algorithm interface: a collective becomes a schedule of sends, receives and
 * reductions over connections.  Algorithms never touch sockets; they use exec.h. */
#ifndef COLL_ALGO_H
#define COLL_ALGO_H

#include <stdbool.h>

#include "internal.h"

struct coll_args {
    const void *sendbuf;
    void *recvbuf;
    size_t count;          /* elements: per rank for allgather/reduce_scatter blocks */
    collDataType_t dtype;
    collRedOp_t op;
    int root;
};

struct coll_algo {
    const char *name;
    bool (*can_run)(const struct coll_comm *comm, enum coll_func f, const struct coll_args *a);
    collResult_t (*run[COLL_FUNC_COUNT])(struct coll_comm *comm, const struct coll_args *a);
};

extern const struct coll_algo coll_algo_ring;

const char *coll_func_name(enum coll_func f);
/* Picks the algorithm for one call: COLL_ALGO's override, else the table. */
collResult_t coll_algo_select(struct coll_comm *comm, enum coll_func f, const struct coll_args *a,
                              const struct coll_algo **algo_p);
/* Validates COLL_ALGO at init; collInvalidArgument naming the bad part. */
collResult_t coll_algo_check_env(struct coll_comm *comm);

#endif
