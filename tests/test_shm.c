/*
 * Shared-memory transport: what the sweeps do not cover.
 *
 * - Out of shared memory: with RLIMIT_FSIZE below a segment's size the kernel
 *   refuses to reserve it (as a full /dev/shm would); two ranks (threads) must get
 *   collSystemError from collCommInitRank, fast, with a message that names shared
 *   memory and /dev/shm, and nothing may be left mapped.
 *
 *   test_shm
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "launch.h"

#define NRANKS 2

struct rank_arg {
    int rank;
    collUniqueId id;
    collResult_t res;
    double secs;
    char msg[512];
};

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


int main(void)
{
    int failures = 0;
    setenv("COLL_TRANSPORTS", "shm", 1);
    setenv("COLL_TIMEOUT_MS", "5000", 1);
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
    struct rank_arg args[NRANKS];
    collUniqueId id;
    if (collGetUniqueId(&id) != collSuccess) {
        fprintf(stderr, "collGetUniqueId: %s\n", collGetLastError(NULL));
        return 1;
    }
    pthread_t th[NRANKS];
    for (int r = 0; r < NRANKS; r++) {
        args[r] = (struct rank_arg){.rank = r, .id = id};
        pthread_create(&th[r], NULL, rank_main, &args[r]);
    }
    for (int r = 0; r < NRANKS; r++)
        pthread_join(th[r], NULL);
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
    if (launch_maps_shm_segment()) {
        fprintf(stderr, "FAIL: a segment is still mapped\n");
        failures++;
    }
    return failures ? 1 : 0;
}
