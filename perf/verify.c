/*
 * The data side of the perf harness: the types and ops by name, the inputs each
 * rank sends, the exact results the collectives must produce, and the check of
 * a result against them.  common.c runs the benchmark and calls in here.
 *
 * Inputs are small integers chosen per (seed, rank, element) so that every
 * reduction is exact in every type, whatever order the library reduces in:
 *   sum, avg, max, min: values in [-h, h] ([0, h] unsigned) with nranks * h no
 *     larger than the largest exactly held integer (256 for bfloat16, 2048 for
 *     float16), so every partial sum is exact; integer sums wrap as the library's
 *     do, and modular arithmetic gives the same result in any order;
 *   prod: values +-1 and +-2 with at most eight 2s per element across the ranks,
 *     so products are +-2^k with k <= 8.
 * Averages divide the exact sum once as the library documents it: integers
 * truncate toward zero; float and double divide in their type; float16 and
 * bfloat16 divide in float32 and round to nearest even once.
 *
 * The check compares bytes, so a result must be bit-exact: with the inputs above
 * any correct reduction order gives the same bits.
 */
#include "verify.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------------- */
/* Types and ops                                                              */

struct perf_type {
    collDataType_t type;
    const char *name; /* nccl-tests' name, printed in the type column */
    size_t size;
    bool is_float;
    bool is_signed;
    int64_t exact; /* every integer of this magnitude or less is held exactly */
    int64_t cap;   /* largest input magnitude, to keep values readable */
};

/* In the order of collDataType_t, which is also nccl-tests' order for -d all. */
static const struct perf_type perf_types[] = {
    {collInt8, "int8", 1, false, true, INT64_MAX, 127},
    {collUint8, "uint8", 1, false, false, INT64_MAX, 255},
    {collInt32, "int32", 4, false, true, INT64_MAX, 1000},
    {collUint32, "uint32", 4, false, false, INT64_MAX, 1000},
    {collInt64, "int64", 8, false, true, INT64_MAX, 1000},
    {collUint64, "uint64", 8, false, false, INT64_MAX, 1000},
    {collFloat16, "half", 2, true, true, 2048, 1000},
    {collFloat32, "float", 4, true, true, INT64_C(1) << 24, 1000},
    {collFloat64, "double", 8, true, true, INT64_C(1) << 53, 1000},
    {collBfloat16, "bfloat16", 2, true, true, 256, 1000},
};
static_assert(sizeof(perf_types) / sizeof(perf_types[0]) == collNumTypes,
              "one row per collDataType_t");

/* Names -d accepts: nccl-tests' and the library's. */
static const struct {
    const char *name;
    collDataType_t type;
} perf_type_names[] = {
    {"int8", collInt8},       {"char", collInt8},         {"uint8", collUint8},
    {"int32", collInt32},     {"int", collInt32},         {"uint32", collUint32},
    {"int64", collInt64},     {"uint64", collUint64},     {"half", collFloat16},
    {"float16", collFloat16}, {"fp16", collFloat16},      {"float", collFloat32},
    {"float32", collFloat32}, {"fp32", collFloat32},      {"double", collFloat64},
    {"float64", collFloat64}, {"fp64", collFloat64},      {"bfloat16", collBfloat16},
    {"bf16", collBfloat16},
};

/* In the order of collRedOp_t. */
static const char *const perf_op_names[] = {"sum", "prod", "max", "min", "avg"};
static_assert(sizeof(perf_op_names) / sizeof(perf_op_names[0]) == collNumOps,
              "one name per collRedOp_t");

static const struct perf_type *perf_type_info(collDataType_t t)
{
    return &perf_types[t];
}

size_t perf_type_size(collDataType_t t)
{
    return perf_type_info(t)->size;
}

const char *perf_type_name(collDataType_t t)
{
    return perf_type_info(t)->name;
}

bool perf_type_parse(const char *name, collDataType_t *type_p)
{
    for (size_t i = 0; i < sizeof(perf_type_names) / sizeof(perf_type_names[0]); i++) {
        if (strcmp(name, perf_type_names[i].name) == 0) {
            *type_p = perf_type_names[i].type;
            return true;
        }
    }
    return false;
}

const char *perf_op_name(collRedOp_t op)
{
    return perf_op_names[op];
}

bool perf_op_parse(const char *name, collRedOp_t *op_p)
{
    for (int i = 0; i < collNumOps; i++) {
        if (strcmp(name, perf_op_names[i]) == 0) {
            *op_p = (collRedOp_t)i;
            return true;
        }
    }
    return false;
}

/* ------------------------------------------------------------------------- */
/* float16 and bfloat16, written here rather than taken from the library so    */
/* that a conversion bug there cannot hide behind the same bug in the check.   */

static uint16_t perf_float_to_half(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t abs = x & 0x7fffffffu;
    if (abs > 0x7f800000u)
        return sign | 0x7e00u; /* NaN */
    uint32_t exp = abs >> 23;
    if (exp >= 113) {
        /* Normal in float16 unless it overflows: rebias the exponent (127 - 15)
         * and round the 13 dropped mantissa bits to nearest even; a carry out of
         * the mantissa correctly bumps the exponent. */
        uint32_t bits = (abs >> 13) - (112u << 10);
        uint32_t rest = abs & 0x1fffu;
        if (rest > 0x1000u || (rest == 0x1000u && (bits & 1u)))
            bits++;
        return sign | (uint16_t)(bits >= 0x7c00u ? 0x7c00u : bits);
    }
    /* Subnormal or zero: the value in units of 2^-24, rounded to nearest even. */
    uint32_t shift = 126 - exp;
    if (shift > 24)
        return sign;
    uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    uint32_t q = mant >> shift;
    uint32_t rest = mant & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1);
    if (rest > half || (rest == half && (q & 1u)))
        q++;
    return sign | (uint16_t)q;
}

static float perf_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t x;
    if (exp == 0) {
        float f = (float)mant * 0x1p-24f;
        return sign ? -f : f;
    }
    if (exp == 31)
        x = sign | 0x7f800000u | (mant << 13);
    else
        x = sign | ((exp + 112u) << 23) | (mant << 13);
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

static uint16_t perf_float_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u); /* keep NaN a NaN */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

static float perf_bf16_to_float(uint16_t b)
{
    uint32_t x = (uint32_t)b << 16;
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

/* ------------------------------------------------------------------------- */
/* Inputs and expected results                                                */

struct perf_gen {
    const struct perf_type *ti;
    collRedOp_t op;
    int nranks;
    uint64_t seed;
    int64_t lo;        /* values are lo + [0, span) */
    uint64_t span;
    uint64_t prod_mod; /* prod: a rank's element is +-2 when (3i + rank + seed) % mod < k */
    uint64_t prod_k;
};

static void perf_gen_init(struct perf_gen *g, const struct perf_case *c)
{
    const struct perf_type *ti = perf_type_info(c->type);
    int64_t h = ti->exact / c->nranks;
    if (h > ti->cap)
        h = ti->cap;
    g->ti = ti;
    g->op = c->op;
    g->nranks = c->nranks;
    g->seed = c->seed;
    g->lo = ti->is_signed ? -h : 0;
    g->span = ti->is_signed ? (uint64_t)(2 * h + 1) : (uint64_t)(h + 1);
    /* Of every prod_mod consecutive ranks, prod_k hold a 2; nranks spans at most
     * q windows, so an element meets at most prod_k * q <= 8 twos. */
    uint64_t n = (uint64_t)c->nranks;
    g->prod_mod = (n + 7) / 8 > 8 ? (n + 7) / 8 : 8;
    uint64_t q = (n + g->prod_mod - 1) / g->prod_mod;
    g->prod_k = 8 / q < g->prod_mod / 2 ? 8 / q : g->prod_mod / 2;
    if (g->prod_k == 0)
        g->prod_k = 1;
}

static uint64_t perf_mix(uint64_t seed, int rank, size_t index)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + (uint64_t)rank * 0xbf58476d1ce4e5b9ull +
                 (uint64_t)index * 0x94d049bb133111ebull;
    x ^= x >> 31;
    x *= 0xd6e8feb86659fd93ull;
    x ^= x >> 32;
    return x;
}

static int64_t perf_gen_value(const struct perf_gen *g, int rank, size_t index)
{
    uint64_t x = perf_mix(g->seed, rank, index);
    if (g->op == collProd) {
        int64_t v = ((uint64_t)index * 3 + (uint64_t)rank + g->seed) % g->prod_mod < g->prod_k
                        ? 2
                        : 1;
        if (g->ti->is_signed && (x & 3u) == 0)
            v = -v;
        return v;
    }
    /* Multiply-shift instead of a modulo: this runs nranks times per element. */
    return g->lo + (int64_t)(((x >> 32) * g->span) >> 32);
}

/* Stores an integer: its low bytes for integer types (the wrap-around the
 * library's integer kernels have), the exact value for floating types. */
static void perf_store_int(const struct perf_type *ti, void *dst, uint64_t v)
{
    switch (ti->size) {
    case 1: {
        uint8_t u = (uint8_t)v;
        memcpy(dst, &u, 1);
        break;
    }
    case 4: {
        uint32_t u = (uint32_t)v;
        memcpy(dst, &u, 4);
        break;
    }
    default:
        memcpy(dst, &v, 8);
        break;
    }
}

static void perf_store_real(const struct perf_type *ti, void *dst, double d)
{
    switch (ti->type) {
    case collFloat16: {
        uint16_t h = perf_float_to_half((float)d);
        memcpy(dst, &h, 2);
        break;
    }
    case collBfloat16: {
        uint16_t b = perf_float_to_bf16((float)d);
        memcpy(dst, &b, 2);
        break;
    }
    case collFloat32: {
        float f = (float)d;
        memcpy(dst, &f, 4);
        break;
    }
    default:
        memcpy(dst, &d, 8);
        break;
    }
}

void perf_fill_input(const struct perf_case *c, void *dst, size_t count, size_t offset, int rank)
{
    struct perf_gen g;
    perf_gen_init(&g, c);
    char *out = dst;
    for (size_t i = 0; i < count; i++) {
        int64_t v = perf_gen_value(&g, rank, offset + i);
        if (g.ti->is_float)
            perf_store_real(g.ti, out + i * g.ti->size, (double)v);
        else
            perf_store_int(g.ti, out + i * g.ti->size, (uint64_t)v);
    }
}

/* The value of the low `size` bytes of acc as a signed integer of that size. */
static int64_t perf_sign_extend(uint64_t acc, size_t size)
{
    if (size == 8) {
        int64_t v;
        memcpy(&v, &acc, 8);
        return v;
    }
    uint64_t mask = (UINT64_C(1) << (8 * size)) - 1;
    uint64_t x = acc & mask;
    if (x & (UINT64_C(1) << (8 * size - 1)))
        return (int64_t)x - (int64_t)(mask + 1);
    return (int64_t)x;
}

static void perf_reduce_int(const struct perf_gen *g, void *dst, size_t index)
{
    uint64_t acc = g->op == collProd ? 1 : 0;
    int64_t best = 0;
    for (int r = 0; r < g->nranks; r++) {
        int64_t v = perf_gen_value(g, r, index);
        switch (g->op) {
        case collProd:
            acc *= (uint64_t)v;
            break;
        case collMax:
            best = (r == 0 || v > best) ? v : best;
            break;
        case collMin:
            best = (r == 0 || v < best) ? v : best;
            break;
        default: /* sum and avg, modulo 2^64 and so modulo the type's width */
            acc += (uint64_t)v;
            break;
        }
    }
    if (g->op == collMax || g->op == collMin) {
        acc = (uint64_t)best;
    } else if (g->op == collAvg) {
        /* The wrapped sum as the type holds it, divided with C's truncation. */
        if (g->ti->is_signed) {
            acc = (uint64_t)(perf_sign_extend(acc, g->ti->size) / g->nranks);
        } else {
            uint64_t mask = g->ti->size == 8 ? UINT64_MAX : (UINT64_C(1) << (8 * g->ti->size)) - 1;
            acc = (acc & mask) / (uint64_t)g->nranks;
        }
    }
    perf_store_int(g->ti, dst, acc);
}

static void perf_reduce_real(const struct perf_gen *g, void *dst, size_t index)
{
    double acc = g->op == collProd ? 1.0 : 0.0;
    for (int r = 0; r < g->nranks; r++) {
        double v = (double)perf_gen_value(g, r, index);
        switch (g->op) {
        case collProd:
            acc *= v;
            break;
        case collMax:
            acc = (r == 0 || v > acc) ? v : acc;
            break;
        case collMin:
            acc = (r == 0 || v < acc) ? v : acc;
            break;
        default:
            acc += v;
            break;
        }
    }
    if (g->op == collAvg) {
        if (g->ti->type == collFloat64) {
            acc = acc / g->nranks;
        } else {
            /* float, float16 and bfloat16 divide in float32; the two 16-bit types
             * then round once more, in perf_store_real. */
            float q = (float)acc / (float)g->nranks;
            acc = (double)q;
        }
    }
    perf_store_real(g->ti, dst, acc);
}

void perf_fill_reduced(const struct perf_case *c, void *dst, size_t count, size_t offset)
{
    struct perf_gen g;
    perf_gen_init(&g, c);
    char *out = dst;
    for (size_t i = 0; i < count; i++) {
        if (g.ti->is_float)
            perf_reduce_real(&g, out + i * g.ti->size, offset + i);
        else
            perf_reduce_int(&g, out + i * g.ti->size, offset + i);
    }
}

/* ------------------------------------------------------------------------- */
/* Checking                                                                   */

static void perf_format_value(collDataType_t t, const void *p, char *buf, size_t len)
{
    union {
        int8_t i8;
        uint8_t u8;
        int32_t i32;
        uint32_t u32;
        int64_t i64;
        uint64_t u64;
        uint16_t u16;
        float f32;
        double f64;
    } v;
    memcpy(&v, p, perf_type_size(t));
    switch (t) {
    case collInt8:
        snprintf(buf, len, "%d", v.i8);
        break;
    case collUint8:
        snprintf(buf, len, "%u", v.u8);
        break;
    case collInt32:
        snprintf(buf, len, "%" PRId32, v.i32);
        break;
    case collUint32:
        snprintf(buf, len, "%" PRIu32, v.u32);
        break;
    case collInt64:
        snprintf(buf, len, "%" PRId64, v.i64);
        break;
    case collUint64:
        snprintf(buf, len, "%" PRIu64, v.u64);
        break;
    case collFloat16:
        snprintf(buf, len, "%.9g (0x%04x)", (double)perf_half_to_float(v.u16), v.u16);
        break;
    case collBfloat16:
        snprintf(buf, len, "%.9g (0x%04x)", (double)perf_bf16_to_float(v.u16), v.u16);
        break;
    case collFloat32:
        snprintf(buf, len, "%.9g", (double)v.f32);
        break;
    default:
        snprintf(buf, len, "%.17g", v.f64);
        break;
    }
}

int64_t perf_check(const struct perf_case *c, const struct perf_coll *coll, const char *tool)
{
    size_t elt = perf_type_size(c->type);
    const char *got = c->recvp;
    const char *want = c->expected;
    if (c->check_count == 0 || memcmp(got, want, c->check_count * elt) == 0)
        return 0;
    int64_t wrong = 0;
    size_t first = 0;
    for (size_t i = 0; i < c->check_count; i++) {
        if (memcmp(got + i * elt, want + i * elt, elt) != 0) {
            if (wrong == 0)
                first = i;
            wrong++;
        }
    }
    char g[64];
    char w[64];
    perf_format_value(c->type, got + first * elt, g, sizeof g);
    perf_format_value(c->type, want + first * elt, w, sizeof w);
    fprintf(stderr,
            "%s: rank %d: %" PRId64 " wrong elements of %zu in %s %s %s count %zu root %d %s; "
            "first at %zu: got %s, want %s\n",
            tool, c->rank, wrong, c->check_count, coll->name, perf_type_info(c->type)->name,
            coll->has_op ? perf_op_names[c->op] : "none", c->lay.param_count, c->root,
            c->in_place ? "in place" : "out of place", first, g, w);
    return wrong;
}
