/* The full communicator and what the core files share. */
#ifndef COLL_INTERNAL_H
#define COLL_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "alloc.h"
#include "bootstrap.h"
#include "check.h"
#include "collective.h"
#include "config.h"
#include "log.h"
#include "param.h"
#include "transport.h"

#define COLL_ERRMSG_BYTES 512

enum coll_func { COLL_FUNC_ALLREDUCE, COLL_FUNC_BROADCAST, COLL_FUNC_REDUCE,
                 COLL_FUNC_ALLGATHER, COLL_FUNC_REDUCE_SCATTER, COLL_FUNC_COUNT };

struct coll_peer {
    struct coll_rank_info info;
    int tp_index;                 /* transport chosen for this peer, -1 until decided */
    struct coll_conn *send_conn;
    struct coll_conn *recv_conn;
};

/* The planner's model of the machine (lib/core/plan.c, coll_model_cost in algo.h): a
 * round of messages costs lat_us; every message costs msg_us of CPU at the rank
 * that sends or receives it, and, with more ranks than cores, wake_us of a core
 * to wake its receiver (shared by the host's cores).  Moving bytes costs the
 * time of the busiest rank (its bytes sent + received at core_gbs, the copy
 * speed of one core) or of the host (the bytes of all its ranks at host_gbs,
 * what all its cores copy together), whichever is longer; reducing b bytes costs
 * b / reduce_gbs.  The host and wake terms are what make a star or a tree cheap
 * on a host with fewer cores than ranks.  Identical on every rank. */
struct coll_model {
    double alpha_us;  /* one round of recursive doubling's small allreduce, measured */
    double lat_us;
    double msg_us;
    double wake_us;
    double core_gbs;
    double host_gbs;
    double reduce_gbs;
    int local_ranks;
    int cores;
    bool lend;        /* every transport in use lends received bytes in place (recv_peek) */
    /* With ranks on several hosts (comm->hosts.n > 1), measured apart: the
     * bytes one way through a host's link per second (GB/s), and core_gbs and
     * host_gbs within a host; core_gbs and host_gbs above are then what the
     * flat ring gets, the network included.  0 with one host. */
    double net_gbs;
    double local_core_gbs, local_host_gbs;
    /* With several hosts, one round's time (alpha) per link class, measured
     * apart: a ring over each host's ranks (shared memory), and one over a rank
     * of each host (the network).  alpha_us above is the flat mix of both.  0
     * with one host. */
    double local_alpha_us, net_alpha_us;
};

struct coll_tp_state {
    const struct coll_transport *tp;
    void *ctx;
    struct coll_conn *listener;
};

/* Which ranks share a host (hosts.c).  Identical on every rank. */
struct coll_hosts {
    int n;            /* hosts, numbered in the order of their lowest rank */
    int *host;        /* rank -> its host */
    int *index;       /* rank -> its place among its host's ranks (by rank) */
    int *order;       /* the ranks host by host, by rank within a host */
    int *pos;         /* rank -> its place in order */
    int *start;       /* host j's ranks are order[start[j] .. start[j + 1]) */
    int min_local, max_local; /* the fewest and the most ranks of a host */
    int min_cores;    /* the fewest cores of a host */
};

struct coll_comm {
    int rank;
    int nranks;
    uint8_t secret[COLL_SECRET_BYTES];
    uint64_t seq;                  /* collective calls issued, for messages */
    int64_t timeout_ms;
    int64_t deadline_ns;           /* of the operation in progress */
    int64_t op_start_ns;           /* when it began (coll_exec_begin) */
    const char *op_name;           /* operation in progress, for messages */

    struct coll_peer *peers;       /* nranks entries; peers[rank] is this rank */
    struct coll_tp_env tp_env;     /* what the transports see of this comm */
    struct coll_tp_state tps[COLL_MAX_TRANSPORTS];
    int ntps;
    int64_t sweep_ns;              /* next read of the listeners (coll_transport_sweep) */

    /* Bootstrap ring (out-of-band): sockets to the next and from the previous rank. */
    int boot_listen_fd;
    int boot_next_fd;
    int boot_prev_fd;
    bool boot_watch;               /* init is done: the ring carries failure notices */
    bool boot_eof[2];              /* prev, next closed: no notice can come */

    /* Staging and scratch owned by the comm, grown on demand. */
    void *scratch;
    size_t scratch_bytes;

    /* Tuning resolved at init. */
    size_t chunk_bytes;            /* pipelined slice */
    int depth;                     /* slices in flight per connection */
    int64_t spin_ns;               /* busy-poll this long before blocking */
    int64_t spin_cheap_ns;         /* the same over transports with cheap_poll */
    bool spin_yield;               /* yield the core while spinning */
    /* Yields in a row that found nothing else to run on the core (exec.c);
     * past a few, a wait's first idle call spins instead. */
    atomic_int idle_yields_empty;
    bool oversubscribed;           /* more ranks on this host than cores */
    int local_ranks;               /* ranks on this host (same host hash) */
    struct coll_hosts hosts;
    int cores;                     /* online cores of this host */
    struct coll_model model;
    uint32_t algo_mask[COLL_FUNC_COUNT]; /* algorithms COLL_ALGO allows, per collective */
    struct coll_choice {                 /* the last choice: reused for the same call,
                                          * logged when it changes */
        bool valid;
        size_t count;
        int dtype, op, root, algo;
        uint32_t mask;
    } choice[COLL_FUNC_COUNT];
    const char *last_algo_name;          /* algorithm of the last call: "ring", "p2p" */
    /* collCommGetLastCallInfo (lib/core/last_call.c): the last call that ended,
     * written by the thread that ran it at its end, read by any thread; both
     * hold last_call_lock (a spin lock: the writer holds it for a copy). */
    struct coll_last_call {
        uint64_t seq;                    /* 0: no call has ended yet */
        const char *func, *algo;         /* static strings */
        size_t count;
        int dtype, op, root;             /* -1: none */
        int result;                      /* collResult_t */
        uint32_t tp_mask;                /* transports, by index in coll_transport_table */
        int peers;
        size_t chunk_bytes, chunks;
    } last_call;
    atomic_int last_call_lock;
    /* What the last collective that succeeded used, kept by the thread that runs
     * calls: the next call with the same algorithm, collective, count, type and
     * root moves bytes with the same peers and cuts its buffer alike. */
    struct coll_last_call_key {
        bool valid;
        const char *algo;
        int func, dtype, root;
        size_t count;
        uint32_t tp_mask;
        int peers;
        size_t chunk_bytes, chunks;
    } last_call_key;

    struct coll_direct *direct;          /* the direct allreduce's state (algorithms/direct.c) */
    struct coll_ll *ll;                  /* ll's shared slots (algorithms/ll.c) */
    struct coll_engine *engine;          /* poll set and wake-up of the engine (engine.c) */
    /* Who runs received pieces' work that may finish later (engine.h); NULL:
     * the engine, at once. */
    const struct coll_step_runner *step_runner;

    /* Registrations with transports that need them (regcache.c), made on first
     * use; freed before the transports. */
    struct coll_regcache *regcache;

    struct coll_device *device;    /* staging of device buffers (device.c) */
    /* Progress thread for calls on streams (stream.c); set by the first such
     * call, read by blocking calls of any thread. */
    struct coll_async *_Atomic async;
    /* Calls in flight at once on the progress thread (inflight.h): the set,
     * its calls not ended (the progress thread's), and the same for other
     * threads to read. */
    struct coll_inflight *inflight;
    int stream_overlap;            /* at most this many (COLL_STREAM_OVERLAP) */
    uint8_t barrier_byte;          /* collBarrier's buffer, in and out */
    int inflight_running;
    atomic_int inflight_any;

    /* Configuration (collConfig_t) and lifecycle. */
    bool blocking;                 /* false: NULL-stream calls queue on nb_stream */
    char name[64];                 /* commName, "" when none */
    collStream_t nb_stream;        /* a non-blocking comm's own stream */
    pthread_t init_thread;         /* a non-blocking init, until joined */
    bool init_thread_live;
    pthread_mutex_t init_lock;     /* joins the init thread once */
    atomic_bool init_running;      /* a non-blocking init has not finished */
    atomic_bool finalized;         /* collCommFinalize returned: no new calls */
    uint32_t shrinks;              /* collCommShrink calls on this comm, to tell them apart */
    /* Rank 0: the secret of the id collCommGetUniqueId made last, and whether a
     * collCommGrow used it (each id works once). */
    uint8_t grow_secret[COLL_SECRET_BYTES];
    int grow_id_state;             /* 0: none made, 1: made, 2: used */

    atomic_int failed_peer;        /* the rank a failure is blamed on, -1: none known */
    atomic_int revoked_by;         /* the rank whose collCommRevoke poisoned it, -1: none */
    atomic_int wait_peer;          /* the peer this rank's last wait that found nothing to do
                                    * waited for (-1: none yet) */
    _Atomic int async_error;       /* collResult_t that poisoned the comm */
    atomic_bool aborting;
    atomic_int busy;               /* threads inside a call on this comm */
    char last_error[COLL_ERRMSG_BYTES];

    /* collCommGetBytes: bytes posted to the transports to send to / receive from
     * the peers (coll_exec_isend_mh, coll_exec_irecv_mh, coll_exec_peek), and those the
     * direct allreduce moves (mem.c).  Added on whichever thread runs the call
     * (the caller's, a progress thread, a non-blocking init's), read from any:
     * relaxed atomics (coll_comm_count_bytes). */
    _Atomic uint64_t bytes_sent;
    _Atomic uint64_t bytes_received;

    /* Flight recorder and COLL_CHECK_MISMATCH (flight.c, mismatch.c). */
    struct coll_flight *flight;          /* the last calls, for failure reports */
    bool check_mismatch;                 /* agree on each collective's arguments first */
    uint8_t *mismatch_buf;               /* nranks descriptors, allocated on first use */
    const struct coll_algo *mismatch_algo; /* the allgather that carries them */
};

/* Records the cause of a failure for collGetLastError and logs it at WARN; with
 * comm NULL, as the calling thread's (comm_state.c). */
void coll_set_error(struct coll_comm *comm, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The calling thread's last failure without a communicator, and setting it. */
const char *coll_thread_error(void);
void coll_set_thread_error(const char *msg);
/* Poisons comm with res (system/remote/timeout) and shuts connections down so
 * peers blocked on this rank fail fast instead of waiting for their deadline. */
void coll_comm_poison(struct coll_comm *comm, collResult_t res);
/* Names the rank a failure about to poison comm is blamed on (the peer a broken
 * connection or a timed-out wait leads to), for the failure notices; the first
 * blame stands. */
void coll_comm_blame(struct coll_comm *comm, int peer);
const char *coll_result_name(collResult_t result);


/* Creates this rank's communicator from an id, configured by config (NULL: the
 * defaults; checked by the caller with coll_config_check).  The cause of a
 * failure goes to the calling thread's last error.  A non-blocking config
 * returns collInProgress with *comm_p set while init goes on in a thread. */
collResult_t coll_comm_create(struct coll_comm **comm_p, int nranks, const struct coll_id *id,
                              int rank, const collConfig_t *config);

/* Checks a user's config (NULL is fine); the refusal names fn and the field. */
collResult_t coll_config_check(const char *fn, const collConfig_t *config);

/* The config a communicator made from comm inherits: comm's, overridden by the
 * fields config sets. */
void coll_config_inherit(const struct coll_comm *comm, const collConfig_t *config,
                         collConfig_t *out);

/* Refuses a call on comm (naming fn) while its non-blocking init runs or after
 * collCommFinalize; then returns comm's poison, if any. */
collResult_t coll_comm_check_usable(struct coll_comm *comm, const char *fn);

/* The algorithm that ran the last collective or point-to-point call on comm
 * ("ring", "tree", "naive", "p2p"), or "none"; for the perf tools. */
const char *coll_comm_last_algo(const struct coll_comm *comm);

/* Whether this rank has a send (is_send) or receive connection with peer yet;
 * for tests of what happens before a connection exists. */
bool coll_comm_has_conn(const struct coll_comm *comm, int peer, bool is_send);

/* Adds to comm's byte counters (collCommGetBytes).  Relaxed: they count, they
 * order nothing. */
static inline void coll_comm_count_bytes(struct coll_comm *comm, uint64_t sent,
                                         uint64_t received)
{
    if (sent != 0)
        atomic_fetch_add_explicit(&comm->bytes_sent, sent, memory_order_relaxed);
    if (received != 0)
        atomic_fetch_add_explicit(&comm->bytes_received, received, memory_order_relaxed);
}

/* comm->hosts from every rank's host_hash (hosts.c); fini frees it. */
collResult_t coll_hosts_init(struct coll_comm *comm);
void coll_hosts_fini(struct coll_comm *comm);

/* Scratch of at least bytes, owned by comm. */
collResult_t coll_comm_scratch(struct coll_comm *comm, size_t bytes, void **p_p);

#endif
