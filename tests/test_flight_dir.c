/*
 * One rank of the COLL_FLIGHT_DIR test (tests/test_flight_dir.sh), under collrun:
 *
 *   collrun -n N test_flight_dir --mode behind|exit [--victim R] [--calls K]
 *
 * Every rank runs K allreduces of 4096 float32 (default 3) and checks them.  Then:
 *
 *   behind  rank R skips allreduce #K+1: it waits until the other ranks' flight
 *           records are in COLL_FLIGHT_DIR (the others fail that allreduce by their
 *           timeout or by the failure notice), then calls collCommAbort, which
 *           writes its own record (completed #K, nothing in progress).
 *   exit    rank R exits after allreduce #K without a word, as a crash would; the
 *           others fail allreduce #K+1 and write their records, and R writes none.
 *
 * The other ranks call allreduce #K+1, which must fail, and destroy the
 * communicator.  Each rank prints one line: "rank 1: allreduce #4: collTimeout".
 * Exit status: 0, or 1 when a check failed (an allreduce before the fault went
 * wrong, the one after it succeeded, or the records never came).
 */
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "collective.h"

#define COUNT 4096
#define WAIT_S 30 /* how long the victim of "behind" waits for the others' records */

/* Files of dir whose name starts with "flight-" and ends with ".txt". */
static int count_records(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, "flight-", 7) == 0 && len > 11 &&
            strcmp(e->d_name + len - 4, ".txt") == 0)
            n++;
    }
    closedir(d);
    return n;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    const char *mode = NULL;
    int victim = 2, calls = 3;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--mode") == 0 && i + 1 < argc) {
            mode = argv[++i];
        } else if (strcmp(argv[i], "--victim") == 0 && i + 1 < argc) {
            victim = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--calls") == 0 && i + 1 < argc) {
            calls = atoi(argv[++i]);
        } else {
            mode = NULL;
            break;
        }
    }
    if (mode == NULL || (strcmp(mode, "behind") != 0 && strcmp(mode, "exit") != 0) ||
        calls < 1) {
        fprintf(stderr, "usage: %s --mode behind|exit [--victim R] [--calls K]\n", argv[0]);
        return 2;
    }
    collComm_t comm;
    if (collCommInitFromEnv(&comm) != collSuccess) {
        fprintf(stderr, "init failed: %s\n", collGetLastError(NULL));
        return 1;
    }
    int rank = 0, n = 0;
    collCommUserRank(comm, &rank);
    collCommCount(comm, &n);
    float *send = malloc(COUNT * sizeof(float)), *recv = malloc(COUNT * sizeof(float));
    if (send == NULL || recv == NULL)
        return 1;
    for (int i = 0; i < COUNT; i++)
        send[i] = (float)(rank + 1);
    const float want = (float)n * (float)(n + 1) / 2.0f;
    for (int c = 1; c <= calls; c++) {
        collResult_t r = collAllReduce(send, recv, COUNT, collFloat32, collSum, comm, NULL);
        if (r != collSuccess || recv[0] != want || recv[COUNT - 1] != want) {
            fprintf(stderr, "rank %d: allreduce #%d: %s, %g (want %g): %s\n", rank, c,
                    collGetErrorString(r), (double)recv[0], (double)want,
                    collGetLastError(comm));
            return 1;
        }
    }
    int rc = 0;
    if (rank == victim && strcmp(mode, "exit") == 0) {
        printf("rank %d: exits after allreduce #%d\n", rank, calls);
        fflush(stdout);
        _exit(0); /* no destroy: its connections close with the process */
    } else if (rank == victim) {
        const char *dir = getenv("COLL_FLIGHT_DIR");
        double deadline = now_s() + WAIT_S;
        while (dir != NULL && count_records(dir) < n - 1 && now_s() < deadline)
            usleep(20000);
        if (dir == NULL || count_records(dir) < n - 1) {
            fprintf(stderr, "rank %d: the other ranks' records did not come to %s in %d s\n",
                    rank, dir ? dir : "(COLL_FLIGHT_DIR unset)", WAIT_S);
            rc = 1;
        }
        printf("rank %d: skipped allreduce #%d; abort: %s\n", rank, calls + 1,
               collGetErrorString(collCommAbort(comm)));
    } else {
        collResult_t r = collAllReduce(send, recv, COUNT, collFloat32, collSum, comm, NULL);
        printf("rank %d: allreduce #%d: %s\n", rank, calls + 1, collGetErrorString(r));
        if (r == collSuccess) {
            fprintf(stderr, "rank %d: allreduce #%d succeeded without rank %d\n", rank,
                    calls + 1, victim);
            rc = 1;
        }
        collCommDestroy(comm);
    }
    free(send);
    free(recv);
    return rc;
}
