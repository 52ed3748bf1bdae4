/*
 * How the model is cut over a grid of T x P ranks (docs/parallelism.md):
 *
 *   tensor   hidden layers in pairs, Megatron style: the first of a pair is split
 *            by output columns (MLP_COLS), the second by input rows (MLP_ROWS); an
 *            odd last hidden layer and the softmax head stay whole on every rank.
 *   pipeline the layers, in order, into P stages of one or more layers each, so
 *            that the most work any stage has (its multiply-adds per example, after
 *            the tensor split) is as small as it can be.
 *
 * The whole model's layout (mlp_whole_layers) is what checkpoints, --dump-params
 * and the initial draw use on every grid; part_copy moves a rank's share between it
 * and that layout.  Pure arithmetic, no communication.
 */
#ifndef TRAINER_PARTITION_H
#define TRAINER_PARTITION_H

#include <stdbool.h>
#include <stddef.h>

#include "mlp.h"

#define PART_MAX_LAYERS 17 /* TRAINER_MAX_HIDDEN + 1 */
#define PART_MAX_STAGES PART_MAX_LAYERS

struct partition {
    int nlayers;                             /* weight layers of the whole model */
    int sizes[PART_MAX_LAYERS + 1];          /* widths: input, hidden..., classes */
    int T, P;
    enum mlp_split split[PART_MAX_LAYERS];   /* of each layer, the same on every rank */
    int stage_first[PART_MAX_STAGES + 1];    /* stage p holds [stage_first[p], [p + 1]) */
    struct mlp_layer whole[PART_MAX_LAYERS]; /* the whole model's layout */
    size_t whole_nparams;
};

/* Plans the cut of the model with nlayers + 1 widths over T x P.  Returns 0, or -1
 * with a message naming the flag (--tp, --pp, --hidden) in err. */
int part_plan(struct partition *pt, int nlayers, const int *sizes, int T, int P, char *err,
              size_t errlen);

/* The layers each tensor rank of stage p holds (the blocks of all of them have one
 * shape), laid out one after the other, into layer[] (room for PART_MAX_LAYERS);
 * returns how many, and the parameter count in *nparams_p. */
int part_layers(const struct partition *pt, int p, struct mlp_layer *layer, size_t *nparams_p);

/* The parameter count of one tensor rank's block of stage p. */
size_t part_nparams(const struct partition *pt, int p);

/* Copies tensor rank t of stage p's parameters from the whole layout into local
 * (to_local) or back from local into whole. */
void part_copy(const struct partition *pt, int t, int p, float *whole, float *local,
               bool to_local);

#endif
