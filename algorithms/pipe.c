/* The pipelined exchange as a schedule of two lanes (see pipe.h for the
 * dependency rules): the lags become each lane's lag behind the other lane's
 * count of pieces done (coll_lane.after), and the engine does the rest. */
#include "pipe.h"

#include <string.h>

#include "engine.h"

#define PIPE_SEND_WINDOW 32

enum { PIPE_RECV, PIPE_SEND };

struct pipe_run {
    struct coll_pipe *p;
    struct coll_lane lane[2];
};

static void pipe_buf(void *ctx, const struct coll_lane *l, size_t i, void **buf, size_t *bytes)
{
    const struct coll_pipe *p = ((const struct pipe_run *)ctx)->p;
    if (l->tag == PIPE_SEND) {
        const void *b;
        p->send_buf(p->ctx, i, &b, bytes);
        *buf = (void *)b; /* only read: the lane sends from it */
    } else {
        p->recv_buf(p->ctx, i, buf, bytes);
    }
}

static collResult_t pipe_done(void *ctx, struct coll_lane *l, size_t i, void *buf)
{
    const struct pipe_run *x = ctx;
    const struct coll_pipe *p = x->p;
    /* A lent piece was already reduced by consume(). */
    if (l->tag == PIPE_RECV && p->process && !(l->lending && p->consume))
        p->process(p->ctx, i, buf);
    return collSuccess;
}

static void pipe_consume(void *ctx, const struct coll_lane *l, size_t i, size_t off,
                         const void *src, size_t len)
{
    const struct coll_pipe *p = ((const struct pipe_run *)ctx)->p;
    p->consume(p->ctx, i, off, src, len);
}

static const struct coll_sched_ops pipe_ops = {.buf = pipe_buf, .done = pipe_done};
/* Lent bytes reduced where they lie instead of copied first. */
static const struct coll_sched_ops pipe_ops_consume = {
    .buf = pipe_buf, .done = pipe_done, .consume = pipe_consume,
};

collResult_t coll_pipe_run(struct coll_pipe *p)
{
    struct pipe_run x = {.p = p};
    size_t window = p->window < 1 ? 1 : p->window;
    if (window > COLL_PIPE_MAX_WINDOW)
        window = COLL_PIPE_MAX_WINDOW;
    /* The receive lane first: its pieces are tested before the sends'. */
    x.lane[PIPE_RECV] = (struct coll_lane){
        .conn = p->recv_conn, .is_send = false, .total = p->recv_conn ? p->total : 0,
        .window = window, .tag = PIPE_RECV, .lend = true, .reg = p->recv_reg,
        .reg_bytes = p->recv_reg_bytes};
    x.lane[PIPE_SEND] = (struct coll_lane){
        .conn = p->send_conn, .is_send = true, .total = p->send_conn ? p->total : 0,
        .window = PIPE_SEND_WINDOW, .tag = PIPE_SEND, .reg = p->send_reg,
        .reg_bytes = p->send_reg_bytes};
    /* The lags (pipe.h): a piece is sent once received (processed) far enough
     * ahead, and received once sent far enough ahead. */
    if (p->send_after_recv) {
        x.lane[PIPE_SEND].after = &x.lane[PIPE_RECV].done;
        x.lane[PIPE_SEND].lag = p->send_lag;
    }
    if (p->recv_lag > 0) {
        x.lane[PIPE_RECV].after = &x.lane[PIPE_SEND].done;
        x.lane[PIPE_RECV].lag = p->recv_lag;
    }
    struct coll_sched s = {.comm = p->comm, .ops = p->consume ? &pipe_ops_consume : &pipe_ops, .ctx = &x, .lanes = x.lane,
                           .nlanes = 2, .piece_bytes = p->piece_bytes, .last = p->last};
    return coll_engine_run(&s);
}
