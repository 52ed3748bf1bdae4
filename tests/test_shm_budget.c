/*
 * The shared-memory budget is the host's, not a communicator's
 * (transports/shm/ledger.c): every communicator and process on the host carves
 * its slot rings from one COLL_SHM_BUDGET_MB.
 *
 * Eight ranks (threads, or processes under collrun) with a 16 MiB budget and a
 * ledger of the test's own (COLL_SHM_LEDGER, so that other tests running beside it
 * do not count):
 *   1. B, split from the launcher's communicator, runs a checked all-to-all
 *      (256 KiB per peer): its rings take what the rings made before (the
 *      launcher's, and those the splits' own calls made) left, which brings
 *      the host to about the whole budget.
 *   2. C, split the same way, runs the same: little is left, so its rings shrink
 *      to the rest and then to the floor (2 slots of 4 KiB).  The shared memory of
 *      all ranks together, counted by the kernel (the distinct memfd segments of
 *      the library in /proc/PID/maps of every rank's process), must stay within
 *      the budget plus a floor ring per pair: with a budget per communicator, as
 *      before, B and C took 16 MiB each.
 *   3. B is destroyed: its rings leave the ledger.  D, split again, runs the
 *      all-to-all: it gets the room back (at least half of what B freed, and
 *      the host's total still within the bound).
 *
 *   test_shm_budget [--threads 8]      (COLL_SHM_BUDGET_MB=16, COLL_SHM_LEDGER set)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "launch.h"

#define PER_PEER (256 * 1024)
#define FLOOR_SEG (3 * 4096) /* 2 slots of 4 KiB and the control page */

/* Bytes of the distinct library segments that the processes pids[0..n) map. */
static uint64_t host_shm_bytes(const int64_t *pids, int n)
{
    enum { MAXSEG = 4096 };
    static unsigned long inodes[MAXSEG];
    static uint64_t sizes[MAXSEG];
    int nseg = 0;
    for (int p = 0; p < n; p++) {
        bool seen_pid = false;
        for (int q = 0; q < p; q++)
            seen_pid |= pids[q] == pids[p];
        if (seen_pid)
            continue;
        char path[64], line[512];
        snprintf(path, sizeof(path), "/proc/%lld/maps", (long long)pids[p]);
        FILE *f = fopen(path, "r");
        while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
            if (strstr(line, "libcollective-shm") == NULL)
                continue;
            unsigned long lo, hi, ino;
            if (sscanf(line, "%lx-%lx %*s %*s %*s %lu", &lo, &hi, &ino) != 3)
                continue;
            int i = 0;
            while (i < nseg && inodes[i] != ino)
                i++;
            if (i == nseg && nseg < MAXSEG) {
                inodes[nseg] = ino;
                sizes[nseg++] = 0;
            }
            if (i < nseg && hi - lo > sizes[i])
                sizes[i] = hi - lo;
        }
        if (f != NULL)
            fclose(f);
    }
    uint64_t sum = 0;
    for (int i = 0; i < nseg; i++)
        sum += sizes[i];
    return sum;
}

/* A checked all-to-all of PER_PEER bytes per peer on comm. */
static void alltoall(struct launch_rank *lr, collComm_t comm, const char *name)
{
    int n = lr->nranks;
    size_t count = PER_PEER / sizeof(int32_t);
    int32_t *in = calloc((size_t)n, PER_PEER), *out = calloc((size_t)n, PER_PEER);
    if (in == NULL || out == NULL)
        launch_fatal(lr, "out of memory");
    for (int j = 0; j < n; j++)
        for (size_t k = 0; k < count; k++)
            in[(size_t)j * count + k] = (int32_t)(lr->rank * 1000003 + j * 7919 + (int)k);
    collResult_t res = collAllToAll(in, out, count, collInt32, comm, NULL);
    if (res != collSuccess)
        launch_fatal(lr, "alltoall on %s: %s", name, collGetLastError(comm));
    int wrong = 0;
    for (int i = 0; i < n; i++)
        for (size_t k = 0; k < count; k++)
            wrong += out[(size_t)i * count + k] != (int32_t)(i * 1000003 + lr->rank * 7919 + (int)k);
    LR_CHECK(lr, wrong == 0, "alltoall on %s: %d wrong elements", name, wrong);
    free(in);
    free(out);
}

static collComm_t split(struct launch_rank *lr)
{
    collComm_t c = NULL;
    if (collCommSplit(lr->comm, 0, lr->rank, &c, NULL) != collSuccess || c == NULL)
        launch_fatal(lr, "collCommSplit: %s", collGetLastError(lr->comm));
    return c;
}

/* Every rank's pid, then (rank 0) the host's total; all ranks in step. */
static uint64_t measure(struct launch_rank *lr, int64_t *pids)
{
    int64_t me = getpid();
    if (collAllGather(&me, pids, 1, collInt64, lr->comm, NULL) != collSuccess)
        launch_fatal(lr, "allgather: %s", collGetLastError(lr->comm));
    uint64_t total = lr->rank == 0 ? host_shm_bytes(pids, lr->nranks) : 0;
    /* The others wait until rank 0 has looked. */
    int64_t x = 0;
    if (collAllReduce(&x, &x, 1, collInt64, collSum, lr->comm, NULL) != collSuccess)
        launch_fatal(lr, "allreduce: %s", collGetLastError(lr->comm));
    return total;
}

static void body(struct launch_rank *lr)
{
    const char *b = getenv("COLL_SHM_BUDGET_MB");
    const char *ledger = getenv("COLL_SHM_LEDGER");
    if (b == NULL || ledger == NULL || lr->nranks < 4)
        launch_fatal(lr, "run with COLL_SHM_BUDGET_MB, COLL_SHM_LEDGER and 4 ranks or more");
    uint64_t budget = (uint64_t)atoll(b) << 20;
    uint64_t pairs = (uint64_t)lr->nranks * (uint64_t)(lr->nranks - 1);
    /* Each communicator (the launcher's too) may add a floor ring per pair past
     * the budget, and the launcher's few rings take their share. */
    uint64_t bound = budget + 4 * pairs * FLOOR_SEG;
    int64_t *pids = calloc((size_t)lr->nranks, sizeof(*pids));
    if (pids == NULL)
        launch_fatal(lr, "out of memory");

    collComm_t cb = split(lr), cc = split(lr);
    /* The launcher's communicator makes its rings in the first measure (its
     * allgather and allreduce): the second one is the base. */
    (void)measure(lr, pids);
    uint64_t base = measure(lr, pids);
    alltoall(lr, cb, "B");
    uint64_t after_b = measure(lr, pids);
    alltoall(lr, cc, "C");
    uint64_t after_c = measure(lr, pids);
    uint64_t b_took = after_b - base;
    if (lr->rank == 0) {
        printf("budget %llu KiB, bound %llu KiB: before B %llu KiB, after B %llu KiB, after C "
               "%llu KiB\n", (unsigned long long)(budget >> 10),
               (unsigned long long)(bound >> 10), (unsigned long long)(base >> 10),
               (unsigned long long)(after_b >> 10), (unsigned long long)(after_c >> 10));
        LR_CHECK(lr, after_b >= budget - budget / 8,
                 "B's rings left the host at %llu of %llu bytes", (unsigned long long)after_b,
                 (unsigned long long)budget);
        LR_CHECK(lr, after_c <= bound, "B and C together map %llu bytes, over %llu",
                 (unsigned long long)after_c, (unsigned long long)bound);
    }
    if (collCommDestroy(cb) != collSuccess)
        launch_fatal(lr, "collCommDestroy(B) failed");
    uint64_t after_free = measure(lr, pids);
    collComm_t cd = split(lr);
    alltoall(lr, cd, "D");
    uint64_t after_d = measure(lr, pids);
    if (lr->rank == 0) {
        printf("B (%llu KiB) destroyed: %llu KiB; after D %llu KiB\n",
               (unsigned long long)(b_took >> 10), (unsigned long long)(after_free >> 10),
               (unsigned long long)(after_d >> 10));
        LR_CHECK(lr, after_free + b_took / 2 <= after_c, "destroying B freed only %llu bytes",
                 (unsigned long long)(after_c - after_free));
        uint64_t freed = after_c - after_free;
        LR_CHECK(lr, after_d >= after_free + freed / 2,
                 "D did not get the room B left: %llu bytes after it, %llu before (B freed %llu)",
                 (unsigned long long)after_d, (unsigned long long)after_free,
                 (unsigned long long)freed);
        LR_CHECK(lr, after_d <= bound, "C and D together map %llu bytes, over %llu",
                 (unsigned long long)after_d, (unsigned long long)bound);
    }
    collCommDestroy(cc);
    collCommDestroy(cd);
    free(pids);
    if (lr->rank == 0) {
        char path[300];
        snprintf(path, sizeof(path), "/dev/shm/%s", ledger);
        unlink(path);
    }
}

int main(int argc, char **argv)
{
    return launch_main(argc, argv, body, NULL);
}
