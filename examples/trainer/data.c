/*
 * The trainer's data: the built-in synthetic set and the CSV reader.
 *
 * Synthetic set: each of the 10 classes owns 4 clusters whose centres lie in a
 * 4-dimensional latent space, interleaved with the other classes' clusters, so no
 * linear function of the features separates the classes.  An example is its
 * cluster's centre plus Gaussian noise, padded with 28 dimensions of pure noise and
 * turned by a fixed random rotation into 32 features.  The generator has its own
 * fixed seed: the set is the same whatever --seed says.
 *
 * CSV: one example per line, numbers separated by commas, the label (a non-negative
 * integer) last.  Blank lines are skipped; anything else that is not a number is an
 * error naming the file, line and field.  The rows are shuffled with a fixed seed and
 * the last 20% held out.  With zlib, gzip files (recognised by their first bytes)
 * are read too; zlib also reads plain files, so one code path serves both.
 */
#include "data.h"
#include "rng.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef TRAINER_HAVE_ZLIB
#include <zlib.h>
#endif

enum {
    SYN_CLASSES = 10,
    SYN_FEATURES = 32,
    SYN_LATENT = 4,
    SYN_CLUSTERS_PER_CLASS = 4,
    SYN_TRAIN = 8192,
    SYN_TEST = 2048,
};
#define SYN_SEED 0x5eed2024u
#define SYN_BOX 3.0         /* centres uniform in [-SYN_BOX, SYN_BOX]^SYN_LATENT */
#define SYN_MIN_DIST 1.8    /* no two centres closer than this */
#define SYN_SIGMA 0.35      /* noise around a centre, per latent dimension */
#define SPLIT_SEED 0x0123456789abcdefu
#define MAX_CLASSES 100000
#define HELD_OUT_PERCENT 20

/* An unbiased integer in [0, n). */
static size_t rng_below(uint64_t *state, size_t n)
{
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t r;
    do
        r = rng_next(state);
    while (r >= limit);
    return (size_t)(r % n);
}

static void shuffle(uint64_t *state, size_t n, uint32_t *perm)
{
    for (size_t i = 0; i < n; i++)
        perm[i] = (uint32_t)i;
    for (size_t i = n; i > 1; i--) {
        size_t j = rng_below(state, i);
        uint32_t t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
}

void data_permutation(uint64_t seed, uint64_t epoch, size_t n, uint32_t *perm)
{
    /* Mixing the epoch through the generator once keeps (seed, epoch) and
     * (seed + 1, epoch - 1) apart. */
    uint64_t state = seed;
    state = rng_next(&state) ^ (epoch * 0xd1b54a32d192ed03u);
    shuffle(&state, n, perm);
}

void data_free(struct dataset *ds)
{
    free(ds->x);
    free(ds->y);
    memset(ds, 0, sizeof(*ds));
}

static int alloc_examples(struct dataset *ds, size_t n, size_t nfeat, char *err, size_t errlen)
{
    ds->x = malloc(n * nfeat * sizeof(float));
    ds->y = malloc(n * sizeof(int));
    if (ds->x == NULL || ds->y == NULL) {
        data_free(ds);
        snprintf(err, errlen, "out of memory for %zu examples of %zu features", n, nfeat);
        return -1;
    }
    ds->nfeat = nfeat;
    return 0;
}

/* Per-feature mean and standard deviation of the training rows, applied to every
 * row.  A constant feature (std 0, such as a digit's always-blank corner pixel)
 * is only centred. */
static void standardise(struct dataset *ds)
{
    size_t n = ds->ntrain + ds->ntest, d = ds->nfeat;
    for (size_t j = 0; j < d; j++) {
        double sum = 0.0, sq = 0.0;
        for (size_t i = 0; i < ds->ntrain; i++)
            sum += ds->x[i * d + j];
        double mean = sum / (double)ds->ntrain;
        for (size_t i = 0; i < ds->ntrain; i++) {
            double t = ds->x[i * d + j] - mean;
            sq += t * t;
        }
        double sd = sqrt(sq / (double)ds->ntrain);
        double scale = sd > 1e-12 ? 1.0 / sd : 1.0;
        for (size_t i = 0; i < n; i++)
            ds->x[i * d + j] = (float)((ds->x[i * d + j] - mean) * scale);
    }
}

/* A random rotation (Gram-Schmidt on Gaussian columns), rot[i * d + j]. */
static void random_rotation(uint64_t *state, size_t d, double *rot)
{
    for (size_t i = 0; i < d * d; i++)
        rot[i] = rng_normal(state);
    for (size_t c = 0; c < d; c++) {
        for (size_t p = 0; p < c; p++) {
            double dot = 0.0;
            for (size_t i = 0; i < d; i++)
                dot += rot[i * d + c] * rot[i * d + p];
            for (size_t i = 0; i < d; i++)
                rot[i * d + c] -= dot * rot[i * d + p];
        }
        double norm = 0.0;
        for (size_t i = 0; i < d; i++)
            norm += rot[i * d + c] * rot[i * d + c];
        norm = sqrt(norm);
        for (size_t i = 0; i < d; i++)
            rot[i * d + c] /= norm;
    }
}

/* Centres uniform in the latent box, at least SYN_MIN_DIST apart (rejection). */
static void pick_centres(uint64_t *state, int n, double *centre)
{
    for (int k = 0; k < n; k++) {
        bool ok;
        do {
            for (int j = 0; j < SYN_LATENT; j++)
                centre[k * SYN_LATENT + j] = (2.0 * rng_uniform(state) - 1.0) * SYN_BOX;
            ok = true;
            for (int p = 0; p < k && ok; p++) {
                double d2 = 0.0;
                for (int j = 0; j < SYN_LATENT; j++) {
                    double t = centre[k * SYN_LATENT + j] - centre[p * SYN_LATENT + j];
                    d2 += t * t;
                }
                ok = d2 >= SYN_MIN_DIST * SYN_MIN_DIST;
            }
        } while (!ok);
    }
}

static void synthetic_example(uint64_t *state, const double *centre, const double *rot,
                              float *x, int *y)
{
    enum { NCENTRES = SYN_CLASSES * SYN_CLUSTERS_PER_CLASS };
    int k = (int)rng_below(state, NCENTRES);
    double v[SYN_FEATURES];
    for (int j = 0; j < SYN_FEATURES; j++)
        v[j] = j < SYN_LATENT ? centre[k * SYN_LATENT + j] + SYN_SIGMA * rng_normal(state)
                              : rng_normal(state);
    for (int i = 0; i < SYN_FEATURES; i++) {
        double s = 0.0;
        for (int j = 0; j < SYN_FEATURES; j++)
            s += rot[i * SYN_FEATURES + j] * v[j];
        x[i] = (float)s;
    }
    *y = k % SYN_CLASSES;
}

int data_synthetic(struct dataset *ds, char *err, size_t errlen)
{
    enum { NCENTRES = SYN_CLASSES * SYN_CLUSTERS_PER_CLASS };
    static double centre[NCENTRES * SYN_LATENT];
    static double rot[SYN_FEATURES * SYN_FEATURES];
    size_t n = SYN_TRAIN + SYN_TEST;
    memset(ds, 0, sizeof(*ds));
    if (alloc_examples(ds, n, SYN_FEATURES, err, errlen) != 0)
        return -1;
    uint64_t state = SYN_SEED;
    pick_centres(&state, NCENTRES, centre);
    random_rotation(&state, SYN_FEATURES, rot);
    for (size_t i = 0; i < n; i++)
        synthetic_example(&state, centre, rot, ds->x + i * SYN_FEATURES, ds->y + i);
    ds->nclasses = SYN_CLASSES;
    ds->ntrain = SYN_TRAIN;
    ds->ntest = SYN_TEST;
    standardise(ds);
    return 0;
}

/* ---- CSV ---- */

/* A line reader over zlib (plain or gzip) or stdio. */
struct reader {
#ifdef TRAINER_HAVE_ZLIB
    gzFile gz;
#else
    FILE *f;
#endif
    char *line;
    size_t cap;
};

#ifndef TRAINER_HAVE_ZLIB
static bool looks_gzip(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return false;
    unsigned char magic[2] = {0, 0};
    size_t got = fread(magic, 1, 2, f);
    fclose(f);
    return got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
}
#endif

static int reader_open(struct reader *r, const char *path, char *err, size_t errlen)
{
    memset(r, 0, sizeof(*r));
#ifdef TRAINER_HAVE_ZLIB
    r->gz = gzopen(path, "rb");
    if (r->gz == NULL) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno ? errno : ENOENT));
        return -1;
    }
#else
    if (looks_gzip(path)) {
        snprintf(err, errlen, "%s: a gzip file, but dp_trainer was built without zlib "
                 "(install zlib1g-dev and rebuild, or gunzip the file)", path);
        return -1;
    }
    r->f = fopen(path, "r");
    if (r->f == NULL) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
#endif
    return 0;
}

static void reader_close(struct reader *r)
{
#ifdef TRAINER_HAVE_ZLIB
    if (r->gz != NULL)
        gzclose(r->gz);
#else
    if (r->f != NULL)
        fclose(r->f);
#endif
    free(r->line);
}

/* Reads one line (without its newline) into r->line.  Returns 1 for a line, 0 at
 * the end, -1 on a read error or out of memory. */
static int reader_line(struct reader *r)
{
    size_t len = 0;
    for (;;) {
        if (r->cap - len < 2) {
            size_t cap = r->cap ? r->cap * 2 : 4096;
            char *p = realloc(r->line, cap);
            if (p == NULL)
                return -1;
            r->line = p;
            r->cap = cap;
        }
#ifdef TRAINER_HAVE_ZLIB
        char *got = gzgets(r->gz, r->line + len, (int)(r->cap - len));
        if (got == NULL) {
            int zerr;
            gzerror(r->gz, &zerr);
            if (zerr != Z_OK) /* Z_BUF_ERROR: a truncated gzip file */
                return -1;
        }
#else
        char *got = fgets(r->line + len, (int)(r->cap - len), r->f);
        if (got == NULL && ferror(r->f))
            return -1;
#endif
        if (got == NULL)
            return len > 0 ? 1 : 0;
        len += strlen(r->line + len);
        if (len > 0 && r->line[len - 1] == '\n') {
            r->line[--len] = '\0';
            if (len > 0 && r->line[len - 1] == '\r')
                r->line[--len] = '\0';
            return 1;
        }
    }
}

static const char *reader_error(struct reader *r)
{
#ifdef TRAINER_HAVE_ZLIB
    int zerr;
    const char *msg = gzerror(r->gz, &zerr);
    return zerr == Z_ERRNO ? strerror(errno) : msg;
#else
    (void)r;
    return strerror(errno);
#endif
}

static bool blank(const char *s)
{
    for (; *s; s++)
        if (*s != ' ' && *s != '\t')
            return false;
    return true;
}

/* A growing array of float rows. */
struct rows {
    float *v;
    size_t n, cap; /* in floats */
};

static int rows_push(struct rows *rw, double x)
{
    if (rw->n == rw->cap) {
        size_t cap = rw->cap ? rw->cap * 2 : 1 << 16;
        float *p = realloc(rw->v, cap * sizeof(float));
        if (p == NULL)
            return -1;
        rw->v = p;
        rw->cap = cap;
    }
    rw->v[rw->n++] = (float)x;
    return 0;
}

/* Parses one line of numbers into rw; returns the number of fields, or -1 with err
 * set (field number given from 1). */
static long parse_line(char *line, struct rows *rw, const char *path, size_t lineno, char *err,
                       size_t errlen)
{
    long nfields = 0;
    char *p = line;
    for (;;) {
        char *end;
        errno = 0;
        double v = strtod(p, &end);
        char *q = end;
        while (*q == ' ' || *q == '\t')
            q++;
        if (end == p || (*q != ',' && *q != '\0') || errno == ERANGE || !isfinite(v)) {
            char *stop = strchr(p, ',');
            int flen = stop ? (int)(stop - p) : (int)strlen(p);
            snprintf(err, errlen, "%s:%zu: field %ld '%.*s' is not a number", path, lineno,
                     nfields + 1, flen > 40 ? 40 : flen, p);
            return -1;
        }
        if (rows_push(rw, v) != 0) {
            snprintf(err, errlen, "%s:%zu: out of memory", path, lineno);
            return -1;
        }
        nfields++;
        if (*q == '\0')
            return nfields;
        p = q + 1;
    }
}

/* The label (the row's last field) must be a non-negative integer. */
static int check_label(double v, const char *path, size_t lineno, int *maxlab, char *err,
                       size_t errlen)
{
    if (!(v >= 0.0) || v != floor(v) || v >= MAX_CLASSES) {
        snprintf(err, errlen, "%s:%zu: label %g (the last field) is not an integer in [0, %d)",
                 path, lineno, v, MAX_CLASSES);
        return -1;
    }
    if ((int)v > *maxlab)
        *maxlab = (int)v;
    return 0;
}

/* Reads every row of the file into rw; the classes are 0 .. the largest label. */
static int read_rows(const char *path, struct rows *rw, size_t *ncols_p, size_t *nrows_p,
                     int *nclasses_p, char *err, size_t errlen)
{
    struct reader r;
    if (reader_open(&r, path, err, errlen) != 0)
        return -1;
    size_t lineno = 0, nrows = 0;
    long ncols = 0;
    int got, ret = -1, maxlab = 0;
    while ((got = reader_line(&r)) == 1) {
        lineno++;
        if (blank(r.line))
            continue;
        long n = parse_line(r.line, rw, path, lineno, err, errlen);
        if (n < 0)
            goto out;
        if (ncols == 0 && n < 2) {
            snprintf(err, errlen, "%s:%zu: one field only; want features then a label", path,
                     lineno);
            goto out;
        }
        if (ncols != 0 && n != ncols) {
            snprintf(err, errlen, "%s:%zu: %ld fields, but the first row has %ld", path,
                     lineno, n, ncols);
            goto out;
        }
        if (check_label(rw->v[rw->n - 1], path, lineno, &maxlab, err, errlen) != 0)
            goto out;
        ncols = n;
        nrows++;
    }
    if (got < 0) {
        snprintf(err, errlen, "%s:%zu: read error: %s", path, lineno + 1, reader_error(&r));
        goto out;
    }
    if (nrows < 2 || maxlab < 1) {
        snprintf(err, errlen, "%s: %zu rows of data with %d classes; want at least 2 of each",
                 path, nrows, maxlab + 1);
        goto out;
    }
    *ncols_p = (size_t)ncols;
    *nrows_p = nrows;
    *nclasses_p = maxlab + 1;
    ret = 0;
out:
    reader_close(&r);
    return ret;
}

int data_load_csv(const char *path, struct dataset *ds, char *err, size_t errlen)
{
    struct rows rw = {0};
    size_t ncols, nrows;
    int nclasses;
    memset(ds, 0, sizeof(*ds));
    if (read_rows(path, &rw, &ncols, &nrows, &nclasses, err, errlen) != 0)
        goto fail;
    size_t nfeat = ncols - 1;
    uint32_t *perm = malloc(nrows * sizeof(uint32_t));
    if (perm == NULL || alloc_examples(ds, nrows, nfeat, err, errlen) != 0) {
        free(perm);
        snprintf(err, errlen, "%s: out of memory", path);
        goto fail;
    }
    /* A fixed shuffle, so that a file sorted by class still gives every class to
     * both parts. */
    uint64_t state = SPLIT_SEED;
    shuffle(&state, nrows, perm);
    for (size_t i = 0; i < nrows; i++) {
        const float *row = rw.v + (size_t)perm[i] * ncols;
        memcpy(ds->x + i * nfeat, row, nfeat * sizeof(float));
        ds->y[i] = (int)row[nfeat];
    }
    free(perm);
    free(rw.v);
    ds->nclasses = nclasses;
    ds->ntest = nrows * HELD_OUT_PERCENT / 100;
    if (ds->ntest == 0)
        ds->ntest = 1;
    ds->ntrain = nrows - ds->ntest;
    standardise(ds);
    return 0;
fail:
    free(rw.v);
    return -1;
}
