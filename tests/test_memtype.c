/* Memory types at the API boundary, with a CUDA driver loaded that has
 * cuPointerGetAttribute but not the calls that device buffers are staged with
 * (tests/fake_cuda.c built with FAKE_CUDA_POINTER_ONLY, linked in as
 * libcuda.so.1): a buffer it calls device memory is refused with
 * collUnhandledCudaError naming the call, the buffer and the missing driver
 * call, by every call that takes one; managed memory, which the CPU reaches,
 * and host memory work.  On one rank (collCommInitRank with a fresh id).
 * tests/test_device.c runs device buffers on a complete stand-in driver. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "collective.h"
#include "harness.h"
#include "memtype.h"

void fake_cuda_set(uintptr_t dev_lo, uintptr_t dev_hi, uintptr_t man_lo, uintptr_t man_hi);

#define N 1024

static void refused(collComm_t comm, collResult_t r, const char *fn, const char *buf)
{
    const char *msg = collGetLastError(comm);
    CHECK_MSG(r == collUnhandledCudaError, "%s on device memory: %s", fn, collGetErrorString(r));
    CHECK_MSG(strstr(msg, fn) && strstr(msg, buf) && strstr(msg, "CUDA device memory") &&
                  strstr(msg, "lacks cuCtxGetCurrent"),
              "%s: message '%s' names neither the call, %s nor the memory", fn, msg, buf);
}

int main(void)
{
    size_t bytes = 4 * N * sizeof(float);
    char *dev = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *man = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(dev != MAP_FAILED && man != MAP_FAILED);
    fake_cuda_set((uintptr_t)dev, (uintptr_t)dev + bytes, (uintptr_t)man, (uintptr_t)man + bytes);
    float *host = calloc(4 * N, sizeof(float));
    REQUIRE(host != NULL);
    CHECK(coll_memtype_of(host) == COLL_MEM_HOST);
    CHECK(coll_memtype_of(dev + 100) == COLL_MEM_DEVICE);
    CHECK(coll_memtype_of(man) == COLL_MEM_MANAGED);
    CHECK(coll_memtype_of(NULL) == COLL_MEM_HOST);

    collUniqueId id;
    collComm_t comm;
    REQUIRE(collGetUniqueId(&id) == collSuccess);
    REQUIRE(collCommInitRank(&comm, 1, id, 0) == collSuccess);
    float *d = (float *)(void *)dev, *m = (float *)(void *)man;
    refused(comm, collAllReduce(d, host, N, collFloat, collSum, comm, NULL), "collAllReduce",
            "sendbuff");
    refused(comm, collAllReduce(host, d, N, collFloat, collSum, comm, NULL), "collAllReduce",
            "recvbuff");
    refused(comm, collBroadcast(d, d, N, collFloat, 0, comm, NULL), "collBroadcast", "sendbuff");
    refused(comm, collReduce(host, d, N, collFloat, collSum, 0, comm, NULL), "collReduce",
            "recvbuff");
    refused(comm, collAllGather(d, host, N, collFloat, comm, NULL), "collAllGather", "sendbuff");
    refused(comm, collReduceScatter(host, d, N, collFloat, collSum, comm, NULL),
            "collReduceScatter", "recvbuff");
    refused(comm, collAlltoAll(d, host, N, collFloat, comm, NULL), "collAllToAll", "sendbuff");
    refused(comm, collGather(host, d, N, collFloat, 0, comm, NULL), "collGather", "recvbuff");
    refused(comm, collScatter(d, host, N, collFloat, 0, comm, NULL), "collScatter", "sendbuff");
    CHECK(collGroupStart() == collSuccess);
    refused(comm, collSend(d, N, collFloat, 0, comm, NULL), "collSend", "sendbuff");
    collResult_t r = collGroupEnd();
    CHECK_MSG(r == collUnhandledCudaError, "the group with a refused send: %s",
              collGetErrorString(r));

    /* Refusals leave comm usable; managed and host memory work. */
    for (int i = 0; i < N; i++)
        m[i] = (float)i;
    CHECK(collAllReduce(m, host, N, collFloat, collSum, comm, NULL) == collSuccess);
    int bad = 0;
    for (int i = 0; i < N; i++)
        bad += host[i] != (float)i;
    CHECK_MSG(bad == 0, "allreduce from managed memory: %d wrong", bad);
    CHECK(collAllReduce(host, m, N, collFloat, collSum, comm, NULL) == collSuccess);
    CHECK(collCommDestroy(comm) == collSuccess);
    free(host);
    munmap(dev, bytes);
    munmap(man, bytes);
    return test_result();
}
