/* Point-to-point messages: collSend, collRecv, and collAllToAll, collGather and
 * collScatter built from them, and the engine that progresses any number of them
 * at once (coll_p2p_run, used by the blocking calls as a group of one and by
 * collGroupEnd).
 *
 * A message travels on the same per-peer connections as the collectives, as a
 * 16-byte header {magic, byte count} followed by the data:
 *
 *   sender                               receiver
 *   isend hdr {P2P_MAGIC, 4000} ------>  irecv hdr (16 bytes)
 *   isend data (4000 bytes)     ------>  irecv data (the bytes it expects)
 *                                        hdr done: count == expected?  else
 *                                        collInvalidUsage naming both sizes and
 *                                        the peer, and the comm is poisoned so the
 *                                        sender's side fails instead of waiting
 *
 * The receive of the data is posted right behind its header, so a message costs
 * no extra round trip; it never writes past the bytes the receiver expects, so a
 * longer message cannot overrun the buffer.  Connections are FIFO: messages to
 * one peer arrive in the order they were issued, and a receive is matched with
 * the next message from that peer.
 *
 * Running a set of messages: all send connections are made first (a connect
 * needs nothing from the peer's code), then the receive ones (an accept waits
 * for the peer's connect), so ranks that exchange in both directions do not wait
 * on each other.  The set is then one schedule of the engine (engine.h): a lane
 * per connection (communicator, peer, direction) whose pieces are, in order,
 * each message's header and data, at most P2P_MAX_INFLIGHT messages in flight
 * per connection; a receive's header is checked as it completes, and a lane
 * whose connection is not there yet is accepted by the engine while the others
 * move.  Messages to the rank itself are
 * copied locally, the k-th send to itself into the k-th receive from itself.
 * A send whose buffer overlaps a receive of the same set (an in-place exchange)
 * is copied aside first, so its bytes are read before any receive writes.
 *
 * A receive from any source (collRecvAny, alone) first finds its sender: it looks
 * at the receive connection of every other rank in turn for a message header that
 * has arrived and that nothing has taken (the transport's recv_probe, which takes
 * nothing), accepting the connections made meanwhile, and sleeps between rounds
 * (50 us, doubling up to 1 ms) under the deadline, abort and poisoning.  The first
 * rank whose header it sees becomes its peer, and it runs as a receive from that
 * rank.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine.h"
#include "exec.h"
#include "flight.h"
#include "last_call.h"
#include "mismatch.h"
#include "device.h"
#include "p2p.h"
#include "regcache.h"
#include "stream.h"
#include "reduce.h"

#define P2P_MAGIC 0x31503250434f4c4cull /* "COLCP2P1" read as little-endian bytes */
/* Messages posted at once on one connection: two requests each, well inside
 * the transport's queue of requests per connection. */
#define P2P_MAX_INFLIGHT 32

enum { P2P_WAITING, P2P_POSTED, P2P_DONE };

/* A communicator that the set of messages uses. */
struct p2p_comm {
    struct coll_comm *comm;
    int *lane;     /* 2 * nranks: the lane of each send / receive connection, or -1 */
    uint64_t seq;  /* the run's number on comm (its flight record's) */
};

struct p2p_run {
    struct coll_p2p_op *ops;
    int nops;
    const char *op_name;
    const struct coll_p2p_coll *coll; /* the collective they carry out; NULL: none */
    bool begun;               /* the calls began (sequence numbers, flight records) */
    struct p2p_comm *comms;
    int ncomms;
    char *stage;              /* copies of sends that overlap a receive */
    /* The schedule: lane k carries ops lane_ops[first[k] .. first[k] + count[k]). */
    struct coll_lane *lanes;
    int nlanes;
    int *lane_ops, *first, *count;
};

static collResult_t p2p_add_comm(struct p2p_run *run, struct coll_comm *comm)
{
    for (int i = 0; i < run->ncomms; i++)
        if (run->comms[i].comm == comm)
            return collSuccess;
    struct p2p_comm *pc = &run->comms[run->ncomms];
    size_t slots = 2 * (size_t)comm->nranks;
    COLL_CHECK(coll_calloc(&pc->lane, slots));
    for (size_t k = 0; k < slots; k++)
        pc->lane[k] = -1;
    pc->comm = comm;
    run->ncomms++;
    return collSuccess;
}

static struct p2p_comm *p2p_find_comm(struct p2p_run *run, const struct coll_comm *comm)
{
    for (int i = 0; i < run->ncomms; i++)
        if (run->comms[i].comm == comm)
            return &run->comms[i];
    return NULL;
}

static bool p2p_is_self(const struct coll_p2p_op *op)
{
    return op->peer == op->comm->rank;
}

/* Copies aside every send whose bytes overlap a receive of the set. */
static collResult_t p2p_stage(struct p2p_run *run)
{
    size_t total = 0;
    bool *overlap;
    COLL_CHECK(coll_calloc(&overlap, (size_t)run->nops));
    for (int i = 0; i < run->nops; i++) {
        const struct coll_p2p_op *s = &run->ops[i];
        if (!s->is_send || s->bytes == 0)
            continue;
        uintptr_t s0 = (uintptr_t)s->buf, s1 = s0 + s->bytes;
        for (int j = 0; j < run->nops && !overlap[i]; j++) {
            const struct coll_p2p_op *r = &run->ops[j];
            uintptr_t r0 = (uintptr_t)r->buf, r1 = r0 + r->bytes;
            if (!r->is_send && r->bytes > 0 && s0 < r1 && r0 < s1)
                overlap[i] = true;
        }
        if (overlap[i])
            total += s->bytes;
    }
    if (total > 0) {
        run->stage = malloc(total);
        if (run->stage == NULL) {
            coll_set_error(run->ops[0].comm, "%s: cannot allocate %zu bytes to copy in-place "
                           "sends aside", run->op_name, total);
            free(overlap);
            return collSystemError;
        }
        char *at = run->stage;
        for (int i = 0; i < run->nops; i++) {
            if (!overlap[i])
                continue;
            memcpy(at, run->ops[i].buf, run->ops[i].bytes);
            run->ops[i].buf = at;
            at += run->ops[i].bytes;
        }
    }
    free(overlap);
    return collSuccess;
}

/* The next op after `from` that sends to (or receives from) its own rank on comm. */
static int p2p_next_self(const struct p2p_run *run, const struct coll_comm *comm, bool is_send,
                         int from)
{
    for (int i = from + 1; i < run->nops; i++) {
        const struct coll_p2p_op *op = &run->ops[i];
        if (op->comm == comm && op->is_send == is_send && p2p_is_self(op))
            return i;
    }
    return -1;
}

/* Checks that the messages of each comm to its own rank pair up (the k-th send
 * with the k-th receive, same size) before anything is issued: a refusal here
 * leaves the comm usable.  The copies are made later, by p2p_self_copy. */
static collResult_t p2p_self_check(struct p2p_run *run)
{
    for (int c = 0; c < run->ncomms; c++) {
        struct coll_comm *comm = run->comms[c].comm;
        int s = -1, r = -1;
        for (;;) {
            s = p2p_next_self(run, comm, true, s);
            r = p2p_next_self(run, comm, false, r);
            if (s < 0 && r < 0)
                break;
            if (s < 0 || r < 0) {
                coll_set_error(comm, "%s: rank %d %s itself with no matching %s in the same "
                               "group", run->op_name, comm->rank,
                               s >= 0 ? "sends to" : "receives from",
                               s >= 0 ? "collRecv" : "collSend");
                return collInvalidUsage;
            }
            if (run->ops[s].bytes != run->ops[r].bytes) {
                coll_set_error(comm, "%s: rank %d sends %zu bytes to itself but its matching "
                               "collRecv expects %zu bytes (%zu x %s)", run->op_name,
                               comm->rank, run->ops[s].bytes, run->ops[r].bytes,
                               run->ops[r].count, coll_dtype_name(run->ops[r].dtype));
                return collInvalidUsage;
            }
        }
    }
    return collSuccess;
}

static void p2p_self_copy(struct p2p_run *run)
{
    for (int c = 0; c < run->ncomms; c++) {
        struct coll_comm *comm = run->comms[c].comm;
        int s = -1, r = -1;
        while ((s = p2p_next_self(run, comm, true, s)) >= 0 &&
               (r = p2p_next_self(run, comm, false, r)) >= 0) {
            if (run->ops[s].bytes > 0)
                memmove(run->ops[r].buf, run->ops[s].buf, run->ops[s].bytes);
            run->ops[s].state = P2P_DONE;
            run->ops[r].state = P2P_DONE;
        }
    }
}

/* The op that piece i of lane l carries (its header when i is even, its data
 * when odd). */
static struct coll_p2p_op *p2p_lane_op(const struct p2p_run *run, const struct coll_lane *l,
                                       size_t i)
{
    return &run->ops[run->lane_ops[run->first[l->tag] + (int)(i / 2)]];
}

/* Groups the messages into lanes, one per connection in the order issued, and
 * makes the send connections.  A receive connection is made by its sender, who
 * may make it only once this rank's own sends have reached it (a pipeline stage
 * that sends forward and receives back in one group, from a neighbour that first
 * waits for that send): a receive lane whose connection is not there yet is
 * accepted by the engine while the rest of the group moves (coll_lane.accept). */
static collResult_t p2p_connect(struct p2p_run *run)
{
    COLL_CHECK(coll_calloc(&run->lanes, (size_t)run->nops));
    COLL_CHECK(coll_calloc(&run->lane_ops, 3 * (size_t)run->nops));
    run->first = run->lane_ops + run->nops;
    run->count = run->first + run->nops;
    int *of = NULL; /* the lane of each op */
    COLL_CHECK(coll_calloc(&of, (size_t)run->nops));
    for (int i = 0; i < run->nops; i++) {
        struct coll_p2p_op *op = &run->ops[i];
        op->state = P2P_WAITING;
        of[i] = -1;
        if (p2p_is_self(op))
            continue;
        struct p2p_comm *pc = p2p_find_comm(run, op->comm);
        int *slot = &pc->lane[2 * op->peer + (op->is_send ? 0 : 1)];
        if (*slot < 0) {
            *slot = run->nlanes++;
            run->lanes[*slot] = (struct coll_lane){.comm = op->comm, .is_send = op->is_send,
                                                   .tag = *slot,
                                                   .window = 2 * P2P_MAX_INFLIGHT};
        }
        of[i] = *slot;
        run->count[*slot]++;
        run->lanes[*slot].total += 2;
    }
    for (int k = 0, at = 0; k < run->nlanes; k++) {
        run->first[k] = at;
        at += run->count[k];
        run->count[k] = 0;
    }
    for (int i = 0; i < run->nops; i++)
        if (of[i] >= 0)
            run->lane_ops[run->first[of[i]] + run->count[of[i]]++] = i;
    free(of);
    for (int pass = 0; pass < 2; pass++) {
        for (int k = 0; k < run->nlanes; k++) {
            struct coll_lane *l = &run->lanes[k];
            if (l->is_send != (pass == 0))
                continue;
            /* A receive's not made yet: the engine accepts it as the stage
             * runs, and meanwhile a later call in flight leaves it to this one. */
            COLL_CHECK(coll_lane_link(l->comm, l, p2p_lane_op(run, l, 0)->peer));
        }
    }
    return collSuccess;
}

/* Sleeps between the rounds of a receive from any source: from this, doubling. */
#define P2P_ANY_PAUSE_NS 50000
#define P2P_ANY_PAUSE_MAX_NS 1000000

/* The first rank whose message header has arrived at op's receive connections, as op's
 * peer (a receive from any source).  Ranks are looked at from the one after this rank
 * on, so that no rank's messages wait behind another's for ever. */
static collResult_t p2p_find_sender(struct p2p_run *run, struct coll_p2p_op *op)
{
    struct coll_comm *comm = op->comm;
    int64_t pause = P2P_ANY_PAUSE_NS;
    for (;;) {
        for (int k = 1; k < comm->nranks; k++) {
            int peer = (comm->rank + k) % comm->nranks;
            struct coll_conn *c = NULL;
            /* Not waiting: the connection when it is there (accepting any that came). */
            COLL_CHECK(coll_transport_wait_recv_conn(comm, peer, 0, &c));
            if (c == NULL)
                continue;
            uint64_t hdr[2];
            size_t got = 0;
            collResult_t res = coll_conn_recv_probe(c, hdr, sizeof(hdr), &got);
            if (res != collSuccess) {
                coll_set_error(comm, "%s #%llu: the connection from rank %d failed while "
                               "looking for a message from any rank (%s)", run->op_name,
                               (unsigned long long)comm->seq, peer, coll_result_name(res));
                coll_comm_blame(comm, peer);
                coll_comm_poison(comm, res);
                return res;
            }
            if (got == sizeof(hdr) && hdr[0] == P2P_MAGIC) {
                op->peer = peer;
                return collSuccess;
            }
        }
        collResult_t res = (collResult_t)atomic_load(&comm->async_error);
        if (res != collSuccess)
            return res;
        if (atomic_load(&comm->aborting)) {
            coll_set_error(comm, "%s #%llu: communicator aborted", run->op_name,
                           (unsigned long long)comm->seq);
            coll_comm_poison(comm, collRemoteError);
            return collRemoteError;
        }
        if (coll_now_ns() >= comm->deadline_ns) {
            coll_set_error(comm, "%s #%llu: no message from any rank within %lld ms",
                           run->op_name, (unsigned long long)comm->seq,
                           (long long)comm->timeout_ms);
            coll_comm_poison(comm, collTimeout);
            return collTimeout;
        }
        struct timespec ts = {0, pause};
        nanosleep(&ts, NULL);
        pause = pause * 2 > P2P_ANY_PAUSE_MAX_NS ? P2P_ANY_PAUSE_MAX_NS : pause * 2;
    }
}

/* Gives every receive from any source its sender. */
static collResult_t p2p_find_senders(struct p2p_run *run)
{
    for (int i = 0; i < run->nops; i++)
        if (run->ops[i].peer == COLL_P2P_ANY)
            COLL_CHECK(p2p_find_sender(run, &run->ops[i]));
    return collSuccess;
}

/* A received header: the sender's byte count must be what this receive expects. */
static collResult_t p2p_check_header(struct p2p_run *run, struct coll_p2p_op *op)
{
    struct coll_comm *comm = op->comm;
    if (op->hdr[0] != P2P_MAGIC) {
        coll_set_error(comm, "%s #%llu: collRecv from rank %d got no message header (%#llx): "
                       "the ranks' calls are out of step (a collective on one side, a "
                       "send/receive on the other?)", run->op_name,
                       (unsigned long long)comm->seq, op->peer,
                       (unsigned long long)op->hdr[0]);
        return collInvalidUsage;
    }
    if (op->hdr[1] != op->bytes) {
        coll_set_error(comm, "%s #%llu: rank %d sent %llu bytes but the matching collRecv on "
                       "rank %d expects %zu bytes (%zu x %s): message sizes differ",
                       run->op_name, (unsigned long long)comm->seq, op->peer,
                       (unsigned long long)op->hdr[1], comm->rank, op->bytes, op->count,
                       coll_dtype_name(op->dtype));
        return collInvalidUsage;
    }
    return collSuccess;
}

static void p2p_buf(void *ctx, const struct coll_lane *l, size_t i, void **p, size_t *bytes)
{
    struct coll_p2p_op *op = p2p_lane_op(ctx, l, i);
    if (i % 2 == 1) {
        *p = op->buf;
        *bytes = op->bytes;
        return;
    }
    op->state = P2P_POSTED; /* its header goes now, its data right behind */
    if (op->is_send) {
        op->hdr[0] = P2P_MAGIC;
        op->hdr[1] = op->bytes;
    }
    *p = op->hdr;
    *bytes = sizeof(op->hdr);
}

static void *p2p_handle(void *ctx, const struct coll_lane *l, size_t i, void *p, size_t bytes)
{
    (void)ctx;
    if (i % 2 == 0)
        return NULL;
    return coll_reg_handle(l->comm, l->conn, p, bytes);
}

static collResult_t p2p_done(void *ctx, struct coll_lane *l, size_t i, void *p)
{
    struct coll_p2p_op *op = p2p_lane_op(ctx, l, i);
    (void)p;
    if (i % 2 == 0)
        return op->is_send ? collSuccess : p2p_check_header(ctx, op);
    op->state = P2P_DONE;
    return collSuccess;
}

static const struct coll_sched_ops p2p_ops = {
    .buf = p2p_buf, .handle = p2p_handle, .done = p2p_done,
};

/* After a failure: comms with messages still in flight hold requests that point
 * at the caller's buffers, which the caller gets back now.  Poisoning them shuts
 * their connections so those requests can never write again. */
static void p2p_abandon(struct p2p_run *run, collResult_t res)
{
    for (int i = 0; i < run->nops; i++) {
        struct coll_p2p_op *op = &run->ops[i];
        if (op->state != P2P_POSTED ||
            atomic_load(&op->comm->async_error) != collSuccess)
            continue;
        coll_set_error(op->comm, "%s #%llu: abandoned with messages in flight after a failure "
                       "(%s) in the same group", run->op_name,
                       (unsigned long long)op->comm->seq, coll_result_name(res));
        coll_comm_poison(op->comm, res);
    }
}

/* What comm's flight record says of the run: one message is described whole
 * (count, type, peer), a collective (all-to-all, gather, scatter) by its count,
 * type and root, and a group by its name and message count. */
static struct coll_flight_desc p2p_flight_desc(const struct p2p_run *run,
                                               const struct coll_comm *comm,
                                               const struct coll_p2p_coll *coll)
{
    int n = 0, one = -1;
    for (int i = 0; i < run->nops; i++)
        if (run->ops[i].comm == comm) {
            n++;
            one = i;
        }
    struct coll_flight_desc d = {.name = run->op_name, .algo = "p2p", .count = (size_t)n,
                                 .dtype = -1, .op = -1, .root = -1, .peer = -1};
    if (n == 1) {
        d.count = run->ops[one].count;
        d.dtype = (int)run->ops[one].dtype;
        d.peer = run->ops[one].peer;
    }
    if (coll != NULL) {
        d.count = coll->a.count;
        d.dtype = (int)coll->a.dtype;
        d.root = coll->a.root;
        d.peer = -1;
    }
    return d;
}

/* Records the run as comm's last call (collCommGetLastCallInfo) while its flight
 * record is open; a group's count is 0 there, not its number of messages. */
static void p2p_last_call(const struct p2p_run *run, const struct p2p_comm *pc,
                          const struct coll_p2p_coll *coll, collResult_t res)
{
    struct coll_comm *comm = pc->comm;
    struct coll_flight_desc f = p2p_flight_desc(run, comm, coll);
    bool group = f.dtype < 0;
    coll_last_call_record(comm, &(struct coll_last_call_desc){
                                    .seq = pc->seq, .func = run->op_name, .coll_func = -1,
                                    .count = group ? 0 : f.count, .dtype = f.dtype, .op = -1,
                                    .root = f.root},
                          res);
}

/* The messages' one stage (its lanes set up by p2p_connect). */
static void p2p_sched(struct p2p_run *run, struct coll_sched *s)
{
    size_t max_bytes = 0;
    for (int i = 0; i < run->nops; i++)
        if (run->ops[i].bytes > max_bytes)
            max_bytes = run->ops[i].bytes;
    *s = (struct coll_sched){.comm = run->ops[0].comm, .ops = &p2p_ops, .ctx = run,
                             .lanes = run->lanes, .nlanes = run->nlanes,
                             .piece_bytes = max_bytes, .last = true};
}

/* Sets run up for ops (run zeroed): the calls begun on every comm (sequence
 * number, flight record), the senders of receives from any source found, the
 * connections made, the messages to itself copied; what remains is the
 * stage.  run->begun says whether the calls began (p2p_end ends them). */
static collResult_t p2p_begin(struct p2p_run *run, struct coll_p2p_op *ops, int nops,
                              const char *op_name, const struct coll_p2p_coll *coll)
{
    run->ops = ops;
    run->nops = nops;
    run->op_name = op_name;
    run->coll = coll;
    COLL_CHECK(coll_calloc(&run->comms, (size_t)nops));
    for (int i = 0; i < nops; i++)
        COLL_CHECK(p2p_add_comm(run, ops[i].comm));
    /* A comm poisoned since the call was queued: issue nothing. */
    for (int c = 0; c < run->ncomms; c++) {
        collResult_t res = (collResult_t)atomic_load(&run->comms[c].comm->async_error);
        if (res != collSuccess)
            return res;
    }
    COLL_CHECK(p2p_self_check(run));
    COLL_CHECK(p2p_stage(run));
    for (int c = 0; c < run->ncomms; c++) {
        struct coll_comm *comm = run->comms[c].comm;
        atomic_fetch_add(&comm->busy, 1);
        comm->last_algo_name = "p2p";
        run->comms[c].seq = ++comm->seq;
        coll_exec_begin(comm, op_name);
        struct coll_flight_desc d = p2p_flight_desc(run, comm, coll);
        coll_flight_begin(comm, &d);
    }
    run->begun = true;
    /* An all-to-all, gather or scatter is a collective: COLL_CHECK_MISMATCH agrees
     * on it first. */
    for (int c = 0; c < run->ncomms; c++) {
        struct coll_comm *comm = run->comms[c].comm;
        if (comm->check_mismatch && coll != NULL)
            COLL_CHECK(coll_mismatch_check(comm, coll->func, &coll->a));
    }
    COLL_CHECK(p2p_find_senders(run));
    COLL_CHECK(p2p_connect(run));
    p2p_self_copy(run);
    COLL_TRACE_LOG(COLL_SUBSYS_COLL, "%s #%llu: %d message(s)", op_name,
                   (unsigned long long)ops[0].comm->seq, nops);
    return collSuccess;
}

/* Ends run with res: the calls' records written and closed, what it held
 * freed. */
static void p2p_end(struct p2p_run *run, collResult_t res)
{
    if (run->begun) {
        if (res != collSuccess)
            p2p_abandon(run, res);
        for (int i = 0; i < run->nops && res == collSuccess; i++)
            if (run->ops[i].source != NULL)
                *run->ops[i].source = run->ops[i].peer;
        for (int c = 0; c < run->ncomms; c++) {
            p2p_last_call(run, &run->comms[c], run->coll, res);
            coll_flight_end(run->comms[c].comm, res);
            atomic_fetch_sub(&run->comms[c].comm->busy, 1);
        }
    }
    for (int c = 0; c < run->ncomms; c++)
        free(run->comms[c].lane);
    free(run->comms);
    free(run->lanes);
    free(run->lane_ops);
    free(run->stage);
}

collResult_t coll_p2p_run(struct coll_p2p_op *ops, int nops, const char *op_name,
                          const struct coll_p2p_coll *coll)
{
    if (nops == 0)
        return collSuccess;
    if (coll != NULL && !coll->set)
        coll = NULL;
    struct p2p_run run = {0};
    collResult_t res = p2p_begin(&run, ops, nops, op_name, coll);
    if (res == collSuccess && run.nlanes > 0) {
        struct coll_sched s;
        p2p_sched(&run, &s);
        res = coll_engine_run(&s);
    }
    p2p_end(&run, res);
    return res;
}

/* --- a group of messages beside other calls in flight --- */

struct coll_p2p_flight {
    struct coll_prog prog;
    struct p2p_run run;
    struct coll_sched sched;
    struct coll_p2p_coll coll;
};

static collResult_t p2p_flight_next(struct coll_prog *p)
{
    struct coll_p2p_flight *f = (struct coll_p2p_flight *)p;
    p->sched = p->pc++ == 0 && f->run.nlanes > 0 ? &f->sched : NULL;
    return collSuccess;
}

bool coll_p2p_flies(const struct coll_p2p_op *ops, int nops, const struct coll_p2p_coll *coll)
{
    if (nops == 0)
        return false;
    for (int i = 0; i < nops; i++)
        if (ops[i].comm != ops[0].comm || ops[i].peer == COLL_P2P_ANY)
            return false;
    return !(ops[0].comm->check_mismatch && coll != NULL && coll->set);
}

collResult_t coll_p2p_fly_begin(struct coll_p2p_op *ops, int nops, const char *op_name,
                                const struct coll_p2p_coll *coll, struct coll_p2p_flight **f_p,
                                struct coll_prog **p_p)
{
    struct coll_p2p_flight *f;
    COLL_CHECK(coll_calloc(&f, 1));
    if (coll != NULL && coll->set) {
        f->coll = *coll;
        coll = &f->coll;
    } else {
        coll = NULL;
    }
    f->prog = (struct coll_prog){.comm = ops[0].comm, .next = p2p_flight_next};
    *f_p = f;
    COLL_CHECK(p2p_begin(&f->run, ops, nops, op_name, coll));
    p2p_sched(&f->run, &f->sched);
    *p_p = &f->prog;
    return collSuccess;
}

void coll_p2p_fly_end(struct coll_p2p_flight *f, collResult_t res)
{
    if (f == NULL)
        return;
    p2p_end(&f->run, res);
    free(f);
}

/* The checks every call makes at the boundary on each buffer, naming the bad
 * argument; *dev is set when the buffer is CUDA device memory.  peer < -1 means
 * the call has no peer; the buffer holds `blocks` count-sized blocks, and mult
 * of them must not overflow (the same on every rank of a rooted call). */
static collResult_t p2p_check(struct coll_comm *comm, const char *fn, const char *bufname,
                              const void *buf, size_t count, size_t mult, size_t blocks,
                              collDataType_t datatype, int peer, bool *dev)
{
    if (comm == NULL) {
        coll_set_error(NULL, "%s: comm is NULL", fn);
        return collInvalidArgument;
    }
    if (buf == NULL && count > 0) {
        coll_set_error(comm, "%s: %s is NULL with count %zu", fn, bufname, count);
        return collInvalidArgument;
    }
    if ((unsigned)datatype >= collNumTypes) {
        coll_set_error(comm, "%s: datatype %d is out of range [0, %d)", fn, (int)datatype,
                       collNumTypes);
        return collInvalidArgument;
    }
    if (peer >= -1 && (peer < 0 || peer >= comm->nranks)) {
        coll_set_error(comm, "%s: peer %d is out of range [0, %d)", fn, peer, comm->nranks);
        return collInvalidArgument;
    }
    size_t esize = coll_dtype_size(datatype);
    if (count > SIZE_MAX / esize / mult || count * esize * mult > (size_t)PTRDIFF_MAX) {
        coll_set_error(comm, "%s: count %zu of %zu-byte elements (x %zu) overflows the address "
                       "space", fn, count, esize, mult);
        return collInvalidArgument;
    }
    bool is_dev = false;
    COLL_CHECK(coll_device_check_buffer(comm, fn, bufname, buf, count * blocks * esize, &is_dev));
    *dev = *dev || is_dev;
    return collSuccess;
}

/* The checks after the buffers': the stream (a cudaStream_t when some buffer is
 * device memory), the group's, and the communicator's state. */
static collResult_t p2p_check_stream(struct coll_comm *comm, const char *fn, collStream_t stream,
                                     bool dev)
{
    if (dev)
        COLL_CHECK(coll_device_check_stream(comm, fn, stream));
    else
        COLL_CHECK(coll_stream_check(comm, fn, stream));
    if (coll_group_active()) {
        COLL_CHECK(coll_group_stream(comm, fn, stream));
        if (dev)
            coll_group_device();
    }
    return coll_comm_check_usable(comm, fn);
}

/* One message outside a group: run now, or queued on its stream. */
static collResult_t p2p_issue(struct coll_p2p_op op, const char *fn, collStream_t stream,
                              bool dev)
{
    struct coll_comm *comm = op.comm;
    collResult_t res;
    if (stream == NULL && comm->blocking && !dev) {
        coll_comm_enter(comm);
        res = coll_p2p_run(&op, 1, fn, NULL);
        coll_comm_leave(comm);
        return res;
    }
    struct coll_work w = {.nops = 1, .name = fn, .device = dev};
    if (coll_calloc(&w.ops, 1) != collSuccess) {
        coll_set_error(comm, "%s: out of memory queueing the call on its stream", fn);
        return collSystemError;
    }
    w.ops[0] = op;
    return coll_work_issue(&w, stream);
}

/* A send or receive: queued in the open group, else run as a group of one. */
static collResult_t p2p_call(bool is_send, void *buf, size_t count, collDataType_t datatype,
                             int peer, struct coll_comm *comm, collStream_t stream)
{
    const char *fn = is_send ? "collSend" : "collRecv";
    bool dev = false;
    collResult_t res = p2p_check(comm, fn, is_send ? "sendbuff" : "recvbuff", buf, count, 1, 1,
                                 datatype, peer, &dev);
    if (res == collSuccess)
        res = p2p_check_stream(comm, fn, stream, dev);
    if (res != collSuccess) {
        if (coll_group_active())
            coll_group_fail(res);
        return res;
    }
    struct coll_p2p_op op = {.comm = comm, .peer = peer, .is_send = is_send, .buf = buf,
                             .count = count, .dtype = datatype,
                             .bytes = count * coll_dtype_size(datatype)};
    if (coll_group_active())
        return coll_group_queue_p2p(&op);
    return p2p_issue(op, fn, stream, dev);
}

COLL_API collResult_t collSend(const void *sendbuff, size_t count, collDataType_t datatype,
                               int peer, collComm_t comm, collStream_t stream)
{
    return p2p_call(true, (void *)(uintptr_t)sendbuff, count, datatype, peer, comm, stream);
}

COLL_API collResult_t collRecv(void *recvbuff, size_t count, collDataType_t datatype, int peer,
                               collComm_t comm, collStream_t stream)
{
    return p2p_call(false, recvbuff, count, datatype, peer, comm, stream);
}

COLL_API collResult_t collRecvAny(void *recvbuff, size_t count, collDataType_t datatype,
                                  int *peer, collComm_t comm, collStream_t stream)
{
    const char *fn = "collRecvAny";
    bool dev = false;
    collResult_t res = p2p_check(comm, fn, "recvbuff", recvbuff, count, 1, 1, datatype, -2,
                                 &dev);
    if (res == collSuccess && peer == NULL) {
        coll_set_error(comm, "%s: peer is NULL (it receives the rank the message came from)",
                       fn);
        res = collInvalidArgument;
    }
    if (res == collSuccess && dev) {
        coll_set_error(comm, "%s: recvbuff is CUDA device memory; a receive from any source "
                       "takes host buffers (collRecv takes device buffers)", fn);
        res = collInvalidArgument;
    }
    if (res == collSuccess && coll_group_active()) {
        coll_set_error(comm, "%s: not inside a group (collGroupStart / collGroupEnd): a "
                       "receive from any source runs alone", fn);
        res = collInvalidUsage;
    }
    if (res == collSuccess)
        res = p2p_check_stream(comm, fn, stream, false);
    if (res != collSuccess) {
        if (coll_group_active())
            coll_group_fail(res);
        return res;
    }
    struct coll_p2p_op op = {.comm = comm, .peer = COLL_P2P_ANY, .source = peer,
                             .is_send = false, .buf = recvbuff, .count = count,
                             .dtype = datatype, .bytes = count * coll_dtype_size(datatype)};
    return p2p_issue(op, fn, stream, false);
}

COLL_API collResult_t collAllToAll(const void *sendbuff, void *recvbuff, size_t count,
                                   collDataType_t datatype, collComm_t comm,
                                   collStream_t stream)
{
    return collAlltoAll(sendbuff, recvbuff, count, datatype, comm, stream);
}

COLL_API collResult_t collAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                                   collDataType_t datatype, collComm_t comm,
                                   collStream_t stream)
{
    size_t n = comm ? (size_t)comm->nranks : 1;
    bool dev = false;
    collResult_t res = p2p_check(comm, "collAllToAll", "sendbuff", sendbuff, count, n, n,
                                 datatype, -2, &dev);
    if (res == collSuccess)
        res = p2p_check(comm, "collAllToAll", "recvbuff", recvbuff, count, n, n, datatype,
                        -2, &dev);
    if (res == collSuccess)
        res = p2p_check_stream(comm, "collAllToAll", stream, dev);
    if (res != collSuccess) {
        if (coll_group_active())
            coll_group_fail(res);
        return res;
    }
    struct coll_p2p_op *ops;
    res = coll_calloc(&ops, 2 * n);
    if (res != collSuccess) {
        coll_set_error(comm, "collAllToAll: out of memory for %zu messages", 2 * n);
        if (coll_group_active())
            coll_group_fail(res);
        return res;
    }
    /* Step k receives from rank - k and sends to rank + k, so the ranks do not all
     * start with the same peer.  In place, the sends are copied aside first. */
    size_t block = count * coll_dtype_size(datatype);
    int r = comm->rank, nr = comm->nranks;
    for (int k = 0; k < nr; k++) {
        int from = (r - k + nr) % nr, to = (r + k) % nr;
        ops[2 * k] = (struct coll_p2p_op){
            .comm = comm, .peer = from, .is_send = false,
            .buf = block ? (char *)recvbuff + (size_t)from * block : recvbuff,
            .count = count, .dtype = datatype, .bytes = block};
        ops[2 * k + 1] = (struct coll_p2p_op){
            .comm = comm, .peer = to, .is_send = true,
            .buf = block ? (char *)(uintptr_t)sendbuff + (size_t)to * block
                         : (void *)(uintptr_t)sendbuff,
            .count = count,
            .dtype = datatype, .bytes = block};
    }
    if (coll_group_active()) {
        for (size_t i = 0; i < 2 * n && res == collSuccess; i++)
            res = coll_group_queue_p2p(&ops[i]);
        free(ops);
        return res;
    }
    struct coll_work w = {
        .ops = ops, .nops = (int)(2 * n), .name = "collAllToAll", .device = dev,
        .coll = {.set = true, .func = COLL_MISMATCH_ALLTOALL,
                 .a = {.count = count, .dtype = datatype, .root = -1}}};
    return coll_work_issue(&w, stream);
}

/* collGather and collScatter: the root receives one block of count elements from
 * every rank (gather), or sends block r of its buffer to rank r (scatter), as one
 * set of messages.  The root's own block is copied locally (a send to itself and
 * its matching receive), or left where it is when the call is in place.
 *
 *   gather, root 0, n = 3:          scatter, root 0, n = 3:
 *   rank 1 --send--> rank 0 [1]     rank 0 [1] --send--> rank 1
 *   rank 2 --send--> rank 0 [2]     rank 0 [2] --send--> rank 2
 *   rank 0 [0] <-- its own block    rank 0 [0] --> its own recvbuff
 */
static collResult_t p2p_rooted(bool gather, const void *sendbuff, void *recvbuff, size_t count,
                               collDataType_t datatype, int root, struct coll_comm *comm,
                               collStream_t stream)
{
    const char *fn = gather ? "collGather" : "collScatter";
    size_t n = comm ? (size_t)comm->nranks : 1;
    /* own: the buffer of one block that every rank sends (gather) or receives
     * (scatter), needed on every rank; all: the root's buffer of n blocks, needed
     * there only.  The overflow of n blocks is refused on every rank alike. */
    char *own = (char *)(uintptr_t)(gather ? sendbuff : recvbuff);
    char *all = (char *)(uintptr_t)(gather ? recvbuff : sendbuff);
    bool dev = false;
    collResult_t res = p2p_check(comm, fn, gather ? "sendbuff" : "recvbuff", own, count, n, 1,
                                 datatype, -2, &dev);
    if (res == collSuccess && (root < 0 || root >= comm->nranks)) {
        coll_set_error(comm, "%s: root %d is out of range [0, %d)", fn, root, comm->nranks);
        res = collInvalidArgument;
    }
    if (res == collSuccess && comm->rank == root)
        res = p2p_check(comm, fn, gather ? "recvbuff" : "sendbuff", all, count, n, n, datatype,
                        -2, &dev);
    if (res == collSuccess)
        res = p2p_check_stream(comm, fn, stream, dev);
    if (res != collSuccess) {
        if (coll_group_active())
            coll_group_fail(res);
        return res;
    }
    size_t block = count * coll_dtype_size(datatype);
    int nr = comm->nranks;
    bool is_root = comm->rank == root;
    /* In place, the root's own block is already where it belongs. */
    bool in_place = is_root && own == (block ? all + (size_t)root * block : all);
    struct coll_p2p_op *ops;
    res = coll_calloc(&ops, is_root ? 2 * n : 1);
    if (res != collSuccess) {
        coll_set_error(comm, "%s: out of memory for %zu messages", fn, is_root ? 2 * n : 1);
        if (coll_group_active())
            coll_group_fail(res);
        return res;
    }
    int nops = 0;
    struct coll_p2p_op op = {.comm = comm, .peer = root, .is_send = gather, .buf = own,
                             .count = count, .dtype = datatype, .bytes = block};
    if (!is_root)
        ops[nops++] = op;
    /* The root's peers in the order root + 1, root + 2, ..., then itself: the
     * block to or from itself is a send and a receive that p2p_self_copy pairs. */
    for (int k = 1; is_root && k <= nr; k++) {
        int j = (root + k) % nr;
        if (j == root && in_place)
            continue;
        if (j == root)
            ops[nops++] = op;
        ops[nops++] = (struct coll_p2p_op){
            .comm = comm, .peer = j, .is_send = !gather,
            .buf = block ? all + (size_t)j * block : all,
            .count = count, .dtype = datatype, .bytes = block};
    }
    if (coll_group_active()) {
        for (int i = 0; i < nops && res == collSuccess; i++)
            res = coll_group_queue_p2p(&ops[i]);
        free(ops);
        return res;
    }
    if (nops == 0) { /* one rank, in place: nothing to move */
        free(ops);
        return collSuccess;
    }
    struct coll_work w = {
        .ops = ops, .nops = nops, .name = fn, .device = dev,
        .coll = {.set = true, .func = gather ? COLL_MISMATCH_GATHER : COLL_MISMATCH_SCATTER,
                 .a = {.count = count, .dtype = datatype, .root = root}}};
    return coll_work_issue(&w, stream);
}

COLL_API collResult_t collGather(const void *sendbuff, void *recvbuff, size_t count,
                                 collDataType_t datatype, int root, collComm_t comm,
                                 collStream_t stream)
{
    return p2p_rooted(true, sendbuff, recvbuff, count, datatype, root, comm, stream);
}

COLL_API collResult_t collScatter(const void *sendbuff, void *recvbuff, size_t count,
                                  collDataType_t datatype, int root, collComm_t comm,
                                  collStream_t stream)
{
    return p2p_rooted(false, sendbuff, recvbuff, count, datatype, root, comm, stream);
}
