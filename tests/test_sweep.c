/*
 * Sweep of every collective against a reference computed locally: allreduce,
 * broadcast, reduce, allgather, reduce_scatter, gather and scatter x every data
 * type x every reduction op (for the reducing ones) x count {0, 1, n-1, 1000,
 * 1M+3} x out-of-place / in-place x root (every root for n <= 4, else 0, n/2 and
 * n-1), for the number of ranks it is started with.
 *
 *   collrun -n 8 --timeout 600 test_sweep [--quick | --full] [--coll allreduce,reduce] [--mem]
 *                                         [--expect-algo NAME]
 *   test_sweep --threads 4 [...]
 *
 * Inputs are chosen so that the exact result is representable in every data type
 * (small integers, halves and quarters, products of +-1, 2 and 0.5); integers take
 * full 64-bit random patterns, because wrap-around is exact too.  So the result
 * does not depend on the order in which the library reduces, and every rank
 * compares its output bit for bit with one expected value.  avg is the sum divided
 * by n as the API states: integers truncate toward zero, float16/bfloat16 divide
 * in float32 and round once, float32/float64 divide in the type.
 *
 * Every buffer has guard bytes on both sides that must survive the call; an
 * out-of-place sendbuff must come back unchanged, as must the parts of an
 * in-place buffer that are input only (the other blocks of reduce_scatter and of
 * scatter, the whole buffer of reduce off the root) or unused (the whole buffer
 * of gather and scatter off the root).  Off the root, an out-of-place gather
 * gets a NULL recvbuff and an out-of-place scatter a NULL sendbuff, as the API
 * allows.
 *
 * The reducing inputs repeat with a prime period (8191 elements) so that the
 * reference costs n x 8191 element operations per case rather than n x count; a
 * chunk of the library that landed a multiple of 8191 elements away from where it
 * belongs would go unseen, which no power-of-two or per-rank chunking produces.
 * Broadcast, allgather, gather and scatter data are random bytes without period.
 *
 * Then, for allreduce, inputs whose sum depends on the order of reduction:
 * every rank must end with the same bytes as every other (same_everywhere).
 *
 * The 1M+3 count is the slow part.  By default it runs for a subset (every type
 * with sum, every op with float32 and int32, four element sizes for the copies);
 * --full or COLL_TEST_FULL=1 runs all of it, --quick none of it, and
 * COLL_TEST_QUICK=1 (the sanitizer pass of .ci/run) none of it unless --full.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch.h"

#define GUARD_BYTES 64
#define PERIOD 8191 /* prime, see above */
#define BIG_COUNT (((size_t)1 << 20) + 3)
#define MAX_NRANKS 64  /* bfloat16 sums of values in [-2, 2] stay exact up to here */
#define MAX_REPORTS 40 /* mismatch reports per rank before it goes quiet */

enum sweep_kind {
    K_ALLREDUCE, K_BROADCAST, K_REDUCE, K_ALLGATHER, K_REDUCE_SCATTER, K_GATHER, K_SCATTER, K_NUM
};

static const char *const kind_names[K_NUM] = {"allreduce", "broadcast", "reduce", "allgather",
                                              "reduce_scatter", "gather", "scatter"};

/* The kinds that reduce, and those with a root. */
static bool kind_reduces(enum sweep_kind k)
{
    return k == K_ALLREDUCE || k == K_REDUCE || k == K_REDUCE_SCATTER;
}

static bool kind_rooted(enum sweep_kind k)
{
    return k == K_BROADCAST || k == K_REDUCE || k == K_GATHER || k == K_SCATTER;
}

enum sweep_mode { MODE_QUICK, MODE_SUBSET, MODE_FULL };

static const char *const mode_names[] = {"quick", "big-subset", "full"};

struct sweep_opts {
    enum sweep_mode mode;
    unsigned kinds; /* bit per enum sweep_kind */
    bool verbose;
    int grow_from;  /* --grow-from K: sweep a communicator grown from K ranks */
};

struct dtype_info {
    const char *name;
    size_t size;
    bool is_float;
    bool is_signed;
};

static const struct dtype_info dtypes[collNumTypes] = {
    [collInt8] = {"int8", 1, false, true},
    [collUint8] = {"uint8", 1, false, false},
    [collInt32] = {"int32", 4, false, true},
    [collUint32] = {"uint32", 4, false, false},
    [collInt64] = {"int64", 8, false, true},
    [collUint64] = {"uint64", 8, false, false},
    [collFloat16] = {"float16", 2, true, true},
    [collFloat32] = {"float32", 4, true, true},
    [collFloat64] = {"float64", 8, true, true},
    [collBfloat16] = {"bfloat16", 2, true, true},
};

static const char *const op_names[collNumOps] = {"sum", "prod", "max", "min", "avg"};

struct sweep_case {
    enum sweep_kind kind;
    collDataType_t dt;
    collRedOp_t op; /* collSum for the kinds that do not reduce */
    size_t count;   /* the count argument of the call */
    bool inplace;
    int root; /* -1 for the kinds without root */
    uint64_t seed;
};

/* What one rank saw over one kind, for the summary line. */
struct sweep_tally {
    int cases;
    int failed;
    double seconds;
};

/* ---- numbers ---------------------------------------------------------------- */

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static float f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* float32 -> IEEE half, round to nearest even: the test's own reference, kept
 * apart from the library's conversion on purpose. */
static uint16_t ref_f32_to_f16(float f)
{
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;

    if (ax >= 0x7f800000u) /* inf, NaN */
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
    if (ax >= 0x477ff000u) /* >= 65520 rounds to infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) { /* below 2^-14: subnormal half or zero */
        /* Scaling by 2^24 is exact; adding and removing 2^23 rounds to an integer,
         * nearest even, in float arithmetic.  1024 yields the smallest normal. */
        float scaled = f32_from_bits(ax) * 16777216.0f;
        float rounded = (scaled + 8388608.0f) - 8388608.0f;
        return (uint16_t)(sign | (uint16_t)rounded);
    }
    uint32_t mant = ax & 0x7fffffu;
    uint32_t h = ((((ax >> 23) - 127u + 15u) << 10) | (mant >> 13));
    uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
        h++; /* a carry into the exponent is the right answer */
    return (uint16_t)(sign | h);
}

static float ref_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;

    if (exp == 0) {
        float f = (float)man * (1.0f / 16777216.0f);
        return sign ? -f : f;
    }
    if (exp == 31)
        return f32_from_bits(sign | 0x7f800000u | (man << 13));
    return f32_from_bits(sign | ((exp + 112u) << 23) | (man << 13));
}

static uint16_t ref_f32_to_bf16(float f)
{
    uint32_t x = f32_bits(f);

    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

static unsigned dt_bits(collDataType_t t)
{
    return (unsigned)(dtypes[t].size * 8);
}

static uint64_t dt_mask(collDataType_t t)
{
    return dt_bits(t) == 64 ? ~(uint64_t)0 : (((uint64_t)1 << dt_bits(t)) - 1);
}

/* The low bits of v as a signed number of the type's width. */
static int64_t sign_extend(collDataType_t t, uint64_t v)
{
    uint64_t m = dt_mask(t);
    int64_t s;

    v &= m;
    if (dt_bits(t) < 64 && ((v >> (dt_bits(t) - 1)) & 1u))
        v |= ~m;
    memcpy(&s, &v, sizeof(s));
    return s;
}

static void store_int(collDataType_t t, uint64_t v, unsigned char *p)
{
    switch (dtypes[t].size) {
    case 1: {
        uint8_t x = (uint8_t)v;
        memcpy(p, &x, 1);
        break;
    }
    case 4: {
        uint32_t x = (uint32_t)v;
        memcpy(p, &x, 4);
        break;
    }
    default:
        memcpy(p, &v, 8);
        break;
    }
}

static uint64_t load_int(collDataType_t t, const unsigned char *p)
{
    switch (dtypes[t].size) {
    case 1: {
        uint8_t x;
        memcpy(&x, p, 1);
        return x;
    }
    case 4: {
        uint32_t x;
        memcpy(&x, p, 4);
        return x;
    }
    default: {
        uint64_t x;
        memcpy(&x, p, 8);
        return x;
    }
    }
}

/* Stores d, which the caller made representable, in the float type t. */
static void store_float(collDataType_t t, double d, unsigned char *p)
{
    switch (t) {
    case collFloat64:
        memcpy(p, &d, 8);
        break;
    case collFloat32: {
        float f = (float)d;
        memcpy(p, &f, 4);
        break;
    }
    case collFloat16: {
        uint16_t h = ref_f32_to_f16((float)d);
        memcpy(p, &h, 2);
        break;
    }
    default: {
        uint16_t b = ref_f32_to_bf16((float)d);
        memcpy(p, &b, 2);
        break;
    }
    }
}

static double load_float(collDataType_t t, const unsigned char *p)
{
    switch (t) {
    case collFloat64: {
        double d;
        memcpy(&d, p, 8);
        return d;
    }
    case collFloat32: {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    case collFloat16: {
        uint16_t h;
        memcpy(&h, p, 2);
        return ref_f16_to_f32(h);
    }
    default: {
        uint16_t b;
        memcpy(&b, p, 2);
        return f32_from_bits((uint32_t)b << 16);
    }
    }
}

/* One element as text: its value and its bits. */
static void format_elem(collDataType_t t, const unsigned char *p, char *buf, size_t len)
{
    uint64_t bits = load_int(t, p);
    int hexdigits = (int)dtypes[t].size * 2;

    if (dtypes[t].size == 2) {
        uint16_t h;
        memcpy(&h, p, 2);
        bits = h;
    }
    if (dtypes[t].is_float)
        snprintf(buf, len, "%.9g (0x%0*" PRIx64 ")", load_float(t, p), hexdigits, bits);
    else if (dtypes[t].is_signed)
        snprintf(buf, len, "%" PRId64 " (0x%0*" PRIx64 ")", sign_extend(t, bits), hexdigits,
                 bits);
    else
        snprintf(buf, len, "%" PRIu64 " (0x%0*" PRIx64 ")", bits, hexdigits, bits);
}

/* ---- inputs and the reference --------------------------------------------------- */

/*
 * A float input whose reductions over up to MAX_NRANKS ranks are exact in every
 * float type, in any order: sums of small integers, products of +-1, 2 and 0.5
 * (at most 14 factors of 2 or 0.5 stay inside float16's range), and any values
 * with few significant bits for max and min.
 */
static double gen_float(collDataType_t t, collRedOp_t op, uint64_t u, int nranks)
{
    bool narrow = t == collFloat16 || t == collBfloat16;

    switch (op) {
    case collSum:
    case collAvg:
        return narrow ? (double)(int)(u % 5) - 2.0 : (double)(int)(u % 2001) - 1000.0;
    case collProd:
        if (nranks > 14)
            return (u & 1u) ? 1.0 : -1.0;
        switch (u % 8) {
        case 0:
            return 2.0;
        case 1:
            return 0.5;
        case 2:
        case 3:
            return -1.0;
        default:
            return 1.0;
        }
    default: /* max, min */
        if (narrow)
            return ((double)(int)(u % 481) - 240.0) / 2.0;
        return (double)(int64_t)(u % 2000001) - 1000000.0 + 0.25 * (double)((u >> 40) & 3u);
    }
}

/* An integer input: any bits, wrap-around is exact.  Products mostly of odd
 * numbers, so that they do not all collapse to zero. */
static uint64_t gen_int(collRedOp_t op, uint64_t u)
{
    if (op == collProd && ((u >> 59) & 3u) != 0)
        return u | 1u;
    return u;
}

static uint64_t elem_key(const struct sweep_case *c, int rank, size_t h)
{
    return mix64(c->seed ^ mix64(((uint64_t)(unsigned)rank << 40) ^ (uint64_t)h));
}

/* Rank `rank`'s input element at period position h, stored at p. */
static void gen_input(const struct sweep_case *c, int rank, int nranks, size_t h, unsigned char *p)
{
    uint64_t u = elem_key(c, rank, h);

    if (dtypes[c->dt].is_float)
        store_float(c->dt, gen_float(c->dt, c->op, u, nranks), p);
    else
        store_int(c->dt, gen_int(c->op, u), p);
}

/* The expected reduction over all ranks at period position h, stored at p. */
static void gen_expected(const struct sweep_case *c, int nranks, size_t h, unsigned char *p)
{
    collDataType_t t = c->dt;

    if (dtypes[t].is_float) {
        double acc = 0.0;
        for (int r = 0; r < nranks; r++) {
            double v = gen_float(t, c->op, elem_key(c, r, h), nranks);
            if (r == 0)
                acc = v;
            else if (c->op == collSum || c->op == collAvg)
                acc += v;
            else if (c->op == collProd)
                acc *= v;
            else if (c->op == collMax)
                acc = v > acc ? v : acc;
            else
                acc = v < acc ? v : acc;
        }
        if (c->op == collAvg)
            acc = t == collFloat64 ? acc / nranks : (double)((float)acc / (float)nranks);
        store_float(t, acc, p);
        return;
    }

    uint64_t acc = 0;
    for (int r = 0; r < nranks; r++) {
        uint64_t v = gen_int(c->op, elem_key(c, r, h)) & dt_mask(t);
        bool more;
        if (r == 0) {
            acc = v;
            continue;
        }
        switch (c->op) {
        case collSum:
        case collAvg:
            acc += v;
            break;
        case collProd:
            acc *= v;
            break;
        default:
            more = dtypes[t].is_signed ? sign_extend(t, v) > sign_extend(t, acc)
                                       : (v & dt_mask(t)) > (acc & dt_mask(t));
            if (more == (c->op == collMax))
                acc = v;
            break;
        }
    }
    if (c->op == collAvg) {
        if (dtypes[t].is_signed)
            acc = (uint64_t)(sign_extend(t, acc) / nranks);
        else
            acc = (acc & dt_mask(t)) / (uint64_t)nranks;
    }
    store_int(t, acc, p);
}

/* Fills dst with n elements of a periodic table, starting at global index first. */
static void tile(unsigned char *dst, const unsigned char *table, size_t period, size_t first,
                 size_t n, size_t esize)
{
    size_t pos = period ? first % period : 0;

    while (n > 0) {
        size_t run = period - pos < n ? period - pos : n;
        memcpy(dst, table + pos * esize, run * esize);
        dst += run * esize;
        n -= run;
        pos = 0;
    }
}

/* Random bytes keyed by `key`, the data of broadcast and allgather. */
static void fill_random(unsigned char *p, size_t nbytes, uint64_t key)
{
    size_t i = 0;

    for (; i + 8 <= nbytes; i += 8) {
        uint64_t x = mix64(key + i);
        memcpy(p + i, &x, 8);
    }
    if (i < nbytes) {
        uint64_t x = mix64(key + i);
        memcpy(p + i, &x, nbytes - i);
    }
}

static uint64_t copy_key(const struct sweep_case *c, int rank)
{
    return mix64(c->seed + 0x51ed270b0ull * (uint64_t)(rank + 1));
}

/* The root's input of a scatter: block b, for rank b, keyed by b. */
static void fill_blocks(const struct sweep_case *c, int n, unsigned char *p)
{
    size_t block = c->count * dtypes[c->dt].size;

    for (int b = 0; b < n; b++)
        fill_random(p + (size_t)b * block, block, copy_key(c, b));
}

/* ---- guarded buffers --------------------------------------------------------- */

struct gbuf {
    unsigned char *raw; /* GUARD_BYTES, data, GUARD_BYTES */
    unsigned char *data;
    size_t bytes;
};

/* --mem: every buffer (with its guards) comes from collMemAlloc, so that allreduce
 * takes the direct path from COLL_SHM_DIRECT_BYTES up. */
static bool use_mem_alloc;
static const char *expect_algo; /* --expect-algo: what every call but gather, scatter runs */

static unsigned char guard_byte(size_t i)
{
    return (unsigned char)(0xa5u ^ (i * 37u));
}

static void gbuf_alloc(struct gbuf *b, size_t bytes, unsigned char fill)
{
    b->bytes = bytes;
    if (use_mem_alloc) {
        void *p = NULL;
        if (collMemAlloc(&p, bytes + 2 * GUARD_BYTES) != collSuccess)
            launch_fatal(NULL, "collMemAlloc of %zu bytes: %s", bytes + 2 * GUARD_BYTES,
                         collGetLastError(NULL));
        b->raw = p;
    } else {
        b->raw = malloc(bytes + 2 * GUARD_BYTES);
    }
    if (!b->raw)
        launch_fatal(NULL, "out of memory allocating %zu bytes", bytes);
    b->data = b->raw + GUARD_BYTES;
    for (size_t i = 0; i < GUARD_BYTES; i++) {
        b->raw[i] = guard_byte(i);
        b->data[bytes + i] = guard_byte(i + GUARD_BYTES);
    }
    memset(b->data, fill, bytes);
}

static void gbuf_free(struct gbuf *b)
{
    if (use_mem_alloc)
        collMemFree(b->raw);
    else
        free(b->raw);
    b->raw = b->data = NULL;
}

/* True when both guards are intact; else *where_p is the offset of the first bad
 * byte relative to data (negative: below the buffer). */
static bool gbuf_guards_ok(const struct gbuf *b, long *where_p)
{
    for (size_t i = 0; i < GUARD_BYTES; i++) {
        if (b->raw[i] != guard_byte(i)) {
            *where_p = (long)i - GUARD_BYTES;
            return false;
        }
        if (b->data[b->bytes + i] != guard_byte(i + GUARD_BYTES)) {
            *where_p = (long)(b->bytes + i);
            return false;
        }
    }
    return true;
}

/* ---- one case ---------------------------------------------------------------- */

struct sweep_rank {
    struct launch_rank *lr;
    const struct sweep_opts *opts;
    int reports; /* mismatch reports printed so far */
};

static void describe_case(const struct sweep_case *c, char *buf, size_t len)
{
    char root[24] = "";

    if (c->root >= 0)
        snprintf(root, sizeof(root), " root %d", c->root);
    snprintf(buf, len, "%s %s%s%s count %zu %s%s", kind_names[c->kind], dtypes[c->dt].name,
             kind_reduces(c->kind) ? " " : "", kind_reduces(c->kind) ? op_names[c->op] : "",
             c->count, c->inplace ? "in-place" : "out-of-place", root);
}

/*
 * Compares n elements of got with want; on a difference reports the first one
 * (its index in `what`, got and want) and how many differ.  Returns true when
 * equal.
 */
static bool compare(struct sweep_rank *sr, const struct sweep_case *c, const char *what,
                    size_t index0, const unsigned char *got, const unsigned char *want, size_t n)
{
    size_t es = dtypes[c->dt].size;

    if (n == 0 || memcmp(got, want, n * es) == 0)
        return true;
    sr->lr->failures++;
    if (sr->reports++ >= MAX_REPORTS)
        return false;

    size_t first = SIZE_MAX, bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (memcmp(got + i * es, want + i * es, es) != 0) {
            if (first == SIZE_MAX)
                first = i;
            bad++;
        }
    }
    char desc[160], g[64], w[64];
    describe_case(c, desc, sizeof(desc));
    format_elem(c->dt, got + first * es, g, sizeof(g));
    format_elem(c->dt, want + first * es, w, sizeof(w));
    fprintf(stderr, "[rank %d] %s: %s[%zu]: got %s, want %s (%zu of %zu elements differ)\n",
            sr->lr->rank, desc, what, index0 + first, g, w, bad, n);
    return false;
}

static bool check_guards(struct sweep_rank *sr, const struct sweep_case *c, const char *what,
                         const struct gbuf *b)
{
    long where;

    if (gbuf_guards_ok(b, &where))
        return true;
    sr->lr->failures++;
    if (sr->reports++ < MAX_REPORTS) {
        char desc[160];
        describe_case(c, desc, sizeof(desc));
        fprintf(stderr, "[rank %d] %s: %s: byte %ld outside the buffer (%zu bytes) changed\n",
                sr->lr->rank, desc, what, where, b->bytes);
    }
    return false;
}

static collResult_t call_collective(const struct sweep_case *c, const void *send, void *recv,
                                    collComm_t comm)
{
    switch (c->kind) {
    case K_ALLREDUCE:
        return collAllReduce(send, recv, c->count, c->dt, c->op, comm, NULL);
    case K_BROADCAST:
        return collBroadcast(send, recv, c->count, c->dt, c->root, comm, NULL);
    case K_REDUCE:
        return collReduce(send, recv, c->count, c->dt, c->op, c->root, comm, NULL);
    case K_ALLGATHER:
        return collAllGather(send, recv, c->count, c->dt, comm, NULL);
    case K_GATHER:
        return collGather(send, recv, c->count, c->dt, c->root, comm, NULL);
    case K_SCATTER:
        return collScatter(send, recv, c->count, c->dt, c->root, comm, NULL);
    default:
        return collReduceScatter(send, recv, c->count, c->dt, c->op, comm, NULL);
    }
}

/* Runs one case on this rank and checks everything it can; returns true when
 * every check passed. */
static bool run_case(struct sweep_rank *sr, const struct sweep_case *c)
{
    struct launch_rank *lr = sr->lr;
    const int n = lr->nranks, me = lr->rank;
    const size_t es = dtypes[c->dt].size, count = c->count;
    const bool reducing = kind_reduces(c->kind);
    const bool is_root = me == c->root;
    const int failures0 = lr->failures;

    /* The global element range of the reducing input, and one period of it. */
    size_t glen = c->kind == K_REDUCE_SCATTER ? (size_t)n * count : count;
    size_t period = glen < PERIOD ? glen : PERIOD;
    unsigned char *mine = NULL, *ref = NULL;
    if (reducing && period > 0) {
        mine = malloc(period * es);
        ref = malloc(period * es);
        if (!mine || !ref)
            launch_fatal(lr, "out of memory");
        for (size_t h = 0; h < period; h++) {
            gen_input(c, me, n, h, mine + h * es);
            gen_expected(c, n, h, ref + h * es);
        }
    }

    /* Buffers: `io` for in place, else `sb` and `rb` (rb absent off the root of an
     * out-of-place reduce or gather, sb off the root of an out-of-place scatter, as
     * the API allows). */
    struct gbuf io = {0}, sb = {0}, rb = {0};
    size_t send_elems =
        c->kind == K_REDUCE_SCATTER || c->kind == K_SCATTER ? (size_t)n * count : count;
    size_t recv_elems =
        c->kind == K_ALLGATHER || c->kind == K_GATHER ? (size_t)n * count : count;
    size_t io_elems = send_elems > recv_elems ? send_elems : recv_elems;
    size_t scratch_elems = io_elems > 0 ? io_elems : 1;
    unsigned char *scratch = malloc(scratch_elems * es);
    if (!scratch)
        launch_fatal(lr, "out of memory");
    const void *send;
    void *recv;

    if (c->inplace) {
        gbuf_alloc(&io, io_elems * es, 0xcb);
        if (reducing) {
            tile(io.data, mine, period, 0, io_elems, es);
        } else if (c->kind == K_BROADCAST) {
            if (is_root)
                fill_random(io.data, count * es, copy_key(c, me));
        } else if (c->kind == K_SCATTER) {
            if (is_root)
                fill_blocks(c, n, io.data);
        } else {
            fill_random(io.data + (size_t)me * count * es, count * es, copy_key(c, me));
        }
        /* NCCL's in-place layouts: the own block of the larger buffer (off the
         * root of a gather or scatter too, as nccl-tests lays it out). */
        send = io.data;
        recv = io.data;
        if (c->kind == K_ALLGATHER || c->kind == K_GATHER)
            send = io.data + (size_t)me * count * es;
        else if (c->kind == K_REDUCE_SCATTER || c->kind == K_SCATTER)
            recv = io.data + (size_t)me * count * es;
    } else {
        send = NULL;
        if (c->kind != K_SCATTER || is_root) {
            gbuf_alloc(&sb, send_elems * es, 0);
            if (reducing)
                tile(sb.data, mine, period, 0, send_elems, es);
            else if (c->kind == K_BROADCAST && !is_root)
                fill_random(sb.data, send_elems * es, ~copy_key(c, me)); /* must not be read */
            else if (c->kind == K_SCATTER)
                fill_blocks(c, n, sb.data);
            else
                fill_random(sb.data, send_elems * es, copy_key(c, me));
            send = sb.data;
        }
        recv = NULL;
        if ((c->kind != K_REDUCE && c->kind != K_GATHER) || is_root) {
            gbuf_alloc(&rb, recv_elems * es, 0xcb);
            recv = rb.data;
        }
    }

    collResult_t r = call_collective(c, send, recv, lr->comm);
    if (r != collSuccess) {
        char desc[160];
        describe_case(c, desc, sizeof(desc));
        launch_fatal(lr, "%s returned %s: %s", desc, collGetErrorString(r),
                     collGetLastError(lr->comm));
    }
    if (use_mem_alloc && c->kind == K_ALLREDUCE && n > 1 && count > 0) {
        const char *env = getenv("COLL_SHM_DIRECT_BYTES");
        long long min = env != NULL && *env != '\0' ? atoll(env) : 256 << 10;
        const char *algo = coll_comm_last_algo(lr->comm);
        if (min >= 0 && count * es >= (unsigned long long)min && strcmp(algo, "direct") != 0) {
            char desc[160];
            describe_case(c, desc, sizeof(desc));
            fprintf(stderr, "[rank %d] %s: ran %s, not the direct path on collMemAlloc buffers\n",
                    me, desc, algo);
            lr->failures++;
        }
    }

    if (expect_algo != NULL && c->kind != K_GATHER && c->kind != K_SCATTER && n > 1 &&
        count > 0 &&
        strcmp(coll_comm_last_algo(lr->comm), expect_algo) != 0) {
        char desc[160];
        describe_case(c, desc, sizeof(desc));
        fprintf(stderr, "[rank %d] %s: ran %s, not %s\n", me, desc,
                coll_comm_last_algo(lr->comm), expect_algo);
        lr->failures++;
    }

    /* Guards of every buffer. */
    if (c->inplace) {
        check_guards(sr, c, "buffer", &io);
    } else {
        if (sb.raw)
            check_guards(sr, c, "sendbuff", &sb);
        if (rb.raw)
            check_guards(sr, c, "recvbuff", &rb);
    }

    /* An out-of-place sendbuff comes back as it went in. */
    if (!c->inplace && sb.raw) {
        if (reducing)
            tile(scratch, mine, period, 0, send_elems, es);
        else if (c->kind == K_BROADCAST && !is_root)
            fill_random(scratch, send_elems * es, ~copy_key(c, me));
        else if (c->kind == K_SCATTER)
            fill_blocks(c, n, scratch);
        else
            fill_random(scratch, send_elems * es, copy_key(c, me));
        compare(sr, c, "sendbuff (changed)", 0, sb.data, scratch, send_elems);
    }

    /* The output, and the input-only parts of an in-place buffer. */
    const unsigned char *out = recv;
    switch (c->kind) {
    case K_ALLREDUCE:
        tile(scratch, ref, period, 0, count, es);
        compare(sr, c, "recvbuff", 0, out, scratch, count);
        break;
    case K_REDUCE:
        if (me == c->root) {
            tile(scratch, ref, period, 0, count, es);
            compare(sr, c, "recvbuff", 0, out, scratch, count);
        } else if (c->inplace) {
            tile(scratch, mine, period, 0, count, es);
            compare(sr, c, "buffer off the root (changed)", 0, io.data, scratch, count);
        }
        break;
    case K_REDUCE_SCATTER:
        tile(scratch, ref, period, (size_t)me * count, count, es);
        compare(sr, c, "recvbuff", 0, out, scratch, count);
        if (c->inplace) {
            /* The other blocks are sendbuff, which is const. */
            tile(scratch, mine, period, 0, io_elems, es);
            compare(sr, c, "buffer before own block (changed)", 0, io.data, scratch,
                    (size_t)me * count);
            size_t after = (size_t)(me + 1) * count;
            compare(sr, c, "buffer after own block (changed)", after, io.data + after * es,
                    scratch + after * es, io_elems - after);
        }
        break;
    case K_BROADCAST:
        fill_random(scratch, count * es, copy_key(c, c->root));
        compare(sr, c, "recvbuff", 0, out, scratch, count);
        break;
    case K_GATHER:
        if (is_root || c->inplace) {
            /* The root's result; off the root, the buffer as it was: the own
             * block, then 0xcb (recvbuff is not used there). */
            memset(scratch, 0xcb, io_elems * es);
            for (int b = 0; b < n; b++)
                if (is_root || b == me)
                    fill_random(scratch + (size_t)b * count * es, count * es, copy_key(c, b));
            compare(sr, c, is_root ? "recvbuff" : "buffer off the root (changed)", 0,
                    c->inplace ? io.data : out, scratch, io_elems);
        }
        break;
    case K_SCATTER:
        fill_random(scratch, count * es, copy_key(c, me));
        compare(sr, c, "recvbuff", 0, out, scratch, count);
        if (c->inplace) {
            /* The other blocks: the root's sendbuff, which is const; elsewhere
             * not used. */
            memset(scratch, 0xcb, io_elems * es);
            if (is_root)
                fill_blocks(c, n, scratch);
            compare(sr, c, "buffer before own block (changed)", 0, io.data, scratch,
                    (size_t)me * count);
            size_t after = (size_t)(me + 1) * count;
            compare(sr, c, "buffer after own block (changed)", after, io.data + after * es,
                    scratch + after * es, io_elems - after);
        }
        break;
    default: /* K_ALLGATHER */
        for (int b = 0; b < n; b++) {
            size_t off = (size_t)b * count;
            fill_random(scratch, count * es, copy_key(c, b));
            if (!compare(sr, c, "recvbuff", off, out + off * es, scratch, count))
                break;
        }
        break;
    }

    gbuf_free(&io);
    gbuf_free(&sb);
    gbuf_free(&rb);
    free(scratch);
    free(mine);
    free(ref);
    return lr->failures == failures0;
}

/* ---- the sweep ------------------------------------------------------------------ */

static bool big_case_selected(enum sweep_mode mode, enum sweep_kind k, collDataType_t dt,
                              collRedOp_t op)
{
    if (mode == MODE_FULL)
        return true;
    if (mode == MODE_QUICK)
        return false;
    if (!kind_reduces(k)) /* one type per element size */
        return dt == collInt8 || dt == collFloat16 || dt == collFloat32 || dt == collFloat64;
    return op == collSum || dt == collFloat32 || dt == collInt32;
}

static size_t counts_for(int n, size_t *counts)
{
    const size_t want[] = {0, 1, (size_t)n - 1, 1000, BIG_COUNT};
    size_t m = 0;

    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        bool dup = false;
        for (size_t j = 0; j < m; j++)
            dup = dup || counts[j] == want[i];
        if (!dup)
            counts[m++] = want[i];
    }
    return m;
}

static int roots_for(int n, int *roots)
{
    if (n <= 4) {
        for (int i = 0; i < n; i++)
            roots[i] = i;
        return n;
    }
    roots[0] = 0;
    roots[1] = n / 2;
    roots[2] = n - 1;
    return 3;
}

static void sweep_kind(struct sweep_rank *sr, enum sweep_kind k, struct sweep_tally *t)
{
    const int n = sr->lr->nranks;
    const bool reducing = kind_reduces(k);
    const bool rooted = kind_rooted(k);
    size_t counts[5];
    int roots[MAX_NRANKS];
    size_t ncounts = counts_for(n, counts);
    int nroots = rooted ? roots_for(n, roots) : 1;
    double t0 = launch_now();

    if (!rooted)
        roots[0] = -1;
    for (size_t ci = 0; ci < ncounts; ci++) {
        for (int dt = 0; dt < collNumTypes; dt++) {
            for (int op = 0; op < (reducing ? collNumOps : 1); op++) {
                if (counts[ci] == BIG_COUNT &&
                    !big_case_selected(sr->opts->mode, k, (collDataType_t)dt, (collRedOp_t)op))
                    continue;
                for (int ri = 0; ri < nroots; ri++) {
                    for (int inplace = 0; inplace < 2; inplace++) {
                        struct sweep_case c = {
                            .kind = k,
                            .dt = (collDataType_t)dt,
                            .op = (collRedOp_t)op,
                            .count = counts[ci],
                            .inplace = inplace,
                            .root = roots[ri],
                        };
                        c.seed = mix64(((uint64_t)k << 56) ^ ((uint64_t)dt << 48) ^
                                       ((uint64_t)op << 40) ^ ((uint64_t)(roots[ri] + 1) << 32) ^
                                       ((uint64_t)inplace << 31) ^ (uint64_t)counts[ci]);
                        double tc = launch_now();
                        bool ok = run_case(sr, &c);
                        t->cases++;
                        t->failed += !ok;
                        if (sr->opts->verbose && sr->lr->rank == 0) {
                            char desc[160];
                            describe_case(&c, desc, sizeof(desc));
                            printf("  %-70s %s %.3f s\n", desc, ok ? "ok" : "FAILED",
                                   launch_now() - tc);
                        }
                    }
                }
            }
        }
    }
    t->seconds = launch_now() - t0;
}

/* Inputs whose sum depends on the order of reduction (random floats of every
 * magnitude): the result is not checked against a reference, but every rank
 * must hold the same bytes, whatever the algorithm.  Each rank hashes its output
 * and the ranks compare hashes with a max and a min allreduce of a uint64
 * (exact, whatever the algorithm). */
static void same_everywhere(struct sweep_rank *sr)
{
    static const collDataType_t types[] = {collFloat32, collFloat64, collFloat16, collBfloat16};
    static const size_t counts[] = {1, 5, 4099, 300007};
    struct launch_rank *lr = sr->lr;
    int cases = 0, failed = 0;
    double t0 = launch_now();

    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
        for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
            for (int inplace = 0; inplace < 2; inplace++) {
                collDataType_t t = types[ti];
                size_t count = counts[ci], es = dtypes[t].size, bytes = count * es;
                struct gbuf gin, gout;
                gbuf_alloc(&gin, bytes, 0);
                gbuf_alloc(&gout, bytes, 0);
                unsigned char *in = gin.data, *out = gout.data;
                /* Random mantissas, exponents within a few binades of 1: sums
                 * that round differently in every order, never inf or NaN. */
                for (size_t i = 0; i < count; i++) {
                    uint64_t u = mix64(((uint64_t)lr->rank << 40) ^ (ti << 32) ^ (ci << 24) ^ i);
                    double d = ((double)(u >> 11) / 9007199254740992.0 - 0.5) *
                               (double)(1u << (u & 7));
                    store_float(t, d, in + i * es);
                }
                if (inplace)
                    memcpy(out, in, bytes);
                collResult_t r = collAllReduce(inplace ? out : in, out, count, t, collSum,
                                               lr->comm, NULL);
                uint64_t h = 1469598103934665603ULL, hmax = 0, hmin = 0;
                for (size_t i = 0; i < bytes; i++)
                    h = (h ^ out[i]) * 1099511628211ULL;
                if (r == collSuccess)
                    r = collAllReduce(&h, &hmax, 1, collUint64, collMax, lr->comm, NULL);
                if (r == collSuccess)
                    r = collAllReduce(&h, &hmin, 1, collUint64, collMin, lr->comm, NULL);
                cases++;
                if (r != collSuccess || hmax != hmin) {
                    failed++;
                    lr->failures++;
                    fprintf(stderr, "[rank %d] allreduce %s sum count %zu %s: %s\n", lr->rank,
                            dtypes[t].name, count, inplace ? "in place" : "out of place",
                            r != collSuccess ? collGetLastError(lr->comm)
                                             : "the ranks' results differ");
                }
                gbuf_free(&gin);
                gbuf_free(&gout);
            }
        }
    }
    if (lr->rank == 0) {
        printf("sweep %-14s n=%d %-10s %4d cases, %d failed on rank 0, %.1f s\n",
               "allreduce-same", lr->nranks, "random", cases, failed, launch_now() - t0);
        fflush(stdout);
    }
}

/* --grow-from K: ranks 0..K-1 of the launcher's communicator split off a
 * communicator of their own, rank 0 makes a grow id and passes it to every rank
 * over the launcher's communicator, and all grow the small one back to the
 * launcher's size: ranks below K with their small communicator (keeping their
 * ranks), the others as new ranks.  The sweep then runs on the grown one, with
 * the small one still alive beside it (checked before and after). */
static collComm_t grow_for_sweep(struct launch_rank *lr, int from, collComm_t *small_p)
{
    collComm_t outer = lr->comm, small = NULL, grown = NULL;
    if (from < 1 || from >= lr->nranks)
        launch_fatal(lr, "--grow-from %d: must be in [1, %d)", from, lr->nranks);
    LR_MUST(lr, collCommSplit(outer, lr->rank < from ? 0 : COLL_SPLIT_NOCOLOR, lr->rank, &small,
                              NULL), outer);
    collUniqueId id;
    memset(&id, 0, sizeof(id));
    if (lr->rank == 0)
        LR_MUST(lr, collCommGetUniqueId(small, &id), small);
    LR_MUST(lr, collBroadcast(&id, &id, sizeof(id), collUint8, 0, outer, NULL), outer);
    if (lr->rank < from) {
        int n = -1;
        LR_MUST(lr, collCommCount(small, &n), small);
        if (n != from)
            launch_fatal(lr, "the split communicator has %d ranks, not %d", n, from);
        LR_MUST(lr, collCommGrow(small, lr->nranks, lr->rank == 0 ? &id : NULL, -1, &grown,
                                 NULL), small);
    } else {
        LR_MUST(lr, collCommGrow(NULL, lr->nranks, &id, lr->rank, &grown, NULL), NULL);
    }
    int n = -1, r = -1;
    LR_MUST(lr, collCommCount(grown, &n), grown);
    LR_MUST(lr, collCommUserRank(grown, &r), grown);
    if (n != lr->nranks || r != lr->rank)
        launch_fatal(lr, "grown communicator: rank %d of %d, want %d of %d", r, n, lr->rank,
                     lr->nranks);
    if (lr->rank == 0) {
        printf("sweep grew a communicator of %d ranks to %d\n", from, n);
        fflush(stdout);
    }
    *small_p = small;
    return grown;
}

/* The small communicator of --grow-from still works: an allreduce of its ranks. */
static void grow_check_small(struct launch_rank *lr, collComm_t small, int from)
{
    if (small == NULL)
        return;
    int v = lr->rank + 1, sum = 0;
    LR_MUST(lr, collAllReduce(&v, &sum, 1, collInt32, collSum, small, NULL), small);
    LR_CHECK(lr, sum == from * (from + 1) / 2, "allreduce on the communicator grown from: %d, "
             "want %d", sum, from * (from + 1) / 2);
}

static void sweep_body(struct launch_rank *lr)
{
    const struct sweep_opts *opts = lr->arg;
    collComm_t outer = lr->comm, small = NULL;
    if (opts->grow_from > 0) {
        lr->comm = grow_for_sweep(lr, opts->grow_from, &small);
        grow_check_small(lr, small, opts->grow_from);
    }
    struct sweep_rank sr = {.lr = lr, .opts = opts};

    if (lr->nranks > MAX_NRANKS)
        launch_fatal(lr, "the sweep's inputs are exact for up to %d ranks, not %d", MAX_NRANKS,
                     lr->nranks);
    for (int k = 0; k < K_NUM; k++) {
        if (!(opts->kinds & (1u << k)))
            continue;
        struct sweep_tally t = {0};
        sweep_kind(&sr, (enum sweep_kind)k, &t);
        if (lr->rank == 0) {
            printf("sweep %-14s n=%d %-10s %4d cases, %d failed on rank 0, %.1f s\n",
                   kind_names[k], lr->nranks, mode_names[opts->mode], t.cases, t.failed,
                   t.seconds);
            fflush(stdout);
        }
    }
    if (opts->kinds & (1u << K_ALLREDUCE))
        same_everywhere(&sr);
    if (opts->grow_from > 0) {
        grow_check_small(lr, small, opts->grow_from);
        LR_MUST(lr, collCommDestroy(lr->comm), NULL);
        if (small != NULL)
            LR_MUST(lr, collCommDestroy(small), NULL);
        lr->comm = outer;
    }
}

static void usage(const char *prog)
{
    fprintf(stderr,
            "usage: %s [--threads N] [--quick | --big-subset | --full] [--coll LIST] [--mem] [-v]\n"
            "  --threads N   run N ranks as threads (default: the rank collrun set up)\n"
            "  --quick       leave out the 1M+3 count\n"
            "  --big-subset  1M+3 for a subset of types and ops (the default)\n"
            "  --large-when-full  no 1M+3 cases unless COLL_TEST_FULL is set\n"
            "  --full        1M+3 for everything (also COLL_TEST_FULL=1)\n"
            "  --coll LIST   only these, comma-separated: allreduce,broadcast,reduce,\n"
            "                allgather,reduce_scatter,gather,scatter\n"
            "  --mem         buffers from collMemAlloc (allreduce must then take the\n"
            "                direct path from COLL_SHM_DIRECT_BYTES up)\n"
            "  --expect-algo NAME  every call (count > 0) but gather and scatter must have run NAME\n"
            "  --grow-from K the first K ranks make a communicator and grow it to all (collCommGrow);\n"
            "                the sweep runs on the grown one\n"
            "  -v            one line per case on rank 0\n",
            prog);
    exit(2);
}

static unsigned parse_kinds(const char *list, const char *prog)
{
    unsigned kinds = 0;
    char *copy = strdup(list), *save = NULL;

    if (!copy)
        exit(2);
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int k;
        for (k = 0; k < K_NUM; k++)
            if (strcmp(tok, kind_names[k]) == 0)
                break;
        if (k == K_NUM) {
            fprintf(stderr, "unknown collective '%s'\n", tok);
            usage(prog);
        }
        kinds |= 1u << k;
    }
    free(copy);
    return kinds;
}

/* Whether the variable name is set to something other than "" or "0". */
static bool env_set(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && strcmp(v, "") != 0 && strcmp(v, "0") != 0;
}

int main(int argc, char **argv)
{
    struct sweep_opts opts = {.mode = MODE_SUBSET, .kinds = (1u << K_NUM) - 1};
    bool full_env = env_set("COLL_TEST_FULL");
    bool large_when_full = false;
    int nthreads = 0;

    bool quick_env = env_set("COLL_TEST_QUICK");
    if (full_env)
        opts.mode = MODE_FULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            nthreads = launch_parse_threads(argv[++i]);
        else if (strcmp(argv[i], "--quick") == 0)
            opts.mode = MODE_QUICK;
        else if (strcmp(argv[i], "--big-subset") == 0)
            opts.mode = MODE_SUBSET;
        else if (strcmp(argv[i], "--full") == 0)
            opts.mode = MODE_FULL;
        else if (strcmp(argv[i], "--coll") == 0 && i + 1 < argc)
            opts.kinds = parse_kinds(argv[++i], argv[0]);
        else if (strcmp(argv[i], "--mem") == 0)
            use_mem_alloc = true;
        else if (strcmp(argv[i], "--large-when-full") == 0)
            large_when_full = true;
        else if (strcmp(argv[i], "--expect-algo") == 0 && i + 1 < argc)
            expect_algo = argv[++i];
        else if (strcmp(argv[i], "--grow-from") == 0 && i + 1 < argc)
            opts.grow_from = atoi(argv[++i]);
        else if (strcmp(argv[i], "-v") == 0)
            opts.verbose = true;
        else
            usage(argv[0]);
    }
    /* The sweeps with many ranks: their 1M+3 cases only in the full run (CI), as
     * the same cases run with fewer ranks in every run. */
    if (large_when_full && !full_env)
        opts.mode = MODE_QUICK;
    if (quick_env && opts.mode == MODE_SUBSET)
        opts.mode = MODE_QUICK;
    return launch_run(nthreads, sweep_body, &opts);
}
