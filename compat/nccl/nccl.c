/* libnccl.so.2: NCCL's C API over libcollective (nccl.h).  Each call checks
 * what only NCCL has (fp8 types, pre-multiplied sums, config structs made by
 * NCCL's initializer), converts its arguments and calls the coll* call of the
 * same name.  The result codes, data types and ops have the same values in both
 * APIs.  Streams: a call with device buffers is ordered on its cudaStream_t,
 * as in NCCL (lib/core/device.c stages it); a call on host buffers, which NCCL
 * refuses, runs to completion before it returns, which every later use of the
 * stream sees (a cudaStream_t is not a collStream_t). */
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collective.h"
#include "cuda_driver.h"
#include "memtype.h"
#include "nccl.h"

#define NCCL_EXPORT __attribute__((visibility("default")))
#define NCCL_CONFIG_MAGIC 0xcafebeefu

/* What this layer refused last on this thread (ncclGetLastError). */
static _Thread_local char shim_error[256];
static _Thread_local int shim_error_set;

static ncclResult_t shim_fail(ncclResult_t res, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(shim_error, sizeof(shim_error), fmt, ap);
    va_end(ap);
    shim_error_set = 1;
    return res;
}

static ncclResult_t shim_res(collResult_t r)
{
    shim_error_set = 0;
    return (ncclResult_t)r;
}

/* The stream to pass on: the caller's cudaStream_t when a buffer is device
 * memory, else NULL (host buffers: the call blocks). */
static collStream_t shim_stream(cudaStream_t stream, const void *a, const void *b)
{
    bool dev = coll_memtype_of(a) == COLL_MEM_DEVICE || coll_memtype_of(b) == COLL_MEM_DEVICE;
    return dev ? (collStream_t)stream : NULL;
}

/* The CUDA device current on the calling thread; -1 without CUDA or a context. */
static int shim_current_device(void)
{
    const struct coll_cuda_driver *d = coll_cuda_driver(NULL);
    cu_context ctx = NULL;
    int dev = -1;
    if (d == NULL || d->ctx_get_current(&ctx) != 0 || ctx == NULL || d->ctx_get_device(&dev) != 0)
        return -1;
    return dev;
}

/* Each communicator's CUDA device: the one current on the thread that made it,
 * as NCCL binds a communicator to the device current at its init. */
static pthread_mutex_t devices_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shim_device {
    const void *comm;
    int device;
} *devices;
static int ndevices, devices_cap;

static void shim_set_device(const void *comm, int device)
{
    if (comm == NULL)
        return;
    pthread_mutex_lock(&devices_lock);
    if (ndevices == devices_cap) {
        int cap = devices_cap ? 2 * devices_cap : 16;
        struct shim_device *p = realloc(devices, (size_t)cap * sizeof(*p));
        if (p == NULL) {
            pthread_mutex_unlock(&devices_lock);
            return; /* ncclCommCuDevice then says -1 */
        }
        devices = p;
        devices_cap = cap;
    }
    devices[ndevices++] = (struct shim_device){comm, device};
    pthread_mutex_unlock(&devices_lock);
}

/* The device recorded for comm (-1: none), and forgetting it. */
static int shim_device(const void *comm, bool forget)
{
    int device = -1;
    pthread_mutex_lock(&devices_lock);
    for (int i = 0; i < ndevices; i++)
        if (devices[i].comm == comm) {
            device = devices[i].device;
            if (forget)
                devices[i] = devices[--ndevices];
            break;
        }
    pthread_mutex_unlock(&devices_lock);
    return device;
}

static collComm_t C(ncclComm_t comm)
{
    return (collComm_t)(void *)comm;
}

/* The data type, or -1 after recording why (fp8 has no libcollective type). */
static int shim_type(ncclDataType_t t, const char *call)
{
    if (t == ncclFloat8e4m3 || t == ncclFloat8e5m2) {
        shim_fail(ncclInvalidArgument, "%s: datatype %s is not supported by libcollective",
                  call, t == ncclFloat8e4m3 ? "ncclFloat8e4m3" : "ncclFloat8e5m2");
        return -1;
    }
    return (int)t; /* the same values; libcollective checks the range and names it */
}

#define SHIM_TYPE(t, call)                              \
    int ct_ = shim_type((t), (call));                   \
    if (ct_ < 0)                                        \
        return ncclInvalidArgument;

/* An NCCL config as libcollective's; NULL stays NULL. */
static ncclResult_t shim_config(const ncclConfig_t *in, collConfig_t *out, collConfig_t **out_p,
                                const char *call)
{
    *out_p = NULL;
    if (in == NULL)
        return ncclSuccess;
    if (in->magic != NCCL_CONFIG_MAGIC ||
        in->size < offsetof(ncclConfig_t, blocking) + sizeof(in->blocking))
        return shim_fail(ncclInvalidArgument, "%s: config was not set up with "
                         "NCCL_CONFIG_INITIALIZER (magic 0x%x, size %zu)", call, in->magic,
                         in->size);
    collConfig_t c = COLL_CONFIG_INITIALIZER;
    if (in->blocking != NCCL_CONFIG_UNDEF_INT)
        c.blocking = in->blocking;
    if (in->size >= offsetof(ncclConfig_t, commName) + sizeof(in->commName))
        c.commName = in->commName;
    *out = c;
    *out_p = out;
    return ncclSuccess;
}

NCCL_EXPORT ncclResult_t ncclGetVersion(int *version)
{
    if (version == NULL)
        return shim_fail(ncclInvalidArgument, "ncclGetVersion: version is NULL");
    *version = NCCL_VERSION_CODE;
    return shim_res(collSuccess);
}

NCCL_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId)
{
    return shim_res(collGetUniqueId((collUniqueId *)(void *)uniqueId));
}

static collUniqueId shim_id(ncclUniqueId id)
{
    collUniqueId c;
    memcpy(c.internal, id.internal, sizeof(c.internal));
    return c;
}

NCCL_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId,
                                          int rank)
{
    collResult_t res = collCommInitRank((collComm_t *)(void *)comm, nranks, shim_id(commId), rank);
    if (res == collSuccess)
        shim_set_device(*comm, shim_current_device());
    return shim_res(res);
}

NCCL_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks,
                                                ncclUniqueId commId, int rank,
                                                ncclConfig_t *config)
{
    collConfig_t c, *cp;
    ncclResult_t r = shim_config(config, &c, &cp, "ncclCommInitRankConfig");
    if (r != ncclSuccess)
        return r;
    collResult_t res = collCommInitRankConfig((collComm_t *)(void *)comm, nranks,
                                              shim_id(commId), rank, cp);
    if (res == collSuccess || res == collInProgress)
        shim_set_device(*comm, shim_current_device());
    return shim_res(res);
}

NCCL_EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank,
                                                  int nId, ncclUniqueId *commIds,
                                                  ncclConfig_t *config)
{
    if (nId < 1 || commIds == NULL)
        return shim_fail(ncclInvalidArgument, "ncclCommInitRankScalable: nId is %d and commIds "
                         "%s; want at least one id", nId, commIds ? "set" : "NULL");
    /* Every rank holds the same ids: the first serves them all. */
    return ncclCommInitRankConfig(newcomm, nranks, commIds[0], myrank, config);
}

struct init_all_arg {
    collComm_t *comm;
    collUniqueId id;
    int nranks, rank;
    collResult_t res;
};

static void *init_all_thread(void *p)
{
    struct init_all_arg *a = p;
    a->res = collCommInitRank(a->comm, a->nranks, a->id, a->rank);
    return NULL;
}

NCCL_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist)
{
    if (comm == NULL)
        return shim_fail(ncclInvalidArgument, "ncclCommInitAll: comm is NULL");
    if (ndev < 1)
        return shim_fail(ncclInvalidArgument, "ncclCommInitAll: ndev is %d, want 1 or more",
                         ndev);
    collUniqueId id;
    collResult_t res = collGetUniqueId(&id);
    if (res != collSuccess)
        return shim_res(res);
    struct init_all_arg *args = calloc((size_t)ndev, sizeof(*args));
    pthread_t *th = calloc((size_t)ndev, sizeof(*th));
    if (args == NULL || th == NULL) {
        free(args);
        free(th);
        return shim_fail(ncclSystemError, "ncclCommInitAll: out of memory for %d ranks", ndev);
    }
    int started = 0;
    for (int r = 0; r < ndev; r++) {
        args[r] = (struct init_all_arg){.comm = (collComm_t *)(void *)&comm[r], .id = id,
                                        .nranks = ndev, .rank = r, .res = collSuccess};
        if (pthread_create(&th[r], NULL, init_all_thread, &args[r]) != 0) {
            args[r].res = collSystemError;
            break;
        }
        started++;
    }
    res = started == ndev ? collSuccess : collSystemError;
    for (int r = 0; r < started; r++) {
        pthread_join(th[r], NULL);
        if (res == collSuccess && args[r].res != collSuccess)
            res = args[r].res;
    }
    if (res != collSuccess) /* all or none */
        for (int r = 0; r < started; r++)
            if (args[r].res == collSuccess)
                collCommAbort(C(comm[r]));
    /* Rank r's device: devlist[r] (or r), as NCCL's, where CUDA is in use. */
    for (int r = 0; res == collSuccess && r < ndev; r++)
        shim_set_device(comm[r], coll_cuda_driver(NULL) == NULL ? -1 : devlist ? devlist[r] : r);
    free(args);
    free(th);
    if (started < ndev)
        return shim_fail(ncclSystemError, "ncclCommInitAll: cannot start thread %d of %d",
                         started, ndev);
    return shim_res(res);
}

NCCL_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
    return shim_res(collCommFinalize(C(comm)));
}

NCCL_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    collResult_t res = collCommDestroy(C(comm));
    if (res == collSuccess)
        (void)shim_device(comm, true);
    return shim_res(res);
}

NCCL_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    collResult_t res = collCommAbort(C(comm));
    if (res == collSuccess)
        (void)shim_device(comm, true);
    return shim_res(res);
}

NCCL_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                                       ncclConfig_t *config)
{
    collConfig_t c, *cp;
    ncclResult_t r = shim_config(config, &c, &cp, "ncclCommSplit");
    if (r != ncclSuccess)
        return r;
    collResult_t res = collCommSplit(C(comm), color, key, (collComm_t *)(void *)newcomm, cp);
    if ((res == collSuccess || res == collInProgress) && *newcomm != NULL)
        shim_set_device(*newcomm, shim_device(comm, false));
    return shim_res(res);
}

NCCL_EXPORT ncclResult_t ncclCommShrink(ncclComm_t comm, int *excludeRanksList,
                                        int excludeRanksCount, ncclComm_t *newcomm,
                                        ncclConfig_t *config, int shrinkFlags)
{
    collConfig_t c, *cp;
    ncclResult_t r = shim_config(config, &c, &cp, "ncclCommShrink");
    if (r != ncclSuccess)
        return r;
    collResult_t res = collCommShrink(C(comm), excludeRanksList, excludeRanksCount,
                                      (collComm_t *)(void *)newcomm, cp, shrinkFlags);
    if ((res == collSuccess || res == collInProgress) && *newcomm != NULL)
        shim_set_device(*newcomm, shim_device(comm, false));
    return shim_res(res);
}

NCCL_EXPORT ncclResult_t ncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId *uniqueId)
{
    _Static_assert(sizeof(ncclUniqueId) == sizeof(collUniqueId), "ids of one size");
    return shim_res(collCommGetUniqueId(C(comm), (collUniqueId *)(void *)uniqueId));
}

NCCL_EXPORT ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId *uniqueId,
                                      int rank, ncclComm_t *newcomm, ncclConfig_t *config)
{
    collConfig_t c, *cp;
    ncclResult_t r = shim_config(config, &c, &cp, "ncclCommGrow");
    if (r != ncclSuccess)
        return r;
    collUniqueId id;
    if (uniqueId != NULL)
        id = shim_id(*uniqueId);
    collResult_t res = collCommGrow(C(comm), nRanks, uniqueId ? &id : NULL, rank,
                                    (collComm_t *)(void *)newcomm, cp);
    if ((res == collSuccess || res == collInProgress) && *newcomm != NULL)
        shim_set_device(*newcomm, comm ? shim_device(comm, false) : shim_current_device());
    return shim_res(res);
}

NCCL_EXPORT ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags)
{
    return shim_res(collCommRevoke(C(comm), revokeFlags));
}

NCCL_EXPORT const char *ncclGetErrorString(ncclResult_t result)
{
    return collGetErrorString((collResult_t)result);
}

NCCL_EXPORT const char *ncclGetLastError(ncclComm_t comm)
{
    return shim_error_set ? shim_error : collGetLastError(C(comm));
}

NCCL_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
    return shim_res(collCommGetAsyncError(C(comm), (collResult_t *)(void *)asyncError));
}

NCCL_EXPORT ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
    return shim_res(collCommCount(C(comm), count));
}

NCCL_EXPORT ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device)
{
    int n;
    collResult_t res = collCommCount(C(comm), &n); /* checks comm */
    if (res != collSuccess)
        return shim_res(res);
    if (device == NULL)
        return shim_fail(ncclInvalidArgument, "ncclCommCuDevice: device is NULL");
    *device = shim_device(comm, false); /* -1: made without a CUDA context current */
    return shim_res(collSuccess);
}

NCCL_EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
    return shim_res(collCommUserRank(C(comm), rank));
}

NCCL_EXPORT ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size,
                                          void **handle)
{
    return shim_res(collCommRegister(C(comm), buff, size, handle));
}

NCCL_EXPORT ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle)
{
    return shim_res(collCommDeregister(C(comm), handle));
}

/* Device memory, as NCCL's, when the thread has a CUDA context current; host
 * memory from collMemAlloc otherwise. */
NCCL_EXPORT ncclResult_t ncclMemAlloc(void **ptr, size_t size)
{
    const struct coll_cuda_driver *d = coll_cuda_driver(NULL);
    if (ptr == NULL || size == 0 || d == NULL || shim_current_device() < 0)
        return shim_res(collMemAlloc(ptr, size));
    cu_deviceptr p = 0;
    cu_result r = d->mem_alloc(&p, size);
    if (r != 0)
        return shim_fail(ncclUnhandledCudaError, "ncclMemAlloc: cuMemAlloc of %zu bytes failed: "
                         "%s", size, coll_cuda_error_string(r));
    *ptr = (void *)(uintptr_t)p;
    return shim_res(collSuccess);
}

NCCL_EXPORT ncclResult_t ncclMemFree(void *ptr)
{
    const struct coll_cuda_driver *d = coll_cuda_driver(NULL);
    if (ptr == NULL || d == NULL || coll_memtype_of(ptr) != COLL_MEM_DEVICE)
        return shim_res(collMemFree(ptr));
    cu_result r = d->mem_free((cu_deviceptr)(uintptr_t)ptr);
    if (r != 0)
        return shim_fail(ncclUnhandledCudaError, "ncclMemFree: cuMemFree failed: %s",
                         coll_cuda_error_string(r));
    return shim_res(collSuccess);
}

NCCL_EXPORT ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar,
                                                  ncclDataType_t datatype,
                                                  ncclScalarResidence_t residence,
                                                  ncclComm_t comm)
{
    (void)op, (void)scalar, (void)datatype, (void)residence, (void)comm;
    return shim_fail(ncclInvalidUsage, "ncclRedOpCreatePreMulSum: pre-multiplied sums are not "
                     "supported by libcollective (scale the input, then ncclSum)");
}

NCCL_EXPORT ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm)
{
    (void)comm;
    return shim_fail(ncclInvalidUsage, "ncclRedOpDestroy: op %d was not made by "
                     "ncclRedOpCreatePreMulSum (which libcollective does not support)", (int)op);
}

NCCL_EXPORT ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                                    ncclDataType_t datatype, ncclRedOp_t op, int root,
                                    ncclComm_t comm, cudaStream_t stream)
{
    SHIM_TYPE(datatype, "ncclReduce");
    return shim_res(collReduce(sendbuff, recvbuff, count, (collDataType_t)ct_, (collRedOp_t)op,
                               root, C(comm), shim_stream(stream, sendbuff, recvbuff)));
}

NCCL_EXPORT ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
                                   ncclComm_t comm, cudaStream_t stream)
{
    return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

NCCL_EXPORT ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                                       ncclDataType_t datatype, int root, ncclComm_t comm,
                                       cudaStream_t stream)
{
    SHIM_TYPE(datatype, "ncclBroadcast");
    return shim_res(collBroadcast(sendbuff, recvbuff, count, (collDataType_t)ct_, root, C(comm),
                                  shim_stream(stream, sendbuff, recvbuff)));
}

NCCL_EXPORT ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                       ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                       cudaStream_t stream)
{
    SHIM_TYPE(datatype, "ncclAllReduce");
    return shim_res(collAllReduce(sendbuff, recvbuff, count, (collDataType_t)ct_,
                                  (collRedOp_t)op, C(comm),
                                  shim_stream(stream, sendbuff, recvbuff)));
}

NCCL_EXPORT ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff,
                                           size_t recvcount, ncclDataType_t datatype,
                                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    SHIM_TYPE(datatype, "ncclReduceScatter");
    return shim_res(collReduceScatter(sendbuff, recvbuff, recvcount, (collDataType_t)ct_,
                                      (collRedOp_t)op, C(comm),
                                      shim_stream(stream, sendbuff, recvbuff)));
}

NCCL_EXPORT ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                       ncclDataType_t datatype, ncclComm_t comm,
                                       cudaStream_t stream)
{
    SHIM_TYPE(datatype, "ncclAllGather");
    return shim_res(collAllGather(sendbuff, recvbuff, sendcount, (collDataType_t)ct_, C(comm),
                                  shim_stream(stream, sendbuff, recvbuff)));
}

NCCL_EXPORT ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                                      ncclDataType_t datatype, ncclComm_t comm,
                                      cudaStream_t stream)
{
    SHIM_TYPE(datatype, "ncclAlltoAll");
    return shim_res(collAlltoAll(sendbuff, recvbuff, count, (collDataType_t)ct_, C(comm),
                                 shim_stream(stream, sendbuff, recvbuff)));
}

NCCL_EXPORT ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count,
                                    ncclDataType_t datatype, int root, ncclComm_t comm,
                                    cudaStream_t stream)
{
    SHIM_TYPE(datatype, "ncclGather");
    return shim_res(collGather(sendbuff, recvbuff, count, (collDataType_t)ct_, root, C(comm),
                               shim_stream(stream, sendbuff, recvbuff)));
}

NCCL_EXPORT ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                                     ncclDataType_t datatype, int root, ncclComm_t comm,
                                     cudaStream_t stream)
{
    SHIM_TYPE(datatype, "ncclScatter");
    return shim_res(collScatter(sendbuff, recvbuff, count, (collDataType_t)ct_, root, C(comm),
                                shim_stream(stream, sendbuff, recvbuff)));
}

NCCL_EXPORT ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype,
                                  int peer, ncclComm_t comm, cudaStream_t stream)
{
    SHIM_TYPE(datatype, "ncclSend");
    return shim_res(collSend(sendbuff, count, (collDataType_t)ct_, peer, C(comm),
                             shim_stream(stream, sendbuff, NULL)));
}

NCCL_EXPORT ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype,
                                  int peer, ncclComm_t comm, cudaStream_t stream)
{
    SHIM_TYPE(datatype, "ncclRecv");
    return shim_res(collRecv(recvbuff, count, (collDataType_t)ct_, peer, C(comm),
                             shim_stream(stream, recvbuff, NULL)));
}

NCCL_EXPORT ncclResult_t ncclGroupStart(void)
{
    return shim_res(collGroupStart());
}

NCCL_EXPORT ncclResult_t ncclGroupEnd(void)
{
    return shim_res(collGroupEnd());
}
