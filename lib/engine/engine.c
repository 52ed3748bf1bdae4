/* The engine: one loop that runs schedules (engine.h), and the communicator's
 * persistent poll set that its waits block on.
 *
 * The poll set is an epoll instance per communicator, for waits on more than
 * a few descriptors (a star's root, an all-to-all); a wait on a few poll()s
 * them directly, the wake-up descriptor with them.  A wait names the
 * descriptors it needs and the events; those already in the set with the same
 * events cost nothing, so the usual wait (the same two or three connections
 * call after call) is one epoll_wait.  A descriptor that was wanted once and is
 * not now stays in the set until it reports an event nobody waits for, and is
 * then taken out: level-triggered, it would otherwise wake every later wait.
 * A descriptor closed behind the set's back leaves it by itself (the kernel
 * drops it with its last reference); one that cannot be taken out (its number
 * reused, the old file still open elsewhere) makes the set start afresh, and a
 * wait that sees nothing for a whole tick adds its descriptors again, in case
 * one was closed and its number reused (which the table cannot tell). */
#include "engine.h"

#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "exec.h"
#include "flight.h"
#include "inflight.h"
#include "regcache.h"

struct coll_engine {
    int epfd;
    int wakefd;              /* eventfd: coll_engine_wake, written only while blocked */
    _Atomic uint64_t wakes;  /* coll_engine_wake calls so far */
    atomic_bool blocked;     /* a wait is in (or entering) poll */
    uint64_t wakes_seen;     /* the waiting thread's: wakes as of its last block */
    uint64_t gen;            /* waits so far: which descriptors the current one wants */
    /* Per descriptor number: events registered (0: not in the set), and the
     * wait that last wanted it. */
    struct engine_fd {
        uint32_t events;
        uint64_t gen;
    } *fds;
    size_t nfds;
};

static int engine_epoll_new(int wakefd)
{
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0)
        return -1;
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = wakefd};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, wakefd, &ev) != 0) {
        close(ep);
        return -1;
    }
    return ep;
}

collResult_t coll_engine_init(struct coll_comm *comm)
{
    struct coll_engine *e;
    COLL_CHECK(coll_calloc(&e, 1));
    e->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    e->epfd = e->wakefd >= 0 ? engine_epoll_new(e->wakefd) : -1;
    if (e->epfd < 0) {
        int err = errno;
        if (e->wakefd >= 0)
            close(e->wakefd);
        free(e);
        coll_set_error(comm, "the progress engine's poll set could not be made: %s%s",
                       strerror(err), err == EMFILE ? " (raise RLIMIT_NOFILE: ulimit -n)" : "");
        return collSystemError;
    }
    comm->engine = e;
    return collSuccess;
}

void coll_engine_fini(struct coll_comm *comm)
{
    struct coll_engine *e = comm->engine;
    if (e == NULL)
        return;
    close(e->epfd);
    close(e->wakefd);
    free(e->fds);
    free(e);
    comm->engine = NULL;
}

int coll_engine_poll_fd(const struct coll_comm *comm)
{
    return comm->engine != NULL ? comm->engine->epfd : -1;
}

/* The eventfd is written only when the comm's thread blocks (or is about to):
 * a wake-up while it polls costs no system call.  No wake-up is lost: the waker
 * counts, then looks at `blocked`; the waiter sets `blocked`, then looks at the
 * count (both sequentially consistent), so one of them sees the other. */
void coll_engine_wake(struct coll_comm *comm)
{
    struct coll_engine *e = comm->engine;
    uint64_t one = 1;
    if (e == NULL)
        return;
    atomic_fetch_add(&e->wakes, 1);
    if (atomic_load(&e->blocked))
        (void)!write(e->wakefd, &one, sizeof(one));
}

/* A step's state: running, done (its completer still wakes the engine, so the
 * comm must live), released (the completer let go: the slot may be reused). */
enum { STEP_RUNNING, STEP_DONE, STEP_RELEASED };

void coll_step_complete(struct coll_step *s, collResult_t res)
{
    struct coll_comm *comm = s->comm;
    s->res = res;
    atomic_store_explicit(&s->state, STEP_DONE, memory_order_release);
    coll_engine_wake(comm);
    atomic_store_explicit(&s->state, STEP_RELEASED, memory_order_release);
}

/* Waits the few instructions until a done step's completer has let go. */
static void step_wait_released(struct coll_step *st)
{
    while (atomic_load_explicit(&st->state, memory_order_acquire) == STEP_DONE)
        sched_yield();
}

void coll_step_run(struct coll_step *s)
{
    const struct coll_sched *sch = s->sched;
    collResult_t res = collSuccess;
    if (s->src != NULL)
        sch->ops->consume(sch->ctx, s->lane, s->piece, s->off, s->src, s->len);
    else if (sch->ops->done != NULL)
        res = sch->ops->done(sch->ctx, s->lane, s->piece, s->buf);
    coll_step_complete(s, res);
}

/* The entry for fd, growing the table; NULL when out of memory. */
static struct engine_fd *engine_fd(struct coll_engine *e, int fd)
{
    if ((size_t)fd >= e->nfds) {
        size_t n = e->nfds ? e->nfds : 64;
        while (n <= (size_t)fd)
            n *= 2;
        struct engine_fd *p = realloc(e->fds, n * sizeof(*p));
        if (p == NULL)
            return NULL;
        memset(p + e->nfds, 0, (n - e->nfds) * sizeof(*p));
        e->fds = p;
        e->nfds = n;
    }
    return &e->fds[fd];
}

/* Starts the set afresh with only the wake-up descriptor. */
static void engine_reset(struct coll_engine *e)
{
    int ep = engine_epoll_new(e->wakefd);
    if (ep < 0)
        return; /* keep the old one: waits still end by their tick */
    close(e->epfd);
    e->epfd = ep;
    if (e->fds != NULL)
        memset(e->fds, 0, e->nfds * sizeof(*e->fds));
}

/* Puts fd in the set with events ev (this wait wants it). */
static void engine_want(struct coll_engine *e, int fd, uint32_t ev)
{
    struct engine_fd *f = fd >= 0 ? engine_fd(e, fd) : NULL;
    if (f == NULL)
        return;
    if (f->gen == e->gen)
        ev |= f->events; /* wanted twice in one wait (two connections, one socket) */
    f->gen = e->gen;
    if (f->events == ev)
        return;
    struct epoll_event x = {.events = ev, .data.fd = fd};
    int op = f->events == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
    if (epoll_ctl(e->epfd, op, fd, &x) != 0) {
        /* Closed and reused since (MOD: gone from the set; ADD: still there). */
        op = errno == ENOENT ? EPOLL_CTL_ADD : errno == EEXIST ? EPOLL_CTL_MOD : -1;
        if (op < 0 || epoll_ctl(e->epfd, op, fd, &x) != 0) {
            f->events = 0;
            return;
        }
    }
    f->events = ev;
}

/* Adds fd to the set again, whatever the table says. */
static void engine_resync(struct coll_engine *e, int fd, uint32_t ev)
{
    struct engine_fd *f = fd >= 0 && (size_t)fd < e->nfds ? &e->fds[fd] : NULL;
    if (f == NULL)
        return;
    f->events = 0;
    f->gen = 0;
    engine_want(e, fd, ev);
}

#define ENGINE_EVENTS 64
#define ENGINE_RESYNC_MS 50
/* Waits on at most this many descriptors poll() them: as cheap as epoll_wait
 * for so few, and a wait that alternates between sets (a ring's receive, then
 * its receive and send) costs no change to the set and no wake-up for a
 * descriptor it no longer wants. */
#define ENGINE_FEW 8

/* A wait on a few descriptors: one poll() of them, the notices and the wake-up
 * descriptor, leaving the set alone. */
static int engine_block_few(struct coll_engine *e, const struct pollfd *want, size_t n,
                            struct pollfd *notice, int nn, int timeout_ms)
{
    struct pollfd p[ENGINE_FEW + 3];
    if (n > 0) /* want may be NULL then */
        memcpy(p, want, n * sizeof(*p));
    for (int i = 0; i < nn; i++)
        p[n + (size_t)i] = (struct pollfd){.fd = notice[i].fd, .events = notice[i].events};
    p[n + (size_t)nn] = (struct pollfd){.fd = e->wakefd, .events = POLLIN};
    int ready = 0;
    if (poll(p, n + (size_t)nn + 1, timeout_ms) <= 0) {
        for (int i = 0; i < nn; i++)
            notice[i].revents = 0;
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        ready += p[i].revents != 0;
    for (int i = 0; i < nn; i++)
        notice[i].revents = p[n + (size_t)i].revents;
    if (p[n + (size_t)nn].revents != 0) {
        uint64_t v;
        (void)!read(e->wakefd, &v, sizeof(v));
    }
    return ready;
}

static int engine_block_any(struct coll_engine *e, const struct pollfd *want, size_t n,
                            struct pollfd *notice, int nn, int timeout_ms)
{
    e->gen++;
    for (size_t i = 0; i < n; i++)
        engine_want(e, want[i].fd, (uint32_t)want[i].events);
    for (int i = 0; i < nn; i++) {
        engine_want(e, notice[i].fd, (uint32_t)notice[i].events);
        notice[i].revents = 0;
    }
    struct epoll_event evs[ENGINE_EVENTS];
    int got = epoll_wait(e->epfd, evs, ENGINE_EVENTS, timeout_ms), ready = 0;
    if (got == 0 && timeout_ms >= ENGINE_RESYNC_MS) {
        /* A whole tick and nothing: a descriptor closed and its number reused
         * since it was added would be missing from the set, unseen.  Adding them
         * again costs little next to the tick. */
        for (size_t i = 0; i < n; i++)
            engine_resync(e, want[i].fd, (uint32_t)want[i].events);
        for (int i = 0; i < nn; i++)
            engine_resync(e, notice[i].fd, (uint32_t)notice[i].events);
    }
    for (int k = 0; k < got; k++) {
        int fd = evs[k].data.fd;
        if (fd == e->wakefd) {
            uint64_t v;
            (void)!read(e->wakefd, &v, sizeof(v));
            continue;
        }
        bool is_notice = false;
        for (int i = 0; i < nn; i++)
            if (notice[i].fd == fd) {
                notice[i].revents = (short)evs[k].events;
                is_notice = true;
            }
        struct engine_fd *f = (size_t)fd < e->nfds ? &e->fds[fd] : NULL;
        if (f != NULL && f->gen == e->gen) {
            ready += !is_notice; /* what the caller counts: its own descriptors */
            continue;
        }
        /* Ready, and no one waits for it: out of the set until wanted again. */
        if (epoll_ctl(e->epfd, EPOLL_CTL_DEL, fd, NULL) != 0 && errno != ENOENT) {
            engine_reset(e);
            return ready;
        }
        if (f != NULL)
            f->events = 0;
    }
    return ready;
}

/* A wake-up since the last block returns at once (as a block that woke on it):
 * the caller looks at everything again, as after any block. */
int coll_engine_block(struct coll_comm *comm, const struct pollfd *want, size_t n,
                      struct pollfd *notice, int nn, int timeout_ms)
{
    struct coll_engine *e = comm->engine;
    atomic_store(&e->blocked, true);
    uint64_t w = atomic_load(&e->wakes);
    int ready = 0;
    if (w != e->wakes_seen) {
        for (int i = 0; i < nn; i++)
            notice[i].revents = 0;
    } else if (n <= ENGINE_FEW && nn <= 2) {
        ready = engine_block_few(e, want, n, notice, nn, timeout_ms);
    } else {
        ready = engine_block_any(e, want, n, notice, nn, timeout_ms);
    }
    atomic_store(&e->blocked, false);
    e->wakes_seen = atomic_load(&e->wakes);
    return ready;
}

/* --- schedules --- */

static size_t lane_window(const struct coll_lane *l)
{
    return l->window == 0 || l->window > COLL_LANE_MAX_WINDOW ? COLL_LANE_MAX_WINDOW : l->window;
}

/* Whether [p, p+n) lies in [base, base+len). */
static bool engine_within(const void *base, size_t len, const void *p, size_t n)
{
    uintptr_t b = (uintptr_t)base, q = (uintptr_t)p;
    return base != NULL && q >= b && n <= len && q - b <= len - n;
}

static inline bool lane_ready(const struct coll_sched *s, const struct coll_lane *l, size_t i)
{
    if (l->after != NULL && i >= l->lag && *l->after + l->lag <= i)
        return false;
    return s->ops->ready == NULL || s->ops->ready(s->ctx, l, i);
}

/* Whether l may post on its connection: with other calls in flight, once no
 * earlier one holds it (inflight.h); that lasts for the rest of the stage. */
static bool lane_turn(struct coll_lane *l)
{
    if (l->granted || !coll_inflight_many(l->comm))
        return true;
    l->granted = coll_inflight_conn_free(l->comm, l->conn, l->lending);
    return l->granted;
}

static collResult_t lane_done(struct coll_sched *s, struct coll_lane *l, size_t i, void *buf)
{
    if (s->ops->done == NULL)
        return collSuccess;
    collResult_t res = s->ops->done(s->ctx, l, i, buf);
    if (res != collSuccess)
        coll_comm_poison(l->comm, res);
    return res;
}

/* A piece of l is done: counted, and the lane released after its last. */
static void lane_retire(struct coll_sched *s, struct coll_lane *l, bool *moved_p)
{
    l->done++;
    *moved_p = true;
    if (l->done == l->total)
        s->active--;
}

/* Takes the pieces of watch lane l that are there, in order. */
static collResult_t lane_watch(struct coll_sched *s, struct coll_lane *l, bool *moved_p)
{
    while (l->done < l->total && s->ops->ready(s->ctx, l, l->done)) {
        size_t i = l->done;
        lane_retire(s, l, moved_p);
        COLL_CHECK(lane_done(s, l, i, NULL));
    }
    return collSuccess;
}

/* Hands the work on piece i of l (buf; or, lent, len bytes at src for offset
 * off) to the comm's runner, in the step of the piece's slot. */
static void lane_hand(struct coll_sched *s, struct coll_lane *l, size_t i, void *buf,
                      const void *src, size_t off, size_t len)
{
    struct coll_step *st = &l->steps[i & l->mask];
    step_wait_released(st); /* the slot's last step */
    st->comm = l->comm;
    st->res = collSuccess;
    st->sched = s;
    st->lane = l;
    st->piece = i;
    st->buf = buf;
    st->src = src;
    st->off = off;
    st->len = len;
    atomic_store_explicit(&st->state, STEP_RUNNING, memory_order_relaxed);
    l->running++;
    const struct coll_step_runner *r = l->comm->step_runner;
    r->submit(r->arg, st);
}

/* Whether the step handed over for piece i of l is still running. */
static bool lane_step_running(const struct coll_lane *l, size_t i)
{
    return atomic_load_explicit(&l->steps[i & l->mask].state, memory_order_acquire) ==
           STEP_RUNNING;
}

/* The work handed over for piece i of l failed: described naming the peer the
 * piece came from, and the comm poisoned. */
static collResult_t lane_step_failed(struct coll_lane *l, size_t i, collResult_t res)
{
    struct coll_comm *c = l->comm;
    coll_set_error(c, "%s #%llu: the work on piece %zu received from rank %d (%s) failed after "
                   "it arrived: %s", c->op_name ? c->op_name : "call", (unsigned long long)c->seq,
                   i, l->conn != NULL ? l->conn->peer : -1,
                   l->conn != NULL ? l->conn->tp->name : "no connection",
                   collGetErrorString(res));
    coll_comm_poison(c, res);
    return res;
}

/* Takes lent pieces of l while ready; in order, as far as they have arrived.
 * With l->defer, the lent bytes of a piece are held while the runner consumes
 * them, and released when its step is done. */
static collResult_t lane_take(struct coll_sched *s, struct coll_lane *l, bool *moved_p)
{
    if (!lane_turn(l))
        return collSuccess;
    while (l->done < l->total && lane_ready(s, l, l->done)) {
        if (l->running > 0) {
            struct coll_step *st = &l->steps[l->done & l->mask];
            if (lane_step_running(l, l->done))
                return collSuccess;
            l->running = 0;
            if (st->res != collSuccess)
                return lane_step_failed(l, l->done, st->res);
            coll_exec_release(l->conn);
            l->lent_off += st->len;
            *moved_p = true;
        }
        size_t len = 0;
        const void *src = NULL;
        if (!l->take_known) { /* asked once per piece, not at every look */
            s->ops->buf(s->ctx, l, l->done, &l->take_buf, &l->take_bytes);
            l->take_known = true;
        }
        void *buf = l->take_buf;
        size_t bytes = l->take_bytes;
        if (l->lent_off < bytes) {
            COLL_CHECK(coll_exec_peek(l->comm, l->conn, bytes - l->lent_off, &src, &len));
            if (src == NULL)
                return collSuccess;
            if (l->defer) {
                lane_hand(s, l, l->done, buf, src, l->lent_off, len);
                *moved_p = true;
                return collSuccess;
            }
            if (s->ops->consume)
                s->ops->consume(s->ctx, l, l->done, l->lent_off, src, len);
            else
                memcpy((char *)buf + l->lent_off, src, len);
            coll_exec_release(l->conn);
            l->lent_off += len;
            *moved_p = true;
        }
        if (l->lent_off == bytes) {
            size_t i = l->done;
            l->lent_off = 0;
            l->take_known = false;
            lane_retire(s, l, moved_p);
            l->posted = l->done;
            COLL_CHECK(lane_done(s, l, i, buf));
        }
    }
    return collSuccess;
}

/* Posts piece i of connected lane l: where buf() puts it, with the transport's
 * handle for it (ops->handle, or mh when the piece lies in l->reg).  more: piece
 * i + 1 is posted right after it (a send then lets the transport join them). */
static inline collResult_t lane_issue(struct coll_sched *s, struct coll_lane *l, size_t i,
                                      void *mh, bool more, void **buf_p, size_t *bytes_p,
                                      struct coll_req **req_p)
{
    s->ops->buf(s->ctx, l, i, buf_p, bytes_p);
    void *buf = *buf_p;
    size_t bytes = *bytes_p;
    mh = s->ops->handle != NULL ? s->ops->handle(s->ctx, l, i, buf, bytes)
         : engine_within(l->reg, l->reg_bytes, buf, bytes) ? mh : NULL;
    return l->is_send ? coll_exec_isend_mh(l->comm, l->conn, buf, bytes, mh,
                                           more ? COLL_SEND_MORE : 0, req_p)
                      : coll_exec_irecv_mh(l->comm, l->conn, buf, bytes, mh, req_p);
}

/* Posts (or starts) pieces of l, which has some left, while ready and within
 * its window. */
static collResult_t lane_post(struct coll_sched *s, struct coll_lane *l, bool *moved_p)
{
    /* The window (fixed at start) and the piece's lag first: most passes
     * find a lane waiting on those. */
    if (l->posted - l->done >= l->window || !lane_ready(s, l, l->posted))
        return collSuccess;
    if (!l->deferred && !lane_turn(l))
        return collSuccess;
    do {
        size_t i = l->posted, slot = i & l->mask;
        if (l->deferred) {
            struct coll_step *st = &l->steps[slot];
            step_wait_released(st); /* the slot's last step */
            st->comm = l->comm;
            st->res = collSuccess;
            atomic_store_explicit(&st->state, STEP_RUNNING, memory_order_relaxed);
            l->posted++;
            s->ops->start(s->ctx, l, i, st);
            *moved_p = true;
            continue; /* to the loop's test */
        }
        /* Whether the loop goes on to piece i + 1, asked before i is posted. */
        bool more = i + 1 < l->total && i + 1 - l->done < l->window && lane_ready(s, l, i + 1);
        struct coll_lane_slot *sl = &l->slot[slot];
        size_t bytes;
        COLL_CHECK(lane_issue(s, l, i, l->mh, more, &sl->buf, &bytes, &sl->req));
        l->posted++;
        *moved_p = true;
        if (!more)
            break;
    } while (l->posted < l->total && l->posted - l->done < l->window &&
             lane_ready(s, l, l->posted));
    return collSuccess;
}

/* l->defer: hands every piece that has arrived to the runner (they arrive in
 * order), then retires, oldest first, those whose work is done. */
static collResult_t lane_complete_deferred(struct coll_sched *s, struct coll_lane *l,
                                           bool *moved_p)
{
    for (size_t i = l->done + l->running; i < l->posted; i++) {
        struct coll_lane_slot *sl = &l->slot[i & l->mask];
        bool ok;
        COLL_CHECK(coll_exec_test(l->comm, &sl->req, &ok));
        if (!ok)
            break;
        lane_hand(s, l, i, sl->buf, NULL, 0, 0);
        *moved_p = true;
    }
    while (l->running > 0 && !lane_step_running(l, l->done)) {
        size_t i = l->done;
        l->running--;
        collResult_t res = l->steps[i & l->mask].res;
        if (res != collSuccess)
            return lane_step_failed(l, i, res);
        lane_retire(s, l, moved_p);
    }
    return collSuccess;
}

/* Retires l's pieces that are done, oldest first. */
static collResult_t lane_complete(struct coll_sched *s, struct coll_lane *l, bool *moved_p)
{
    if (l->defer)
        return lane_complete_deferred(s, l, moved_p);
    while (l->done < l->posted) {
        size_t i = l->done, slot = i & l->mask;
        void *buf = NULL;
        if (l->deferred) {
            struct coll_step *st = &l->steps[slot];
            if (atomic_load_explicit(&st->state, memory_order_acquire) == STEP_RUNNING)
                return collSuccess;
            if (st->res != collSuccess) {
                coll_comm_poison(l->comm, st->res);
                return st->res;
            }
        } else {
            bool ok;
            COLL_CHECK(coll_exec_test(l->comm, &l->slot[slot].req, &ok));
            if (!ok)
                return collSuccess;
            buf = l->slot[slot].buf;
        }
        lane_retire(s, l, moved_p);
        COLL_CHECK(lane_done(s, l, i, buf));
    }
    return collSuccess;
}

/* Prepares l for the run: its comm, steps, registration and lending. */
static collResult_t lane_start(struct coll_sched *s, struct coll_lane *l)
{
    if (l->comm == NULL)
        l->comm = s->comm;
    if (l->total == 0 || l->watch)
        return collSuccess;
    if (l->deferred) {
        COLL_CHECK(coll_calloc(&l->steps, l->mask + 1));
        for (size_t i = 0; i <= l->mask; i++)
            atomic_init(&l->steps[i].state, STEP_RELEASED);
        return collSuccess;
    }
    if (l->conn == NULL)
        return collSuccess; /* found later (lane_connect) */
    if (l->reg != NULL)
        l->mh = coll_reg_handle(l->comm, l->conn, l->reg, l->reg_bytes);
    l->lending = !l->is_send && l->lend && l->conn->tp->recv_peek != NULL && l->mh == NULL;
    l->standin.conn = l->conn;
    l->defer = s->defer && !l->is_send && l->comm->step_runner != NULL &&
               (l->lending ? s->ops->consume != NULL : s->ops->done != NULL);
    if (l->defer) {
        COLL_CHECK(coll_calloc(&l->steps, l->mask + 1));
        for (size_t i = 0; i <= l->mask; i++)
            atomic_init(&l->steps[i].state, STEP_RELEASED);
    }
    return collSuccess;
}

collResult_t coll_lane_link(struct coll_comm *comm, struct coll_lane *l, int peer)
{
    if (l->is_send || comm->peers[peer].recv_conn != NULL)
        return coll_transport_get_conn(comm, peer, l->is_send, &l->conn);
    l->conn = NULL;
    l->accept = true;
    l->peer = peer;
    return collSuccess;
}

/* One look, waiting up to wait_ms, for the connection of a lane without one. */
static collResult_t lane_connect(struct coll_sched *s, struct coll_lane *l, int wait_ms,
                                 bool *moved_p)
{
    if (!l->accept)
        return collSuccess;
    COLL_CHECK(coll_transport_wait_recv_conn(l->comm, l->peer, wait_ms, &l->conn));
    if (l->conn == NULL)
        return collSuccess;
    *moved_p = true;
    return lane_start(s, l);
}

static bool lane_active(const struct coll_lane *l)
{
    return l->done < l->total;
}

/* Every lane is done (s->active counts those that are not), and so is the
 * algorithm's own work. */
static bool sched_finished(const struct coll_sched *s)
{
    return s->active == 0 && (s->ops->finished == NULL || s->ops->finished(s->ctx));
}

/* What a wait on connected lane l watches: its oldest piece in flight, or for
 * a lending lane the stand-in for its connection; NULL when nothing. */
static struct coll_req *lane_waited(const struct coll_lane *l)
{
    if (!lane_active(l) || l->deferred || l->watch || l->conn == NULL)
        return NULL;
    if (l->lending) /* while a step holds the lent bytes, only the step */
        return l->running > 0 ? NULL : (struct coll_req *)&l->standin;
    size_t i = l->done + l->running; /* the oldest piece not handed over */
    return i < l->posted ? l->slot[i & l->mask].req : NULL;
}

/* Steps of l that a wait waits for: deferred ones started, or received
 * pieces' work handed to the runner. */
static size_t lane_steps(const struct coll_lane *l)
{
    if (l->deferred)
        return lane_active(l) ? l->posted - l->done : 0;
    return l->running;
}

/* Whether l waits on something this pass could not move: a posted piece, a
 * lent one, a step. */
static bool lane_waits(const struct coll_lane *l)
{
    return lane_steps(l) > 0 || lane_waited(l) != NULL || (l->watch && lane_active(l));
}

/* The requests a wait on comm watches: the oldest of each of its lanes (a
 * lending lane's stand-in for its connection); w->steps counts the steps and
 * w->watches the watch lanes waited for (w->watch_peer: the first's rank).
 * With waiting, the indices of the lanes that wait (on a request, a step or
 * memory) go there, *nwait_p of them. */
static int sched_pending(const struct coll_sched *s, const struct coll_comm *comm,
                         struct coll_req **out, struct coll_wait *w, int *waiting,
                         int *nwait_p)
{
    int n = 0, steps = 0, watches = 0, nw = 0;
    w->watch_peer = -1;
    for (int k = 0; k < s->nlanes; k++) {
        struct coll_lane *l = &s->lanes[k];
        if (!lane_active(l) || (comm != NULL && l->comm != comm))
            continue;
        struct coll_req *r = lane_waited(l);
        size_t st = lane_steps(l);
        if (r == NULL && st == 0 && !l->watch)
            continue;
        if (r != NULL)
            out[n++] = r;
        steps += st > 0;
        if (l->watch && watches++ == 0)
            w->watch_peer = l->watch_peer;
        if (waiting != NULL)
            waiting[nw++] = k;
    }
    w->steps = steps;
    w->watches = watches;
    if (nwait_p != NULL)
        *nwait_p = nw;
    return n;
}

/* Nothing moved.  The wait runs on the comm of the first lane that waits (a
 * group's lanes may be on several): its deadline and abort flag, its peers named
 * on a timeout.  Other comms with lanes waiting answer to their own deadline and
 * abort flag first.  The wait watches every waiting lane's oldest request, the
 * chosen comm's first.  With nothing posted, it is for a missing connection, a
 * while at most. */
static collResult_t sched_idle(struct coll_sched *s, struct coll_wait *w, struct coll_req **pending,
                               int *waiting, int *nwait_p, struct coll_comm **wcomm_p, int *np_p)
{
    *np_p = -1; /* nothing kept for the next idle pass unless set below */
    struct coll_comm *comm = NULL;
    for (int k = 0; k < s->nlanes && comm == NULL; k++)
        if (lane_waits(&s->lanes[k]))
            comm = s->lanes[k].comm;
    if (comm == NULL) {
        for (int k = 0; k < s->nlanes; k++) {
            struct coll_lane *l = &s->lanes[k];
            if (lane_active(l) && !l->deferred && l->conn == NULL) {
                bool moved = false;
                return lane_connect(s, l, 10, &moved);
            }
        }
        comm = s->comm; /* progress() waits on nothing the engine sees: spin */
    }
    if (s->multi_comm) {
        int64_t now = coll_now_ns();
        for (int k = 0; k < s->nlanes; k++) {
            struct coll_comm *c = s->lanes[k].comm;
            if (c == comm || !lane_waits(&s->lanes[k]) ||
                (!atomic_load(&c->aborting) && now < c->deadline_ns))
                continue;
            struct coll_wait at_once = {.idle_since = now};
            int n = sched_pending(s, c, pending, &at_once, NULL, NULL);
            COLL_CHECK(coll_exec_idle(c, &at_once, pending, n));
        }
    }
    int np = sched_pending(s, comm, pending, w, s->multi_comm ? NULL : waiting, nwait_p);
    if (s->multi_comm)
        for (int k = 0; k < s->nlanes; k++) {
            const struct coll_lane *l = &s->lanes[k];
            if (l->comm != comm && lane_waited(l) != NULL)
                pending[np++] = lane_waited(l);
        }
    else if (*nwait_p > 0)
        *np_p = np; /* one comm: the set holds until something moves */
    *wcomm_p = comm;
    return coll_exec_idle(comm, w, pending, np);
}

/* Frees a deferred lane's steps once no completer holds one: after a failure
 * elsewhere, steps already started (a device copy) finish first, as they write
 * their step.  A step that never finishes within the timeout is left to leak
 * rather than written after being freed. */
static void lane_free_steps(struct coll_lane *l)
{
    if (l->steps == NULL)
        return;
    int64_t until = coll_now_ns() + l->comm->timeout_ms * 1000000LL;
    for (size_t k = 0; k <= l->mask; k++) {
        struct coll_step *st = &l->steps[k];
        while (atomic_load_explicit(&st->state, memory_order_acquire) == STEP_RUNNING) {
            if (coll_now_ns() >= until) {
                COLL_WARN("%s #%llu: a deferred step did not finish within %lld ms of a "
                          "failure; its state is left allocated", l->comm->op_name,
                          (unsigned long long)l->comm->seq, (long long)l->comm->timeout_ms);
                l->steps = NULL;
                return;
            }
            (void)coll_engine_block(l->comm, NULL, 0, NULL, 0, 10);
        }
    }
    for (size_t k = 0; k <= l->mask; k++)
        step_wait_released(&l->steps[k]);
    free(l->steps);
    l->steps = NULL;
}

#define ENGINE_STACK_LANES 16
#define ENGINE_STACK_SLOTS 512

/* Slots for a lane's pieces in flight: its window (or its piece count, when
 * smaller) rounded up to a power of two. */
static size_t lane_slots(const struct coll_lane *l)
{
    size_t w = l->window, n = 1;
    if (l->total < w)
        w = l->total;
    while (n < w)
        n *= 2;
    return n;
}

/* Whether s is one exchange: at most one piece per lane, every connection
 * there, nothing lent, deferred or ordered by ready(), no work of its own, one
 * comm (a round of recursive doubling, a barrier step). */
static bool sched_is_oneshot(const struct coll_sched *s)
{
    const struct coll_sched_ops *o = s->ops;
    if (s->nlanes > ENGINE_STACK_LANES || o->ready != NULL || o->progress != NULL ||
        o->finished != NULL || o->start != NULL || (s->defer && s->comm->step_runner != NULL))
        return false;
    for (const struct coll_lane *l = s->lanes, *end = l + s->nlanes; l < end; l++)
        if (l->total > 1 || l->deferred || l->after != NULL ||
            (l->comm != NULL && l->comm != s->comm) ||
            (l->total == 1 && (l->conn == NULL || (l->lend && !l->is_send))))
            return false;
    return true;
}

/* Posts the one piece of l (engine_run_oneshot). */
static inline collResult_t oneshot_post(struct coll_sched *s, struct coll_lane *l, void **buf_p,
                                        size_t *bytes_p, struct coll_req **req_p)
{
    void *mh = l->reg != NULL ? coll_reg_handle(l->comm, l->conn, l->reg, l->reg_bytes) : NULL;
    l->posted = 1;
    return lane_issue(s, l, 0, mh, false, buf_p, bytes_p, req_p);
}

/* Tests req[0..n) (NULL: done) until every one is done, waiting in
 * coll_exec_idle while a pass completes nothing.  The completion of req[j] is
 * the one piece of lane lane[j] of s, whose bytes are at bufs[j]: it gets its
 * done().  The loop of one-shot schedules (rounds), whose time at small sizes
 * is the loop's. */
static inline collResult_t
oneshot_wait(struct coll_comm *comm, struct coll_req **req, int n, size_t bytes,
             struct coll_sched *s, const int *lane, void *const *bufs)
{
    struct coll_wait w;
    coll_exec_wait_init(comm, &w, bytes);
    for (;;) {
        int left = 0;
        bool moved = false;
        for (int j = 0; j < n; j++) {
            if (req[j] == NULL)
                continue;
            bool ok;
            COLL_CHECK(coll_exec_test(comm, &req[j], &ok));
            if (!ok) {
                left++;
                continue;
            }
            moved = true;
            struct coll_lane *l = &s->lanes[lane[j]];
            l->done = 1;
            COLL_CHECK(lane_done(s, l, 0, bufs[j]));
        }
        if (left == 0)
            return collSuccess;
        if (moved)
            coll_exec_moved(&w);
        else
            COLL_CHECK(coll_exec_idle(comm, &w, req, n));
    }
}

/* The engine's loop for a one-shot schedule: post every piece (receives
 * first), then test them until done (oneshot_wait); the same rules as the
 * general loop with none of its bookkeeping, for the smallest calls. */
static collResult_t engine_run_oneshot(struct coll_sched *s)
{
    struct coll_comm *comm = s->comm;
    struct coll_req *req[ENGINE_STACK_LANES];
    void *bufs[ENGINE_STACK_LANES];
    int lane[ENGINE_STACK_LANES], n = 0;
    size_t maxb = s->piece_bytes;
    for (int pass = 0; pass < 2; pass++)
        for (int k = 0; k < s->nlanes; k++) {
            struct coll_lane *l = &s->lanes[k];
            l->comm = comm;
            if (l->total == 0 || l->is_send != (pass == 1))
                continue;
            size_t bytes;
            COLL_CHECK(oneshot_post(s, l, &bufs[n], &bytes, &req[n]));
            lane[n++] = k;
            if (bytes > maxb)
                maxb = bytes;
        }
    return oneshot_wait(comm, req, n, maxb, s, lane, bufs);
}

/* A round as a stage: lane k is x[k]. */
static void round_buf(void *ctx, const struct coll_lane *l, size_t i, void **p, size_t *bytes)
{
    const struct coll_xfer *x = ctx;
    (void)i;
    *p = x[l->tag].buf;
    *bytes = x[l->tag].bytes;
}

static const struct coll_sched_ops round_ops = {.buf = round_buf};

void coll_round_sched(struct coll_comm *comm, const struct coll_xfer *x, int n,
                      struct coll_lane *lanes, struct coll_sched *s)
{
    size_t maxb = 0;
    for (int k = 0; k < n; k++) {
        lanes[k] = (struct coll_lane){.conn = x[k].conn, .is_send = x[k].is_send,
                                      .total = x[k].bytes > 0, .tag = k};
        if (x[k].bytes > maxb)
            maxb = x[k].bytes;
    }
    *s = (struct coll_sched){.comm = comm, .ops = &round_ops, .ctx = (void *)x, .lanes = lanes,
                             .nlanes = n, .piece_bytes = maxb};
}

collResult_t coll_engine_round(struct coll_comm *comm, const struct coll_xfer *x, int n)
{
    if (n > COLL_ROUND_MAX) {
        coll_set_error(comm, "%s: a round of %d transfers (at most %d)", comm->op_name, n,
                       COLL_ROUND_MAX);
        return collInternalError;
    }
    struct coll_lane lanes[COLL_ROUND_MAX];
    struct coll_sched s;
    coll_round_sched(comm, x, n, lanes, &s);
    return coll_engine_run(&s);
}

/* Whether every lane of s is a watch lane of its comm (ll's reads). */
static bool sched_is_watch(const struct coll_sched *s)
{
    for (int k = 0; k < s->nlanes; k++)
        if (!s->lanes[k].watch || (s->lanes[k].comm != NULL && s->lanes[k].comm != s->comm))
            return false;
    return s->nlanes > 0 && s->ops->progress == NULL && s->ops->finished == NULL;
}

/* The engine's loop for a schedule of watch lanes alone: the same rules as the
 * general loop (take what is there, wait under exec.c's policy for memory),
 * none of its bookkeeping: ll's calls take a microsecond or less. */
static collResult_t engine_run_watch(struct coll_sched *s)
{
    collResult_t res;
    struct coll_wait w;
    bool waited = false; /* w set up: at the first wait, which a call may not need */
    s->active = 0;
    for (int k = 0; k < s->nlanes; k++) {
        s->lanes[k].comm = s->comm;
        s->active += lane_active(&s->lanes[k]);
    }
    bool (*ready)(void *, const struct coll_lane *, size_t) = s->ops->ready;
    collResult_t (*done)(void *, struct coll_lane *, size_t, void *) = s->ops->done;
    while (s->active > 0) {
        bool moved = false;
        for (int k = 0; k < s->nlanes; k++) {
            struct coll_lane *l = &s->lanes[k];
            while (l->done < l->total && ready(s->ctx, l, l->done)) {
                size_t i = l->done++;
                moved = true;
                s->active -= l->done == l->total;
                if (done != NULL && (res = done(s->ctx, l, i, NULL)) != collSuccess) {
                    coll_comm_poison(s->comm, res);
                    return res;
                }
            }
        }
        if (moved) {
            if (waited)
                coll_exec_moved(&w);
            continue;
        }
        if (!waited) {
            coll_exec_wait_init(s->comm, &w, 0);
            waited = true;
        }
        /* The first lane that waits: its piece polled in a tight loop, the
         * wait's policy asked between polls. */
        struct coll_lane *l = s->lanes;
        while (!lane_active(l))
            l++;
        w.watches = s->active;
        w.watch_peer = l->watch_peer;
        do
            COLL_CHECK(coll_exec_idle(s->comm, &w, NULL, 0));
        while (!ready(s->ctx, l, l->done));
    }
    return collSuccess;
}

/* The loop's state for one schedule: on the stack of coll_engine_run, or
 * kept by a call in flight (coll_run_start). */
struct coll_run {
    struct coll_sched *s;
    struct coll_req **pending;
    /* Lane indices: those that wait (the last idle pass's), and the order of a
     * pass (the lanes with pieces, receives before sends). */
    int *waiting, *order, nwait, norder;
    struct coll_lane_slot *slots;
    size_t nslots_heap;      /* slots allocated (not the stack's) */
    int nlanes_heap;         /* pending and waiting allocated for this many lanes */
    struct coll_wait w;
    /* The last idle pass's wait set, reused while nothing moves (a spin costs
     * a pass and a look at the clock, not a rebuild of the set): np requests
     * on wcomm; -1 none. */
    struct coll_comm *wcomm;
    int np;
    struct coll_req *stack[ENGINE_STACK_LANES];
    int istack[2 * ENGINE_STACK_LANES];
    /* The slots are written before they are read: not cleared. */
    struct coll_lane_slot stack_slots[ENGINE_STACK_SLOTS];
};

/* Back to the arrays in r itself: per lane (pending, waiting), per piece (slots). */
static void run_free_lane_arrays(struct coll_run *r)
{
    if (r->pending != r->stack)
        free(r->pending);
    if (r->waiting != r->istack)
        free(r->waiting);
    r->pending = r->stack;
    r->waiting = r->istack;
    r->nlanes_heap = 0;
}

static void run_free_slots(struct coll_run *r)
{
    if (r->slots != r->stack_slots)
        free(r->slots);
    r->slots = r->stack_slots;
    r->nslots_heap = 0;
}

static void run_free_arrays(struct coll_run *r)
{
    run_free_lane_arrays(r);
    run_free_slots(r);
}

/* Sets r up for s: its lanes' windows, slots and order, and starts them. */
static collResult_t run_start(struct coll_run *r, struct coll_sched *s)
{
    r->s = s;
    r->np = -1;
    r->nwait = r->norder = 0;
    r->wcomm = s->comm;
    if (r->pending == NULL) { /* first use */
        r->pending = r->stack;
        r->waiting = r->istack;
        r->slots = r->stack_slots;
    }
    size_t nslots = 0;
    for (int k = 0; k < s->nlanes; k++) {
        struct coll_lane *l = &s->lanes[k];
        l->window = lane_window(l); /* the one lane_slots and lane_post read */
        l->mask = lane_slots(l) - 1;
        if (l->total > 0 && !l->deferred && !l->watch)
            nslots += l->mask + 1;
    }
    if (s->nlanes > ENGINE_STACK_LANES && s->nlanes > r->nlanes_heap) {
        run_free_lane_arrays(r);
        struct coll_req **pending = calloc((size_t)s->nlanes, sizeof(*pending));
        int *waiting = malloc(2 * (size_t)s->nlanes * sizeof(*waiting));
        if (pending == NULL || waiting == NULL) {
            free(pending);
            free(waiting);
            coll_set_error(s->comm, "%s: out of memory for %d lanes", s->comm->op_name,
                           s->nlanes);
            return collSystemError;
        }
        r->pending = pending;
        r->waiting = waiting;
        r->nlanes_heap = s->nlanes;
    }
    if (nslots > ENGINE_STACK_SLOTS && nslots > r->nslots_heap) {
        run_free_slots(r);
        struct coll_lane_slot *slots = malloc(nslots * sizeof(*slots));
        if (slots == NULL) {
            coll_set_error(s->comm, "%s: out of memory for %zu pieces in flight",
                           s->comm->op_name, nslots);
            return collSystemError;
        }
        r->slots = slots;
        r->nslots_heap = nslots;
    }
    r->order = r->waiting + s->nlanes;
    for (int pass = 0; pass < 2; pass++) /* receives before sends */
        for (int k = 0; k < s->nlanes; k++)
            if (s->lanes[k].total > 0 && s->lanes[k].is_send == (pass == 1))
                r->order[r->norder++] = k;
    s->multi_comm = false;
    s->active = 0;
    for (int k = 0, at = 0; k < s->nlanes; k++) {
        struct coll_lane *l = &s->lanes[k];
        if (l->total > 0 && !l->deferred && !l->watch) {
            l->slot = r->slots + at;
            at += (int)(l->mask + 1);
        }
        COLL_CHECK(lane_start(s, l));
        s->multi_comm |= l->comm != s->comm;
        s->active += lane_active(l);
    }
    if (s->last)
        coll_inflight_last(s->comm, s);
    coll_exec_wait_init(s->comm, &r->w, s->piece_bytes);
    return collSuccess;
}

/* One pass over r's lanes.  After an idle pass that kept its wait set, only
 * the lanes that wait can have changed: those alone are looked at while
 * nothing moves, and the whole pass is made once something does. */
static collResult_t run_pass(struct coll_run *r, bool *moved_p)
{
    struct coll_sched *s = r->s;
    bool moved = false;
    if (r->np >= 0) {
        for (int j = 0; j < r->nwait; j++) {
            struct coll_lane *l = &s->lanes[r->waiting[j]];
            if (l->watch)
                COLL_CHECK(lane_watch(s, l, &moved));
            else if (l->lending)
                COLL_CHECK(lane_take(s, l, &moved));
            else
                COLL_CHECK(lane_complete(s, l, &moved));
        }
        *moved_p = moved;
        if (!moved)
            return collSuccess;
        r->np = -1;
        coll_exec_moved(&r->w);
        if (sched_finished(s))
            return collSuccess;
    }
    for (int j = 0; j < r->norder; j++) {
        struct coll_lane *l = &s->lanes[r->order[j]];
        if (l->watch) {
            COLL_CHECK(lane_watch(s, l, &moved));
            continue;
        }
        /* Nothing left to post (or take) on it. */
        if (l->lending ? !lane_active(l) : l->posted == l->total)
            continue;
        if (l->conn == NULL && !l->deferred)
            COLL_CHECK(lane_connect(s, l, 0, &moved));
        if (l->conn == NULL && !l->deferred)
            continue;
        if (l->lending)
            COLL_CHECK(lane_take(s, l, &moved));
        else
            COLL_CHECK(lane_post(s, l, &moved));
    }
    for (int k = 0; k < s->nlanes; k++) {
        struct coll_lane *l = &s->lanes[k];
        if (!l->lending && l->done < l->posted)
            COLL_CHECK(lane_complete(s, l, &moved));
    }
    if (s->ops->progress != NULL && s->ops->progress(s->ctx))
        moved = true;
    *moved_p = moved;
    return collSuccess;
}

/* The end of r's schedule, finished or failed: steps let go, arrays kept. */
static void run_end(struct coll_run *r)
{
    struct coll_sched *s = r->s;
    if (s == NULL)
        return;
    if (s->last)
        coll_inflight_last(s->comm, NULL);
    for (int k = 0; k < s->nlanes; k++)
        if (s->lanes[k].steps != NULL)
            lane_free_steps(&s->lanes[k]);
    r->s = NULL;
}

collResult_t coll_run_start(struct coll_run **r_p, struct coll_sched *s)
{
    if (*r_p == NULL) {
        struct coll_run *r = malloc(sizeof(*r));
        if (r == NULL) {
            coll_set_error(s->comm, "%s: out of memory for a call in flight", s->comm->op_name);
            return collSystemError;
        }
        r->s = NULL;
        r->pending = NULL;
        r->nslots_heap = 0;
        r->nlanes_heap = 0;
        *r_p = r;
    }
    if (s->cut_pieces > 0)
        coll_flight_cut(s->comm, s->cut_bytes, s->cut_pieces);
    collResult_t res = run_start(*r_p, s);
    if (res != collSuccess)
        run_end(*r_p);
    return res;
}

collResult_t coll_run_pass(struct coll_run *r, bool *moved_p)
{
    r->np = -1; /* beside other calls every pass is whole: their waits are one */
    collResult_t res = run_pass(r, moved_p);
    if (*moved_p)
        coll_exec_moved(&r->w);
    return res;
}

bool coll_run_finished(const struct coll_run *r)
{
    return sched_finished(r->s);
}

int coll_run_lanes(const struct coll_run *r)
{
    return r->s->nlanes;
}

int coll_run_pending(struct coll_run *r, struct coll_req **out, int *steps_p, int *watches_p,
                     bool *unconnected_p)
{
    struct coll_sched *s = r->s;
    struct coll_wait w = {0};
    int n = sched_pending(s, NULL, out, &w, NULL, NULL);
    *steps_p += w.steps;
    *watches_p += w.watches;
    for (int k = 0; k < s->nlanes; k++) {
        const struct coll_lane *l = &s->lanes[k];
        if (lane_active(l) && !l->deferred && !l->watch && l->conn == NULL)
            *unconnected_p = true;
    }
    return n;
}

void coll_run_end(struct coll_run *r)
{
    run_end(r);
}

void coll_run_free(struct coll_run *r)
{
    if (r == NULL)
        return;
    run_end(r);
    if (r->pending != NULL)
        run_free_arrays(r);
    free(r);
}

collResult_t coll_engine_run(struct coll_sched *s)
{
    if (s->cut_pieces > 0)
        coll_flight_cut(s->comm, s->cut_bytes, s->cut_pieces);
    if (sched_is_watch(s))
        return engine_run_watch(s);
    /* Behind another call in flight, the pieces wait for their connections. */
    if (sched_is_oneshot(s) && !coll_inflight_behind_any(s->comm)) {
        collResult_t res = engine_run_oneshot(s);
        if (s->last)
            coll_inflight_last(s->comm, NULL);
        return res;
    }
    struct coll_run r;
    r.pending = NULL;
    r.nslots_heap = 0;
    r.nlanes_heap = 0;
    collResult_t res = run_start(&r, s);
    while (res == collSuccess && !sched_finished(s)) {
        bool moved;
        if ((res = run_pass(&r, &moved)) != collSuccess)
            break;
        if (moved)
            coll_exec_moved(&r.w);
        else if (r.np >= 0)
            res = coll_exec_idle(r.wcomm, &r.w, r.pending, r.np);
        else
            res = sched_idle(s, &r.w, r.pending, r.waiting, &r.nwait, &r.wcomm, &r.np);
    }
    run_end(&r);
    run_free_arrays(&r);
    return res;
}

collResult_t coll_prog_run(struct coll_prog *p)
{
    collResult_t res;
    while ((res = p->next(p)) == collSuccess && p->sched != NULL)
        if ((res = coll_engine_run(p->sched)) != collSuccess)
            break;
    if (p->fini != NULL)
        p->fini(p);
    return res;
}
