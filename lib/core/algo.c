/* Algorithm selection.  COLL_ALGO overrides with NCCL's grammar:
 *   COLL_ALGO=ring                       every collective
 *   COLL_ALGO=allreduce:ring;broadcast:ring
 *   COLL_ALGO=^naive                     exclude
 * Among the algorithms allowed that can run a call, one that the user's settings
 * force (forced()), else the one with the lowest predicted time (plan.c). */
#include "algo.h"

#include "reduce.h"

#include <string.h>

#define NALGOS COLL_NALGOS
#define algo_table coll_algo_table

static const char *const func_names[COLL_FUNC_COUNT] = {
    [COLL_FUNC_ALLREDUCE] = "allreduce", [COLL_FUNC_BROADCAST] = "broadcast",
    [COLL_FUNC_REDUCE] = "reduce",       [COLL_FUNC_ALLGATHER] = "allgather",
    [COLL_FUNC_REDUCE_SCATTER] = "reducescatter",
};

const char *coll_func_name(enum coll_func f)
{
    return (unsigned)f < COLL_FUNC_COUNT ? func_names[f] : "?";
}

collResult_t coll_algo_comm_init(struct coll_comm *comm)
{
    for (int i = 0; i < NALGOS; i++)
        if (algo_table[i]->comm_init != NULL)
            COLL_CHECK(algo_table[i]->comm_init(comm));
    return collSuccess;
}

void coll_algo_comm_fini(struct coll_comm *comm)
{
    for (int i = 0; i < NALGOS; i++)
        if (algo_table[i]->comm_fini != NULL)
            algo_table[i]->comm_fini(comm);
}

static int func_by_name(const char *name, size_t len)
{
    for (int f = 0; f < COLL_FUNC_COUNT; f++)
        if (strlen(func_names[f]) == len && strncasecmp(func_names[f], name, len) == 0)
            return f;
    /* NCCL spells it with an underscore or without */
    if (len == 14 && strncasecmp(name, "reduce_scatter", len) == 0)
        return COLL_FUNC_REDUCE_SCATTER;
    return -1;
}

/* Parses COLL_ALGO for function f.  allowed[] gets which algorithms may run.
 * Returns -1 and a message in err on a syntax error. */
static int algo_parse(const char *spec, enum coll_func f, bool *allowed, char *err, size_t errlen)
{
    for (int i = 0; i < NALGOS; i++)
        allowed[i] = true;
    if (spec == NULL)
        return 0;
    bool matched_func = false;
    const char *p = spec;
    while (*p) {
        const char *end = strchr(p, ';');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *colon = memchr(p, ':', len);
        const char *list = p;
        size_t list_len = len;
        int func = -1;
        if (colon) {
            func = func_by_name(p, (size_t)(colon - p));
            if (func < 0) {
                snprintf(err, errlen, "COLL_ALGO: unknown collective '%.*s'", (int)(colon - p), p);
                return -1;
            }
            list = colon + 1;
            list_len = len - (size_t)(colon - p) - 1;
        }
        bool exclude = list_len > 0 && list[0] == '^';
        if (exclude) {
            list++;
            list_len--;
        }
        bool sel[NALGOS] = {false};
        const char *q = list;
        while (q < list + list_len) {
            const char *comma = memchr(q, ',', (size_t)(list + list_len - q));
            size_t nl = comma ? (size_t)(comma - q) : (size_t)(list + list_len - q);
            const struct coll_algo *a = coll_algo_find_n(q, nl);
            if (a == NULL) {
                snprintf(err, errlen, "COLL_ALGO: unknown algorithm '%.*s'", (int)nl, q);
                return -1;
            }
            for (int i = 0; i < NALGOS; i++)
                if (algo_table[i] == a)
                    sel[i] = true;
            q += nl + (comma ? 1 : 0);
        }
        if (func < 0 || func == (int)f) {
            if (func == (int)f)
                matched_func = true;
            if (func >= 0 || !matched_func)
                for (int i = 0; i < NALGOS; i++)
                    allowed[i] = exclude ? !sel[i] : sel[i];
        }
        p += len + (end ? 1 : 0);
    }
    return 0;
}

collResult_t coll_algo_check_env(struct coll_comm *comm)
{
    bool allowed[NALGOS];
    char err[160];
    const char *spec = coll_param_str(COLL_PARAM_ALGO);
    for (int f = 0; f < COLL_FUNC_COUNT; f++) {
        if (algo_parse(spec, (enum coll_func)f, allowed, err, sizeof(err)) != 0) {
            coll_set_error(comm, "%s", err);
            return collInvalidArgument;
        }
        comm->algo_mask[f] = 0;
        for (int i = 0; i < NALGOS; i++)
            if (allowed[i])
                comm->algo_mask[f] |= 1u << i;
        comm->choice[f].valid = false;
    }
    return collSuccess;
}

#define ALGO_MARGIN 1.1
#define ALGO_MARGIN_BYTES (64 * 1024)

/* The best algorithm of mask for the call (-1: none can run it) and its
 * predicted microseconds. */
static int algo_pick(const struct coll_comm *comm, enum coll_func f, const struct coll_args *a,
                     uint32_t mask, double *us_p)
{
    int best = -1;
    double best_us = 0;
    size_t bytes = a->count * coll_dtype_size(a->dtype);
    for (int i = 0; i < NALGOS; i++) {
        const struct coll_algo *al = algo_table[i];
        if (!(mask & (1u << i)) || !coll_algo_has(al, f) || !al->can_run(comm, f, a))
            continue;
        /* The inputs of the prediction (model, count, type, nranks) are the same on
         * every rank, so every rank picks the same algorithm. */
        double us = al->predict ? al->predict(comm, f, a, &comm->model) : 1e300;
        COLL_TRACE_LOG(COLL_SUBSYS_ALGO, "%s of %zu x %s: %s predicted %.1f us",
                       coll_func_name(f), a->count, coll_dtype_name(a->dtype), al->name, us);
        if (al->forced != NULL && al->forced(comm, f, a)) {
            *us_p = us;
            return i;
        }
        /* The model is rough where every algorithm is bound by the same copies:
         * there another algorithm must beat the table's first (the ring, which is
         * bandwidth-optimal and best pipelined) by ALGO_MARGIN to replace it.
         * Below ALGO_MARGIN_BYTES, where rounds and messages dominate, the
         * fitted message terms decide alone. */
        if (best == 0 && i > 0 && bytes >= ALGO_MARGIN_BYTES)
            us *= ALGO_MARGIN;
        if (best < 0 || us < best_us) {
            best = i;
            best_us = us;
        }
    }
    *us_p = best_us;
    return best;
}

#define ALGO_ALL ((1u << NALGOS) - 1)

bool coll_algo_quick(const struct coll_comm *comm, enum coll_func f, const struct coll_args *a)
{
    for (int i = 0; i < NALGOS; i++) {
        const struct coll_algo *al = algo_table[i];
        if (al->quick && coll_algo_has(al, f) && al->can_run(comm, f, a))
            return true;
    }
    return false;
}

collResult_t coll_algo_select(struct coll_comm *comm, enum coll_func f, const struct coll_args *a,
                              const struct coll_algo **algo_p)
{
    /* A loop repeats the same call: its choice is kept (all ranks keep the same). */
    struct coll_choice *ch = &comm->choice[f];
    if (ch->valid && ch->count == a->count && ch->dtype == (int)a->dtype &&
        ch->op == (int)a->op && ch->root == a->root && ch->mask == comm->algo_mask[f]) {
        *algo_p = algo_table[ch->algo];
        return collSuccess;
    }
    double best_us;
    int best = algo_pick(comm, f, a, comm->algo_mask[f], &best_us);
    if (best < 0 && comm->algo_mask[f] != ALGO_ALL) {
        /* COLL_ALGO=tree says nothing useful about allgather, which has no tree:
         * the override applies where it can, the planner chooses elsewhere. */
        COLL_INFO(COLL_SUBSYS_ALGO, "%s: COLL_ALGO=%s allows no algorithm that runs it; "
                  "choosing among all", coll_func_name(f), coll_param_str(COLL_PARAM_ALGO));
        comm->algo_mask[f] = ALGO_ALL;
        return coll_algo_select(comm, f, a, algo_p);
    }
    if (best < 0) {
        coll_set_error(comm, "%s: no algorithm can run it", coll_func_name(f));
        return collInternalError;
    }
    if (!ch->valid || ch->algo != best) /* logged when the choice changes */
        COLL_INFO(COLL_SUBSYS_ALGO, "%s of %zu x %s on %d ranks: %s, predicted %.1f us",
                  coll_func_name(f), a->count, coll_dtype_name(a->dtype), comm->nranks,
                  algo_table[best]->name, best_us < 1e299 ? best_us : -1.0);
    *ch = (struct coll_choice){.valid = true, .count = a->count, .dtype = (int)a->dtype,
                            .op = (int)a->op, .root = a->root, .algo = best,
                            .mask = comm->algo_mask[f]};
    *algo_p = algo_table[best];
    return collSuccess;
}

collResult_t coll_algo_select_other(struct coll_comm *comm, enum coll_func f,
                                    const struct coll_args *a, const struct coll_algo *not,
                                    const struct coll_algo **algo_p)
{
    uint32_t without = 0;
    for (int i = 0; i < NALGOS; i++)
        if (algo_table[i] == not)
            without = 1u << i;
    double us;
    int best = algo_pick(comm, f, a, comm->algo_mask[f] & ~without, &us);
    if (best < 0) /* COLL_ALGO allowed only `not`: the planner chooses among the rest */
        best = algo_pick(comm, f, a, ALGO_ALL & ~without, &us);
    if (best < 0) {
        coll_set_error(comm, "%s: no algorithm but %s can run it", coll_func_name(f), not->name);
        return collInternalError;
    }
    *algo_p = algo_table[best];
    return collSuccess;
}
