/* collCommGetLastCallInfo: what the last call that ended on a communicator used
 * (algorithm, transports, the pieces its buffer was cut into).
 *
 * Each call is recorded at its end by the thread that ran it (the caller's, or
 * the progress thread for a call on a stream), before its flight record closes:
 *
 *   call_exec / coll_p2p_run          coll_last_call_record          comm->last_call
 *   algorithm ran, record open  --->  peers from the flight record --> (under
 *                                     -> their transports (a mask)     last_call_lock)
 *                                     pieces from the slicing rules
 *
 * and read by collCommGetLastCallInfo in any thread under the same lock, which
 * the writer holds only for a copy of a few words.  A loop of the same call
 * (same algorithm, collective, count, type and root) talks to the same peers and
 * cuts its buffer alike, so what the last such call found is kept
 * (comm->last_call_key) and the per-call cost is the copy: an 8-byte allreduce
 * takes about a microsecond, and this must not weigh on it.
 *
 * The transports are those of the peers the call posted bytes to or from, or
 * waited for (the flight record's peers, flight.h).  A call with more than
 * COLL_FLIGHT_PEERS peers has the rest counted together: those are taken to be
 * every other rank this rank has a connection with.  ll and direct move their
 * bytes through shared memory rather than over connections, and run only when
 * every peer is reached over shared memory: their transports are every peer's.
 *
 * The pieces follow the slicing of ring.c, tree.c and naive.c (the constants
 * marked below are theirs); the other algorithms do not cut the buffer into
 * pieces of COLL_CHUNKSIZE (rd, ll, direct, the messages of p2p), or cut it per
 * level in ways a pair of numbers does not describe (hier): they report 0. */
#include "last_call.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "algo.h"
#include "flight.h"
#include "pattern.h"
#include "reduce.h"
#include "transport.h"

/* algorithms/tree.c's TREE_SPLIT_MIN_BYTES: an allreduce from this size is
 * split over two trees. */
#define LAST_TREE_SPLIT_MIN_BYTES (64 * 1024)
/* algorithms/naive.c's NAIVE_SCRATCH_MAX: the root's slots, all peers together. */
#define LAST_NAIVE_SCRATCH_MAX ((size_t)64 << 20)

static void last_call_lock(struct coll_comm *comm)
{
    while (atomic_exchange_explicit(&comm->last_call_lock, 1, memory_order_acquire) != 0)
        sched_yield();
}

static void last_call_unlock(struct coll_comm *comm)
{
    atomic_store_explicit(&comm->last_call_lock, 0, memory_order_release);
}

/* Pieces of count elements cut into slices of at most slice_elems: how many, and
 * the bytes of the largest. */
static void last_slices(size_t count, size_t slice_elems, size_t esize, size_t *k_p,
                        size_t *bytes_p)
{
    size_t k = coll_slices(count, slice_elems);
    *k_p = k;
    *bytes_p = (count + k - 1) / k * esize;
}

/* The ring (ring.c): an allreduce cuts the buffer into nranks balanced segments
 * and each segment into K slices (K from the largest); broadcast and reduce are
 * chains over the whole buffer; allgather and reduce-scatter cut each rank's
 * block alike. */
static void last_ring(const struct coll_comm *comm, int f, size_t count, size_t esize,
                      size_t *bytes_p, size_t *chunks_p)
{
    size_t n = (size_t)comm->nranks, se = comm->chunk_bytes / esize, k;
    if (se == 0)
        se = 1;
    switch (f) {
    case COLL_FUNC_ALLREDUCE: {
        size_t base = count / n, rem = count % n, len0 = base + (rem ? 1 : 0);
        last_slices(len0, se, esize, &k, bytes_p);
        /* A segment shorter than K elements has one piece per element. */
        *chunks_p = rem * (k < base + 1 ? k : base + 1) + (n - rem) * (k < base ? k : base);
        break;
    }
    case COLL_FUNC_BROADCAST:
    case COLL_FUNC_REDUCE:
        last_slices(count, se, esize, chunks_p, bytes_p);
        break;
    default: /* allgather, reduce-scatter: count is one block */
        last_slices(count, se, esize, &k, bytes_p);
        *chunks_p = n * k;
        break;
    }
}

/* The tree (tree.c): one stream over the whole buffer, or for an allreduce of
 * LAST_TREE_SPLIT_MIN_BYTES or more two halves, each cut into slices. */
static void last_tree(const struct coll_comm *comm, int f, size_t count, size_t esize,
                      size_t *bytes_p, size_t *chunks_p)
{
    int ns = f == COLL_FUNC_ALLREDUCE && count * esize >= LAST_TREE_SPLIT_MIN_BYTES ? 2 : 1;
    size_t se = comm->chunk_bytes / esize;
    for (int s = 0; s < ns; s++) {
        size_t off, len, k, bytes;
        coll_ring_chunk(count, ns, s, &off, &len);
        if (len == 0)
            continue;
        last_slices(len, se, esize, &k, &bytes);
        *chunks_p += k;
        if (bytes > *bytes_p)
            *bytes_p = bytes;
    }
}

/* naive (naive.c): slices of COLL_CHUNKSIZE, smaller when the root's depth x
 * nranks slots would pass LAST_NAIVE_SCRATCH_MAX; allgather and reduce-scatter
 * cut every block alike. */
static void last_naive(const struct coll_comm *comm, int f, size_t count, size_t esize,
                       size_t *bytes_p, size_t *chunks_p)
{
    size_t bytes = comm->chunk_bytes, k;
    size_t cap = LAST_NAIVE_SCRATCH_MAX / ((size_t)comm->depth * (size_t)comm->nranks);
    if (bytes > cap)
        bytes = cap < 4096 ? 4096 : cap;
    size_t se = bytes / esize ? bytes / esize : 1;
    last_slices(count, se, esize, &k, bytes_p);
    bool blocks = f == COLL_FUNC_ALLGATHER || f == COLL_FUNC_REDUCE_SCATTER;
    *chunks_p = blocks ? (size_t)comm->nranks * k : k;
}

static void last_pieces(const struct coll_comm *comm, const struct coll_last_call_desc *d,
                        size_t *bytes_p, size_t *chunks_p)
{
    *bytes_p = 0;
    *chunks_p = 0;
    if (d->algo == NULL || comm->nranks == 1 || d->count == 0 || d->dtype < 0)
        return;
    size_t esize = coll_dtype_size((collDataType_t)d->dtype);
    const char *name = d->algo->name;
    if (strcmp(name, "ring") == 0)
        last_ring(comm, d->coll_func, d->count, esize, bytes_p, chunks_p);
    else if (strcmp(name, "tree") == 0)
        last_tree(comm, d->coll_func, d->count, esize, bytes_p, chunks_p);
    else if (strcmp(name, "naive") == 0)
        last_naive(comm, d->coll_func, d->count, esize, bytes_p, chunks_p);
}

/* The bit of tp in a transport mask: its place in the transport table. */
static uint32_t last_tp_bit(const struct coll_transport *tp)
{
    int n;
    const struct coll_transport *const *table = coll_transport_table(&n);
    for (int i = 0; tp != NULL && i < n; i++)
        if (table[i] == tp)
            return 1u << i;
    return 0;
}

/* The transports of every peer, and their number (ll, direct). */
static void last_all_peers(const struct coll_comm *comm, uint32_t *mask_p, int *peers_p)
{
    for (int k = 0; k < comm->nranks; k++) {
        if (k == comm->rank)
            continue;
        *mask_p |= last_tp_bit(coll_transport_for_peer(comm, k));
        ++*peers_p;
    }
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

/* The transports of the peers the call's flight record names, and their number. */
static void last_flight_peers(const struct coll_comm *comm, const struct coll_last_call_desc *d,
                              uint32_t *mask_p, int *peers_p)
{
    struct coll_flight_copy r;
    if (!last_flight_record(comm, d, &r))
        return;
    bool listed[COLL_FLIGHT_PEERS + 1] = {false};
    for (int k = 0; k < r.npeers; k++) {
        int p = r.peers[k].peer;
        if (p < 0 || p >= comm->nranks || p == comm->rank)
            continue;
        listed[k] = true;
        *mask_p |= last_tp_bit(coll_transport_for_peer(comm, p));
        ++*peers_p;
    }
    const struct coll_flight_copy_peer *o = &r.peers[r.npeers];
    if (o->sent == 0 && o->sent_posted == 0 && o->recvd == 0 && o->recvd_posted == 0)
        return;
    /* More peers than the record follows one by one: every other connected rank. */
    for (int p = 0; p < comm->nranks; p++) {
        bool seen = p == comm->rank;
        for (int k = 0; k < r.npeers && !seen; k++)
            seen = listed[k] && r.peers[k].peer == p;
        const struct coll_peer *cp = &comm->peers[p];
        if (seen || (cp->send_conn == NULL && cp->recv_conn == NULL))
            continue;
        *mask_p |= last_tp_bit(coll_transport_for_peer(comm, p));
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
        bool shared = d->algo != NULL && (strcmp(c.algo, "ll") == 0 ||
                                          strcmp(c.algo, "direct") == 0);
        if (shared)
            last_all_peers(comm, &c.tp_mask, &c.peers);
        else
            last_flight_peers(comm, d, &c.tp_mask, &c.peers);
        last_pieces(comm, d, &c.chunk_bytes, &c.chunks);
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
