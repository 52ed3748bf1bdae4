/* Device buffers, staged through pinned host memory (device.h).
 *
 * A call whose buffers are CUDA device memory is ordered on the caller's CUDA
 * stream as NCCL's calls are, and runs on host memory in between:
 *
 *   caller's CUDA stream:   kernels | copy in | ready | wait flag >= g | copy out | done | ...
 *   comm's progress thread:            waits for ready -> runs the call -> flag = g
 *
 * The call returns once the stream has its part; kernels issued on the stream
 * afterwards see the result, and the host side runs in the communicator's issue
 * order like every call on a collStream_t (one internal stream per
 * communicator carries them).  Only the device buffers are staged; the
 * reductions are the host kernels, so a device call gives bitwise the result
 * of the same call on host buffers.  The stream waits on a flag in mapped
 * pinned memory (cuStreamWaitValue32), not on a host callback, so no CUDA
 * thread is blocked while the ranks talk.
 *
 * Each call in flight holds a record: its staging (one pinned region per run of
 * overlapping buffers, so that in-place calls stay in place), its flag and its
 * two events.  Records are kept and reused once the stream has passed their
 * `done` event.  A staged call that fails poisons the communicator
 * (collCommGetAsyncError returns the failure); the stream still goes on, with
 * the device buffers' contents then undefined, as with NCCL. */
#include "device.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_driver.h"
#include "memtype.h"
#include "param.h"
#include "reduce.h"
#include "stream.h"

/* Staging regions start on this boundary (the copy engines' and the reduction
 * kernels' alignment). */
#define STAGE_ALIGN 256

struct coll_devcall {
    struct coll_devcall *next;   /* the comm's records */
    struct coll_comm *comm;
    cu_context ctx;              /* of the buffers: set on the progress thread */
    char *stage;                 /* pinned */
    size_t stage_bytes;
    uint32_t *flag;              /* pinned, mapped: the stream waits for gen */
    cu_deviceptr flag_dev;
    uint32_t gen;
    cu_event ready, done;
    bool busy;                   /* issued, its host side not yet ended */
};

struct coll_device {
    pthread_mutex_t lock;        /* the records */
    struct coll_devcall *calls;
    collStream_t stream;         /* orders the staged calls on the progress thread */
    size_t keep;                 /* COLL_DEVICE_STAGE_KEEP: pinned staging that idle
                                  * records keep when more is needed, so that one large
                                  * call does not pin its size for good */
};

static pthread_mutex_t device_init_lock = PTHREAD_MUTEX_INITIALIZER;

/* Records a communicator gave up while a CUDA stream could still copy to or from
 * their staging (an abort, a failed enqueue): kept here, not freed under the
 * copy, and freed by a later communicator's end once their stream passed them. */
static pthread_mutex_t graveyard_lock = PTHREAD_MUTEX_INITIALIZER;
static struct coll_devcall *graveyard;

collResult_t coll_device_check_buffer(struct coll_comm *comm, const char *fn, const char *name,
                                      const void *p, size_t bytes, bool *is_dev)
{
    *is_dev = false;
    /* A device pointer with no bytes still says the stream is CUDA's. */
    if (p == NULL || coll_memtype_of(p) != COLL_MEM_DEVICE)
        return collSuccess;
    const char *missing = NULL;
    const struct coll_cuda_driver *d = coll_cuda_driver(&missing);
    if (d == NULL) {
        coll_set_error(comm, "%s: %s (%p) is CUDA device memory, but the loaded CUDA driver "
                       "lacks %s, which device buffers need (a newer driver has it)", fn, name, p,
                       missing);
        return collUnhandledCudaError;
    }
    cu_deviceptr start = 0;
    size_t size = 0;
    if (bytes > 0 &&
        d->pointer_get_attribute(&start, COLL_CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                 (cu_deviceptr)(uintptr_t)p) == COLL_CU_SUCCESS &&
        d->pointer_get_attribute(&size, COLL_CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                 (cu_deviceptr)(uintptr_t)p) == COLL_CU_SUCCESS &&
        (uintptr_t)p - start + bytes > size) {
        coll_set_error(comm, "%s: %s (%p) needs %zu bytes, but its CUDA allocation ends %zu "
                       "bytes after it", fn, name, p, bytes,
                       (size_t)(start + size - (uintptr_t)p));
        return collInvalidArgument;
    }
    *is_dev = true;
    return collSuccess;
}

collResult_t coll_device_check_stream(struct coll_comm *comm, const char *fn, void *stream)
{
    if (!coll_stream_is_live(stream))
        return collSuccess;
    coll_set_error(comm, "%s: stream %p is a collStream_t, but the call's buffers are CUDA "
                   "device memory, which takes a cudaStream_t (or NULL, CUDA's default stream)",
                   fn, stream);
    return collInvalidArgument;
}

/* A device buffer of the work, to be staged. */
struct region {
    uintptr_t lo, hi;
    bool in, out;               /* the call reads it / writes it on this rank */
    int kind;                   /* 0: ops[idx].buf, 1: colls[idx] sendbuf, 2: its recvbuf */
    int idx;
    size_t stage_off;           /* of the region's start in the staging */
};

static void region_add(struct region *r, int *n, const void *p, size_t bytes, bool in, bool out,
                       int kind, int idx)
{
    if (p == NULL || bytes == 0 || (!in && !out) || coll_memtype_of(p) != COLL_MEM_DEVICE)
        return;
    r[(*n)++] = (struct region){(uintptr_t)p, (uintptr_t)p + bytes, in, out, kind, idx, 0};
}

static int region_cmp(const void *a, const void *b)
{
    const struct region *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* The device buffers of w, what each call reads and writes of them on this
 * rank (a reduce writes recvbuff at the root only, a broadcast reads sendbuff
 * there only). */
static int work_regions(const struct coll_work *w, struct region *r)
{
    int n = 0;
    for (int i = 0; i < w->nops; i++) {
        const struct coll_p2p_op *op = &w->ops[i];
        region_add(r, &n, op->buf, op->bytes, op->is_send, !op->is_send, 0, i);
    }
    for (int i = 0; i < w->ncolls; i++) {
        const struct coll_work_coll *c = &w->colls[i];
        size_t bytes = c->a.count * coll_dtype_size(c->a.dtype), nr = (size_t)c->comm->nranks;
        bool root = c->comm->rank == c->a.root;
        size_t in = bytes, out = bytes;
        bool reads = true, writes = true;
        switch (c->f) {
        case COLL_FUNC_ALLGATHER:
            out = bytes * nr;
            break;
        case COLL_FUNC_REDUCE_SCATTER:
            in = bytes * nr;
            break;
        case COLL_FUNC_BROADCAST:
            reads = root;
            break;
        case COLL_FUNC_REDUCE:
            writes = root;
            break;
        default:
            break;
        }
        region_add(r, &n, c->a.sendbuf, in, reads, false, 1, i);
        region_add(r, &n, c->a.recvbuf, out, false, writes, 2, i);
    }
    return n;
}

/* A run of overlapping regions: one piece of staging, copied in when any of
 * them is read, out when any is written.  Regions apart are staged apart, so
 * that no copy out overwrites device bytes the call did not write. */
struct interval {
    uintptr_t lo, hi;
    size_t off;
    bool in, out;
};

static int work_intervals(struct region *r, int n, struct interval *iv, size_t *total)
{
    qsort(r, (size_t)n, sizeof(*r), region_cmp);
    int m = 0;
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        if (m == 0 || r[i].lo >= iv[m - 1].hi) {
            if (m > 0)
                off += (iv[m - 1].hi - iv[m - 1].lo + STAGE_ALIGN - 1) / STAGE_ALIGN * STAGE_ALIGN;
            iv[m++] = (struct interval){r[i].lo, r[i].hi, off, false, false};
        }
        struct interval *v = &iv[m - 1];
        if (r[i].hi > v->hi)
            v->hi = r[i].hi;
        v->in |= r[i].in;
        v->out |= r[i].out;
        r[i].stage_off = v->off + (r[i].lo - v->lo);
    }
    if (m > 0)
        off += iv[m - 1].hi - iv[m - 1].lo;
    *total = off;
    return m;
}

/* Points w's staged buffers at their staging. */
static void work_restage(struct coll_work *w, const struct region *r, int n, char *stage)
{
    for (int i = 0; i < n; i++) {
        char *p = stage + r[i].stage_off;
        if (r[i].kind == 0)
            w->ops[r[i].idx].buf = p;
        else if (r[i].kind == 1)
            w->colls[r[i].idx].a.sendbuf = p;
        else
            w->colls[r[i].idx].a.recvbuf = p;
    }
}

static collResult_t cuda_failed(struct coll_comm *comm, const char *fn, const char *what,
                                cu_result r)
{
    coll_set_error(comm, "%s: %s failed: %s (CUDA error %d)", fn, what, coll_cuda_error_string(r),
                   r);
    return collUnhandledCudaError;
}

static struct coll_device *device_of(struct coll_comm *comm, const char *fn)
{
    pthread_mutex_lock(&device_init_lock);
    struct coll_device *dev = comm->device;
    if (dev == NULL && coll_calloc(&dev, 1) == collSuccess) {
        pthread_mutex_init(&dev->lock, NULL);
        int64_t keep = coll_param_int(COLL_PARAM_DEVICE_STAGE_KEEP);
        dev->keep = keep > 0 ? (size_t)keep : 0;
        if (collStreamCreate(&dev->stream) == collSuccess) {
            comm->device = dev;
        } else {
            pthread_mutex_destroy(&dev->lock);
            free(dev);
            dev = NULL;
        }
    }
    pthread_mutex_unlock(&device_init_lock);
    if (dev == NULL)
        coll_set_error(comm, "%s: out of memory setting up the staging of device buffers", fn);
    return dev;
}

static void devcall_free(const struct coll_cuda_driver *d, struct coll_devcall *c)
{
    if (c->ready)
        d->event_destroy(c->ready);
    if (c->done)
        d->event_destroy(c->done);
    if (c->stage)
        d->mem_free_host(c->stage);
    if (c->flag)
        d->mem_free_host(c->flag);
    free(c);
}

/* A record with `bytes` of staging that the stream is done with, made or
 * reused; the buffers' context is current. */
static collResult_t devcall_get(struct coll_comm *comm, struct coll_device *dev,
                                const struct coll_cuda_driver *d, const char *fn, size_t bytes,
                                struct coll_devcall **out)
{
    struct coll_devcall *c = NULL, *idle = NULL;
    pthread_mutex_lock(&dev->lock);
    for (struct coll_devcall *x = dev->calls; x != NULL; x = x->next) {
        if (x->busy || d->event_query(x->done) != COLL_CU_SUCCESS)
            continue;
        if (x->stage_bytes >= bytes) {
            c = x;
            break;
        }
        if (idle == NULL)
            idle = x;
    }
    if (c == NULL)
        c = idle;
    if (c != NULL)
        c->busy = true;
    /* About to pin more: the other idle records keep dev->keep bytes at most. */
    size_t kept = 0;
    for (struct coll_devcall *x = c != NULL && c->stage_bytes >= bytes ? NULL : dev->calls;
         x != NULL; x = x->next) {
        if (x == c || x->busy || x->stage == NULL || d->event_query(x->done) != COLL_CU_SUCCESS)
            continue;
        if (kept + x->stage_bytes <= dev->keep) {
            kept += x->stage_bytes;
            continue;
        }
        d->mem_free_host(x->stage);
        x->stage = NULL;
        x->stage_bytes = 0;
    }
    pthread_mutex_unlock(&dev->lock);

    cu_result r;
    if (c == NULL) {
        if (coll_calloc(&c, 1) != collSuccess) {
            coll_set_error(comm, "%s: out of memory staging device buffers", fn);
            return collSystemError;
        }
        c->comm = comm;
        void *flag = NULL;
        if ((r = d->mem_host_alloc(&flag, 64, COLL_CU_MEMHOSTALLOC_PORTABLE |
                                                  COLL_CU_MEMHOSTALLOC_DEVICEMAP)) != 0 ||
            (c->flag = flag, memset(flag, 0, 64),
             (r = d->mem_host_get_device_pointer(&c->flag_dev, flag, 0)) != 0) ||
            (r = d->event_create(&c->ready, COLL_CU_EVENT_DISABLE_TIMING)) != 0 ||
            (r = d->event_create(&c->done, COLL_CU_EVENT_DISABLE_TIMING)) != 0) {
            devcall_free(d, c);
            return cuda_failed(comm, fn, "setting up a staging record (cuMemHostAlloc, "
                               "cuEventCreate)", r);
        }
        c->busy = true;
        pthread_mutex_lock(&dev->lock);
        c->next = dev->calls;
        dev->calls = c;
        pthread_mutex_unlock(&dev->lock);
    }
    if (c->stage_bytes < bytes) {
        if (c->stage)
            d->mem_free_host(c->stage);
        c->stage = NULL;
        c->stage_bytes = 0;
        void *p = NULL;
        if ((r = d->mem_host_alloc(&p, bytes, COLL_CU_MEMHOSTALLOC_PORTABLE)) != 0) {
            pthread_mutex_lock(&dev->lock);
            c->busy = false;
            pthread_mutex_unlock(&dev->lock);
            coll_set_error(comm, "%s: cuMemHostAlloc of %zu bytes of pinned staging failed: %s",
                           fn, bytes, coll_cuda_error_string(r));
            return collSystemError;
        }
        c->stage = p;
        c->stage_bytes = bytes;
    }
    *out = c;
    return collSuccess;
}

/* Puts the call's part on the stream: copies in, `ready`, the wait for the
 * flag, copies out, `done`. */
static cu_result devcall_enqueue(const struct coll_cuda_driver *d, struct coll_devcall *c,
                                 const struct interval *iv, int m, cu_stream s)
{
    cu_result r;
    for (int i = 0; i < m; i++)
        if (iv[i].in && (r = d->memcpy_async((cu_deviceptr)(uintptr_t)(c->stage + iv[i].off),
                                              (cu_deviceptr)iv[i].lo, iv[i].hi - iv[i].lo, s)) != 0)
            return r;
    if ((r = d->event_record(c->ready, s)) != 0 ||
        (r = d->stream_wait_value32(s, c->flag_dev, c->gen, COLL_CU_STREAM_WAIT_VALUE_GEQ)) != 0)
        return r;
    for (int i = 0; i < m; i++)
        if (iv[i].out &&
            (r = d->memcpy_async((cu_deviceptr)iv[i].lo,
                                 (cu_deviceptr)(uintptr_t)(c->stage + iv[i].off),
                                 iv[i].hi - iv[i].lo, s)) != 0)
            return r;
    return d->event_record(c->done, s);
}

collResult_t coll_device_issue(struct coll_work *w, void *cuda_stream)
{
    struct coll_comm *comm = w->nops > 0 ? w->ops[0].comm : w->colls[0].comm;
    for (int i = 0; i < w->nops; i++)
        if (w->ops[i].comm != comm)
            comm = NULL;
    for (int i = 0; comm != NULL && i < w->ncolls; i++)
        if (w->colls[i].comm != comm)
            comm = NULL;
    if (comm == NULL) {
        coll_set_error(w->nops > 0 ? w->ops[0].comm : w->colls[0].comm,
                       "%s: a group with device buffers must hold the calls of one "
                       "communicator", w->name);
        coll_work_free(w);
        return collInvalidUsage;
    }
    const char *fn = w->name;
    collResult_t res = collSuccess;
    int nmax = w->nops + 2 * w->ncolls;
    struct region *r = malloc((size_t)nmax * sizeof(*r));
    struct interval *iv = malloc((size_t)nmax * sizeof(*iv));
    const struct coll_cuda_driver *d = coll_cuda_driver(NULL);
    struct coll_device *dev = NULL;
    struct coll_devcall *c = NULL;
    cu_context saved = NULL, ctx = NULL;
    bool ctx_set = false;
    if (r == NULL || iv == NULL) {
        coll_set_error(comm, "%s: out of memory staging device buffers", fn);
        res = collSystemError;
        goto out;
    }
    int n = work_regions(w, r);
    size_t total = 0;
    int m = work_intervals(r, n, iv, &total);
    if (m == 0) /* no bytes to stage: it runs as a call on a stream, in comm's order */
        goto out;
    if (d == NULL) { /* unloaded since the check */
        coll_set_error(comm, "%s: the device buffers are no longer known to a CUDA driver", fn);
        res = collInvalidUsage;
        goto out;
    }
    /* The buffers' context, current while the stream gets its part; the
     * caller's is put back. */
    cu_result cr = d->pointer_get_attribute(&ctx, COLL_CU_POINTER_ATTRIBUTE_CONTEXT,
                                            (cu_deviceptr)iv[0].lo);
    if (cr == 0)
        cr = d->ctx_get_current(&saved);
    if (cr == 0 && ctx == NULL) /* memory of no context (cuMemCreate): the caller's */
        ctx = saved;
    if (cr == 0 && ctx == NULL) {
        coll_set_error(comm, "%s: the device buffers belong to no CUDA context and none is "
                       "current on the calling thread (call cudaSetDevice first)", fn);
        res = collInvalidUsage;
        goto out;
    }
    if (cr == 0 && (cr = d->ctx_set_current(ctx)) == 0)
        ctx_set = true;
    if (cr != 0) {
        res = cuda_failed(comm, fn, "making the buffers' CUDA context current", cr);
        goto out;
    }
    if ((dev = device_of(comm, fn)) == NULL) {
        res = collSystemError;
        goto out;
    }
    if ((res = devcall_get(comm, dev, d, fn, total, &c)) != collSuccess)
        goto out;
    c->ctx = ctx;
    c->gen++;
    if ((cr = devcall_enqueue(d, c, iv, m, (cu_stream)cuda_stream)) != 0) {
        res = cuda_failed(comm, fn, "enqueueing on the CUDA stream", cr);
        /* The stream may hold part of it: the record goes to the graveyard. */
        __atomic_store_n(c->flag, c->gen, __ATOMIC_RELEASE);
        pthread_mutex_lock(&dev->lock);
        struct coll_devcall **pp = &dev->calls;
        while (*pp != c)
            pp = &(*pp)->next;
        *pp = c->next;
        pthread_mutex_unlock(&dev->lock);
        pthread_mutex_lock(&graveyard_lock);
        c->next = graveyard;
        graveyard = c;
        pthread_mutex_unlock(&graveyard_lock);
        goto out;
    }
    work_restage(w, r, n, c->stage);
    w->staged = c;
out:
    if (ctx_set)
        d->ctx_set_current(saved);
    free(r);
    free(iv);
    if (res == collSuccess && dev == NULL && (dev = device_of(comm, fn)) == NULL)
        res = collSystemError;
    if (res != collSuccess) {
        coll_work_free(w);
        return res;
    }
    /* On failure the work is freed there, which lets the stream go on. */
    return coll_stream_submit(comm, dev->stream, w);
}

collResult_t coll_device_work_ready(struct coll_work *w)
{
    struct coll_devcall *c = w->staged;
    if (c == NULL)
        return collSuccess;
    const struct coll_cuda_driver *d = coll_cuda_driver(NULL);
    cu_result r = d->ctx_set_current(c->ctx);
    /* The stream may be busy with the caller's kernels for long: no deadline,
     * but an abort ends the wait.  Spin a little, then sleep up to 50 us (the
     * most this adds to a call whose stream arrives late). */
    long sleep_ns = 1000;
    for (int spins = 0; r == 0 && (r = d->event_query(c->ready)) == COLL_CU_ERROR_NOT_READY;
         spins++) {
        r = 0;
        if (atomic_load(&c->comm->aborting)) {
            coll_set_error(c->comm, "%s: communicator aborted while the call waited for "
                           "its CUDA stream", w->name);
            return collRemoteError; /* as every call cut short by an abort */
        }
        if (spins < 64) {
            sched_yield();
            continue;
        }
        struct timespec ts = {0, sleep_ns};
        nanosleep(&ts, NULL);
        if (sleep_ns < 50000)
            sleep_ns *= 2;
    }
    if (r != 0)
        return cuda_failed(c->comm, w->name, "waiting for the device buffers' copy to the host "
                           "(cuEventQuery)", r);
    return collSuccess;
}

void coll_device_work_end(struct coll_work *w, collResult_t res)
{
    struct coll_devcall *c = w->staged;
    if (c == NULL)
        return;
    w->staged = NULL;
    /* Nothing else reports the failure of a call the caller did not wait for. */
    if (res != collSuccess)
        coll_comm_poison(c->comm, res);
    __atomic_store_n(c->flag, c->gen, __ATOMIC_RELEASE);
    struct coll_device *dev = c->comm->device;
    pthread_mutex_lock(&dev->lock);
    c->busy = false;
    pthread_mutex_unlock(&dev->lock);
}

/* Frees the records whose stream has passed their `done` from *list, and
 * returns the others; with wait, waits for each stream first. */
static struct coll_devcall *devcalls_free_passed(const struct coll_cuda_driver *d,
                                                 struct coll_devcall *list, bool wait)
{
    struct coll_devcall *kept = NULL;
    while (list != NULL) {
        struct coll_devcall *c = list;
        list = c->next;
        bool passed = d->ctx_set_current(c->ctx) == 0 &&
                      (wait ? d->event_synchronize(c->done) : d->event_query(c->done)) == 0;
        if (passed) {
            devcall_free(d, c);
        } else {
            c->next = kept;
            kept = c;
        }
    }
    return kept;
}

void coll_device_comm_fini(struct coll_comm *comm)
{
    struct coll_device *dev = comm->device;
    if (dev == NULL)
        return;
    comm->device = NULL;
    (void)collStreamDestroy(dev->stream); /* its work is done: comm_free drained it */
    const struct coll_cuda_driver *d = coll_cuda_driver(NULL);
    /* The stream may still copy out of the staging: wait for it, unless the comm
     * is being aborted (then what the stream has not passed goes to the
     * graveyard rather than being freed under the copy). */
    struct coll_devcall *left = devcalls_free_passed(d, dev->calls, !atomic_load(&comm->aborting));
    pthread_mutex_lock(&graveyard_lock);
    struct coll_devcall *older = devcalls_free_passed(d, graveyard, false);
    int n = 0;
    struct coll_devcall **tail = &left;
    for (; *tail != NULL; tail = &(*tail)->next)
        n++;
    *tail = older;
    graveyard = left;
    pthread_mutex_unlock(&graveyard_lock);
    if (n > 0)
        COLL_INFO(COLL_SUBSYS_CUDA, "device staging: %d records kept until their CUDA stream "
                  "passes them", n);
    pthread_mutex_destroy(&dev->lock);
    free(dev);
}
