/*
 * Pipeline parallelism: one step of a stage, micro-batch by micro-batch, in the
 * order of a schedule (docs/parallelism.md):
 *
 *   gpipe  every forward, then every backward;
 *          holds the activations of all M micro-batches.
 *   1f1b   P - 1 - p forwards to fill the pipe, then one forward and one backward
 *          in turn, then the backwards left; holds at most P - p micro-batches.
 *
 * Stage p receives a micro-batch's input from stage p - 1 before its forward and
 * sends its output to p + 1 after; the gradients go the other way around the
 * backward.  A send after one pass and the receive before the next are issued in
 * one collGroupStart/collGroupEnd, so neither waits for the other and no schedule
 * deadlocks (a stage sending forward while its neighbour sends back, as 1f1b does
 * in its steady state, is such a pair).
 */
#ifndef TRAINER_PIPELINE_H
#define TRAINER_PIPELINE_H

#include <stdbool.h>
#include <stddef.h>

#include <collective.h>

#include "mlp.h"

enum pipe_schedule { PIPE_GPIPE, PIPE_1F1B };

struct pipe_op {
    bool forward;
    int mb;
};

/* The 2M passes of stage p of P, in order, into ops. */
void pipe_schedule_ops(enum pipe_schedule s, int P, int p, int M, struct pipe_op *ops);
/* The most micro-batches stage p holds at once under s. */
int pipe_slots(enum pipe_schedule s, int P, int p, int M);

/* What the stage asks of the trainer during a step. */
struct pipe_hooks {
    void *ctx;
    /* stage 0: micro-batch mb's rows */
    const float *(*input)(void *ctx, int mb);
    /* the last stage: the summed loss of micro-batch mb (its logits in slot s),
     * leaving the gradient in m->dtop */
    double (*loss)(void *ctx, int mb, int s);
    /* a failed library call (does not return) */
    void (*fail)(void *ctx, collResult_t r, const char *what);
    /* given to mlp_backward for the step's last backward pass: each layer's
     * gradient is then complete (the data-parallel buckets start there) */
    mlp_layer_done_fn done;
};

struct pipe_stage {
    collComm_t comm;         /* the pipeline group (rank p is stage p); NULL when P = 1 */
    int P, p, M;
    enum pipe_schedule schedule;
    struct mlp *m;           /* m->nslots = pipe_slots() */
    size_t in_width;         /* floats per row received from p - 1 */
    size_t out_width;        /* floats per row sent to p + 1 */
    float **inbuf;           /* per slot: the input received (p > 0) */
    struct pipe_op *ops;
    /* the micro-batches' rows: [row0[mb], row0[mb + 1]) of the step's rows */
    size_t *row0;
    /* measured */
    double idle_s;           /* in collGroupEnd waiting for the neighbours */
    int peak_slots;          /* the most micro-batches held at once */
    unsigned long long sent; /* payload bytes sent to the neighbours */
};

/* Sets up the stage (buffers for m->nslots slots of m->maxrows rows).  Returns 0,
 * or -1 when out of memory. */
int pipe_init(struct pipe_stage *ps, collComm_t comm, int P, int p, int M,
              enum pipe_schedule s, struct mlp *m);
void pipe_free(struct pipe_stage *ps);

/* One step over rows rows cut into M micro-batches: forwards and backwards in
 * schedule order, grads accumulated over the micro-batches.  Returns the summed
 * loss (the last stage; 0 elsewhere). */
double pipe_step(struct pipe_stage *ps, const float *params, float *grads, size_t rows,
                 const struct pipe_hooks *h);

/* Forward only, one chunk of rows through the stages (evaluation): stage 0 gives
 * x, the others receive; the last stage's output is left in slot 0 and returned
 * there, NULL on the other stages. */
const float *pipe_forward_only(struct pipe_stage *ps, const float *params, const float *x,
                               size_t rows, const struct pipe_hooks *h);

#endif
