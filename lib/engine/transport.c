/* The transport table and per-peer connection management.
 *
 * Transports are tried in the table's order; for each peer the first whose
 * can_connect says yes carries the traffic.  Connections are made on first use:
 * the sender connects to the receiver's listener (the kernel's backlog completes
 * the connection even while the receiver is busy elsewhere, so the order in which
 * ranks ask for connections cannot deadlock), and the receiver accepts until the
 * peer it waits for has arrived, keeping the others for later. */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "internal.h"

static const struct coll_transport *const transport_table[] = {
#if COLL_HAVE_SHM
    &coll_shm_transport,
#endif
#if COLL_HAVE_VERBS
    /* After shm, so peers on one host keep shared memory unless COLL_TRANSPORTS
     * says otherwise; before tcp, which reaches everyone. */
    &coll_verbs_transport,
#endif
    &coll_tcp_transport,
};
#define NTRANSPORTS ((int)(sizeof(transport_table) / sizeof(transport_table[0])))
_Static_assert(NTRANSPORTS <= COLL_MAX_TRANSPORTS, "raise COLL_MAX_TRANSPORTS");

const struct coll_transport *const *coll_transport_table(int *n_p)
{
    *n_p = NTRANSPORTS;
    return transport_table;
}

uint32_t coll_transport_bit(const struct coll_transport *tp)
{
    int n;
    const struct coll_transport *const *table = coll_transport_table(&n);
    for (int i = 0; tp != NULL && i < n; i++)
        if (table[i] == tp)
            return 1u << i;
    return 0;
}

/* True when name is allowed by COLL_TRANSPORTS ("tcp,shm" or "^shm"). */
static bool transport_allowed(const char *spec, const char *name)
{
    if (spec == NULL)
        return true;
    bool exclude = spec[0] == '^';
    char buf[128];
    snprintf(buf, sizeof(buf), "%s", exclude ? spec + 1 : spec);
    bool listed = false;
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save))
        if (strcasecmp(t, name) == 0)
            listed = true;
    return exclude ? !listed : listed;
}

static bool transport_valid(const struct coll_transport *tp)
{
    /* reg and dereg come together, exactly with COLL_TP_CAP_NEEDS_REG. */
    bool needs_reg = (tp->caps & COLL_TP_CAP_NEEDS_REG) != 0;
    return tp->abi == COLL_TRANSPORT_ABI && tp->name && tp->init && tp->fini &&
           tp->can_connect && tp->listen && tp->connect && tp->accept && tp->isend &&
           tp->irecv && tp->test && tp->shutdown && tp->close &&
           (tp->reg != NULL) == needs_reg && (tp->dereg != NULL) == needs_reg;
}

static const struct coll_rank_info *env_peer(void *owner, int rank)
{
    const struct coll_comm *comm = owner;
    return &comm->peers[rank].info;
}

static int64_t env_deadline(void *owner)
{
    const struct coll_comm *comm = owner;
    return comm->deadline_ns;
}

static void env_error(void *owner, const char *msg)
{
    coll_set_error(owner, "%s", msg);
}

static int env_local_ranks(void *owner)
{
    const struct coll_comm *comm = owner;
    return comm->local_ranks;
}

collResult_t coll_transport_init(struct coll_comm *comm)
{
    const char *spec = coll_param_str(COLL_PARAM_TRANSPORTS);
    struct coll_rank_info *mine = &comm->peers[comm->rank].info;
    comm->ntps = 0;
    comm->tp_env = (struct coll_tp_env){.rank = comm->rank, .nranks = comm->nranks,
                                        .secret = comm->secret, .peer = env_peer,
                                        .deadline = env_deadline, .error = env_error,
                                        .local_ranks = env_local_ranks, .owner = comm};
    char absent[64] = ""; /* allowed transports with nothing to use on this host */
    for (int i = 0; i < NTRANSPORTS; i++) {
        const struct coll_transport *tp = transport_table[i];
        if (!transport_valid(tp)) {
            COLL_WARN("transport %s misses a required slot; not used", tp->name);
            return collInternalError;
        }
        if (!transport_allowed(spec, tp->name))
            continue;
        struct coll_tp_state *st = &comm->tps[comm->ntps];
        st->tp = tp;
        st->ctx = NULL;
        COLL_CHECK(tp->init(&comm->tp_env, &st->ctx));
        if (st->ctx == NULL) {
            size_t len = strlen(absent);
            snprintf(absent + len, sizeof(absent) - len, "%s%s", len ? ", " : "", tp->name);
            continue;
        }
        collResult_t res = tp->listen(st->ctx, mine->tp_handle[i], &st->listener);
        if (res != collSuccess) {
            tp->fini(st->ctx);
            COLL_WARN("transport %s cannot listen; not used", tp->name);
            continue;
        }
        mine->tp_mask |= 1u << i;
        comm->ntps++;
    }
    if (comm->ntps == 0) {
        coll_set_error(comm, "no transport is usable (COLL_TRANSPORTS=%s)%s%s%s", spec ? spec : "",
                       absent[0] ? "; not available on this host: " : "", absent,
                       absent[0] ? " (COLL_DEBUG=INFO says why)" : "");
        return collInvalidUsage;
    }
    return collSuccess;
}

void coll_transport_fini(struct coll_comm *comm)
{
    for (int k = 0; k < comm->nranks; k++) {
        struct coll_peer *p = &comm->peers[k];
        if (p->send_conn)
            p->send_conn->tp->close(p->send_conn);
        if (p->recv_conn)
            p->recv_conn->tp->close(p->recv_conn);
        p->send_conn = p->recv_conn = NULL;
    }
    for (int i = 0; i < comm->ntps; i++) {
        struct coll_tp_state *st = &comm->tps[i];
        if (st->listener)
            st->tp->close(st->listener);
        st->tp->fini(st->ctx);
    }
    comm->ntps = 0;
}

void coll_transport_shutdown_all(struct coll_comm *comm)
{
    for (int k = 0; comm->peers && k < comm->nranks; k++) {
        struct coll_peer *p = &comm->peers[k];
        /* May run in another thread than the one making connections (abort). */
        struct coll_conn *s = __atomic_load_n(&p->send_conn, __ATOMIC_ACQUIRE);
        struct coll_conn *r = __atomic_load_n(&p->recv_conn, __ATOMIC_ACQUIRE);
        if (s)
            s->tp->shutdown(s);
        if (r)
            r->tp->shutdown(r);
    }
}

/* Position of tp in the table: the bit in tp_mask, the slot in tp_handle. */
static int transport_index(const struct coll_transport *tp)
{
    int index = 0;
    while (transport_table[index] != tp)
        index++;
    return index;
}

/* The comm->tps slot for peer: the first allowed transport both sides offer whose
 * can_connect agrees; -1 when none does. */
static int transport_find(const struct coll_comm *comm, int peer)
{
    const struct coll_rank_info *pi = &comm->peers[peer].info;
    for (int i = 0; i < comm->ntps; i++) {
        const struct coll_tp_state *st = &comm->tps[i];
        int index = transport_index(st->tp);
        bool ok = false;
        if ((pi->tp_mask & (1u << index)) &&
            st->tp->can_connect(st->ctx, pi, pi->tp_handle[index], &ok) == collSuccess && ok)
            return i;
    }
    return -1;
}

static collResult_t transport_pick(struct coll_comm *comm, int peer, struct coll_tp_state **st_p,
                                   int *index_p)
{
    int i = transport_find(comm, peer);
    if (i < 0) {
        coll_set_error(comm, "no common transport with rank %d (%.64s)", peer,
                       comm->peers[peer].info.host);
        return collInvalidUsage;
    }
    *st_p = &comm->tps[i];
    *index_p = transport_index(comm->tps[i].tp);
    return collSuccess;
}

/* Stores a new connection where collCommAbort, from another thread, may read it
 * (coll_transport_shutdown_all): released, so the reader sees it whole. */
static void conn_publish(struct coll_conn **slot, struct coll_conn *c)
{
    __atomic_store_n(slot, c, __ATOMIC_RELEASE);
}

/* Whether peer's process (or its communicator) is gone: its bootstrap listener,
 * open for the communicator's whole life, refuses connections.  A peer that is
 * alive but slow, stopped or cut off is not gone (the connect then times out). */
static bool transport_peer_gone(const struct coll_comm *comm, int peer)
{
    const struct coll_rank_info *pi = &comm->peers[peer].info;
    int fd;
    collResult_t res = coll_socket_connect((const struct sockaddr *)&pi->boot_addr,
                                           pi->boot_addrlen, coll_now_ns() + 200000000LL, false,
                                           &fd);
    if (res == collSuccess) {
        close(fd);
        return false;
    }
    return res == collRemoteError && errno == ECONNREFUSED;
}

/* One accept on st's listener; a connection that completes is stashed as its
 * peer's receive connection (and returned in *c_p, NULL when none did). */
static collResult_t transport_accept(struct coll_comm *comm, struct coll_tp_state *st,
                                     struct coll_conn **c_p)
{
    struct coll_conn *c = NULL;
    *c_p = NULL;
    COLL_CHECK(st->tp->accept(st->listener, &c));
    if (c == NULL)
        return collSuccess;
    struct coll_peer *from = &comm->peers[c->peer];
    if (from->recv_conn != NULL) {
        coll_set_error(comm, "rank %d connected twice", c->peer);
        c->tp->close(c);
        return collRemoteError;
    }
    conn_publish(&from->recv_conn, c);
    *c_p = c;
    return collSuccess;
}

void coll_transport_sweep(struct coll_comm *comm, int64_t now)
{
    if (now < comm->sweep_ns)
        return;
    comm->sweep_ns = now + COLL_SWEEP_MS * 1000000LL;
    for (int i = 0; i < comm->ntps; i++) {
        struct coll_tp_state *st = &comm->tps[i];
        struct coll_conn *c = NULL;
        /* Bounded: one set-up per peer at most can be waiting. */
        for (int k = 0; st->listener != NULL && k <= comm->nranks; k++)
            if (transport_accept(comm, st, &c) != collSuccess || c == NULL)
                break; /* a failure meets the caller again where it needs the connection */
    }
}

/* The connection with peer; a receive connection is waited for until until_ns at
 * most (the comm's deadline, or sooner), and *conn_p is NULL when it is not made
 * by then. */
static __attribute__((noinline)) collResult_t
transport_get_conn(struct coll_comm *comm, int peer, bool is_send, int64_t until_ns,
                   struct coll_conn **conn_p)
{
    struct coll_peer *p = &comm->peers[peer];
    struct coll_conn **slot = is_send ? &p->send_conn : &p->recv_conn;
    if (*slot) {
        *conn_p = *slot;
        return collSuccess;
    }
    struct coll_tp_state *st;
    int index;
    COLL_CHECK(transport_pick(comm, peer, &st, &index));
    if (is_send) {
        struct coll_conn *c = NULL;
        COLL_CHECK(st->tp->connect(st->ctx, p->info.tp_handle[index], peer, &c));
        conn_publish(slot, c);
        COLL_INFO(COLL_SUBSYS_TRANSPORT, "send to rank %d via %s", peer, st->tp->name);
        *conn_p = c;
        return collSuccess;
    }
    /* Accept until the wanted peer's connection is complete, stashing others.  A
     * peer that died after init, before making this connection, sends no failure
     * notice: after each second of waiting, check that it is still there. */
    int64_t next_probe = coll_now_ns() + 1000000000LL;
    *conn_p = NULL;
    while (*slot == NULL) {
        struct coll_conn *c = NULL;
        COLL_CHECK(transport_accept(comm, st, &c));
        if (c != NULL)
            continue;
        if (until_ns < comm->deadline_ns && coll_now_ns() >= until_ns)
            return collSuccess; /* not yet */
        if (atomic_load(&comm->aborting)) {
            coll_set_error(comm, "communicator aborted while waiting for rank %d", peer);
            return collRemoteError;
        }
        int64_t now = coll_now_ns();
        if (now >= comm->deadline_ns) {
            coll_set_error(comm, "rank %d (%.64s) did not connect within %lld ms", peer,
                           p->info.host, (long long)comm->timeout_ms);
            coll_comm_blame(comm, peer);
            return collTimeout;
        }
        if (now >= next_probe) {
            if (transport_peer_gone(comm, peer)) {
                coll_set_error(comm, "%s #%llu: rank %d (%.64s) is gone before connecting to "
                               "this rank: its bootstrap listener refuses connections",
                               comm->op_name, (unsigned long long)comm->seq, peer,
                               p->info.host);
                coll_comm_blame(comm, peer);
                return collRemoteError;
            }
            next_probe = coll_now_ns() + 1000000000LL;
        }
        struct pollfd pfds[COLL_CONN_MAX_FDS + 2];
        struct coll_conn *l = st->listener;
        for (int i = 0; i < l->nfds; i++)
            pfds[i] = (struct pollfd){.fd = l->fds[i], .events = POLLIN};
        /* The peer may have failed before connecting: its notice ends the wait. */
        int nn = coll_bootstrap_notice_fds(comm, pfds + l->nfds);
        int64_t end = until_ns < comm->deadline_ns ? until_ns : comm->deadline_ns;
        int64_t ms = (end - now) / 1000000 + 1;
        (void)poll(pfds, (nfds_t)(l->nfds + nn), ms > 100 ? 100 : (int)ms);
        COLL_CHECK(coll_bootstrap_notice_check(comm, pfds + l->nfds, nn));
    }
    COLL_INFO(COLL_SUBSYS_TRANSPORT, "receive from rank %d via %s", peer, st->tp->name);
    *conn_p = *slot;
    return collSuccess;
}

/* A connection that cannot be made mid-operation fails it like a broken one: the
 * comm is poisoned, so the peers waiting on this rank fail fast and later calls
 * are refused instead of trying again. */
collResult_t coll_transport_get_conn(struct coll_comm *comm, int peer, bool is_send,
                                     struct coll_conn **conn_p)
{
    /* Made already: every call of a collective but the first asks for these. */
    const struct coll_peer *p = &comm->peers[peer];
    struct coll_conn *c = is_send ? p->send_conn : p->recv_conn;
    if (c != NULL) {
        *conn_p = c;
        return collSuccess;
    }
    collResult_t res = transport_get_conn(comm, peer, is_send, INT64_MAX, conn_p);
    if (res != collSuccess)
        coll_comm_poison(comm, res);
    return res;
}

collResult_t coll_transport_wait_recv_conn(struct coll_comm *comm, int peer, int ms,
                                           struct coll_conn **conn_p)
{
    collResult_t res = transport_get_conn(comm, peer, false,
                                          coll_now_ns() + (int64_t)ms * 1000000LL, conn_p);
    if (res != collSuccess)
        coll_comm_poison(comm, res);
    return res;
}

const struct coll_transport *coll_transport_for_peer(const struct coll_comm *comm, int peer)
{
    if (peer < 0 || peer >= comm->nranks)
        return NULL;
    const struct coll_peer *p = &comm->peers[peer];
    const struct coll_conn *c = p->send_conn ? p->send_conn : p->recv_conn;
    if (c)
        return c->tp;
    /* Not connected yet: the transport the first connection will take. */
    int i = transport_find(comm, peer);
    return i < 0 ? NULL : comm->tps[i].tp;
}

const char *coll_transport_peer_name(const struct coll_comm *comm, int peer)
{
    const struct coll_transport *tp = coll_transport_for_peer(comm, peer);
    return tp ? tp->name : NULL;
}

void coll_transport_max_ratios(double *r_msg, double *r_wake)
{
    for (int i = 0; i < NTRANSPORTS; i++) {
        if (transport_table[i]->plan_msg_ratio > *r_msg)
            *r_msg = transport_table[i]->plan_msg_ratio;
        if (transport_table[i]->plan_wake_ratio > *r_wake)
            *r_wake = transport_table[i]->plan_wake_ratio;
    }
}
