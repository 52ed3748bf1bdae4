/* perf/device.h on the CUDA driver API, found with dlopen. */
#include "device.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>

static struct {
    int (*init)(unsigned int flags);
    int (*device_get)(int *dev, int ordinal);
    int (*primary_ctx_retain)(void **ctx, int dev);
    int (*ctx_set_current)(void *ctx);
    int (*mem_alloc)(uint64_t *p, size_t bytes);
    int (*mem_free)(uint64_t p);
    int (*memcpy_htod)(uint64_t dst, const void *src, size_t bytes);
    int (*memcpy_dtoh)(void *dst, uint64_t src, size_t bytes);
    int (*stream_create)(void **s, unsigned int flags);
    int (*stream_synchronize)(void *s);
    int (*stream_destroy)(void *s);
} cu;
static void *ctx;

int perf_dev_open(char *err, size_t len)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (h == NULL) {
        snprintf(err, len, "-D 1 needs the CUDA driver: %s", dlerror());
        return -1;
    }
    static const struct {
        const char *name;
        void **slot;
    } syms[] = {
        {"cuInit", (void **)&cu.init},
        {"cuDeviceGet", (void **)&cu.device_get},
        {"cuDevicePrimaryCtxRetain", (void **)&cu.primary_ctx_retain},
        {"cuCtxSetCurrent", (void **)&cu.ctx_set_current},
        {"cuMemAlloc_v2", (void **)&cu.mem_alloc},
        {"cuMemFree_v2", (void **)&cu.mem_free},
        {"cuMemcpyHtoD_v2", (void **)&cu.memcpy_htod},
        {"cuMemcpyDtoH_v2", (void **)&cu.memcpy_dtoh},
        {"cuStreamCreate", (void **)&cu.stream_create},
        {"cuStreamSynchronize", (void **)&cu.stream_synchronize},
        {"cuStreamDestroy_v2", (void **)&cu.stream_destroy},
    };
    for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
        *syms[i].slot = dlsym(h, syms[i].name);
        if (*syms[i].slot == NULL) {
            snprintf(err, len, "-D 1: the CUDA driver lacks %s", syms[i].name);
            return -1;
        }
    }
    int dev = 0, r;
    if ((r = cu.init(0)) != 0 || (r = cu.device_get(&dev, 0)) != 0 ||
        (r = cu.primary_ctx_retain(&ctx, dev)) != 0) {
        snprintf(err, len, "-D 1: no usable CUDA device (CUDA error %d)", r);
        return -1;
    }
    return 0;
}

int perf_dev_bind(void)
{
    return cu.ctx_set_current(ctx) == 0 ? 0 : -1;
}

void *perf_dev_alloc(size_t bytes)
{
    uint64_t p = 0;
    return cu.mem_alloc(&p, bytes) == 0 ? (void *)(uintptr_t)p : NULL;
}

void perf_dev_free(void *p)
{
    if (p != NULL)
        cu.mem_free((uint64_t)(uintptr_t)p);
}

int perf_dev_to_dev(void *dev, const void *host, size_t bytes)
{
    return cu.memcpy_htod((uint64_t)(uintptr_t)dev, host, bytes) == 0 ? 0 : -1;
}

int perf_dev_to_host(void *host, const void *dev, size_t bytes)
{
    return cu.memcpy_dtoh(host, (uint64_t)(uintptr_t)dev, bytes) == 0 ? 0 : -1;
}

void *perf_dev_stream(void)
{
    void *s = NULL;
    return cu.stream_create(&s, 0) == 0 ? s : NULL;
}

int perf_dev_sync(void *stream)
{
    return cu.stream_synchronize(stream) == 0 ? 0 : -1;
}

void perf_dev_stream_free(void *stream)
{
    if (stream != NULL)
        cu.stream_destroy(stream);
}
