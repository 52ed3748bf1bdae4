/* The pipelined exchange as a schedule of two lanes (see pipe.h for the
 * dependency rules): the lags become each lane's lag behind the other lane's
 * count of pieces done (coll_lane.after), and the engine does the rest.
 * Several pipes on distinct connections run as one schedule of their lanes. */
#include "pipe.h"

#include <string.h>

#include "engine.h"

#define PIPE_SEND_WINDOW 32

enum { PIPE_RECV, PIPE_SEND };

/* Pipes run together (struct coll_pipes_stage, the schedule's ctx): lanes 2k
 * (receive) and 2k + 1 (send) are pipe k's. */
static const struct coll_pipe *pipe_of(const void *ctx, const struct coll_lane *l)
{
    const struct coll_pipes_stage *st = ctx;
    return &st->p[l->tag / 2];
}

static void pipe_buf(void *ctx, const struct coll_lane *l, size_t i, void **buf, size_t *bytes)
{
    const struct coll_pipe *p = pipe_of(ctx, l);
    if (l->tag % 2 == PIPE_SEND) {
        const void *b;
        p->send_buf(p->ctx, i, &b, bytes);
        *buf = (void *)b; /* only read: the lane sends from it */
    } else {
        p->recv_buf(p->ctx, i, buf, bytes);
    }
}

static collResult_t pipe_done(void *ctx, struct coll_lane *l, size_t i, void *buf)
{
    const struct coll_pipe *p = pipe_of(ctx, l);
    /* A lent piece was already reduced by consume(). */
    if (l->tag % 2 == PIPE_RECV && p->process && !(l->lending && p->consume))
        p->process(p->ctx, i, buf);
    return collSuccess;
}

static void pipe_consume(void *ctx, const struct coll_lane *l, size_t i, size_t off,
                         const void *src, size_t len)
{
    const struct coll_pipe *p = pipe_of(ctx, l);
    if (p->consume != NULL) {
        p->consume(p->ctx, i, off, src, len);
        return;
    }
    /* A pipe without consume beside one with it: the copy a receive makes;
     * pipe_done processes the piece once it is whole. */
    void *buf;
    size_t bytes;
    p->recv_buf(p->ctx, i, &buf, &bytes);
    memcpy((char *)buf + off, src, len);
}

static const struct coll_sched_ops pipe_ops = {.buf = pipe_buf, .done = pipe_done};
/* Lent bytes reduced where they lie instead of copied first. */
static const struct coll_sched_ops pipe_ops_consume = {
    .buf = pipe_buf, .done = pipe_done, .consume = pipe_consume,
};

void coll_pipes_stage(const struct coll_pipe *ps, int n, struct coll_pipes_stage *st,
                      struct coll_sched *s)
{
    struct coll_lane *lanes = st->lanes;
    bool consume = false, last = false, defer = true;
    size_t piece = 0, cut_bytes = 0, cut_pieces = 0;
    for (int k = 0; k < n; k++) {
        const struct coll_pipe *p = &st->p[k];
        st->p[k] = ps[k];
        size_t window = p->window < 1 ? 1 : p->window;
        if (window > COLL_PIPE_MAX_WINDOW)
            window = COLL_PIPE_MAX_WINDOW;
        struct coll_lane *rl = &lanes[2 * k + PIPE_RECV], *sl = &lanes[2 * k + PIPE_SEND];
        /* The receive lane first: its pieces are tested before the sends'. */
        bool recv = p->recv_conn != NULL || p->recv_accept;
        *rl = (struct coll_lane){
            .conn = p->recv_conn, .is_send = false, .total = recv ? p->total : 0,
            .window = window, .tag = 2 * k + PIPE_RECV, .lend = true, .reg = p->recv_reg,
            .reg_bytes = p->recv_reg_bytes, .accept = p->recv_conn == NULL && recv,
            .peer = p->recv_peer};
        *sl = (struct coll_lane){
            .conn = p->send_conn, .is_send = true, .total = p->send_conn ? p->total : 0,
            .window = PIPE_SEND_WINDOW, .tag = 2 * k + PIPE_SEND, .reg = p->send_reg,
            .reg_bytes = p->send_reg_bytes};
        /* The lags (pipe.h): a piece is sent once received (processed) far
         * enough ahead, and received once sent far enough ahead. */
        if (p->send_after_recv) {
            sl->after = &rl->done;
            sl->lag = p->send_lag;
        }
        if (p->recv_lag > 0 || p->recv_after_send) {
            rl->after = &sl->done;
            rl->lag = p->recv_lag;
        }
        consume = consume || p->consume != NULL;
        last = last || p->last;
        defer = defer && p->defer;
        cut_pieces += p->cut_pieces;
        cut_bytes = p->cut_bytes > cut_bytes ? p->cut_bytes : cut_bytes;
        piece = p->piece_bytes > piece ? p->piece_bytes : piece;
    }
    *s = (struct coll_sched){.comm = ps[0].comm, .ops = consume ? &pipe_ops_consume : &pipe_ops,
                             .ctx = st, .lanes = lanes, .nlanes = 2 * n, .piece_bytes = piece,
                             .last = last, .defer = defer, .cut_bytes = cut_bytes,
                             .cut_pieces = cut_pieces};
}

collResult_t coll_pipe_link(struct coll_comm *comm, struct coll_pipe *p, int send_to,
                            int recv_from)
{
    if (send_to >= 0)
        COLL_CHECK(coll_transport_get_conn(comm, send_to, true, &p->send_conn));
    if (recv_from >= 0) {
        struct coll_lane l = {.is_send = false};
        COLL_CHECK(coll_lane_link(comm, &l, recv_from));
        p->recv_conn = l.conn;
        p->recv_accept = l.accept;
        p->recv_peer = recv_from;
    }
    return collSuccess;
}
