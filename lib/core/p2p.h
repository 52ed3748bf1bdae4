/* Point-to-point messages and groups: what p2p.c (the message engine) and
 * group.c (the per-thread group queue) share, and the hook collectives.c uses to
 * queue a collective issued inside collGroupStart / collGroupEnd. */
#ifndef COLL_P2P_H
#define COLL_P2P_H

#include <stdbool.h>
#include <stdint.h>

#include "algo.h"
#include "internal.h"

/* One send or receive.  The public calls fill the first block; coll_p2p_run
 * owns the rest while it progresses the message. */
/* The peer of a receive from any source (collRecvAny), until a message says who. */
#define COLL_P2P_ANY (-1)

struct coll_p2p_op {
    struct coll_comm *comm;
    int peer;               /* COLL_P2P_ANY: a receive from any source */
    int *source;            /* collRecvAny: where the sender's rank goes once done */
    bool is_send;
    void *buf;              /* read for a send, written for a receive */
    size_t count;           /* elements, for messages */
    collDataType_t dtype;
    size_t bytes;

    /* Progress state, set up by coll_p2p_run. */
    uint64_t hdr[2];        /* the header sent or received: magic, byte count */
    int state;
};

/* Runs a collective call now; collectives.c hands one to coll_group_queue_coll. */
typedef collResult_t (*coll_group_coll_fn)(struct coll_comm *comm, enum coll_func f,
                                           const struct coll_args *a);

/* A collective waiting in a group or on a stream, with the function that runs it. */
struct coll_work_coll {
    struct coll_comm *comm;
    enum coll_func f;
    struct coll_args a;
    coll_group_coll_fn fn;
};

/* The collective that a set of messages carries out, when it is one call of
 * collAllToAll, collGather or collScatter issued outside a group: with
 * COLL_CHECK_MISMATCH the ranks agree on it before any message moves, and the
 * flight record gives its count, datatype and root. */
struct coll_p2p_coll {
    bool set;               /* false: a group, or a single send or receive */
    int func;               /* COLL_MISMATCH_ALLTOALL, _GATHER or _SCATTER */
    struct coll_args a;     /* count, dtype and root (-1 for the all-to-all) */
};

/* A unit of work: what one collGroupEnd issues, or one call on a stream.  Its
 * sends and receives progress together, then its collectives run in order.
 * The arrays are malloc'd and owned by the work (coll_work_free). */
struct coll_work {
    struct coll_p2p_op *ops;
    int nops;
    struct coll_work_coll *colls;
    int ncolls;
    const char *name;       /* for messages: "group", "collSend", ... */
    struct coll_p2p_coll coll; /* of the ops, when they are one collective */
    bool device;            /* some buffer is CUDA device memory: the stream is a
                             * cudaStream_t and coll_work_issue stages (device.c) */
    struct coll_devcall *staged; /* the staging of a device work once issued */
};

/* Runs w; a failure drops the collectives not yet run (each recorded failed in
 * its comm's flight recorder) and is returned. */
collResult_t coll_work_run(struct coll_work *w);
/* w does not run (its comm was poisoned first): its collectives are recorded
 * failed with res, as those a failure dropped. */
void coll_work_not_run(struct coll_work *w, collResult_t res);
/* Collective f with a was issued but does not run: its flight record says it
 * failed with res (collectives.c). */
void coll_call_not_run(struct coll_comm *comm, enum coll_func f, const struct coll_args *a,
                       collResult_t res);
void coll_work_free(struct coll_work *w);
/* Issues w now or, with a stream, queues it there; either way w's arrays pass to
 * the callee.  Without a stream, queued work of every communicator w touches
 * finishes first, so calls run in the order issued. */
collResult_t coll_work_issue(struct coll_work *w, collStream_t stream);

/* Runs the sends and receives of ops concurrently until all complete, the first
 * failure, or a deadline.  op_name names them in messages ("collSend", "group");
 * coll, when not NULL and set, is the collective they carry out (all on one
 * communicator).  On a failure every communicator with messages still in flight
 * is poisoned, since their requests point at buffers the caller gets back. */
collResult_t coll_p2p_run(struct coll_p2p_op *ops, int nops, const char *op_name,
                          const struct coll_p2p_coll *coll);

/* The same as a program beside other calls in flight (stream.c, the engine's
 * inflight.h), for messages that all go over one communicator with known peers
 * (no receive from any source) and need no agreement first
 * (COLL_CHECK_MISMATCH on a collective): coll_p2p_flies says whether they do.
 * _begin sets the calls up and builds the program; _end (also after a failed
 * _begin, *f_p then set) ends them with the result and frees the flight. */
struct coll_p2p_flight;
bool coll_p2p_flies(const struct coll_p2p_op *ops, int nops, const struct coll_p2p_coll *coll);
collResult_t coll_p2p_fly_begin(struct coll_p2p_op *ops, int nops, const char *op_name,
                                const struct coll_p2p_coll *coll, struct coll_p2p_flight **f_p,
                                struct coll_prog **p_p);
void coll_p2p_fly_end(struct coll_p2p_flight *f, collResult_t res);

/* True while the calling thread has a group open (collGroupStart without its
 * collGroupEnd). */
bool coll_group_active(void);
/* Queues a send or receive in the calling thread's open group.  Every call of a
 * group must name the same stream (coll_group_stream). */
collResult_t coll_group_queue_p2p(const struct coll_p2p_op *op);
/* Records the stream of a call made inside the open group: the first call sets
 * the group's stream; a call with another one is refused (collInvalidUsage,
 * described on comm) and fails the group. */
collResult_t coll_group_stream(struct coll_comm *comm, const char *fn, collStream_t stream);
/* Marks the open group as holding a call with device buffers: collGroupEnd
 * stages it on the group's stream, a cudaStream_t (device.h). */
void coll_group_device(void);
/* Queues a collective (its arguments already checked) to run at collGroupEnd,
 * after the group's sends and receives, in the order issued. */
collResult_t coll_group_queue_coll(struct coll_comm *comm, enum coll_func f,
                                   const struct coll_args *a, coll_group_coll_fn fn);
/* Records that a call inside the open group was refused: collGroupEnd then
 * returns res (the first one) and issues nothing of the group. */
void coll_group_fail(collResult_t res);

#endif
