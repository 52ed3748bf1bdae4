/* Device buffers for the perf tools (-D 1, as nccl-tests always uses): CUDA
 * device memory and a CUDA stream, through the CUDA driver (libcuda.so.1,
 * loaded at run time so that the tools build and run without CUDA). */
#ifndef PERF_DEVICE_H
#define PERF_DEVICE_H

#include <stddef.h>

/* Loads the driver and picks device 0 (CUDA_VISIBLE_DEVICES decides which);
 * 0, or -1 with the reason in err.  Once per process. */
int perf_dev_open(char *err, size_t len);
/* Makes the device's primary context current on the calling thread (each rank's
 * thread calls it before the others below). */
int perf_dev_bind(void);
void *perf_dev_alloc(size_t bytes);
void perf_dev_free(void *p);
/* Synchronous copies between host memory and device memory. */
int perf_dev_to_dev(void *dev, const void *host, size_t bytes);
int perf_dev_to_host(void *host, const void *dev, size_t bytes);
void *perf_dev_stream(void);
int perf_dev_sync(void *stream);
void perf_dev_stream_free(void *stream);

#endif
