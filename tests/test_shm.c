/*
 * Shared-memory transport: what the sweeps do not cover.
 *
 * - Out of shared memory: with RLIMIT_FSIZE below a segment's size the kernel
 *   refuses to reserve it (as a full /dev/shm would); two ranks (threads) must get
 *   collSystemError from collCommInitRank, fast, with a message that names shared
 *   memory and /dev/shm, and nothing may be left mapped.
 *
 * - A sender that leaves right after its last send: rank 1 sends (8 B, or 6 MiB:
 *   more than the slots hold) and destroys its communicator at once, which closes
 *   its socket after a delay of 0 to 2 ms while rank 0 waits to receive, and two
 *   threads keep the cores busy so that the ranks are preempted anywhere.  Every byte published
 *   before the close must arrive, never "connection closed by peer" (a receiver
 *   once saw the close between an empty look at the slots and the bytes landing).
 *   40 rounds, so that the close lands at different points of the receiver's wait.
 *
 * - collMemAlloc / collMemFree: bad arguments are collInvalidArgument naming the
 *   argument, NULL frees nothing, a double free is refused, and the out-of-memory
 *   case above gives collSystemError naming /dev/shm.
 * - Mixed buffers: rank 0's from collMemAlloc, rank 1's from malloc: a 2 MiB
 *   allreduce must be right and must not take the direct path.
 * - After such a call both ranks use collMemAlloc buffers for 70 more: every
 *   result right, the next 63 calls on the slots (the back-off after a fallback,
 *   kept alike on both ranks, or they would stall), the 64th and later direct.
 * - Rings mapped in at once: after one 1 MiB allgather, six more, which go
 *   round the whole ring (16 x 256 KiB), take no page faults in the slots.  A
 *   slot page first touched inside a call costs a fault per 4 KiB page (the
 *   first eight such calls took 3-4 times as long, and the planner's bandwidth
 *   probe at init measured that); buffers are touched beforehand, so the
 *   faults counted (RUSAGE_THREAD) are the slots'.
 *
 *   test_shm
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "launch.h"

#define NRANKS 2

/* One rank (a thread) of a two-rank scenario: what it is given, what it saw. */
struct rank_arg {
    int rank;
    collUniqueId id;
    size_t bytes;      /* sender leaves: message size */
    int delay_us;      /* sender leaves: the sender's delay before it sends */
    collResult_t res;
    double secs;       /* in collCommInitRank */
    bool wrong;        /* wrong data arrived */
    const char *algo;  /* of its allreduce */
    char msg[512];
};

/* Runs fn as ranks 0 and 1 of a fresh unique id, each on a thread with its
 * args[r] (rank and id filled in here), and waits for both.  False when no id. */
static bool run_pair(void *(*fn)(void *), struct rank_arg args[NRANKS])
{
    collUniqueId id;
    if (collGetUniqueId(&id) != collSuccess) {
        fprintf(stderr, "collGetUniqueId: %s\n", collGetLastError(NULL));
        return false;
    }
    pthread_t th[NRANKS];
    for (int r = 0; r < NRANKS; r++) {
        args[r].rank = r;
        args[r].id = id;
        pthread_create(&th[r], NULL, fn, &args[r]);
    }
    for (int r = 0; r < NRANKS; r++)
        pthread_join(th[r], NULL);
    return true;
}

static void *rank_main(void *p)
{
    struct rank_arg *a = p;
    collComm_t comm = NULL;
    double t0 = launch_now();
    a->res = collCommInitRank(&comm, NRANKS, a->id, a->rank);
    a->secs = launch_now() - t0;
    snprintf(a->msg, sizeof(a->msg), "%s", collGetLastError(NULL));
    if (a->res == collSuccess)
        collCommDestroy(comm);
    return NULL;
}

static void *leave_main(void *p)
{
    struct rank_arg *a = p;
    collComm_t comm = NULL;
    unsigned char *buf = malloc(a->bytes);
    a->res = collCommInitRank(&comm, NRANKS, a->id, a->rank);
    if (a->res == collSuccess && buf != NULL) {
        if (a->rank == 1) {
            for (size_t i = 0; i < a->bytes; i++)
                buf[i] = (unsigned char)(i * 7 + 3);
            usleep((useconds_t)a->delay_us);
            a->res = collSend(buf, a->bytes, collUint8, 0, comm, NULL);
        } else {
            memset(buf, 0, a->bytes);
            a->res = collRecv(buf, a->bytes, collUint8, 1, comm, NULL);
            for (size_t i = 0; a->res == collSuccess && i < a->bytes; i++)
                if (buf[i] != (unsigned char)(i * 7 + 3)) {
                    a->wrong = true;
                    break;
                }
        }
    }
    snprintf(a->msg, sizeof(a->msg), "%s", collGetLastError(comm));
    if (comm != NULL)
        collCommDestroy(comm);
    free(buf);
    return NULL;
}

static void *burn_main(void *p)
{
    atomic_bool *stop = p;
    while (!atomic_load_explicit(stop, memory_order_relaxed))
        ;
    return NULL;
}

static int expect(bool ok, const char *what)
{
    if (!ok)
        fprintf(stderr, "FAIL: %s (last error: %s)\n", what, collGetLastError(NULL));
    return ok ? 0 : 1;
}

static int check_mem_api(void)
{
    int failures = 0;
    void *p = (void *)&failures;
    int local;
    failures += expect(collMemAlloc(NULL, 16) == collInvalidArgument &&
                       strstr(collGetLastError(NULL), "ptr") != NULL,
                       "collMemAlloc(NULL, 16) is collInvalidArgument naming ptr");
    failures += expect(collMemAlloc(&p, 0) == collInvalidArgument && p == NULL &&
                       strstr(collGetLastError(NULL), "size") != NULL,
                       "collMemAlloc(&p, 0) is collInvalidArgument naming size, p NULL");
    failures += expect(collMemFree(NULL) == collSuccess, "collMemFree(NULL) is collSuccess");
    failures += expect(collMemFree(&local) == collInvalidArgument,
                       "collMemFree of a stack address is collInvalidArgument");
    failures += expect(collMemAlloc(&p, 100) == collSuccess && p != NULL,
                       "collMemAlloc(&p, 100) succeeds");
    if (p != NULL && p != (void *)&failures) {
        memset(p, 0x5a, 4096); /* a whole page is there */
        failures += expect(collMemFree(p) == collSuccess, "collMemFree(p) succeeds");
        failures += expect(collMemFree(p) == collInvalidArgument, "a second collMemFree(p) is "
                           "collInvalidArgument");
    }
    printf("collMemAlloc / collMemFree arguments: %d failure(s)\n", failures);
    return failures;
}

#define MIXED_COUNT (512 * 1024) /* floats: 2 MiB */

static void *mixed_main(void *p)
{
    struct rank_arg *a = p;
    collComm_t comm = NULL;
    float *buf = NULL;
    void *m = NULL;
    if (a->rank == 0 && collMemAlloc(&m, MIXED_COUNT * sizeof(float)) == collSuccess)
        buf = m;
    else if (a->rank != 0)
        buf = malloc(MIXED_COUNT * sizeof(float));
    a->res = buf != NULL ? collCommInitRank(&comm, NRANKS, a->id, a->rank) : collSystemError;
    if (a->res == collSuccess) {
        for (size_t i = 0; i < MIXED_COUNT; i++)
            buf[i] = (float)(i % 1000) + (float)a->rank;
        a->res = collAllReduce(buf, buf, MIXED_COUNT, collFloat32, collSum, comm, NULL);
        a->algo = coll_comm_last_algo(comm);
        for (size_t i = 0; a->res == collSuccess && i < MIXED_COUNT; i++)
            if (buf[i] != 2.0f * (float)(i % 1000) + 1.0f) {
                a->wrong = true;
                break;
            }
    }
    snprintf(a->msg, sizeof(a->msg), "%s", collGetLastError(comm));
    if (comm != NULL)
        collCommDestroy(comm);
    if (m != NULL)
        collMemFree(m);
    else
        free(buf);
    return NULL;
}

#define BACKOFF_CALLS 70

static void *backoff_main(void *p)
{
    struct rank_arg *a = p;
    collComm_t comm = NULL;
    void *m = NULL;
    float *plain = malloc(MIXED_COUNT * sizeof(float));
    if (collMemAlloc(&m, MIXED_COUNT * sizeof(float)) != collSuccess || plain == NULL) {
        a->res = collSystemError;
        free(plain);
        collMemFree(m);
        return NULL;
    }
    a->res = collCommInitRank(&comm, NRANKS, a->id, a->rank);
    for (int call = -1; call < BACKOFF_CALLS && a->res == collSuccess; call++) {
        /* call -1: rank 1 on malloc memory, which makes both fall back */
        float *buf = call < 0 && a->rank == 1 ? plain : m;
        for (size_t i = 0; i < MIXED_COUNT; i++)
            buf[i] = (float)((i + (size_t)call) % 1000) + (float)a->rank;
        a->res = collAllReduce(buf, buf, MIXED_COUNT, collFloat32, collSum, comm, NULL);
        for (size_t i = 0; a->res == collSuccess && i < MIXED_COUNT; i++)
            if (buf[i] != 2.0f * (float)((i + (size_t)call) % 1000) + 1.0f) {
                a->wrong = true;
                break;
            }
        bool direct = strcmp(coll_comm_last_algo(comm), "direct") == 0;
        if (a->res == collSuccess && direct != (call >= 63)) {
            snprintf(a->msg, sizeof(a->msg), "call %d after the fallback ran %s", call,
                     coll_comm_last_algo(comm));
            a->wrong = true;
            break;
        }
    }
    if (!a->wrong)
        snprintf(a->msg, sizeof(a->msg), "%s", collGetLastError(comm));
    if (comm != NULL)
        collCommDestroy(comm);
    collMemFree(m);
    free(plain);
    return NULL;
}

static int check_backoff(void)
{
    int failures = 0;
    struct rank_arg args[NRANKS] = {{0}};
    if (!run_pair(backoff_main, args))
        return 1;
    for (int r = 0; r < NRANKS; r++)
        if (args[r].res != collSuccess || args[r].wrong) {
            fprintf(stderr, "FAIL: back-off after a fallback: rank %d: %s: %s\n", r,
                    collGetErrorString(args[r].res), args[r].msg);
            failures++;
        }
    printf("back-off: %d calls on collMemAlloc after a fallback, %d failure(s)\n",
           BACKOFF_CALLS, failures);
    return failures;
}

#define WARM_BYTES (1u << 20) /* per rank and call */
#define WARM_CALLS 6           /* 6 MiB each way: more than the 4 MiB ring */

static void *warm_main(void *p)
{
    struct rank_arg *a = p;
    collComm_t comm = NULL;
    unsigned char *send = malloc(WARM_BYTES), *recv = malloc(2 * WARM_BYTES);
    a->res = send && recv ? collCommInitRank(&comm, NRANKS, a->id, a->rank) : collSystemError;
    if (a->res == collSuccess) {
        memset(send, a->rank + 1, WARM_BYTES);
        memset(recv, 0, 2 * WARM_BYTES);
        /* the first large message maps the ring in */
        a->res = collAllGather(send, recv, WARM_BYTES, collUint8, comm, NULL);
        struct rusage before, after;
        getrusage(RUSAGE_THREAD, &before);
        for (int call = 0; call < WARM_CALLS && a->res == collSuccess; call++)
            a->res = collAllGather(send, recv, WARM_BYTES, collUint8, comm, NULL);
        getrusage(RUSAGE_THREAD, &after);
        a->secs = (double)(after.ru_minflt - before.ru_minflt); /* faults, not seconds */
        for (size_t i = 0; a->res == collSuccess && i < 2 * WARM_BYTES; i++)
            if (recv[i] != (unsigned char)(i / WARM_BYTES + 1)) {
                a->wrong = true;
                break;
            }
    }
    snprintf(a->msg, sizeof(a->msg), "%s", collGetLastError(comm));
    if (comm != NULL)
        collCommDestroy(comm);
    free(send);
    free(recv);
    return NULL;
}

static int check_warm_rings(void)
{
    int failures = 0;
    struct rank_arg args[NRANKS] = {{0}};
    if (!run_pair(warm_main, args))
        return 1;
    for (int r = 0; r < NRANKS; r++) {
        const struct rank_arg *a = &args[r];
        /* A cold 4 MiB ring is 1024 pages to write at the sender; what is left
         * is the odd fault of the runtime (stacks, the allocator). */
        if (a->res != collSuccess || a->wrong || a->secs > 64) {
            fprintf(stderr, "FAIL: warm rings: rank %d: %s, %s, %.0f page faults in %d "
                    "allgathers of %u B: %s\n", r, collGetErrorString(a->res),
                    a->wrong ? "wrong data" : "data right", a->secs, WARM_CALLS,
                    WARM_BYTES, a->msg);
            failures++;
        }
    }
    printf("rings mapped in at once: %.0f and %.0f page faults in %d allgathers, "
           "%d failure(s)\n", args[0].secs, args[1].secs, WARM_CALLS, failures);
    return failures;
}

static int check_mixed_buffers(void)
{
    int failures = 0;
    struct rank_arg args[NRANKS] = {{.algo = "none"}, {.algo = "none"}};
    if (!run_pair(mixed_main, args))
        return 1;
    for (int r = 0; r < NRANKS; r++) {
        const struct rank_arg *a = &args[r];
        if (a->res != collSuccess || a->wrong || strcmp(a->algo, "direct") == 0) {
            fprintf(stderr, "FAIL: mixed buffers: rank %d: %s, %s, algorithm %s: %s\n", r,
                    collGetErrorString(a->res), a->wrong ? "wrong sums" : "right sums",
                    a->algo, a->msg);
            failures++;
        }
    }
    printf("collMemAlloc on rank 0 only: 2 MiB allreduce ran %s, %d failure(s)\n",
           args[0].algo, failures);
    return failures;
}

/* The sender leaves as soon as its send is complete; the receiver must still get
 * it all.  Returns the failures. */
static int check_sender_leaves(void)
{
    static const int delays_us[] = {0, 0, 50, 300, 2000};
    int failures = 0;
    /* Two threads that only burn the cores: the ranks are preempted at any point,
     * as on a loaded host, which widens the window between a look and the next. */
    pthread_t burn[2];
    atomic_bool stop = false;
    for (int i = 0; i < 2; i++)
        pthread_create(&burn[i], NULL, burn_main, &stop);
    for (int round = 0; round < 40; round++) {
        struct rank_arg args[NRANKS];
        for (int r = 0; r < NRANKS; r++)
            args[r] = (struct rank_arg){.bytes = round % 2 ? 6u << 20 : 8,
                                        .delay_us = delays_us[round % 5]};
        if (!run_pair(leave_main, args)) {
            failures++;
            break;
        }
        for (int r = 0; r < NRANKS; r++) {
            const struct rank_arg *a = &args[r];
            if (a->res != collSuccess || a->wrong) {
                fprintf(stderr, "FAIL: sender leaves, round %d (%zu B, receiver waits %d us): "
                        "rank %d: %s: %s\n", round, a->bytes, a->delay_us, r,
                        a->wrong ? "wrong bytes" : collGetErrorString(a->res), a->msg);
                failures++;
            }
        }
    }
    atomic_store(&stop, true);
    for (int i = 0; i < 2; i++)
        pthread_join(burn[i], NULL);
    printf("sender leaves right after its send: 40 rounds, %d failure(s)\n", failures);
    return failures;
}

int main(void)
{
    int failures = 0;
    setenv("COLL_TRANSPORTS", "shm", 1);
    setenv("COLL_TIMEOUT_MS", "5000", 1);
    failures += check_sender_leaves();
    failures += check_mem_api();
    failures += check_mixed_buffers();
    failures += check_backoff();
    failures += check_warm_rings();
    /* A segment is 4 KiB of control and 16 x 256 KiB of slots: 1 MiB is too small,
     * and the kernel's SIGXFSZ is ignored so that the call fails with EFBIG. */
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {.rlim_cur = 1 << 20, .rlim_max = RLIM_INFINITY};
    if (getrlimit(RLIMIT_FSIZE, &rl) == 0) {
        rl.rlim_cur = 1 << 20;
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0) {
            perror("setrlimit");
            return 1;
        }
    }
    struct rank_arg args[NRANKS] = {{0}};
    if (!run_pair(rank_main, args))
        return 1;
    for (int r = 0; r < NRANKS; r++) {
        const struct rank_arg *a = &args[r];
        printf("rank %d: %s in %.2f s: %s\n", r, collGetErrorString(a->res), a->secs, a->msg);
        if (a->res != collSystemError) {
            fprintf(stderr, "FAIL: rank %d: %s, want %s\n", r, collGetErrorString(a->res),
                    collGetErrorString(collSystemError));
            failures++;
        }
        if (!strstr(a->msg, "/dev/shm") || !strstr(a->msg, "shared memory")) {
            fprintf(stderr, "FAIL: rank %d: the message names neither shared memory nor "
                    "/dev/shm\n", r);
            failures++;
        }
        if (a->secs > 4.0) {
            fprintf(stderr, "FAIL: rank %d took %.2f s to fail\n", r, a->secs);
            failures++;
        }
    }
    void *q = NULL;
    collResult_t qr = collMemAlloc(&q, 4 << 20);
    failures += expect(qr == collSystemError && q == NULL &&
                       strstr(collGetLastError(NULL), "/dev/shm") != NULL,
                       "collMemAlloc of 4 MiB over RLIMIT_FSIZE is collSystemError naming "
                       "/dev/shm");
    if (launch_maps_shm_segment()) {
        fprintf(stderr, "FAIL: a segment is still mapped\n");
        failures++;
    }
    return failures ? 1 : 0;
}
