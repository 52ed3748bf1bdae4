/*
 * A rank under torchrun for tests/test_torchrun.sh: makes two communicators with
 * collCommInitFromEnv, one after the other (under torchrun's agent store, keys
 * root_0 and root_1 of this attempt), runs an int32 sum allreduce on each and
 * prints one line with both results:
 *
 *   torchrun_child: rank R of N attempt A: sums S1 S2: ok
 *
 * With TORCHRUN_CHILD_FAIL_ATTEMPT0=1 the last rank of attempt 0 exits 3 once both
 * communicators are up, so that torchrun (--max-restarts 1) starts the job again:
 * attempt 1 must not find attempt 0's keys, whose roots are gone.  Rank 0 of a
 * later attempt starts a second late, so that the others look for the key first:
 * were attempt 0's key theirs too, they would take its dead root.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <collective.h>

static int make_and_sum(int scale, int *rank_p, int *n_p, int32_t *sum_p)
{
    collComm_t comm = NULL;
    collResult_t r = collCommInitFromEnv(&comm);
    if (r != collSuccess) {
        fprintf(stderr, "torchrun_child: collCommInitFromEnv: %s: %s\n", collGetErrorString(r),
                collGetLastError(NULL));
        return 1;
    }
    collCommUserRank(comm, rank_p);
    collCommCount(comm, n_p);
    int32_t v = (*rank_p + 1) * scale;
    r = collAllReduce(&v, sum_p, 1, collInt32, collSum, comm, NULL);
    if (r != collSuccess) {
        fprintf(stderr, "torchrun_child: rank %d: allreduce: %s: %s\n", *rank_p,
                collGetErrorString(r), collGetLastError(comm));
        collCommDestroy(comm);
        return 1;
    }
    return collCommDestroy(comm) == collSuccess ? 0 : 1;
}

int main(void)
{
    const char *attempt_s = getenv("TORCHELASTIC_RESTART_COUNT");
    const char *fail = getenv("TORCHRUN_CHILD_FAIL_ATTEMPT0");
    int attempt = attempt_s ? atoi(attempt_s) : -1;
    int rank = -1, n = -1, rank2 = -1, n2 = -1;
    int32_t sum1 = 0, sum2 = 0;
    const char *env_rank = getenv("RANK");
    if (fail != NULL && attempt > 0 && env_rank != NULL && strcmp(env_rank, "0") == 0)
        sleep(1);
    if (make_and_sum(1, &rank, &n, &sum1) != 0 || make_and_sum(10, &rank2, &n2, &sum2) != 0)
        return 1;
    if (fail != NULL && strcmp(fail, "1") == 0 && attempt == 0 && rank == n - 1) {
        printf("torchrun_child: rank %d of %d attempt 0: exits 3 for the restart\n", rank, n);
        return 3;
    }
    int32_t want = n * (n + 1) / 2;
    bool ok = rank2 == rank && n2 == n && sum1 == want && sum2 == 10 * want;
    printf("torchrun_child: rank %d of %d attempt %d: sums %d %d: %s\n", rank, n, attempt,
           (int)sum1, (int)sum2, ok ? "ok" : "WRONG");
    return ok ? 0 : 1;
}
