/* A stand-in for the CUDA driver (libcuda.so.1) for the tests that have no GPU:
 * the calls the library makes on device buffers (lib/base/cuda_driver.h), with
 * the semantics that matter to it, on the CPU.
 *
 *   - Device memory (fake_cuda_malloc) is a memfd mapped twice: the address the
 *     program gets is mapped PROT_NONE, so any read or write by the host through
 *     it crashes, as a device pointer does; copies and the tests' "kernels" go
 *     through a second, readable mapping (fake_cuda_host_view).
 *   - A stream is a thread that runs its operations in order: copies, event
 *     records, waits on a 32-bit value (cuStreamWaitValue32) and host
 *     functions (fake_cuda_launch: the tests' kernels).  NULL, CU_STREAM_LEGACY
 *     and CU_STREAM_PER_THREAD are one default stream.
 *   - A context must be current on the calling thread for the calls that need
 *     one in the real driver (CUDA_ERROR_INVALID_CONTEXT otherwise); the
 *     pointer's context comes from cuPointerGetAttribute.
 *
 * Built twice: in full, and with FAKE_CUDA_POINTER_ONLY (cuPointerGetAttribute
 * and fake_cuda_set alone: a driver without the staging calls). */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define API __attribute__((visibility("default")))

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_READY = 600,
};

API void fake_cuda_set(uintptr_t dev_lo, uintptr_t dev_hi, uintptr_t man_lo, uintptr_t man_hi);
API int cuPointerGetAttribute(void *data, int attribute, uint64_t ptr);

/* Ranges set by fake_cuda_set (test_memtype): device and managed memory with no
 * readable view. */
static uintptr_t set_dlo, set_dhi, set_mlo, set_mhi;

API void fake_cuda_set(uintptr_t dev_lo, uintptr_t dev_hi, uintptr_t man_lo, uintptr_t man_hi)
{
    set_dlo = dev_lo, set_dhi = dev_hi, set_mlo = man_lo, set_mhi = man_hi;
}

#define FAKE_CTX ((void *)(uintptr_t)0xc0c0)

#ifndef FAKE_CUDA_POINTER_ONLY
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* Allocations of fake_cuda_malloc. */
#define MAX_ALLOCS 1024
static struct alloc {
    uintptr_t lo, hi;   /* the device address range */
    char *view;         /* its readable mapping */
} allocs[MAX_ALLOCS];
static int nallocs;
static pthread_mutex_t allocs_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic long pinned_live; /* cuMemHostAlloc'ed blocks not yet freed */
/* Their sizes, for fake_cuda_pinned_bytes. */
#define MAX_PINNED 4096
static struct {
    void *p;
    size_t bytes;
} pinned[MAX_PINNED];
static pthread_mutex_t pinned_lock = PTHREAD_MUTEX_INITIALIZER;

static const struct alloc *alloc_find(uintptr_t p)
{
    const struct alloc *a = NULL;
    pthread_mutex_lock(&allocs_lock);
    for (int i = 0; i < nallocs; i++)
        if (p >= allocs[i].lo && p < allocs[i].hi)
            a = &allocs[i];
    pthread_mutex_unlock(&allocs_lock);
    return a;
}
#endif

static int pointer_range(uintptr_t p, uintptr_t *lo, uintptr_t *hi, int *managed)
{
#ifndef FAKE_CUDA_POINTER_ONLY
    const struct alloc *a = alloc_find(p);
    if (a != NULL) {
        *lo = a->lo, *hi = a->hi, *managed = 0;
        return 1;
    }
#endif
    if (p >= set_dlo && p < set_dhi) {
        *lo = set_dlo, *hi = set_dhi, *managed = 0;
        return 1;
    }
    if (p >= set_mlo && p < set_mhi) {
        *lo = set_mlo, *hi = set_mhi, *managed = 1;
        return 1;
    }
    return 0;
}

API int cuPointerGetAttribute(void *data, int attribute, uint64_t ptr)
{
    uintptr_t lo, hi;
    int managed;
    if (!pointer_range((uintptr_t)ptr, &lo, &hi, &managed))
        return CUDA_ERROR_INVALID_VALUE; /* memory the driver does not know */
    switch (attribute) {
    case 1: /* CONTEXT */
        *(void **)data = FAKE_CTX;
        return CUDA_SUCCESS;
    case 2: /* MEMORY_TYPE: DEVICE (managed memory says DEVICE too, as the driver does) */
        *(unsigned int *)data = 2;
        return CUDA_SUCCESS;
    case 8: /* IS_MANAGED */
        *(unsigned int *)data = (unsigned int)managed;
        return CUDA_SUCCESS;
    case 11: /* RANGE_START_ADDR */
        *(uint64_t *)data = lo;
        return CUDA_SUCCESS;
    case 12: /* RANGE_SIZE */
        *(size_t *)data = hi - lo;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

#ifndef FAKE_CUDA_POINTER_ONLY

API void *fake_cuda_malloc(size_t bytes);
API void *fake_cuda_host_view(const void *dev);
API long fake_cuda_pinned_live(void);
API size_t fake_cuda_pinned_bytes(void);
API void *fake_cuda_stream_create(void);
API void fake_cuda_stream_sync(void *s);
API void fake_cuda_launch(void *s, void (*fn)(void *), void *arg);

API void *fake_cuda_malloc(size_t bytes)
{
    size_t len = (bytes + 4095) / 4096 * 4096;
    int fd = memfd_create("fake-cuda", 0);
    if (fd < 0 || ftruncate(fd, (off_t)len) != 0)
        return NULL;
    char *dev = mmap(NULL, len, PROT_NONE, MAP_SHARED, fd, 0);
    char *view = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (dev == MAP_FAILED || view == MAP_FAILED)
        return NULL;
    pthread_mutex_lock(&allocs_lock);
    if (nallocs == MAX_ALLOCS) {
        pthread_mutex_unlock(&allocs_lock);
        return NULL;
    }
    allocs[nallocs++] = (struct alloc){(uintptr_t)dev, (uintptr_t)dev + bytes, view};
    pthread_mutex_unlock(&allocs_lock);
    return dev;
}

API void *fake_cuda_host_view(const void *dev)
{
    const struct alloc *a = alloc_find((uintptr_t)dev);
    return a ? a->view + ((uintptr_t)dev - a->lo) : NULL;
}

/* Where a copy reads or writes p: device memory through its view. */
static char *host_addr(uint64_t p)
{
    const struct alloc *a = alloc_find((uintptr_t)p);
    return a ? a->view + ((uintptr_t)p - a->lo) : (char *)(uintptr_t)p;
}

API long fake_cuda_pinned_live(void)
{
    return pinned_live;
}

API size_t fake_cuda_pinned_bytes(void)
{
    size_t sum = 0;
    pthread_mutex_lock(&pinned_lock);
    for (int i = 0; i < MAX_PINNED; i++)
        sum += pinned[i].bytes;
    pthread_mutex_unlock(&pinned_lock);
    return sum;
}

static _Thread_local void *current_ctx;

API int cuCtxGetCurrent(void **ctx);
API int cuCtxSetCurrent(void *ctx);
API int cuCtxGetCurrent(void **ctx)
{
    *ctx = current_ctx;
    return CUDA_SUCCESS;
}
API int cuCtxSetCurrent(void *ctx)
{
    if (ctx != NULL && ctx != FAKE_CTX)
        return CUDA_ERROR_INVALID_CONTEXT;
    current_ctx = ctx;
    return CUDA_SUCCESS;
}
#define NEED_CTX()                                                                   \
    do {                                                                             \
        if (current_ctx == NULL)                                                     \
            return CUDA_ERROR_INVALID_CONTEXT;                                       \
    } while (0)

API int cuMemHostAlloc(void **p, size_t bytes, unsigned int flags);
API int cuMemFreeHost(void *p);
API int cuMemHostGetDevicePointer_v2(uint64_t *d, void *p, unsigned int flags);
API int cuMemHostAlloc(void **p, size_t bytes, unsigned int flags)
{
    NEED_CTX();
    if (posix_memalign(p, 4096, bytes ? bytes : 1) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pinned_live++;
    pthread_mutex_lock(&pinned_lock);
    for (int i = 0; i < MAX_PINNED; i++)
        if (pinned[i].p == NULL) {
            pinned[i].p = *p;
            pinned[i].bytes = bytes;
            break;
        }
    pthread_mutex_unlock(&pinned_lock);
    return CUDA_SUCCESS;
}
API int cuMemFreeHost(void *p)
{
    NEED_CTX();
    pthread_mutex_lock(&pinned_lock);
    for (int i = 0; i < MAX_PINNED; i++)
        if (pinned[i].p == p) {
            pinned[i].p = NULL;
            pinned[i].bytes = 0;
            break;
        }
    pthread_mutex_unlock(&pinned_lock);
    free(p);
    pinned_live--;
    return CUDA_SUCCESS;
}
API int cuMemHostGetDevicePointer_v2(uint64_t *d, void *p, unsigned int flags)
{
    NEED_CTX();
    *d = (uint64_t)(uintptr_t)p;
    return CUDA_SUCCESS;
}

/* Events: done when the stream has run past the latest record. */
struct event {
    _Atomic uint64_t recorded, completed;
};

/* Streams. */
enum op_kind { OP_COPY, OP_EVENT, OP_WAIT, OP_HOST };
struct op {
    struct op *next;
    enum op_kind kind;
    char *dst;
    const char *src;
    size_t bytes;
    struct event *ev;
    uint64_t target;
    const volatile uint32_t *addr;
    uint32_t value;
    void (*fn)(void *);
    void *arg;
};

struct stream {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct op *head, *tail;
    int pending;   /* queued or running */
    pthread_t thread;
};

static void *stream_main(void *arg)
{
    struct stream *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->lock);
        while (s->head == NULL)
            pthread_cond_wait(&s->cond, &s->lock);
        struct op *op = s->head;
        pthread_mutex_unlock(&s->lock);
        switch (op->kind) {
        case OP_COPY:
            memcpy(op->dst, op->src, op->bytes);
            break;
        case OP_EVENT:
            op->ev->completed = op->target;
            break;
        case OP_WAIT:
            /* The driver's GEQ: (int32_t)(*addr - value) >= 0. */
            while ((int32_t)(__atomic_load_n(op->addr, __ATOMIC_ACQUIRE) - op->value) < 0) {
                struct timespec ts = {0, 20000};
                nanosleep(&ts, NULL);
            }
            break;
        case OP_HOST:
            op->fn(op->arg);
            break;
        }
        pthread_mutex_lock(&s->lock);
        s->head = op->next;
        if (s->head == NULL)
            s->tail = NULL;
        s->pending--;
        pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->lock);
        free(op);
    }
    return NULL;
}

API void *fake_cuda_stream_create(void)
{
    struct stream *s = calloc(1, sizeof(*s));
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    pthread_create(&s->thread, NULL, stream_main, s);
    pthread_detach(s->thread);
    return s;
}

static struct stream *default_stream;
static pthread_once_t default_once = PTHREAD_ONCE_INIT;
static void default_make(void)
{
    default_stream = fake_cuda_stream_create();
}

static struct stream *stream_of(void *h)
{
    if ((uintptr_t)h <= 2) { /* NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD */
        pthread_once(&default_once, default_make);
        return default_stream;
    }
    return h;
}

static void stream_push(void *h, struct op *op)
{
    struct stream *s = stream_of(h);
    pthread_mutex_lock(&s->lock);
    if (s->tail)
        s->tail->next = op;
    else
        s->head = op;
    s->tail = op;
    s->pending++;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

API void fake_cuda_stream_sync(void *h)
{
    struct stream *s = stream_of(h);
    pthread_mutex_lock(&s->lock);
    while (s->pending > 0)
        pthread_cond_wait(&s->cond, &s->lock);
    pthread_mutex_unlock(&s->lock);
}

API void fake_cuda_launch(void *h, void (*fn)(void *), void *arg)
{
    struct op *op = calloc(1, sizeof(*op));
    op->kind = OP_HOST;
    op->fn = fn;
    op->arg = arg;
    stream_push(h, op);
}

API int cuMemcpyAsync(uint64_t dst, uint64_t src, size_t bytes, void *h);
API int cuEventCreate(void **e, unsigned int flags);
API int cuEventRecord(void *e, void *h);
API int cuEventQuery(void *e);
API int cuEventSynchronize(void *e);
API int cuEventDestroy_v2(void *e);
API int cuStreamWaitValue32_v2(void *h, uint64_t addr, uint32_t value, unsigned int flags);
API int cuGetErrorString(int r, const char **s);

API int cuMemcpyAsync(uint64_t dst, uint64_t src, size_t bytes, void *h)
{
    NEED_CTX();
    struct op *op = calloc(1, sizeof(*op));
    op->kind = OP_COPY;
    op->dst = host_addr(dst);
    op->src = host_addr(src);
    op->bytes = bytes;
    stream_push(h, op);
    return CUDA_SUCCESS;
}

API int cuEventCreate(void **e, unsigned int flags)
{
    NEED_CTX();
    *e = calloc(1, sizeof(struct event));
    return *e ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

API int cuEventRecord(void *e, void *h)
{
    NEED_CTX();
    struct event *ev = e;
    struct op *op = calloc(1, sizeof(*op));
    op->kind = OP_EVENT;
    op->ev = ev;
    op->target = ++ev->recorded;
    stream_push(h, op);
    return CUDA_SUCCESS;
}

API int cuEventQuery(void *e)
{
    NEED_CTX();
    struct event *ev = e;
    return ev->completed >= ev->recorded ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

API int cuEventSynchronize(void *e)
{
    NEED_CTX();
    while (cuEventQuery(e) == CUDA_ERROR_NOT_READY)
        sched_yield();
    return CUDA_SUCCESS;
}

API int cuEventDestroy_v2(void *e)
{
    NEED_CTX();
    free(e);
    return CUDA_SUCCESS;
}

API int cuStreamWaitValue32_v2(void *h, uint64_t addr, uint32_t value, unsigned int flags)
{
    NEED_CTX();
    if (flags != 0) /* GEQ only */
        return CUDA_ERROR_INVALID_VALUE;
    struct op *op = calloc(1, sizeof(*op));
    op->kind = OP_WAIT;
    op->addr = (const volatile uint32_t *)(uintptr_t)addr;
    op->value = value;
    stream_push(h, op);
    return CUDA_SUCCESS;
}

/* What the perf tools' -D 1 (perf/device.c) and libnccl.so.2's ncclMemAlloc and
 * ncclCommCuDevice call. */
API int cuInit(unsigned int flags);
API int cuCtxGetDevice(int *dev);
API int cuDeviceGet(int *dev, int ordinal);
API int cuDevicePrimaryCtxRetain(void **ctx, int dev);
API int cuMemAlloc_v2(uint64_t *p, size_t bytes);
API int cuMemFree_v2(uint64_t p);
API int cuMemcpyHtoD_v2(uint64_t dst, const void *src, size_t bytes);
API int cuMemcpyDtoH_v2(void *dst, uint64_t src, size_t bytes);
API int cuStreamCreate(void **s, unsigned int flags);
API int cuStreamSynchronize(void *s);
API int cuStreamDestroy_v2(void *s);

API int cuCtxGetDevice(int *dev)
{
    NEED_CTX();
    *dev = 0;
    return CUDA_SUCCESS;
}
API int cuInit(unsigned int flags)
{
    return CUDA_SUCCESS;
}
API int cuDeviceGet(int *dev, int ordinal)
{
    *dev = ordinal;
    return ordinal == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
API int cuDevicePrimaryCtxRetain(void **ctx, int dev)
{
    *ctx = FAKE_CTX;
    return CUDA_SUCCESS;
}
API int cuMemAlloc_v2(uint64_t *p, size_t bytes)
{
    NEED_CTX();
    void *d = fake_cuda_malloc(bytes);
    *p = (uint64_t)(uintptr_t)d;
    return d ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
API int cuMemFree_v2(uint64_t p)
{
    NEED_CTX();
    return alloc_find((uintptr_t)p) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; /* kept mapped */
}
/* Synchronous, and after what the default stream holds, as the driver's. */
API int cuMemcpyHtoD_v2(uint64_t dst, const void *src, size_t bytes)
{
    NEED_CTX();
    fake_cuda_stream_sync(NULL);
    memcpy(host_addr(dst), src, bytes);
    return CUDA_SUCCESS;
}
API int cuMemcpyDtoH_v2(void *dst, uint64_t src, size_t bytes)
{
    NEED_CTX();
    fake_cuda_stream_sync(NULL);
    memcpy(dst, host_addr(src), bytes);
    return CUDA_SUCCESS;
}
API int cuStreamCreate(void **s, unsigned int flags)
{
    NEED_CTX();
    *s = fake_cuda_stream_create();
    return CUDA_SUCCESS;
}
API int cuStreamSynchronize(void *s)
{
    NEED_CTX();
    fake_cuda_stream_sync(s);
    return CUDA_SUCCESS;
}
API int cuStreamDestroy_v2(void *s)
{
    NEED_CTX();
    fake_cuda_stream_sync(s); /* the thread stays: streams are few in a test */
    return CUDA_SUCCESS;
}

API int cuGetErrorString(int r, const char **s)
{
    *s = r == CUDA_ERROR_INVALID_CONTEXT ? "invalid device context (fake driver)"
                                         : "error (fake driver)";
    return CUDA_SUCCESS;
}
#endif
