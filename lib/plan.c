/* The planner's link model.  An alpha-beta model (time = messages x alpha + bytes
 * / beta, plus bytes reduced / reduce bandwidth) predicts each algorithm's time
 * for a call (struct coll_algo.predict); lib/algo.c picks the lowest.
 *
 * alpha and beta come from COLL_LINK_LATENCY_NS / COLL_LINK_BW_MBS, or are
 * measured once at init with the ring itself: the best of a few 4-byte
 * allreduces (ceil(log2 n) hops) gives alpha, one 1 MiB allgather gives beta.
 * Every rank then takes the slowest measurement of any rank (an allreduce with
 * max), so the model, and with it every later choice, is the same everywhere. */
#include <math.h>
#include <string.h>

#include "algo.h"
#include "exec.h"
#include "reduce.h"

static int plan_log2_ceil(int n)
{
    int k = 0;
    while ((1 << k) < n)
        k++;
    return k;
}

collResult_t coll_plan_init(struct coll_comm *comm)
{
    struct coll_model *m = &comm->model;
    int64_t lat = coll_param_int(COLL_PARAM_LINK_LATENCY_NS);
    int64_t bw = coll_param_int(COLL_PARAM_LINK_BW_MBS);
    m->alpha_us = lat > 0 ? (double)lat / 1e3 : 10.0;
    m->beta_gbs = bw > 0 ? (double)bw / 1e3 : 1.0;
    m->reduce_gbs = 10.0;
    int n = comm->nranks;
    if (n == 1 || (lat > 0 && bw > 0))
        return collSuccess;

    const struct coll_algo *ring = &coll_algo_ring;
    double probe[2] = {1e300, 1e300};
    float one = 1.0f, out;
    for (int rep = 0; rep < 5; rep++) {
        struct coll_args a = {&one, &out, 1, collFloat, collSum, 0};
        coll_exec_begin(comm, "plan probe");
        int64_t t0 = coll_now_ns();
        COLL_CHECK(ring->run[COLL_FUNC_ALLREDUCE](comm, &a));
        double us = (double)(coll_now_ns() - t0) / 1e3;
        probe[0] = fmin(probe[0], us / plan_log2_ceil(n));
    }
    size_t per = (1u << 20) / (size_t)n;
    char *buf;
    COLL_CHECK(coll_comm_scratch(comm, (size_t)n * per * 2, (void **)&buf));
    memset(buf, 0, (size_t)n * per * 2); /* fault the pages in outside the timing */
    struct coll_args g = {buf, buf + (size_t)n * per, per, collUint8, collSum, 0};
    double best_us = 1e300;
    for (int rep = 0; rep < 3; rep++) {
        coll_exec_begin(comm, "plan probe");
        int64_t t0 = coll_now_ns();
        COLL_CHECK(ring->run[COLL_FUNC_ALLGATHER](comm, &g));
        best_us = fmin(best_us, (double)(coll_now_ns() - t0) / 1e3);
    }
    double us = best_us - (n - 1) * probe[0];
    double moved = (double)(n - 1) * (double)per;
    probe[1] = us > 0 ? moved / (us * 1e3) : 10.0; /* GB/s */
    /* Agree: the largest alpha and (negated) the smallest beta of all ranks. */
    double agree[2] = {probe[0], -probe[1]}, res[2];
    struct coll_args a = {agree, res, 2, collDouble, collMax, 0};
    coll_exec_begin(comm, "plan probe");
    COLL_CHECK(ring->run[COLL_FUNC_ALLREDUCE](comm, &a));
    if (lat <= 0)
        m->alpha_us = res[0];
    if (bw <= 0)
        m->beta_gbs = -res[1];
    COLL_INFO(COLL_SUBSYS_ALGO, "link model: alpha %.1f us, beta %.2f GB/s, reduce %.1f GB/s%s",
              m->alpha_us, m->beta_gbs, m->reduce_gbs,
              lat > 0 || bw > 0 ? " (partly from COLL_LINK_*)" : " (measured)");
    return collSuccess;
}
