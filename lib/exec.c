/* The progress engine.  An algorithm posts requests and tests them in a loop;
 * when a whole pass moves nothing it calls coll_exec_idle, which decides how to
 * wait: spin (lowest latency, when each rank has a core), spin while yielding
 * the core (more ranks than cores), then block in poll() on the descriptors of
 * the pending requests, in slices of at most 100 ms so that abort and the
 * deadline are noticed.  No wait is unbounded. */
#include "exec.h"

#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "socket.h"

int64_t coll_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void coll_exec_begin(struct coll_comm *comm, const char *op_name)
{
    comm->op_name = op_name;
    comm->deadline_ns = coll_now_ns() + comm->timeout_ms * 1000000LL;
    coll_transport_sweep(comm);
}

/* Describes a failed request: operation, peer, its host and address, cause. */
static void exec_fail(struct coll_comm *comm, struct coll_conn *c, collResult_t res)
{
    const struct coll_rank_info *pi = &comm->peers[c->peer].info;
    char a[COLL_ADDR_STRLEN];
    coll_socket_addr_str((const struct sockaddr *)&pi->boot_addr, a, sizeof(a));
    const char *what = c->err_text ? c->err_text
                       : c->err_no ? strerror(c->err_no)
                       : (c->is_send ? "connection closed" : "connection closed by peer");
    coll_set_error(comm, "%s #%llu: %s rank %d (%.64s, %s) over %s failed: %s", comm->op_name,
                   (unsigned long long)comm->seq, c->is_send ? "sending to" : "receiving from",
                   c->peer, pi->host, a, c->tp->name, what);
    coll_comm_poison(comm, res);
}

collResult_t coll_exec_isend(struct coll_comm *comm, struct coll_conn *c, const void *buf,
                             size_t n, struct coll_req **r_p)
{
    *r_p = NULL;
    if (n == 0)
        return collSuccess;
    collResult_t res = coll_conn_isend(c, buf, n, r_p);
    if (res != collSuccess)
        exec_fail(comm, c, res);
    return res;
}

collResult_t coll_exec_irecv(struct coll_comm *comm, struct coll_conn *c, void *buf, size_t n,
                             struct coll_req **r_p)
{
    *r_p = NULL;
    if (n == 0)
        return collSuccess;
    collResult_t res = coll_conn_irecv(c, buf, n, r_p);
    if (res != collSuccess)
        exec_fail(comm, c, res);
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
    collResult_t res = c->tp->test(r, &done, NULL);
    if (res != collSuccess)
        return exec_failed_wait(comm, c, res);
    *done_p = done;
    if (done)
        *r_p = NULL;
    return collSuccess;
}

#define EXEC_SPIN_MAX_BYTES (32 * 1024)

void coll_exec_wait_init(const struct coll_comm *comm, struct coll_wait *w, size_t bytes)
{
    w->idle_since = 0;
    w->idle_calls = 0;
    w->spin_ns = comm->oversubscribed && bytes > EXEC_SPIN_MAX_BYTES ? 0 : comm->spin_ns;
}

static bool exec_all_cheap(struct coll_req *const *reqs, int nreqs)
{
    for (int i = 0; i < nreqs; i++)
        if (reqs[i] != NULL && !reqs[i]->conn->tp->cheap_poll)
            return false;
    return nreqs > 0;
}

static inline void exec_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

collResult_t coll_exec_idle(struct coll_comm *comm, struct coll_wait *w,
                            struct coll_req *const *reqs, int nreqs)
{
    /* A rank with a core of its own that waits on shared memory polls again at
     * once: the clock, abort and a yield are looked at every 64th call only. */
    if (w->idle_since != 0 && !comm->oversubscribed && (++w->idle_calls & 63) != 0 &&
        exec_all_cheap(reqs, nreqs)) {
        exec_cpu_relax();
        return collSuccess;
    }
    int64_t now = coll_now_ns();
    if (w->idle_since == 0)
        w->idle_since = now;
    if (atomic_load(&comm->aborting)) {
        coll_set_error(comm, "%s #%llu: communicator aborted", comm->op_name,
                       (unsigned long long)comm->seq);
        coll_comm_poison(comm, collRemoteError);
        return collRemoteError;
    }
    if (now >= comm->deadline_ns) {
        int peer = -1;
        for (int i = 0; i < nreqs && peer < 0; i++)
            if (reqs[i] != NULL)
                peer = reqs[i]->conn->peer;
        coll_set_error(comm, "%s #%llu timed out after %lld ms%s%d%s%.64s%s", comm->op_name,
                       (unsigned long long)comm->seq, (long long)comm->timeout_ms,
                       peer >= 0 ? " waiting for rank " : "", peer >= 0 ? peer : 0,
                       peer >= 0 ? " (" : "", peer >= 0 ? comm->peers[peer].info.host : "",
                       peer >= 0 ? ")" : "");
        coll_comm_poison(comm, collTimeout);
        return collTimeout;
    }
    /* Over transports whose test() is a few loads (shared memory) a wait keeps
     * polling longer: blocking and waking cost system calls on both sides. */
    int64_t spin = w->spin_ns;
    if (comm->spin_cheap_ns > spin && exec_all_cheap(reqs, nreqs))
        spin = comm->spin_cheap_ns;
    if (now - w->idle_since < spin) {
        if (comm->spin_yield)
            sched_yield();
        return collSuccess;
    }
    /* Block until a descriptor is ready, the deadline or a 100 ms tick. */
    struct pollfd pfds[64 + 2];
    nfds_t n = 0;
    for (int i = 0; i < nreqs; i++) {
        const struct coll_conn *c = reqs[i] ? reqs[i]->conn : NULL;
        if (c == NULL)
            continue;
        if (c->tp->wait_prepare != NULL && c->tp->wait_prepare(reqs[i]))
            return collSuccess; /* it can move now: test again */
        short ev = c->is_send && !c->poll_in ? POLLOUT : POLLIN;
        for (int k = 0; k < c->nfds && n < 64; k++)
            pfds[n++] = (struct pollfd){.fd = c->fds[k], .events = ev};
    }
    int nn = coll_bootstrap_notice_fds(comm, pfds + n);
    int64_t ms = (comm->deadline_ns - now) / 1000000 + 1;
    (void)poll(pfds, n + (nfds_t)nn, ms > 100 ? 100 : (int)ms);
    return coll_bootstrap_notice_check(comm, pfds + n, nn);
}
