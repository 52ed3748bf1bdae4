/* tests/device_backend.h on the CUDA runtime and a real GPU (device 0). */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cuda_check.h"
#include "device_backend.h"


int tdev_init(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        printf("SKIP: no usable GPU (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "none");
        return 77;
    }
    return 0;
}

void *tdev_malloc(size_t bytes)
{
    void *p = NULL;
    CUDA_OK(cudaSetDevice(0));
    CUDA_OK(cudaMalloc(&p, bytes ? bytes : 1));
    CUDA_OK(cudaMemset(p, 0, bytes ? bytes : 1));
    CUDA_OK(cudaDeviceSynchronize()); /* before any use on a non-blocking stream */
    return p;
}

void *tdev_stream_create(void)
{
    cudaStream_t s;
    CUDA_OK(cudaSetDevice(0));
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return s;
}

void tdev_stream_sync(void *s)
{
    CUDA_OK(cudaStreamSynchronize((cudaStream_t)s));
}

void tdev_to_dev(void *s, void *dev, const void *host, size_t bytes)
{
    CUDA_OK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, (cudaStream_t)s));
}

void tdev_to_host(void *s, void *host, const void *dev, size_t bytes)
{
    CUDA_OK(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, (cudaStream_t)s));
}

static void CUDART_CB gate_fn(void *arg)
{
    atomic_int *open = arg;
    for (int i = 0; i < 20000 && !atomic_load(open); i++)
        usleep(1000);
}

void tdev_gate(void *s, atomic_int *open)
{
    CUDA_OK(cudaLaunchHostFunc((cudaStream_t)s, gate_fn, open));
}

long tdev_pinned_live(void)
{
    return -1;
}

long tdev_pinned_bytes(void)
{
    return -1;
}
