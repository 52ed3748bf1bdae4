/* The collective calls: every argument is checked here, at the boundary, and a
 * refused call leaves the communicator as it was.  Then the algorithm runs. */
#include <stdint.h>
#include <string.h>

#include "algo.h"
#include "collectives.h"
#include "device.h"
#include "exec.h"
#include "flight.h"
#include "internal.h"
#include "last_call.h"
#include "mismatch.h"
#include "p2p.h"
#include "reduce.h"
#include "stream.h"

struct call_check {
    const char *fn;
    const void *sendbuff;
    const void *recvbuff;
    size_t send_elems;   /* elements read from sendbuff */
    size_t recv_elems;   /* elements written to recvbuff */
    size_t send_blocks;  /* sendbuff holds this many send_elems blocks (0: one) */
    size_t recv_blocks;  /* recvbuff holds this many recv_elems blocks (0: one) */
    bool recv_optional;  /* recvbuff may be NULL (reduce off the root) */
    bool send_optional;  /* sendbuff may be NULL (broadcast off the root) */
    collDataType_t datatype;
    bool has_op;
    int op;
    bool has_root;
    int root;
    collStream_t stream;
};

static collResult_t call_check_args(struct coll_comm *comm, const struct call_check *c,
                                    size_t count, size_t mult, bool *dev)
{
    if (comm == NULL) {
        coll_set_error(NULL, "%s: comm is NULL", c->fn);
        return collInvalidArgument;
    }
    if ((unsigned)c->datatype >= collNumTypes) {
        coll_set_error(comm, "%s: datatype %d is out of range [0, %d)", c->fn, (int)c->datatype,
                       collNumTypes);
        return collInvalidArgument;
    }
    if (c->has_op && (unsigned)c->op >= collNumOps) {
        coll_set_error(comm, "%s: op %d is out of range [0, %d)", c->fn, c->op, collNumOps);
        return collInvalidArgument;
    }
    if (c->has_root && (c->root < 0 || c->root >= comm->nranks)) {
        coll_set_error(comm, "%s: root %d is out of range [0, %d)", c->fn, c->root,
                       comm->nranks);
        return collInvalidArgument;
    }
    size_t esize = coll_dtype_size(c->datatype);
    if (count > SIZE_MAX / esize / mult || count * esize * mult > (size_t)PTRDIFF_MAX) {
        coll_set_error(comm, "%s: count %zu of %zu-byte elements (x %zu) overflows the address "
                       "space", c->fn, count, esize, mult);
        return collInvalidArgument;
    }
    if (c->send_elems > 0 && c->sendbuff == NULL && !c->send_optional) {
        coll_set_error(comm, "%s: sendbuff is NULL with count %zu", c->fn, count);
        return collInvalidArgument;
    }
    if (c->recv_elems > 0 && c->recvbuff == NULL && !c->recv_optional) {
        coll_set_error(comm, "%s: recvbuff is NULL with count %zu", c->fn, count);
        return collInvalidArgument;
    }
    bool send_dev, recv_dev;
    size_t send_bytes = c->send_elems * esize * (c->send_blocks ? c->send_blocks : 1);
    size_t recv_bytes = c->recv_elems * esize * (c->recv_blocks ? c->recv_blocks : 1);
    COLL_CHECK(coll_device_check_buffer(comm, c->fn, "sendbuff", c->sendbuff, send_bytes,
                                        &send_dev));
    COLL_CHECK(coll_device_check_buffer(comm, c->fn, "recvbuff", c->recvbuff, recv_bytes,
                                        &recv_dev));
    *dev = send_dev || recv_dev;
    /* With device buffers the stream is a cudaStream_t. */
    if (*dev)
        COLL_CHECK(coll_device_check_stream(comm, c->fn, c->stream));
    else
        COLL_CHECK(coll_stream_check(comm, c->fn, c->stream));
    if (coll_group_active()) {
        COLL_CHECK(coll_group_stream(comm, c->fn, c->stream));
        if (*dev)
            coll_group_device();
    }
    return coll_comm_check_usable(comm, c->fn);
}

/* A call refused inside a group also fails the group, so collGroupEnd reports
 * it and issues none of the group's calls. */
static collResult_t call_check(struct coll_comm *comm, const struct call_check *c, size_t count,
                               size_t mult, bool *dev)
{
    collResult_t res = call_check_args(comm, c, count, mult, dev);
    if (res != collSuccess && coll_group_active())
        coll_group_fail(res);
    return res;
}

/* The flight record's description of collective f with a, run by algo (NULL:
 * none ran). */
static inline __attribute__((always_inline)) struct coll_flight_desc
call_flight_desc(enum coll_func f, const struct coll_args *a, const struct coll_algo *algo)
{
    bool has_op = f == COLL_FUNC_ALLREDUCE || f == COLL_FUNC_REDUCE ||
                  f == COLL_FUNC_REDUCE_SCATTER;
    bool has_root = f == COLL_FUNC_BROADCAST || f == COLL_FUNC_REDUCE;
    return (struct coll_flight_desc){.name = coll_func_name(f),
                                     .algo = algo != NULL ? algo->name : NULL,
                                     .count = a->count, .dtype = (int)a->dtype,
                                     .op = has_op ? (int)a->op : -1,
                                     .root = has_root ? a->root : -1, .peer = -1};
}

void coll_call_not_run(struct coll_comm *comm, enum coll_func f, const struct coll_args *a,
                       collResult_t res)
{
    ++comm->seq;
    coll_exec_begin(comm, coll_func_name(f));
    struct coll_flight_desc d = call_flight_desc(f, a, NULL);
    coll_flight_begin(comm, &d);
    coll_flight_end(comm, res);
}

/* The call's algorithm: the planner's choice, or its next one while that
 * declines calls (coll_algo.skips); count: this is the call (not a look). */
static collResult_t call_algo(struct coll_comm *comm, enum coll_func f, const struct coll_args *a,
                              bool count, const struct coll_algo **algo_p)
{
    COLL_CHECK(coll_algo_select(comm, f, a, algo_p));
    if ((*algo_p)->skips != NULL && (*algo_p)->skips(comm, count))
        return coll_algo_select_other(comm, f, a, *algo_p, algo_p);
    return collSuccess;
}

/* A call's start: its algorithm, its sequence number, its flight record
 * opened. */
static collResult_t call_begin(struct coll_comm *comm, enum coll_func f,
                               const struct coll_args *a, struct coll_call_flight *cf)
{
    COLL_CHECK(call_algo(comm, f, a, true, &cf->algo));
    comm->last_algo_name = cf->algo->name;
    atomic_fetch_add(&comm->busy, 1);
    cf->seq = ++comm->seq;
    coll_exec_begin(comm, coll_func_name(f));
    struct coll_flight_desc d = call_flight_desc(f, a, cf->algo);
    coll_flight_begin(comm, &d);
    COLL_TRACE_LOG(COLL_SUBSYS_COLL, "%s #%llu count %zu %s via %s", coll_func_name(f),
                   (unsigned long long)comm->seq, a->count, coll_dtype_name(a->dtype),
                   cf->algo->name);
    return collSuccess;
}

/* Its end: what it did recorded while its flight record, which names its
 * peers, is still open; then the record closed. */
static void call_end(struct coll_comm *comm, enum coll_func f, const struct coll_args *a,
                     const struct coll_call_flight *cf, collResult_t res)
{
    struct coll_flight_desc d = call_flight_desc(f, a, cf->algo);
    coll_last_call_record(comm, &(struct coll_last_call_desc){
                                    .seq = cf->seq, .func = d.name, .algo = cf->algo,
                                    .coll_func = (int)f, .count = a->count, .dtype = d.dtype,
                                    .op = d.op, .root = d.root},
                          res);
    coll_flight_end(comm, res);
    atomic_fetch_sub(&comm->busy, 1);
}

static collResult_t call_exec(struct coll_comm *comm, enum coll_func f,
                              const struct coll_args *a)
{
    struct coll_call_flight cf;
    COLL_CHECK(call_begin(comm, f, a, &cf));
    collResult_t res = collSuccess;
    if (comm->check_mismatch)
        res = coll_mismatch_check(comm, (int)f, a);
    if (res == collSuccess)
        res = coll_algo_run(cf.algo, f, comm, a);
    if (res == COLL_ALGO_DECLINED) {
        /* Every rank declined alike: the planner's choice without it runs. */
        res = coll_algo_select_other(comm, f, a, cf.algo, &cf.algo);
        if (res == collSuccess) {
            comm->last_algo_name = cf.algo->name;
            coll_flight_algo(comm, cf.algo->name);
            res = coll_algo_run(cf.algo, f, comm, a);
        }
    }
    call_end(comm, f, a, &cf, res);
    return res;
}

bool coll_call_flies(struct coll_comm *comm, enum coll_func f, const struct coll_args *a)
{
    const struct coll_algo *algo;
    if (comm->check_mismatch || call_algo(comm, f, a, false, &algo) != collSuccess)
        return false;
    return algo->build[f] != NULL && !algo->exclusive && !algo->quick;
}

collResult_t coll_call_fly_begin(struct coll_comm *comm, enum coll_func f,
                                 const struct coll_args *a, struct coll_call_flight *cf,
                                 struct coll_prog **p_p)
{
    cf->algo = NULL;
    COLL_CHECK(call_begin(comm, f, a, cf));
    return coll_algo_build(cf->algo, f, comm, a, p_p);
}

void coll_call_fly_end(struct coll_comm *comm, enum coll_func f, const struct coll_args *a,
                       const struct coll_call_flight *cf, collResult_t res)
{
    if (cf->algo == NULL) { /* it failed before it began */
        coll_call_not_run(comm, f, a, res);
        return;
    }
    call_end(comm, f, a, cf, res);
}

/* Inside collGroupStart / collGroupEnd the checked call is queued, and
 * collGroupEnd runs it with call_exec after the group's sends and receives.
 * With a stream it is queued there; without, it runs once the comm's queued
 * calls are done. */
static collResult_t call_run(struct coll_comm *comm, enum coll_func f, const struct coll_args *a,
                             collStream_t stream, bool dev)
{
    if (coll_group_active())
        return coll_group_queue_coll(comm, f, a, call_exec);
    if (dev) {
        struct coll_work w = {.ncolls = 1, .name = coll_func_name(f), .device = true};
        if (coll_calloc(&w.colls, 1) != collSuccess) {
            coll_set_error(comm, "%s: out of memory queueing the call on its stream",
                           coll_func_name(f));
            return collSystemError;
        }
        w.colls[0] = (struct coll_work_coll){comm, f, *a, call_exec};
        return coll_work_issue(&w, stream);
    }
    bool nonblocking = stream == NULL && !comm->blocking;
    if (nonblocking)
        stream = comm->nb_stream;
    if (stream == NULL) {
        coll_comm_enter(comm);
        collResult_t res = (collResult_t)atomic_load(&comm->async_error);
        if (res == collSuccess)
            res = call_exec(comm, f, a);
        coll_comm_leave(comm);
        return res;
    }
    collResult_t res =
        coll_stream_submit_coll(comm, stream, &(struct coll_work_coll){comm, f, *a, call_exec});
    return res == collSuccess && nonblocking ? collInProgress : res;
}

COLL_API collResult_t collAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                    collDataType_t datatype, collRedOp_t op, collComm_t comm,
                                    collStream_t stream)
{
    struct call_check c = {.fn = "collAllReduce", .sendbuff = sendbuff, .recvbuff = recvbuff,
                           .send_elems = count, .recv_elems = count, .datatype = datatype,
                           .has_op = true, .op = (int)op, .stream = stream};
    bool dev = false;
    COLL_CHECK(call_check(comm, &c, count, 1, &dev));
    struct coll_args a = {sendbuff, recvbuff, count, datatype, op, 0};
    return call_run(comm, COLL_FUNC_ALLREDUCE, &a, stream, dev);
}

COLL_API collResult_t collBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                                    collDataType_t datatype, int root, collComm_t comm,
                                    collStream_t stream)
{
    bool is_root = comm != NULL && comm->rank == root;
    struct call_check c = {.fn = "collBroadcast", .sendbuff = sendbuff, .recvbuff = recvbuff,
                           .send_elems = count, .recv_elems = count, .send_optional = !is_root,
                           .datatype = datatype, .has_root = true, .root = root, .stream = stream};
    bool dev = false;
    COLL_CHECK(call_check(comm, &c, count, 1, &dev));
    struct coll_args a = {sendbuff, recvbuff, count, datatype, collSum, root};
    return call_run(comm, COLL_FUNC_BROADCAST, &a, stream, dev);
}

COLL_API collResult_t collReduce(const void *sendbuff, void *recvbuff, size_t count,
                                 collDataType_t datatype, collRedOp_t op, int root,
                                 collComm_t comm, collStream_t stream)
{
    bool is_root = comm != NULL && comm->rank == root;
    struct call_check c = {.fn = "collReduce", .sendbuff = sendbuff, .recvbuff = recvbuff,
                           .send_elems = count, .recv_elems = count, .recv_optional = !is_root,
                           .datatype = datatype, .has_op = true, .op = (int)op,
                           .has_root = true, .root = root, .stream = stream};
    bool dev = false;
    COLL_CHECK(call_check(comm, &c, count, 1, &dev));
    struct coll_args a = {sendbuff, recvbuff, count, datatype, op, root};
    return call_run(comm, COLL_FUNC_REDUCE, &a, stream, dev);
}

COLL_API collResult_t collAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                    collDataType_t datatype, collComm_t comm,
                                    collStream_t stream)
{
    size_t n = comm ? (size_t)comm->nranks : 1;
    struct call_check c = {.fn = "collAllGather", .sendbuff = sendbuff, .recvbuff = recvbuff,
                           .send_elems = sendcount, .recv_elems = sendcount, .recv_blocks = n,
                           .datatype = datatype, .stream = stream};
    bool dev = false;
    COLL_CHECK(call_check(comm, &c, sendcount, n, &dev));
    struct coll_args a = {sendbuff, recvbuff, sendcount, datatype, collSum, 0};
    return call_run(comm, COLL_FUNC_ALLGATHER, &a, stream, dev);
}

COLL_API collResult_t collReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                        collDataType_t datatype, collRedOp_t op,
                                        collComm_t comm, collStream_t stream)
{
    size_t n = comm ? (size_t)comm->nranks : 1;
    struct call_check c = {.fn = "collReduceScatter", .sendbuff = sendbuff,
                           .recvbuff = recvbuff, .send_elems = recvcount,
                           .recv_elems = recvcount, .send_blocks = n, .datatype = datatype,
                           .has_op = true,
                           .op = (int)op, .stream = stream};
    bool dev = false;
    COLL_CHECK(call_check(comm, &c, recvcount, n, &dev));
    struct coll_args a = {sendbuff, recvbuff, recvcount, datatype, op, 0};
    return call_run(comm, COLL_FUNC_REDUCE_SCATTER, &a, stream, dev);
}

COLL_API collResult_t collBarrier(collComm_t comm, collStream_t stream)
{
    void *b = comm != NULL ? &comm->barrier_byte : NULL;
    struct call_check c = {.fn = "collBarrier", .sendbuff = b, .recvbuff = b, .send_elems = 1,
                           .recv_elems = 1, .datatype = collUint8, .has_op = true,
                           .op = (int)collMax, .stream = stream};
    bool dev = false;
    COLL_CHECK(call_check(comm, &c, 1, 1, &dev));
    struct coll_args a = {b, b, 1, collUint8, collMax, 0};
    return call_run(comm, COLL_FUNC_ALLREDUCE, &a, stream, dev);
}
