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
#include "mlp.h"
#include "options.h"
#include "rng.h"

struct bucket {
    size_t off, count; /* a contiguous range of grads */
};

struct trainer {
    struct options o;
    collComm_t comm;
    collStream_t stream;
    int rank, nranks;
    struct dataset ds;
    struct mlp m;
    int *sizes;
    float *params, *grads, *mom;
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
    double epoch_loss, epoch_time, epoch_wait;
    long epoch_steps;
    /* --elastic: the next step whose update this rank has not applied, and the
     * rank this process had at start (for --fail-at) */
    uint64_t next_step;
    int first_rank;
    int shrinks;
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

/* A failed library call ends the program: the message, then an abort of the
 * communicator so that the other ranks fail at once instead of at their deadline. */
static void check(struct trainer *t, collResult_t r, const char *what)
{
    if (r == collSuccess)
        return;
    if (recover_armed) {
        fprintf(stderr, "dp_trainer: rank %d: %s failed: %s: %s; shrinking the "
                "communicator\n", t->rank, what, collGetErrorString(r),
                collGetLastError(t->comm));
        recover_armed = false;
        longjmp(recover_point, 1);
    }
    fprintf(stderr, "dp_trainer: rank %d: %s failed: %s: %s\n", t->rank, what,
            collGetErrorString(r), collGetLastError(t->comm));
    collCommAbort(t->comm);
    exit(1);
}

static void fail(struct trainer *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "dp_trainer: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    collCommAbort(t->comm);
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
        size_t start = mlp_weight_offset(&t->m, l);
        if ((double)(end - start) * sizeof(float) >= cap || l == 0) {
            t->buckets[t->nbuckets] = (struct bucket){start, end - start};
            t->bucket_of_layer[l] = t->nbuckets++;
            end = start;
        }
    }
}

static void setup_model(struct trainer *t)
{
    int nl = t->o.nhidden + 1;
    t->sizes = xmalloc((size_t)(nl + 1) * sizeof(int));
    t->sizes[0] = (int)t->ds.nfeat;
    memcpy(t->sizes + 1, t->o.hidden, (size_t)t->o.nhidden * sizeof(int));
    t->sizes[nl] = t->ds.nclasses;
    /* the largest slice of a batch, and the evaluation chunks, fit in this */
    size_t maxrows = ((size_t)t->o.batch + (size_t)t->nranks - 1) / (size_t)t->nranks;
    if (t->o.elastic)
        maxrows = (size_t)t->o.batch; /* the slices grow as ranks leave */
    if (mlp_init(&t->m, nl, t->sizes, maxrows) != 0) {
        fprintf(stderr, "dp_trainer: out of memory for the model\n");
        exit(1);
    }
    size_t n = t->m.nparams;
    t->params = xmalloc(n * sizeof(float));
    t->grads = xmalloc(n * sizeof(float));
    t->mom = xmalloc(n * sizeof(float));
    t->perm = xmalloc(t->ds.ntrain * sizeof(uint32_t));
    t->perm_epoch = UINT64_MAX;
    t->xb = xmalloc(maxrows * t->ds.nfeat * sizeof(float));
    t->yb = xmalloc(maxrows * sizeof(int));
    t->steps_per_epoch = t->ds.ntrain / (size_t)t->o.batch;
    plan_buckets(t);
}

/* Rank 0 draws the weights (or reads the checkpoint); everyone gets its copy, as
 * DDP does at construction.  Returns the step to start from. */
static uint64_t initial_state(struct trainer *t)
{
    size_t n = t->m.nparams;
    struct ckpt_state st = {.nsizes = t->m.nlayers + 1, .sizes = t->sizes, .seed = t->o.seed,
                            .batch = (uint64_t)t->o.batch, .nparams = n,
                            .params = t->params, .momentum = t->mom};
    if (t->o.resume == NULL) {
        if (t->rank == 0) {
            uint64_t rng = t->o.seed ^ 0x1f83d9abfb41bd6bu;
            mlp_init_params(&t->m, &rng, t->params);
        }
        check(t, collBroadcast(t->params, t->params, n, collFloat, 0, t->comm, NULL),
              "collBroadcast(params)");
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
    check(t, collBroadcast(t->params, t->params, n, collFloat, 0, t->comm, NULL),
          "collBroadcast(params)");
    check(t, collBroadcast(t->mom, t->mom, n, collFloat, 0, t->comm, NULL),
          "collBroadcast(momentum)");
    return step;
}

/* ---- one step ---- */

/* Gathers this rank's slice of global step s's batch into xb, yb; returns its rows. */
static size_t gather_slice(struct trainer *t, uint64_t s)
{
    uint64_t epoch = s / t->steps_per_epoch;
    if (epoch != t->perm_epoch) {
        data_permutation(t->o.seed, epoch, t->ds.ntrain, t->perm);
        t->perm_epoch = epoch;
    }
    size_t b = (size_t)t->o.batch, n = (size_t)t->nranks, r = (size_t)t->rank;
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
    check(t, collAllReduce(g, g, t->buckets[k].count, collFloat, collSum, t->comm, t->stream),
          "collAllReduce(bucket)");
}

/* mlp_backward's callback: layer l's gradient is done; if it completes a bucket,
 * the bucket's allreduce goes onto the stream now, overlapping what is left of
 * backward. */
static void on_layer_done(int l, void *ctx)
{
    struct trainer *t = ctx;
    if (t->bucket_of_layer[l] >= 0)
        launch_bucket(t, t->bucket_of_layer[l]);
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

/* Forward and backward over this rank's slice; returns the slice's summed loss. */
static double local_gradient(struct trainer *t, uint64_t s, bool overlap)
{
    size_t rows = gather_slice(t, s);
    long correct = 0;
    mlp_forward(&t->m, t->params, t->xb, rows);
    double loss = mlp_loss(&t->m, t->yb, rows, 1, &correct);
    mlp_backward(&t->m, t->params, rows, t->grads, overlap ? on_layer_done : NULL, t);
    return loss;
}

/* Returns the seconds spent waiting on communication. */
static double step_ddp(struct trainer *t, uint64_t s, double *loss)
{
    bool overlap = !t->o.no_overlap;
    *loss += local_gradient(t, s, overlap);
    double t0 = now_s();
    if (!overlap)
        for (int k = 0; k < t->nbuckets; k++)
            launch_bucket(t, k);
    check(t, collStreamSynchronize(t->stream), "collStreamSynchronize");
    double wait = now_s() - t0;
    sgd_update(t);
    return wait;
}

static double step_ps(struct trainer *t, uint64_t s, double *loss)
{
    size_t n = t->m.nparams;
    *loss += local_gradient(t, s, false);
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

/* ---- evaluation and reports ---- */

/* This rank's share of the held-out set: summed loss and correct count. */
static void evaluate(struct trainer *t, double *loss, double *correct)
{
    size_t n = t->ds.ntest, r = (size_t)t->rank, nr = (size_t)t->nranks;
    size_t lo = r * n / nr, hi = (r + 1) * n / nr, d = t->ds.nfeat;
    long ok = 0;
    *loss = 0.0;
    for (size_t i = lo; i < hi; i += t->m.maxrows) {
        size_t rows = hi - i < t->m.maxrows ? hi - i : t->m.maxrows;
        size_t at = t->ds.ntrain + i;
        mlp_forward(&t->m, t->params, t->ds.x + at * d, rows);
        *loss += mlp_loss(&t->m, t->ds.y + at, rows, 0, &ok);
    }
    *correct = (double)ok;
}

/* Sums [train loss, held-out loss, held-out correct] over the ranks. */
static void epoch_totals(struct trainer *t, double sums[3])
{
    evaluate(t, &sums[1], &sums[2]);
    sums[0] = t->epoch_loss;
    check(t, collAllReduce(sums, sums, 3, collDouble, collSum, t->comm, NULL),
          "collAllReduce(epoch totals)");
}

static void report_epoch(struct trainer *t, uint64_t step)
{
    double sums[3];
    epoch_totals(t, sums);
    if (t->rank == 0 && !t->o.quiet) {
        double examples = (double)t->epoch_steps * (double)t->o.batch;
        printf("epoch %llu step %llu loss %.6f acc %.4f examples/s %.0f comm-wait %.1f%%\n",
               (unsigned long long)((step - 1) / t->steps_per_epoch + 1),
               (unsigned long long)step, sums[0] / examples, sums[2] / (double)t->ds.ntest,
               examples / t->epoch_time, 100.0 * t->epoch_wait / t->epoch_time);
        fflush(stdout);
    }
    t->epoch_loss = t->epoch_time = t->epoch_wait = 0.0;
    t->epoch_steps = 0;
}

static void print_start(struct trainer *t, const char *algo_desc)
{
    if (t->rank != 0 || t->o.quiet)
        return;
    printf("dp_trainer: mode %s, %d ranks, %zu parameters (%.1f KiB), ",
           t->o.mode == MODE_DDP ? "ddp" : "ps", t->nranks, t->m.nparams,
           (double)t->m.nparams * 4.0 / 1024.0);
    if (t->o.mode == MODE_DDP)
        printf("%d buckets of <= %g MiB, overlap %s, ", t->nbuckets, t->o.bucket_mb,
               t->o.no_overlap ? "off" : "on");
    printf("%s\n", algo_desc);
    printf("dp_trainer: data %s: %zu training + %zu held-out examples, %zu features, "
           "%d classes; batch %ld, %zu steps per epoch\n",
           t->o.data ? t->o.data : "synthetic", t->ds.ntrain, t->ds.ntest, t->ds.nfeat,
           t->ds.nclasses, t->o.batch, t->steps_per_epoch);
    fflush(stdout);
}

/* ---- checkpoints and the final checks ---- */

static void save_checkpoint(struct trainer *t, uint64_t step)
{
    char err[512] = "";
    bool ok = true;
    if (t->rank == 0) {
        struct ckpt_state st = {.nsizes = t->m.nlayers + 1, .sizes = t->sizes,
                                .seed = t->o.seed, .batch = (uint64_t)t->o.batch,
                                .step = step, .nparams = t->m.nparams,
                                .params = t->params, .momentum = t->mom};
        ok = ckpt_write(t->o.checkpoint, &st, err, sizeof(err)) == 0;
    }
    if (!all_ok(t, ok)) {
        if (t->rank == 0)
            fprintf(stderr, "dp_trainer: --checkpoint: %s\n", err);
        collCommDestroy(t->comm);
        exit(1);
    }
}

/* Every rank must end with bitwise the same parameters. */
static void check_identical(struct trainer *t)
{
    uint64_t h = ckpt_fnv1a(CKPT_FNV_START, t->params, t->m.nparams * sizeof(float));
    uint64_t hmax = h, hmin = h;
    check(t, collAllReduce(&hmax, &hmax, 1, collUint64, collMax, t->comm, NULL),
          "collAllReduce(hash max)");
    check(t, collAllReduce(&hmin, &hmin, 1, collUint64, collMin, t->comm, NULL),
          "collAllReduce(hash min)");
    if (hmax != hmin)
        fail(t, "rank %d: the ranks' parameters differ (hash %016llx; min %016llx, max "
             "%016llx)", t->rank, (unsigned long long)h, (unsigned long long)hmin,
             (unsigned long long)hmax);
}

static void finish(struct trainer *t)
{
    check_identical(t);
    double sums[3] = {0.0, 0.0, 0.0};
    evaluate(t, &sums[1], &sums[2]);
    check(t, collAllReduce(sums, sums, 3, collDouble, collSum, t->comm, NULL),
          "collAllReduce(final totals)");
    if (t->rank != 0)
        return;
    char err[512];
    if (t->o.dump_params != NULL &&
        ckpt_dump_floats(t->o.dump_params, t->params, t->m.nparams, err, sizeof(err)) != 0)
        fail(t, "--dump-params: %s", err);
    /* The final loss is the mean cross-entropy over the whole held-out set. */
    printf("final loss %.6f accuracy %.4f\n", sums[1] / (double)t->ds.ntest,
           sums[2] / (double)t->ds.ntest);
    fflush(stdout);
}

static void trainer_free(struct trainer *t)
{
    free(t->params);
    free(t->grads);
    free(t->mom);
    free(t->perm);
    free(t->xb);
    free(t->yb);
    free(t->buckets);
    free(t->bucket_of_layer);
    free(t->sizes);
    mlp_free(&t->m);
    data_free(&t->ds);
}

/* ---- the loop ---- */

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
    t->comm = shrunk;
    check(t, collCommUserRank(t->comm, &t->rank), "collCommUserRank");
    check(t, collCommCount(t->comm, &t->nranks), "collCommCount");
    size_t n = t->m.nparams;
    uint64_t step = t->next_step;
    check(t, collBroadcast(&step, &step, 1, collUint64, 0, t->comm, NULL), "collBroadcast(step)");
    check(t, collBroadcast(t->params, t->params, n, collFloat, 0, t->comm, NULL),
          "collBroadcast(params)");
    check(t, collBroadcast(t->mom, t->mom, n, collFloat, 0, t->comm, NULL),
          "collBroadcast(momentum)");
    t->next_step = step;
    t->shrinks++;
    if (t->rank == 0)
        printf("elastic: %d of %d ranks remain; continuing from step %llu after %.2f s "
               "(this process was rank %d, now rank %d)\n", t->nranks, old_n,
               (unsigned long long)step, now_s() - t0, old_rank, t->rank);
    fflush(stdout);
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
        if (t->o.fail_step == (long)s && t->o.fail_rank == t->first_rank && t->shrinks == 0) {
            fprintf(stderr, "dp_trainer: rank %d: --fail-at: killing myself before step "
                    "%llu\n", t->rank, (unsigned long long)s);
            fflush(NULL);
            raise(SIGKILL);
        }
        double t0 = now_s(), loss = 0.0;
        double wait = t->o.mode == MODE_DDP ? step_ddp(t, s, &loss) : step_ps(t, s, &loss);
        t->next_step = s + 1;
        t->epoch_time += now_s() - t0;
        t->epoch_wait += wait;
        t->epoch_loss += loss;
        t->epoch_steps++;
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

int main(int argc, char **argv)
{
    static struct trainer tr;
    struct trainer *t = &tr;
    int r = options_parse(argc, argv, &t->o);
    if (r != 0)
        return r == 1 ? 0 : 2;
    const char *algo_desc = options_apply_algo(&t->o);
    /* Every rank reads the data before joining, so a bad file fails all ranks
     * alike and none waits for the others. */
    load_data(t);
    check(t, collCommInitFromEnv(&t->comm), "collCommInitFromEnv");
    check(t, collCommUserRank(t->comm, &t->rank), "collCommUserRank");
    check(t, collCommCount(t->comm, &t->nranks), "collCommCount");
    t->first_rank = t->rank;
    if (t->o.batch < t->nranks) {
        fprintf(stderr, "dp_trainer: --batch: %ld is fewer examples than the %d ranks\n",
                t->o.batch, t->nranks);
        collCommDestroy(t->comm);
        return 2;
    }
    setup_model(t);
    if (t->o.mode == MODE_DDP)
        check(t, collStreamCreate(&t->stream), "collStreamCreate");
    print_start(t, algo_desc);
    uint64_t start = initial_state(t);
    train(t, start);
    finish(t);
    if (t->stream != NULL)
        check(t, collStreamDestroy(t->stream), "collStreamDestroy");
    check(t, collCommDestroy(t->comm), "collCommDestroy");
    trainer_free(t);
    return 0;
}
