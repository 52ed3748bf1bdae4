/*
 * A small deterministic generator (splitmix64) for the trainer: the data set, the
 * epoch order and the initial weights depend only on the seeds given, on every
 * machine and compiler.
 */
#ifndef TRAINER_RNG_H
#define TRAINER_RNG_H

#include <math.h>
#include <stdint.h>

static inline uint64_t rng_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1), 53 bits. */
static inline double rng_uniform(uint64_t *state)
{
    return (double)(rng_next(state) >> 11) * (1.0 / 9007199254740992.0);
}

/* Standard normal (Box-Muller, one value per call). */
static inline double rng_normal(uint64_t *state)
{
    double u1 = 1.0 - rng_uniform(state); /* (0, 1]: the log stays finite */
    double u2 = rng_uniform(state);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
