/* Streams: work queued on a communicator's progress thread (stream.c). */
#ifndef COLL_STREAM_H
#define COLL_STREAM_H

#include "internal.h"
#include "p2p.h"

/* Checks that stream is NULL or a live stream from collStreamCreate; otherwise
 * describes the refusal on comm, naming fn, and returns collInvalidArgument. */
collResult_t coll_stream_check(struct coll_comm *comm, const char *fn, collStream_t stream);

/* Whether stream is a live stream from collStreamCreate (NULL is not). */
bool coll_stream_is_live(collStream_t stream);

/* Queues w on comm's progress thread, to run after the earlier work of stream
 * (on any communicator) and of comm (on any stream).  w's arrays pass to the
 * stream, also on failure.  Fails when stream was destroyed meanwhile or the
 * progress thread cannot be started. */
collResult_t coll_stream_submit(struct coll_comm *comm, collStream_t stream,
                                struct coll_work *w);
/* The same for one collective outside a group, with nothing to allocate. */
collResult_t coll_stream_submit_coll(struct coll_comm *comm, collStream_t stream,
                                     const struct coll_work_coll *c);

/* Waits until comm has no queued work left, so that a call without a stream
 * runs after the calls issued before it.  The caller counts itself in
 * comm->busy around the wait and the call, so that collCommAbort from another
 * thread frees nothing under it. */
void coll_stream_quiesce(struct coll_comm *comm);

/* A call without a stream enters comm: it counts itself busy (so that
 * collCommAbort from another thread frees nothing under it) and waits for comm's
 * queued work (coll_stream_quiesce); it leaves when done. */
void coll_comm_enter(struct coll_comm *comm);
void coll_comm_leave(struct coll_comm *comm);

/* Lets comm's queued work finish (quickly, when the comm is aborting) and joins
 * its progress thread (collCommAbort, before it waits for other threads' calls
 * to leave); then _fini frees what is left (when the comm is freed). */
void coll_stream_comm_stop(struct coll_comm *comm);
/* The most calls comm's progress thread had in flight at once so far (0: none
 * ran beside another), for tests. */
int coll_stream_overlap_peak(const struct coll_comm *comm);
void coll_stream_comm_fini(struct coll_comm *comm);

#endif
