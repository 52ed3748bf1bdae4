/* What tests/test_device.c needs of CUDA, so that it runs against the stand-in
 * driver (tests/device_fake.c, on tests/fake_cuda.c: CI) and against a real GPU
 * (tests/gpu/device_cuda.c, on the CUDA runtime: tests/gpu/run.sh). */
#ifndef COLL_TEST_DEVICE_BACKEND_H
#define COLL_TEST_DEVICE_BACKEND_H

#include <stdatomic.h>
#include <stddef.h>

/* 0 when device buffers can be had here, 77 (skip) with the reason printed. */
int tdev_init(void);
/* Device memory (zeroed), on the calling thread's device. */
void *tdev_malloc(size_t bytes);
void *tdev_stream_create(void);
void tdev_stream_sync(void *s);
/* Enqueue on s a copy host -> device or device -> host; the host memory must
 * stay as it is until s is synchronized. */
void tdev_to_dev(void *s, void *dev, const void *host, size_t bytes);
void tdev_to_host(void *s, void *host, const void *dev, size_t bytes);
/* Enqueue on s a wait until *open is set (by the host) or 20 s have passed. */
void tdev_gate(void *s, atomic_int *open);
/* Pinned staging blocks still allocated by the library, and their bytes, or -1
 * when unknown. */
long tdev_pinned_live(void);
long tdev_pinned_bytes(void);

#endif
