/* The engine's request layer: posts and tests transport requests, describes
 * their failures, and waits under the communicator's deadline, abort flag and
 * waiting policy.  Schedules (engine.h) are run on top of it. */
#ifndef COLL_EXEC_H
#define COLL_EXEC_H

#include "internal.h"

/* Waiting state of one operation: spin first, then block in poll(). */
struct coll_wait {
    int64_t idle_since; /* 0: something moved since the last idle call */
    int64_t spin_ns;    /* how long to poll before blocking */
    unsigned idle_calls;
    int steps;          /* deferred steps (engine.h) the wait is also for */
    int watches;        /* watch lanes (engine.h) it is for: memory, spun on */
    int watch_peer;     /* the rank the first of them waits for */
    unsigned looks;     /* looks at failures while watching (exec.c) */
    bool woke_idle;     /* the last block woke on a descriptor, and nothing moved since */
};

#define COLL_EXEC_SPIN_MAX_BYTES (32 * 1024)

/* One poll's pause in a spin on memory another core writes. */
static inline void coll_exec_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Prepares a wait for pieces of up to `bytes`.  With more ranks than cores, a
 * large piece takes long enough to arrive that spinning only steals the core
 * from the rank that would send it, so such waits block at once. */
static inline void coll_exec_wait_init(const struct coll_comm *comm, struct coll_wait *w,
                                       size_t bytes)
{
    *w = (struct coll_wait){
        .spin_ns = comm->oversubscribed && bytes > COLL_EXEC_SPIN_MAX_BYTES ? 0 : comm->spin_ns};
}

/* Something moved: the next idle call starts a wait afresh (its spin, its
 * free polls of memory). */
static inline void coll_exec_moved(struct coll_wait *w)
{
    w->idle_since = 0;
    w->idle_calls = 0;
}

/* Yields the core from a wait that polls memory, under the engine's rule (with
 * a core per rank, yields that run nothing else are measured and grow rarer);
 * now is the caller's last clock reading. */
void coll_exec_yield(struct coll_comm *comm, int64_t now);

/* Starts an operation: sets its deadline and name for messages. */
void coll_exec_begin(struct coll_comm *comm, const char *op_name);

/* Posts a send or receive of n bytes with the transport's handle for the
 * buffer (coll_reg_handle in regcache.h; NULL: none), so that it may move the
 * bytes in place; n == 0 completes at once (*r_p = NULL).  flags: the
 * transport's (COLL_SEND_MORE). */
collResult_t coll_exec_isend_mh(struct coll_comm *comm, struct coll_conn *c, const void *buf,
                                size_t n, void *mh, unsigned flags, struct coll_req **r_p);
collResult_t coll_exec_irecv_mh(struct coll_comm *comm, struct coll_conn *c, void *buf,
                                size_t n, void *mh, struct coll_req **r_p);
/* Zero-copy receive (transports with recv_peek): *src_p gets up to want bytes
 * of the next message where the peer put them, or NULL when none has arrived.
 * The caller reads them, then calls coll_exec_release.  A failure is described
 * and poisons the comm, as for coll_exec_test. */
collResult_t coll_exec_peek(struct coll_comm *comm, struct coll_conn *c, size_t want,
                            const void **src_p, size_t *len_p);
void coll_exec_release(struct coll_conn *c);
/* Tests *r_p; when done sets *r_p = NULL and *done_p.  A NULL request is done.
 * A failure is described (operation, peer, host) and poisons the comm. */
collResult_t coll_exec_test(struct coll_comm *comm, struct coll_req **r_p, bool *done_p);
/* Called when a pass over the pending requests moved nothing: spins, yields or
 * blocks on their descriptors in the comm's poll set (and, with w->steps, on its
 * wake-up), and fails on deadline or abort. */
collResult_t coll_exec_idle(struct coll_comm *comm, struct coll_wait *w,
                            struct coll_req *const *reqs, int nreqs);

#endif
