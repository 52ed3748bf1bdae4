/* Device buffers: calls whose buffers are CUDA device memory, staged through
 * pinned host memory and ordered on the caller's CUDA stream (device.c). */
#ifndef COLL_DEVICE_H
#define COLL_DEVICE_H

#include <stdbool.h>

#include "internal.h"
#include "p2p.h"

/* Checks a buffer of `bytes` bytes that a call named fn takes as `name`, and
 * says whether it is CUDA device memory (*is_dev).  Device memory is refused
 * (collInvalidUsage or collInvalidArgument, described on comm) when the loaded
 * CUDA driver lacks a call the staging needs, or when [p, p + bytes) runs past
 * the allocation p is in.  Host and managed memory pass as host memory. */
collResult_t coll_device_check_buffer(struct coll_comm *comm, const char *fn, const char *name,
                                      const void *p, size_t bytes, bool *is_dev);

/* With device buffers the stream is a cudaStream_t: a live collStream_t given
 * instead is refused (collInvalidArgument naming fn). */
collResult_t coll_device_check_stream(struct coll_comm *comm, const char *fn, void *stream);

/* Issues w, whose calls (all on one communicator) have device buffers, on CUDA
 * stream cuda_stream: the device buffers are copied to pinned host memory on
 * that stream, the calls run on the communicator's progress thread once the
 * copies are done, and the stream copies the results back and goes on after
 * that.  Returns once all of it is enqueued; w's arrays pass to the callee. */
collResult_t coll_device_issue(struct coll_work *w, void *cuda_stream);

/* Called by coll_work_run before it runs a staged work (waits until the
 * stream's copies in are done: collSuccess, or the failure) and after it
 * (lets the stream go on, with res recorded); coll_work_free lets the stream
 * go on when the work never ran.  No-ops for a work without staging. */
collResult_t coll_device_work_ready(struct coll_work *w);
void coll_device_work_end(struct coll_work *w, collResult_t res);

/* Frees comm's staging, after its queued calls are done (comm_free). */
void coll_device_comm_fini(struct coll_comm *comm);

#endif
