/*
 * A program written against nccl.h, with device buffers on a CUDA stream as
 * NCCL programs use them, run on libnccl.so.2 (compat/nccl) over the stand-in
 * CUDA driver (tests/fake_cuda.c, through tests/device_fake.c): ncclAllReduce,
 * ncclBroadcast, ncclAllGather and a ring of ncclSend/ncclRecv in a group, each issued on the stream between
 * the "kernels" that write its input and read its output; then the stream is
 * synchronized once and every result checked.  Also: the same allreduce on
 * host buffers with the stream (NCCL refuses those; here they block); with a
 * CUDA context current at init, ncclCommCuDevice gives its device, and
 * ncclMemAlloc gives device memory that a call takes and ncclMemFree frees.
 *
 *   collrun -n N test_nccl_device
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device_backend.h"
#include "nccl.h"

/* The driver's, as the CUDA runtime calls them for cudaSetDevice(0). */
int cuDevicePrimaryCtxRetain(void **ctx, int dev);
int cuCtxSetCurrent(void *ctx);

#define COUNT 3000

static int failures;

#define OK(call)                                                                           \
    do {                                                                                   \
        ncclResult_t r_ = (call);                                                          \
        if (r_ != ncclSuccess) {                                                           \
            fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call,             \
                    ncclGetErrorString(r_), ncclGetLastError(NULL));                       \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

static void expect(const char *what, const float *got, size_t n, float (*want)(size_t, int, int),
                   int rank, int nranks)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += got[i] != want(i, rank, nranks);
    if (bad) {
        fprintf(stderr, "rank %d: %s: %zu of %zu wrong (first: %g, want %g)\n", rank, what, bad,
                n, (double)got[0], (double)want(0, rank, nranks));
        failures++;
    }
}

static float input(size_t i, int rank)
{
    return (float)(rank * 100 + (int)(i % 50));
}
static float want_sum(size_t i, int rank, int n)
{
    float s = 0;
    for (int r = 0; r < n; r++)
        s += input(i, r);
    return s;
}
static float want_bcast(size_t i, int rank, int n)
{
    return input(i, n - 1);
}
static float want_gather(size_t i, int rank, int n)
{
    return input(i % COUNT, (int)(i / COUNT));
}
static float want_left(size_t i, int rank, int n)
{
    return input(i, (rank + n - 1) % n);
}

int main(void)
{
    const char *rs = getenv("COLL_RANK"), *ns = getenv("COLL_NRANKS");
    if (rs == NULL || ns == NULL) {
        fprintf(stderr, "usage: collrun -n N test_nccl_device\n");
        return 2;
    }
    int rank = atoi(rs), n = atoi(ns);
    void *ctx = NULL; /* cudaSetDevice(0) */
    if (cuDevicePrimaryCtxRetain(&ctx, 0) != 0 || cuCtxSetCurrent(ctx) != 0) {
        fprintf(stderr, "the stand-in driver gave no context\n");
        return 1;
    }
    ncclUniqueId id;
    ncclComm_t comm;
    OK(ncclGetUniqueId(&id));
    OK(ncclCommInitRank(&comm, n, id, rank));
    int device = -2;
    OK(ncclCommCuDevice(comm, &device));
    if (device != 0) {
        fprintf(stderr, "rank %d: ncclCommCuDevice gave %d, want 0\n", rank, device);
        failures++;
    }
    void *s = tdev_stream_create();
    cudaStream_t cs = (cudaStream_t)s;
    size_t bytes = COUNT * sizeof(float);
    float *in = malloc(bytes), *sum = malloc(bytes), *bc = malloc(bytes), *left = malloc(bytes);
    float *all = malloc(bytes * (size_t)n);
    for (size_t i = 0; i < COUNT; i++)
        in[i] = input(i, rank);
    float *din = tdev_malloc(bytes), *dout = tdev_malloc(bytes);
    float *db = tdev_malloc(bytes), *dall = tdev_malloc(bytes * (size_t)n);
    float *dleft = tdev_malloc(bytes);

    tdev_to_dev(s, din, in, bytes);
    tdev_to_dev(s, db, in, bytes);
    OK(ncclAllReduce(din, dout, COUNT, ncclFloat, ncclSum, comm, cs));
    tdev_to_host(s, sum, dout, bytes);
    OK(ncclBroadcast(db, db, COUNT, ncclFloat, n - 1, comm, cs));
    tdev_to_host(s, bc, db, bytes);
    OK(ncclAllGather(din, dall, COUNT, ncclFloat, comm, cs));
    tdev_to_host(s, all, dall, bytes * (size_t)n);
    OK(ncclGroupStart());
    OK(ncclSend(din, COUNT, ncclFloat, (rank + 1) % n, comm, cs));
    OK(ncclRecv(dleft, COUNT, ncclFloat, (rank + n - 1) % n, comm, cs));
    OK(ncclGroupEnd());
    tdev_to_host(s, left, dleft, bytes);
    tdev_stream_sync(s);
    ncclResult_t async = ncclSuccess;
    OK(ncclCommGetAsyncError(comm, &async));
    if (async != ncclSuccess) {
        fprintf(stderr, "rank %d: async error %s\n", rank, ncclGetErrorString(async));
        failures++;
    }
    expect("ncclAllReduce on device buffers", sum, COUNT, want_sum, rank, n);
    expect("ncclBroadcast on device buffers", bc, COUNT, want_bcast, rank, n);
    expect("ncclAllGather on device buffers", all, COUNT * (size_t)n, want_gather, rank, n);
    expect("ncclSend/ncclRecv on device buffers", left, COUNT, want_left, rank, n);

    /* ncclMemAlloc: device memory (the host cannot touch it), taken by a call. */
    float *dm = NULL, *mm = malloc(bytes);
    OK(ncclMemAlloc((void **)&dm, bytes));
    tdev_to_dev(s, dm, in, bytes);
    OK(ncclAllReduce(dm, dm, COUNT, ncclFloat, ncclSum, comm, cs));
    tdev_to_host(s, mm, dm, bytes);
    tdev_stream_sync(s);
    expect("ncclAllReduce on ncclMemAlloc memory", mm, COUNT, want_sum, rank, n);
    OK(ncclMemFree(dm));
    free(mm);

    /* Host buffers with a cudaStream_t: blocking, the stream is not read. */
    float *h = malloc(bytes);
    memcpy(h, in, bytes);
    OK(ncclAllReduce(h, h, COUNT, ncclFloat, ncclSum, comm, cs));
    expect("ncclAllReduce on host buffers", h, COUNT, want_sum, rank, n);

    OK(ncclCommDestroy(comm));
    free(in);
    free(sum);
    free(bc);
    free(left);
    free(all);
    free(h);
    printf("test_nccl_device: rank %d of %d, %d failure(s)\n", rank, n, failures);
    return failures ? 1 : 0;
}
