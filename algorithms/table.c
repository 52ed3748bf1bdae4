/* The table of algorithms: the one place that names them all.  Their order is
 * the order of COLL_ALGO's bits and of the planner's ties (lib/core/algo.c). */
#include <string.h>
#include <strings.h>

#include "algo.h"

extern const struct coll_algo coll_algo_ring;
extern const struct coll_algo coll_algo_tree;
extern const struct coll_algo coll_algo_naive;
extern const struct coll_algo coll_algo_rd;
extern const struct coll_algo coll_algo_direct;
extern const struct coll_algo coll_algo_hier;
extern const struct coll_algo coll_algo_ll;

const struct coll_algo *const coll_algo_table[COLL_NALGOS] = {
    &coll_algo_ring,
    &coll_algo_tree,
    &coll_algo_naive,
    &coll_algo_rd,
    &coll_algo_direct,
    &coll_algo_hier,
    &coll_algo_ll,
};

const struct coll_algo *coll_algo_find_n(const char *name, size_t len)
{
    for (int i = 0; i < COLL_NALGOS; i++)
        if (strlen(coll_algo_table[i]->name) == len &&
            strncasecmp(coll_algo_table[i]->name, name, len) == 0)
            return coll_algo_table[i];
    return NULL;
}

const struct coll_algo *coll_algo_find(const char *name)
{
    return coll_algo_find_n(name, strlen(name));
}

/* While the comm is being made, agreements go around the ring, over the
 * connections init made, so that a communicator nobody calls recursive
 * doubling on never connects its partners (each a pair of shared-memory
 * segments, reserved: most of a split's cost); afterwards by recursive
 * doubling, in log2 n rounds.  Every rank is in the same state. */
static const struct coll_algo *agree_algo(const struct coll_comm *comm)
{
    return coll_algo_find(comm->boot_watch ? "rd" : "ring");
}

collResult_t coll_algo_agree_max(struct coll_comm *comm, double *mine, double *all, size_t n)
{
    struct coll_args a = {mine, all, n, collDouble, collMax, 0};
    return coll_algo_run(agree_algo(comm), COLL_FUNC_ALLREDUCE, comm, &a);
}

collResult_t coll_algo_agree_gather(struct coll_comm *comm, const void *mine, void *all,
                                    size_t bytes)
{
    struct coll_args a = {mine, all, bytes, collUint8, collSum, 0};
    return coll_algo_run(agree_algo(comm), COLL_FUNC_ALLGATHER, comm, &a);
}
