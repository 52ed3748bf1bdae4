/* coll_cuda_driver (cuda_driver.h): dlsym in libcuda.so.1 opened with
 * RTLD_NOLOAD, under a lock, kept once complete. */
#include "cuda_driver.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>

static pthread_mutex_t driver_lock = PTHREAD_MUTEX_INITIALIZER;
static struct coll_cuda_driver driver;
static const struct coll_cuda_driver *driver_ready;

/* The driver's exported names for the API of cuda.h 12 (several carry the _v2
 * of their current ABI). */
static const struct {
    const char *name;
    size_t offset;
} driver_symbols[] = {
#define SYM(field, sym) {sym, offsetof(struct coll_cuda_driver, field)}
    SYM(pointer_get_attribute, "cuPointerGetAttribute"),
    SYM(ctx_get_current, "cuCtxGetCurrent"),
    SYM(ctx_set_current, "cuCtxSetCurrent"),
    SYM(ctx_get_device, "cuCtxGetDevice"),
    SYM(mem_alloc, "cuMemAlloc_v2"),
    SYM(mem_free, "cuMemFree_v2"),
    SYM(mem_host_alloc, "cuMemHostAlloc"),
    SYM(mem_free_host, "cuMemFreeHost"),
    SYM(mem_host_get_device_pointer, "cuMemHostGetDevicePointer_v2"),
    SYM(memcpy_async, "cuMemcpyAsync"),
    SYM(event_create, "cuEventCreate"),
    SYM(event_record, "cuEventRecord"),
    SYM(event_query, "cuEventQuery"),
    SYM(event_synchronize, "cuEventSynchronize"),
    SYM(event_destroy, "cuEventDestroy_v2"),
    SYM(stream_wait_value32, "cuStreamWaitValue32_v2"),
    SYM(get_error_string, "cuGetErrorString"),
#undef SYM
};

const struct coll_cuda_driver *coll_cuda_driver(const char **missing)
{
    const struct coll_cuda_driver *d = __atomic_load_n(&driver_ready, __ATOMIC_ACQUIRE);
    if (d != NULL)
        return d;
    static const char *last_missing = "no CUDA driver (libcuda.so.1) is loaded in this process";
    pthread_mutex_lock(&driver_lock);
    d = driver_ready;
    if (d == NULL) {
        void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
        bool complete = h != NULL;
        for (size_t i = 0; complete && i < sizeof(driver_symbols) / sizeof(driver_symbols[0]);
             i++) {
            void *fn = dlsym(h, driver_symbols[i].name);
            if (fn == NULL) {
                last_missing = driver_symbols[i].name;
                complete = false;
            }
            *(void **)((char *)&driver + driver_symbols[i].offset) = fn;
        }
        /* The handle stays open: the driver is not unloaded under us. */
        if (complete)
            __atomic_store_n(&driver_ready, d = &driver, __ATOMIC_RELEASE);
        else if (h != NULL)
            dlclose(h);
    }
    if (d == NULL && missing != NULL)
        *missing = last_missing;
    pthread_mutex_unlock(&driver_lock);
    return d;
}

const char *coll_cuda_error_string(cu_result r)
{
    const char *s = NULL;
    const struct coll_cuda_driver *d = __atomic_load_n(&driver_ready, __ATOMIC_ACQUIRE);
    if (d != NULL && d->get_error_string(r, &s) == COLL_CU_SUCCESS && s != NULL)
        return s;
    return "unknown CUDA error";
}
