/* A pipelined exchange with one upstream and one downstream neighbour: the engine
 * under the ring and chain algorithms.
 *
 * Work is a sequence of indices 0..total-1 (for a ring: step * slices + slice).
 * For each index the rank may send a piece downstream and receive a piece from
 * upstream, then process what arrived (reduce or nothing).  Dependencies are
 * expressed as lags between the three counters sends-done, receives-posted and
 * processed, so that many pieces are in flight while each is reduced as soon as
 * it lands:
 *   send i     waits for  processed > i - send_lag    (when send_after_recv)
 *   receive i  waits for  processed > i - window      (buffer reuse)
 *              and        sends-done > i - recv_lag   (when recv_lag > 0, or
 *                                                      recv_after_send: > i)
 * Receives are posted before sends in every pass.  Over a transport that lends
 * received bytes in place (shared memory), pieces are taken in order as they
 * arrive under the same rules, without posting receives.
 */
#ifndef COLL_PIPE_H
#define COLL_PIPE_H

#include <stdbool.h>
#include <stddef.h>

#include "engine.h"
#include "internal.h"

struct coll_pipe {
    struct coll_comm *comm;
    struct coll_conn *send_conn; /* NULL: this rank sends nothing */
    struct coll_conn *recv_conn; /* NULL: this rank receives nothing (unless recv_accept) */
    bool recv_accept;            /* the receive connection is not made yet: the stage
                                  * accepts it from rank recv_peer as it runs */
    int recv_peer;
    size_t total;
    bool send_after_recv;
    size_t send_lag;
    size_t recv_lag;
    bool recv_after_send;        /* receive i waits for send i itself (recv_lag 0) */
    size_t window;               /* receives in flight, <= COLL_PIPE_MAX_WINDOW */
    size_t piece_bytes;          /* largest piece, for the waiting policy */
    bool last;                   /* the call's last schedule (coll_sched.last) */
    void *ctx;
    void (*send_buf)(void *ctx, size_t i, const void **p, size_t *bytes);
    void (*recv_buf)(void *ctx, size_t i, void **p, size_t *bytes);
    void (*process)(void *ctx, size_t i, void *recvd); /* optional */
    /* Optional, for transports that lend the bytes where the peer put them
     * (recv_peek): takes `len` bytes of piece i at byte offset `off` from src and
     * does what receiving into recv_buf and then process would have done (reduce
     * from src straight into the output), saving a copy.  Without it such bytes
     * are copied into recv_buf's buffer and processed as usual. */
    void (*consume)(void *ctx, size_t i, size_t off, const void *src, size_t len);
    /* process and consume may run on the comm's step runner (engine.h), later
     * and in any order against each other: the pieces of a window reduce into
     * bytes apart.  A piece counts as processed once its work is done. */
    bool defer;
    /* How the call's buffer is cut (coll_sched.cut_*): the largest piece and
     * their number; 0 when this pipe does not say. */
    size_t cut_bytes, cut_pieces;
    /* Optional: the user buffers that pieces are sent from and received into
     * (send_reg_bytes / recv_reg_bytes bytes).  Pieces inside them go to the
     * transport with its handle for them (regcache.h), when it has one, so it
     * may move them in place (verbs RDMA).  A receive buffer with a handle
     * turns the lent receive off: every piece is received into recv_buf's
     * buffer, so set it only where pieces land in the output as they are
     * (gather and broadcast steps, not reductions). */
    const void *send_reg;
    size_t send_reg_bytes;
    void *recv_reg;
    size_t recv_reg_bytes;
};

#define COLL_PIPE_MAX_WINDOW 32

/* Pipes run at once, as one schedule: they must use distinct connections, and
 * each keeps its own lags.  last: any of them. */
#define COLL_PIPES_MAX 4

/* The schedule of pipes run at once, and what it needs while it runs. */
struct coll_pipes_stage {
    struct coll_pipe p[COLL_PIPES_MAX];
    struct coll_lane lanes[2 * COLL_PIPES_MAX];
};
/* Copies ps[0..n) (1 <= n <= COLL_PIPES_MAX) into st and sets *s to their
 * schedule, which lives as long as st does. */
/* Sets p's connections: to rank send_to (made now; -1: none) and from rank
 * recv_from (-1: none), which the stage accepts when it is not made yet. */
collResult_t coll_pipe_link(struct coll_comm *comm, struct coll_pipe *p, int send_to,
                            int recv_from);
void coll_pipes_stage(const struct coll_pipe *ps, int n, struct coll_pipes_stage *st,
                      struct coll_sched *s);

#endif
