/*
 * The smallest complete use of libcollective: average a "gradient" over all ranks.
 *
 *   collrun -n 4 examples/allreduce_example          (or torchrun, mpirun, srun)
 *
 * Every rank fills its buffer with its own rank, averages it in place with
 * collAllReduce(..., collAvg, ...) and checks that it holds (n - 1) / 2.
 */
#include <stdio.h>
#include <stdlib.h>

#include <collective.h>

#define CHECK_COLL(call)                                                                  \
    do {                                                                                  \
        collResult_t r_ = (call);                                                         \
        if (r_ != collSuccess) {                                                          \
            fprintf(stderr, "%s failed: %s: %s\n", #call, collGetErrorString(r_),         \
                    collGetLastError(comm));                                              \
            return 1;                                                                     \
        }                                                                                 \
    } while (0)

int main(void)
{
    collComm_t comm = NULL;
    int rank, nranks;
    CHECK_COLL(collCommInitFromEnv(&comm));
    CHECK_COLL(collCommUserRank(comm, &rank));
    CHECK_COLL(collCommCount(comm, &nranks));

    enum { N = 1 << 20 };
    float *grad = malloc(N * sizeof(float));
    if (grad == NULL)
        return 1;
    for (size_t i = 0; i < N; i++)
        grad[i] = (float)rank;
    CHECK_COLL(collAllReduce(grad, grad, N, collFloat, collAvg, comm, NULL));

    float want = (float)(nranks - 1) / 2.0f;
    size_t wrong = 0;
    for (size_t i = 0; i < N; i++)
        wrong += grad[i] != want;
    printf("rank %d of %d: average %g, %zu wrong\n", rank, nranks, (double)grad[0], wrong);
    free(grad);
    CHECK_COLL(collCommDestroy(comm));
    return wrong != 0;
}
