/* tests/device_backend.h on the stand-in CUDA driver (tests/fake_cuda.c). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device_backend.h"

void *fake_cuda_malloc(size_t bytes);
void *fake_cuda_host_view(const void *dev);
long fake_cuda_pinned_live(void);
size_t fake_cuda_pinned_bytes(void);
void *fake_cuda_stream_create(void);
void fake_cuda_stream_sync(void *s);
void fake_cuda_launch(void *s, void (*fn)(void *), void *arg);

int tdev_init(void)
{
    return 0;
}

void *tdev_malloc(size_t bytes)
{
    return fake_cuda_malloc(bytes);
}

void *tdev_stream_create(void)
{
    return fake_cuda_stream_create();
}

void tdev_stream_sync(void *s)
{
    fake_cuda_stream_sync(s);
}

/* The tests' kernel: a copy through device memory's readable view. */
struct copy_arg {
    void *dst;
    const void *src;
    size_t bytes;
};

static void copy_kernel(void *arg)
{
    struct copy_arg *c = arg;
    memcpy(c->dst, c->src, c->bytes);
    free(c);
}

static void copy(void *s, void *dst, const void *src, size_t bytes)
{
    struct copy_arg *c = malloc(sizeof(*c));
    *c = (struct copy_arg){dst, src, bytes};
    fake_cuda_launch(s, copy_kernel, c);
}

void tdev_to_dev(void *s, void *dev, const void *host, size_t bytes)
{
    copy(s, fake_cuda_host_view(dev), host, bytes);
}

void tdev_to_host(void *s, void *host, const void *dev, size_t bytes)
{
    copy(s, host, fake_cuda_host_view(dev), bytes);
}

static void gate_kernel(void *arg)
{
    atomic_int *open = arg;
    for (int i = 0; i < 20000 && !atomic_load(open); i++)
        usleep(1000);
}

void tdev_gate(void *s, atomic_int *open)
{
    fake_cuda_launch(s, gate_kernel, open);
}

long tdev_pinned_live(void)
{
    return fake_cuda_pinned_live();
}

long tdev_pinned_bytes(void)
{
    return (long)fake_cuda_pinned_bytes();
}
