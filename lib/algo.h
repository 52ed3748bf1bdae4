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
    /* Predicted time in microseconds of the call under model m (steps x alpha +
     * bytes on the busiest link / beta + reduction); NULL: no prediction. */
    double (*predict)(const struct coll_comm *comm, enum coll_func f, const struct coll_args *a,
                      const struct coll_model *m);
};

extern const struct coll_algo coll_algo_ring;
extern const struct coll_algo coll_algo_tree;
extern const struct coll_algo coll_algo_naive;

const char *coll_func_name(enum coll_func f);
/* Predicted microseconds of a schedule: hops messages in sequence; max_rank_bytes
 * sent + received by the busiest rank; total_bytes sent + received by all ranks;
 * reduce_bytes reduced on the critical path. */
static inline double coll_model_time(const struct coll_model *m, int nranks, double hops,
                                     double max_rank_bytes, double total_bytes,
                                     double reduce_bytes)
{
    double t_rank = max_rank_bytes / (m->core_gbs * 1e3);
    double t_host = total_bytes * m->local_ranks / nranks / (m->host_gbs * 1e3);
    return hops * m->alpha_us + (t_rank > t_host ? t_rank : t_host) +
           reduce_bytes / (m->reduce_gbs * 1e3);
}

/* Sets comm->model: COLL_LINK_LATENCY_NS / COLL_LINK_BW_MBS, else measured with a
 * few ring collectives, and agreed by all ranks (so all plan alike). */
collResult_t coll_plan_init(struct coll_comm *comm);
/* Picks the algorithm for one call: among those COLL_ALGO allows that can run it,
 * the one with the lowest predicted time; the table's first without predictions. */
collResult_t coll_algo_select(struct coll_comm *comm, enum coll_func f, const struct coll_args *a,
                              const struct coll_algo **algo_p);
/* Validates COLL_ALGO at init; collInvalidArgument naming the bad part. */
collResult_t coll_algo_check_env(struct coll_comm *comm);

#endif
