/*
 * dp_trainer's checkpoints: the model's shape, the seed and batch that fix the
 * data order, the step reached, the parameters and the momentum, with a checksum.
 * All numbers are little-endian whatever the host, so a checkpoint moves between
 * machines.
 */
#ifndef TRAINER_CHECKPOINT_H
#define TRAINER_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

struct ckpt_state {
    int nsizes;           /* layer widths, input to classes */
    const int *sizes;
    uint64_t seed;
    uint64_t batch;
    uint64_t step;        /* optimiser steps done */
    size_t nparams;
    float *params;        /* nparams each */
    float *momentum;
};

/* Writes st to path through path.tmp and a rename, so a crash never leaves a torn
 * checkpoint.  Returns 0, or -1 with a message in err. */
int ckpt_write(const char *path, const struct ckpt_state *st, char *err, size_t errlen);

/* Reads path into st->step, st->params and st->momentum after checking the magic,
 * the version, the checksum, and that shape, seed and batch match st's.  Returns 0,
 * or -1 with a message naming the file in err. */
int ckpt_read(const char *path, struct ckpt_state *st, char *err, size_t errlen);

/* Writes n floats as raw little-endian float32 (--dump-params). */
int ckpt_dump_floats(const char *path, const float *v, size_t n, char *err, size_t errlen);

/* FNV-1a 64 of n bytes, continuing from h (start with CKPT_FNV_START). */
#define CKPT_FNV_START 0xcbf29ce484222325u
uint64_t ckpt_fnv1a(uint64_t h, const void *p, size_t n);

#endif
