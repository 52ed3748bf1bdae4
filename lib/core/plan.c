/* The planner's machine model (struct coll_model in internal.h): each
 * algorithm's predict() describes a call as hops, the bytes of its busiest rank,
 * the bytes of all ranks and the bytes reduced, and coll_model_time() turns that
 * into microseconds; lib/core/algo.c picks the lowest.
 *
 * alpha and the bandwidths come from COLL_LINK_LATENCY_NS / COLL_LINK_BW_MBS, or
 * are measured once at init: the median of fifty 4-byte recursive-doubling
 * allreduces (rd.c: log2 p rounds, 2 more when n is not a power of two p) gives
 * alpha, the best of three 1 MiB ring allgathers
 * gives a core's copy speed (a core per rank) or the host's (more ranks than
 * cores).  Every rank then takes the slowest rank's figures (an allreduce with
 * max), so the model, and with it every later choice, is the same everywhere. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "algo.h"
#include "exec.h"
#include "machine.h"
#include "pattern.h"
#include "reduce.h"
#include "ring.h"

/* Splits alpha, one round of the small allreduce (recursive doubling: each rank
 * sends one message and receives one, about n messages in all), into the round's
 * latency, the CPU of the two messages at each rank and, with more ranks than
 * cores, the wake-ups of all n messages:
 *     alpha = lat + 2 msg + n wake / cores,  msg = r_msg lat,  wake = r_wake lat,
 * with the ratios of the slowest transport in use (struct coll_transport): one
 * measured figure cannot give three. */
static void coll_model_split_alpha(struct coll_model *m, double r_msg, double r_wake)
{
    bool over = m->local_ranks > m->cores;
    double wake_share = over ? r_wake * m->local_ranks / m->cores : 0.0;
    m->lat_us = m->alpha_us / (1.0 + 2 * r_msg + wake_share);
    m->msg_us = r_msg * m->lat_us;
    m->wake_us = over ? r_wake * m->lat_us : 0.0;
}

/* The largest message and wake-up ratios of the transports this rank uses, and
 * whether all of them lend received bytes in place (*no_lend 0) or not (1). */
static void plan_ratios(struct coll_comm *comm, double *r_msg, double *r_wake, double *no_lend)
{
    *r_msg = *r_wake = *no_lend = 0;
    for (int p = 0; p < comm->nranks; p++) {
        const struct coll_transport *tp = p == comm->rank ? NULL : coll_transport_for_peer(comm, p);
        if (tp == NULL)
            continue;
        *r_msg = fmax(*r_msg, tp->plan_msg_ratio);
        *r_wake = fmax(*r_wake, tp->plan_wake_ratio);
        if (tp->recv_peek == NULL)
            *no_lend = 1;
    }
}

#define PLAN_PROBES 50

static int plan_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* A rank's speed of moving bytes (sent + received) as a core's and the host's:
 * with a core per rank the rank's is one core's, with more ranks than cores
 * the host's is shared by all. */
static void plan_speeds(double rank_gbs, int local, int cores, double *core_p, double *host_p)
{
    if (local <= cores) {
        *core_p = rank_gbs;
        *host_p = rank_gbs * local;
    } else {
        *host_p = rank_gbs * local;
        *core_p = *host_p / cores;
    }
}

/* The best of three allgather halves of a ring allreduce over this host's
 * ranks, on bytes of buf (warm: the flat probe used it), as copy speeds. */
static collResult_t plan_local_probe(struct coll_comm *comm, char *buf, size_t bytes,
                                     double alpha, double *core_p, double *host_p)
{
    const struct coll_hosts *h = &comm->hosts;
    int host = h->host[comm->rank];
    int L = h->start[host + 1] - h->start[host];
    struct coll_ring_group local = {.n = L, .pos = h->index[comm->rank],
                                    .members = &h->order[h->start[host]]};
    struct coll_args g = {buf, buf, bytes, collUint8, collSum, 0};
    double best_us = 1e300;
    for (int rep = 0; rep < 3; rep++) {
        coll_exec_begin(comm, "plan probe");
        int64_t t0 = coll_now_ns();
        COLL_CHECK(coll_ring_allreduce_ag(comm, &g, &local, L, true));
        best_us = fmin(best_us, (double)(coll_now_ns() - t0) / 1e3);
    }
    double us = fmax(best_us - (L - 1) * alpha, 1.0);
    plan_speeds(2.0 * (L - 1) / L * (double)bytes / (us * 1e3), L, comm->hosts.min_cores, core_p,
                host_p);
    return collSuccess;
}

/* The median round of PLAN_PROBES 1-element ring allreduces over g (2 (n - 1)
 * rounds each); 0 when this rank is not in it (g->n == 0) or alone. */
static collResult_t plan_group_alpha(struct coll_comm *comm, const struct coll_ring_group *g,
                                     double *alpha_p)
{
    *alpha_p = 0;
    if (g->n < 2)
        return collSuccess;
    double us[PLAN_PROBES];
    float one = 1.0f, out;
    struct coll_args a = {&one, &out, 1, collFloat, collSum, 0};
    for (int rep = 0; rep < PLAN_PROBES; rep++) {
        coll_exec_begin(comm, "plan probe");
        int64_t t0 = coll_now_ns();
        COLL_CHECK(coll_ring_allreduce_group(comm, &a, g, g->n, true));
        us[rep] = (double)(coll_now_ns() - t0) / 1e3 / (2.0 * (g->n - 1));
    }
    qsort(us, PLAN_PROBES, sizeof(us[0]), plan_cmp_double);
    *alpha_p = us[PLAN_PROBES / 2];
    return collSuccess;
}

/* Several hosts: alpha within a host (every host's ranks at once) and across
 * (the first rank of each host; the others wait in the agreement). */
static collResult_t plan_class_alphas(struct coll_comm *comm, double *local_p, double *net_p)
{
    const struct coll_hosts *h = &comm->hosts;
    int host = h->host[comm->rank];
    struct coll_ring_group local = {.n = h->start[host + 1] - h->start[host],
                                    .pos = h->index[comm->rank],
                                    .members = &h->order[h->start[host]]};
    COLL_CHECK(plan_group_alpha(comm, &local, local_p));
    int *leaders;
    COLL_CHECK(coll_calloc(&leaders, (size_t)h->n));
    for (int j = 0; j < h->n; j++)
        leaders[j] = h->order[h->start[j]];
    struct coll_ring_group across = {.n = local.pos == 0 ? h->n : 0, .pos = host,
                                     .members = leaders};
    collResult_t res = plan_group_alpha(comm, &across, net_p);
    free(leaders);
    return res;
}

/* The figures a measurement gives, in agreement form (machine.h: larger is
 * worse): what a communicator of any shape derives its model from. */
enum plan_fig {
    PF_LAT,             /* a round's latency: alpha less its messages and wake-ups */
    PF_NEG_CORE,        /* -GB/s a core copies */
    PF_NEG_HOST,        /* -GB/s the host copies, per core in use (min(ranks, cores)) */
    PF_R_MSG,           /* the transports' message and wake-up ratios */
    PF_R_WAKE,
    PF_NO_LEND,         /* 1: some transport does not lend received bytes */
    PF_NEG_NET,         /* several hosts: -GB/s of a host's link */
    PF_NEG_LOCAL_CORE,  /* several hosts: -GB/s within a host, a core's */
    PF_NEG_LOCAL_HOST,  /* and the host's, per core in use */
    PF_LOCAL_ALPHA,     /* several hosts: alpha within a host, and across */
    PF_NET_ALPHA,
    PF_COUNT
};

/* A host's ranks busy at once: the ranks, or the cores when fewer. */
static int plan_in_use(int local, int cores)
{
    return local < cores ? local : cores;
}

/* Measures the machine over comm (collective) and returns its figures,
 * agreed by every rank. */
static collResult_t plan_measure(struct coll_comm *comm, double *fig)
{
    int n = comm->nranks;
    int cores = comm->model.cores, local = comm->model.local_ranks;
    double r_msg, r_wake, no_lend;
    plan_ratios(comm, &r_msg, &r_wake, &no_lend);
    const struct coll_algo *ring = coll_algo_find("ring"), *rd = coll_algo_find("rd");
    double probe_us[PLAN_PROBES];
    float one = 1.0f, out;
    int rounds = coll_rd_rounds(n);
    for (int rep = 0; rep < PLAN_PROBES; rep++) {
        struct coll_args a = {&one, &out, 1, collFloat, collSum, 0};
        coll_exec_begin(comm, "plan probe");
        int64_t t0 = coll_now_ns();
        COLL_CHECK(coll_algo_run(rd, COLL_FUNC_ALLREDUCE, comm, &a));
        probe_us[rep] = (double)(coll_now_ns() - t0) / 1e3 / rounds;
    }
    /* The median round: the fastest probes are the ones where every rank
     * happened to be running at once, which later calls cannot count on (with 8
     * ranks on 2 cores the best was 2-10 us a round from run to run, the median
     * 16-24 against 20 measured in steady state). */
    qsort(probe_us, PLAN_PROBES, sizeof(probe_us[0]), plan_cmp_double);
    double alpha = probe_us[PLAN_PROBES / 2];
    size_t per = (1u << 20) / (size_t)n;
    char *buf;
    COLL_CHECK(coll_comm_scratch(comm, (size_t)n * per * 2, (void **)&buf));
    memset(buf, 0, (size_t)n * per * 2); /* fault the pages in outside the timing */
    struct coll_args g = {buf, buf + (size_t)n * per, per, collUint8, collSum, 0};
    double best_us = 1e300;
    for (int rep = 0; rep < 3; rep++) {
        coll_exec_begin(comm, "plan probe");
        int64_t t0 = coll_now_ns();
        COLL_CHECK(coll_algo_run(ring, COLL_FUNC_ALLGATHER, comm, &g));
        best_us = fmin(best_us, (double)(coll_now_ns() - t0) / 1e3);
    }
    /* In the allgather every rank sends and receives (n-1) x per bytes, all at
     * once: with a core per rank that is one core's speed, with more ranks than
     * cores it is the host's.  The ring follows the hosts, so over several of
     * them each host's link carries (n-1) x per bytes each way. */
    double us = fmax(best_us - (n - 1) * alpha, 1.0);
    double core_gbs, host_gbs;
    plan_speeds(2.0 * (n - 1) * (double)per / (us * 1e3), local, cores, &core_gbs, &host_gbs);
    double net_gbs = (double)(n - 1) * (double)per / (us * 1e3);
    /* Several hosts: the copy speeds within one, from the allgather half of a
     * ring allreduce over each host's ranks (all hosts at once). */
    double local_core_gbs = 1e30, local_host_gbs = 1e30, local_alpha = 0, net_alpha = 0;
    if (comm->hosts.n > 1 && local > 1)
        COLL_CHECK(plan_local_probe(comm, buf, (size_t)n * per, alpha, &local_core_gbs,
                                    &local_host_gbs));
    if (comm->hosts.n > 1)
        COLL_CHECK(plan_class_alphas(comm, &local_alpha, &net_alpha));
    /* Agree: the largest alpha and the smallest bandwidths of all ranks.  A rank
     * that entered a probe late times only its tail, so the slowest rank's figure
     * is the collective's.  The allreduce gives every rank the same bytes, so
     * every rank computes the same figures. */
    double use = plan_in_use(local, cores);
    double mine[PF_COUNT] = {
        [PF_LAT] = alpha, [PF_NEG_CORE] = -core_gbs, [PF_NEG_HOST] = -host_gbs / use,
        [PF_R_MSG] = r_msg, [PF_R_WAKE] = r_wake, [PF_NO_LEND] = no_lend,
        [PF_NEG_NET] = -net_gbs, [PF_NEG_LOCAL_CORE] = -local_core_gbs,
        [PF_NEG_LOCAL_HOST] = local_host_gbs < 1e29 ? -local_host_gbs / use : -local_host_gbs,
        [PF_LOCAL_ALPHA] = local_alpha, [PF_NET_ALPHA] = net_alpha};
    coll_exec_begin(comm, "plan probe");
    COLL_CHECK(coll_algo_agree_max(comm, mine, fig, PF_COUNT));
    /* The round's latency alone, which a communicator of another shape (fewer
     * ranks per core) turns back into its own alpha. */
    struct coll_model split = {.alpha_us = fig[PF_LAT], .local_ranks = local, .cores = cores};
    coll_model_split_alpha(&split, fig[PF_R_MSG], fig[PF_R_WAKE]);
    fig[PF_LAT] = split.lat_us;
    return collSuccess;
}

/* comm's model from the machine's figures, for its own shape (ranks per host,
 * cores), with COLL_LINK_* in place of the figures they set (lat, bw > 0). */
static void plan_model_from(struct coll_comm *comm, const double *fig, int64_t lat, int64_t bw)
{
    struct coll_model *m = &comm->model;
    double use = plan_in_use(m->local_ranks, m->cores);
    double r_msg = fig[PF_R_MSG], r_wake = fig[PF_R_WAKE];
    if (lat <= 0) {
        bool over = m->local_ranks > m->cores;
        double wake_share = over ? r_wake * m->local_ranks / m->cores : 0.0;
        m->alpha_us = fig[PF_LAT] * (1.0 + 2 * r_msg + wake_share);
    }
    if (bw <= 0) {
        m->core_gbs = -fig[PF_NEG_CORE];
        m->host_gbs = -fig[PF_NEG_HOST] * use;
        m->local_core_gbs = m->core_gbs;
        m->local_host_gbs = m->host_gbs;
        if (comm->hosts.n > 1) {
            m->net_gbs = -fig[PF_NEG_NET];
            if (-fig[PF_NEG_LOCAL_CORE] < 1e29)
                m->local_core_gbs = -fig[PF_NEG_LOCAL_CORE];
            if (-fig[PF_NEG_LOCAL_HOST] < 1e29)
                m->local_host_gbs = -fig[PF_NEG_LOCAL_HOST] * use;
        }
    }
    coll_model_split_alpha(m, r_msg, r_wake);
    m->lend = fig[PF_NO_LEND] == 0;
    if (comm->hosts.n > 1 && lat <= 0) {
        /* A host of one rank has no ring within: the flat figure stands in. */
        m->local_alpha_us = fig[PF_LOCAL_ALPHA] > 0 ? fig[PF_LOCAL_ALPHA] : m->alpha_us;
        m->net_alpha_us = fig[PF_NET_ALPHA] > 0 ? fig[PF_NET_ALPHA] : m->alpha_us;
    } else if (comm->hosts.n > 1) {
        m->local_alpha_us = m->net_alpha_us = m->alpha_us;
    }
}

/* The key comm's figures are kept under (machine.h): the transports this rank
 * uses, and whether the ranks span hosts. */
static void plan_key(struct coll_comm *comm, char *key, size_t len)
{
    size_t at = (size_t)snprintf(key, len, "plan:");
    const struct coll_transport *seen[8];
    int nseen = 0;
    for (int p = 0; p < comm->nranks; p++) {
        const struct coll_transport *tp = p == comm->rank ? NULL : coll_transport_for_peer(comm, p);
        bool known = tp == NULL;
        for (int k = 0; k < nseen && !known; k++)
            known = seen[k] == tp;
        if (known || nseen == 8)
            continue;
        seen[nseen++] = tp;
        at += (size_t)snprintf(key + at, at < len ? len - at : 0, "%s%s", nseen > 1 ? "+" : "",
                               tp->name);
    }
    if (comm->hosts.n > 1 && at < len)
        snprintf(key + at, len - at, ":hosts");
}

collResult_t coll_plan_init(struct coll_comm *comm)
{
    struct coll_model *m = &comm->model;
    int n = comm->nranks;
    /* The same on every rank: the most crowded host, the fewest cores. */
    int cores = comm->hosts.min_cores, local = comm->hosts.max_local;
    int64_t lat = coll_param_int(COLL_PARAM_LINK_LATENCY_NS);
    int64_t bw = coll_param_int(COLL_PARAM_LINK_BW_MBS);
    m->local_ranks = local;
    m->cores = cores > 0 ? cores : 1;
    m->alpha_us = lat > 0 ? (double)lat / 1e3 : 10.0;
    m->core_gbs = bw > 0 ? (double)bw / 1e3 : 1.0;
    m->host_gbs = m->core_gbs * (local < cores ? local : cores);
    m->reduce_gbs = 10.0;
    m->local_core_gbs = m->core_gbs;
    m->local_host_gbs = m->host_gbs;
    m->net_gbs = comm->hosts.n > 1 ? m->core_gbs : 0.0;
    if (n == 1 || (lat > 0 && bw > 0)) {
        /* Without the agreement below, every rank must see the same ratios: the
         * largest any transport has. */
        double r_msg = 0, r_wake = 0;
        coll_transport_max_ratios(&r_msg, &r_wake);
        m->lend = false;
        coll_model_split_alpha(m, r_msg, r_wake);
        return collSuccess;
    }

    /* The process's figures when every rank has them (a split, a subgroup, a
     * later communicator), else measured now and kept. */
    char key[COLL_MACHINE_KEY_MAX];
    plan_key(comm, key, sizeof(key));
    double fig[PF_COUNT];
    bool have;
    coll_exec_begin(comm, "plan agreement");
    COLL_CHECK(coll_machine_agree(comm, key, fig, PF_COUNT, &have));
    if (!have) {
        COLL_CHECK(plan_measure(comm, fig));
        coll_machine_put(key, fig, PF_COUNT);
    }
    plan_model_from(comm, fig, lat, bw);
    COLL_INFO(COLL_SUBSYS_ALGO, "machine model: alpha %.1f us (round %.1f, message %.1f, "
              "wake-up %.1f), core %.2f GB/s, host %.2f GB/s "
              "(%d local ranks, %d cores), reduce %.1f GB/s; %d hosts, link %.3f GB/s, "
              "within a host core %.2f, host %.2f GB/s; alpha within a host %.1f us, across "
              "%.1f us%s", m->alpha_us, m->lat_us,
              m->msg_us, m->wake_us, m->core_gbs,
              m->host_gbs, local, cores, m->reduce_gbs, comm->hosts.n, m->net_gbs,
              m->local_core_gbs, m->local_host_gbs, m->local_alpha_us, m->net_alpha_us,
              lat > 0 || bw > 0 ? " (partly from COLL_LINK_*)"
                                : have ? " (the process's, measured before)" : " (measured)");
    return collSuccess;
}
