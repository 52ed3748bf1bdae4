/*
 * A multi-layer perceptron in plain C: input -> hidden layers (ReLU) -> softmax
 * cross-entropy, or one rank's part of it under model parallelism.
 *
 * A struct mlp is a run of consecutive layers (the whole model, or one pipeline
 * stage) as this rank holds them: a layer may be whole, or this rank's block of
 * columns or of rows of a layer split over a tensor group (partition.h).  Every
 * parameter lives in one float array, layer after layer (W, b, W, b, ...), and the
 * gradients in another of the same layout, so that a contiguous range of layers is
 * a contiguous range of the array: what the trainer hands to the collectives.
 *
 * W of a layer is nin x nout, row-major (one row per input), so that the forward
 * product streams through W row by row.
 *
 * Activations are kept per "slot": a pipeline holds several micro-batches between
 * their forward and their backward pass; the whole-model trainer uses slot 0.
 */
#ifndef TRAINER_MLP_H
#define TRAINER_MLP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* How a layer is held (Megatron's column- and row-parallel linear layers). */
enum mlp_split {
    MLP_WHOLE, /* all of W and b */
    MLP_COLS,  /* a block of W's columns and the matching part of b: the output is
                * this rank's block of units; backward sums the input gradient over
                * the tensor group */
    MLP_ROWS,  /* a block of W's rows (its input is a block of units) and all of b:
                * forward sums the partial products over the tensor group, then adds
                * b */
};

struct mlp_layer {
    int nin, nout;        /* the widths this rank computes: input, output */
    enum mlp_split split;
    bool relu;            /* every layer but the model's last */
    size_t w, b;          /* offsets of W (nin x nout) and of b (nout) in params */
};

/* Sums count floats of buf in place over the tensor group (MLP_COLS, MLP_ROWS). */
typedef void (*mlp_reduce_fn)(float *buf, size_t count, void *ctx);

struct mlp {
    int nlayers;
    struct mlp_layer *layer;
    size_t nparams;
    size_t maxrows;    /* the most rows one pass takes */
    int nslots;
    bool want_dx;      /* backward computes the gradient of the input (a later stage) */
    const float **in;  /* in[s]: the rows given to the forward pass of slot s */
    float ***act;      /* act[s][i]: layer i's output for slot s */
    float *dtop;       /* gradient of the loss with respect to the last layer's output */
    float *dbuf[2];    /* gradients of the activations, alternating between layers */
    const float *dx;   /* after mlp_backward with want_dx: the input's gradient */
    mlp_reduce_fn reduce;
    void *reduce_ctx;
};

/* The layers of a whole model of nlayers weight layers and nlayers + 1 widths
 * (input, hidden..., classes), every one MLP_WHOLE, laid out one after the other;
 * layer[] has room for nlayers.  Returns the number of parameters. */
size_t mlp_whole_layers(int nlayers, const int *sizes, struct mlp_layer *layer);

/* Sets up nlayers layers (copied) with buffers for nslots slots of up to maxrows
 * rows.  Returns 0, or -1 when out of memory. */
int mlp_init(struct mlp *m, int nlayers, const struct mlp_layer *layer, size_t maxrows,
             int nslots);
void mlp_free(struct mlp *m);

/* He (Kaiming) uniform weights from the generator state, zero biases, layer by
 * layer (for a whole model: the layout every grid gathers into). */
void mlp_init_params(const struct mlp_layer *layer, int nlayers, uint64_t *rng, float *params);

/* Forward pass of slot s over rows rows x (rows x layer[0].nin); x must stay
 * valid until the slot's backward pass.  Leaves the output in mlp_output. */
void mlp_forward(struct mlp *m, int s, const float *params, const float *x, size_t rows);
const float *mlp_output(const struct mlp *m, int s);

/* Softmax cross-entropy of slot s's logits against y: returns the loss summed over
 * the rows and adds the number of correct argmax predictions to *correct.  With
 * want_grad, also writes the gradient of the summed loss with respect to the
 * logits into dtop for mlp_backward. */
double mlp_loss(struct mlp *m, int s, const int *y, size_t rows, int want_grad, long *correct);

/* Called by mlp_backward when layer i's gradient (W and b) is complete in grads,
 * layers from last to first. */
typedef void (*mlp_layer_done_fn)(int i, void *ctx);

/* Backward pass of slot s, from the output gradient in dtop: grads gets the
 * gradient of the loss summed over the rows, written over each layer's range, or
 * added to it with accumulate (micro-batches of one step). */
void mlp_backward(struct mlp *m, int s, const float *params, size_t rows, float *grads,
                  bool accumulate, mlp_layer_done_fn done, void *ctx);

#endif
