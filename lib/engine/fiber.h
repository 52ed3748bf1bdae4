/* Call fibers: several calls of one communicator in flight at once on its
 * progress thread (streams), each in a fiber of its own.
 *
 * An algorithm's code between its schedules runs unchanged: a call that waits
 * yields to the next one instead of blocking, and when every call in flight is
 * idle one of them blocks on the union of what they all wait for.  Fibers
 * switch only where the engine waits (coll_exec_idle), so the calls share the
 * thread cooperatively and take no locks from each other.
 *
 * The wire order stays that of the calls, one after another, so a peer that
 * overlaps nothing reads the same bytes: a call's lane may post on a
 * connection only once every earlier call in flight has released it.  A call
 * holds every connection until its last schedule (coll_sched.last) starts;
 * then it holds only that schedule's connections, each until its lane there
 * has posted (or, lending, taken) all its pieces; a call that ends releases
 * everything.
 *
 * What a call keeps on the communicator (sequence number, operation name,
 * deadline, scratch, the flight recorder's open record) is swapped in and out
 * with its fiber.  The stream layer (lib/core/stream.c) decides which calls
 * start together and retires them in the order issued. */
#ifndef COLL_FIBER_H
#define COLL_FIBER_H

#include <stdbool.h>
#include <stdint.h>

#include "internal.h"

#define COLL_FIBERS_MAX 8

struct coll_fiber;
struct coll_req;
struct coll_sched;

/* comm's fiber group (comm->fibers), made on first use, with room for max
 * fibers (1..COLL_FIBERS_MAX); freed with the comm. */
collResult_t coll_fibers_init(struct coll_comm *comm, int max);
void coll_fibers_fini(struct coll_comm *comm);

/* A new fiber that will run fn(arg) as a call of comm; NULL when every slot is
 * taken (described on comm when its stack cannot be mapped). */
struct coll_fiber *coll_fiber_new(struct coll_comm *comm, void (*fn)(void *), void *arg);
/* Runs f until it yields or ends (the progress thread, outside any fiber);
 * returns whether it has ended. */
bool coll_fiber_resume(struct coll_fiber *f);
/* Frees an ended fiber (the oldest first, so that the calls retire in order). */
void coll_fiber_free(struct coll_fiber *f);
/* Fibers not freed, and of those the ones not ended. */
int coll_fibers_count(const struct coll_comm *comm);
/* Whether the calling thread runs inside one of comm's fibers. */
bool coll_fiber_inside(const struct coll_comm *comm);

/* New work was queued for comm (any thread): a call in flight that waits
 * yields once, so that the progress thread can start the new one beside it. */
void coll_fibers_arrived(struct coll_comm *comm);

/* --- for the engine --- */

/* Whether comm's running call has other calls in flight beside it. */
static inline bool coll_fibers_many(const struct coll_comm *comm)
{
    return comm->fibers_running > 1;
}

enum coll_fiber_wait {
    COLL_FIBER_ALONE,   /* wait as usual on the caller's requests */
    COLL_FIBER_YIELDED, /* other calls ran: test again what was waited on */
    COLL_FIBER_RESCAN,  /* other calls ran and released a connection: look at
                         * every lane again */
    COLL_FIBER_UNION,   /* every call is idle: wait on *reqs_p, *nreqs_p, *steps_p,
                         * the union of their requests (the caller's first) */
};

/* A wait of the running call found nothing to do at time now (fresh:
 * something moved since its last one).  Yields to the other calls or, when each
 * of them has found nothing since, hands back the union of their waits to block
 * on, and in *since_p when any call last moved (the spin before blocking counts
 * from there). */
enum coll_fiber_wait coll_fiber_idle(struct coll_comm *comm, bool fresh, int64_t now,
                                     struct coll_req *const **reqs_p, int *nreqs_p,
                                     int *steps_p, int64_t *since_p);
/* A wait outside the engine (a connection being accepted): lets the other
 * calls run once; false when there are none (block as usual). */
bool coll_fiber_pause(struct coll_comm *comm);

/* Whether the running call may post on connection c (peek: take received
 * bytes in place): no earlier call in flight holds it. */
bool coll_fiber_conn_free(const struct coll_comm *comm, const struct coll_conn *c, bool peek);
/* A lane of the running call's last schedule stopped holding its connection
 * (posted, or took, all its pieces): later calls may find it free. */
void coll_fiber_released(struct coll_comm *comm);
/* Whether an earlier call in flight still holds any connection. */
bool coll_fiber_behind(const struct coll_comm *comm);
/* The same, at no cost when no other call is in flight. */
static inline bool coll_fiber_behind_any(const struct coll_comm *comm)
{
    return coll_fibers_many(comm) && coll_fiber_behind(comm);
}
/* The running call's last schedule starts (s, its lanes started) or is over
 * (NULL: the call holds nothing any more). */
void coll_fiber_last(struct coll_comm *comm, const struct coll_sched *s);
/* Waits, letting the others run, until no earlier call is in flight: for a
 * call that shares state of the comm beyond its connections (the direct
 * allreduce, the mismatch check). */
void coll_fiber_exclusive(struct coll_comm *comm);
/* The sequence number of the oldest call in flight (comm->seq outside fibers):
 * the registration cache spares the entries of calls from there on. */
uint64_t coll_fiber_oldest_seq(const struct coll_comm *comm);

#endif
