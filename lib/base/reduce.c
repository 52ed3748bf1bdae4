/*
 * Reduction kernels: dst[i] = a[i] op b[i] for every collDataType_t x collRedOp_t, and the
 * division that ends collAvg.
 *
 * Semantics, the same on every path:
 *   - Integers wrap around.  Sum and product run in the unsigned type of the same width
 *     (signed overflow is undefined in C; the two's complement bits are the same), so an
 *     int32 and a uint32 sum share one loop.  Max and min compare in the declared type.
 *   - Floats: max/min propagate NaN: if either input is NaN the result is NaN.  This
 *     differs from fmaxf() and from x86's maxps, which both return the other operand, and
 *     so hide a NaN from one rank behind a number from another; a training run should see
 *     the NaN.  When both are NaN, a's NaN wins.  max(+0, -0) may return either zero.
 *   - float16 and bfloat16 are widened to float32, combined, and rounded to nearest even
 *     once.  float32 carries more than twice their precision plus two bits, so this equals
 *     the correctly rounded result of the operation on the narrow type.
 *   - coll_reduce_div: integers truncate toward zero (C division), floats divide, and the
 *     narrow floats divide in float32 and round once.
 *
 * Speed: the sum/prod/max/min loops for the 32/64-bit floats and all integers are written so
 * that GCC and Clang vectorise them at -O2 (GCC's default "very cheap" cost model at -O2
 * only vectorises loops whose trip count is a multiple of the vector length and that need no
 * run-time alias check, hence the fixed-size blocks and the ivdep pragmas below).  On
 * x86 the function holding them is compiled twice, for AVX2 and for the baseline (SSE2 on
 * x86-64), and the first call picks one for the CPU it runs on, so no -march flag is needed.
 * float16 uses the F16C conversion instructions when the CPU has them.
 *
 * Why not target_clones: its ifunc resolver runs while the dynamic loader relocates the
 * program, before a sanitizer runtime is set up, and under ThreadSanitizer (GCC and Clang)
 * the instrumented resolver crashes; ifunc also needs glibc.  A cached CPUID check costs one
 * load and branch per call.  There is no AVX-512 version: these loops are bound by cache and
 * memory bandwidth, and on the Xeon measured in docs/reduce.md 512-bit vectors were about 10%
 * slower than 256-bit ones for buffers in L2, and no faster beyond.
 *
 * Aliasing: dst may be a or b (exactly).  Every element is read before it is written, in
 * the same iteration, so there is no dependence between iterations and vector code that
 * loads a whole vector before storing it stays correct; the ivdep pragmas tell the compiler
 * so instead of using restrict, which would be undefined behaviour when dst == a.
 */
#include "reduce.h"

#include <assert.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define REDUCE_X86 1
#else
#define REDUCE_X86 0
#endif

/* "No dependence between iterations": true even when dst == a or dst == b (see above).
 * Clang warns when a loop so marked is not vectorised after all, which happens in -O0, -O1
 * and sanitizer builds; the code is correct either way, so that warning is off here. */
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpass-failed"
#define REDUCE_IVDEP _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define REDUCE_IVDEP _Pragma("GCC ivdep")
#else
#define REDUCE_IVDEP
#endif

#if defined(__GNUC__)
#define REDUCE_INLINE static inline __attribute__((always_inline))
#else
#define REDUCE_INLINE static inline
#endif

/* Elements per block, multiples of every vector length (64 int8 fill two AVX2 registers). */
#define REDUCE_LARGE 1024
#define REDUCE_SMALL 64

/* ---- names and sizes ---- */

static const size_t reduce_dtype_sizes[collNumTypes] = {
    [collInt8] = 1,    [collUint8] = 1,   [collInt32] = 4,   [collUint32] = 4,
    [collInt64] = 8,   [collUint64] = 8,  [collFloat16] = 2, [collFloat32] = 4,
    [collFloat64] = 8, [collBfloat16] = 2,
};

static const char *const reduce_dtype_names[collNumTypes] = {
    [collInt8] = "int8",       [collUint8] = "uint8",     [collInt32] = "int32",
    [collUint32] = "uint32",   [collInt64] = "int64",     [collUint64] = "uint64",
    [collFloat16] = "float16", [collFloat32] = "float32", [collFloat64] = "float64",
    [collBfloat16] = "bfloat16",
};

static const char *const reduce_op_names[collNumOps] = {
    [collSum] = "sum", [collProd] = "prod", [collMax] = "max", [collMin] = "min", [collAvg] = "avg",
};

size_t coll_dtype_size(collDataType_t t)
{
    return (unsigned)t < collNumTypes ? reduce_dtype_sizes[t] : 0;
}

const char *coll_dtype_name(collDataType_t t)
{
    return (unsigned)t < collNumTypes ? reduce_dtype_names[t] : "?";
}

const char *coll_op_name(collRedOp_t op)
{
    return (unsigned)op < collNumOps ? reduce_op_names[op] : "?";
}

/* ---- conversions ---- */

REDUCE_INLINE float reduce_bits_to_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

REDUCE_INLINE uint32_t reduce_float_to_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

float coll_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;

    if (exp == 0x1f) /* inf, or NaN with its payload kept and the quiet bit set */
        return reduce_bits_to_float(sign | 0x7f800000u | (mant ? 0x00400000u | mant << 13 : 0));
    if (exp == 0) {
        /* Zero or subnormal: mant units of 2^-24, exact in float32. */
        float f = (float)mant * 0x1p-24f;
        return sign ? -f : f;
    }
    /* Normal: rebias the exponent from 15 to 127. */
    return reduce_bits_to_float(sign | (exp + 112) << 23 | mant << 13);
}

uint16_t coll_float_to_half(float f)
{
    uint32_t u = reduce_float_to_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t abs = u & 0x7fffffffu;

    if (abs > 0x7f800000u) /* NaN: keep the top payload bits, force quiet */
        return (uint16_t)(sign | 0x7e00u | (abs & 0x7fffffu) >> 13);
    if (abs >= 0x38800000u) {
        /* Normal half range (>= 2^-14) or above: rebias, then round the 13 dropped bits to
         * nearest even.  A carry out of the mantissa bumps the exponent, which is right,
         * and anything that lands at or past the infinity encoding is infinity. */
        uint32_t r = abs - (112u << 23);
        r = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
        return (uint16_t)(sign | (r < 0x7c00u ? r : 0x7c00u));
    }
    if (abs <= 0x33000000u) /* at most 2^-25, half the smallest subnormal: ties to 0 */
        return sign;
    /* Subnormal half: the value in units of 2^-24 is mant >> shift, with shift in [14, 24];
     * round the dropped bits to nearest even.  Rounding up from 0x3ff gives 0x400, the
     * smallest normal, which is again right. */
    uint32_t exp = abs >> 23;
    uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - exp;
    uint32_t r = mant >> shift;
    uint32_t rest = mant & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rest > half || (rest == half && (r & 1u)))
        r++;
    return (uint16_t)(sign | r);
}

float coll_bf16_to_float(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    if ((u & 0x7fffffffu) > 0x7f800000u)
        u |= 0x00400000u; /* quiet a signalling NaN */
    return reduce_bits_to_float(u);
}

/* bfloat16 is the top half of a float32, so rounding is an integer add: the carry of a
 * round-up moves into the exponent, and past the largest finite value it reaches infinity.
 * Written without branches (a select for NaN) so the loops that use it vectorise. */
REDUCE_INLINE uint16_t reduce_to_bf16(float f)
{
    uint32_t u = reduce_float_to_bits(f);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t quiet = (u >> 16) | 0x40u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
}

uint16_t coll_float_to_bf16(float f)
{
    return reduce_to_bf16(f);
}

/* The kernels widen bfloat16 without quieting: the arithmetic or reduce_to_bf16 quiets. */
REDUCE_INLINE float reduce_from_bf16(uint16_t b)
{
    return reduce_bits_to_float((uint32_t)b << 16);
}

/* ---- element operations ---- */

#define REDUCE_SUM(x, y) ((x) + (y))
#define REDUCE_PROD(x, y) ((x) * (y))
#define REDUCE_MAX(x, y) ((x) > (y) ? (x) : (y))
#define REDUCE_MIN(x, y) ((x) < (y) ? (x) : (y))
/* NaN-propagating: isnan(x) covers a NaN in a; a NaN in b fails the comparison. */
#define REDUCE_FMAX(x, y) ((x) > (y) || isnan(x) ? (x) : (y))
#define REDUCE_FMIN(x, y) ((x) < (y) || isnan(x) ? (x) : (y))

/*
 * One loop per (type, op).  The inner loops run a constant number of times, a multiple of
 * every vector length, so GCC at -O2 turns them into vector code with no scalar epilogue.
 * Long blocks amortise the outer loop; short ones keep the scalar tail (at most
 * REDUCE_SMALL - 1 elements) short.  Clang vectorises every level.  OP is applied to
 * (a[i], b[i]) in that order.
 */
#define REDUCE_DEFINE_LOOP(name, T, OP)                                                 \
    REDUCE_INLINE void name(T *dst, const T *a, const T *b, size_t n)                   \
    {                                                                                   \
        size_t i = 0;                                                                   \
        for (; n - i >= REDUCE_LARGE; i += REDUCE_LARGE) {                              \
            REDUCE_IVDEP                                                                \
            for (size_t j = 0; j < REDUCE_LARGE; j++)                                   \
                dst[i + j] = (T)OP(a[i + j], b[i + j]);                                 \
        }                                                                               \
        for (; n - i >= REDUCE_SMALL; i += REDUCE_SMALL) {                              \
            REDUCE_IVDEP                                                                \
            for (size_t j = 0; j < REDUCE_SMALL; j++)                                   \
                dst[i + j] = (T)OP(a[i + j], b[i + j]);                                 \
        }                                                                               \
        REDUCE_IVDEP                                                                    \
        for (; i < n; i++)                                                              \
            dst[i] = (T)OP(a[i], b[i]);                                                 \
    }

#define REDUCE_DEFINE_INT(suffix, S, U)                                                 \
    REDUCE_DEFINE_LOOP(reduce_sum_##suffix, U, REDUCE_SUM)                              \
    REDUCE_DEFINE_LOOP(reduce_prod_##suffix, U, REDUCE_PROD)                            \
    REDUCE_DEFINE_LOOP(reduce_max_##suffix, S, REDUCE_MAX)                              \
    REDUCE_DEFINE_LOOP(reduce_min_##suffix, S, REDUCE_MIN)                              \
    REDUCE_DEFINE_LOOP(reduce_max_u##suffix, U, REDUCE_MAX)                             \
    REDUCE_DEFINE_LOOP(reduce_min_u##suffix, U, REDUCE_MIN)

REDUCE_DEFINE_INT(i8, int8_t, uint8_t)
REDUCE_DEFINE_INT(i32, int32_t, uint32_t)
REDUCE_DEFINE_INT(i64, int64_t, uint64_t)

#define REDUCE_DEFINE_FLOAT(suffix, T)                                                  \
    REDUCE_DEFINE_LOOP(reduce_sum_##suffix, T, REDUCE_SUM)                              \
    REDUCE_DEFINE_LOOP(reduce_prod_##suffix, T, REDUCE_PROD)                            \
    REDUCE_DEFINE_LOOP(reduce_max_##suffix, T, REDUCE_FMAX)                             \
    REDUCE_DEFINE_LOOP(reduce_min_##suffix, T, REDUCE_FMIN)

REDUCE_DEFINE_FLOAT(f32, float)
REDUCE_DEFINE_FLOAT(f64, double)

/* bfloat16: widen, combine in float32, round.  Integer shifts and a select, so it
 * vectorises too. */
#define REDUCE_BF16(x, y, OP) reduce_to_bf16(OP(reduce_from_bf16(x), reduce_from_bf16(y)))
#define REDUCE_BF16_SUM(x, y) REDUCE_BF16(x, y, REDUCE_SUM)
#define REDUCE_BF16_PROD(x, y) REDUCE_BF16(x, y, REDUCE_PROD)
#define REDUCE_BF16_MAX(x, y) REDUCE_BF16(x, y, REDUCE_FMAX)
#define REDUCE_BF16_MIN(x, y) REDUCE_BF16(x, y, REDUCE_FMIN)
REDUCE_DEFINE_LOOP(reduce_sum_bf16, uint16_t, REDUCE_BF16_SUM)
REDUCE_DEFINE_LOOP(reduce_prod_bf16, uint16_t, REDUCE_BF16_PROD)
REDUCE_DEFINE_LOOP(reduce_max_bf16, uint16_t, REDUCE_BF16_MAX)
REDUCE_DEFINE_LOOP(reduce_min_bf16, uint16_t, REDUCE_BF16_MIN)

/* Picks the loop for (op, t).  Everything above is inlined here, and this is inlined into
 * each of the functions below, so each carries every loop compiled for its instruction set. */
#define REDUCE_BY_OP(suffix, T)                                                         \
    do {                                                                                \
        switch (op) {                                                                   \
        case collSum:                                                                   \
        case collAvg:                                                                   \
            reduce_sum_##suffix((T *)dst, (const T *)a, (const T *)b, n);              \
            return;                                                                     \
        case collProd:                                                                  \
            reduce_prod_##suffix((T *)dst, (const T *)a, (const T *)b, n);             \
            return;                                                                     \
        default:                                                                        \
            break;                                                                      \
        }                                                                               \
    } while (0)

#define REDUCE_MINMAX(suffix, T)                                                        \
    do {                                                                                \
        if (op == collMax)                                                              \
            reduce_max_##suffix((T *)dst, (const T *)a, (const T *)b, n);              \
        else                                                                            \
            reduce_min_##suffix((T *)dst, (const T *)a, (const T *)b, n);              \
        return;                                                                         \
    } while (0)

REDUCE_INLINE void reduce_vector_body(collRedOp_t op, collDataType_t t, void *dst,
                                      const void *a, const void *b, size_t n)
{
    switch (t) {
    case collInt8:
        REDUCE_BY_OP(i8, uint8_t);
        REDUCE_MINMAX(i8, int8_t);
    case collUint8:
        REDUCE_BY_OP(i8, uint8_t);
        REDUCE_MINMAX(ui8, uint8_t);
    case collInt32:
        REDUCE_BY_OP(i32, uint32_t);
        REDUCE_MINMAX(i32, int32_t);
    case collUint32:
        REDUCE_BY_OP(i32, uint32_t);
        REDUCE_MINMAX(ui32, uint32_t);
    case collInt64:
        REDUCE_BY_OP(i64, uint64_t);
        REDUCE_MINMAX(i64, int64_t);
    case collUint64:
        REDUCE_BY_OP(i64, uint64_t);
        REDUCE_MINMAX(ui64, uint64_t);
    case collFloat32:
        REDUCE_BY_OP(f32, float);
        REDUCE_MINMAX(f32, float);
    case collFloat64:
        REDUCE_BY_OP(f64, double);
        REDUCE_MINMAX(f64, double);
    case collBfloat16:
        REDUCE_BY_OP(bf16, uint16_t);
        REDUCE_MINMAX(bf16, uint16_t);
    default:
        assert(!"reduce_vector: unexpected data type");
    }
}

static void reduce_vector_base(collRedOp_t op, collDataType_t t, void *dst, const void *a,
                               const void *b, size_t n)
{
    reduce_vector_body(op, t, dst, a, b, n);
}

#if REDUCE_X86
__attribute__((target("avx2"))) static void
reduce_vector_avx2(collRedOp_t op, collDataType_t t, void *dst, const void *a, const void *b,
                   size_t n)
{
    reduce_vector_body(op, t, dst, a, b, n);
}

enum { REDUCE_CPU_KNOWN = 1, REDUCE_CPU_AVX2 = 2, REDUCE_CPU_F16C = 4 };

/* What the CPU offers, checked once: CPUID traps to the hypervisor in a virtual machine and
 * costs microseconds there.  The flags only ever go from "unknown" to one fixed answer, so
 * threads racing here at worst both compute it.  __builtin_cpu_supports also checks that the
 * OS saves the AVX registers. */
static unsigned reduce_cpu(void)
{
    static atomic_uint flags;
    unsigned f = atomic_load_explicit(&flags, memory_order_relaxed);

    if (f == 0) {
        unsigned eax, ebx, ecx, edx;
        __builtin_cpu_init();
        f = REDUCE_CPU_KNOWN;
        if (__builtin_cpu_supports("avx2"))
            f |= REDUCE_CPU_AVX2;
        if (__builtin_cpu_supports("avx") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) &&
            (ecx & bit_F16C))
            f |= REDUCE_CPU_F16C;
        atomic_store_explicit(&flags, f, memory_order_relaxed);
    }
    return f;
}
#endif

static void reduce_vector(collRedOp_t op, collDataType_t t, void *dst, const void *a,
                          const void *b, size_t n)
{
#if REDUCE_X86
    if (reduce_cpu() & REDUCE_CPU_AVX2) {
        reduce_vector_avx2(op, t, dst, a, b, n);
        return;
    }
#endif
    reduce_vector_base(op, t, dst, a, b, n);
}

/* ---- float16 ---- */

REDUCE_INLINE float reduce_half_op(collRedOp_t op, float x, float y)
{
    switch (op) {
    case collProd:
        return REDUCE_PROD(x, y);
    case collMax:
        return REDUCE_FMAX(x, y);
    case collMin:
        return REDUCE_FMIN(x, y);
    default:
        return REDUCE_SUM(x, y);
    }
}

/* Portable path, and the tail of the F16C one. */
static void reduce_half_scalar(collRedOp_t op, uint16_t *dst, const uint16_t *a,
                               const uint16_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = coll_float_to_half(
            reduce_half_op(op, coll_half_to_float(a[i]), coll_half_to_float(b[i])));
}

#if REDUCE_X86
/* F16C converts 8 halves at a time, with the same results as the portable functions
 * (exact widening, round to nearest even, NaNs quieted with their top payload bits kept).
 * Max/min use compare and blend because maxps/minps do not propagate a NaN in a. */
#define REDUCE_F16C_LOOP(EXPR)                                                          \
    for (; i + 8 <= n; i += 8) {                                                        \
        __m256 x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + i)));          \
        __m256 y = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i)));          \
        __m256 r = (EXPR);                                                              \
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT)); \
    }

__attribute__((target("avx,f16c"))) static void
reduce_half_f16c(collRedOp_t op, uint16_t *dst, const uint16_t *a, const uint16_t *b, size_t n)
{
    size_t i = 0;

    switch (op) {
    case collProd:
        REDUCE_F16C_LOOP(_mm256_mul_ps(x, y));
        break;
    case collMax:
        REDUCE_F16C_LOOP(_mm256_blendv_ps(y, x,
                                          _mm256_or_ps(_mm256_cmp_ps(x, y, _CMP_GT_OQ),
                                                       _mm256_cmp_ps(x, x, _CMP_UNORD_Q))));
        break;
    case collMin:
        REDUCE_F16C_LOOP(_mm256_blendv_ps(y, x,
                                          _mm256_or_ps(_mm256_cmp_ps(x, y, _CMP_LT_OQ),
                                                       _mm256_cmp_ps(x, x, _CMP_UNORD_Q))));
        break;
    default:
        REDUCE_F16C_LOOP(_mm256_add_ps(x, y));
        break;
    }
    reduce_half_scalar(op, dst + i, a + i, b + i, n - i);
}
#endif

static void reduce_half(collRedOp_t op, uint16_t *dst, const uint16_t *a, const uint16_t *b,
                        size_t n)
{
#if REDUCE_X86
    if (reduce_cpu() & REDUCE_CPU_F16C) {
        reduce_half_f16c(op, dst, a, b, n);
        return;
    }
#endif
    reduce_half_scalar(op, dst, a, b, n);
}

/* ---- entry points ---- */

void coll_reduce(collRedOp_t op, collDataType_t t, void *dst, const void *a, const void *b,
                 size_t n)
{
    assert((unsigned)op < collNumOps && (unsigned)t < collNumTypes);
    if (n == 0)
        return;
    if (t == collFloat16)
        reduce_half(op, dst, a, b, n);
    else
        reduce_vector(op, t, dst, a, b, n);
}

/* Element-wise read then write, so dst == src is fine.  Integer division has no vector
 * instruction and collAvg divides once per collective, so these stay simple. */
#define REDUCE_DIV_LOOP(T, D, EXPR)                                                     \
    do {                                                                                \
        const T *s_ = src;                                                              \
        T *d_ = dst;                                                                    \
        D div_ = (D)divisor;                                                            \
        for (size_t i = 0; i < n; i++)                                                  \
            d_[i] = (T)(EXPR);                                                          \
    } while (0)

void coll_reduce_div(collDataType_t t, void *dst, const void *src, size_t n, int divisor)
{
    assert((unsigned)t < collNumTypes && divisor >= 1);
    switch (t) {
    case collInt8:
        REDUCE_DIV_LOOP(int8_t, int, s_[i] / div_);
        break;
    case collUint8:
        REDUCE_DIV_LOOP(uint8_t, unsigned, s_[i] / div_);
        break;
    case collInt32:
        REDUCE_DIV_LOOP(int32_t, int32_t, s_[i] / div_);
        break;
    case collUint32:
        REDUCE_DIV_LOOP(uint32_t, uint32_t, s_[i] / div_);
        break;
    case collInt64:
        REDUCE_DIV_LOOP(int64_t, int64_t, s_[i] / div_);
        break;
    case collUint64:
        REDUCE_DIV_LOOP(uint64_t, uint64_t, s_[i] / div_);
        break;
    case collFloat16:
        REDUCE_DIV_LOOP(uint16_t, float, coll_float_to_half(coll_half_to_float(s_[i]) / div_));
        break;
    case collFloat32:
        REDUCE_DIV_LOOP(float, float, s_[i] / div_);
        break;
    case collFloat64:
        REDUCE_DIV_LOOP(double, double, s_[i] / div_);
        break;
    case collBfloat16:
        REDUCE_DIV_LOOP(uint16_t, float, reduce_to_bf16(reduce_from_bf16(s_[i]) / div_));
        break;
    default:
        assert(!"coll_reduce_div: unexpected data type");
    }
}
