/* The flight recorder (flight.h): a ring of the communicator's last
 * COLL_FLIGHT_RECORDS calls, written by the thread that runs them, printed when
 * the communicator fails.
 *
 *   recs[0] recs[1] ... recs[31]      head = calls recorded so far
 *   #33     #34         #32           the newest is recs[(head - 1) % 32]
 *
 * Writing costs no lock and no allocation: a call rewrites the oldest record
 * (begin), the progress engine adds the bytes of each request to its peer's
 * slot when the request is posted and when it completes, and end sets the
 * state.  The reader may be another thread (collCommAbort while a call runs),
 * so every field is an atomic, and a record's rewrite is bracketed by a
 * sequence number (odd while it changes): the reader retries a record whose
 * number moved, and so never prints half of one call and half of the next.
 * Inside the bracket the writer stores with release and the reader loads with
 * acquire order, which keeps the fields inside it without fences (and costs
 * plain moves on x86-64); the hot counters are relaxed.  The byte counters
 * change outside that bracket, one store each, so a line may show the sent
 * bytes of one instant and the received bytes of the next; that is all.
 *
 * The time of the last movement, for "no progress for N ms", is taken lazily:
 * completions only count, and the progress engine, which reads the clock when
 * a pass moved nothing, turns a changed count into a time (coll_flight_idle).
 */
#include "flight.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"
#include "reduce.h"

#define LD(x) atomic_load_explicit(&(x), memory_order_relaxed)
#define ST(x, v) atomic_store_explicit(&(x), (v), memory_order_relaxed)
/* A record's fields inside its rewrite: release stores and acquire loads (plain
 * moves on x86-64) order them against the sequence number without fences. */
#define STR(x, v) atomic_store_explicit(&(x), (v), memory_order_release)
#define LDA(x) atomic_load_explicit(&(x), memory_order_acquire)

/* Spans shorter than this (three ticks of the coarse clock at 250 Hz) are only
 * said to be short. */
#define FLIGHT_SHORT_NS (12 * 1000000)

struct flight_peer {
    atomic_int peer;                /* -1: the other peers together */
    _Atomic uint64_t sent, sent_posted, recvd, recvd_posted;
};

struct flight_rec {
    atomic_uint ver;                /* odd while the owner rewrites the record */
    _Atomic(const char *) name;
    _Atomic(const char *) algo;
    _Atomic uint64_t seq;
    _Atomic uint64_t count;
    atomic_int dtype, op, root, peer, state, result;
    _Atomic int64_t start_ns, end_ns;
    atomic_int npeers;              /* slots of peers[] in use, the "other" slot apart */
    struct flight_peer peers[COLL_FLIGHT_PEERS + 1]; /* [COLL_FLIGHT_PEERS]: other peers */
};

struct coll_flight {
    struct flight_rec recs[COLL_FLIGHT_RECORDS];
    _Atomic uint64_t head;          /* records opened so far */
    atomic_bool dumped;             /* printed once already */
    /* The owner thread's alone. */
    struct flight_rec *cur;         /* the open record, NULL between calls */
    int hint;                       /* slot of the last peer looked up */
    uint64_t moves, moves_seen;     /* completions, and as of last_move_ns */
    int64_t last_move_ns;
};

collResult_t coll_flight_init(struct coll_comm *comm)
{
    struct coll_flight *f;
    COLL_CHECK(coll_calloc(&f, 1));
    for (int i = 0; i < COLL_FLIGHT_RECORDS; i++)
        for (int k = 0; k <= COLL_FLIGHT_PEERS; k++)
            atomic_init(&f->recs[i].peers[k].peer, -1);
    comm->flight = f;
    return collSuccess;
}

void coll_flight_fini(struct coll_comm *comm)
{
    free(comm->flight);
    comm->flight = NULL;
}

void coll_flight_begin(struct coll_comm *comm, const struct coll_flight_desc *d)
{
    struct coll_flight *f = comm->flight;
    if (f == NULL)
        return;
    uint64_t h = LD(f->head);
    struct flight_rec *r = &f->recs[h % COLL_FLIGHT_RECORDS];
    unsigned v = LD(r->ver);
    ST(r->ver, v + 1);
    STR(r->name, d->name);
    STR(r->algo, d->algo);
    STR(r->seq, comm->seq);
    STR(r->count, (uint64_t)d->count);
    STR(r->dtype, d->dtype);
    STR(r->op, d->op);
    STR(r->root, d->root);
    STR(r->peer, d->peer);
    STR(r->state, COLL_FLIGHT_ISSUED);
    STR(r->result, collSuccess);
    STR(r->start_ns, comm->op_start_ns); /* set by coll_exec_begin just before */
    STR(r->end_ns, 0);
    int used = LD(r->npeers);
    for (int k = 0; k < used; k++) {
        struct flight_peer *p = &r->peers[k];
        STR(p->peer, -1);
        STR(p->sent, 0);
        STR(p->sent_posted, 0);
        STR(p->recvd, 0);
        STR(p->recvd_posted, 0);
    }
    struct flight_peer *o = &r->peers[COLL_FLIGHT_PEERS];
    STR(o->sent, 0);
    STR(o->sent_posted, 0);
    STR(o->recvd, 0);
    STR(o->recvd_posted, 0);
    STR(r->npeers, 0);
    atomic_store_explicit(&r->ver, v + 2, memory_order_release);
    atomic_store_explicit(&f->head, h + 1, memory_order_release);
    f->cur = r;
    f->hint = 0;
    f->last_move_ns = comm->op_start_ns;
    f->moves_seen = f->moves;
}

void coll_flight_swap(struct coll_comm *comm, struct coll_flight_call *save,
                      const struct coll_flight_call *load)
{
    struct coll_flight *f = comm->flight;
    if (f == NULL)
        return;
    if (save != NULL)
        *save = (struct coll_flight_call){.cur = f->cur, .hint = f->hint,
                                          .moves_seen = f->moves_seen,
                                          .last_move_ns = f->last_move_ns};
    if (load == NULL) {
        f->cur = NULL;
        f->hint = 0;
        return;
    }
    f->cur = load->cur;
    f->hint = load->hint;
    f->last_move_ns = load->last_move_ns;
    /* Completions are counted for the thread, not per call: a call that comes
     * back sees the others' moves as its own, so it never looks idle longer
     * than the thread was. */
    f->moves_seen = load->moves_seen;
}

void coll_flight_algo(struct coll_comm *comm, const char *algo)
{
    if (comm->flight != NULL && comm->flight->cur != NULL)
        ST(comm->flight->cur->algo, algo);
}

void coll_flight_end(struct coll_comm *comm, collResult_t res)
{
    struct coll_flight *f = comm->flight;
    if (f == NULL || f->cur == NULL)
        return;
    struct flight_rec *r = f->cur;
    ST(r->result, (int)res);
    ST(r->end_ns, coll_coarse_ns()); /* the start's clock (coll_exec_begin) */
    ST(r->state, res == collSuccess ? COLL_FLIGHT_DONE : COLL_FLIGHT_FAILED);
    f->cur = NULL;
    if (res != collSuccess && atomic_load(&comm->async_error) != collSuccess)
        coll_flight_dump(comm, coll_result_name(res));
}

/* The slot of peer in the open record r: found, added, or the shared one. */
static struct flight_peer *flight_slot(struct coll_flight *f, struct flight_rec *r, int peer)
{
    if (LD(r->peers[f->hint].peer) == peer)
        return &r->peers[f->hint];
    int n = LD(r->npeers);
    for (int k = 0; k < n; k++)
        if (LD(r->peers[k].peer) == peer) {
            f->hint = k;
            return &r->peers[k];
        }
    if (n == COLL_FLIGHT_PEERS)
        return &r->peers[COLL_FLIGHT_PEERS];
    ST(r->peers[n].peer, peer);
    /* Release: a reader that sees the new count sees the slot's peer too. */
    atomic_store_explicit(&r->npeers, n + 1, memory_order_release);
    f->hint = n;
    return &r->peers[n];
}

void coll_flight_posted(struct coll_comm *comm, const struct coll_conn *c, size_t n)
{
    struct coll_flight *f = comm->flight;
    if (f == NULL || f->cur == NULL)
        return;
    struct flight_peer *p = flight_slot(f, f->cur, c->peer);
    if (c->is_send)
        ST(p->sent_posted, LD(p->sent_posted) + n);
    else
        ST(p->recvd_posted, LD(p->recvd_posted) + n);
}

void coll_flight_moved(struct coll_comm *comm, const struct coll_conn *c, size_t n)
{
    struct coll_flight *f = comm->flight;
    if (f == NULL || f->cur == NULL)
        return;
    struct flight_rec *r = f->cur;
    struct flight_peer *p = flight_slot(f, r, c->peer);
    if (c->is_send)
        ST(p->sent, LD(p->sent) + n);
    else
        ST(p->recvd, LD(p->recvd) + n);
    f->moves++;
    if (LD(r->state) == COLL_FLIGHT_ISSUED)
        ST(r->state, COLL_FLIGHT_RUNNING);
}

int64_t coll_flight_idle(struct coll_comm *comm, int64_t now)
{
    struct coll_flight *f = comm->flight;
    if (f == NULL || f->cur == NULL)
        return -1;
    if (f->moves != f->moves_seen) {
        f->moves_seen = f->moves;
        f->last_move_ns = now;
    }
    return (now - f->last_move_ns) / 1000000;
}

bool coll_flight_peer_bytes(const struct coll_comm *comm, int peer, uint64_t *sent_p,
                            uint64_t *sent_posted_p, uint64_t *recvd_p,
                            uint64_t *recvd_posted_p)
{
    const struct coll_flight *f = comm->flight;
    if (f == NULL || f->cur == NULL)
        return false;
    const struct flight_rec *r = f->cur;
    int n = LD(r->npeers);
    for (int k = 0; k < n; k++) {
        const struct flight_peer *p = &r->peers[k];
        if (LD(p->peer) != peer)
            continue;
        *sent_p = LD(p->sent);
        *sent_posted_p = LD(p->sent_posted);
        *recvd_p = LD(p->recvd);
        *recvd_posted_p = LD(p->recvd_posted);
        return true;
    }
    return false;
}

static const char *const state_names[] = {
    [COLL_FLIGHT_ISSUED] = "issued", [COLL_FLIGHT_RUNNING] = "running",
    [COLL_FLIGHT_DONE] = "done", [COLL_FLIGHT_FAILED] = "failed",
};

static void flight_put_peer(char *buf, size_t cap, size_t *len, int peer,
                            const struct flight_peer *p, bool first)
{
    uint64_t s = LDA(p->sent), sp = LDA(p->sent_posted);
    uint64_t r = LDA(p->recvd), rp = LDA(p->recvd_posted);
    if (peer < 0 && s == 0 && sp == 0 && r == 0 && rp == 0)
        return;
    if (peer >= 0)
        coll_buf_printf(buf, cap, len, "%srank %d", first ? "" : ", ", peer);
    else
        coll_buf_printf(buf, cap, len, "%sother ranks", first ? "" : ", ");
    /* Bytes completed / posted: a receive stuck at 0/N names the silent peer. */
    coll_buf_printf(buf, cap, len, " sent %llu/%llu B recv %llu/%llu B", (unsigned long long)s,
               (unsigned long long)sp, (unsigned long long)r, (unsigned long long)rp);
}

/* Formats record r into line; false when the owner rewrote it meanwhile. */
static bool flight_format(const struct flight_rec *r, int64_t now, char *line, size_t cap)
{
    unsigned v1 = atomic_load_explicit(&r->ver, memory_order_acquire);
    if (v1 & 1u)
        return false;
    const char *name = LDA(r->name), *algo = LDA(r->algo);
    unsigned long long seq = LDA(r->seq), count = LDA(r->count);
    int dtype = LDA(r->dtype), op = LDA(r->op), root = LDA(r->root), peer = LDA(r->peer);
    int state = LDA(r->state), result = LDA(r->result);
    int64_t start = LDA(r->start_ns), end = LDA(r->end_ns);
    size_t len = 0;
    coll_buf_printf(line, cap, &len, "  #%llu %s", seq, name ? name : "?");
    if (dtype >= 0)
        coll_buf_printf(line, cap, &len, " %llu x %s", count, coll_dtype_name((collDataType_t)dtype));
    else
        coll_buf_printf(line, cap, &len, " of %llu message(s)", count);
    if (op >= 0)
        coll_buf_printf(line, cap, &len, " %s", coll_op_name((collRedOp_t)op));
    if (root >= 0)
        coll_buf_printf(line, cap, &len, " root %d", root);
    if (peer >= 0)
        coll_buf_printf(line, cap, &len, " peer %d", peer);
    coll_buf_printf(line, cap, &len, " via %s: %s", algo ? algo : "?",
               (unsigned)state < 4 ? state_names[state] : "?");
    if (state == COLL_FLIGHT_FAILED)
        coll_buf_printf(line, cap, &len, " (%s)", coll_result_name((collResult_t)result));
    coll_buf_printf(line, cap, &len, ", started %lld ms ago", (long long)((now - start) / 1000000));
    /* Both ends are on the coarse clock: a span under a few of its ticks says
     * little more than that it was short. */
    if (end > 0 && end - start < FLIGHT_SHORT_NS)
        coll_buf_printf(line, cap, &len, ", took under %d ms", FLIGHT_SHORT_NS / 1000000);
    else if (end > 0)
        coll_buf_printf(line, cap, &len, ", took %.0f ms", (double)(end - start) / 1e6);
    int n = atomic_load_explicit(&r->npeers, memory_order_acquire);
    if (n > COLL_FLIGHT_PEERS)
        n = COLL_FLIGHT_PEERS;
    coll_buf_printf(line, cap, &len, "%s", n > 0 ? "; " : "");
    for (int k = 0; k < n; k++)
        flight_put_peer(line, cap, &len, LDA(r->peers[k].peer), &r->peers[k], k == 0);
    flight_put_peer(line, cap, &len, -1, &r->peers[COLL_FLIGHT_PEERS], n == 0);
    return atomic_load_explicit(&r->ver, memory_order_relaxed) == v1;
}

void coll_flight_dump(struct coll_comm *comm, const char *why)
{
    struct coll_flight *f = comm->flight;
    if (f == NULL || atomic_exchange(&f->dumped, true))
        return;
    uint64_t head = atomic_load_explicit(&f->head, memory_order_acquire);
    uint64_t first = head > COLL_FLIGHT_RECORDS ? head - COLL_FLIGHT_RECORDS : 0;
    COLL_WARN("flight recorder of rank %d (%s): the last %llu of %llu call(s), oldest first",
              comm->rank, why, (unsigned long long)(head - first), (unsigned long long)head);
    int64_t now = coll_now_ns();
    for (uint64_t i = first; i < head; i++) {
        const struct flight_rec *r = &f->recs[i % COLL_FLIGHT_RECORDS];
        char line[900];
        bool ok = false;
        for (int tries = 0; tries < 100 && !ok; tries++)
            ok = flight_format(r, now, line, sizeof(line));
        COLL_WARN("%s", ok ? line : "  (record being rewritten)");
    }
}
