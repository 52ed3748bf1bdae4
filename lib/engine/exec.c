/* The engine's request layer.  The schedule loop (engine.c) posts requests and
 * tests them; when a whole pass moves nothing it calls coll_exec_idle, which
 * decides how to wait: spin (lowest latency, when each rank has a core), spin
 * while yielding the core (more ranks than cores), then block on the
 * descriptors of the pending requests (all of them, however many) in the
 * communicator's poll set, in slices of at most 100 ms so that the deadline is
 * noticed; abort and a finished deferred step wake it at once.  No wait is
 * unbounded. */
#include "exec.h"
#include "inflight.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine.h"
#include "flight.h"
#include "socket.h"

/* The start and the deadline are read on the coarse clock: they count in
 * milliseconds, and a precise reading would be a tenth of an 8-byte call. */
void coll_exec_begin(struct coll_comm *comm, const char *op_name)
{
    int64_t now = coll_coarse_ns();
    comm->op_name = op_name;
    comm->op_start_ns = now;
    comm->deadline_ns = now + comm->timeout_ms * 1000000LL;
    coll_transport_sweep(comm, now);
}

/* How long a request that failed without a cause of its own (the peer closed the
 * connection) waits for the failure notice that names the rank to blame.  The
 * notice may come round the bootstrap ring through ranks that are busy, so a few
 * scheduler slices on a loaded host; a real failure is reported this much later. */
#define EXEC_NOTICE_WAIT_MS 500

/* Waits for a failure notice after c's peer closed the connection.  Returns true
 * when one came (comm is poisoned and its error set); otherwise *gone_p is a
 * bootstrap neighbour whose ring connection closed meanwhile (it died or left:
 * the likelier cause than the peer that merely shut its connections), or -1. */
static bool exec_await_notice(struct coll_comm *comm, int *gone_p)
{
    int64_t now = coll_now_ns(), end = now + EXEC_NOTICE_WAIT_MS * 1000000LL;
    if (end > comm->deadline_ns)
        end = comm->deadline_ns;
    *gone_p = -1;
    for (;;) {
        struct pollfd pf[2];
        int nn = coll_bootstrap_notice_fds(comm, pf);
        if (nn > 0 && poll(pf, (nfds_t)nn, 0) > 0 &&
            coll_bootstrap_notice_check(comm, pf, nn) != collSuccess)
            return true;
        *gone_p = coll_bootstrap_gone_neighbour(comm);
        now = coll_now_ns();
        if (nn == 0 || *gone_p >= 0 || now >= end)
            return false;
        int ms = (int)((end - now) / 1000000) + 1;
        (void)poll(pf, (nfds_t)nn, ms < 20 ? ms : 20);
    }
}

/* Describes a failed request: operation, peer, its host and address, cause. */
static void exec_fail(struct coll_comm *comm, struct coll_conn *c, collResult_t res)
{
    /* A peer that closed the connection because it heard of a failure sent its
     * notice first (coll_comm_poison notifies, then shuts connections down), to
     * its bootstrap neighbours, who pass it on: it names the rank to blame. */
    /* A communicator already poisoned keeps its first cause: requests that fail
     * after it, on the connections its poisoning shut, say nothing new. */
    if (atomic_load(&comm->async_error) != collSuccess)
        return;
    int gone = -1;
    bool closed = c->err_text == NULL &&
                  (c->err_no == 0 || c->err_no == EPIPE || c->err_no == ECONNRESET);
    if (closed && exec_await_notice(comm, &gone))
        return;
    const struct coll_rank_info *pi = &comm->peers[c->peer].info;
    char a[COLL_ADDR_STRLEN];
    coll_socket_addr_str((const struct sockaddr *)&pi->boot_addr, a, sizeof(a));
    const char *what = c->err_text ? c->err_text
                       : c->err_no ? strerror(c->err_no)
                       : (c->is_send ? "connection closed" : "connection closed by peer");
    char cause[160] = "";
    if (gone >= 0 && gone != c->peer)
        snprintf(cause, sizeof(cause), "rank %d (%.64s) is gone (its bootstrap connection "
                 "closed); ", gone, comm->peers[gone].info.host);
    coll_comm_blame(comm, gone >= 0 ? gone : c->peer);
    coll_set_error(comm, "%s #%llu: %s%s rank %d (%.64s, %s) over %s failed: %s", comm->op_name,
                   (unsigned long long)comm->seq, cause,
                   c->is_send ? "sending to" : "receiving from", c->peer, pi->host, a,
                   c->tp->name, what);
    coll_comm_poison(comm, res);
}

collResult_t coll_exec_isend_mh(struct coll_comm *comm, struct coll_conn *c, const void *buf,
                                size_t n, void *mh, unsigned flags, struct coll_req **r_p)
{
    *r_p = NULL;
    if (n == 0)
        return collSuccess;
    collResult_t res = coll_conn_isend(c, buf, n, mh, flags, r_p);
    if (res != collSuccess) {
        exec_fail(comm, c, res);
    } else {
        coll_flight_posted(comm, c, n);
        coll_comm_count_bytes(comm, n, 0);
    }
    return res;
}

collResult_t coll_exec_irecv_mh(struct coll_comm *comm, struct coll_conn *c, void *buf,
                                size_t n, void *mh, struct coll_req **r_p)
{
    *r_p = NULL;
    if (n == 0)
        return collSuccess;
    collResult_t res = coll_conn_irecv(c, buf, n, mh, r_p);
    if (res != collSuccess) {
        exec_fail(comm, c, res);
    } else {
        coll_flight_posted(comm, c, n);
        coll_comm_count_bytes(comm, 0, n);
    }
    return res;
}

/* A request or a lent receive failed: an abort says so, anything else is
 * described by exec_fail. */
static collResult_t exec_failed_wait(struct coll_comm *comm, struct coll_conn *c,
                                     collResult_t res)
{
    if (atomic_load(&comm->aborting)) {
        coll_set_error(comm, "%s #%llu: communicator aborted", comm->op_name,
                       (unsigned long long)comm->seq);
        coll_comm_poison(comm, collRemoteError);
        return collRemoteError;
    }
    exec_fail(comm, c, res);
    return res;
}

collResult_t coll_exec_peek(struct coll_comm *comm, struct coll_conn *c, size_t want,
                            const void **src_p, size_t *len_p)
{
    collResult_t res = c->tp->recv_peek(c, want, src_p, len_p);
    if (res != collSuccess) {
        *src_p = NULL;
        return exec_failed_wait(comm, c, res);
    }
    if (*src_p != NULL) {
        /* A lent fragment was never posted: it counts as posted and done (for
         * collCommGetBytes too: a receive taken in place is still received). */
        coll_flight_posted(comm, c, *len_p);
        coll_flight_moved(comm, c, *len_p);
        coll_comm_count_bytes(comm, 0, *len_p);
    }
    return collSuccess;
}

void coll_exec_release(struct coll_conn *c)
{
    c->tp->recv_release(c);
}

collResult_t coll_exec_test(struct coll_comm *comm, struct coll_req **r_p, bool *done_p)
{
    struct coll_req *r = *r_p;
    if (r == NULL) {
        *done_p = true;
        return collSuccess;
    }
    struct coll_conn *c = r->conn;
    bool done = false;
    size_t n = 0;
    collResult_t res = c->tp->test(r, &done, &n);
    if (res != collSuccess)
        return exec_failed_wait(comm, c, res);
    *done_p = done;
    if (done) {
        *r_p = NULL;
        coll_flight_moved(comm, c, n);
    }
    return collSuccess;
}

#define EXEC_POLL_STACK 64 /* descriptors a wait names without allocating */

/* Whether every wait is a few loads: shared memory, or a deferred step's flag. */
static bool exec_all_cheap(struct coll_req *const *reqs, int nreqs, int steps)
{
    for (int i = 0; i < nreqs; i++)
        if (reqs[i] != NULL && !reqs[i]->conn->tp->cheap_poll)
            return false;
    return nreqs > 0 || steps > 0;
}

/* The deadline passed: names the peer waited for (one whose bytes this rank
 * expects, else one that has not taken this rank's bytes), its host, how long
 * nothing moved and the bytes exchanged with it, then poisons the comm. */
/* Whether r is a request on one of comm's connections: a group's wait also
 * holds other communicators' requests, whose peers are not comm's ranks. */
static bool exec_on_comm(const struct coll_comm *comm, const struct coll_req *r)
{
    if (r == NULL)
        return false;
    const struct coll_conn *c = r->conn;
    return c->peer >= 0 && c->peer < comm->nranks &&
           (comm->peers[c->peer].send_conn == c || comm->peers[c->peer].recv_conn == c);
}

/* The connection a wait is for: a receive's, else a send's; NULL when none of
 * reqs is on comm. */
static const struct coll_conn *exec_waited_conn(const struct coll_comm *comm,
                                                struct coll_req *const *reqs, int nreqs)
{
    const struct coll_conn *c = NULL;
    for (int i = 0; i < nreqs; i++) {
        if (!exec_on_comm(comm, reqs[i]))
            continue;
        if (c == NULL || (c->is_send && !reqs[i]->conn->is_send))
            c = reqs[i]->conn;
    }
    return c;
}

static void exec_timeout(struct coll_comm *comm, int64_t now, struct coll_req *const *reqs,
                         int nreqs, const struct coll_wait *w)
{
    const struct coll_conn *c = exec_waited_conn(comm, reqs, nreqs);
    int64_t still_ms = coll_flight_idle(comm, now);
    char still[48] = "";
    int steps = w->steps;
    if (still_ms >= 0)
        snprintf(still, sizeof(still), ": no progress for %lld ms", (long long)still_ms);
    if (c == NULL && w->watches > 0 && w->watch_peer >= 0) {
        coll_set_error(comm, "%s #%llu timed out after %lld ms%s, waiting for rank %d's data in "
                       "shared memory", comm->op_name, (unsigned long long)comm->seq,
                       (long long)comm->timeout_ms, still, w->watch_peer);
        coll_comm_blame(comm, w->watch_peer);
    } else if (c == NULL) {
        coll_set_error(comm, "%s #%llu timed out after %lld ms%s%s", comm->op_name,
                       (unsigned long long)comm->seq, (long long)comm->timeout_ms, still,
                       steps > 0 ? ", waiting for a deferred step (a copy or kernel) to finish"
                                 : "");
    } else {
        const struct coll_rank_info *pi = &comm->peers[c->peer].info;
        char a[COLL_ADDR_STRLEN];
        coll_socket_addr_str((const struct sockaddr *)&pi->boot_addr, a, sizeof(a));
        char bytes[160] = "";
        uint64_t s, sp, r, rp;
        if (coll_flight_peer_bytes(comm, c->peer, &s, &sp, &r, &rp))
            snprintf(bytes, sizeof(bytes), "; this call sent it %llu of %llu B and received "
                     "%llu of %llu B from it", (unsigned long long)s, (unsigned long long)sp,
                     (unsigned long long)r, (unsigned long long)rp);
        /* Name every other peer the call still waits on too: in a stalled ring
         * the receive is often from a rank that itself waits, while the rank
         * that stopped is the one a send is stuck on. */
        char others[256] = "";
        size_t len = 0;
        for (int i = 0; i < nreqs; i++) {
            if (!exec_on_comm(comm, reqs[i]) || reqs[i]->conn->peer == c->peer)
                continue;
            int peer = reqs[i]->conn->peer;
            bool seen = false;
            for (int k = 0; k < i && !seen; k++)
                seen = exec_on_comm(comm, reqs[k]) && reqs[k]->conn->peer == peer;
            if (!seen)
                coll_buf_printf(others, sizeof(others), &len, "%s%d (%.64s)",
                                len ? ", rank " : "; also waiting for rank ", peer,
                                comm->peers[peer].info.host);
        }
        coll_set_error(comm, "%s #%llu timed out after %lld ms%s, waiting %s rank %d "
                       "(%.64s, %s) over %s%s%s", comm->op_name, (unsigned long long)comm->seq,
                       (long long)comm->timeout_ms, still,
                       c->is_send ? "to send to" : "to receive from", c->peer, pi->host, a,
                       c->tp->name, bytes, others);
        coll_comm_blame(comm, c->peer);
    }
    coll_comm_poison(comm, collTimeout);
}

#define EXEC_YIELDS_EMPTY 8            /* yields in a row that ran nothing else */
#define EXEC_YIELD_RAN_NS (2 * 1000)   /* a yield this long let something else run */
#define EXEC_YIELDS_AFTER_RAN 1024     /* ... and then this many more, after one that did */

/* Yields the core while a wait spins.  With more ranks than cores, always.
 * With a core per rank a yield that finds nothing else to run is a system call
 * on the latency path (a small message that arrives meanwhile waits for it),
 * so once EXEC_YIELDS_EMPTY yields in a row ran nothing else, the first idle
 * call of a wait only spins, and the every-64th call's yield goes on measuring.
 * One that lets something run (the peer on the same core: a busy machine,
 * ranks bound to one core) turns the first call's yield back on for at least
 * EXEC_YIELDS_AFTER_RAN more yields: there a yield that runs nothing is only
 * the scheduler keeping this rank on for now. */
static void exec_yield(struct coll_comm *comm, int64_t now, bool fresh)
{
    if (comm->oversubscribed) {
        sched_yield();
        return;
    }
    int empty = atomic_load_explicit(&comm->idle_yields_empty, memory_order_relaxed);
    if (fresh && empty >= EXEC_YIELDS_EMPTY)
        return;
    sched_yield();
    bool ran_other = coll_now_ns() - now >= EXEC_YIELD_RAN_NS;
    atomic_store_explicit(&comm->idle_yields_empty,
                          ran_other ? -EXEC_YIELDS_AFTER_RAN
                                    : empty < EXEC_YIELDS_EMPTY ? empty + 1 : empty,
                          memory_order_relaxed);
}

void coll_exec_yield(struct coll_comm *comm, int64_t now)
{
    exec_yield(comm, now, false);
}

/* The checks every wait makes when it looks at the call's state: an abort
 * from another thread, the deadline (the failure described naming what the
 * wait was for). */
static collResult_t exec_state(struct coll_comm *comm, int64_t now, struct coll_req *const *reqs,
                               int nreqs, const struct coll_wait *w)
{
    if (atomic_load(&comm->aborting)) {
        coll_set_error(comm, "%s #%llu: communicator aborted", comm->op_name,
                       (unsigned long long)comm->seq);
        coll_comm_poison(comm, collRemoteError);
        return collRemoteError;
    }
    if (now >= comm->deadline_ns) {
        exec_timeout(comm, now, reqs, nreqs, w);
        return collTimeout;
    }
    return collSuccess;
}

/* A wait on memory (watch lanes): failures no descriptor of the wait tells
 * of, looked at every EXEC_WATCH_LOOKS looks: a poisoned comm, a notice on the
 * bootstrap ring, or that ring's link to the rank watched closed (nothing else
 * watches a rank that only writes memory). */
#define EXEC_WATCH_LOOKS 16

static collResult_t exec_watch_failures(struct coll_comm *comm, struct coll_wait *w)
{
    collResult_t poisoned = (collResult_t)atomic_load(&comm->async_error);
    if (poisoned != collSuccess)
        return poisoned;
    if ((++w->looks % EXEC_WATCH_LOOKS) != 0)
        return collSuccess;
    struct pollfd pf[2];
    int nn = coll_bootstrap_notice_fds(comm, pf);
    if (nn > 0 && poll(pf, (nfds_t)nn, 0) > 0)
        COLL_CHECK(coll_bootstrap_notice_check(comm, pf, nn));
    int peer = w->watch_peer;
    if (peer < 0 || coll_bootstrap_gone_neighbour(comm) != peer)
        return collSuccess;
    coll_set_error(comm, "%s #%llu: rank %d left while this rank waited for its data in shared "
                   "memory", comm->op_name, (unsigned long long)comm->seq, peer);
    coll_comm_blame(comm, peer);
    coll_comm_poison(comm, collRemoteError);
    return collRemoteError;
}

/* A wait on memory alone (watch lanes) polls: the flag waited for is usually
 * a store another core makes within a microsecond, and no descriptor would
 * tell of it.  After EXEC_WATCH_SPIN_FREE polls it looks at the call's state
 * (abort, deadline, and every EXEC_WATCH_LOOKS looks the failures) every
 * EXEC_WATCH_LOOK_EVERY polls, and yields the core at each look when the host
 * has more ranks than cores, else every EXEC_WATCH_LOOKS looks (a yield is a
 * system call, and the flag may land during it). */
#define EXEC_WATCH_SPIN_FREE 128
#define EXEC_WATCH_LOOK_EVERY 32

static collResult_t exec_watch_idle(struct coll_comm *comm, struct coll_wait *w)
{
    /* With more ranks than cores the rank written for may need this core:
     * looks (and yields) come eight times as often. */
    unsigned polls = ++w->idle_calls << (comm->oversubscribed ? 3 : 0);
    if (polls < EXEC_WATCH_SPIN_FREE || polls % EXEC_WATCH_LOOK_EVERY != 0)
        return collSuccess; /* no pause: it costs a store's arrival up to 140 cycles */
    int64_t now = coll_now_ns();
    if (w->idle_since == 0) {
        w->idle_since = now;
        atomic_store_explicit(&comm->wait_peer, w->watch_peer, memory_order_relaxed);
    }
    (void)coll_flight_idle(comm, now);
    COLL_CHECK(exec_state(comm, now, NULL, 0, w));
    COLL_CHECK(exec_watch_failures(comm, w));
    if (comm->oversubscribed || w->looks % EXEC_WATCH_LOOKS == 0)
        exec_yield(comm, now, false);
    return collSuccess;
}

collResult_t coll_exec_idle(struct coll_comm *comm, struct coll_wait *w,
                            struct coll_req *const *reqs, int nreqs)
{
    if (w->watches > 0 && nreqs == 0 && w->steps == 0 && !coll_inflight_many(comm))
        return exec_watch_idle(comm, w);
    /* A rank with a core of its own that waits on shared memory polls again at
     * once: the clock, abort and a yield are looked at every 64th call only. */
    if (w->idle_since != 0 && !comm->oversubscribed && (++w->idle_calls & 63) != 0 &&
        !coll_inflight_many(comm) && exec_all_cheap(reqs, nreqs, w->steps + w->watches)) {
        coll_exec_cpu_relax();
        return collSuccess;
    }
    int64_t now = coll_now_ns();
    bool fresh = w->idle_since == 0;
    if (fresh) {
        w->idle_since = now;
        w->woke_idle = false;
        const struct coll_conn *c = exec_waited_conn(comm, reqs, nreqs);
        int peer = c != NULL ? c->peer : w->watches > 0 ? w->watch_peer : -1;
        if (peer >= 0)
            atomic_store_explicit(&comm->wait_peer, peer, memory_order_relaxed);
    }
    (void)coll_flight_idle(comm, now); /* notes when something last moved */
    COLL_CHECK(exec_state(comm, now, reqs, nreqs, w));
    if (w->watches > 0)
        COLL_CHECK(exec_watch_failures(comm, w));
    int steps = w->steps;
    int64_t idle_since = w->idle_since;
    /* Over transports whose test() is a few loads (shared memory) a wait keeps
     * polling longer: blocking and waking cost system calls on both sides. */
    int64_t spin = w->spin_ns;
    if (comm->spin_cheap_ns > spin && exec_all_cheap(reqs, nreqs, steps + w->watches))
        spin = comm->spin_cheap_ns;
    if (now - idle_since < spin) {
        if (comm->spin_yield)
            exec_yield(comm, now, fresh);
        return collSuccess;
    }
    if (w->watches > 0) {
        /* Memory: no descriptor tells of a store, so the wait goes on polling,
         * its core yielded at each look. */
        exec_yield(comm, now, fresh);
        return collSuccess;
    }
    /* Block until a descriptor is ready, the deadline, a wake-up or a 100 ms
     * tick, on the comm's poll set.  Every pending request's descriptors are
     * named: a few fit on the stack, more (an all-to-all or a star's root with
     * many peers) take a heap list for this one wait; a wait that blocks pays a
     * system call anyway.  Without room for them all, the wait sleeps 1 ms at
     * most, so the rest are tested soon. */
    struct pollfd stack[EXEC_POLL_STACK], *pfds = stack, notice[2];
    size_t want = 0;
    for (int i = 0; i < nreqs; i++)
        if (reqs[i] != NULL)
            want += (size_t)reqs[i]->conn->nfds;
    size_t cap = EXEC_POLL_STACK;
    if (want > cap) {
        struct pollfd *heap = malloc(want * sizeof(*heap));
        if (heap != NULL) {
            pfds = heap;
            cap = want;
        }
    }
    size_t n = 0;
    collResult_t res = collSuccess;
    for (int i = 0; i < nreqs; i++) {
        const struct coll_conn *c = reqs[i] ? reqs[i]->conn : NULL;
        if (c == NULL)
            continue;
        if (c->tp->wait_prepare != NULL && c->tp->wait_prepare(reqs[i]))
            goto out; /* it can move now: test again */
        /* The peer waited for shows in the flight record even when nothing was
         * posted to it (a zero-copy receive peeks instead of posting). */
        coll_flight_posted(comm, c, 0);
        short ev = c->is_send && !c->poll_in ? POLLOUT : POLLIN;
        for (int k = 0; k < c->nfds && n < cap; k++)
            pfds[n++] = (struct pollfd){.fd = c->fds[k], .events = ev};
    }
    int nn = coll_bootstrap_notice_fds(comm, notice);
    int64_t ms = (comm->deadline_ns - now) / 1000000 + 1;
    int tick = n < want ? 1 : 100;
    /* A failure notice counts only when nothing waited for is ready: bytes that
     * arrived before it still complete the call they belong to (a peer that
     * finished this call and then heard of a failure in the next one sent them
     * first), and the notice is seen again by the next wait that blocks, or by
     * this one if what was ready moved nothing. */
    int ready = coll_engine_block(comm, pfds, n, notice, nn, ms > tick ? tick : (int)ms);
    if (ready == 0 || w->woke_idle)
        res = coll_bootstrap_notice_check(comm, notice, nn);
    w->woke_idle = ready > 0; /* ready again with nothing moved: notices count then */
out:
    if (pfds != stack)
        free(pfds);
    return res;
}
