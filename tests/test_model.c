/*
 * The planner's machine model, measured once per process (algorithms/machine.h):
 *
 *   collrun -n 4 test_model [--out FILE] [--remeasure]   (tests/test_model.sh)
 *   test_model --threads 4
 *
 * Every rank runs allreduce, broadcast, reduce, allgather and reduce-scatter of
 * float sums at sizes from 4 B to 4 MiB and records the algorithm each call
 * used (collCommGetLastCallInfo).  Then:
 *   - a split into one communicator of the same ranks (the same shape, the
 *     process's figures) chooses the same algorithm for every call, and its
 *     results are right;
 *   - a split into halves (another shape: fewer ranks per core) runs the same
 *     calls with right results, its two halves made at once;
 *   - a second split into one, made after the halves, chooses as the first.
 * With --remeasure (COLL_MODEL_REMEASURE=1: each communicator measures the
 * machine again) the splits may choose otherwise, and only the results are
 * checked.  With --out, rank 0 writes one line per call, "func bytes algo", for the
 * script to compare between runs.
 */
#include <stdint.h>

#include "launch.h"

#define NFUNCS 5
#define NSIZES 11 /* 4 B, 16 B, ..., 4 MiB */
#define MAX_BYTES (4u << 20)

static const char *const func_names[NFUNCS] = {"allreduce", "broadcast", "reduce", "allgather",
                                               "reducescatter"};

struct opts {
    const char *out;
    bool remeasure;
};

/* Runs call f with count floats per rank (bytes of the call: count x 4) on
 * comm and checks its result; returns the algorithm it used. */
static const char *run_one(struct launch_rank *lr, collComm_t comm, int f, size_t count,
                           float *in, float *out)
{
    int n, me;
    LR_MUST(lr, collCommCount(comm, &n), comm);
    LR_MUST(lr, collCommUserRank(comm, &me), comm);
    size_t in_count = f == 4 ? count * (size_t)n : count;
    size_t out_count = f == 3 ? count * (size_t)n : count;
    for (size_t i = 0; i < in_count; i++)
        in[i] = (float)(me + 1) + (float)(i % 7);
    collResult_t r = collSuccess;
    switch (f) {
    case 0: r = collAllReduce(in, out, count, collFloat, collSum, comm, NULL); break;
    case 1: r = collBroadcast(in, out, count, collFloat, 0, comm, NULL); break;
    case 2: r = collReduce(in, out, count, collFloat, collSum, 0, comm, NULL); break;
    case 3: r = collAllGather(in, out, count, collFloat, comm, NULL); break;
    default: r = collReduceScatter(in, out, count, collFloat, collSum, comm, NULL); break;
    }
    LR_CHECK(lr, r == collSuccess, "%s of %zu floats: %s (%s)", func_names[f], count,
             collGetErrorString(r), collGetLastError(comm));
    /* Each element's expected value: a sum over ranks of (rank + 1 + i % 7). */
    double sum_ranks = (double)n * (n + 1) / 2;
    size_t bad = 0;
    for (size_t i = 0; i < out_count && (f != 2 || me == 0); i++) {
        double want;
        if (f == 1)
            want = 1.0 + (double)(i % 7);
        else if (f == 3)
            want = (double)(i / count + 1) + (double)((i % count) % 7);
        else if (f == 4)
            want = sum_ranks + (double)n * (double)(((size_t)me * count + i) % 7);
        else
            want = sum_ranks + (double)n * (double)(i % 7);
        bad += out[i] != (float)want;
    }
    LR_CHECK(lr, bad == 0, "%s of %zu floats on %d ranks: %zu wrong elements", func_names[f],
             count, n, bad);
    collCallInfo_t info = COLL_CALL_INFO_INITIALIZER;
    LR_MUST(lr, collCommGetLastCallInfo(comm, &info), comm);
    return info.algo != NULL ? info.algo : "(none)";
}

/* Every call at every size on comm; algo[f][s] gets what each used. */
static void run_all(struct launch_rank *lr, collComm_t comm, const char *algo[NFUNCS][NSIZES],
                    float *in, float *out)
{
    int n;
    LR_MUST(lr, collCommCount(comm, &n), comm);
    for (int f = 0; f < NFUNCS; f++)
        for (int s = 0; s < NSIZES; s++) {
            size_t count = ((size_t)4 << (2 * s)) / sizeof(float);
            /* allgather and reduce-scatter: the size is the whole buffer */
            if (f >= 3)
                count = count / (size_t)n > 0 ? count / (size_t)n : 1;
            algo[f][s] = run_one(lr, comm, f, count, in, out);
        }
}

static void expect_same(struct launch_rank *lr, const char *what,
                        const char *a[NFUNCS][NSIZES], const char *b[NFUNCS][NSIZES])
{
    const struct opts *o = lr->arg;
    if (o->remeasure)
        return;
    for (int f = 0; f < NFUNCS; f++)
        for (int s = 0; s < NSIZES; s++)
            LR_CHECK(lr, strcmp(a[f][s], b[f][s]) == 0, "%s: %s of %u B chose %s, the "
                     "communicator before %s", what, func_names[f], 4u << (2 * s), b[f][s],
                     a[f][s]);
}

static void body(struct launch_rank *lr)
{
    const struct opts *o = lr->arg;
    float *in = malloc(MAX_BYTES * 2), *out = malloc(MAX_BYTES * 2);
    if (in == NULL || out == NULL)
        launch_fatal(lr, "out of memory");
    const char *first[NFUNCS][NSIZES], *again[NFUNCS][NSIZES];
    run_all(lr, lr->comm, first, in, out);

    collComm_t whole = NULL, half = NULL;
    LR_MUST(lr, collCommSplit(lr->comm, 0, lr->rank, &whole, NULL), lr->comm);
    run_all(lr, whole, again, in, out);
    expect_same(lr, "a split into one", first, again);
    LR_MUST(lr, collCommDestroy(whole), NULL);

    LR_MUST(lr, collCommSplit(lr->comm, lr->rank % 2, lr->rank, &half, NULL), lr->comm);
    run_all(lr, half, again, in, out);
    LR_MUST(lr, collCommDestroy(half), NULL);

    LR_MUST(lr, collCommSplit(lr->comm, 0, lr->rank, &whole, NULL), lr->comm);
    run_all(lr, whole, again, in, out);
    expect_same(lr, "a split into one after the halves", first, again);
    LR_MUST(lr, collCommDestroy(whole), NULL);

    if (o->out != NULL && lr->rank == 0) {
        FILE *f = fopen(o->out, "w");
        if (f == NULL)
            launch_fatal(lr, "cannot write %s", o->out);
        for (int k = 0; k < NFUNCS; k++)
            for (int s = 0; s < NSIZES; s++)
                fprintf(f, "%s %u %s\n", func_names[k], 4u << (2 * s), first[k][s]);
        fclose(f);
    }
    free(in);
    free(out);
}

int main(int argc, char **argv)
{
    struct opts o = {.out = NULL, .remeasure = false};
    int nthreads = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
            o.out = argv[++i];
        } else if (strcmp(argv[i], "--remeasure") == 0) {
            o.remeasure = true;
            setenv("COLL_MODEL_REMEASURE", "1", 1);
        } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            nthreads = launch_parse_threads(argv[++i]);
        } else {
            fprintf(stderr, "usage: %s [--out FILE] [--remeasure] [--threads N]\n", argv[0]);
            return 2;
        }
    }
    return launch_run(nthreads, body, &o);
}
