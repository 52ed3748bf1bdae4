/* The reduction kernels on a CUDA device (reduce_cuda.cu), built when the CUDA
 * toolkit is found: the same element semantics as the host kernels of
 * reduce.h (integers wrap, NaN-propagating max/min, float16 and bfloat16
 * widened to float32 and rounded to nearest even once, the host's own
 * conversions), so that a device reduction gives the host's bytes.  Finite
 * inputs give bitwise the host's result; the payload of a NaN may differ (the
 * host's own depends on the order its compiler gives the operands). */
#ifndef COLL_REDUCE_CUDA_H
#define COLL_REDUCE_CUDA_H

#include <stddef.h>

#include "collective.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dst[i] = a[i] op b[i] for i < n, device pointers (dst may be a or b), enqueued
 * on stream (a cudaStream_t; NULL: the default stream).  collAvg sums.  Returns 0,
 * or the cudaError_t of the launch. */
int coll_cuda_reduce(collRedOp_t op, collDataType_t t, void *dst, const void *a, const void *b,
                     size_t n, void *stream);
/* dst[i] = src[i] / divisor, as coll_reduce_div. */
int coll_cuda_reduce_div(collDataType_t t, void *dst, const void *src, size_t n, int divisor,
                         void *stream);

#ifdef __cplusplus
}
#endif

#endif
