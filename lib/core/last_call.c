/* collCommGetLastCallInfo: what the last call that ended on a communicator used
 * (algorithm, transports, the pieces its buffer was cut into).
 *
 * Each call is recorded at its end by the thread that ran it (the caller's, or
 * the progress thread for a call on a stream), before its flight record closes:
 *
 *   call_exec / coll_p2p_run          coll_last_call_record          comm->last_call
 *   algorithm ran, record open  --->  what the flight record holds --> (under
 *                                                                      last_call_lock)
 *
 * and read by collCommGetLastCallInfo in any thread under the same lock, which
 * the writer holds only for a copy of a few words.  Nothing is derived here:
 * the flight record (lib/engine/flight.h) holds what happened as it happened.
 * The engine adds each request's peer and transport when it posts it, and the
 * cut of the buffer from the schedule that moves it (coll_sched.cut_*); ll and
 * direct, which move bytes through memory every peer shares, say so
 * (coll_flight_shared), and hier, whose levels cut the buffer each their own
 * way, says it has no one cut.  A loop of the same call (same algorithm,
 * collective, count, type and root) talks to the same peers and cuts its buffer
 * alike, so what the last such call recorded is kept (comm->last_call_key) and
 * the per-call cost is the copy: an 8-byte allreduce takes about a
 * microsecond, and this must not weigh on it.
 *
 * A call with more than COLL_FLIGHT_PEERS peers has the rest counted together
 * in its record: those are taken to be every other rank this rank has a
 * connection with. */
#include "last_call.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "algo.h"
#include "flight.h"
#include "transport.h"

static void last_call_lock(struct coll_comm *comm)
{
    while (atomic_exchange_explicit(&comm->last_call_lock, 1, memory_order_acquire) != 0)
        sched_yield();
}

static void last_call_unlock(struct coll_comm *comm)
{
    atomic_store_explicit(&comm->last_call_lock, 0, memory_order_release);
}

/* The call's flight record: one of the newest (calls that began after it may
 * still run beside it on a progress thread). */
static bool last_flight_record(const struct coll_comm *comm, const struct coll_last_call_desc *d,
                               struct coll_flight_copy *r)
{
    uint64_t count = coll_flight_count(comm);
    uint64_t first = count > COLL_FLIGHT_RECORDS - 1 ? count - (COLL_FLIGHT_RECORDS - 1) : 0;
    for (uint64_t i = count; i-- > first;)
        if (coll_flight_copy(comm, i, r) && r->seq == d->seq && r->name != NULL &&
            strcmp(r->name, d->func) == 0)
            return true;
    return false;
}

/* The peers of record r and the transports it moved bytes on: every peer for a
 * call through shared memory; else the peers it names, and, when it had more
 * than it follows one by one, every other connected rank. */
static void last_record_peers(const struct coll_comm *comm, const struct coll_flight_copy *r,
                              uint32_t *mask_p, int *peers_p)
{
    *mask_p = r->tp_mask;
    if (r->shared) {
        for (int p = 0; p < comm->nranks; p++) {
            if (p == comm->rank)
                continue;
            *mask_p |= coll_transport_bit(coll_transport_for_peer(comm, p));
            ++*peers_p;
        }
        return;
    }
    bool listed[COLL_FLIGHT_PEERS + 1] = {false};
    for (int k = 0; k < r->npeers; k++) {
        int p = r->peers[k].peer;
        if (p < 0 || p >= comm->nranks || p == comm->rank)
            continue;
        listed[k] = true;
        ++*peers_p;
    }
    const struct coll_flight_copy_peer *o = &r->peers[r->npeers];
    if (o->sent == 0 && o->sent_posted == 0 && o->recvd == 0 && o->recvd_posted == 0)
        return;
    for (int p = 0; p < comm->nranks; p++) {
        bool seen = p == comm->rank;
        for (int k = 0; k < r->npeers && !seen; k++)
            seen = listed[k] && r->peers[k].peer == p;
        const struct coll_peer *cp = &comm->peers[p];
        if (seen || (cp->send_conn == NULL && cp->recv_conn == NULL))
            continue;
        ++*peers_p;
    }
}

static bool last_key_matches(const struct coll_last_call_key *key,
                             const struct coll_last_call_desc *d)
{
    return key->valid && key->algo == d->algo->name && key->func == d->coll_func &&
           key->count == d->count && key->dtype == d->dtype && key->root == d->root;
}

void coll_last_call_record(struct coll_comm *comm, const struct coll_last_call_desc *d,
                           collResult_t res)
{
    struct coll_last_call c = {.seq = d->seq, .func = d->func,
                               .algo = d->algo != NULL ? d->algo->name : "p2p",
                               .count = d->count, .dtype = d->dtype, .op = d->op,
                               .root = d->root, .result = (int)res};
    struct coll_last_call_key *key = &comm->last_call_key;
    if (d->algo != NULL && last_key_matches(key, d)) {
        c.tp_mask = key->tp_mask;
        c.peers = key->peers;
        c.chunk_bytes = key->chunk_bytes;
        c.chunks = key->chunks;
    } else {
        struct coll_flight_copy r;
        if (last_flight_record(comm, d, &r)) {
            last_record_peers(comm, &r, &c.tp_mask, &c.peers);
            /* A call with one rank, or nothing to move, is not cut. */
            if (c.peers > 0 && d->count > 0) {
                c.chunk_bytes = (size_t)r.cut_bytes;
                c.chunks = (size_t)r.cut_pieces;
            }
        }
        /* A failed call may have stopped before meeting every peer: not kept. */
        if (d->algo != NULL && res == collSuccess)
            *key = (struct coll_last_call_key){
                .valid = true, .algo = c.algo, .func = d->coll_func, .dtype = d->dtype,
                .root = d->root, .count = d->count, .tp_mask = c.tp_mask, .peers = c.peers,
                .chunk_bytes = c.chunk_bytes, .chunks = c.chunks};
    }
    last_call_lock(comm);
    comm->last_call = c;
    last_call_unlock(comm);
}

/* "shm", "shm+tcp": the names of mask's transports in table order. */
static void last_tp_names(uint32_t mask, char *buf, size_t cap)
{
    int n;
    const struct coll_transport *const *table = coll_transport_table(&n);
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (!(mask & (1u << i)))
            continue;
        int w = snprintf(buf + len, cap - len, "%s%s", len ? "+" : "", table[i]->name);
        if (w < 0 || (size_t)w >= cap - len)
            break; /* the table's names all fit (COLL_CALL_INFO_TRANSPORTS_BYTES) */
        len += (size_t)w;
    }
}

/* The size of the first collCallInfo_t: callers built against it stay served
 * when fields are added at its end. */
#define LAST_CALL_INFO_MIN_SIZE sizeof(collCallInfo_t)

COLL_API collResult_t collCommGetLastCallInfo(const collComm_t comm, collCallInfo_t *info)
{
    if (comm == NULL) {
        coll_set_error(NULL, "collCommGetLastCallInfo: comm is NULL");
        return collInvalidArgument;
    }
    if (info == NULL) {
        coll_set_error(comm, "collCommGetLastCallInfo: info is NULL");
        return collInvalidArgument;
    }
    if (info->magic != COLL_CALL_INFO_MAGIC) {
        coll_set_error(comm, "collCommGetLastCallInfo: info->magic is 0x%x, not "
                       "COLL_CALL_INFO_MAGIC: declare info with COLL_CALL_INFO_INITIALIZER",
                       info->magic);
        return collInvalidArgument;
    }
    if (info->size < LAST_CALL_INFO_MIN_SIZE) {
        coll_set_error(comm, "collCommGetLastCallInfo: info->size %zu is less than %zu, the "
                       "size of collCallInfo_t: declare info with COLL_CALL_INFO_INITIALIZER",
                       info->size, LAST_CALL_INFO_MIN_SIZE);
        return collInvalidArgument;
    }
    last_call_lock(comm);
    struct coll_last_call c = comm->last_call;
    last_call_unlock(comm);
    collCallInfo_t out = {.size = info->size, .magic = info->magic, .version = info->version,
                          .seq = c.seq, .peers = c.peers, .result = (collResult_t)c.result,
                          .count = c.count, .datatype = -1, .op = -1, .root = -1,
                          .chunkBytes = c.chunk_bytes, .chunks = c.chunks};
    if (c.seq != 0) {
        out.func = c.func;
        out.algo = c.algo;
        out.datatype = c.dtype;
        out.op = c.op;
        out.root = c.root;
        last_tp_names(c.tp_mask, out.transports, sizeof(out.transports));
    }
    memcpy(info, &out, info->size < sizeof(out) ? info->size : sizeof(out));
    return collSuccess;
}
