/*
 * Data sets for dp_trainer: a built-in synthetic classification set, or rows of a
 * CSV file (plain or gzip) with the label in the last column.  Both are split into
 * a training part and a held-out part, and the features are standardised with the
 * training part's per-feature mean and standard deviation.
 */
#ifndef TRAINER_DATA_H
#define TRAINER_DATA_H

#include <stddef.h>
#include <stdint.h>

struct dataset {
    size_t nfeat;     /* features per example */
    int nclasses;     /* labels are 0 .. nclasses - 1 */
    size_t ntrain;    /* the training examples come first in x and y */
    size_t ntest;     /* then the held-out ones */
    float *x;         /* (ntrain + ntest) x nfeat, row-major */
    int *y;           /* ntrain + ntest labels */
};

/* The synthetic set: 10 classes, 32 features, 8192 training and 2048 held-out
 * examples, always the same (its generator does not depend on --seed). */
int data_synthetic(struct dataset *ds, char *err, size_t errlen);

/* Reads FILE (CSV, or gzip-compressed CSV when built with zlib).  On failure
 * returns -1 with a message naming the file and line in err. */
int data_load_csv(const char *path, struct dataset *ds, char *err, size_t errlen);

void data_free(struct dataset *ds);

/* perm[0..n) = a permutation of 0..n-1 that is a pure function of (seed, epoch). */
void data_permutation(uint64_t seed, uint64_t epoch, size_t n, uint32_t *perm);

#endif
