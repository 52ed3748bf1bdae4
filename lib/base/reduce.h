/* Reduction kernels: [op][dtype], vectorised.  float16 and bfloat16 are computed
 * in float32 and rounded to nearest even once per element and step. */
#ifndef COLL_REDUCE_H
#define COLL_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "collective.h"

/* Size in bytes of one element, 0 for an invalid type. */
size_t coll_dtype_size(collDataType_t t);
/* Static names: "float32", "sum"; "?" when out of range. */
const char *coll_dtype_name(collDataType_t t);
const char *coll_op_name(collRedOp_t op);

/* dst[i] = a[i] op b[i] for i < n elements.  dst may equal a or b (exactly, not
 * partially overlapping).  collAvg reduces as collSum; the division is separate
 * (coll_reduce_div).  Integers wrap around; max/min of floats propagate NaN. */
void coll_reduce(collRedOp_t op, collDataType_t t, void *dst, const void *a, const void *b,
                 size_t n);
/* dst[i] = src[i] / divisor (the last step of collAvg).  Integers truncate toward
 * zero; float16/bfloat16 divide in float32 and round once.  dst may equal src. */
void coll_reduce_div(collDataType_t t, void *dst, const void *src, size_t n, int divisor);

/* Conversions, exposed for tests and the perf tools. */
float coll_half_to_float(uint16_t h);
uint16_t coll_float_to_half(float f); /* round to nearest even */
float coll_bf16_to_float(uint16_t b);
uint16_t coll_float_to_bf16(float f); /* round to nearest even, NaN stays NaN */

#endif
