/*
 * Communicators and threads:
 *
 *   1. two communicators of 2 ranks each, four threads in all, running allreduces
 *      at the same time (the API allows different communicators on different
 *      threads);
 *   2. two threads that each hold two communicators over the same two ranks, the
 *      second with the ranks swapped, and use them alternately (allreduce on one,
 *      broadcast and allreduce on the other).
 *
 * Every communicator adds its own tag to the data, so a message that strays from
 * one communicator to another shows up as a wrong sum.  Both parts run in one
 * process with ids from collGetUniqueId, so there is no collrun form of this test.
 *
 *   test_threads [-v]
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch.h"

#define ITERS 300
#define MAX_COMMS 2

static const size_t sizes[] = {1, 7, 1000, 65536 + 5, 262147};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

struct worker {
    struct launch_rank lr; /* rank of comm[0], failures and the thread */
    int ncomms;
    collUniqueId id[MAX_COMMS];
    int rank[MAX_COMMS];
    int tag[MAX_COMMS];
    collComm_t comm[MAX_COMMS];
};

static bool verbose;

/* Allreduce on comm k, iteration it: int32 sum, float32 sum or int64 max by turns,
 * with values carrying the communicator's tag. */
static void one_allreduce(struct worker *w, int k, int it)
{
    const int n = 2, me = w->rank[k], tag = w->tag[k];
    const size_t count = sizes[(size_t)(it + k) % NSIZES];
    const int kind = it % 3;
    collResult_t r;

    if (kind == 0) {
        int32_t *b = malloc(count * sizeof(*b));
        if (!b)
            launch_fatal(&w->lr, "out of memory");
        for (size_t j = 0; j < count; j++)
            b[j] = tag * 1000 + me * 10 + (int32_t)(j % 13) + it;
        r = collAllReduce(b, b, count, collInt32, collSum, w->comm[k], NULL);
        if (r != collSuccess)
            launch_fatal(&w->lr, "tag %d allreduce %d: %s: %s", tag, it, collGetErrorString(r),
                         collGetLastError(w->comm[k]));
        for (size_t j = 0; j < count; j++) {
            int32_t want = n * (tag * 1000 + (int32_t)(j % 13) + it) + 10;
            if (b[j] != want) {
                LR_CHECK(&w->lr, b[j] == want, "tag %d it %d int32 b[%zu] = %" PRId32
                         ", want %" PRId32, tag, it, j, b[j], want);
                break;
            }
        }
        free(b);
    } else if (kind == 1) {
        float *s = malloc(count * sizeof(*s)), *d = malloc(count * sizeof(*d));
        if (!s || !d)
            launch_fatal(&w->lr, "out of memory");
        for (size_t j = 0; j < count; j++)
            s[j] = (float)(tag * 100 + me + (int)(j % 5));
        r = collAllReduce(s, d, count, collFloat32, collSum, w->comm[k], NULL);
        if (r != collSuccess)
            launch_fatal(&w->lr, "tag %d allreduce %d: %s: %s", tag, it, collGetErrorString(r),
                         collGetLastError(w->comm[k]));
        for (size_t j = 0; j < count; j++) {
            float want = (float)(n * (tag * 100 + (int)(j % 5)) + 1);
            if (d[j] != want) {
                LR_CHECK(&w->lr, d[j] == want, "tag %d it %d float32 d[%zu] = %g, want %g", tag,
                         it, j, (double)d[j], (double)want);
                break;
            }
        }
        free(s);
        free(d);
    } else {
        int64_t *b = malloc(count * sizeof(*b));
        if (!b)
            launch_fatal(&w->lr, "out of memory");
        for (size_t j = 0; j < count; j++)
            b[j] = ((int64_t)tag << 40) + (((int64_t)j * 7 + me) % 11) * (me ? 1 : -1);
        r = collAllReduce(b, b, count, collInt64, collMax, w->comm[k], NULL);
        if (r != collSuccess)
            launch_fatal(&w->lr, "tag %d allreduce %d: %s: %s", tag, it, collGetErrorString(r),
                         collGetLastError(w->comm[k]));
        for (size_t j = 0; j < count; j++) {
            int64_t want = ((int64_t)tag << 40) + ((int64_t)j * 7 + 1) % 11;
            if (b[j] != want) {
                LR_CHECK(&w->lr, b[j] == want, "tag %d it %d int64 b[%zu] = %" PRId64
                         ", want %" PRId64, tag, it, j, b[j], want);
                break;
            }
        }
        free(b);
    }
}

/* Broadcast on comm k from root it % 2. */
static void one_broadcast(struct worker *w, int k, int it)
{
    const size_t count = sizes[(size_t)it % NSIZES];
    const int root = it % 2, tag = w->tag[k];
    uint32_t *b = malloc(count * sizeof(*b));
    collResult_t r;

    if (!b)
        launch_fatal(&w->lr, "out of memory");
    for (size_t j = 0; j < count; j++)
        b[j] = w->rank[k] == root ? (uint32_t)(tag * 7919 + it * 31 + (int)j) : 0xdeadbeefu;
    r = collBroadcast(b, b, count, collUint32, root, w->comm[k], NULL);
    if (r != collSuccess)
        launch_fatal(&w->lr, "tag %d broadcast %d: %s: %s", tag, it, collGetErrorString(r),
                     collGetLastError(w->comm[k]));
    for (size_t j = 0; j < count; j++) {
        uint32_t want = (uint32_t)(tag * 7919 + it * 31 + (int)j);
        if (b[j] != want) {
            LR_CHECK(&w->lr, b[j] == want, "tag %d broadcast %d b[%zu] = %" PRIu32
                     ", want %" PRIu32, tag, it, j, b[j], want);
            break;
        }
    }
    free(b);
}

static void *worker_main(void *p)
{
    struct worker *w = p;

    /* Every thread creates its communicators in the same order, so no init waits
     * for a rank that is itself waiting in another init. */
    for (int k = 0; k < w->ncomms; k++) {
        collResult_t r = collCommInitRank(&w->comm[k], 2, w->id[k], w->rank[k]);
        if (r != collSuccess)
            launch_fatal(&w->lr, "init of tag %d as rank %d: %s: %s", w->tag[k], w->rank[k],
                         collGetErrorString(r), collGetLastError(NULL));
        int me = -1;
        LR_CHECK_RES(&w->lr, collCommUserRank(w->comm[k], &me), collSuccess, w->comm[k]);
        LR_CHECK(&w->lr, me == w->rank[k], "tag %d: rank %d, want %d", w->tag[k], me,
                 w->rank[k]);
    }
    for (int it = 0; it < ITERS; it++) {
        for (int k = 0; k < w->ncomms; k++) {
            one_allreduce(w, k, it);
            if (w->ncomms > 1 && k == 1)
                one_broadcast(w, k, it);
        }
    }
    for (int k = 0; k < w->ncomms; k++)
        LR_CHECK_RES(&w->lr, collCommDestroy(w->comm[k]), collSuccess, NULL);
    return NULL;
}

static collUniqueId new_id(void)
{
    collUniqueId id;
    collResult_t r = collGetUniqueId(&id);

    if (r != collSuccess)
        launch_fatal(NULL, "collGetUniqueId: %s: %s", collGetErrorString(r),
                     collGetLastError(NULL));
    return id;
}

static int run_workers(struct worker *w, int n, const char *name)
{
    int failures = 0;
    double t0 = launch_now();

    for (int i = 0; i < n; i++)
        if (pthread_create(&w[i].lr.thread, NULL, worker_main, &w[i]) != 0)
            launch_fatal(NULL, "pthread_create");
    for (int i = 0; i < n; i++) {
        pthread_join(w[i].lr.thread, NULL);
        failures += w[i].lr.failures;
    }
    printf("%-58s %s, %.1f s\n", name, failures ? "FAILED" : "ok", launch_now() - t0);
    fflush(stdout);
    return failures;
}

int main(int argc, char **argv)
{
    int failures = 0;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-v") == 0) {
            verbose = true;
        } else {
            fprintf(stderr, "usage: %s [-v]\n", argv[0]);
            return 2;
        }
    }

    /* 1. Two communicators of two ranks each, at the same time. */
    struct worker a[4];
    collUniqueId ida = new_id(), idb = new_id();
    for (int i = 0; i < 4; i++) {
        a[i] = (struct worker){.lr = {.rank = i, .nranks = 4, .threads = true}, .ncomms = 1};
        a[i].id[0] = i < 2 ? ida : idb;
        a[i].rank[0] = i % 2;
        a[i].tag[0] = i < 2 ? 1 : 2;
    }
    failures += run_workers(a, 4, "two 2-rank communicators on four threads at once");

    /* 2. Two communicators over the same two threads, used alternately; the second
     * numbers the ranks the other way round. */
    struct worker b[2];
    collUniqueId idx = new_id(), idy = new_id();
    for (int i = 0; i < 2; i++) {
        b[i] = (struct worker){.lr = {.rank = i, .nranks = 2, .threads = true}, .ncomms = 2};
        b[i].id[0] = idx;
        b[i].id[1] = idy;
        b[i].rank[0] = i;
        b[i].rank[1] = 1 - i;
        b[i].tag[0] = 3;
        b[i].tag[1] = 4;
    }
    failures += run_workers(b, 2, "two communicators over the same two ranks, alternately");

    if (verbose || failures)
        printf("test_threads: %d failed check(s)\n", failures);
    return failures ? 1 : 0;
}
