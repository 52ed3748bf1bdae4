/*
 * Checkpoint file layout (version 1), every integer and float little-endian:
 *
 *   "DPTRCKPT"                 8 bytes of magic
 *   u32 version                1
 *   u32 nsizes                 then nsizes x u32 layer widths (input ... classes)
 *   u64 seed, u64 batch        what fixes the data order; a resume must match them
 *   u64 step                   optimiser steps done
 *   u64 nparams                then nparams x f32 params, nparams x f32 momentum
 *   u64 checksum               FNV-1a 64 of every byte before it
 *
 * The file is built in memory and written in one go to FILE.tmp, then renamed over
 * FILE, so a reader sees the old checkpoint or the new one, never half of one.
 */
#include "checkpoint.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CKPT_MAGIC "DPTRCKPT"
#define CKPT_VERSION 1u
#define CKPT_MAX_SIZES 64

uint64_t ckpt_fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3u;
    }
    return h;
}

/* ---- little-endian encoding into and out of a byte buffer ---- */

struct buf {
    unsigned char *p;
    size_t len, pos;
};

static void put_u32(struct buf *b, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        b->p[b->pos++] = (unsigned char)(v >> (8 * i));
}

static void put_u64(struct buf *b, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        b->p[b->pos++] = (unsigned char)(v >> (8 * i));
}

static void put_floats(struct buf *b, const float *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        put_u32(b, u);
    }
}

/* The getters return -1 when the buffer ends first (a truncated file). */
static int get_u32(struct buf *b, uint32_t *v)
{
    if (b->len - b->pos < 4)
        return -1;
    *v = 0;
    for (int i = 0; i < 4; i++)
        *v |= (uint32_t)b->p[b->pos++] << (8 * i);
    return 0;
}

static int get_u64(struct buf *b, uint64_t *v)
{
    if (b->len - b->pos < 8)
        return -1;
    *v = 0;
    for (int i = 0; i < 8; i++)
        *v |= (uint64_t)b->p[b->pos++] << (8 * i);
    return 0;
}

static int get_floats(struct buf *b, float *v, size_t n)
{
    if ((b->len - b->pos) / 4 < n)
        return -1;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = 0;
        get_u32(b, &u);
        memcpy(&v[i], &u, 4);
    }
    return 0;
}

/* ---- files ---- */

static int write_file(const char *path, const void *data, size_t n, char *err, size_t errlen)
{
    size_t tlen = strlen(path) + 5;
    char *tmp = malloc(tlen);
    if (tmp == NULL) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    snprintf(tmp, tlen, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    int ok = f != NULL && fwrite(data, 1, n, f) == n;
    if (f != NULL && fclose(f) != 0)
        ok = 0;
    if (!ok || rename(tmp, path) != 0) {
        snprintf(err, errlen, "%s: cannot write: %s", ok ? path : tmp, strerror(errno));
        remove(tmp);
        free(tmp);
        return -1;
    }
    free(tmp);
    return 0;
}

int ckpt_dump_floats(const char *path, const float *v, size_t n, char *err, size_t errlen)
{
    struct buf b = {malloc(n * 4 + 1), n * 4, 0};
    if (b.p == NULL) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    put_floats(&b, v, n);
    int r = write_file(path, b.p, b.len, err, errlen);
    free(b.p);
    return r;
}

int ckpt_write(const char *path, const struct ckpt_state *st, char *err, size_t errlen)
{
    size_t len = 8 + 4 + 4 + 4 * (size_t)st->nsizes + 8 * 4 + 8 * st->nparams + 8;
    struct buf b = {malloc(len), len, 0};
    if (b.p == NULL) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    memcpy(b.p, CKPT_MAGIC, 8);
    b.pos = 8;
    put_u32(&b, CKPT_VERSION);
    put_u32(&b, (uint32_t)st->nsizes);
    for (int i = 0; i < st->nsizes; i++)
        put_u32(&b, (uint32_t)st->sizes[i]);
    put_u64(&b, st->seed);
    put_u64(&b, st->batch);
    put_u64(&b, st->step);
    put_u64(&b, st->nparams);
    put_floats(&b, st->params, st->nparams);
    put_floats(&b, st->momentum, st->nparams);
    put_u64(&b, ckpt_fnv1a(CKPT_FNV_START, b.p, b.pos));
    int r = write_file(path, b.p, b.pos, err, errlen);
    free(b.p);
    return r;
}

/* The whole file in memory; *len_p its size. */
static unsigned char *slurp(const char *path, size_t *len_p, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, len = 0;
    unsigned char *p = malloc(cap);
    while (p != NULL) {
        len += fread(p + len, 1, cap - len, f);
        if (len < cap)
            break;
        unsigned char *q = realloc(p, cap * 2);
        if (q == NULL) {
            free(p);
            p = NULL;
            break;
        }
        p = q;
        cap *= 2;
    }
    int bad = p == NULL || ferror(f);
    fclose(f);
    if (bad) {
        snprintf(err, errlen, "%s: cannot read: %s", path,
                 p == NULL ? "out of memory" : strerror(errno));
        free(p);
        return NULL;
    }
    *len_p = len;
    return p;
}

/* The last 8 bytes are the checksum of all the others. */
static int checksum_ok(const struct buf *b)
{
    if (b->len < 16)
        return 0;
    struct buf tail = {b->p, b->len, b->len - 8};
    uint64_t stored;
    get_u64(&tail, &stored);
    return stored == ckpt_fnv1a(CKPT_FNV_START, b->p, b->len - 8);
}

/* Shape, seed and batch of the file against those of this run. */
static int check_header(struct buf *b, const char *path, const struct ckpt_state *st,
                        uint64_t *step_p, char *err, size_t errlen)
{
    uint32_t version, nsizes, w;
    uint64_t seed, batch, nparams;
    if (b->len < 8 || memcmp(b->p, CKPT_MAGIC, 8) != 0) {
        snprintf(err, errlen, "%s: not a dp_trainer checkpoint (bad magic)", path);
        return -1;
    }
    b->pos = 8;
    if (get_u32(b, &version) != 0 || get_u32(b, &nsizes) != 0)
        goto truncated;
    if (version != CKPT_VERSION) {
        snprintf(err, errlen, "%s: checkpoint format version %u; this dp_trainer reads %u",
                 path, version, CKPT_VERSION);
        return -1;
    }
    if (!checksum_ok(b)) {
        snprintf(err, errlen, "%s: checksum mismatch: the file is truncated or corrupt", path);
        return -1;
    }
    int same = nsizes == (uint32_t)st->nsizes;
    for (uint32_t i = 0; i < nsizes && i < CKPT_MAX_SIZES; i++) {
        if (get_u32(b, &w) != 0)
            goto truncated;
        same = same && i < (uint32_t)st->nsizes && w == (uint32_t)st->sizes[i];
    }
    if (!same || nsizes > CKPT_MAX_SIZES) {
        snprintf(err, errlen, "%s: the checkpoint's model has another shape than this run's "
                 "(input, --hidden and classes must match)", path);
        return -1;
    }
    if (get_u64(b, &seed) != 0 || get_u64(b, &batch) != 0 || get_u64(b, step_p) != 0 ||
        get_u64(b, &nparams) != 0)
        goto truncated;
    if (seed != st->seed || batch != st->batch) {
        snprintf(err, errlen, "%s: written with --seed %llu --batch %llu; resume with the same "
                 "(this run has --seed %llu --batch %llu)", path, (unsigned long long)seed,
                 (unsigned long long)batch, (unsigned long long)st->seed,
                 (unsigned long long)st->batch);
        return -1;
    }
    if (nparams != st->nparams) {
        snprintf(err, errlen, "%s: %llu parameters; this model has %zu", path,
                 (unsigned long long)nparams, st->nparams);
        return -1;
    }
    return 0;
truncated:
    snprintf(err, errlen, "%s: truncated checkpoint", path);
    return -1;
}

int ckpt_read(const char *path, struct ckpt_state *st, char *err, size_t errlen)
{
    struct buf b = {NULL, 0, 0};
    b.p = slurp(path, &b.len, err, errlen);
    if (b.p == NULL)
        return -1;
    uint64_t step;
    int r = check_header(&b, path, st, &step, err, errlen);
    if (r == 0 && (get_floats(&b, st->params, st->nparams) != 0 ||
                   get_floats(&b, st->momentum, st->nparams) != 0 || b.len - b.pos != 8)) {
        snprintf(err, errlen, "%s: the size does not match its header", path);
        r = -1;
    }
    if (r == 0)
        st->step = step;
    free(b.p);
    return r;
}
