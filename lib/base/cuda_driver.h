/* The CUDA driver API calls the library makes on device buffers, looked up in
 * the driver the process has already loaded (libcuda.so.1, which the CUDA
 * runtime loads), never linked: a library built anywhere runs where CUDA is
 * absent, and a process that holds device memory has the driver loaded.
 *
 * The types are the driver's as plain C types (cuda.h is not needed to build):
 * CUstream, CUevent and CUcontext are pointers, CUdeviceptr an unsigned 64-bit
 * integer.  A stream handle is passed through as the user gave it: NULL is the
 * legacy default stream, as cudaStream_t 0 is for code built without
 * --default-stream per-thread. */
#ifndef COLL_CUDA_DRIVER_H
#define COLL_CUDA_DRIVER_H

#include <stddef.h>
#include <stdint.h>

typedef int cu_result;            /* CUresult: 0 success */
typedef uint64_t cu_deviceptr;    /* CUdeviceptr */
typedef void *cu_stream;          /* CUstream */
typedef void *cu_event;           /* CUevent */
typedef void *cu_context;         /* CUcontext */

#define COLL_CU_SUCCESS 0
#define COLL_CU_ERROR_NOT_READY 600
#define COLL_CU_POINTER_ATTRIBUTE_CONTEXT 1
#define COLL_CU_POINTER_ATTRIBUTE_RANGE_START_ADDR 11
#define COLL_CU_POINTER_ATTRIBUTE_RANGE_SIZE 12
#define COLL_CU_MEMHOSTALLOC_PORTABLE 0x01
#define COLL_CU_MEMHOSTALLOC_DEVICEMAP 0x02
#define COLL_CU_EVENT_DISABLE_TIMING 0x02
#define COLL_CU_STREAM_WAIT_VALUE_GEQ 0x0

struct coll_cuda_driver {
    cu_result (*pointer_get_attribute)(void *data, int attribute, cu_deviceptr ptr);
    cu_result (*ctx_get_current)(cu_context *ctx);
    cu_result (*ctx_set_current)(cu_context ctx);
    cu_result (*ctx_get_device)(int *device);
    cu_result (*mem_alloc)(cu_deviceptr *p, size_t bytes);
    cu_result (*mem_free)(cu_deviceptr p);
    cu_result (*mem_host_alloc)(void **p, size_t bytes, unsigned int flags);
    cu_result (*mem_free_host)(void *p);
    cu_result (*mem_host_get_device_pointer)(cu_deviceptr *d, void *p, unsigned int flags);
    cu_result (*memcpy_async)(cu_deviceptr dst, cu_deviceptr src, size_t bytes, cu_stream s);
    cu_result (*event_create)(cu_event *e, unsigned int flags);
    cu_result (*event_record)(cu_event e, cu_stream s);
    cu_result (*event_query)(cu_event e);
    cu_result (*event_synchronize)(cu_event e);
    cu_result (*event_destroy)(cu_event e);
    cu_result (*stream_wait_value32)(cu_stream s, cu_deviceptr addr, uint32_t value,
                                     unsigned int flags);
    cu_result (*get_error_string)(cu_result r, const char **s);
};

/* The driver's calls, or NULL when the process has no driver loaded or it
 * lacks one of them (*missing then names it, or says that no driver is
 * loaded).  Looked up once; a driver loaded later is found by a later call. */
const struct coll_cuda_driver *coll_cuda_driver(const char **missing);

/* The driver's description of r ("CUDA_ERROR_..." text), never NULL. */
const char *coll_cuda_error_string(cu_result r);

#endif
