/* Calls in flight at once on a communicator (inflight.h): programs advanced
 * in one loop, their state swapped on the comm while each is worked on. */
#include "inflight.h"

#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "exec.h"
#include "flight.h"

/* What a call keeps on the comm, loaded while it is worked on. */
struct inflight_state {
    uint64_t seq;
    int64_t deadline_ns, op_start_ns;
    const char *op_name;
    void *scratch;
    size_t scratch_bytes;
    struct coll_flight_call flight;
};

struct inflight_call {
    const struct coll_call_ops *ops;
    void *arg;
    struct coll_prog *prog;
    struct coll_run *run;     /* its stage's loop state, kept for the slot's next call */
    struct inflight_state st; /* scratch: the slot's (slot 0: the comm's own) */
    const struct coll_sched *last; /* its last stage, running */
    bool released;            /* its last stage is over: it holds nothing */
    bool staged;              /* run holds its current stage */
};

struct coll_inflight {
    struct coll_comm *comm;
    int max;
    struct inflight_call slot[COLL_INFLIGHT_MAX];
    struct inflight_call *live[COLL_INFLIGHT_MAX]; /* oldest first */
    int nlive;
    struct inflight_call *cur; /* loaded on the comm; NULL between calls */
    uint64_t seq_hi;           /* the latest sequence number any call took */
    struct coll_wait w;        /* the wait on the union, while nothing moves */
    struct coll_req **uni;     /* the union of the calls' requests */
    size_t uni_cap;
};

collResult_t coll_inflight_init(struct coll_comm *comm, int max)
{
    if (comm->inflight != NULL)
        return collSuccess;
    struct coll_inflight *g;
    COLL_CHECK(coll_calloc(&g, 1));
    g->comm = comm;
    g->max = max < 1 ? 1 : max > COLL_INFLIGHT_MAX ? COLL_INFLIGHT_MAX : max;
    comm->inflight = g;
    return collSuccess;
}

void coll_inflight_fini(struct coll_comm *comm)
{
    struct coll_inflight *g = comm->inflight;
    if (g == NULL)
        return;
    for (int i = 0; i < COLL_INFLIGHT_MAX; i++) {
        coll_run_free(g->slot[i].run);
        if (i > 0)
            free(g->slot[i].st.scratch); /* slot 0's is the comm's, freed with it */
    }
    free(g->uni);
    free(g);
    comm->inflight = NULL;
}

int coll_inflight_count(const struct coll_comm *comm)
{
    return comm->inflight != NULL ? comm->inflight->nlive : 0;
}

void coll_inflight_arrived(struct coll_comm *comm)
{
    if (atomic_load_explicit(&comm->inflight_any, memory_order_acquire) > 0)
        coll_engine_wake(comm);
}

/* --- the call's state on the comm --- */

static void call_load(struct coll_inflight *g, struct inflight_call *c)
{
    struct coll_comm *comm = g->comm;
    comm->seq = c->st.seq;
    comm->deadline_ns = c->st.deadline_ns;
    comm->op_start_ns = c->st.op_start_ns;
    comm->op_name = c->st.op_name;
    comm->scratch = c->st.scratch;
    comm->scratch_bytes = c->st.scratch_bytes;
    coll_flight_swap(comm, NULL, &c->st.flight);
    g->cur = c;
}

static void call_save(struct coll_inflight *g, struct inflight_call *c)
{
    struct coll_comm *comm = g->comm;
    c->st.seq = comm->seq;
    if (comm->seq > g->seq_hi)
        g->seq_hi = comm->seq;
    c->st.deadline_ns = comm->deadline_ns;
    c->st.op_start_ns = comm->op_start_ns;
    c->st.op_name = comm->op_name;
    c->st.scratch = comm->scratch;
    c->st.scratch_bytes = comm->scratch_bytes;
    coll_flight_swap(comm, &c->st.flight, NULL);
    /* Between calls the comm shows slot 0's scratch and the latest sequence
     * number, as a call run alone would leave them. */
    comm->seq = g->seq_hi;
    comm->scratch = g->slot[0].st.scratch;
    comm->scratch_bytes = g->slot[0].st.scratch_bytes;
    g->cur = NULL;
}

/* Ends loaded call c with res: its program finished, its end() told; the slot
 * is free once saved. */
static void call_end(struct coll_inflight *g, struct inflight_call *c, collResult_t res)
{
    if (c->staged) {
        coll_run_end(c->run);
        c->staged = false;
    }
    if (c->prog != NULL && c->prog->fini != NULL)
        c->prog->fini(c->prog);
    c->prog = NULL;
    c->last = NULL;
    c->released = true;
    c->ops->end(c->arg, res);
    c->ops = NULL;
}

/* Moves loaded call c on: starts its next stages while the last one finished.
 * *moved_p: anything moved. */
static collResult_t call_step(struct inflight_call *c, bool *moved_p)
{
    for (;;) {
        if (c->staged) {
            bool moved;
            COLL_CHECK(coll_run_pass(c->run, &moved));
            *moved_p |= moved;
            if (!coll_run_finished(c->run))
                return collSuccess;
            coll_run_end(c->run);
            c->staged = false;
            *moved_p = true;
        }
        COLL_CHECK(c->prog->next(c->prog));
        if (c->prog->sched == NULL)
            return collSuccess; /* over */
        COLL_CHECK(coll_run_start(&c->run, c->prog->sched));
        c->staged = true;
    }
}

bool coll_inflight_add(struct coll_comm *comm, const struct coll_call_ops *ops, void *arg)
{
    struct coll_inflight *g = comm->inflight;
    if (g == NULL || g->nlive >= g->max)
        return false;
    struct inflight_call *c = NULL;
    for (int i = 0; i < g->max && c == NULL; i++)
        if (g->slot[i].ops == NULL)
            c = &g->slot[i];
    if (c == NULL)
        return false;
    c->ops = ops;
    c->arg = arg;
    c->prog = NULL;
    c->last = NULL;
    c->released = false;
    c->staged = false;
    c->st.seq = g->seq_hi > comm->seq ? g->seq_hi : comm->seq;
    c->st.deadline_ns = comm->deadline_ns;
    c->st.op_start_ns = comm->op_start_ns;
    c->st.op_name = comm->op_name;
    c->st.flight = (struct coll_flight_call){0}; /* no record open yet */
    if (c == &g->slot[0]) { /* slot 0's scratch is the comm's own */
        c->st.scratch = comm->scratch;
        c->st.scratch_bytes = comm->scratch_bytes;
    }
    g->live[g->nlive++] = c;
    comm->inflight_running = g->nlive;
    atomic_store_explicit(&comm->inflight_any, g->nlive, memory_order_release);
    call_load(g, c);
    collResult_t res = ops->begin(arg, &c->prog);
    bool moved = false;
    if (res == collSuccess)
        res = call_step(c, &moved); /* its first stage, and its first pass */
    bool over = res != collSuccess || c->prog->sched == NULL;
    if (over)
        call_end(g, c, res);
    call_save(g, c);
    if (over) {
        g->nlive--;
        comm->inflight_running = g->nlive;
        atomic_store_explicit(&comm->inflight_any, g->nlive, memory_order_release);
    }
    g->w.idle_since = 0; /* the union changed */
    return true;
}

/* Takes the calls that ended out of the live list, keeping the order. */
static void inflight_compact(struct coll_inflight *g)
{
    int k = 0;
    for (int i = 0; i < g->nlive; i++)
        if (g->live[i]->ops != NULL)
            g->live[k++] = g->live[i];
    g->nlive = k;
    g->comm->inflight_running = k;
    atomic_store_explicit(&g->comm->inflight_any, k, memory_order_release);
}

/* Ends every call in flight with res (one of them failed; the comm is
 * poisoned). */
static void inflight_fail_all(struct coll_inflight *g, collResult_t res)
{
    for (int i = 0; i < g->nlive; i++) {
        struct inflight_call *c = g->live[i];
        if (c->ops == NULL)
            continue;
        call_load(g, c);
        call_end(g, c, res);
        call_save(g, c);
    }
    inflight_compact(g);
}

/* Nothing moved in a whole round: one wait on the union of the calls' waits,
 * under the oldest call's deadline (the first to pass). */
static collResult_t inflight_idle(struct coll_inflight *g)
{
    size_t room = 0;
    for (int i = 0; i < g->nlive; i++)
        if (g->live[i]->staged)
            room += (size_t)coll_run_lanes(g->live[i]->run);
    if (room > g->uni_cap) {
        struct coll_req **u = realloc(g->uni, room * sizeof(*u));
        if (u == NULL) {
            coll_set_error(g->comm, "out of memory for the wait of %d calls in flight",
                           g->nlive);
            return collSystemError;
        }
        g->uni = u;
        g->uni_cap = room;
    }
    int n = 0, steps = 0, watches = 0;
    bool unconnected = false;
    for (int i = 0; i < g->nlive; i++)
        if (g->live[i]->staged)
            n += coll_run_pending(g->live[i]->run, g->uni + n, &steps, &watches, &unconnected);
    struct inflight_call *oldest = g->live[0];
    call_load(g, oldest);
    if (g->w.idle_since == 0) {
        size_t piece = 0;
        for (int i = 0; i < g->nlive; i++) {
            const struct coll_prog *p = g->live[i]->prog;
            if (g->live[i]->staged && p->sched->piece_bytes > piece)
                piece = p->sched->piece_bytes;
        }
        coll_exec_wait_init(g->comm, &g->w, piece);
    }
    g->w.steps = steps;
    /* A connection looked for (accepted at each pass) wakes no descriptor of
     * the wait: the wait polls, as for memory. */
    g->w.watches = watches + unconnected;
    g->w.watch_peer = -1;
    collResult_t res = coll_exec_idle(g->comm, &g->w, g->uni, n);
    call_save(g, oldest);
    return res;
}

bool coll_inflight_advance(struct coll_comm *comm)
{
    struct coll_inflight *g = comm->inflight;
    bool moved = false, ended = false;
    collResult_t res = collSuccess;
    for (int i = 0; i < g->nlive && res == collSuccess; i++) {
        struct inflight_call *c = g->live[i];
        call_load(g, c);
        res = call_step(c, &moved);
        if (res == collSuccess && !c->staged) {
            call_end(g, c, collSuccess);
            ended = true;
        }
        call_save(g, c);
    }
    if (res != collSuccess) {
        inflight_fail_all(g, res);
        return true;
    }
    if (ended) {
        inflight_compact(g);
        g->w.idle_since = 0;
        return true;
    }
    if (moved) {
        coll_exec_moved(&g->w);
        return false;
    }
    if (g->nlive > 0 && (res = inflight_idle(g)) != collSuccess) {
        inflight_fail_all(g, res);
        return true;
    }
    return false;
}

/* --- for the engine --- */

/* Whether lane l of an earlier call still holds connection c for a lane that
 * posts (queued behind l's requests) or, peeking, takes bytes in place (only
 * once l's are all done: a transport lends nothing while receives are queued).
 * A receive lane still accepting its connection holds the one from its peer:
 * the connection it will find is c. */
static bool lane_holds(const struct coll_lane *l, const struct coll_conn *c, bool peek)
{
    if (l->total == 0)
        return false;
    if (l->conn != c && !(l->conn == NULL && l->accept && !c->is_send && l->peer == c->peer))
        return false;
    return l->lending || peek ? l->done < l->total : l->posted < l->total;
}

bool coll_inflight_conn_free(const struct coll_comm *comm, const struct coll_conn *c, bool peek)
{
    const struct coll_inflight *g = comm->inflight;
    if (g == NULL || g->cur == NULL)
        return true;
    for (int i = 0; i < g->nlive && g->live[i] != g->cur; i++) {
        const struct inflight_call *o = g->live[i];
        if (o->ops == NULL || o->released)
            continue;
        if (o->last == NULL)
            return false;
        for (int k = 0; k < o->last->nlanes; k++)
            if (lane_holds(&o->last->lanes[k], c, peek))
                return false;
    }
    return true;
}

bool coll_inflight_behind(const struct coll_comm *comm)
{
    const struct coll_inflight *g = comm->inflight;
    if (g == NULL || g->cur == NULL)
        return false;
    for (int i = 0; i < g->nlive && g->live[i] != g->cur; i++)
        if (g->live[i]->ops != NULL && !g->live[i]->released)
            return true;
    return false;
}

void coll_inflight_last(struct coll_comm *comm, const struct coll_sched *s)
{
    struct coll_inflight *g = comm->inflight;
    if (g == NULL || g->cur == NULL)
        return;
    g->cur->last = s;
    if (s == NULL)
        g->cur->released = true;
}

uint64_t coll_inflight_oldest_seq(const struct coll_comm *comm)
{
    const struct coll_inflight *g = comm->inflight;
    if (g == NULL || g->cur == NULL)
        return comm->seq;
    for (int i = 0; i < g->nlive; i++)
        if (g->live[i] == g->cur)
            return comm->seq;
        else if (g->live[i]->ops != NULL)
            return g->live[i]->st.seq;
    return comm->seq;
}
