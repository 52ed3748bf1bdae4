/* ll ("low latency"): small allreduce, allgather, reduce-scatter, broadcast and
 * reduce (and so barrier: a one-byte allreduce) among ranks that all share one
 * host, through memory every rank maps, where the data and a sequence number
 * travel in the same cache line.
 *
 * Each rank owns a segment (a memfd the others map read-only through
 * /proc/PID/fd) of two slots, used by calls of odd and even number.  A slot is
 * LL_LINES lines of 64 bytes: 56 bytes of data, then the 8-byte number of the
 * call that wrote them.  A call:
 *   1. writes its input into its slot, line by line, each line's number stored
 *      last (release); a rank with no input (a broadcast's non-root) writes
 *      the first line's number alone: it has arrived;
 *   2. reads the slots it needs in rank order 0, 1, ..., n-1, waiting on each
 *      line until it carries this call's number (acquire), and copies the data
 *      out: every rank's (allreduce, allgather, reduce-scatter, the reduce's
 *      root), the root's (a broadcast's other ranks), or none; of every other
 *      rank it waits at least for the first line;
 *   3. reduces the n inputs in rank order ((in0 op in1) op in2 ...), so every
 *      rank computes the same bytes from the same operands.
 * One write and one read per line, no head or tail to update, no message to
 * match: the cost is the lines themselves.
 *
 *   call k:   rank 0 slot[k%2] |d d d d d d d k|d d ... k|     rank 1 slot[k%2] |...k|
 *             every rank reads slot[k%2] of 0, 1, ..., n-1 once each line shows k
 *
 * Two slots are enough: a rank that writes call k+2 into slot k%2 has finished
 * call k+1, so it saw every rank arrive at k+1, so every rank had finished
 * reading call k.  Calls are numbered alike on every rank because every rank
 * chooses ll for the same calls (the planner's model is agreed).
 *
 * A wait polls, and yields the core now and then (every few polls where ranks
 * outnumber cores, rarely where each has its own); it ends at the
 * call's deadline, on an abort, or when the communicator is poisoned (a peer's
 * failure notice), with the error the engine would give.  At init the ranks map
 * each other's segments, agree that all could, and time the protocol for the
 * planner: allreduces of 8 B and of LL_MAX_BYTES, the agreed largest medians,
 * between which the prediction goes in proportion to the bytes. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "algo.h"
#include "engine.h"
#include "exec.h"
#include "flight.h"
#include "machine.h"
#include "mem.h"
#include "prog.h"
#include "reduce.h"

#define LL_NAME "libcollective-ll" /* its memfd, as /proc shows it */
#define LL_LINE 64
#define LL_DATA 56                          /* data bytes per line */
#define LL_MAX_BYTES 8192                   /* the most one rank writes in a call */
#define LL_LINES ((LL_MAX_BYTES + LL_DATA - 1) / LL_DATA)
#define LL_SLOT (LL_LINES * LL_LINE)
#define LL_MAX_RANKS 64
#define LL_PROBES 16                        /* timed allreduces per size at init */

struct ll_line {
    unsigned char data[LL_DATA];
    _Atomic uint64_t seq;
};
_Static_assert(sizeof(struct ll_line) == LL_LINE, "a line is one cache line");

struct coll_ll {
    bool on;
    int fd;
    char *own;                  /* my segment, two slots */
    const char **peer;          /* every rank's segment mapped here (mine too) */
    uint64_t seq;               /* calls so far */
    double alpha_us;            /* an 8 B allreduce, measured at init */
    double full_us;             /* an allreduce of LL_MAX_BYTES, measured at init */
    unsigned char *scratch;     /* n x LL_MAX_BYTES: the inputs, contiguous */
    /* The engine's schedule of a call's reads, made once (ll_comm_init): a
     * call sets only what changes, so that it costs no clearing of them. */
    struct coll_lane lane;
    struct coll_sched sched;
};

/* One rank's segment as the others find it. */
struct ll_desc {
    int32_t ok, pid, fd, pad;
};

/* Whose input a rank reads in ll_exchange: every rank's, none (it only waits
 * for every rank to arrive), or one rank's (a rank number). */
#define LL_FROM_ALL (-1)
#define LL_FROM_NONE (-2)

/* The reads of one ll_exchange, as the engine's watch lane (engine.h), rank
 * by rank in rank order: of a rank whose input it reads, its lines first..last
 * in pieces of up to LL_PIECE_LINES, each there once its last line carries the
 * call's number (a rank writes its lines in order, each with release, so the
 * last one there says the earlier ones are) and then copied out, while the
 * rank may still be writing the next; of any other rank one piece, its first
 * line (that it arrived).  This rank's own pieces are there at once.  The
 * engine polls ready() under its deadline, abort and the failure notices
 * (exec.c). */
#define LL_PIECE_LINES 16

struct ll_read {
    struct coll_comm *comm;
    uint64_t seq;
    size_t slot, from, take, first, last;
    size_t per;                 /* pieces of a rank whose input it reads */
    int src;
    /* The next piece (the one the engine polls): its number, rank and lines. */
    size_t at, lo, hi;
    int q;
    const struct ll_line *lines;
};

static bool ll_reads_data(const struct ll_read *x, int q)
{
    return x->take > 0 && (x->src == LL_FROM_ALL || x->src == q);
}

/* Piece i's rank and, of a rank read, its lines [*lo_p, *hi_p]. */
static int ll_piece(const struct ll_read *x, size_t i, size_t *lo_p, size_t *hi_p)
{
    int q;
    size_t j = 0;
    if (x->take == 0) {
        q = (int)i;
    } else if (x->src == LL_FROM_ALL) {
        q = x->per == 1 ? (int)i : (int)(i / x->per); /* one piece a rank: no division */
        j = x->per == 1 ? 0 : i % x->per;
    } else if (i < (size_t)x->src) {
        q = (int)i;
    } else if (i < (size_t)x->src + x->per) {
        q = x->src;
        j = i - (size_t)x->src;
    } else {
        q = (int)(i - x->per + 1);
    }
    *lo_p = ll_reads_data(x, q) ? x->first + j * LL_PIECE_LINES : 0;
    *hi_p = ll_reads_data(x, q) && *lo_p + LL_PIECE_LINES - 1 < x->last
                ? *lo_p + LL_PIECE_LINES - 1
                : ll_reads_data(x, q) ? x->last : 0;
    return q;
}

/* Rank q's lines in the call's slot. */
static const struct ll_line *ll_lines(const struct ll_read *x, int q)
{
    return (const struct ll_line *)(const void *)(x->comm->ll->peer[q] + x->slot);
}

/* Points x's cursor at piece i. */
static void ll_read_at(struct ll_read *x, size_t i)
{
    x->at = i;
    if (x->per == 1) { /* a piece a rank (up to LL_PIECE_LINES lines): piece i is rank i */
        bool data = ll_reads_data(x, (int)i);
        x->q = (int)i;
        x->lo = data ? x->first : 0;
        x->hi = data ? x->last : 0;
    } else {
        x->q = ll_piece(x, i, &x->lo, &x->hi);
    }
    x->lines = ll_lines(x, x->q);
}

/* The engine asks for the pieces in order, and for each until it is there:
 * the cursor answers without working out the piece again. */
static bool ll_read_ready(void *ctx, const struct coll_lane *l, size_t i)
{
    struct ll_read *x = ctx;
    (void)l;
    if (i != x->at)
        ll_read_at(x, i);
    return x->q == x->comm->rank ||
           atomic_load_explicit(&x->lines[x->hi].seq, memory_order_acquire) == x->seq;
}

static collResult_t ll_read_done(void *ctx, struct coll_lane *l, size_t i, void *p)
{
    struct ll_read *x = ctx;
    (void)p;
    if (i != x->at)
        ll_read_at(x, i);
    if (ll_reads_data(x, x->q)) {
        size_t from = x->from, take = x->take;
        unsigned char *dst = x->comm->ll->scratch;
        if (x->src == LL_FROM_ALL)
            dst += (size_t)x->q * take;
        for (size_t k = x->lo; k <= x->hi; k++) {
            size_t a = k * LL_DATA > from ? k * LL_DATA : from;
            size_t b = (k + 1) * LL_DATA < from + take ? (k + 1) * LL_DATA : from + take;
            memcpy(dst + (a - from), x->lines[k].data + (a - k * LL_DATA), b - a);
        }
    }
    if (i + 1 < l->total) {
        ll_read_at(x, i + 1);
        l->watch_peer = x->q; /* whom a failed wait names */
    }
    return collSuccess;
}

static const struct coll_sched_ops ll_read_ops = {.ready = ll_read_ready, .done = ll_read_done};

/* Step 3: out = in_0 op in_1 op ... op in_{n-1}, each `count` elements in scratch. */
static void ll_fold(struct coll_comm *comm, collRedOp_t op, collDataType_t t, void *out,
                    size_t count)
{
    struct coll_ll *ll = comm->ll;
    size_t bytes = count * coll_dtype_size(t);
    if (bytes == 0)
        return;
    memcpy(out, ll->scratch, bytes);
    for (int q = 1; q < comm->nranks; q++)
        coll_reduce(op, t, out, out, ll->scratch + (size_t)q * bytes, count);
    if (op == collAvg)
        coll_reduce_div(t, out, out, count, comm->nranks);
}

/* What a call does once its reads are in (ll_done). */
enum ll_after { LL_AFTER_NONE, LL_AFTER_FOLD, LL_AFTER_GATHERED, LL_AFTER_OWN };

/* A call's program (prog.h): its reads, what they count, and the work after. */
struct ll_call {
    struct ll_read x;
    uint64_t sent, recvd;
    const struct coll_args *a;
    enum ll_after after;
    size_t copy;                /* LL_AFTER_GATHERED / _OWN: bytes to copy out */
};

/* Step 3 (ll_fold) or the copy out, once every read is in. */
static collResult_t ll_done(struct coll_frame *fr)
{
    struct ll_call *c = fr->state;
    struct coll_comm *comm = fr->prog.comm;
    const struct coll_args *a = c->a;
    coll_comm_count_bytes(comm, c->sent, c->recvd);
    switch (c->after) {
    case LL_AFTER_FOLD:
        ll_fold(comm, a->op, a->dtype, a->recvbuf, a->count);
        break;
    case LL_AFTER_GATHERED:
        if (c->copy > 0)
            memcpy(a->recvbuf, comm->ll->scratch, c->copy);
        break;
    case LL_AFTER_OWN:
        if (c->copy > 0 && a->recvbuf != a->sendbuf)
            memcpy(a->recvbuf, a->sendbuf, c->copy);
        break;
    case LL_AFTER_NONE:
        break;
    }
    return collSuccess;
}

/* Steps 1 and 2 as the call's stage: writes `bytes` of in (no data: the first
 * line alone says the rank arrived), then copies `take` bytes from offset
 * `from` of the input of the ranks `src` names into scratch (rank q's at q x
 * take; one rank's at 0); `after`, once they are in.  Of every other rank it
 * waits for the first line: every rank arrives at every call, which is what
 * lets two slots serve whichever ranks read.  Counts for collCommGetBytes, as
 * the direct allreduce does, what it read from the peers' slots as received
 * and `sent`, what the peers read from this rank's, as sent. */
static collResult_t ll_exchange(struct coll_frame *fr, const void *in, size_t bytes, int src,
                                size_t from, size_t take, uint64_t sent, enum ll_after after,
                                size_t copy)
{
    struct coll_comm *comm = fr->prog.comm;
    struct coll_ll *ll = comm->ll;
    struct ll_call *c; /* every field set below */
    COLL_CHECK(coll_frame_take(fr, sizeof(*c), (void **)&c));
    uint64_t seq = ++ll->seq;
    size_t slot = (size_t)(seq & 1) * LL_SLOT;
    coll_flight_shared(comm); /* every peer's segment, not a connection */
    struct ll_line *mine = (struct ll_line *)(void *)(ll->own + slot);
    size_t lines = (bytes + LL_DATA - 1) / LL_DATA;
    for (size_t i = 0; i < lines; i++) {
        size_t off = i * LL_DATA, len = bytes - off < LL_DATA ? bytes - off : LL_DATA;
        memcpy(mine[i].data, (const char *)in + off, len);
        atomic_store_explicit(&mine[i].seq, seq, memory_order_release);
    }
    if (lines == 0)
        atomic_store_explicit(&mine[0].seq, seq, memory_order_release);
    /* Field by field: a compound literal through the pointer costs a rep stos. */
    struct ll_read *x = &c->x;
    x->comm = comm;
    x->seq = seq;
    x->slot = slot;
    x->from = from;
    x->take = take;
    x->first = from / LL_DATA;
    x->src = src;
    x->last = take ? (from + take - 1) / LL_DATA : x->first;
    x->per = (x->last - x->first + LL_PIECE_LINES) / LL_PIECE_LINES;
    size_t pieces = 0;
    c->recvd = 0;
    for (int q = 0; q < comm->nranks; q++) {
        bool data = ll_reads_data(x, q);
        pieces += data ? x->per : 1;
        if (data && q != comm->rank)
            c->recvd += take;
    }
    ll_read_at(x, 0);
    struct coll_lane *lane = &ll->lane;
    lane->done = 0;
    lane->total = pieces;
    lane->watch_peer = comm->rank == 0 ? 1 : 0;
    ll->sched.ctx = x;
    c->sent = sent;
    c->a = &fr->a;
    c->after = after;
    c->copy = copy;
    coll_frame_stage_at(fr, &ll->sched);
    fr->state = c;
    fr->after = ll_done;
    return collSuccess;
}

/* The bytes each other rank reads from this rank's slot when all read `take`
 * of every rank's input. */
static uint64_t ll_others(const struct coll_comm *comm, size_t take)
{
    return (uint64_t)(comm->nranks - 1) * take;
}

static collResult_t ll_allreduce(struct coll_frame *fr, const struct coll_args *a)
{
    struct coll_comm *comm = fr->prog.comm;
    size_t bytes = a->count * coll_dtype_size(a->dtype);
    return ll_exchange(fr, a->sendbuf, bytes, LL_FROM_ALL, 0, bytes, ll_others(comm, bytes),
                       LL_AFTER_FOLD, 0);
}

static collResult_t ll_allgather(struct coll_frame *fr, const struct coll_args *a)
{
    struct coll_comm *comm = fr->prog.comm;
    size_t bytes = a->count * coll_dtype_size(a->dtype);
    return ll_exchange(fr, a->sendbuf, bytes, LL_FROM_ALL, 0, bytes, ll_others(comm, bytes),
                       LL_AFTER_GATHERED, bytes * (size_t)comm->nranks);
}

static collResult_t ll_reduce_scatter(struct coll_frame *fr, const struct coll_args *a)
{
    struct coll_comm *comm = fr->prog.comm;
    size_t block = a->count * coll_dtype_size(a->dtype);
    return ll_exchange(fr, a->sendbuf, block * (size_t)comm->nranks, LL_FROM_ALL,
                       block * (size_t)comm->rank, block, ll_others(comm, block), LL_AFTER_FOLD,
                       0);
}

/* The root writes, the others read its slot; the root waits only for them to
 * arrive. */
static collResult_t ll_broadcast(struct coll_frame *fr, const struct coll_args *a)
{
    struct coll_comm *comm = fr->prog.comm;
    size_t bytes = a->count * coll_dtype_size(a->dtype);
    if (comm->rank == a->root)
        return ll_exchange(fr, a->sendbuf, bytes, LL_FROM_NONE, 0, 0, ll_others(comm, bytes),
                           LL_AFTER_OWN, bytes);
    return ll_exchange(fr, NULL, 0, a->root, 0, bytes, 0, LL_AFTER_GATHERED, bytes);
}

/* Every rank writes; the root reads and folds them all (in rank order, as the
 * allreduce), the others only wait for every rank to arrive. */
static collResult_t ll_reduce(struct coll_frame *fr, const struct coll_args *a)
{
    struct coll_comm *comm = fr->prog.comm;
    size_t bytes = a->count * coll_dtype_size(a->dtype);
    if (comm->rank == a->root)
        return ll_exchange(fr, a->sendbuf, bytes, LL_FROM_ALL, 0, bytes, 0, LL_AFTER_FOLD, 0);
    return ll_exchange(fr, a->sendbuf, bytes, LL_FROM_NONE, 0, 0, bytes, LL_AFTER_NONE, 0);
}

static bool ll_can_run(const struct coll_comm *comm, enum coll_func f, const struct coll_args *a)
{
    const struct coll_ll *ll = comm->ll;
    if (ll == NULL || !ll->on)
        return false;
    size_t bytes = a->count * coll_dtype_size(a->dtype);
    switch (f) {
    case COLL_FUNC_ALLREDUCE:
    case COLL_FUNC_ALLGATHER:
    case COLL_FUNC_BROADCAST:
    case COLL_FUNC_REDUCE:
        return bytes <= LL_MAX_BYTES;
    case COLL_FUNC_REDUCE_SCATTER:
        return bytes <= LL_MAX_BYTES / (size_t)comm->nranks;
    default:
        return false;
    }
}

/* Between the two times measured at init (8 B and LL_MAX_BYTES allreduces), in
 * proportion to the bytes each rank reads: an allgather reads as much as an
 * allreduce of its per-rank count, a reduce-scatter a block from each rank. */
static double ll_predict(const struct coll_comm *comm, enum coll_func f, const struct coll_args *a,
                         const struct coll_model *m)
{
    const struct coll_ll *ll = comm->ll;
    double S = (double)(a->count * coll_dtype_size(a->dtype));
    double slope = (ll->full_us - ll->alpha_us) / LL_MAX_BYTES;
    return ll->alpha_us + (slope > 0 ? slope : 0) * S;
}

static void ll_unmap(struct coll_comm *comm)
{
    struct coll_ll *ll = comm->ll;
    for (int q = 0; ll->peer != NULL && q < comm->nranks; q++)
        if (ll->peer[q] != NULL && ll->peer[q] != ll->own)
            munmap((void *)ll->peer[q], 2 * LL_SLOT);
    if (ll->own != NULL)
        munmap(ll->own, 2 * LL_SLOT);
    if (ll->fd >= 0)
        close(ll->fd);
    free(ll->peer);
    free(ll->scratch);
    ll->peer = NULL;
    ll->own = NULL;
    ll->scratch = NULL;
    ll->fd = -1;
}

static void ll_comm_fini(struct coll_comm *comm)
{
    if (comm->ll == NULL)
        return;
    ll_unmap(comm);
    free(comm->ll);
    comm->ll = NULL;
}

/* Rank q's segment, read-only, through its process's descriptor. */
static const char *ll_map_peer(const struct ll_desc *d)
{
    size_t size = 0;
    return coll_mem_map_peer(d->pid, d->fd, LL_NAME, 2 * LL_SLOT, &size);
}

extern const struct coll_algo coll_algo_ll;

/* The median time of LL_PROBES allreduces of count doubles through ll. */
static collResult_t ll_probe(struct coll_comm *comm, size_t count, double *median_us)
{
    static const double zeros[LL_MAX_BYTES / sizeof(double)];
    double out[LL_MAX_BYTES / sizeof(double)], t[LL_PROBES];
    struct coll_args a = {zeros, out, count, collDouble, collSum, 0};
    for (int i = 0; i < LL_PROBES; i++) {
        int64_t t0 = coll_now_ns();
        COLL_CHECK(coll_algo_run(&coll_algo_ll, COLL_FUNC_ALLREDUCE, comm, &a));
        t[i] = (double)(coll_now_ns() - t0) / 1e3;
    }
    for (int i = 1; i < LL_PROBES; i++) /* insertion sort: a few values */
        for (int k = i; k > 0 && t[k] < t[k - 1]; k--) {
            double s = t[k];
            t[k] = t[k - 1];
            t[k - 1] = s;
        }
    *median_us = t[LL_PROBES / 2];
    return collSuccess;
}

static collResult_t ll_comm_init(struct coll_comm *comm)
{
    int n = comm->nranks;
    if (n == 1 || n > LL_MAX_RANKS)
        return collSuccess;
    struct coll_ll *ll;
    COLL_CHECK(coll_calloc(&ll, 1));
    comm->ll = ll;
    ll->fd = -1;
    /* Every peer over shared memory, as every rank must agree. */
    struct ll_desc me = {.ok = 1, .pid = (int32_t)getpid()};
    for (int p = 0; p < n; p++) {
        const struct coll_transport *tp =
            p == comm->rank ? NULL : coll_transport_for_peer(comm, p);
        if (p != comm->rank && (tp == NULL || !(tp->caps & COLL_TP_CAP_SHARED_MEM)))
            me.ok = 0;
    }
    void *base = NULL;
    const char *step = NULL;
    int numa = comm->peers[comm->rank].info.numa;
    if (me.ok && coll_memfd_map(LL_NAME, 2 * LL_SLOT, numa, &ll->fd, &base, &step) != 0) {
        COLL_INFO(COLL_SUBSYS_SHM, "ll: no segment (%s failed): ll is off", step);
        me.ok = 0;
    }
    ll->own = base;
    me.fd = ll->fd;
    struct ll_desc *all;
    COLL_CHECK(coll_calloc(&all, (size_t)n));
    coll_exec_begin(comm, "init (ll segments)");
    collResult_t res = coll_algo_agree_gather(comm, &me, all, sizeof(me));
    double fail = 0, any_fail = 0;
    if (res == collSuccess && (coll_calloc(&ll->peer, (size_t)n) != collSuccess ||
                               coll_calloc(&ll->scratch, (size_t)n * LL_MAX_BYTES) != collSuccess))
        fail = 1;
    for (int q = 0; res == collSuccess && !fail && q < n; q++) {
        if (!all[q].ok)
            fail = 1;
        else if (q == comm->rank)
            ll->peer[q] = ll->own;
        else if ((ll->peer[q] = ll_map_peer(&all[q])) == NULL)
            fail = 1;
    }
    free(all);
    if (res == collSuccess)
        res = coll_algo_agree_max(comm, &fail, &any_fail, 1);
    if (res != collSuccess || any_fail != 0) {
        ll_unmap(comm);
        return res;
    }
    ll->lane = (struct coll_lane){.watch = true, .comm = comm};
    ll->sched = (struct coll_sched){.comm = comm, .ops = &ll_read_ops, .lanes = &ll->lane,
                                    .nlanes = 1};
    ll->on = true;
    /* The planner's figures: the agreed largest medians of timed allreduces of
     * 8 B and of LL_MAX_BYTES, measured once per process for each number of
     * ranks (machine.h). */
    char key[COLL_MACHINE_KEY_MAX];
    snprintf(key, sizeof(key), "ll:%d", n);
    double mine[2], agreed[2];
    bool have;
    COLL_CHECK(coll_machine_agree(comm, key, agreed, 2, &have));
    if (!have) {
        COLL_CHECK(ll_probe(comm, 1, &mine[0]));
        COLL_CHECK(ll_probe(comm, LL_MAX_BYTES / sizeof(double), &mine[1]));
        COLL_CHECK(coll_algo_agree_max(comm, mine, agreed, 2));
        coll_machine_put(key, agreed, 2);
    }
    ll->alpha_us = agreed[0];
    ll->full_us = agreed[1];
    COLL_INFO(COLL_SUBSYS_ALGO, "ll: %.2f us for 8 B, %.2f us for %d B%s", ll->alpha_us,
              ll->full_us, LL_MAX_BYTES, have ? " (the process's, measured before)" : "");
    return collSuccess;
}

const struct coll_algo coll_algo_ll = {
    .name = "ll",
    .can_run = ll_can_run,
    .build = {[COLL_FUNC_ALLREDUCE] = ll_allreduce, [COLL_FUNC_ALLGATHER] = ll_allgather,
              [COLL_FUNC_REDUCE_SCATTER] = ll_reduce_scatter,
              [COLL_FUNC_BROADCAST] = ll_broadcast, [COLL_FUNC_REDUCE] = ll_reduce},
    .predict = ll_predict,
    .comm_init = ll_comm_init,
    .comm_fini = ll_comm_fini,
    .exclusive = true, /* one sequence of calls over shared slots */
    .quick = true,
};
