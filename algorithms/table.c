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

collResult_t coll_algo_agree_max(struct coll_comm *comm, double *mine, double *all, size_t n)
{
    struct coll_args a = {mine, all, n, collDouble, collMax, 0};
    return coll_algo_find("rd")->run[COLL_FUNC_ALLREDUCE](comm, &a);
}
