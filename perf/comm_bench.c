/*
 * The cost of making communicators: the first, a split of it in halves, a
 * split into one, and a new communicator from a unique id rank 0 makes and
 * broadcasts over the first (as PyTorch's new_group makes a subgroup).
 *
 *   comm_bench -n 4 [-r REPS] [-k KIND]
 *
 * The ranks are processes forked from this one, joined by an id it makes, as
 * torchrun's are (no COLL_COMM_ID: under collrun every new id would name
 * collrun's one address, whose port rank 0 must bind again each time).
 *
 * Each is timed REPS times on every rank (from entry to return, the slowest
 * rank's time counted); rank 0 prints one line per kind with the median and
 * best in milliseconds.  perf/comm_bench.sh runs it for several rank counts.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "collective.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void check(collResult_t r, const char *what, collComm_t comm)
{
    if (r != collSuccess) {
        fprintf(stderr, "comm_bench: %s: %s (%s)\n", what, collGetErrorString(r),
                collGetLastError(comm));
        exit(1);
    }
}

#define KINDS 3
static const char *const kind_names[KINDS] = {"split-halves", "split-whole", "new-from-id"};

/* One communicator of kind k from comm, destroyed again; returns this rank's
 * milliseconds. */
static double make_one(collComm_t comm, int k, int rank)
{
    collComm_t sub = NULL;
    collUniqueId id;
    if (k == 2) {
        /* The id travels before the clock starts: the new communicator's cost
         * is what is timed. */
        if (rank == 0)
            check(collGetUniqueId(&id), "collGetUniqueId", comm);
        check(collBroadcast(&id, &id, sizeof(id), collUint8, 0, comm, NULL), "collBroadcast",
              comm);
    }
    check(collBarrier(comm, NULL), "collBarrier", comm);
    double t0 = now_ms();
    int nranks;
    check(collCommCount(comm, &nranks), "collCommCount", comm);
    if (k == 0)
        check(collCommSplit(comm, rank % 2, rank, &sub, NULL), "collCommSplit", comm);
    else if (k == 1)
        check(collCommSplit(comm, 0, rank, &sub, NULL), "collCommSplit", comm);
    else
        check(collCommInitRank(&sub, nranks, id, rank), "collCommInitRank", comm);
    double ms = now_ms() - t0;
    check(collCommDestroy(sub), "collCommDestroy", comm);
    return ms;
}

/* One rank: times the first communicator and then REPS of each kind. */
static int rank_main(collUniqueId root, int rank, int nranks, int reps, const char *only)
{
    collComm_t comm;
    double t0 = now_ms();
    check(collCommInitRank(&comm, nranks, root, rank), "collCommInitRank", NULL);
    double init_ms = now_ms() - t0;
    check(collAllReduce(&init_ms, &init_ms, 1, collDouble, collMax, comm, NULL), "collAllReduce",
          comm);
    if (rank == 0)
        printf("# %d ranks, %d repetitions; milliseconds, the slowest rank's\n"
               "%-13s %9s %9s\n%-13s %9.2f %9.2f\n", nranks, reps, "kind", "median", "best",
               "first", init_ms, init_ms);
    double *ms = malloc(sizeof(double) * (size_t)reps);
    if (ms == NULL)
        return 1;
    for (int k = 0; k < KINDS; k++) {
        if (only != NULL && strcmp(only, kind_names[k]) != 0)
            continue;
        for (int r = 0; r < reps; r++) {
            ms[r] = make_one(comm, k, rank);
            check(collAllReduce(&ms[r], &ms[r], 1, collDouble, collMax, comm, NULL),
                  "collAllReduce", comm);
        }
        qsort(ms, (size_t)reps, sizeof(double), cmp_double);
        if (rank == 0)
            printf("%-13s %9.2f %9.2f\n", kind_names[k], ms[reps / 2], ms[0]);
    }
    free(ms);
    fflush(stdout);
    check(collCommDestroy(comm), "collCommDestroy", NULL);
    return 0;
}

int main(int argc, char **argv)
{
    int reps = 10, nranks = 2;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-r") == 0 && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) {
            nranks = atoi(argv[++i]);
        } else if (strcmp(argv[i], "-k") == 0 && i + 1 < argc) {
            only = argv[++i];
        } else {
            fprintf(stderr, "usage: comm_bench [-n RANKS] [-r REPS] [-k split-halves|"
                            "split-whole|new-from-id]\n");
            return 2;
        }
    }
    if (reps < 1 || reps > 1000 || nranks < 1 || nranks > 64) {
        fprintf(stderr, "comm_bench: -r %d or -n %d is out of range ([1, 1000], [1, 64])\n",
                reps, nranks);
        return 2;
    }
    if (getenv("COLL_COMM_ID") != NULL) {
        fprintf(stderr, "comm_bench: run it without collrun and COLL_COMM_ID: it starts its "
                        "own ranks (-n)\n");
        return 2;
    }
    collUniqueId root;
    check(collGetUniqueId(&root), "collGetUniqueId", NULL);
    fflush(stdout);
    for (int r = 0; r < nranks; r++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("comm_bench: fork");
            return 1;
        }
        if (pid == 0)
            _exit(rank_main(root, r, nranks, reps, only));
    }
    int failed = 0, status;
    while (wait(&status) > 0)
        failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    return failed;
}
