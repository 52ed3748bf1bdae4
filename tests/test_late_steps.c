/*
 * Steps that complete later (lib/engine/engine.h, coll_step_runner): a ring
 * allreduce whose reductions run on other threads, late and out of order.
 *
 *   test_late_steps [--ranks N]     (COLL_TRANSPORTS picks shm or tcp)
 *
 *   late   every rank hands its received pieces' work (the reductions, the
 *          allgather copies) to a runner of two threads that take the queued
 *          steps in random order, each after a random pause of up to 300 us.
 *          Float sums of random values, in and out of place, at sizes from one
 *          element to 1M + 3, must equal bitwise what the same ring computes
 *          with no runner.  Over tcp (pieces are received into buffers, several
 *          handed over at once) the steps must have finished out of order at
 *          least once; over shm each piece's lent bytes are held while its step
 *          runs, one at a time.
 *   fail   rank 0's runner fails its fifth step, late: rank 0's call fails
 *          with the runner's result and a message naming the piece and the
 *          rank it came from; the other rank's call fails too, within the
 *          timeout, and both communicators are poisoned.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "engine.h"
#include "launch.h"

#define RUNNER_THREADS 2
#define RUNNER_QUEUE 256
#define MAX_COUNT ((1u << 20) + 3)

struct runner {
    struct coll_step_runner r;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct coll_step *q[RUNNER_QUEUE];
    int n;
    bool stop;
    unsigned seed;
    int max_delay_us;
    int fail_at;               /* the step (1-based) that fails; 0: none */
    int submitted;
    /* Completion order: the piece and lane of the last step finished. */
    const struct coll_lane *last_lane;
    size_t last_piece;
    atomic_int inversions;     /* steps finished before an earlier piece's of their lane */
    pthread_t th[RUNNER_THREADS];
};

static void runner_submit(void *arg, struct coll_step *s)
{
    struct runner *ru = arg;
    pthread_mutex_lock(&ru->lock);
    if (ru->n == RUNNER_QUEUE) { /* never: a lane hands at most its window */
        pthread_mutex_unlock(&ru->lock);
        coll_step_complete(s, collInternalError);
        return;
    }
    ru->q[ru->n++] = s;
    pthread_cond_signal(&ru->cond);
    pthread_mutex_unlock(&ru->lock);
}

static void *runner_main(void *arg)
{
    struct runner *ru = arg;
    pthread_mutex_lock(&ru->lock);
    for (;;) {
        while (ru->n == 0 && !ru->stop)
            pthread_cond_wait(&ru->cond, &ru->lock);
        if (ru->n == 0)
            break;
        /* Any queued step, not the oldest. */
        int k = (int)(rand_r(&ru->seed) % (unsigned)ru->n);
        struct coll_step *s = ru->q[k];
        ru->q[k] = ru->q[--ru->n];
        bool fail = ++ru->submitted == ru->fail_at;
        int delay = ru->max_delay_us > 0 ? (int)(rand_r(&ru->seed) % (unsigned)ru->max_delay_us)
                                         : 0;
        pthread_mutex_unlock(&ru->lock);
        if (delay > 0)
            usleep((useconds_t)delay);
        pthread_mutex_lock(&ru->lock);
        if (ru->last_lane == s->lane && s->piece < ru->last_piece)
            atomic_fetch_add(&ru->inversions, 1);
        ru->last_lane = s->lane;
        ru->last_piece = s->piece;
        pthread_mutex_unlock(&ru->lock);
        if (fail)
            coll_step_complete(s, collSystemError);
        else
            coll_step_run(s);
        pthread_mutex_lock(&ru->lock);
    }
    pthread_mutex_unlock(&ru->lock);
    return NULL;
}

static void runner_start(struct runner *ru, unsigned seed, int max_delay_us, int fail_at)
{
    memset(ru, 0, sizeof(*ru));
    ru->r = (struct coll_step_runner){.submit = runner_submit, .arg = ru};
    ru->seed = seed;
    ru->max_delay_us = max_delay_us;
    ru->fail_at = fail_at;
    atomic_init(&ru->inversions, 0);
    pthread_mutex_init(&ru->lock, NULL);
    pthread_cond_init(&ru->cond, NULL);
    for (int i = 0; i < RUNNER_THREADS; i++)
        if (pthread_create(&ru->th[i], NULL, runner_main, ru) != 0)
            launch_fatal(NULL, "cannot start a runner thread");
}

static void runner_stop(struct runner *ru)
{
    pthread_mutex_lock(&ru->lock);
    ru->stop = true;
    pthread_cond_broadcast(&ru->cond);
    pthread_mutex_unlock(&ru->lock);
    for (int i = 0; i < RUNNER_THREADS; i++)
        pthread_join(ru->th[i], NULL);
    pthread_cond_destroy(&ru->cond);
    pthread_mutex_destroy(&ru->lock);
}

static bool on_tcp(void)
{
    const char *t = getenv("COLL_TRANSPORTS");
    return t != NULL && strcmp(t, "tcp") == 0;
}

static const size_t counts[] = {1, 7, 1000, 65536 + 5, 300000, MAX_COUNT};

static void body_late(struct launch_rank *lr)
{
    struct coll_comm *comm = (struct coll_comm *)lr->comm;
    float *in = malloc(sizeof(float) * MAX_COUNT), *want = malloc(sizeof(float) * MAX_COUNT),
          *got = malloc(sizeof(float) * MAX_COUNT);
    if (in == NULL || want == NULL || got == NULL)
        launch_fatal(lr, "out of memory");
    unsigned seed = 17u * (unsigned)lr->rank + 1;
    struct runner ru;
    runner_start(&ru, seed, 300, 0);
    size_t steps_before = 0;
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
        size_t n = counts[c];
        for (int inplace = 0; inplace < 2; inplace++) {
            for (size_t i = 0; i < n; i++)
                in[i] = (float)rand_r(&seed) / (float)RAND_MAX - 0.5f;
            /* The same ring, its reductions in the engine's loop. */
            comm->step_runner = NULL;
            memcpy(want, in, n * sizeof(float));
            LR_MUST(lr, collAllReduce(inplace ? want : in, want, n, collFloat, collSum,
                                      lr->comm, NULL), lr->comm);
            comm->step_runner = &ru.r;
            memcpy(got, in, n * sizeof(float));
            LR_MUST(lr, collAllReduce(inplace ? got : in, got, n, collFloat, collSum, lr->comm,
                                      NULL), lr->comm);
            comm->step_runner = NULL;
            size_t bad = 0, first = n;
            for (size_t i = 0; i < n; i++)
                if (memcmp(&got[i], &want[i], sizeof(float)) != 0 && bad++ == 0)
                    first = i;
            LR_CHECK(lr, bad == 0, "%zu floats %s: %zu differ from the run without a runner "
                     "(first at %zu: %a, want %a)", n, inplace ? "in place" : "out of place", bad,
                     first, first < n ? got[first] : 0.0f, first < n ? want[first] : 0.0f);
            collCallInfo_t info = COLL_CALL_INFO_INITIALIZER;
            LR_MUST(lr, collCommGetLastCallInfo(lr->comm, &info), lr->comm);
            LR_CHECK(lr, info.algo != NULL && strcmp(info.algo, "ring") == 0, "ran %s, not ring",
                     info.algo ? info.algo : "nothing");
        }
        pthread_mutex_lock(&ru.lock);
        size_t steps = (size_t)ru.submitted;
        pthread_mutex_unlock(&ru.lock);
        LR_CHECK(lr, n < 2 || steps > steps_before, "%zu floats: no step went to the runner", n);
        steps_before = steps;
    }
    runner_stop(&ru);
    if (on_tcp())
        LR_CHECK(lr, atomic_load(&ru.inversions) > 0,
                 "every step finished in order: nothing ran out of order");
    free(in);
    free(want);
    free(got);
}

static void body_fail(struct launch_rank *lr)
{
    struct coll_comm *comm = (struct coll_comm *)lr->comm;
    size_t n = 300000;
    float *buf = calloc(n, sizeof(float));
    if (buf == NULL)
        launch_fatal(lr, "out of memory");
    struct runner ru;
    runner_start(&ru, 5, 200, lr->rank == 0 ? 5 : 0);
    comm->step_runner = &ru.r;
    collResult_t r = collAllReduce(buf, buf, n, collFloat, collSum, lr->comm, NULL);
    comm->step_runner = NULL;
    runner_stop(&ru);
    const char *err = collGetLastError(lr->comm);
    if (lr->rank == 0) {
        LR_CHECK(lr, r == collSystemError, "rank 0: %s, want the runner's collSystemError",
                 collGetErrorString(r));
        char peer[64];
        snprintf(peer, sizeof(peer), "received from rank %d", lr->nranks - 1);
        LR_CHECK(lr, strstr(err, "failed after it arrived") != NULL && strstr(err, peer) != NULL,
                 "rank 0's message names neither the late failure nor its peer (%s): %s", peer,
                 err);
    } else {
        LR_CHECK(lr, r != collSuccess, "rank %d: the call succeeded beside rank 0's failure",
                 lr->rank);
    }
    collResult_t async = collSuccess;
    LR_MUST(lr, collCommGetAsyncError(lr->comm, &async), lr->comm);
    LR_CHECK(lr, async != collSuccess, "the communicator is not poisoned");
    free(buf);
}

int main(int argc, char **argv)
{
    int nranks = 3;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--ranks") == 0 && i + 1 < argc) {
            nranks = launch_parse_threads(argv[++i]);
        } else {
            fprintf(stderr, "usage: %s [--ranks N]\n", argv[0]);
            return 2;
        }
    }
    /* Read once, at the first call into the library: set before any. */
    setenv("COLL_ALGO", "allreduce:ring", 1);
    setenv("COLL_CHUNKSIZE", "16384", 1);
    int rc = launch_run(nranks, body_late, NULL);
    rc |= launch_run(2, body_fail, NULL);
    return rc;
}
