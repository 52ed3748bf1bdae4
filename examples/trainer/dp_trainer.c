/*
 * dp_trainer: data-parallel training of a multi-layer perceptron over libcollective.
 *
 *   collrun -n 4 dp_trainer [--mode ddp|ps] [--hidden 256,128] [--steps 300] ...
 *
 * Every rank holds the whole model.  A step takes the next global batch of B
 * examples from an epoch order that depends only on (seed, epoch); rank r of N
 * computes the gradient summed over its slice [r*B/N, (r+1)*B/N) of that batch, so
 * the maths is the same for any N, up to the order of the float additions.
 *
 *   ddp  As PyTorch's DistributedDataParallel: the gradient is cut into buckets of
 *        whole layers, last layer first; as soon as backward has finished a bucket,
 *        its in-place allreduce is issued on a stream and runs on the library's
 *        progress thread while backward goes on with the earlier layers.  Before
 *        the update the stream is synchronised, and every rank applies the same
 *        SGD step to its own copy.
 *
 *        backward:  [layer 3][layer 2][layer 1][layer 0] sync update
 *        stream:            [bucket 3  ]  [bucket 2..0 ]
 *
 *   ps   A parameter server on rank 0: reduce the whole gradient to rank 0, which
 *        updates (it alone keeps momentum) and broadcasts the new parameters.
 *
 * With --tp T and --pp P the model itself is split (docs/parallelism.md): the
 * ranks form a grid of T x P x D, rank = t + T * (p + P * d); each holds tensor
 * block t of pipeline stage p's layers (partition.c), runs its micro-batches in the
 * order of the pipeline schedule (pipeline.c), and the D replicas of each block
 * allreduce their gradients as ddp does.  Groups come from collCommSplit: a tensor
 * group (same d, p), a pipeline group (same d, t) and a data group (same p, t).
 *
 * Loss and held-out accuracy are summed over ranks once per epoch.  See
 * docs/trainer.md for the flags, the output and the determinism notes.
 */
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <collective.h>

#include "checkpoint.h"
#include "data.h"
#include "join.h"
#include "mlp.h"
#include "options.h"
#include "partition.h"
#include "pipeline.h"
#include "rng.h"

struct bucket {
    size_t off, count; /* a contiguous range of grads */
};

/* The rank's place in the T x P x D grid and its three groups.  With T = P = 1 no
 * group is split off: the data group is the world communicator. */
struct grid {
    int T, P, D;
    int t, p, d;
    collComm_t tensor, pipe, data;
};

/* Bytes this rank sent, summed over the steps this run made, by group. */
struct sent {
    uint64_t tensor, pipe, data;
};

struct trainer {
    struct options o;
    collComm_t comm;
    collStream_t stream;
    int rank, nranks;
    struct grid g;
    struct partition pt;
    struct pipe_stage ps;
    struct pipe_hooks hooks; /* what the pipeline calls back (set up once) */
    struct dataset ds;
    struct mlp m;
    int *sizes;
    /* this rank's parameters, gradients and momentum (its block of its stage) */
    float *params, *grads, *mom;
    /* rank 0 of a model-parallel run: the whole model, for checkpoints and dumps */
    float *whole_params, *whole_mom;
    size_t rows;        /* this replica's examples per step */
    long train_correct; /* mlp_loss counts it during training; not reported */
    struct sent sent, sent_formula;
    uint64_t run_steps;
    /* seconds in the steps this run made after its first (which makes the
     * connections), and the pipeline's idle seconds in them */
    double train_time, train_idle;
    /* ddp buckets, in launch order (the last layers first); bucket_of_layer[l] is the
     * bucket that layer l completes (its lowest layer), or -1. */
    struct bucket *buckets;
    int nbuckets;
    int *bucket_of_layer;
    /* the current epoch's order and the gathered rows of this rank's slice */
    uint32_t *perm;
    uint64_t perm_epoch;
    float *xb;
    int *yb;
    size_t steps_per_epoch;
    /* the epoch being measured */
    double epoch_loss, epoch_time, epoch_wait, epoch_idle;
    long epoch_steps;
    /* --elastic: the next step whose update this rank has not applied, and the
     * rank this process had at start (for --fail-at) */
    uint64_t next_step;
    int first_rank;
    int shrinks;
    int grows;
    struct join_listener jl; /* rank 0 of an elastic job: new processes come here */
    bool listen_failed;      /* the last try to listen failed (tried again each second) */
    double listen_tried;
};

/* --elastic: a failed library call inside the training loop returns here. */
static jmp_buf recover_point;
static bool recover_armed;

/* ---- errors ---- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Aborts every communicator of this rank, so that the ranks waiting on any of
 * them fail at once instead of at their deadline. */
static void abort_all(struct trainer *t)
{
    collComm_t c[3] = {t->g.tensor, t->g.pipe, t->g.data};
    for (int i = 0; i < 3; i++)
        if (c[i] != NULL && c[i] != t->comm)
            collCommAbort(c[i]);
    collCommAbort(t->comm);
}

/* A failed library call on comm ends the program: the message, then an abort of
 * the communicators.  Under --elastic a failure on the world communicator (which
 * is then also the data group) returns to the recovery point instead. */
static void check_on(struct trainer *t, collComm_t comm, collResult_t r, const char *what)
{
    if (r == collSuccess)
        return;
    if (recover_armed && comm == t->comm) {
        /* The wall time, for a driver that stamps its kills the same way. */
        struct timespec wall;
        clock_gettime(CLOCK_REALTIME, &wall);
        fprintf(stderr, "dp_trainer: rank %d: %s failed in step %llu at %.3f: %s: %s; "
                "shrinking the communicator\n", t->rank, what,
                (unsigned long long)t->next_step,
                (double)wall.tv_sec + (double)wall.tv_nsec * 1e-9, collGetErrorString(r),
                collGetLastError(t->comm));
        recover_armed = false;
        longjmp(recover_point, 1);
    }
    fprintf(stderr, "dp_trainer: rank %d: %s failed: %s: %s\n", t->rank, what,
            collGetErrorString(r), collGetLastError(comm));
    abort_all(t);
    exit(1);
}

static void check(struct trainer *t, collResult_t r, const char *what)
{
    check_on(t, t->comm, r, what);
}

static void say(const char *fmt, va_list ap)
{
    fprintf(stderr, "dp_trainer: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
}

static void fail(struct trainer *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    say(fmt, ap);
    va_end(ap);
    abort_all(t);
    exit(1);
}

static void *xmalloc(size_t n)
{
    void *p = calloc(n ? n : 1, 1);
    if (p == NULL) {
        fprintf(stderr, "dp_trainer: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

/* Every rank must call these two alike; rank 0 says whether its part worked, so
 * that the others leave with it instead of waiting for a broadcast that never comes. */
static bool all_ok(struct trainer *t, bool ok_on_root)
{
    int ok = ok_on_root;
    check(t, collBroadcast(&ok, &ok, 1, collInt32, 0, t->comm, NULL), "collBroadcast(status)");
    return ok != 0;
}

/* ---- set-up ---- */

static void load_data(struct trainer *t)
{
    char err[512];
    int r = t->o.data ? data_load_csv(t->o.data, &t->ds, err, sizeof(err))
                      : data_synthetic(&t->ds, err, sizeof(err));
    if (r != 0) {
        fprintf(stderr, "dp_trainer: --data: %s\n", err);
        exit(1);
    }
    if ((size_t)t->o.batch > t->ds.ntrain) {
        fprintf(stderr, "dp_trainer: --batch: %ld is more than the %zu training examples\n",
                t->o.batch, t->ds.ntrain);
        exit(2);
    }
}

/* The model's widths and its cut over --tp and --pp: a model that cannot be cut so
 * is refused on every rank before any joins. */
static void plan_model(struct trainer *t)
{
    int nl = t->o.nhidden + 1;
    t->sizes = xmalloc((size_t)(nl + 1) * sizeof(int));
    t->sizes[0] = (int)t->ds.nfeat;
    memcpy(t->sizes + 1, t->o.hidden, (size_t)t->o.nhidden * sizeof(int));
    t->sizes[nl] = t->ds.nclasses;
    char err[512];
    if (part_plan(&t->pt, nl, t->sizes, t->o.tp, t->o.pp, err, sizeof(err)) != 0) {
        fprintf(stderr, "dp_trainer: %s\n", err);
        exit(2);
    }
}

/* Exits 2 on every rank alike (each knows the world's size) with msg. */
static void refuse(struct trainer *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    say(fmt, ap);
    va_end(ap);
    collCommDestroy(t->comm);
    exit(2);
}

/* The rank's coordinates, the grid checks, and the three groups. */
static void setup_grid(struct trainer *t)
{
    struct grid *g = &t->g;
    g->T = t->o.tp;
    g->P = t->o.pp;
    int tp = g->T * g->P;
    if (t->nranks % tp != 0)
        refuse(t, "--tp %d x --pp %d = %d ranks per replica does not divide the %d ranks",
               g->T, g->P, tp, t->nranks);
    g->D = t->nranks / tp;
    g->t = t->rank % g->T;
    g->p = t->rank / g->T % g->P;
    g->d = t->rank / tp;
    if (t->o.batch < g->D)
        refuse(t, "--batch: %ld is fewer examples than the %d %s", t->o.batch, g->D,
               tp == 1 ? "ranks" : "data-parallel replicas");
    if (t->o.batch / g->D < t->o.micro_batches)
        refuse(t, "--micro-batches: %ld is more than the %ld examples of a replica's share of "
               "the batch (--batch %ld over %d replicas)", t->o.micro_batches,
               t->o.batch / g->D, t->o.batch, g->D);
    if (tp == 1) {
        g->data = t->comm;
        return;
    }
    /* colors: the coordinates the members share */
    check(t, collCommSplit(t->comm, g->p + g->P * g->d, g->t, &g->tensor, NULL),
          "collCommSplit(tensor group)");
    check(t, collCommSplit(t->comm, g->t + g->T * g->d, g->p, &g->pipe, NULL),
          "collCommSplit(pipeline group)");
    check(t, collCommSplit(t->comm, g->t + g->T * g->p, g->d, &g->data, NULL),
          "collCommSplit(data group)");
}

/* Layers from the last backwards, closing a bucket once it holds bucket-mb MiB. */
static void plan_buckets(struct trainer *t)
{
    int nl = t->m.nlayers;
    double cap = t->o.bucket_mb * 1024.0 * 1024.0;
    t->buckets = xmalloc((size_t)nl * sizeof(*t->buckets));
    t->bucket_of_layer = xmalloc((size_t)nl * sizeof(int));
    size_t end = t->m.nparams;
    for (int l = nl - 1; l >= 0; l--) {
        t->bucket_of_layer[l] = -1;
        size_t start = t->m.layer[l].w;
        if ((double)(end - start) * sizeof(float) >= cap || l == 0) {
            t->buckets[t->nbuckets] = (struct bucket){start, end - start};
            t->bucket_of_layer[l] = t->nbuckets++;
            end = start;
        }
    }
}

/* mlp's tensor-group sum. */
static void tensor_reduce(float *buf, size_t count, void *ctx)
{
    struct trainer *t = ctx;
    check_on(t, t->g.tensor,
             collAllReduce(buf, buf, count, collFloat, collSum, t->g.tensor, NULL),
             "collAllReduce(tensor group)");
}

static void setup_model(struct trainer *t)
{
    struct grid *g = &t->g;
    struct mlp_layer layer[PART_MAX_LAYERS];
    size_t n;
    int nl = part_layers(&t->pt, g->p, layer, &n);
    /* a replica's share of a batch, a micro-batch of it, and the evaluation chunks */
    size_t B = (size_t)t->o.batch, D = (size_t)g->D, M = (size_t)t->o.micro_batches;
    size_t slice = (B + D - 1) / D;
    if (t->o.elastic)
        slice = B; /* the slices grow as ranks leave */
    size_t maxrows = (slice + M - 1) / M;
    int nslots = pipe_slots(t->o.schedule, g->P, g->p, (int)M);
    if (mlp_init(&t->m, nl, layer, maxrows, nslots) != 0 ||
        pipe_init(&t->ps, g->pipe, g->P, g->p, (int)M, t->o.schedule, &t->m) != 0) {
        fprintf(stderr, "dp_trainer: out of memory for the model\n");
        exit(1);
    }
    t->m.want_dx = g->p > 0;
    t->m.reduce = tensor_reduce;
    t->m.reduce_ctx = t;
    t->params = xmalloc(n * sizeof(float));
    t->grads = xmalloc(n * sizeof(float));
    t->mom = xmalloc(n * sizeof(float));
    if (t->rank == 0 && g->T * g->P > 1) {
        t->whole_params = xmalloc(t->pt.whole_nparams * sizeof(float));
        t->whole_mom = xmalloc(t->pt.whole_nparams * sizeof(float));
    } else if (g->T * g->P == 1) {
        /* One rank's layout is the whole layout.  Every rank, not only rank 0:
         * under --elastic any of them may become rank 0 and write the dumps. */
        t->whole_params = t->params;
        t->whole_mom = t->mom;
    }
    t->perm = xmalloc(t->ds.ntrain * sizeof(uint32_t));
    t->perm_epoch = UINT64_MAX;
    t->xb = xmalloc(slice * t->ds.nfeat * sizeof(float));
    t->yb = xmalloc(slice * sizeof(int));
    t->steps_per_epoch = t->ds.ntrain / (size_t)t->o.batch;
    plan_buckets(t);
}

/* ---- the whole model and the ranks' blocks of it ---- */

/* Where the blocks of ranks 1 .. n-1 lie side by side in one buffer, k floats
 * per parameter (the parameters, and the momentum after them): rank r's block
 * has len[r] parameters from at[r].  Returns the buffer's floats. */
static size_t block_layout(const struct trainer *t, int n, int k, size_t *at, size_t *len)
{
    size_t total = 0;
    for (int r = 1; r < n; r++) {
        len[r] = part_nparams(&t->pt, r / t->g.T % t->g.P);
        at[r] = total;
        total += (size_t)k * len[r];
    }
    return total;
}

/* Rank 0's whole (params, mom) to every rank's block of it.  One rank's layout is
 * the whole layout, so without model parallelism this is a broadcast. */
static void scatter_model(struct trainer *t, bool with_mom)
{
    size_t n = t->m.nparams;
    if (t->g.T * t->g.P == 1) {
        check(t, collBroadcast(t->params, t->params, n, collFloat, 0, t->comm, NULL),
              "collBroadcast(params)");
        if (with_mom)
            check(t, collBroadcast(t->mom, t->mom, n, collFloat, 0, t->comm, NULL),
                  "collBroadcast(momentum)");
        return;
    }
    int parts = with_mom ? 2 : 1;
    if (t->rank != 0) {
        check(t, collGroupStart(), "collGroupStart");
        check(t, collRecv(t->params, n, collFloat, 0, t->comm, NULL), "collRecv(params)");
        if (with_mom)
            check(t, collRecv(t->mom, n, collFloat, 0, t->comm, NULL), "collRecv(momentum)");
        check(t, collGroupEnd(), "collGroupEnd(model)");
        return;
    }
    /* every other rank's block, cut out of the whole model side by side */
    size_t *at = xmalloc((size_t)t->nranks * sizeof(size_t));
    size_t *len = xmalloc((size_t)t->nranks * sizeof(size_t));
    float *buf = xmalloc(block_layout(t, t->nranks, parts, at, len) * sizeof(float));
    check(t, collGroupStart(), "collGroupStart");
    for (int r = 1; r < t->nranks; r++)
        for (int k = 0; k < parts; k++) {
            float *blk = buf + at[r] + (size_t)k * len[r];
            part_copy(&t->pt, r % t->g.T, r / t->g.T % t->g.P,
                      k == 0 ? t->whole_params : t->whole_mom, blk, true);
            check(t, collSend(blk, len[r], collFloat, r, t->comm, NULL), "collSend(model)");
        }
    check(t, collGroupEnd(), "collGroupEnd(model)");
    part_copy(&t->pt, 0, 0, t->whole_params, t->params, true);
    if (with_mom)
        part_copy(&t->pt, 0, 0, t->whole_mom, t->mom, true);
    free(buf);
    free(at);
    free(len);
}

/* The first replica's blocks (params and momentum) to rank 0's whole model. */
static void gather_model(struct trainer *t)
{
    size_t n = t->m.nparams;
    int tp = t->g.T * t->g.P;
    if (tp == 1)
        return;
    if (t->rank != 0) {
        if (t->g.d != 0)
            return;
        check(t, collGroupStart(), "collGroupStart");
        check(t, collSend(t->params, n, collFloat, 0, t->comm, NULL), "collSend(params)");
        check(t, collSend(t->mom, n, collFloat, 0, t->comm, NULL), "collSend(momentum)");
        check(t, collGroupEnd(), "collGroupEnd(model)");
        return;
    }
    /* the first replica's ranks are 0 .. T x P - 1 */
    size_t *at = xmalloc((size_t)tp * sizeof(size_t));
    size_t *len = xmalloc((size_t)tp * sizeof(size_t));
    float *buf = xmalloc(block_layout(t, tp, 2, at, len) * sizeof(float));
    check(t, collGroupStart(), "collGroupStart");
    for (int r = 1; r < tp; r++) {
        check(t, collRecv(buf + at[r], len[r], collFloat, r, t->comm, NULL), "collRecv(params)");
        check(t, collRecv(buf + at[r] + len[r], len[r], collFloat, r, t->comm, NULL),
              "collRecv(momentum)");
    }
    check(t, collGroupEnd(), "collGroupEnd(model)");
    for (int r = 1; r < tp; r++) {
        part_copy(&t->pt, r % t->g.T, r / t->g.T, t->whole_params, buf + at[r], false);
        part_copy(&t->pt, r % t->g.T, r / t->g.T, t->whole_mom, buf + at[r] + len[r], false);
    }
    part_copy(&t->pt, 0, 0, t->whole_params, t->params, false);
    part_copy(&t->pt, 0, 0, t->whole_mom, t->mom, false);
    free(buf);
    free(at);
    free(len);
}

/* Rank 0 draws the weights (or reads the checkpoint) in the whole layout;
 * everyone gets its block, as DDP does at construction.  Returns the step to
 * start from. */
static uint64_t initial_state(struct trainer *t)
{
    size_t n = t->pt.whole_nparams;
    struct ckpt_state st = {.nsizes = t->pt.nlayers + 1, .sizes = t->sizes, .seed = t->o.seed,
                            .batch = (uint64_t)t->o.batch, .nparams = n,
                            .params = t->whole_params, .momentum = t->whole_mom};
    if (t->o.resume == NULL) {
        if (t->rank == 0) {
            uint64_t rng = t->o.seed ^ 0x1f83d9abfb41bd6bu;
            mlp_init_params(t->pt.whole, t->pt.nlayers, &rng, t->whole_params);
        }
        scatter_model(t, false);
        return 0;
    }
    char err[512] = "";
    bool ok = t->rank != 0 || ckpt_read(t->o.resume, &st, err, sizeof(err)) == 0;
    if (!all_ok(t, ok)) {
        if (t->rank == 0)
            fprintf(stderr, "dp_trainer: --resume: %s\n", err);
        collCommDestroy(t->comm);
        exit(1);
    }
    uint64_t step = st.step;
    check(t, collBroadcast(&step, &step, 1, collUint64, 0, t->comm, NULL), "collBroadcast(step)");
    scatter_model(t, true);
    return step;
}

/* ---- one step ---- */

/* Gathers this replica's slice of global step s's batch into xb, yb; returns its
 * rows. */
static size_t gather_slice(struct trainer *t, uint64_t s)
{
    uint64_t epoch = s / t->steps_per_epoch;
    if (epoch != t->perm_epoch) {
        data_permutation(t->o.seed, epoch, t->ds.ntrain, t->perm);
        t->perm_epoch = epoch;
    }
    size_t b = (size_t)t->o.batch, n = (size_t)t->g.D, r = (size_t)t->g.d;
    size_t first = (size_t)(s % t->steps_per_epoch) * b;
    size_t lo = r * b / n, hi = (r + 1) * b / n, d = t->ds.nfeat;
    for (size_t i = lo; i < hi; i++) {
        uint32_t ex = t->perm[first + i];
        memcpy(t->xb + (i - lo) * d, t->ds.x + (size_t)ex * d, d * sizeof(float));
        t->yb[i - lo] = t->ds.y[ex];
    }
    return hi - lo;
}

static void launch_bucket(struct trainer *t, int k)
{
    float *g = t->grads + t->buckets[k].off;
    check_on(t, t->g.data,
             collAllReduce(g, g, t->buckets[k].count, collFloat, collSum, t->g.data, t->stream),
             "collAllReduce(bucket)");
}

/* mlp_backward's callback on the step's last backward pass: layer l's gradient is
 * done; if it completes a bucket, the bucket's allreduce goes onto the stream now,
 * overlapping what is left of backward. */
static void on_layer_done(int l, void *ctx)
{
    struct trainer *t = ctx;
    if (t->bucket_of_layer[l] >= 0 && !t->o.no_overlap && t->o.mode == MODE_DDP)
        launch_bucket(t, t->bucket_of_layer[l]);
}

/* The pipeline's hooks. */
static const float *hook_input(void *ctx, int mb)
{
    struct trainer *t = ctx;
    return t->xb + t->ps.row0[mb] * t->ds.nfeat;
}

static double hook_loss(void *ctx, int mb, int s)
{
    struct trainer *t = ctx;
    size_t r0 = t->ps.row0[mb], rows = t->ps.row0[mb + 1] - r0;
    return mlp_loss(&t->m, s, t->yb + r0, rows, 1, &t->train_correct);
}

static void hook_fail(void *ctx, collResult_t r, const char *what)
{
    struct trainer *t = ctx;
    check_on(t, t->g.pipe != NULL ? t->g.pipe : t->comm, r, what);
    fail(t, "rank %d: %s", t->rank, what); /* not a library error: a bug */
}

static void setup_hooks(struct trainer *t)
{
    t->hooks = (struct pipe_hooks){.ctx = t, .input = hook_input, .loss = hook_loss,
                                   .fail = hook_fail, .done = on_layer_done};
}


/* v = mu v + g; p -= lr v, with g the gradient summed over the global batch / B. */
static void sgd_update(struct trainer *t)
{
    float lr = (float)t->o.lr, mu = (float)t->o.momentum, b = (float)t->o.batch;
    for (size_t i = 0; i < t->m.nparams; i++) {
        float g = t->grads[i] / b;
        t->mom[i] = mu * t->mom[i] + g;
        t->params[i] -= lr * t->mom[i];
    }
}

/* Forward and backward over this replica's slice, through the pipeline; returns
 * the slice's summed loss on the rank that counts it (0 elsewhere). */
static double local_gradient(struct trainer *t, uint64_t s)
{
    size_t rows = gather_slice(t, s);
    t->rows = rows;
    double loss = pipe_step(&t->ps, t->params, t->grads, rows, &t->hooks);
    /* the last stage's tensor ranks all computed it: count it once */
    return t->g.p == t->g.P - 1 && t->g.t == 0 ? loss : 0.0;
}

/* Returns the seconds spent waiting on communication. */
static double step_ddp(struct trainer *t, uint64_t s, double *loss)
{
    *loss += local_gradient(t, s);
    double t0 = now_s();
    if (t->o.no_overlap)
        for (int k = 0; k < t->nbuckets; k++)
            launch_bucket(t, k);
    check_on(t, t->g.data, collStreamSynchronize(t->stream), "collStreamSynchronize");
    double wait = now_s() - t0;
    sgd_update(t);
    return wait;
}

static double step_ps(struct trainer *t, uint64_t s, double *loss)
{
    size_t n = t->m.nparams;
    *loss += local_gradient(t, s);
    double t0 = now_s();
    check(t, collReduce(t->grads, t->grads, n, collFloat, collSum, 0, t->comm, NULL),
          "collReduce(grads)");
    double wait = now_s() - t0;
    if (t->rank == 0)
        sgd_update(t);
    t0 = now_s();
    check(t, collBroadcast(t->params, t->params, n, collFloat, 0, t->comm, NULL),
          "collBroadcast(params)");
    return wait + now_s() - t0;
}

/* ---- bytes sent, measured and by formula ---- */

static uint64_t bytes_sent(struct trainer *t, collComm_t c)
{
    uint64_t sent = 0;
    if (c != NULL)
        check_on(t, c, collCommGetBytes(c, &sent, NULL), "collCommGetBytes");
    return sent;
}

static void read_sent(struct trainer *t, struct sent *s)
{
    s->tensor = bytes_sent(t, t->g.tensor);
    s->pipe = bytes_sent(t, t->g.pipe);
    s->data = t->g.D > 1 ? bytes_sent(t, t->g.data) : 0;
}

/* What one step should send from this rank, with ring allreduces (each rank sends
 * 2(n-1)/n of the buffer): the sums of the tensor pairs, the activations and
 * gradients between stages (with a header per message), and the gradient of this
 * rank's block. */
static void formula_sent(struct trainer *t, double out[3])
{
    const struct grid *g = &t->g;
    double rows = (double)t->rows, ring_t = 2.0 * (g->T - 1) / g->T;
    double ring_d = 2.0 * (g->D - 1) / g->D, tensor = 0.0;
    for (int i = 0; i < t->m.nlayers; i++) {
        const struct mlp_layer *L = &t->m.layer[i];
        if (L->split == MLP_ROWS)
            tensor += rows * L->nout; /* forward */
        if (L->split == MLP_COLS && (i > 0 || t->m.want_dx))
            tensor += rows * L->nin; /* backward */
    }
    out[0] = 4.0 * ring_t * tensor;
    /* each message carries the library's 16-byte header (collCommGetBytes) */
    int links = (g->p < g->P - 1) + (g->p > 0);
    out[1] = 4.0 * rows * ((g->p < g->P - 1 ? (double)t->ps.out_width : 0.0) +
                           (g->p > 0 ? (double)t->ps.in_width : 0.0)) +
             16.0 * (double)links * (double)t->o.micro_batches;
    out[2] = 4.0 * ring_d * (double)t->m.nparams;
    /* ps: the naive master receives every gradient and sends everyone the model;
     * the others send their gradient once */
    if (t->o.mode == MODE_PS)
        out[2] = 4.0 * (double)t->m.nparams * (t->rank == 0 ? g->D - 1 : 1);
}

/* ---- evaluation and reports ---- */

/* This replica's share of the held-out set, through the pipeline: summed loss
 * and correct count on the rank that counts them (0 elsewhere). */
static void evaluate(struct trainer *t, double *loss, double *correct)
{
    size_t n = t->ds.ntest, r = (size_t)t->g.d, nr = (size_t)t->g.D;
    size_t lo = r * n / nr, hi = (r + 1) * n / nr, d = t->ds.nfeat;
    bool counts = t->g.p == t->g.P - 1 && t->g.t == 0;
    long ok = 0;
    *loss = 0.0;
    for (size_t i = lo; i < hi; i += t->m.maxrows) {
        size_t rows = hi - i < t->m.maxrows ? hi - i : t->m.maxrows;
        size_t at = t->ds.ntrain + i;
        if (pipe_forward_only(&t->ps, t->params, t->ds.x + at * d, rows, &t->hooks) != NULL &&
            counts)
            *loss += mlp_loss(&t->m, 0, t->ds.y + at, rows, 0, &ok);
    }
    *correct = (double)ok;
}

/* Sums [train loss, held-out loss, held-out correct, pipeline idle s, step s]
 * over the ranks. */
static void epoch_totals(struct trainer *t, double sums[5])
{
    evaluate(t, &sums[1], &sums[2]);
    sums[0] = t->epoch_loss;
    sums[3] = t->epoch_idle;
    sums[4] = t->epoch_time;
    check(t, collAllReduce(sums, sums, 5, collDouble, collSum, t->comm, NULL),
          "collAllReduce(epoch totals)");
}

static bool model_parallel(const struct trainer *t)
{
    return t->g.T * t->g.P > 1;
}

static void report_epoch(struct trainer *t, uint64_t step)
{
    double sums[5];
    epoch_totals(t, sums);
    if (t->rank == 0 && !t->o.quiet) {
        double examples = (double)t->epoch_steps * (double)t->o.batch;
        printf("epoch %llu step %llu loss %.6f acc %.4f examples/s %.0f comm-wait %.1f%%",
               (unsigned long long)((step - 1) / t->steps_per_epoch + 1),
               (unsigned long long)step, sums[0] / examples, sums[2] / (double)t->ds.ntest,
               examples / t->epoch_time, 100.0 * t->epoch_wait / t->epoch_time);
        if (model_parallel(t))
            printf(" params %.1f KiB (%.1f%%) pipe-idle %.1f%%",
                   (double)t->m.nparams * 4.0 / 1024.0,
                   100.0 * (double)t->m.nparams / (double)t->pt.whole_nparams,
                   100.0 * sums[3] / sums[4]);
        printf("\n");
        fflush(stdout);
    }
    t->epoch_loss = t->epoch_time = t->epoch_wait = t->epoch_idle = 0.0;
    t->epoch_steps = 0;
}

static void print_start(struct trainer *t, const char *algo_desc)
{
    if (t->rank != 0 || t->o.quiet)
        return;
    printf("dp_trainer: mode %s, %d ranks, %zu parameters (%.1f KiB), ",
           t->o.mode == MODE_DDP ? "ddp" : "ps", t->nranks, t->pt.whole_nparams,
           (double)t->pt.whole_nparams * 4.0 / 1024.0);
    if (t->o.mode == MODE_DDP)
        printf("%d buckets of <= %g MiB, overlap %s, ", t->nbuckets, t->o.bucket_mb,
               t->o.no_overlap ? "off" : "on");
    printf("%s\n", algo_desc);
    if (model_parallel(t) || t->o.micro_batches > 1) {
        const struct grid *g = &t->g;
        printf("dp_trainer: grid tp %d x pp %d x dp %d, schedule %s, %ld micro-batches; "
               "stages (layers):", g->T, g->P, g->D,
               t->o.schedule == PIPE_GPIPE ? "gpipe" : "1f1b", t->o.micro_batches);
        for (int p = 0; p < g->P; p++)
            printf(" %d-%d", t->pt.stage_first[p], t->pt.stage_first[p + 1] - 1);
        printf("\n");
    }
    printf("dp_trainer: data %s: %zu training + %zu held-out examples, %zu features, "
           "%d classes; batch %ld, %zu steps per epoch\n",
           t->o.data ? t->o.data : "synthetic", t->ds.ntrain, t->ds.ntest, t->ds.nfeat,
           t->ds.nclasses, t->o.batch, t->steps_per_epoch);
    fflush(stdout);
}

/* Model-parallel runs (and --rank-report): one line per rank, what it holds,
 * sends and waits. */
static void report_rank(struct trainer *t)
{
    if (!(model_parallel(t) || t->o.rank_report) || t->o.quiet || t->run_steps == 0)
        return;
    const struct grid *g = &t->g;
    double f[3], steps = (double)t->run_steps;
    formula_sent(t, f);
    size_t act = 0;
    for (int i = 0; i < t->m.nlayers; i++)
        act += (size_t)t->m.layer[i].nout;
    act = act * t->m.maxrows * sizeof(float) * (size_t)t->ps.peak_slots;
    printf("rank %d (tp %d/%d pp %d/%d dp %d/%d): params %zu of %zu (%.1f%%, 1/(TxP) = "
           "%.1f%%); bytes/step tensor %.0f (ring formula %.0f) pipeline %.0f (%.0f) "
           "data %.0f (%.0f); held %d of %ld micro-batches (%.1f KiB of activations); "
           "pipe-idle %.1f%%\n",
           t->rank, g->t, g->T, g->p, g->P, g->d, g->D, t->m.nparams, t->pt.whole_nparams,
           100.0 * (double)t->m.nparams / (double)t->pt.whole_nparams,
           100.0 / (g->T * g->P), (double)t->sent.tensor / steps, f[0],
           (double)t->sent.pipe / steps, f[1], (double)t->sent.data / steps, f[2],
           t->ps.peak_slots, t->o.micro_batches, (double)act / 1024.0,
           100.0 * t->train_idle / t->train_time);
    fflush(stdout);
}

/* ---- checkpoints and the final checks ---- */

static void save_checkpoint(struct trainer *t, uint64_t step)
{
    char err[512] = "";
    bool ok = true;
    gather_model(t);
    if (t->rank == 0) {
        struct ckpt_state st = {.nsizes = t->pt.nlayers + 1, .sizes = t->sizes,
                                .seed = t->o.seed, .batch = (uint64_t)t->o.batch,
                                .step = step, .nparams = t->pt.whole_nparams,
                                .params = t->whole_params, .momentum = t->whole_mom};
        ok = ckpt_write(t->o.checkpoint, &st, err, sizeof(err)) == 0;
    }
    if (!all_ok(t, ok)) {
        if (t->rank == 0)
            fprintf(stderr, "dp_trainer: --checkpoint: %s\n", err);
        collCommDestroy(t->comm);
        exit(1);
    }
}

/* Every replica of a block must end with bitwise the same parameters. */
static void check_identical(struct trainer *t)
{
    collComm_t c = t->g.data;
    uint64_t h = ckpt_fnv1a(CKPT_FNV_START, t->params, t->m.nparams * sizeof(float));
    uint64_t hmax = h, hmin = h;
    check_on(t, c, collAllReduce(&hmax, &hmax, 1, collUint64, collMax, c, NULL),
             "collAllReduce(hash max)");
    check_on(t, c, collAllReduce(&hmin, &hmin, 1, collUint64, collMin, c, NULL),
             "collAllReduce(hash min)");
    if (hmax != hmin)
        fail(t, "rank %d: the %s parameters differ (hash %016llx; min %016llx, max %016llx)",
             t->rank, model_parallel(t) ? "data-parallel replicas'" : "ranks'",
             (unsigned long long)h, (unsigned long long)hmin, (unsigned long long)hmax);
}

static void finish(struct trainer *t)
{
    check_identical(t);
    double sums[3] = {0.0, 0.0, 0.0};
    evaluate(t, &sums[1], &sums[2]);
    check(t, collAllReduce(sums, sums, 3, collDouble, collSum, t->comm, NULL),
          "collAllReduce(final totals)");
    if (t->o.dump_params != NULL)
        gather_model(t);
    report_rank(t);
    if (t->rank != 0)
        return;
    char err[512];
    if (t->o.dump_params != NULL &&
        ckpt_dump_floats(t->o.dump_params, t->whole_params, t->pt.whole_nparams, err,
                         sizeof(err)) != 0)
        fail(t, "--dump-params: %s", err);
    /* The final loss is the mean cross-entropy over the whole held-out set. */
    printf("final loss %.6f accuracy %.4f\n", sums[1] / (double)t->ds.ntest,
           sums[2] / (double)t->ds.ntest);
    fflush(stdout);
}

static void trainer_free(struct trainer *t)
{
    if (t->whole_params != t->params) {
        free(t->whole_params);
        free(t->whole_mom);
    }
    free(t->params);
    free(t->grads);
    free(t->mom);
    free(t->perm);
    free(t->xb);
    free(t->yb);
    free(t->buckets);
    free(t->bucket_of_layer);
    free(t->sizes);
    pipe_free(&t->ps);
    mlp_free(&t->m);
    data_free(&t->ds);
}

/* ---- the loop ---- */

/* --elastic: comm replaces the communicator (after a shrink or a grow). */
static void adopt_comm(struct trainer *t, collComm_t comm)
{
    t->comm = t->g.data = comm;
    check(t, collCommUserRank(t->comm, &t->rank), "collCommUserRank");
    check(t, collCommCount(t->comm, &t->nranks), "collCommCount");
    t->g.d = t->rank;
    t->g.D = t->nranks;
}

/* --elastic: every rank takes rank 0's parameters, momentum and next step. */
static void share_state(struct trainer *t)
{
    size_t n = t->m.nparams;
    uint64_t step = t->next_step;
    check(t, collBroadcast(&step, &step, 1, collUint64, 0, t->comm, NULL), "collBroadcast(step)");
    check(t, collBroadcast(t->params, t->params, n, collFloat, 0, t->comm, NULL),
          "collBroadcast(params)");
    check(t, collBroadcast(t->mom, t->mom, n, collFloat, 0, t->comm, NULL),
          "collBroadcast(momentum)");
    t->next_step = step;
}

/* --elastic, on rank 0: listens for new processes at --grow-listen, or where
 * the bootstrap's root was (COLL_COMM_ID: free once init is done), unless it
 * listens already.  Without either address the job does not grow back. */
static void open_join_listener(struct trainer *t)
{
    if (t->rank != 0 || t->jl.fd >= 0)
        return;
    const char *addr = t->o.grow_listen ? t->o.grow_listen : getenv("COLL_COMM_ID");
    if (addr == NULL) {
        if (!t->o.quiet && !t->listen_failed)
            printf("elastic: no --grow-listen or COLL_COMM_ID: new processes cannot join\n");
        t->listen_failed = true;
        return;
    }
    /* Tried again every 100 ms (at step boundaries): the address may still be held
     * for a moment by the old rank 0 as it exits, or, by a
     * stopped rank 0 that the others left behind, until that process is gone. */
    double now = now_s();
    if (t->listen_failed && now - t->listen_tried < 0.1)
        return;
    t->listen_tried = now;
    char err[512];
    if (join_listen(&t->jl, addr, err, sizeof(err)) != 0) {
        if (!t->listen_failed)
            fprintf(stderr, "dp_trainer: --elastic: %s; new processes cannot join until it "
                    "is free (tried again every 100 ms)\n", err);
        t->listen_failed = true;
        return;
    }
    t->listen_failed = false;
    if (!t->o.quiet)
        printf("elastic: new processes join at %s (dp_trainer --join %s)\n", addr, addr);
    fflush(stdout);
}

/* --elastic, after a failed call: the survivors shrink the communicator to the
 * ranks that still answer, then take rank 0's state (parameters, momentum and
 * next step: a failure can reach ranks at different points of a step, so some
 * may have applied its update and others not), and go on.  Each rank's slice of
 * the batch follows its new rank and count, so the data is re-sharded. */
static void recover(struct trainer *t)
{
    double t0 = now_s();
    int old_rank = t->rank, old_n = t->nranks;
    collComm_t shrunk = NULL;
    check(t, collCommShrink(t->comm, NULL, 0, &shrunk, NULL,
                            COLL_SHRINK_ABORT | COLL_SHRINK_DETECT), "collCommShrink");
    /* The stream reports the failure once; afterwards it serves the new comm. */
    if (t->stream != NULL)
        (void)collStreamSynchronize(t->stream);
    collCommDestroy(t->comm);
    adopt_comm(t, shrunk);
    share_state(t);
    t->shrinks++;
    if (t->rank == 0)
        printf("elastic: %d of %d ranks remain; continuing from step %llu after %.2f s "
               "(this process was rank %d, now rank %d)\n", t->nranks, old_n,
               (unsigned long long)t->next_step, now_s() - t0, old_rank, t->rank);
    fflush(stdout);
    open_join_listener(t);
}

/* --elastic, at a step boundary: rank 0 says how many new processes wait at its
 * join listener; when some do, every rank grows the communicator by that many
 * (collCommGrow), the new ones take ranks from the old size up, and all take
 * rank 0's state.  The data is re-sharded as after a shrink. */
static bool grow_if_joining(struct trainer *t)
{
    open_join_listener(t); /* after a failed try */
    int k = t->rank == 0 ? join_poll(&t->jl) : 0;
    check(t, collBroadcast(&k, &k, 1, collInt32, 0, t->comm, NULL), "collBroadcast(joiners)");
    if (k == 0)
        return false;
    double t0 = now_s();
    int old_n = t->nranks;
    collUniqueId id;
    memset(&id, 0, sizeof(id));
    if (t->rank == 0) {
        check(t, collCommGetUniqueId(t->comm, &id), "collCommGetUniqueId");
        int sent = join_offer(&t->jl, k, &id, old_n + k, old_n);
        if (sent < k)
            fprintf(stderr, "dp_trainer: %d of %d new processes went away before their offer; "
                    "the grow will fail and the job shrink back\n", k - sent, k);
    }
    collComm_t grown = NULL;
    check(t, collCommGrow(t->comm, old_n + k, t->rank == 0 ? &id : NULL, -1, &grown, NULL),
          "collCommGrow");
    if (t->stream != NULL)
        check(t, collStreamSynchronize(t->stream), "collStreamSynchronize");
    collCommDestroy(t->comm);
    adopt_comm(t, grown);
    share_state(t);
    t->grows++;
    if (t->rank == 0)
        printf("elastic: grew from %d to %d ranks at step %llu in %.2f s\n", old_n, t->nranks,
               (unsigned long long)t->next_step, now_s() - t0);
    fflush(stdout);
    return true;
}

static void train(struct trainer *t, uint64_t start)
{
    uint64_t total = (uint64_t)t->o.steps;
    t->next_step = start;
    if (setjmp(recover_point) != 0)
        recover(t);
    recover_armed = t->o.elastic;
    while (t->next_step < total) {
        uint64_t s = t->next_step;
        /* After a grow every rank, old and new, starts the step from the top. */
        if (t->o.elastic && grow_if_joining(t))
            continue;
        if (t->o.fail_step == (long)s && t->o.fail_rank == t->first_rank && t->shrinks == 0) {
            fprintf(stderr, "dp_trainer: rank %d: --fail-at: killing myself before step "
                    "%llu\n", t->rank, (unsigned long long)s);
            fflush(NULL);
            raise(SIGKILL);
        }
        struct sent before, after;
        bool counting = model_parallel(t) || t->o.rank_report;
        if (counting)
            read_sent(t, &before);
        double t0 = now_s(), loss = 0.0, idle0 = t->ps.idle_s;
        double wait = t->o.mode == MODE_DDP ? step_ddp(t, s, &loss) : step_ps(t, s, &loss);
        double dt = now_s() - t0;
        t->next_step = s + 1;
        t->epoch_time += dt;
        if (t->run_steps > 0 || t->o.steps - (long)start == 1) {
            t->train_time += dt;
            t->train_idle += t->ps.idle_s - idle0;
        }
        t->epoch_wait += wait;
        t->epoch_idle += t->ps.idle_s - idle0;
        t->epoch_loss += loss;
        t->epoch_steps++;
        t->run_steps++;
        if (counting) {
            read_sent(t, &after);
            t->sent.tensor += after.tensor - before.tensor;
            t->sent.pipe += after.pipe - before.pipe;
            t->sent.data += after.data - before.data;
        }
        uint64_t done = s + 1;
        if (done % t->steps_per_epoch == 0 || done == total)
            report_epoch(t, done);
        if (t->o.checkpoint != NULL &&
            ((t->o.checkpoint_every > 0 && done % (uint64_t)t->o.checkpoint_every == 0) ||
             done == total))
            save_checkpoint(t, done);
    }
    recover_armed = false;
}

static void destroy_groups(struct trainer *t)
{
    collComm_t c[3] = {t->g.tensor, t->g.pipe, t->g.data};
    for (int i = 0; i < 3; i++)
        if (c[i] != NULL && c[i] != t->comm)
            check_on(t, c[i], collCommDestroy(c[i]), "collCommDestroy(group)");
}

/* --join: a new process waits for rank 0's offer, then joins the grow. */
static void join_job(struct trainer *t)
{
    collUniqueId id;
    int nranks = 0, rank = -1;
    char err[512];
    const char *tmo = getenv("COLL_TIMEOUT_MS");
    double timeout_s = tmo != NULL && atof(tmo) > 0 ? 2 * atof(tmo) / 1000 : 600;
    if (timeout_s < 60)
        timeout_s = 60;
    printf("elastic: waiting to join the job at %s\n", t->o.join);
    fflush(stdout);
    if (join_request(t->o.join, join_token(), timeout_s, &id, &nranks, &rank, err,
                     sizeof(err)) != 0) {
        fprintf(stderr, "dp_trainer: --join: %s\n", err);
        exit(1);
    }
    collResult_t r = collCommGrow(NULL, nranks, &id, rank, &t->comm, NULL);
    if (r != collSuccess) {
        fprintf(stderr, "dp_trainer: --join: collCommGrow as rank %d of %d: %s\n", rank,
                nranks, collGetLastError(NULL));
        exit(1);
    }
    t->rank = rank;
    t->nranks = nranks;
    t->first_rank = -1; /* --fail-at names the job's first ranks */
    printf("elastic: joined as rank %d of %d\n", rank, nranks);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    static struct trainer tr;
    struct trainer *t = &tr;
    int r = options_parse(argc, argv, &t->o);
    if (r != 0)
        return r == 1 ? 0 : 2;
    const char *algo_desc = options_apply_algo(&t->o);
    /* Every rank reads the data and plans the model's cut before joining, so a bad
     * file or a model that cannot be cut fails all ranks alike and none waits for
     * the others. */
    load_data(t);
    plan_model(t);
    t->jl.fd = -1;
    if (t->o.join != NULL) {
        join_job(t);
    } else {
        check(t, collCommInitFromEnv(&t->comm), "collCommInitFromEnv");
        check(t, collCommUserRank(t->comm, &t->rank), "collCommUserRank");
        check(t, collCommCount(t->comm, &t->nranks), "collCommCount");
        t->first_rank = t->rank;
    }
    setup_grid(t);
    setup_model(t);
    setup_hooks(t);
    if (t->o.mode == MODE_DDP)
        check(t, collStreamCreate(&t->stream), "collStreamCreate");
    uint64_t start;
    if (t->o.join != NULL) {
        /* The job's ranks share rank 0's state right after the grow. */
        share_state(t);
        start = t->next_step;
    } else {
        print_start(t, algo_desc);
        start = initial_state(t);
    }
    if (t->o.elastic)
        open_join_listener(t);
    train(t, start);
    finish(t);
    if (t->stream != NULL)
        check(t, collStreamDestroy(t->stream), "collStreamDestroy");
    destroy_groups(t);
    check(t, collCommDestroy(t->comm), "collCommDestroy");
    join_close(&t->jl);
    trainer_free(t);
    return 0;
}
