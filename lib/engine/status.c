/* Status queries (status.h): every live communicator's bootstrap listener
 * answers what its rank is doing, for `collrun status` and `collinfo --status`.
 *
 *   client --request(STAT, secret, ask)--> any rank's bootstrap listener
 *          <--this rank's answer (ask RANK), or every rank's listener (TABLE)--
 *
 * After init only collCommShrink reads that listener, and a rank blocked in a
 * collective reads nothing, so one thread per process, the responder, answers
 * for all its communicators: it polls their listeners, waking at least every
 * STATUS_TICK_MS, accepts, and sorts each connection by its first 4 bytes,
 * read with MSG_PEEK so that nothing of it is consumed:
 *
 *   "STAT"   its table of hellos (coll_hellos, as every listener reads them):
 *            dropped unless it shows the secret; otherwise answered and closed
 *   "SHRK"   set aside untouched: a join of a shrink this rank may coordinate,
 *            which takes them over (coll_status_pause) and reads them itself
 *   nothing, then closed: closed quietly; a peer checking that this rank is
 *            alive (lib/engine/transport.c, a shrink's probe)
 *   anything else, or not 4 bytes within COLL_HELLO_WAIT_MS: dropped and
 *            counted, the first one logged at WARN
 *
 * The answer is read from the communicator as another thread may read it: the
 * flight recorder's records through their sequence locks (coll_flight_copy),
 * and the atomics for the poison, the revoke, the blame and the peer the last
 * wait was for; the rest (rank, addresses, name) is fixed after init.  The
 * responder touches a communicator only while it is registered: registration
 * comes at the end of init, and coll_status_unregister, first in destroy,
 * returns only once the responder's poll no longer holds its descriptors.
 *
 * The one mutable global of the engine: the list of live communicators, which
 * a thread per process needs.  `lock` guards it and everything the responder
 * reads or writes of an entry (the thread sleeps in poll without it); `life`
 * orders starting and joining the thread.  Answers are sent under `lock`,
 * each within STATUS_SEND_MS, which bounds how long a pause or a destroy waits.
 */
#include "status.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "flight.h"
#include "internal.h"
#include "socket.h"

#define STATUS_HELLOS_MAX 16 /* status requests being read, per listener */
#define STATUS_TICK_MS 250   /* the responder wakes at least this often (ages, new comms) */
#define STATUS_SEND_MS 500   /* an answer the client does not take within this is dropped */

_Static_assert(COLL_FLIGHT_FAILED == 3, "wire.c bounds a call's state by COLL_FLIGHT_FAILED");

struct status_conn {
    int fd;
    int64_t since_ns; /* accepted at */
    bool partial;     /* 1 to 3 bytes came: polled for a close only, aged by the tick */
};

struct status_entry {
    struct coll_comm *comm;
    bool paused;                /* a shrink reads the listener */
    int nsort, npark;
    /* connections whose first 4 bytes have not come */
    struct status_conn sort[COLL_STATUS_UNSORTED_MAX];
    struct status_conn *park;   /* comm->nranks: a join from every other rank */
    struct coll_hellos hellos;  /* status requests; also names the listener in the log */
};

static struct {
    pthread_mutex_t life;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    pthread_t thread;
    bool running;               /* under life */
    bool stop;
    int wake[2];                /* a byte wakes the responder's poll */
    struct status_entry **entries;
    int n, cap;
    uint64_t gen;               /* bumped by each removal */
    uint64_t polling_gen;       /* gen when the current poll began; UINT64_MAX: not polling */
} responder = {.life = PTHREAD_MUTEX_INITIALIZER,
               .lock = PTHREAD_MUTEX_INITIALIZER,
               .cond = PTHREAD_COND_INITIALIZER,
               .wake = {-1, -1},
               .polling_gen = UINT64_MAX};

static int status_check(const void *buf, size_t got, const void *secret, const char **why_p)
{
    struct coll_status_req q;
    return coll_wire_status_req(buf, got, secret, &q, why_p);
}

static void status_wake(void)
{
    if (responder.wake[1] >= 0) {
        char b = 0;
        (void)!write(responder.wake[1], &b, 1);
    }
}

static int status_find(const struct coll_comm *comm)
{
    for (int i = 0; i < responder.n; i++)
        if (responder.entries[i]->comm == comm)
            return i;
    return -1;
}

/* Closes a[i], counted as a dropped client (the first logged), and removes it. */
static void status_drop(struct status_entry *e, struct status_conn *a, int *n, int i,
                        const char *why)
{
    close(a[i].fd);
    coll_hellos_dropped(&e->hellos, why);
    a[i] = a[--*n];
}

static int status_oldest(const struct status_conn *a, int n)
{
    int old = 0;
    for (int i = 1; i < n; i++)
        if (a[i].since_ns < a[old].since_ns)
            old = i;
    return old;
}

static bool status_closed(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

/* Sorts e->sort[i] by its first 4 bytes, or leaves it there for later. */
static void status_sort_one(struct status_entry *e, int i, int64_t now)
{
    struct status_conn *c = &e->sort[i];
    uint32_t magic;
    ssize_t r = recv(c->fd, &magic, sizeof(magic), MSG_PEEK | MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        /* Closed (or reset) having sent nothing: a liveness probe. */
        close(c->fd);
        e->sort[i] = e->sort[--e->nsort];
        return;
    }
    if (r < (ssize_t)sizeof(magic)) {
        if (r > 0 && status_closed(c->fd))
            status_drop(e, e->sort, &e->nsort, i, "it closed before its handshake was whole");
        else if (now - c->since_ns > COLL_HELLO_WAIT_MS * 1000000LL)
            status_drop(e, e->sort, &e->nsort, i,
                        "its handshake was not whole within 5 s (a half-open or slow client)");
        else
            c->partial = r > 0;
        return;
    }
    struct status_conn conn = *c;
    e->sort[i] = e->sort[--e->nsort];
    if (magic == COLL_STATUS_MAGIC) {
        if (!coll_hellos_adopt(&e->hellos, conn.fd)) {
            int n = 1;
            status_drop(e, &conn, &n, 0, "too many status requests at once");
        }
    } else if (magic == COLL_SHRINK_MAGIC) {
        if (e->npark == e->comm->nranks)
            status_drop(e, e->park, &e->npark, status_oldest(e->park, e->npark),
                        "too many shrink joins waiting for a shrink");
        conn.partial = false;
        e->park[e->npark++] = conn;
    } else {
        int n = 1;
        status_drop(e, &conn, &n, 0, "it is not a libcollective handshake (wrong magic)");
    }
}

static void status_answer(struct coll_comm *comm, int fd, const struct coll_status_req *req)
{
    int err;
    int64_t deadline = coll_now_ns() + STATUS_SEND_MS * 1000000LL;
    if (req->ask == COLL_STATUS_ASK_RANK) {
        struct coll_status_reply rep;
        coll_status_fill(comm, &rep);
        (void)coll_socket_send_all(fd, &rep, sizeof(rep), deadline, &err);
        return;
    }
    struct coll_status_table t = {.magic = COLL_STATUS_MAGIC, .version = COLL_STATUS_VERSION,
                                  .nranks = comm->nranks, .rank = comm->rank};
    memcpy(t.secret, comm->secret, COLL_SECRET_BYTES);
    size_t bytes = sizeof(t) + (size_t)comm->nranks * sizeof(struct coll_status_addr);
    unsigned char *buf = calloc(1, bytes);
    if (buf == NULL)
        return; /* the client sees the connection close unanswered */
    memcpy(buf, &t, sizeof(t));
    for (int k = 0; k < comm->nranks; k++) {
        const struct coll_rank_info *pi = &comm->peers[k].info;
        struct coll_status_addr a;
        memset(&a, 0, sizeof(a));
        a.rank = k;
        a.pid = pi->pid;
        a.addrlen = pi->boot_addrlen;
        a.addr = pi->boot_addr;
        snprintf(a.host, sizeof(a.host), "%s", pi->host);
        memcpy(buf + sizeof(t) + (size_t)k * sizeof(a), &a, sizeof(a));
    }
    (void)coll_socket_send_all(fd, buf, bytes, deadline, &err);
    free(buf);
}

/* Accepts, sorts and answers what came on e's listener. */
static void status_serve(struct status_entry *e, int64_t now)
{
    int lfd = e->comm->boot_listen_fd;
    bool sort_frees = true; /* the last sort of the full table made room */
    for (int k = 0; k < 4 * COLL_STATUS_UNSORTED_MAX; k++) {
        if (e->nsort == COLL_STATUS_UNSORTED_MAX) {
            /* Full, and someone waits to be accepted: sort what came (a client
             * of ours sends its message with its connect; a burst of shrink
             * joins fills the table faster than a pass sorts it), and only
             * when that makes no room does the oldest go.  A sort that made
             * none (a flood of silent clients) is not tried again this pass. */
            struct pollfd lp = {.fd = lfd, .events = POLLIN};
            if (poll(&lp, 1, 0) != 1)
                break;
            if (sort_frees) {
                for (int i = e->nsort - 1; i >= 0; i--)
                    status_sort_one(e, i, now);
                sort_frees = e->nsort < COLL_STATUS_UNSORTED_MAX;
            }
            if (!sort_frees)
                status_drop(e, e->sort, &e->nsort, status_oldest(e->sort, e->nsort),
                            "the table of waiting clients was full (a flood of connections)");
        }
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0)
            break;
        e->sort[e->nsort++] = (struct status_conn){.fd = fd, .since_ns = now};
    }
    for (int i = e->nsort - 1; i >= 0; i--)
        status_sort_one(e, i, now);
    struct coll_status_req req;
    int fd;
    while ((fd = coll_hellos_next(-1, &e->hellos, &req)) >= 0) {
        status_answer(e->comm, fd, &req);
        close(fd);
    }
    /* A member that gave up on this rank closes its join. */
    for (int i = e->npark - 1; i >= 0; i--) {
        if (status_closed(e->park[i].fd)) {
            close(e->park[i].fd);
            e->park[i] = e->park[--e->npark];
        }
    }
}

static void *status_main(void *arg)
{
    (void)arg;
    struct pollfd *pfds = NULL;
    size_t pcap = 0;
    pthread_mutex_lock(&responder.lock);
    while (!responder.stop) {
        size_t need = 1;
        for (int i = 0; i < responder.n; i++) {
            const struct status_entry *e = responder.entries[i];
            if (!e->paused)
                need += 1 + (size_t)(e->nsort + e->npark + e->hellos.npend);
        }
        if (need > pcap) {
            struct pollfd *p = realloc(pfds, need * sizeof(*p));
            if (p != NULL) {
                pfds = p;
                pcap = need;
            }
        }
        nfds_t n = 0;
        if (pfds != NULL) {
            pfds[n++] = (struct pollfd){.fd = responder.wake[0], .events = POLLIN};
            for (int i = 0; i < responder.n && need <= pcap; i++) {
                const struct status_entry *e = responder.entries[i];
                if (e->paused)
                    continue;
                pfds[n++] = (struct pollfd){.fd = e->comm->boot_listen_fd, .events = POLLIN};
                for (int k = 0; k < e->nsort; k++)
                    pfds[n++] = (struct pollfd){
                        .fd = e->sort[k].fd,
                        .events = (short)(e->sort[k].partial ? POLLRDHUP : POLLIN | POLLRDHUP)};
                for (int k = 0; k < e->hellos.npend; k++)
                    pfds[n++] = (struct pollfd){.fd = e->hellos.pend[k].fd, .events = POLLIN};
                for (int k = 0; k < e->npark; k++)
                    pfds[n++] = (struct pollfd){.fd = e->park[k].fd, .events = POLLRDHUP};
            }
        }
        responder.polling_gen = responder.gen;
        pthread_mutex_unlock(&responder.lock);
        if (poll(pfds, n, STATUS_TICK_MS) < 0 && errno != EINTR) {
            struct timespec ts = {0, STATUS_TICK_MS * 1000000L};
            nanosleep(&ts, NULL); /* out of memory for the set: the tick still ages clients */
        }
        pthread_mutex_lock(&responder.lock);
        responder.polling_gen = UINT64_MAX;
        pthread_cond_broadcast(&responder.cond);
        char b[64];
        while (read(responder.wake[0], b, sizeof(b)) > 0) {
        }
        if (responder.stop)
            break;
        int64_t now = coll_now_ns();
        for (int i = 0; i < responder.n; i++)
            if (!responder.entries[i]->paused)
                status_serve(responder.entries[i], now);
    }
    pthread_mutex_unlock(&responder.lock);
    free(pfds);
    return NULL;
}

/* fork() copies this state but not the thread: the child starts afresh, with
 * no communicator registered (those it inherited are its parent's), and the
 * locks held across the fork so that none is copied while taken. */
static void status_fork_prepare(void)
{
    pthread_mutex_lock(&responder.life);
    pthread_mutex_lock(&responder.lock);
}

static void status_fork_parent(void)
{
    pthread_mutex_unlock(&responder.lock);
    pthread_mutex_unlock(&responder.life);
}

static void status_fork_child(void)
{
    if (responder.running) {
        close(responder.wake[0]);
        close(responder.wake[1]);
    }
    responder.wake[0] = responder.wake[1] = -1;
    responder.running = responder.stop = false;
    responder.entries = NULL; /* the parent's: left as they are */
    responder.n = responder.cap = 0;
    responder.polling_gen = UINT64_MAX;
    pthread_mutex_unlock(&responder.lock);
    pthread_mutex_unlock(&responder.life);
}

static pthread_once_t status_atfork_once = PTHREAD_ONCE_INIT;

static void status_atfork(void)
{
    (void)pthread_atfork(status_fork_prepare, status_fork_parent, status_fork_child);
}

/* Under life: starts the thread, with every signal blocked (they belong to the
 * application's threads). */
static collResult_t status_start(void)
{
    (void)pthread_once(&status_atfork_once, status_atfork);
    if (pipe2(responder.wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        COLL_INFO(COLL_SUBSYS_INIT, "status: cannot create a pipe: %s", strerror(errno));
        responder.wake[0] = responder.wake[1] = -1;
        return collSystemError;
    }
    responder.stop = false;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&responder.thread, NULL, status_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        COLL_INFO(COLL_SUBSYS_INIT, "status: cannot start the responder thread: %s",
                  strerror(rc));
        close(responder.wake[0]);
        close(responder.wake[1]);
        responder.wake[0] = responder.wake[1] = -1;
        return collSystemError;
    }
    responder.running = true;
    return collSuccess;
}

/* Under life, with no communicator left: ends the thread. */
static void status_stop(void)
{
    pthread_mutex_lock(&responder.lock);
    responder.stop = true;
    pthread_mutex_unlock(&responder.lock);
    status_wake();
    pthread_join(responder.thread, NULL);
    close(responder.wake[0]);
    close(responder.wake[1]);
    responder.wake[0] = responder.wake[1] = -1;
    responder.running = false;
    free(responder.entries);
    responder.entries = NULL;
    responder.cap = 0;
}

collResult_t coll_status_register(struct coll_comm *comm)
{
    struct status_entry *e;
    COLL_CHECK(coll_calloc(&e, 1));
    e->comm = comm;
    collResult_t res = coll_calloc(&e->park, (size_t)comm->nranks);
    if (res == collSuccess)
        res = coll_hellos_init(&e->hellos, comm->boot_listen_fd, "status: bootstrap listener",
                               STATUS_HELLOS_MAX, sizeof(struct coll_status_req), status_check,
                               comm->secret);
    if (res != collSuccess) {
        free(e->park);
        free(e);
        return res;
    }
    pthread_mutex_lock(&responder.life);
    if (!responder.running)
        res = status_start();
    if (res == collSuccess) {
        pthread_mutex_lock(&responder.lock);
        if (responder.n == responder.cap) {
            int cap = responder.cap ? 2 * responder.cap : 8;
            struct status_entry **p = realloc(responder.entries, (size_t)cap * sizeof(*p));
            if (p != NULL) {
                responder.entries = p;
                responder.cap = cap;
            }
        }
        if (responder.n < responder.cap)
            responder.entries[responder.n++] = e;
        else
            res = collSystemError;
        pthread_mutex_unlock(&responder.lock);
        if (res == collSuccess)
            status_wake();
        else if (responder.n == 0)
            status_stop();
    }
    pthread_mutex_unlock(&responder.life);
    if (res != collSuccess) {
        coll_hellos_fini(&e->hellos);
        free(e->park);
        free(e);
        return res;
    }
    const struct coll_rank_info *me = &comm->peers[comm->rank].info;
    char a[COLL_ADDR_STRLEN];
    coll_socket_addr_str((const struct sockaddr *)&me->boot_addr, a, sizeof(a));
    COLL_INFO(COLL_SUBSYS_BOOT, "rank %d of %d answers status queries on its bootstrap "
              "listener %s (collinfo --status %s)", comm->rank, comm->nranks, a, a);
    return collSuccess;
}

/* Under lock: returns once the responder's poll, if any, began after the
 * removal that made gen. */
static void status_wait_poll(uint64_t gen)
{
    status_wake();
    while (responder.polling_gen < gen)
        pthread_cond_wait(&responder.cond, &responder.lock);
}

void coll_status_unregister(struct coll_comm *comm)
{
    pthread_mutex_lock(&responder.life);
    pthread_mutex_lock(&responder.lock);
    struct status_entry *e = NULL;
    int i = status_find(comm);
    if (i >= 0) {
        e = responder.entries[i];
        responder.entries[i] = responder.entries[--responder.n];
        status_wait_poll(++responder.gen);
    }
    bool last = responder.running && responder.n == 0;
    pthread_mutex_unlock(&responder.lock);
    if (last)
        status_stop();
    pthread_mutex_unlock(&responder.life);
    if (e == NULL)
        return;
    for (int k = 0; k < e->nsort; k++)
        close(e->sort[k].fd);
    for (int k = 0; k < e->npark; k++)
        close(e->park[k].fd);
    coll_hellos_fini(&e->hellos);
    free(e->park);
    free(e);
}

int coll_status_pause(struct coll_comm *comm, int *fds, int cap)
{
    int n = 0;
    pthread_mutex_lock(&responder.lock);
    int i = status_find(comm);
    if (i >= 0) {
        struct status_entry *e = responder.entries[i];
        e->paused = true;
        /* The joins first: they are what the shrink wants. */
        struct status_conn *lists[2] = {e->park, e->sort};
        int counts[2] = {e->npark, e->nsort};
        for (int l = 0; l < 2; l++) {
            for (int k = 0; k < counts[l]; k++) {
                if (n < cap)
                    fds[n++] = lists[l][k].fd;
                else
                    close(lists[l][k].fd);
            }
        }
        e->npark = e->nsort = 0;
        /* Status requests half read: their clients see the connection close. */
        for (int k = 0; k < e->hellos.npend; k++)
            close(e->hellos.pend[k].fd);
        e->hellos.npend = 0;
        /* The descriptors handed over leave the responder's poll. */
        status_wait_poll(++responder.gen);
    }
    pthread_mutex_unlock(&responder.lock);
    return n;
}

void coll_status_resume(struct coll_comm *comm)
{
    pthread_mutex_lock(&responder.lock);
    int i = status_find(comm);
    if (i >= 0)
        responder.entries[i]->paused = false;
    pthread_mutex_unlock(&responder.lock);
    status_wake();
}

/* One record as the wire carries it; now on the recorder's (coarse) clock. */
static void status_call(struct coll_status_call *c, const struct coll_flight_copy *r, int64_t now)
{
    bool open = r->state == COLL_FLIGHT_ISSUED || r->state == COLL_FLIGHT_RUNNING;
    c->seq = r->seq;
    c->count = r->count;
    c->dtype = r->dtype;
    c->op = r->op;
    c->root = r->root;
    c->peer = r->peer;
    c->state = r->state;
    c->result = r->result;
    int64_t since = open || r->end_ns == 0 ? r->start_ns : r->end_ns;
    c->age_ms = now > since ? (now - since) / 1000000 : 0;
    c->took_ms = open ? -1 : r->end_ns > r->start_ns ? (r->end_ns - r->start_ns) / 1000000 : 0;
    snprintf(c->name, sizeof(c->name), "%s", r->name ? r->name : "?");
    snprintf(c->algo, sizeof(c->algo), "%s", r->algo ? r->algo : "");
}

/* A rank the comm names, or -1 when out of range (or none). */
static int32_t status_rank(const struct coll_comm *comm, int r)
{
    return r >= 0 && r < comm->nranks ? r : -1;
}

void coll_status_fill(struct coll_comm *comm, struct coll_status_reply *rep)
{
    memset(rep, 0, sizeof(*rep));
    rep->magic = COLL_STATUS_MAGIC;
    memcpy(rep->secret, comm->secret, COLL_SECRET_BYTES);
    rep->version = COLL_STATUS_VERSION;
    rep->rank = comm->rank;
    rep->nranks = comm->nranks;
    rep->pid = comm->peers[comm->rank].info.pid;
    snprintf(rep->host, sizeof(rep->host), "%s", comm->peers[comm->rank].info.host);
    snprintf(rep->comm_name, sizeof(rep->comm_name), "%s", comm->name);
    rep->error = atomic_load(&comm->async_error);
    rep->revoked_by = status_rank(comm, atomic_load(&comm->revoked_by));
    rep->failed_peer = status_rank(comm, atomic_load(&comm->failed_peer));
    rep->wait_peer =
        status_rank(comm, atomic_load_explicit(&comm->wait_peer, memory_order_relaxed));
    rep->flags = (atomic_load(&comm->aborting) ? COLL_STATUS_F_ABORTING : 0) |
                 (atomic_load(&comm->finalized) ? COLL_STATUS_F_FINALIZED : 0);
    rep->cur.state = rep->last.state = -1;
    uint64_t count = coll_flight_count(comm);
    rep->calls = count;
    uint64_t first = count > COLL_FLIGHT_RECORDS - 1 ? count - (COLL_FLIGHT_RECORDS - 1) : 0;
    int64_t now = coll_coarse_ns();
    struct coll_flight_copy cur, r;
    bool have_cur = false, have_last = false;
    for (uint64_t i = count; i-- > first;) {
        bool ok = false;
        for (int tries = 0; tries < 100 && !ok; tries++)
            ok = coll_flight_copy(comm, i, &r);
        if (!ok)
            continue;
        if (r.state == COLL_FLIGHT_ISSUED || r.state == COLL_FLIGHT_RUNNING) {
            rep->open++;
            cur = r; /* newest first: the last one kept is the oldest in progress */
            have_cur = true;
        } else if (!have_last) {
            status_call(&rep->last, &r, now);
            have_last = true;
        }
    }
    if (!have_cur)
        return;
    status_call(&rep->cur, &cur, now);
    /* Its peers, the one waited for first; then the other peers together. */
    int n = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int k = 0; k <= cur.npeers && n < COLL_STATUS_PEERS; k++) {
            const struct coll_flight_copy_peer *p = &cur.peers[k];
            bool waited = p->peer >= 0 && p->peer == rep->wait_peer;
            if (waited != (pass == 0) || status_rank(comm, p->peer) != p->peer)
                continue;
            if (p->peer < 0 && p->sent == 0 && p->sent_posted == 0 && p->recvd == 0 &&
                p->recvd_posted == 0)
                continue;
            rep->peers[n++] = (struct coll_status_peer){
                .peer = p->peer, .sent = p->sent, .sent_posted = p->sent_posted,
                .recvd = p->recvd, .recvd_posted = p->recvd_posted};
        }
    }
    rep->npeers = n;
}

void coll_status_publish(struct coll_comm *comm, const char *path)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof(tmp), "%s.%d.tmp", path, (int)getpid()) >= (int)sizeof(tmp)) {
        COLL_INFO(COLL_SUBSYS_INIT, "status: COLL_STATUS_FILE %s is too long", path);
        return;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (f == NULL) {
        COLL_INFO(COLL_SUBSYS_INIT, "status: cannot write COLL_STATUS_FILE %s: %s", tmp,
                  strerror(errno));
        if (fd >= 0)
            close(fd);
        return;
    }
    fprintf(f, "coll-status %u\nnranks %d\n", COLL_STATUS_VERSION, comm->nranks);
    for (int k = 0; k < comm->nranks; k++) {
        const struct coll_rank_info *pi = &comm->peers[k].info;
        char a[COLL_ADDR_STRLEN], host[sizeof(pi->host)];
        coll_socket_addr_str((const struct sockaddr *)&pi->boot_addr, a, sizeof(a));
        snprintf(host, sizeof(host), "%s", pi->host);
        for (char *c = host; *c; c++)
            if (*c <= ' ' || *c == 0x7f)
                *c = '?';
        fprintf(f, "rank %d %s %d %s\n", k, a, (int)pi->pid, host[0] ? host : "?");
    }
    int err = ferror(f) ? errno : 0;
    if (fclose(f) != 0 && err == 0)
        err = errno;
    if (err == 0 && rename(tmp, path) != 0)
        err = errno;
    if (err != 0) {
        COLL_INFO(COLL_SUBSYS_INIT, "status: cannot write COLL_STATUS_FILE %s: %s", path,
                  strerror(err));
        unlink(tmp);
        return;
    }
    COLL_INFO(COLL_SUBSYS_INIT, "status: wrote every rank's bootstrap address to %s", path);
}
