/* coll_memtype_of (memtype.h): cuPointerGetAttribute of the driver the process
 * already has, looked up once (dlopen RTLD_NOLOAD; a driver loaded later is
 * found by a later look, at most once a second by the coarse clock; threads that arrive during a
 * look wait for it). */
#include "memtype.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "socket.h"

/* The driver API's values (cuda.h). */
#define CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define CU_POINTER_ATTRIBUTE_IS_MANAGED 8
#define CU_MEMORYTYPE_DEVICE 2
#define CU_MEMORYTYPE_UNIFIED 4

typedef int (*cu_pointer_get_attribute_fn)(void *data, int attribute, uintptr_t ptr);

static _Atomic(cu_pointer_get_attribute_fn) memtype_fn;
static _Atomic int64_t memtype_next_look_ns;
static pthread_mutex_t memtype_lock = PTHREAD_MUTEX_INITIALIZER;

static cu_pointer_get_attribute_fn memtype_driver(void)
{
    cu_pointer_get_attribute_fn fn = atomic_load_explicit(&memtype_fn, memory_order_acquire);
    if (fn != NULL || coll_coarse_ns() < atomic_load(&memtype_next_look_ns))
        return fn;
    /* One thread looks while the others wait for its answer (a thread that
     * found the look under way used to take the buffer for host memory). */
    pthread_mutex_lock(&memtype_lock);
    fn = atomic_load_explicit(&memtype_fn, memory_order_acquire);
    int64_t now = coll_coarse_ns();
    if (fn == NULL && now >= atomic_load(&memtype_next_look_ns)) {
        void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
        if (h != NULL)
            fn = (cu_pointer_get_attribute_fn)(uintptr_t)dlsym(h, "cuPointerGetAttribute");
        /* The handle stays open: the driver is not unloaded under us. */
        if (fn != NULL)
            atomic_store_explicit(&memtype_fn, fn, memory_order_release);
        else
            atomic_store(&memtype_next_look_ns, now + 1000000000LL);
    }
    pthread_mutex_unlock(&memtype_lock);
    return fn;
}

enum coll_memtype coll_memtype_of(const void *p)
{
    if (p == NULL)
        return COLL_MEM_HOST;
    cu_pointer_get_attribute_fn fn = memtype_driver();
    if (fn == NULL)
        return COLL_MEM_HOST;
    unsigned int managed = 0, type = 0;
    /* Memory the driver does not know (malloc, the stack) is an error there:
     * host memory. */
    if (fn(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, (uintptr_t)p) == 0 && managed)
        return COLL_MEM_MANAGED;
    if (fn(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (uintptr_t)p) != 0)
        return COLL_MEM_HOST;
    if (type == CU_MEMORYTYPE_DEVICE)
        return COLL_MEM_DEVICE;
    if (type == CU_MEMORYTYPE_UNIFIED)
        return COLL_MEM_MANAGED;
    return COLL_MEM_HOST;
}

const char *coll_memtype_name(enum coll_memtype t)
{
    switch (t) {
    case COLL_MEM_DEVICE:
        return "CUDA device memory";
    case COLL_MEM_MANAGED:
        return "CUDA managed memory";
    default:
        return "host memory";
    }
}
