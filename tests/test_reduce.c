/*
 * Unit test of the reduction kernels (lib/base/reduce.c) against a plain scalar reference.
 *
 *   - names and sizes of every type and op;
 *   - float16/bfloat16 conversions: all 65536 bit patterns of each (value, round trip, NaN
 *     stays a quiet NaN), rounding at every midpoint between neighbours (ties to even), and
 *     the edges: overflow to infinity, subnormals, signalling NaNs;
 *   - every op x type, for counts around the vector widths and blocks, out of place and with
 *     dst == a, dst == b and dst == a == b, on aligned and misaligned buffers with guard
 *     bytes, with random inputs that include NaN, infinities and subnormals;
 *   - chosen cases: integer wrap-around, ties to even in float16/bfloat16 sums and products,
 *     NaN propagation by max/min, collAvg's division.
 *
 * The reference computes integers in 64 bits and then wraps, and floats in double, rounding
 * once to the element type (through float32 for the narrow types, which gives the same
 * result since float32 has more than twice their precision).
 */
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "harness.h"
#include "reduce.h"

#define GUARD 16   /* elements of guard after each buffer */
#define GUARD_BYTE 0xa5
#define MAX_N 4099

static const size_t test_counts[] = { 0, 1, 2, 3, 7, 8, 15, 16, 17, 63, 64, 65, 1000, 1087, 4099 };

/* ---- random inputs ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static uint64_t rng_next(void)
{
    /* xorshift64*: small, fast and plenty for test data. */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1du;
}

/* A random element of type t: mostly values of moderate magnitude, where sums and products
 * round, and one in four raw bit patterns (NaN, infinities, subnormals, integer extremes). */
static void rng_element(collDataType_t t, void *p)
{
    uint64_t r = rng_next();
    bool raw = (r & 3) == 0;
    uint64_t s = r >> 8;
    uint64_t sign = (r >> 2) & 1;

    switch (t) {
    case collFloat16: {
        uint16_t h = raw ? (uint16_t)s
                         : (uint16_t)(sign << 15 | (12 + s % 6) << 10 | ((s >> 8) & 0x3ff));
        memcpy(p, &h, sizeof(h));
        break;
    }
    case collBfloat16: {
        uint16_t h = raw ? (uint16_t)s
                         : (uint16_t)(sign << 15 | (124 + s % 6) << 7 | ((s >> 8) & 0x7f));
        memcpy(p, &h, sizeof(h));
        break;
    }
    case collFloat32: {
        uint32_t u = raw ? (uint32_t)s
                         : (uint32_t)(sign << 31 | (124 + s % 6) << 23 | ((s >> 8) & 0x7fffff));
        memcpy(p, &u, sizeof(u));
        break;
    }
    case collFloat64: {
        uint64_t u = raw ? r
                         : sign << 63 | (1020 + s % 6) << 52 | ((r >> 3) & 0xfffffffffffffu);
        memcpy(p, &u, sizeof(u));
        break;
    }
    default:
        /* Integers: raw bits, or small values whose products do not always wrap. */
        if (!raw)
            r = (uint64_t)((int64_t)(s % 2001) - 1000);
        memcpy(p, &r, coll_dtype_size(t)); /* little or big endian, any bytes will do */
        break;
    }
}

/* ---- reference ---- */

static bool half_is_nan(uint16_t h)
{
    return (h & 0x7fffu) > 0x7c00u;
}

static bool bf16_is_nan(uint16_t b)
{
    return (b & 0x7fffu) > 0x7f80u;
}

static double ref_float_op(collRedOp_t op, double x, double y)
{
    switch (op) {
    case collProd:
        return x * y;
    case collMax:
        return isnan(x) ? x : isnan(y) ? y : x > y ? x : y;
    case collMin:
        return isnan(x) ? x : isnan(y) ? y : x < y ? x : y;
    default:
        return x + y;
    }
}

/* Signed integers up to 32 bits: exact in int64, then wrapped by the caller. */
static int64_t ref_signed_op(collRedOp_t op, int64_t x, int64_t y)
{
    switch (op) {
    case collProd:
        return x * y;
    case collMax:
        return x > y ? x : y;
    case collMin:
        return x < y ? x : y;
    default:
        return x + y;
    }
}

/* Unsigned, and 64-bit signed sums and products: arithmetic modulo 2^64. */
static uint64_t ref_unsigned_op(collRedOp_t op, uint64_t x, uint64_t y)
{
    switch (op) {
    case collProd:
        return x * y;
    case collMax:
        return x > y ? x : y;
    case collMin:
        return x < y ? x : y;
    default:
        return x + y;
    }
}

#define LOAD(T, p, i) (((const T *)(p))[i])
#define STORE(T, p, i, v) (((T *)(p))[i] = (v))

static void ref_reduce(collRedOp_t op, collDataType_t t, void *dst, const void *a,
                       const void *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        switch (t) {
        case collInt8:
            STORE(uint8_t, dst, i, (uint8_t)ref_signed_op(op, LOAD(int8_t, a, i),
                                                           LOAD(int8_t, b, i)));
            break;
        case collUint8:
            STORE(uint8_t, dst, i, (uint8_t)ref_unsigned_op(op, LOAD(uint8_t, a, i),
                                                             LOAD(uint8_t, b, i)));
            break;
        case collInt32:
            STORE(uint32_t, dst, i, (uint32_t)ref_signed_op(op, LOAD(int32_t, a, i),
                                                             LOAD(int32_t, b, i)));
            break;
        case collUint32:
            STORE(uint32_t, dst, i, (uint32_t)ref_unsigned_op(op, LOAD(uint32_t, a, i),
                                                               LOAD(uint32_t, b, i)));
            break;
        case collInt64: {
            int64_t x = LOAD(int64_t, a, i), y = LOAD(int64_t, b, i);
            uint64_t r = op == collMax   ? (uint64_t)(x > y ? x : y)
                         : op == collMin ? (uint64_t)(x < y ? x : y)
                                         : ref_unsigned_op(op, (uint64_t)x, (uint64_t)y);
            STORE(uint64_t, dst, i, r);
            break;
        }
        case collUint64:
            STORE(uint64_t, dst, i, ref_unsigned_op(op, LOAD(uint64_t, a, i),
                                                    LOAD(uint64_t, b, i)));
            break;
        case collFloat16:
            STORE(uint16_t, dst, i,
                  coll_float_to_half((float)ref_float_op(
                      op, coll_half_to_float(LOAD(uint16_t, a, i)),
                      coll_half_to_float(LOAD(uint16_t, b, i)))));
            break;
        case collFloat32:
            STORE(float, dst, i, (float)ref_float_op(op, LOAD(float, a, i), LOAD(float, b, i)));
            break;
        case collFloat64:
            STORE(double, dst, i, ref_float_op(op, LOAD(double, a, i), LOAD(double, b, i)));
            break;
        case collBfloat16:
            STORE(uint16_t, dst, i,
                  coll_float_to_bf16((float)ref_float_op(
                      op, coll_bf16_to_float(LOAD(uint16_t, a, i)),
                      coll_bf16_to_float(LOAD(uint16_t, b, i)))));
            break;
        default:
            REQUIRE(!"bad type");
        }
    }
}

/* Equal bits, or both NaN (a NaN's payload is not specified). */
static bool same_element(collDataType_t t, const void *x, const void *y, size_t i)
{
    switch (t) {
    case collFloat16:
        if (half_is_nan(LOAD(uint16_t, x, i)))
            return half_is_nan(LOAD(uint16_t, y, i));
        break;
    case collBfloat16:
        if (bf16_is_nan(LOAD(uint16_t, x, i)))
            return bf16_is_nan(LOAD(uint16_t, y, i));
        break;
    case collFloat32:
        if (isnan(LOAD(float, x, i)))
            return isnan(LOAD(float, y, i));
        break;
    case collFloat64:
        if (isnan(LOAD(double, x, i)))
            return isnan(LOAD(double, y, i));
        break;
    default:
        break;
    }
    size_t sz = coll_dtype_size(t);
    return memcmp((const char *)x + i * sz, (const char *)y + i * sz, sz) == 0;
}

/* Compares n elements; reports the first difference only, to keep the output short. */
static void check_elements(const char *what, collRedOp_t op, collDataType_t t, size_t n,
                           const void *want, const void *got)
{
    for (size_t i = 0; i < n; i++) {
        if (!same_element(t, want, got, i)) {
            uint64_t w = 0, g = 0;
            size_t sz = coll_dtype_size(t);
            memcpy(&w, (const char *)want + i * sz, sz);
            memcpy(&g, (const char *)got + i * sz, sz);
            CHECK_MSG(false, "%s %s %s n=%zu: element %zu is 0x%llx, want 0x%llx", what,
                      coll_op_name(op), coll_dtype_name(t), n, i, (unsigned long long)g,
                      (unsigned long long)w);
            return;
        }
    }
}

/* ---- names ---- */

static void test_names(void)
{
    static const char *const types[collNumTypes] = { "int8",    "uint8",   "int32",   "uint32",
                                                     "int64",   "uint64",  "float16", "float32",
                                                     "float64", "bfloat16" };
    static const size_t sizes[collNumTypes] = { 1, 1, 4, 4, 8, 8, 2, 4, 8, 2 };
    static const char *const ops[collNumOps] = { "sum", "prod", "max", "min", "avg" };

    for (int t = 0; t < collNumTypes; t++) {
        CHECK(strcmp(coll_dtype_name((collDataType_t)t), types[t]) == 0);
        CHECK(coll_dtype_size((collDataType_t)t) == sizes[t]);
    }
    for (int op = 0; op < collNumOps; op++)
        CHECK(strcmp(coll_op_name((collRedOp_t)op), ops[op]) == 0);
    CHECK(strcmp(coll_dtype_name(collNumTypes), "?") == 0);
    CHECK(strcmp(coll_dtype_name((collDataType_t)-1), "?") == 0);
    CHECK(coll_dtype_size(collNumTypes) == 0);
    CHECK(strcmp(coll_op_name(collNumOps), "?") == 0);
}

/* ---- conversions ---- */

static uint32_t float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static float bits_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* The value of a finite float16, from its definition. */
static double half_value(uint16_t h)
{
    int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    double v = exp ? ldexp(1024 + mant, exp - 25) : ldexp(mant, -24);
    return (h & 0x8000) ? -v : v;
}

static void test_half_conversions(void)
{
    int bad_value = 0, bad_trip = 0, bad_nan = 0;

    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        float f = coll_half_to_float(h);
        uint16_t back = coll_float_to_half(f);
        if (half_is_nan(h)) {
            /* Stays NaN, quiet on both sides, sign and top payload bits kept. */
            bad_nan += !isnan(f) || !(float_bits(f) & 0x00400000u) || !half_is_nan(back) ||
                       !(back & 0x0200u) || (back | 0x0200u) != (h | 0x0200u);
        } else {
            bad_trip += back != h;
            if ((h & 0x7c00u) == 0x7c00u)
                bad_value += !isinf(f) || (signbit(f) != 0) != ((h & 0x8000u) != 0);
            else
                bad_value += (double)f != half_value(h) || !signbit(f) != !signbit(half_value(h));
        }
    }
    CHECK_MSG(bad_value == 0, "%d float16 values widen wrongly", bad_value);
    CHECK_MSG(bad_trip == 0, "%d float16 values do not round-trip", bad_trip);
    CHECK_MSG(bad_nan == 0, "%d float16 NaNs are not kept as quiet NaNs", bad_nan);

    /* Every midpoint between neighbouring finite halves, of both signs: the tie goes to the
     * even neighbour, and one float ulp either side goes to the nearer one.  The last
     * midpoint, 65520 between 65504 and the next power of two, rounds to infinity. */
    int bad_round = 0;
    for (int neg = 0; neg < 2; neg++) {
        uint16_t sign = neg ? 0x8000u : 0;
        for (uint16_t h = 0; h < 0x7c00u; h++) {
            uint16_t lo = (uint16_t)(sign | h), hi = (uint16_t)(lo + 1);
            double up = h == 0x7bffu ? 65536.0 : fabs(half_value(hi));
            float mid = (float)((fabs(half_value(lo)) + up) / 2);
            mid = sign ? -mid : mid;
            uint16_t even = (lo & 1) ? hi : lo;
            bad_round += coll_float_to_half(mid) != even;
            bad_round += coll_float_to_half(nextafterf(mid, 0.0f)) != lo;
            bad_round += coll_float_to_half(nextafterf(mid, sign ? -INFINITY : INFINITY)) != hi;
        }
    }
    CHECK_MSG(bad_round == 0, "%d float16 midpoints round wrongly", bad_round);

    CHECK(coll_float_to_half(65504.0f) == 0x7bff);
    CHECK(coll_float_to_half(nextafterf(65520.0f, 0.0f)) == 0x7bff);
    CHECK(coll_float_to_half(65520.0f) == 0x7c00);
    CHECK(coll_float_to_half(1e10f) == 0x7c00);
    CHECK(coll_float_to_half(-1e10f) == 0xfc00);
    CHECK(coll_float_to_half(FLT_MAX) == 0x7c00);
    CHECK(coll_float_to_half(INFINITY) == 0x7c00);
    CHECK(coll_float_to_half(-INFINITY) == 0xfc00);
    CHECK(coll_float_to_half(-0.0f) == 0x8000);
    CHECK(coll_float_to_half(0x1p-24f) == 0x0001);  /* smallest subnormal */
    CHECK(coll_float_to_half(0x1p-25f) == 0x0000);  /* tie: to even, zero */
    CHECK(coll_float_to_half(-0x1p-25f) == 0x8000);
    CHECK(coll_float_to_half(0x1.000002p-25f) == 0x0001);
    CHECK(coll_float_to_half(0x3p-25f) == 0x0002);  /* tie between 1 and 2 */
    CHECK(coll_float_to_half(0x1p-14f - 0x1p-25f) == 0x0400); /* tie up to the smallest normal */
    CHECK(coll_float_to_half(FLT_TRUE_MIN) == 0x0000);
    CHECK(coll_float_to_half(1.0f + 0x1p-11f) == 0x3c00);
    CHECK(coll_float_to_half(1.0f + 0x3p-11f) == 0x3c02);
    CHECK(coll_float_to_half(NAN) == 0x7e00 || coll_float_to_half(NAN) == 0xfe00);
    uint16_t snan = coll_float_to_half(bits_float(0x7f800001u)); /* payload below the kept bits */
    CHECK(half_is_nan(snan) && (snan & 0x0200u));
    CHECK(coll_float_to_half(bits_float(0xffc02000u)) == 0xfe01);
    CHECK(float_bits(coll_half_to_float(0x7c01)) == 0x7fc02000u);

#if defined(__FLT16_MANT_DIG__)
    /* The compiler's own conversion, where it has one, over a spread of float patterns. */
    __extension__ typedef _Float16 half_t;
    int bad_cc = 0;
    for (uint64_t u = 0; u <= 0xffffffffu; u += 4093) {
        float f = bits_float((uint32_t)u);
        half_t c = (half_t)f;
        uint16_t want;
        memcpy(&want, &c, sizeof(want));
        uint16_t got = coll_float_to_half(f);
        bad_cc += isnan(f) ? !half_is_nan(got) : got != want;
    }
    CHECK_MSG(bad_cc == 0, "%d conversions differ from the compiler's _Float16", bad_cc);
#endif
}

static void test_bf16_conversions(void)
{
    int bad_trip = 0, bad_nan = 0, bad_round = 0;

    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t b = (uint16_t)i;
        float f = coll_bf16_to_float(b);
        uint16_t back = coll_float_to_bf16(f);
        if (bf16_is_nan(b)) {
            bad_nan += !isnan(f) || !(float_bits(f) & 0x00400000u) || !bf16_is_nan(back) ||
                       (back | 0x0040u) != (b | 0x0040u);
        } else {
            bad_trip += back != b || float_bits(f) != (uint32_t)b << 16;
        }
    }
    CHECK_MSG(bad_trip == 0, "%d bfloat16 values do not round-trip", bad_trip);
    CHECK_MSG(bad_nan == 0, "%d bfloat16 NaNs are not kept as quiet NaNs", bad_nan);

    /* Midpoints: the float with the bfloat16's bits and 0x8000 below them, for every finite
     * value of both signs, including subnormals and the step from the largest to infinity. */
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t lo = (uint16_t)i;
        if ((lo & 0x7f80u) == 0x7f80u)
            continue;
        uint16_t hi = (uint16_t)(lo + 1), even = (lo & 1) ? hi : lo;
        uint32_t mid = (uint32_t)lo << 16 | 0x8000u;
        bad_round += coll_float_to_bf16(bits_float(mid)) != even;
        bad_round += coll_float_to_bf16(bits_float(mid - 1)) != lo;
        bad_round += coll_float_to_bf16(bits_float(mid + 1)) != hi;
    }
    CHECK_MSG(bad_round == 0, "%d bfloat16 midpoints round wrongly", bad_round);

    CHECK(coll_float_to_bf16(FLT_MAX) == 0x7f80);
    CHECK(coll_float_to_bf16(-FLT_MAX) == 0xff80);
    CHECK(coll_float_to_bf16(INFINITY) == 0x7f80);
    CHECK(coll_float_to_bf16(1.0f) == 0x3f80);
    CHECK(coll_float_to_bf16(257.0f) == 0x4380);  /* tie: 256 */
    CHECK(coll_float_to_bf16(259.0f) == 0x4382);  /* tie: 260 */
    CHECK(coll_float_to_bf16(bits_float(0x00008000u)) == 0x0000);
    CHECK(coll_float_to_bf16(bits_float(0x00018000u)) == 0x0002);
    CHECK(bf16_is_nan(coll_float_to_bf16(NAN)));
    CHECK(coll_float_to_bf16(bits_float(0x7f800001u)) == 0x7fc0); /* signalling: quieted */
    CHECK(coll_float_to_bf16(bits_float(0xff810000u)) == 0xffc1);
    CHECK(float_bits(coll_bf16_to_float(0x7f81)) == 0x7fc10000u);
}

/* ---- kernels against the reference ---- */

enum alias_mode { ALIAS_NONE, ALIAS_DST_A, ALIAS_DST_B, ALIAS_ALL, ALIAS_MODES };
static const char *const alias_names[ALIAS_MODES] = { "dst!=a,b", "dst==a", "dst==b",
                                                      "dst==a==b" };

struct bufs {
    unsigned char *a, *b, *d;       /* buffers the kernel sees (offset by `skew` elements) */
    unsigned char *a0, *b0, *want;  /* inputs and expected output */
};

/* Checks the GUARD elements after n elements of p are untouched. */
static bool guard_intact(const unsigned char *p, size_t bytes)
{
    for (size_t i = 0; i < bytes; i++)
        if (p[i] != GUARD_BYTE)
            return false;
    return true;
}

static void run_case(struct bufs *w, collRedOp_t op, collDataType_t t, size_t n,
                     enum alias_mode mode, size_t skew)
{
    size_t sz = coll_dtype_size(t), bytes = n * sz, guard = GUARD * sz;
    unsigned char *a = w->a + skew * sz, *b = w->b + skew * sz, *d = w->d + skew * sz;

    for (size_t i = 0; i < n; i++) {
        rng_element(t, w->a0 + i * sz);
        rng_element(t, w->b0 + i * sz);
    }
    if (mode == ALIAS_ALL)
        memcpy(w->b0, w->a0, bytes);
    ref_reduce(op, t, w->want, w->a0, w->b0, n);

    memset(w->a, GUARD_BYTE, (MAX_N + GUARD + 1) * 8);
    memset(w->b, GUARD_BYTE, (MAX_N + GUARD + 1) * 8);
    memset(w->d, GUARD_BYTE, (MAX_N + GUARD + 1) * 8);
    memcpy(a, w->a0, bytes);
    memcpy(b, w->b0, bytes);

    unsigned char *out = d;
    switch (mode) {
    case ALIAS_NONE:
        coll_reduce(op, t, d, a, b, n);
        check_elements("a unchanged", op, t, n, w->a0, a);
        check_elements("b unchanged", op, t, n, w->b0, b);
        break;
    case ALIAS_DST_A:
        coll_reduce(op, t, a, a, b, n);
        check_elements("b unchanged", op, t, n, w->b0, b);
        out = a;
        break;
    case ALIAS_DST_B:
        coll_reduce(op, t, b, a, b, n);
        check_elements("a unchanged", op, t, n, w->a0, a);
        out = b;
        break;
    default:
        coll_reduce(op, t, a, a, a, n);
        out = a;
        break;
    }
    check_elements(alias_names[mode], op, t, n, w->want, out);
    CHECK_MSG(guard_intact(a + bytes, guard) && guard_intact(b + bytes, guard) &&
                  guard_intact(d + bytes, guard),
              "%s %s %s n=%zu skew=%zu wrote past the end", alias_names[mode], coll_op_name(op),
              coll_dtype_name(t), n, skew);
}

static void test_kernels(void)
{
    size_t cap = (MAX_N + GUARD + 1) * 8;
    struct bufs w;

    REQUIRE((w.a = malloc(cap)) && (w.b = malloc(cap)) && (w.d = malloc(cap)));
    REQUIRE((w.a0 = malloc(cap)) && (w.b0 = malloc(cap)) && (w.want = malloc(cap)));
    for (int t = 0; t < collNumTypes; t++)
        for (int op = 0; op < collNumOps; op++)
            for (size_t k = 0; k < sizeof(test_counts) / sizeof(test_counts[0]); k++)
                for (int mode = 0; mode < ALIAS_MODES; mode++)
                    for (size_t skew = 0; skew < 2; skew++)
                        run_case(&w, (collRedOp_t)op, (collDataType_t)t, test_counts[k],
                                 (enum alias_mode)mode, skew);
    free(w.a);
    free(w.b);
    free(w.d);
    free(w.a0);
    free(w.b0);
    free(w.want);

    /* Nothing to do: no pointer is touched. */
    coll_reduce(collSum, collFloat32, NULL, NULL, NULL, 0);
    coll_reduce_div(collFloat32, NULL, NULL, 0, 3);
}

/* ---- chosen cases ---- */

#define SPREAD 75 /* elements: a vector body plus a scalar tail on every path */

/* Runs op on SPREAD copies of (x, y), elements of type t, and checks every result is want. */
static void check_pair(collRedOp_t op, collDataType_t t, const void *x, const void *y,
                       const void *want)
{
    unsigned char a[SPREAD * 8], b[SPREAD * 8], w[SPREAD * 8];
    size_t sz = coll_dtype_size(t);

    for (size_t i = 0; i < SPREAD; i++) {
        memcpy(a + i * sz, x, sz);
        memcpy(b + i * sz, y, sz);
        memcpy(w + i * sz, want, sz);
    }
    coll_reduce(op, t, a, a, b, SPREAD);
    check_elements("pair", op, t, SPREAD, w, a);
}

#define PAIR(op, t, T, x, y, want)                                                      \
    do {                                                                                \
        T x_ = (x), y_ = (y), w_ = (want);                                              \
        check_pair(op, t, &x_, &y_, &w_);                                               \
    } while (0)

static void test_wraparound(void)
{
    PAIR(collSum, collInt8, int8_t, INT8_MAX, 1, INT8_MIN);
    PAIR(collSum, collInt8, int8_t, INT8_MIN, -1, INT8_MAX);
    PAIR(collProd, collInt8, int8_t, INT8_MIN, -1, INT8_MIN);
    PAIR(collProd, collInt8, int8_t, 16, 16, 0);
    PAIR(collProd, collInt8, int8_t, 15, 15, -31);
    PAIR(collSum, collUint8, uint8_t, 200, 100, 44);
    PAIR(collProd, collUint8, uint8_t, 16, 17, 16);
    PAIR(collMax, collInt8, int8_t, -1, 1, 1);
    PAIR(collMax, collUint8, uint8_t, 0xff, 1, 0xff);
    PAIR(collSum, collInt32, int32_t, INT32_MAX, 1, INT32_MIN);
    PAIR(collProd, collInt32, int32_t, 65536, 65536, 0);
    PAIR(collProd, collInt32, int32_t, 46341, 46341, INT32_MIN + 4633);
    PAIR(collProd, collInt32, int32_t, INT32_MIN, -1, INT32_MIN);
    PAIR(collMin, collInt32, int32_t, -1, 1, -1);
    PAIR(collSum, collUint32, uint32_t, UINT32_MAX, 2, 1);
    PAIR(collMin, collUint32, uint32_t, UINT32_MAX, 2, 2);
    PAIR(collSum, collInt64, int64_t, INT64_MAX, 1, INT64_MIN);
    PAIR(collProd, collInt64, int64_t, INT64_MIN, -1, INT64_MIN);
    PAIR(collProd, collInt64, int64_t, (int64_t)1 << 32, (int64_t)1 << 32, 0);
    PAIR(collMax, collInt64, int64_t, INT64_MIN, -1, -1);
    PAIR(collSum, collUint64, uint64_t, UINT64_MAX, 1, 0);
    PAIR(collProd, collUint64, uint64_t, (uint64_t)1 << 63, 2, 0);
    PAIR(collMax, collUint64, uint64_t, UINT64_MAX, 1, UINT64_MAX);
    PAIR(collMin, collUint64, uint64_t, (uint64_t)1 << 63, 1, 1);
    PAIR(collAvg, collInt32, int32_t, INT32_MAX, 1, INT32_MIN); /* avg reduces as sum */
}

static void test_rounding(void)
{
    /* float16: 2048 + 1 and 2048 + 3 are ties at a spacing of 2. */
    PAIR(collSum, collFloat16, uint16_t, 0x6800, 0x3c00, 0x6800);
    PAIR(collSum, collFloat16, uint16_t, 0x6800, 0x4200, 0x6802);
    PAIR(collSum, collFloat16, uint16_t, 0x3c00, 0x1000, 0x3c00);   /* 1 + 2^-11 */
    PAIR(collSum, collFloat16, uint16_t, 0x3c01, 0x1000, 0x3c02);   /* (1 + 2^-10) + 2^-11 */
    PAIR(collSum, collFloat16, uint16_t, 0x7bff, 0x4c00, 0x7c00);   /* 65504 + 16: inf */
    PAIR(collSum, collFloat16, uint16_t, 0x7bff, 0x4800, 0x7bff);   /* 65504 + 8 */
    PAIR(collSum, collFloat16, uint16_t, 0x0001, 0x0001, 0x0002);   /* subnormals */
    PAIR(collSum, collFloat16, uint16_t, 0x03ff, 0x0001, 0x0400);   /* into the normals */
    PAIR(collProd, collFloat16, uint16_t, 0x0001, 0x3800, 0x0000);  /* 2^-25: tie to 0 */
    PAIR(collProd, collFloat16, uint16_t, 0x0003, 0x3800, 0x0002);  /* 1.5 ulp: tie to 2 */
    PAIR(collProd, collFloat16, uint16_t, 0x5c00, 0x5c00, 0x7c00);  /* 256 * 256: inf */
    PAIR(collSum, collFloat16, uint16_t, 0x7c00, 0x3c00, 0x7c00);   /* inf + 1 */
    PAIR(collSum, collFloat16, uint16_t, 0x7c00, 0xfc00, 0x7e00);   /* inf - inf: NaN */
    PAIR(collMax, collFloat16, uint16_t, 0xfc00, 0x0001, 0x0001);
    PAIR(collMin, collFloat16, uint16_t, 0xfc00, 0x0001, 0xfc00);

    /* bfloat16: 256 + 1 and 256 + 3 are ties at a spacing of 2. */
    PAIR(collSum, collBfloat16, uint16_t, 0x4380, 0x3f80, 0x4380);
    PAIR(collSum, collBfloat16, uint16_t, 0x4380, 0x4040, 0x4382);
    PAIR(collProd, collBfloat16, uint16_t, 0x7f7f, 0x4000, 0x7f80);  /* overflow */
    PAIR(collProd, collBfloat16, uint16_t, 0x0001, 0x3f00, 0x0000);  /* half a subnormal: 0 */
    PAIR(collProd, collBfloat16, uint16_t, 0x0003, 0x3f00, 0x0002);  /* 1.5: tie to 2 */
    PAIR(collSum, collBfloat16, uint16_t, 0x7f80, 0xff80, 0x7fc0);   /* inf - inf: NaN */

    /* float32 and float64: a tie in binary32, and infinities. */
    PAIR(collSum, collFloat32, float, 1.0f, 0x1p-24f, 1.0f);
    PAIR(collSum, collFloat32, float, 0x1.000002p0f, 0x1p-24f, 0x1.000004p0f);
    PAIR(collProd, collFloat32, float, FLT_MAX, 2.0f, INFINITY);
    PAIR(collSum, collFloat32, float, FLT_TRUE_MIN, FLT_TRUE_MIN, 2 * FLT_TRUE_MIN);
    PAIR(collSum, collFloat64, double, 1.0, 0x1p-53, 1.0);
    PAIR(collProd, collFloat64, double, DBL_MAX, -2.0, -INFINITY);
    PAIR(collMax, collFloat64, double, -INFINITY, DBL_TRUE_MIN, DBL_TRUE_MIN);
}

/* max/min of floats return NaN when either input is NaN, in either position, on the vector
 * body and the tail alike. */
static void test_nan(void)
{
    static const collDataType_t types[] = { collFloat16, collFloat32, collFloat64, collBfloat16 };
    static const collRedOp_t ops[] = { collMax, collMin, collSum, collProd };

    for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++) {
        collDataType_t t = types[k];
        size_t sz = coll_dtype_size(t);
        unsigned char nan[8], one[8], ninf[8], pinf[8];
        uint16_t h;
        switch (t) {
        case collFloat16:
            h = 0x7e00;
            memcpy(nan, &h, 2);
            h = 0x3c00;
            memcpy(one, &h, 2);
            h = 0xfc00;
            memcpy(ninf, &h, 2);
            h = 0x7c00;
            memcpy(pinf, &h, 2);
            break;
        case collBfloat16:
            h = 0x7fc0;
            memcpy(nan, &h, 2);
            h = 0x3f80;
            memcpy(one, &h, 2);
            h = 0xff80;
            memcpy(ninf, &h, 2);
            h = 0x7f80;
            memcpy(pinf, &h, 2);
            break;
        case collFloat32: {
            float v[4] = { NAN, 1.0f, -INFINITY, INFINITY };
            memcpy(nan, &v[0], sz);
            memcpy(one, &v[1], sz);
            memcpy(ninf, &v[2], sz);
            memcpy(pinf, &v[3], sz);
            break;
        }
        default: {
            double v[4] = { NAN, 1.0, -INFINITY, INFINITY };
            memcpy(nan, &v[0], sz);
            memcpy(one, &v[1], sz);
            memcpy(ninf, &v[2], sz);
            memcpy(pinf, &v[3], sz);
            break;
        }
        }
        for (size_t j = 0; j < sizeof(ops) / sizeof(ops[0]); j++) {
            collRedOp_t op = ops[j];
            check_pair(op, t, nan, one, nan);
            check_pair(op, t, one, nan, nan);
            check_pair(op, t, nan, nan, nan);
            check_pair(op, t, ninf, nan, nan);
            check_pair(op, t, nan, pinf, nan);
            check_pair(op, t, pinf, nan, nan);
        }
        /* A lone NaN among numbers, at every position of a vector body and tail. */
        for (size_t pos = 0; pos < SPREAD; pos++) {
            unsigned char a[SPREAD * 8], b[SPREAD * 8];
            for (size_t i = 0; i < SPREAD; i++) {
                memcpy(a + i * sz, one, sz);
                memcpy(b + i * sz, pinf, sz);
            }
            memcpy((pos & 1 ? a : b) + pos * sz, nan, sz);
            coll_reduce(pos & 2 ? collMax : collMin, t, a, a, b, SPREAD);
            CHECK_MSG(same_element(t, nan, a + pos * sz, 0), "%s: NaN at %zu lost",
                      coll_dtype_name(t), pos);
            if (pos + 1 < SPREAD)
                CHECK(!same_element(t, nan, a + (pos + 1) * sz, 0));
        }
    }
}

/* ---- collAvg's division ---- */

static void ref_div(collDataType_t t, void *dst, const void *src, size_t n, int d)
{
    for (size_t i = 0; i < n; i++) {
        switch (t) {
        case collInt8: STORE(int8_t, dst, i, (int8_t)(LOAD(int8_t, src, i) / d)); break;
        case collUint8: STORE(uint8_t, dst, i, (uint8_t)(LOAD(uint8_t, src, i) / d)); break;
        case collInt32: STORE(int32_t, dst, i, LOAD(int32_t, src, i) / d); break;
        case collUint32: STORE(uint32_t, dst, i, LOAD(uint32_t, src, i) / (uint32_t)d); break;
        case collInt64: STORE(int64_t, dst, i, LOAD(int64_t, src, i) / d); break;
        case collUint64: STORE(uint64_t, dst, i, LOAD(uint64_t, src, i) / (uint64_t)d); break;
        case collFloat16:
            STORE(uint16_t, dst, i,
                  coll_float_to_half((float)(coll_half_to_float(LOAD(uint16_t, src, i)) / d)));
            break;
        case collFloat32: STORE(float, dst, i, (float)((double)LOAD(float, src, i) / d)); break;
        case collFloat64: STORE(double, dst, i, LOAD(double, src, i) / d); break;
        default:
            STORE(uint16_t, dst, i,
                  coll_float_to_bf16((float)(coll_bf16_to_float(LOAD(uint16_t, src, i)) / d)));
            break;
        }
    }
}

#define DIV1(t, T, x, d, want)                                                          \
    do {                                                                                \
        T v_ = (x), w_ = (want);                                                        \
        coll_reduce_div(t, &v_, &v_, 1, d);                                             \
        CHECK_MSG(same_element(t, &w_, &v_, 0), "%s: %s / %d", coll_dtype_name(t), #x, d); \
    } while (0)

static void test_div(void)
{
    DIV1(collInt8, int8_t, -7, 2, -3);
    DIV1(collInt8, int8_t, 7, 2, 3);
    DIV1(collInt8, int8_t, INT8_MIN, 3, -42);
    DIV1(collUint8, uint8_t, 255, 2, 127);
    DIV1(collInt32, int32_t, -7, 2, -3);
    DIV1(collInt32, int32_t, -1, 4, 0);
    DIV1(collInt32, int32_t, INT32_MIN, 2, INT32_MIN / 2);
    DIV1(collInt32, int32_t, 5, 1, 5);
    DIV1(collUint32, uint32_t, UINT32_MAX, 3, 0x55555555u);
    DIV1(collInt64, int64_t, -9, 4, -2);
    DIV1(collInt64, int64_t, INT64_MIN, 7, INT64_MIN / 7);
    DIV1(collUint64, uint64_t, UINT64_MAX, 2, UINT64_MAX >> 1);
    DIV1(collFloat32, float, 1.0f, 3, 1.0f / 3.0f);
    DIV1(collFloat32, float, -INFINITY, 3, -INFINITY);
    DIV1(collFloat64, double, 1.0, 3, 1.0 / 3.0);
    DIV1(collFloat16, uint16_t, 0x3c00, 3, 0x3555);   /* 1/3 */
    DIV1(collFloat16, uint16_t, 0x0001, 2, 0x0000);   /* 2^-25: tie to 0 */
    DIV1(collFloat16, uint16_t, 0x0003, 2, 0x0002);   /* tie to even */
    DIV1(collFloat16, uint16_t, 0xfc00, 4, 0xfc00);
    DIV1(collBfloat16, uint16_t, 0x3f80, 3, 0x3eab);  /* 1/3 */
    DIV1(collBfloat16, uint16_t, 0x0003, 2, 0x0002);

    static const int divisors[] = { 1, 2, 3, 7, 1000 };
    static unsigned char src[MAX_N * 8], want[MAX_N * 8], got[MAX_N * 8];
    for (int t = 0; t < collNumTypes; t++) {
        size_t sz = coll_dtype_size((collDataType_t)t);
        for (size_t k = 0; k < sizeof(divisors) / sizeof(divisors[0]); k++) {
            size_t n = 1 + rng_next() % MAX_N;
            for (size_t i = 0; i < n; i++)
                rng_element((collDataType_t)t, src + i * sz);
            ref_div((collDataType_t)t, want, src, n, divisors[k]);
            coll_reduce_div((collDataType_t)t, got, src, n, divisors[k]);
            check_elements("div", collAvg, (collDataType_t)t, n, want, got);
            coll_reduce_div((collDataType_t)t, src, src, n, divisors[k]); /* in place */
            check_elements("div in place", collAvg, (collDataType_t)t, n, want, src);
        }
    }
}

int main(void)
{
    test_names();
    test_half_conversions();
    test_bf16_conversions();
    test_kernels();
    test_wraparound();
    test_rounding();
    test_nan();
    test_div();
    return test_result();
}
