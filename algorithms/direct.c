/* The direct allreduce: when every rank's sendbuff and recvbuff lie in
 * collMemAlloc memory (lib/engine/mem.c) and every rank reaches every other over shared
 * memory, each rank reads the peers' buffers where they lie instead of passing
 * them through the slot rings.
 *
 *   1. allgather each rank's (pid, fd, id, offset) for sendbuff and recvbuff; a
 *      rank whose buffers are not collMemAlloc memory says so and all ranks fall
 *      back to the algorithm the planner picks among the others;
 *   2. each rank maps the peers' buffers (cached per comm) and the ranks agree
 *      that all of them could (an allreduce of a flag);
 *   3. rank r reduces segment r of the n inputs, reading them where the peers
 *      put them, into its recvbuff: its own input first, then r+1, ..., r-1;
 *   4. barrier; rank r copies segment p from rank p's recvbuff, for every p;
 *   5. barrier: nobody returns (and reuses its buffers) while others still read.
 *
 * Each segment is computed once, so all ranks hold the same bytes.  Per rank:
 * S/n x n read and S/n written to reduce, (n-1)/n S read and written to copy,
 * against the slot ring's copies into and out of slots in both halves.  The
 * four small steps (allgather, flag, two barriers) run recursive doubling
 * through the table (they belong to this call, not to the planner), so the
 * direct path is for large buffers: it can run from COLL_SHM_DIRECT_BYTES on,
 * and the planner takes it where it predicts it fastest; a COLL_SHM_DIRECT_BYTES
 * set on any rank forces it from that size.  When step 1 or 2 finds that some
 * rank cannot take the direct path, every rank skips the next DIRECT_RETRY_AFTER
 * calls that could take it (a count all ranks keep alike): ordinary buffers do
 * not pay the allgather on every call. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "algo.h"
#include "exec.h"
#include "flight.h"
#include "mem.h"
#include "pattern.h"
#include "reduce.h"

/* Peers' buffers mapped per comm: at least 64, and room for every peer's two
 * buffers of one call, so that mapping the last peer's never evicts (unmaps) a
 * buffer the same call is about to read (with 64 and more than 33 ranks it did). */
#define DIRECT_MAPS_MIN 64
#define DIRECT_CHUNK (64 * 1024)    /* bytes reduced from all inputs at a time */
#define DIRECT_RETRY_AFTER 63       /* eligible calls skipped after a fallback */

/* A peer's collMemAlloc region mapped here. */
struct direct_map {
    int32_t pid, fd;
    uint64_t id;
    char *base;
    size_t size;
    uint64_t used;               /* last use, for eviction */
};

/* The communicator's state of the direct path. */
struct coll_direct {
    bool on;                     /* every rank reaches every other over shm */
    bool forced;                 /* COLL_SHM_DIRECT_BYTES was set on some rank */
    size_t min_bytes;            /* from this size (agreed COLL_SHM_DIRECT_BYTES) */
    struct direct_map *maps;     /* cap of them, nmaps used */
    int nmaps, cap;
    uint64_t use;                /* clock for evicting the least recently used */
    int skip;                    /* eligible calls left to skip */
};

/* One rank's buffers as the others need them. */
struct direct_desc {
    int32_t ok;                  /* both buffers are collMemAlloc memory */
    int32_t pid;
    int32_t fd[2];               /* sendbuff, recvbuff */
    uint64_t id[2];
    uint64_t off[2];
};

static collResult_t direct_comm_init(struct coll_comm *comm)
{
    if (comm->nranks == 1)
        return collSuccess;
    struct coll_direct *d;
    COLL_CHECK(coll_calloc(&d, 1));
    comm->direct = d;
    d->cap = 2 * comm->nranks > DIRECT_MAPS_MIN ? 2 * comm->nranks : DIRECT_MAPS_MIN;
    COLL_CHECK(coll_calloc(&d->maps, (size_t)d->cap));
    /* Every peer over shared memory, and the threshold: agreed (the largest), since
     * each rank sees only its own transports and environment and every rank must
     * take the same path for the same call. */
    int64_t min = coll_param_int(COLL_PARAM_SHM_DIRECT_BYTES);
    double mine[3] = {min < 0 ? 1 : 0, min < 0 ? 0 : (double)min,
                      coll_param_is_set(COLL_PARAM_SHM_DIRECT_BYTES) ? 1 : 0}, all[3];
    for (int p = 0; p < comm->nranks; p++) {
        const struct coll_transport *tp =
            p == comm->rank ? NULL : coll_transport_for_peer(comm, p);
        if (p != comm->rank && (tp == NULL || !(tp->caps & COLL_TP_CAP_SHARED_MEM)))
            mine[0] = 1;
    }
    coll_exec_begin(comm, "init (shared buffers)");
    COLL_CHECK(coll_algo_agree_max(comm, mine, all, 3));
    d->on = all[0] == 0;
    d->min_bytes = (size_t)all[1];
    d->forced = all[2] != 0;
    return collSuccess;
}

static void direct_comm_fini(struct coll_comm *comm)
{
    struct coll_direct *d = comm->direct;
    if (d == NULL)
        return;
    for (int i = 0; i < d->nmaps; i++)
        munmap(d->maps[i].base, d->maps[i].size);
    free(d->maps);
    free(d);
    comm->direct = NULL;
}

/* The peer's region (pid, fd, id) mapped here, at least `need` bytes; NULL when it
 * cannot be (another pid namespace, no permission, or the fd is no longer it). */
static char *direct_map_peer(struct coll_direct *d, int32_t pid, int32_t fd, uint64_t id,
                             size_t need)
{
    struct direct_map *maps = d->maps;
    for (int i = 0; i < d->nmaps; i++)
        if (maps[i].pid == pid && maps[i].fd == fd && maps[i].id == id && maps[i].size >= need) {
            maps[i].used = ++d->use;
            return maps[i].base;
        }
    char name[64];
    snprintf(name, sizeof(name), COLL_MEM_NAME "%llu ", (unsigned long long)id);
    size_t size = 0;
    char *base = coll_mem_map_peer(pid, fd, name, need, &size);
    if (base == NULL)
        return NULL;
    int slot = d->nmaps;
    if (slot == d->cap) { /* full: the least recently used goes, from an earlier call */
        slot = 0;
        for (int i = 1; i < d->cap; i++)
            if (maps[i].used < maps[slot].used)
                slot = i;
        munmap(maps[slot].base, maps[slot].size);
    } else {
        d->nmaps++;
    }
    maps[slot] = (struct direct_map){.pid = pid, .fd = fd, .id = id, .base = base,
                                     .size = size, .used = ++d->use};
    return base;
}

static collResult_t direct_barrier(struct coll_comm *comm)
{
    double x = 0, y;
    return coll_algo_agree_max(comm, &x, &y, 1);
}

/* Some rank cannot take the direct path: the call runs the algorithm the planner
 * picks among the others, and says so in the flight record. */
/* The peer's sendbuff and recvbuff as this rank sees them. */
struct direct_bufs {
    const char *in, *out;
};

/* Steps 1 and 2: every rank's buffers mapped into buf[], or *ok_p false when some
 * rank cannot take the direct path (then every rank backs off alike). */
static collResult_t direct_map_all(struct coll_comm *comm, const struct coll_args *a,
                                   size_t bytes, struct direct_bufs *buf, bool *ok_p)
{
    struct coll_direct *d = comm->direct;
    int n = comm->nranks, r = comm->rank;
    *ok_p = false;
    struct direct_desc mine = {.pid = (int32_t)getpid()};
    int fd[2];
    size_t off[2];
    mine.ok = coll_mem_lookup(a->sendbuf, bytes, &fd[0], &mine.id[0], &off[0]) &&
              coll_mem_lookup(a->recvbuf, bytes, &fd[1], &mine.id[1], &off[1]);
    if (mine.ok)
        for (int i = 0; i < 2; i++) {
            mine.fd[i] = fd[i];
            mine.off[i] = off[i];
        }
    /* Not the comm's scratch: recursive doubling uses that for itself. */
    struct direct_desc *all;
    COLL_CHECK(coll_calloc(&all, (size_t)n));
    collResult_t res = coll_algo_agree_gather(comm, &mine, all, sizeof(mine));
    bool all_ok = res == collSuccess;
    for (int p = 0; p < n && all_ok; p++)
        all_ok = all[p].ok != 0;
    if (res == collSuccess && all_ok) {
        double failed = 0, any_failed;
        for (int p = 0; p < n; p++) {
            if (p == r) {
                buf[p] = (struct direct_bufs){a->sendbuf, a->recvbuf};
                continue;
            }
            char *b0 = direct_map_peer(d, all[p].pid, all[p].fd[0], all[p].id[0],
                                       all[p].off[0] + bytes);
            char *b1 = direct_map_peer(d, all[p].pid, all[p].fd[1], all[p].id[1],
                                       all[p].off[1] + bytes);
            if (b0 == NULL || b1 == NULL)
                failed = 1;
            else
                buf[p] = (struct direct_bufs){b0 + all[p].off[0], b1 + all[p].off[1]};
        }
        res = coll_algo_agree_max(comm, &failed, &any_failed, 1);
        *ok_p = res == collSuccess && any_failed == 0;
    }
    if (res == collSuccess && !*ok_p)
        d->skip = DIRECT_RETRY_AFTER; /* every rank saw the same table and flag */
    free(all);
    return res;
}

/* The calls after a fallback decline without asking (DIRECT_RETRY_AFTER). */
static bool direct_skips(struct coll_comm *comm, bool count)
{
    struct coll_direct *d = comm->direct;
    if (d->skip == 0)
        return false;
    if (count)
        d->skip--;
    return true;
}

static collResult_t direct_allreduce(struct coll_comm *comm, const struct coll_args *a)
{
    int n = comm->nranks, r = comm->rank;
    size_t esize = coll_dtype_size(a->dtype), bytes = a->count * esize;
    struct direct_bufs *buf;
    COLL_CHECK(coll_calloc(&buf, (size_t)n));
    bool ok;
    collResult_t res = direct_map_all(comm, a, bytes, buf, &ok);
    if (res != collSuccess || !ok) {
        free(buf);
        return res != collSuccess ? res : COLL_ALGO_DECLINED;
    }
    coll_flight_shared(comm); /* every rank's buffers, where they lie */

    /* 3. Segment r from every rank's input, own first, chunk by chunk. */
    size_t seg_off, seg_len;
    coll_ring_chunk(a->count, n, r, &seg_off, &seg_len);
    size_t chunk = DIRECT_CHUNK / esize > 0 ? DIRECT_CHUNK / esize : 1;
    char *dst = (char *)a->recvbuf;
    for (size_t c0 = 0; c0 < seg_len; c0 += chunk) {
        size_t len = seg_len - c0 < chunk ? seg_len - c0 : chunk;
        size_t at = (seg_off + c0) * esize;
        coll_reduce(a->op, a->dtype, dst + at, buf[r].in + at, buf[(r + 1) % n].in + at, len);
        for (int k = 2; k < n; k++)
            coll_reduce(a->op, a->dtype, dst + at, dst + at, buf[(r + k) % n].in + at, len);
        if (a->op == collAvg)
            coll_reduce_div(a->dtype, dst + at, dst + at, len, n);
    }
    /* collCommGetBytes: what this rank reads from the peers' buffers counts as
     * received once read, what they read from its buffers as sent once the
     * barrier after their reads has passed.  Step 3 read segment r of the n-1
     * peers' inputs; the peers read their segments of this rank's input. */
    coll_comm_count_bytes(comm, 0, (uint64_t)(n - 1) * seg_len * esize);
    /* 4. Everyone's segment is final: copy the others'. */
    if ((res = direct_barrier(comm)) != collSuccess)
        goto out;
    coll_comm_count_bytes(comm, (uint64_t)(a->count - seg_len) * esize, 0);
    for (int p = 0; p < n; p++) {
        size_t po, pl;
        coll_ring_chunk(a->count, n, p, &po, &pl);
        if (p != r && pl > 0)
            memcpy(dst + po * esize, buf[p].out + po * esize, pl * esize);
    }
    /* Step 4 read the peers' final segments; they read segment r of this rank's
     * output, each of the n-1. */
    coll_comm_count_bytes(comm, 0, (uint64_t)(a->count - seg_len) * esize);
    /* 5. Nobody reuses its buffers while another still reads them. */
    res = direct_barrier(comm);
    if (res == collSuccess)
        coll_comm_count_bytes(comm, (uint64_t)(n - 1) * seg_len * esize, 0);
out:
    free(buf);
    return res;
}

/* From the agreed threshold, on a communicator whose ranks all share memory.
 * Whether the buffers are collMemAlloc memory only the call's agreement can
 * tell (each rank knows its own): run() falls back when they are not. */
static bool direct_can_run(const struct coll_comm *comm, enum coll_func f,
                           const struct coll_args *a)
{
    const struct coll_direct *d = comm->direct;
    size_t bytes = a->count * coll_dtype_size(a->dtype);
    return f == COLL_FUNC_ALLREDUCE && d != NULL && d->on && bytes > 0 && bytes >= d->min_bytes;
}

static bool direct_forced(const struct coll_comm *comm, enum coll_func f,
                          const struct coll_args *a)
{
    return comm->direct->forced;
}

/* Four recursive-doubling steps, then the payload: rank r reads (n-1)/n S of
 * the peers' inputs and (n-1)/n S of their outputs where they lie, which the
 * model counts as bytes received (no send side, no slots). */
static double direct_predict(const struct coll_comm *comm, enum coll_func f,
                             const struct coll_args *a, const struct coll_model *m)
{
    int n = comm->nranks;
    double S = (double)(a->count * coll_dtype_size(a->dtype));
    double frac = (double)(n - 1) / n;
    double small = 4 * coll_rd_rounds(n);
    return coll_model_cost(m, n, &(struct coll_cost){
        .rounds = small, .msgs = small * n, .busiest_msgs = 2 * small,
        .rank_bytes = 2 * frac * S, .total_bytes = 2.0 * (n - 1) * S, .reduce_bytes = frac * S});
}

const struct coll_algo coll_algo_direct = {
    .name = "direct",
    .can_run = direct_can_run,
    .run = {[COLL_FUNC_ALLREDUCE] = direct_allreduce},
    .predict = direct_predict,
    .forced = direct_forced,
    .comm_init = direct_comm_init,
    .comm_fini = direct_comm_fini,
    .skips = direct_skips,
    .exclusive = true,
};
