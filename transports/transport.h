/* The transport interface: how the core moves bytes between two ranks.  A
 * transport knows nothing of collectives or data types.  Shaped like a network
 * plugin: listen/connect/accept, then non-blocking isend/irecv/test.  No slot
 * blocks; the core (exec.c) drives progress and deadlines.
 *
 * A transport sees the communicator only through struct coll_tp_env, and
 * includes this header and the base layer's (log, param, socket, alloc, wire
 * checks) only: the build gives transports/ no other include directory.
 *
 * What the core guarantees and expects besides the slots' own comments (checked
 * for every transport by tests/test_transport.c): one thread at a time drives
 * the connections of a context (only shutdown comes from another); one
 * connection at a time is set up from a rank to a listener; a listen handle
 * starts with the transport's magic, and connect and can_connect refuse bytes
 * that are not a handle of theirs; wait_prepare may be given a stand-in request
 * {conn} for a receive lent in place (recv_peek). */
#ifndef COLL_TRANSPORT_H
#define COLL_TRANSPORT_H

#include "memtype.h"
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "collective.h"
#include "socket.h"
#include "wire_check.h"

#define COLL_TRANSPORT_ABI 1u
/* Memory the transport moves: host memory; CUDA device memory (none yet). */
#define COLL_TP_CAP_HOST_MEM (1u << 0)
#define COLL_TP_CAP_CUDA_MEM (1u << 1)
/* The transport moves bytes faster from and into memory registered with it
 * (reg/dereg): it has both slots, and the core's registration cache
 * (lib/engine/regcache.c) gives its isend/irecv a handle for the buffers it knows.  A
 * transport without it (shm, tcp) leaves reg and dereg NULL and is always given
 * a NULL handle; transport_valid() refuses a table where the two disagree. */
#define COLL_TP_CAP_NEEDS_REG (1u << 2)
/* Its peers share this host's memory: they can map each other's memfds. */
#define COLL_TP_CAP_SHARED_MEM (1u << 3)
#define COLL_TP_HANDLE_BYTES 128
#define COLL_CONN_MAX_FDS 16

#define COLL_MAX_TRANSPORTS 4

#define coll_container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

struct coll_comm;
/* What kind of memory a registered buffer is: enum coll_memtype (memtype.h).
 * Host memory only for now; device memory comes with a CUDA transport
 * (COLL_TP_CAP_CUDA_MEM). */
struct coll_transport;

/* What every rank tells the others at init (through the bootstrap). */
struct coll_rank_info {
    int32_t rank;
    int32_t pid;
    uint64_t host_hash;         /* hash of host name, boot id and network namespace */
    int32_t cores;              /* online cores of its host */
    int32_t numa;               /* the NUMA node its CPUs are on; -1: several or unknown */
    char host[64];              /* host name, for messages */
    union coll_sockaddr boot_addr; /* this rank's bootstrap listener */
    uint32_t boot_addrlen;
    uint32_t tp_mask;           /* bit i: transport i of the table is listening */
    uint8_t tp_handle[COLL_MAX_TRANSPORTS][COLL_TP_HANDLE_BYTES]; /* listen handles */
};

/* All a transport knows of the communicator it serves, handed to init and valid
 * until fini. */
struct coll_tp_env {
    int rank, nranks;
    const uint8_t *secret;         /* COLL_SECRET_BYTES, shown in every handshake */
    /* Every rank's published record (host, bootstrap address, listen handles);
     * this rank's own carries its bootstrap address before the others are known. */
    const struct coll_rank_info *(*peer)(void *owner, int rank);
    /* The current operation's deadline (coll_now_ns clock): a blocking step of a
     * connection's set-up gives up there. */
    int64_t (*deadline)(void *owner);
    /* Records why the call that returns an error failed, for the user. */
    void (*error)(void *owner, const char *msg);
    /* Ranks of the communicator on this host, this one included; known once every
     * rank's record is (from the first listen on, not at init). */
    int (*local_ranks)(void *owner);
    void *owner;
};

static inline const struct coll_rank_info *coll_tp_peer(const struct coll_tp_env *env, int rank)
{
    return env->peer(env->owner, rank);
}

static inline int coll_tp_local_ranks(const struct coll_tp_env *env)
{
    return env->local_ranks(env->owner);
}

static inline int64_t coll_tp_deadline(const struct coll_tp_env *env)
{
    return env->deadline(env->owner);
}

__attribute__((format(printf, 2, 3)))
static inline void coll_tp_error(const struct coll_tp_env *env, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    env->error(env->owner, msg);
}

/* One direction between two ranks.  Transports embed it first in their own
 * connection struct. */
struct coll_conn {
    const struct coll_transport *tp;
    int peer;      /* the other rank; -1 for a listener */
    bool is_send;  /* direction, for waits */
    int nfds;      /* descriptors the core may poll() while waiting on this conn */
    int fds[COLL_CONN_MAX_FDS];
    int err_no;    /* errno of the last failure, 0 for a clean close by the peer */
    /* The cause of the last failure in the transport's own words, when errno
     * cannot say it (a verbs work completion's status): exec.c reports it
     * instead of strerror(err_no).  NULL when unset; owned by the connection. */
    const char *err_text;
    bool poll_in;  /* wait for POLLIN even when sending (wake-ups arrive as bytes) */
    /* A ring of slots between the two (shm): ring_slots slots of ring_slot_bytes,
     * each message starting at a slot of its own, is all that a sender can hand
     * over before the receiver takes any.  0 when the transport has no such ring. */
    uint32_t ring_slots;
    size_t ring_slot_bytes;
};

/* A request is transport-owned and released by the test() that reports it done.
 * Transports embed it first in their own request struct. */
struct coll_req {
    struct coll_conn *conn;
};

struct coll_transport {
    uint32_t abi;
    const char *name;
    uint32_t caps;
    /* For the planner (lib/core/plan.c): the CPU a message costs at a rank, and the cost
     * of waking its receiver when ranks outnumber cores, as fractions of a round's
     * latency.  Fitted per transport on the project's test host. */
    double plan_msg_ratio;
    double plan_wake_ratio;
    /* test() costs no system call: the core may poll it longer before blocking. */
    bool cheap_poll;
    /* *ctx_p NULL with collSuccess: nothing to use on this host (no device);
     * the transport is then not offered, and init has said why at INFO. */
    collResult_t (*init)(const struct coll_tp_env *env, void **ctx_p);
    void (*fini)(void *ctx);
    /* Whether this rank can reach peer, whose listen handle is given. */
    collResult_t (*can_connect)(void *ctx, const struct coll_rank_info *peer, const void *handle,
                                bool *ok_p);
    /* Starts listening; writes the bytes peers need to connect into handle
     * (COLL_TP_HANDLE_BYTES). */
    collResult_t (*listen)(void *ctx, void *handle, struct coll_conn **lis_p);
    /* Opens a send connection to the peer whose listen handle is given.  The
     * handshake carries the communicator's secret and this rank. */
    collResult_t (*connect)(void *ctx, const void *handle, int peer, struct coll_conn **conn_p);
    /* Returns a receive connection from an incoming peer, or NULL in *conn_p when
     * none is complete yet (call again).  Connections that fail the handshake are
     * dropped and logged. */
    collResult_t (*accept)(struct coll_conn *lis, struct coll_conn **conn_p);
    /* Only with COLL_TP_CAP_NEEDS_REG (NULL otherwise): registers [buf, buf+len)
     * of memory type mt with the transport context (not one connection: a
     * handle serves every connection of the context), for peers to read or
     * write, and returns the transport's handle.  A failure (out of locked
     * memory, say) is logged at INFO and not made the comm's error: the caller
     * then moves the bytes unregistered.  dereg releases a handle; the
     * caller guarantees that no request using it is still pending. */
    collResult_t (*reg)(void *ctx, void *buf, size_t len, enum coll_memtype mt, void **mh_p);
    void (*dereg)(void *ctx, void *mh);
    /* mh: NULL, or a handle from this transport's reg whose range holds
     * [buf, buf+n); with one, the transport may move the bytes in place.
     * flags: COLL_SEND_MORE or 0. */
    collResult_t (*isend)(struct coll_conn *c, const void *buf, size_t n, void *mh,
                          unsigned flags, struct coll_req **r_p);
    collResult_t (*irecv)(struct coll_conn *c, void *buf, size_t n, void *mh,
                          struct coll_req **r_p);
    /* Makes progress; *done_p true when r completed (r is then released) with
     * *n_p bytes. */
    collResult_t (*test)(struct coll_req *r, bool *done_p, size_t *n_p);
    /* Optional: called before the core blocks in poll() on r's descriptors, so the
     * transport can ask the kernel (or the peer) to wake it.  Returns true when r
     * may progress already: the core then tests again instead of blocking. */
    bool (*wait_prepare)(struct coll_req *r);
    /* Optional zero-copy receive, for a connection with no receive queued: the
     * next fragment (up to `want` bytes of the current message) where the peer
     * put it, or *p NULL when none has arrived.  The caller reads it, then calls
     * recv_release.  Fragments split a message at the same places on every call
     * for a given size, at multiples of 64 bytes. */
    collResult_t (*recv_peek)(struct coll_conn *c, size_t want, const void **p, size_t *len_p);
    void (*recv_release)(struct coll_conn *c);
    /* Optional: copies into dst up to want bytes that have arrived on c and that no
     * receive has taken yet, and takes nothing: a later receive gets them all the
     * same.  *got_p is how many (0: nothing has arrived).  For a connection with no
     * receive queued; a message's first want bytes must arrive together (a send of
     * want bytes or fewer does).  What receives from any source look at. */
    collResult_t (*recv_probe)(struct coll_conn *c, void *dst, size_t want, size_t *got_p);
    /* Makes any pending receive or send fail at once (abort, poisoning); safe to
     * call from another thread while the connection is in use. */
    void (*shutdown)(struct coll_conn *c);
    collResult_t (*close)(struct coll_conn *c);
};

/* An isend flag: the caller posts another send on this connection at once, so
 * the transport may hold these bytes and let both leave together (TCP: one
 * sendmsg for a message's header and data).  Held bytes still leave at the
 * next test() of any request of the connection. */
#define COLL_SEND_MORE 1u

static inline collResult_t coll_conn_isend(struct coll_conn *c, const void *buf, size_t n,
                                           void *mh, unsigned flags, struct coll_req **r_p)
{
    return c->tp->isend(c, buf, n, mh, flags, r_p);
}

/* The transport's recv_probe; a transport without one shows nothing. */
static inline collResult_t coll_conn_recv_probe(struct coll_conn *c, void *dst, size_t want,
                                                size_t *got_p)
{
    *got_p = 0;
    return c->tp->recv_probe ? c->tp->recv_probe(c, dst, want, got_p) : collSuccess;
}

static inline collResult_t coll_conn_irecv(struct coll_conn *c, void *buf, size_t n, void *mh,
                                           struct coll_req **r_p)
{
    return c->tp->irecv(c, buf, n, mh, r_p);
}

/* Reads the transports' listeners at most every COLL_SWEEP_MS, from the start
 * of each operation: strangers that connected are dropped (and logged once per
 * listener) instead of sitting in the kernel's backlog for the job's life, and a
 * peer's set-up that arrived early is stashed.  Errors are left for the call
 * that needs the connection. */
#define COLL_SWEEP_MS 1000
void coll_transport_sweep(struct coll_comm *comm, int64_t now);
/* The ordered table of built transports. */
const struct coll_transport *const *coll_transport_table(int *n_p);
/* tp's bit in a mask of transports: 1 << its place in the table (0: none). */
uint32_t coll_transport_bit(const struct coll_transport *tp);
/* Selects and initialises transports for comm (COLL_TRANSPORTS narrows). */
collResult_t coll_transport_init(struct coll_comm *comm);
void coll_transport_fini(struct coll_comm *comm);
/* The send (is_send) or receive connection with peer, established on first use
 * within the comm's deadline.  A failure is described and poisons comm. */
collResult_t coll_transport_get_conn(struct coll_comm *comm, int peer, bool is_send,
                                     struct coll_conn **conn_p);
/* The receive connection with peer, waiting ms at most for the peer to make it
 * (0: one look); *conn_p is NULL when it is not made yet.  The comm's deadline, an
 * abort or the peer's death fail it as coll_transport_get_conn does. */
collResult_t coll_transport_wait_recv_conn(struct coll_comm *comm, int peer, int ms,
                                           struct coll_conn **conn_p);
/* Shuts every connection down so blocked peers and callers see an error. */
void coll_transport_shutdown_all(struct coll_comm *comm);

/* The transport for peer (connected or not); NULL when none can reach it. */
const struct coll_transport *coll_transport_for_peer(const struct coll_comm *comm, int peer);
/* Raises *r_msg and *r_wake to the largest planner ratios of the built transports. */
void coll_transport_max_ratios(double *r_msg, double *r_wake);
/* The transport carrying traffic with peer ("shm", "tcp"), or the one the first
 * connection will take; NULL when none can reach it. */
const char *coll_transport_peer_name(const struct coll_comm *comm, int peer);

extern const struct coll_transport coll_shm_transport;
extern const struct coll_transport coll_tcp_transport;
extern const struct coll_transport coll_verbs_transport;

#endif
