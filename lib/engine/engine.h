/* The engine: runs programs.
 *
 * A call is a program (struct coll_prog): a sequence of stages, each a
 * schedule, that the algorithm builds and hands over; between stages its
 * next() does the local work (a round's reduction) and sets the next stage.
 * The algorithm never loops over the engine: coll_prog_run runs a program
 * alone, and the set of calls in flight (inflight.h) runs several of a
 * communicator at once in the same loop.
 *
 * A schedule is a set of lanes, each one direction of one connection (or a
 * lane of deferred steps with no connection), carrying pieces 0..total-1 in
 * order.  The algorithm says when piece i of a lane may start: a lag behind a
 * count (another lane's pieces done, as pipe.h's lags are, or one of its own;
 * coll_lane.after), checked by the engine, and anything else by the ready
 * callback.  Callbacks say where its bytes are (buf) and what to do once it is
 * done (done: reduce, count); work that belongs to no lane (a reduction
 * waiting on several children) is `progress`.
 * The engine owns everything else, in one loop for every schedule:
 *
 *   pass:  receives posted (or taken where the transport lends them)
 *          sends posted            -- up to each lane's window, while its lag
 *                                     behind another lane and ready() allow
 *          lanes tested, oldest piece first; done() in order
 *          progress()
 *   idle:  when a whole pass moved nothing, coll_exec_idle: spin, yield, then
 *          block on the communicator's persistent poll set (epoll, no cap on
 *          descriptors) under the deadline, abort and failure notices
 *
 * A watch lane has no connection either: its pieces are flags in memory
 * other ranks write (ll), each done once ready() sees it; a wait on one spins
 * and yields rather than blocks (no descriptor tells of a store), and looks at
 * the failure notices itself.
 *
 * A deferred step (a lane with no connection) is started by the algorithm's
 * `start` callback and finished later, from any thread, by coll_step_complete:
 * a device copy or a kernel becomes a step without a descriptor of its own.  A
 * blocked wait wakes on the communicator's wake-up descriptor, which
 * coll_step_complete and collCommAbort write.
 */
#ifndef COLL_ENGINE_H
#define COLL_ENGINE_H

#include <poll.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "internal.h"

#define COLL_LANE_MAX_WINDOW 64 /* pieces in flight per lane */

struct coll_lane;
struct coll_sched;

/* A step that completes later: a deferred step, started by the algorithm, or
 * the work on a received piece (its done(), or its consume() of lent bytes)
 * handed to the comm's runner; either ends with coll_step_complete. */
struct coll_step {
    struct coll_comm *comm;
    atomic_int state;       /* running, done, released (engine.c) */
    collResult_t res;       /* set before state */
    /* A received piece's work (coll_step_run): piece `piece` of lane, its bytes
     * at buf, or, lent, len bytes at src for offset off of the piece. */
    struct coll_sched *sched;
    struct coll_lane *lane;
    size_t piece, off, len;
    void *buf;
    const void *src;
};

/* Marks s done with res (collSuccess or the failure, described beforehand with
 * coll_set_error on s->comm; for a received piece's work the engine describes
 * it, naming the peer) and wakes the engine.  Safe from any thread; the engine
 * does not return (nor reuse s) until this call is past its last touch of s and
 * the comm. */
void coll_step_complete(struct coll_step *s, collResult_t res);

/* Who runs the work on received pieces where a schedule lets it finish later
 * (coll_sched.defer): a thread, a device queue.  comm->step_runner; NULL: the
 * engine runs it at once, in its loop.  Its steps may finish in any order: the
 * engine retires a lane's pieces in order, and holds a piece's buffer (or the
 * lent bytes) until its step is done. */
struct coll_step_runner {
    /* Takes s over: calls coll_step_run(s) later, from any thread, or ends it
     * with coll_step_complete(s, failure) without running it. */
    void (*submit)(void *arg, struct coll_step *s);
    void *arg;
};

/* Runs the work of a received piece handed over to a runner, then completes
 * its step (any thread). */
void coll_step_run(struct coll_step *s);

struct coll_lane {
    /* Set by the algorithm. */
    struct coll_conn *conn;  /* NULL: a deferred or watch lane, or one that accepts it */
    bool deferred;           /* a lane of deferred steps (ops->start), no connection */
    struct coll_comm *comm;  /* NULL: the schedule's (a group spans communicators) */
    bool is_send;
    size_t total;            /* pieces */
    size_t window;           /* pieces in flight; 0 or > max: COLL_LANE_MAX_WINDOW (the
                              * engine writes the one it uses here) */
    int tag;                 /* the algorithm's, to tell its lanes apart */
    /* Receives only: take pieces where the transport lends them (recv_peek), in
     * order under ready(), without posting receives or a window. */
    bool lend;
    /* A lane of watched memory (no connection, nothing posted): piece i is done
     * once ops->ready(ctx, l, i) holds, a flag another rank writes in memory
     * both map (ll's lines).  watch_peer: that rank, named when the wait fails;
     * the algorithm may change it as the pieces go from rank to rank. */
    bool watch;
    int watch_peer;
    /* Optional: the user buffer pieces of this lane lie in (reg_bytes bytes);
     * pieces inside it go to the transport with its handle for it (regcache.h),
     * so it may move them in place.  A receive lane with a handle does not lend. */
    const void *reg;
    size_t reg_bytes;
    /* Optional: piece i starts only once the count *after is above i - lag
     * (pieces below lag at once), checked by the engine itself before
     * ops->ready: pipe.h's lags, with after another lane's `done`, or a count
     * of the algorithm's (slices reduced, slots free). */
    const size_t *after;
    size_t lag;
    /* A receive lane whose connection is not made yet (conn NULL): with
     * `accept`, the engine accepts it from rank `peer` while the rest of the
     * schedule moves, so that a program waits for no peer outside the loop. */
    bool accept;
    int peer;

    /* The engine's. */
    size_t posted, done;     /* pieces posted (started) and done */
    size_t lent_off;         /* bytes of piece `done` taken so far (lending) */
    void *take_buf;          /* lending: piece `done`'s buf(), once asked */
    size_t take_bytes;
    bool take_known;
    void *mh;
    bool lending;
    size_t mask;             /* piece i's slot: i & mask (a power of two >= window) */
    struct coll_lane_slot {  /* per piece in flight: where it is and its request */
        void *buf;
        struct coll_req *req;
    } *slot;
    struct coll_step *steps; /* deferred lanes, and lanes whose work is: mask + 1 */
    bool granted;            /* no earlier call in flight holds conn (inflight.h) */
    struct coll_req standin; /* what a wait on a lending lane watches */
    bool defer;              /* received pieces' work goes to the comm's runner */
    size_t running;          /* such steps handed over and not yet retired */
};

struct coll_sched_ops {
    /* Whether piece i of l may start now (a watch lane's: whether it is there).
     * NULL: at once. */
    bool (*ready)(void *ctx, const struct coll_lane *l, size_t i);
    /* Where piece i of l is sent from or received into, and its size: the same
     * for as long as the piece is in flight (the engine may ask once). */
    void (*buf)(void *ctx, const struct coll_lane *l, size_t i, void **p, size_t *bytes);
    /* Optional: the transport's handle for piece i's buffer (regcache.h), when
     * pieces lie in buffers of their own (messages); else l->reg is used. */
    void *(*handle)(void *ctx, const struct coll_lane *l, size_t i, void *p, size_t bytes);
    /* Optional: piece i of l is done (receives: its bytes are in p).  A failure
     * (a header that does not match), described on the lane's comm, ends the
     * schedule with it. */
    collResult_t (*done)(void *ctx, struct coll_lane *l, size_t i, void *p);
    /* Optional, for lending lanes: takes len bytes of piece i at offset off from
     * where the transport lent them, instead of their copy into buf's buffer
     * (reduce straight from the peer's bytes).  done() follows as usual. */
    void (*consume)(void *ctx, const struct coll_lane *l, size_t i, size_t off,
                    const void *src, size_t len);
    /* Optional: starts deferred step i of l (a lane with no connection); it ends
     * with coll_step_complete(s, ...), now or later, from any thread. */
    void (*start)(void *ctx, struct coll_lane *l, size_t i, struct coll_step *s);
    /* Optional: work of no one lane; returns whether it moved anything. */
    bool (*progress)(void *ctx);
    /* Optional: whether the schedule is done once every lane is (the last
     * reductions); NULL: it is. */
    bool (*finished)(void *ctx);
};

struct coll_sched {
    struct coll_comm *comm;
    const struct coll_sched_ops *ops;
    void *ctx;
    struct coll_lane *lanes;
    int nlanes;
    size_t piece_bytes;      /* largest piece, for the waiting policy */
    /* The call's last stage: after it starts, the call posts on no
     * connection but its lanes', so a later call in flight (inflight.h) may
     * use the others at once, and each of these once its lane has posted all. */
    bool last;
    /* The work on received pieces (done(), consume()) may run on the comm's
     * runner (coll_step_runner), later and in any order against each other:
     * pieces of a window touch bytes apart. */
    bool defer;
    /* How the call's buffer is cut into pieces, when this schedule moves it
     * (collCommGetLastCallInfo): the largest piece's bytes and their number;
     * 0: not cut (messages, rounds).  The engine records it for the call. */
    size_t cut_bytes, cut_pieces;
    bool multi_comm;         /* the engine's: some lane is on another comm */
    int active;              /* the engine's: lanes with pieces not done */
};

/* Sets l's connection to rank peer (l->is_send: its direction): a send's is
 * made now (connecting waits for no one); a receive's not made yet is left
 * for the engine to accept while the schedule runs (l->accept). */
collResult_t coll_lane_link(struct coll_comm *comm, struct coll_lane *l, int peer);

/* A call as the engine runs it: stages, each a schedule, set by next(). */
struct coll_prog {
    struct coll_comm *comm;
    /* Sets sched to the next stage (its lanes' engine fields zero), or to NULL
     * when the call is over; called first when the program starts, then each
     * time its stage has finished.  The local work between two stages (a
     * round's reduction, a copy into place) is done here.  A failure ends the
     * program (described on comm). */
    collResult_t (*next)(struct coll_prog *p);
    /* Optional: frees the program, after its last next() or its failure. */
    void (*fini)(struct coll_prog *p);
    struct coll_sched *sched;
    int pc;                  /* the algorithm's: where next() goes on */
};

/* Runs p alone to its end (or its first failure, described and poisoning the
 * comm), then finis it. */
collResult_t coll_prog_run(struct coll_prog *p);

/* Runs one schedule to completion (or the first failure, described and
 * poisoning the comm): a program of one stage.  Lanes' engine fields must be
 * zero.  Over lanes of several comms, each comm's deadline and abort count for
 * their own lanes. */
collResult_t coll_engine_run(struct coll_sched *s);

/* --- a schedule in flight, for the set of calls in flight (inflight.c) --- */

struct coll_run;
/* Prepares s to run beside others: its state in *r (made on first use,
 * reused after). */
collResult_t coll_run_start(struct coll_run **r_p, struct coll_sched *s);
/* One pass over r's lanes; *moved_p: whether anything moved. */
collResult_t coll_run_pass(struct coll_run *r, bool *moved_p);
/* Whether r's schedule is done. */
bool coll_run_finished(const struct coll_run *r);
/* What r waits on, for a wait on the union of several: its requests into
 * out (room for its lanes), and into *steps_p / *watches_p the steps and
 * watch lanes waited for (added); how many requests.  *unconnected_p: a lane
 * still looks for its connection. */
int coll_run_pending(struct coll_run *r, struct coll_req **out, int *steps_p, int *watches_p,
                     bool *unconnected_p);
/* Lanes of r's schedule (room coll_run_pending needs). */
int coll_run_lanes(const struct coll_run *r);
/* Ends r's schedule (its steps let go), keeping r for the next. */
void coll_run_end(struct coll_run *r);
void coll_run_free(struct coll_run *r);

/* One transfer of a round (coll_engine_round). */
struct coll_xfer {
    struct coll_conn *conn; /* may be NULL when bytes is 0 */
    void *buf;
    size_t bytes;           /* 0: nothing to move */
    bool is_send;
};

/* A round, the smallest schedule: lanes[k] carries x[k] (n <= COLL_ROUND_MAX),
 * all at once, in *s; x must live as long as the stage.  The engine runs it
 * with none of the lanes' bookkeeping (every piece posted, receives first, then
 * all waited for together): recursive doubling's rounds, an algorithm's small
 * steps, whose time at small sizes is the loop's. */
#define COLL_ROUND_MAX 16
void coll_round_sched(struct coll_comm *comm, const struct coll_xfer *x, int n,
                      struct coll_lane *lanes, struct coll_sched *s);
/* Runs the round x[0..n) alone: coll_engine_run of its schedule. */
collResult_t coll_engine_round(struct coll_comm *comm, const struct coll_xfer *x, int n);

/* The communicator's poll set and wake-up descriptor (comm->engine), made at
 * communicator creation and freed with it. */
collResult_t coll_engine_init(struct coll_comm *comm);
void coll_engine_fini(struct coll_comm *comm);
/* Wakes a wait blocked on comm's poll set (any thread). */
void coll_engine_wake(struct coll_comm *comm);
/* The poll set's descriptor, for tests and diagnostics. */
int coll_engine_poll_fd(const struct coll_comm *comm);

/* Blocks until one of want[0..n) is ready, a failure notice arrives (notice,
 * nn entries from coll_bootstrap_notice_fds: their revents are filled), the
 * engine is woken, or timeout_ms passes; returns how many of want's
 * descriptors were ready (notices not counted).  They stay in the poll set
 * between waits, so a wait on the same ones costs one system call. */
int coll_engine_block(struct coll_comm *comm, const struct pollfd *want, size_t n,
                      struct pollfd *notice, int nn, int timeout_ms);

#endif
