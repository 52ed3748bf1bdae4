/*
 * A multi-layer perceptron in plain C: input -> hidden layers (ReLU) -> softmax
 * cross-entropy.  Every parameter lives in one float array, layer after layer
 * (W1, b1, W2, b2, ...), and the gradients in another of the same layout, so that a
 * contiguous range of layers is a contiguous range of the array: what the trainer
 * hands to the collectives.
 *
 * W of layer l is sizes[l] x sizes[l + 1], row-major (one row per input), so that
 * the forward product streams through W row by row.
 */
#ifndef TRAINER_MLP_H
#define TRAINER_MLP_H

#include <stddef.h>
#include <stdint.h>

struct mlp {
    int nlayers;     /* weight layers: hidden layers + 1 */
    int *sizes;      /* nlayers + 1 widths: input, hidden..., classes */
    size_t *off;     /* nlayers + 1 offsets into params: layer l is [off[l], off[l + 1]) */
    size_t nparams;
    size_t maxrows;  /* the most rows one forward/backward pass takes */
    const float *in; /* the rows of the last forward pass (the caller's) */
    float **act;     /* act[l], l >= 1: layer l's output; act[0] is unused (see in) */
    float *dbuf[2];  /* gradients of the activations, alternating between layers */
};

/* Sets up the model's shape (nlayers + 1 sizes) and buffers for up to maxrows rows.
 * Returns 0, or -1 when out of memory. */
int mlp_init(struct mlp *m, int nlayers, const int *sizes, size_t maxrows);
void mlp_free(struct mlp *m);

/* Start of W and of b of layer l in a params (or grads) array. */
size_t mlp_weight_offset(const struct mlp *m, int l);
size_t mlp_bias_offset(const struct mlp *m, int l);

/* He (Kaiming) uniform weights from the generator state, zero biases. */
void mlp_init_params(const struct mlp *m, uint64_t *rng, float *params);

/* Forward pass over rows examples x (rows x sizes[0]); leaves the logits in
 * act[nlayers]. */
void mlp_forward(struct mlp *m, const float *params, const float *x, size_t rows);

/* Softmax cross-entropy of the logits in act[nlayers] against y: returns the loss
 * summed over the rows and adds the number of correct argmax predictions to
 * *correct.  With want_grad, also keeps the gradient of the summed loss with respect
 * to the logits for mlp_backward. */
double mlp_loss(struct mlp *m, const int *y, size_t rows, int want_grad, long *correct);

/* Called by mlp_backward when layer l's gradient (W and b) is complete in grads,
 * layers from last to first. */
typedef void (*mlp_layer_done_fn)(int l, void *ctx);

/* Backward pass after mlp_forward: grads gets the gradient of the loss summed over
 * the rows (every layer's range is overwritten, not accumulated). */
void mlp_backward(struct mlp *m, const float *params, size_t rows, float *grads,
                  mlp_layer_done_fn done, void *ctx);

#endif
