/*
 * The pipeline schedules and the stage's step.
 *
 * gpipe, P = 3, M = 4 (F: forward of a micro-batch, B: its backward; time ->):
 *
 *   stage 0  F0 F1 F2 F3 .  .  .  .  B0 B1 B2 B3
 *   stage 1  .  F0 F1 F2 F3 .  .  B0 B1 B2 B3 .
 *   stage 2  .  .  F0 F1 F2 F3 B0 B1 B2 B3 .  .
 *
 * 1f1b (PipeDream's flush schedule, as Megatron runs it), the same grid:
 *
 *   stage 0  F0 F1 F2 .  B0 F3 B1 .  B2 .  B3
 *   stage 1  .  F0 F1 B0 F2 B1 F3 B2 .  B3 .
 *   stage 2  .  .  F0 B0 F1 B1 F2 B2 F3 B3 .
 *
 * Both keep every stage idle for the same (P - 1) passes of fill and drain, so the
 * idle share is (P - 1) / (M + P - 1) with equal stages; 1f1b holds at most P - p
 * micro-batches where gpipe holds M.  Backwards run in micro-batch order in both,
 * so the live micro-batches are always consecutive and micro-batch mb lives in
 * slot mb % slots.
 */
#include "pipeline.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void pipe_schedule_ops(enum pipe_schedule s, int P, int p, int M, struct pipe_op *ops)
{
    int n = 0, f = 0, b = 0;
    if (s == PIPE_GPIPE) {
        for (int i = 0; i < M; i++)
            ops[n++] = (struct pipe_op){true, i};
        for (int i = 0; i < M; i++)
            ops[n++] = (struct pipe_op){false, i};
        return;
    }
    int warmup = P - 1 - p < M ? P - 1 - p : M;
    while (f < warmup)
        ops[n++] = (struct pipe_op){true, f++};
    while (f < M) {
        ops[n++] = (struct pipe_op){true, f++};
        ops[n++] = (struct pipe_op){false, b++};
    }
    while (b < M)
        ops[n++] = (struct pipe_op){false, b++};
}

int pipe_slots(enum pipe_schedule s, int P, int p, int M)
{
    if (s == PIPE_GPIPE)
        return M;
    return P - p < M ? P - p : M;
}

int pipe_init(struct pipe_stage *ps, collComm_t comm, int P, int p, int M,
              enum pipe_schedule s, struct mlp *m)
{
    memset(ps, 0, sizeof(*ps));
    ps->comm = comm;
    ps->P = P;
    ps->p = p;
    ps->M = M;
    ps->schedule = s;
    ps->m = m;
    ps->in_width = (size_t)m->layer[0].nin;
    ps->out_width = (size_t)m->layer[m->nlayers - 1].nout;
    ps->ops = calloc(2 * (size_t)M, sizeof(*ps->ops));
    ps->row0 = calloc((size_t)M + 1, sizeof(size_t));
    ps->inbuf = calloc((size_t)m->nslots, sizeof(float *));
    if (ps->ops == NULL || ps->row0 == NULL || ps->inbuf == NULL)
        goto fail;
    if (p > 0)
        for (int i = 0; i < m->nslots; i++)
            if ((ps->inbuf[i] = malloc(m->maxrows * ps->in_width * sizeof(float))) == NULL)
                goto fail;
    pipe_schedule_ops(s, P, p, M, ps->ops);
    return 0;
fail:
    pipe_free(ps);
    return -1;
}

void pipe_free(struct pipe_stage *ps)
{
    if (ps->inbuf != NULL && ps->m != NULL)
        for (int i = 0; i < ps->m->nslots; i++)
            free(ps->inbuf[i]);
    free(ps->inbuf);
    free(ps->ops);
    free(ps->row0);
    memset(ps, 0, sizeof(*ps));
}

/* A message to or from a neighbouring stage. */
struct pipe_msg {
    float *buf;
    size_t count;
    int peer; /* -1: none */
};

/* The send left over from the last pass and the receive the next one needs, in
 * one group; the time it takes is the stage's idle time. */
static void exchange(struct pipe_stage *ps, struct pipe_msg *send, const struct pipe_msg *recv,
                     const struct pipe_hooks *h)
{
    if (send->peer < 0 && recv->peer < 0)
        return;
    double t0 = now_s();
    collResult_t r = collGroupStart();
    if (r == collSuccess && send->peer >= 0)
        r = collSend(send->buf, send->count, collFloat, send->peer, ps->comm, NULL);
    if (r == collSuccess && recv->peer >= 0)
        r = collRecv(recv->buf, recv->count, collFloat, recv->peer, ps->comm, NULL);
    collResult_t e = collGroupEnd();
    if (r == collSuccess)
        r = e;
    if (r != collSuccess)
        h->fail(h->ctx, r, "the pipeline's collSend/collRecv group");
    ps->idle_s += now_s() - t0;
    if (send->peer >= 0)
        ps->sent += send->count * sizeof(float);
    send->peer = -1;
}

double pipe_step(struct pipe_stage *ps, const float *params, float *grads, size_t rows,
                 const struct pipe_hooks *h)
{
    struct mlp *m = ps->m;
    int P = ps->P, p = ps->p, M = ps->M, live = 0, backs = 0;
    for (int i = 0; i <= M; i++)
        ps->row0[i] = (size_t)i * rows / (size_t)M;
    struct pipe_msg pending = {NULL, 0, -1};
    double loss = 0.0;
    for (int k = 0; k < 2 * M; k++) {
        struct pipe_op op = ps->ops[k];
        int s = op.mb % m->nslots;
        size_t r = ps->row0[op.mb + 1] - ps->row0[op.mb];
        struct pipe_msg recv = {NULL, 0, -1};
        if (op.forward && p > 0)
            recv = (struct pipe_msg){ps->inbuf[s], r * ps->in_width, p - 1};
        else if (!op.forward && p < P - 1)
            recv = (struct pipe_msg){m->dtop, r * ps->out_width, p + 1};
        exchange(ps, &pending, &recv, h);
        if (op.forward) {
            if (live == m->nslots)
                h->fail(h->ctx, collInternalError, "pipeline schedule (no free slot)");
            if (++live > ps->peak_slots)
                ps->peak_slots = live;
            const float *x = p == 0 ? h->input(h->ctx, op.mb) : ps->inbuf[s];
            mlp_forward(m, s, params, x, r);
            if (p < P - 1)
                pending = (struct pipe_msg){(float *)mlp_output(m, s), r * ps->out_width, p + 1};
        } else {
            if (p == P - 1)
                loss += h->loss(h->ctx, op.mb, s);
            mlp_backward(m, s, params, r, grads, backs > 0, backs == M - 1 ? h->done : NULL,
                         h->ctx);
            backs++;
            live--;
            if (p > 0)
                pending = (struct pipe_msg){(float *)m->dx, r * ps->in_width, p - 1};
        }
    }
    struct pipe_msg none = {NULL, 0, -1};
    exchange(ps, &pending, &none, h);
    return loss;
}

const float *pipe_forward_only(struct pipe_stage *ps, const float *params, const float *x,
                               size_t rows, const struct pipe_hooks *h)
{
    struct mlp *m = ps->m;
    collResult_t r;
    if (ps->p > 0) {
        r = collRecv(ps->inbuf[0], rows * ps->in_width, collFloat, ps->p - 1, ps->comm, NULL);
        if (r != collSuccess)
            h->fail(h->ctx, r, "collRecv(evaluation)");
        x = ps->inbuf[0];
    }
    mlp_forward(m, 0, params, x, rows);
    if (ps->p == ps->P - 1)
        return mlp_output(m, 0);
    r = collSend(mlp_output(m, 0), rows * ps->out_width, collFloat, ps->p + 1, ps->comm, NULL);
    if (r != collSuccess)
        h->fail(h->ctx, r, "collSend(evaluation)");
    return NULL;
}
