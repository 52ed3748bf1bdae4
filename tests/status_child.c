/*
 * status_child: ranks for tests/test_status.sh (collrun status, collinfo --status).
 *
 *   collrun -n 4 status_child SECONDS
 *       each rank joins (collCommInitFromEnv) and runs checked allreduces of 1024 floats
 *       until rank 0 has run SECONDS: element 0 carries rank 0's "stop" to every rank,
 *       so all ranks leave after the same call.  A rank stopped meanwhile (SIGSTOP)
 *       holds the others in their call until it goes on (SIGCONT); COLL_TIMEOUT_MS must
 *       be longer than the stop.
 *
 *   status_child --threads N SECONDS
 *       N ranks as threads of this process, looping the same way, while the main thread
 *       asks every rank's status (tools/job_status.c) again and again: each must answer
 *       for its own rank, with a call in progress or one done.  Every 50 calls each
 *       rank also splits its communicator in two and destroys the halves, so that
 *       communicators come and go under the responder.  After the ranks have destroyed
 *       their communicators, every listener must refuse.  For ASan and TSan.
 *
 * Exit status: 0, 1 on a failed check (named on stderr).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bootstrap.h"
#include "collective.h"
#include "internal.h"
#include "job_status.h"

#define COUNT 1024

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The loop of one rank: returns the number of calls, or -1 on a failure. */
static long rank_loop(collComm_t comm, int rank, int nranks, double seconds, bool churn)
{
    float *buf = malloc(COUNT * sizeof(float));
    if (buf == NULL)
        return -1;
    double end = now_s() + seconds;
    long calls = 0;
    for (;;) {
        buf[0] = rank == 0 && now_s() >= end ? 1.0f : 0.0f;
        for (int i = 1; i < COUNT; i++)
            buf[i] = (float)(rank + 1);
        collResult_t res = collAllReduce(buf, buf, COUNT, collFloat32, collSum, comm, NULL);
        calls++;
        if (res != collSuccess) {
            fprintf(stderr, "status_child: rank %d: allreduce #%ld: %s: %s\n", rank, calls,
                    collGetErrorString(res), collGetLastError(comm));
            free(buf);
            return -1;
        }
        float want = (float)nranks * (float)(nranks + 1) / 2.0f;
        if (buf[1] != want || buf[COUNT - 1] != want) {
            fprintf(stderr, "status_child: rank %d: allreduce #%ld gave %g, want %g\n", rank,
                    calls, (double)buf[1], (double)want);
            free(buf);
            return -1;
        }
        if (buf[0] != 0.0f)
            break;
        if (churn && calls % 50 == 0) {
            collComm_t half;
            res = collCommSplit(comm, rank % 2, rank, &half, NULL);
            if (res == collSuccess)
                res = collCommDestroy(half);
            if (res != collSuccess) {
                fprintf(stderr, "status_child: rank %d: split: %s\n", rank, collGetLastError(comm));
                free(buf);
                return -1;
            }
        }
    }
    free(buf);
    return calls;
}

struct thread_rank {
    int rank, nranks;
    double seconds;
    collUniqueId id;
    collComm_t comm;
    _Atomic int state; /* 0 initializing, 1 running, 2 destroying, 3 destroyed, -1 failed */
    pthread_t thread;
};

static void *thread_main(void *arg)
{
    struct thread_rank *t = arg;
    if (collCommInitRank(&t->comm, t->nranks, t->id, t->rank) != collSuccess) {
        fprintf(stderr, "status_child: rank %d: init: %s\n", t->rank, collGetLastError(NULL));
        atomic_store(&t->state, -1);
        return NULL;
    }
    atomic_store(&t->state, 1);
    long calls = rank_loop(t->comm, t->rank, t->nranks, t->seconds, true);
    /* From here its listener may close at any moment: no longer asked. */
    atomic_store(&t->state, 2);
    collCommDestroy(t->comm);
    atomic_store(&t->state, calls < 0 ? -1 : 3);
    return NULL;
}

static int run_threads(int n, double seconds)
{
    collUniqueId id;
    if (collGetUniqueId(&id) != collSuccess) {
        fprintf(stderr, "status_child: collGetUniqueId: %s\n", collGetLastError(NULL));
        return 1;
    }
    struct coll_id cid;
    memcpy(&cid, id.internal, sizeof(cid));
    struct thread_rank *t = calloc((size_t)n, sizeof(*t));
    struct coll_job_rank *ranks = calloc((size_t)n, sizeof(*ranks));
    struct coll_job_answer *a = calloc((size_t)n, sizeof(*a));
    if (t == NULL || ranks == NULL || a == NULL)
        return 1;
    for (int r = 0; r < n; r++) {
        t[r] = (struct thread_rank){.rank = r, .nranks = n, .seconds = seconds, .id = id};
        pthread_create(&t[r].thread, NULL, thread_main, &t[r]);
    }
    int failures = 0, rounds = 0, in_call = 0;
    bool up = false;
    while (!up) {
        up = true;
        for (int r = 0; r < n; r++) {
            int s = atomic_load(&t[r].state);
            failures += s < 0;
            up = up && s != 0;
        }
        if (failures > 0)
            break;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    if (failures == 0) {
        /* The comms are up: their listeners are fixed until destroy. */
        for (int r = 0; r < n; r++) {
            const struct coll_rank_info *pi = &t[r].comm->peers[r].info;
            ranks[r] = (struct coll_job_rank){.rank = r, .pid = pi->pid, .addr = pi->boot_addr,
                                              .addrlen = pi->boot_addrlen};
            snprintf(ranks[r].host, sizeof(ranks[r].host), "%s", pi->host);
        }
    }
    for (bool running = failures == 0; running;) {
        coll_job_status_ask(ranks, n, cid.secret, 2000, a);
        rounds++;
        running = false;
        for (int r = 0; r < n; r++) {
            int s = atomic_load(&t[r].state);
            running = running || s == 1;
            if (s != 1)
                continue; /* leaving since the ask began: may have answered or not */
            if (a[r].how != COLL_JOB_ANSWERED) {
                fprintf(stderr, "status_child: round %d: rank %d did not answer (%d)\n", rounds,
                        r, (int)a[r].how);
                failures++;
            } else if (a[r].rep.rank != r || a[r].rep.nranks != n || a[r].rep.error != 0) {
                fprintf(stderr, "status_child: round %d: rank %d answered rank %d of %d, "
                        "error %d\n", rounds, r, a[r].rep.rank, a[r].rep.nranks, a[r].rep.error);
                failures++;
            } else {
                in_call += a[r].rep.open > 0;
            }
        }
        /* Also from the printing side, into nowhere, while every rank runs. */
        bool all = true;
        for (int r = 0; r < n; r++)
            all = all && atomic_load(&t[r].state) == 1;
        FILE *null = all ? fopen("/dev/null", "w") : NULL;
        if (null != NULL) {
            (void)coll_job_status_report("status_child", ranks, n, cid.secret, 2000, rounds % 2,
                                         "threads", null);
            fclose(null);
        }
    }
    for (int r = 0; r < n; r++) {
        pthread_join(t[r].thread, NULL);
        failures += atomic_load(&t[r].state) != 3;
    }
    if (failures == 0) {
        coll_job_status_ask(ranks, n, cid.secret, 2000, a);
        for (int r = 0; r < n; r++) {
            if (a[r].how != COLL_JOB_REFUSED) {
                fprintf(stderr, "status_child: rank %d's listener still answers (%d) after "
                        "destroy\n", r, (int)a[r].how);
                failures++;
            }
        }
    }
    printf("status_child: %d rounds of status queries, %d answers in a call, %d failures\n",
           rounds, in_call, failures);
    free(t);
    free(ranks);
    free(a);
    return failures == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--threads") == 0)
        return run_threads(atoi(argv[2]), atof(argv[3]));
    if (argc != 2) {
        fprintf(stderr, "usage: status_child SECONDS | status_child --threads N SECONDS\n");
        return 2;
    }
    collComm_t comm;
    if (collCommInitFromEnv(&comm) != collSuccess) {
        fprintf(stderr, "status_child: init: %s\n", collGetLastError(NULL));
        return 1;
    }
    int rank, nranks;
    collCommUserRank(comm, &rank);
    collCommCount(comm, &nranks);
    long calls = rank_loop(comm, rank, nranks, atof(argv[1]), false);
    collCommDestroy(comm);
    if (calls < 0)
        return 1;
    printf("rank %d: %ld allreduces\n", rank, calls);
    return 0;
}
