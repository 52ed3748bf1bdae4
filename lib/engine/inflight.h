/* Calls in flight at once on a communicator: several programs (engine.h),
 * advanced in one loop on the thread that runs the communicator's queued work
 * (streams, lib/core/stream.c).
 *
 * Each round looks at every call once, oldest first: a pass over its stage's
 * lanes, and when the stage has finished, its next() (the local work between
 * stages) and the next stage.  When no call moved anything, one wait blocks on
 * the union of what they all wait for, under the oldest call's deadline.
 *
 * The wire order stays that of the calls, one after another, so a peer that
 * overlaps nothing reads the same bytes: a call's lane may post on a
 * connection only once every earlier call in flight has let it go.  A call
 * holds every connection until its last stage (coll_sched.last) starts; then
 * it holds only that stage's connections, each until its lane there has posted
 * (or, lending, taken) all its pieces; a call that ends holds nothing.
 *
 * What a call keeps on the communicator (sequence number, operation name,
 * deadline, scratch, the flight recorder's open record) is loaded while the
 * round works on it and kept with it otherwise.  A failure of one call (the
 * comm is poisoned by it) ends every call in flight with it. */
#ifndef COLL_INFLIGHT_H
#define COLL_INFLIGHT_H

#include <stdbool.h>
#include <stdint.h>

#include "internal.h"

#define COLL_INFLIGHT_MAX 8

struct coll_prog;
struct coll_sched;
struct coll_conn;

/* How the layer above starts and ends a call in the set.  begin runs with the
 * call's own state loaded on the comm (its scratch; what it sets, the sequence
 * number, name, deadline and flight record, is kept for it): it sets the call
 * up and builds its program into *p_p, or returns the failure.  end runs with
 * the state loaded again once the program is over (or begin failed), with
 * the call's result; the program is finished (fini) before. */
struct coll_call_ops {
    collResult_t (*begin)(void *arg, struct coll_prog **p_p);
    void (*end)(void *arg, collResult_t res);
};

/* comm's set (comm->inflight), made on first use with room for max calls
 * (1..COLL_INFLIGHT_MAX); freed with the comm. */
collResult_t coll_inflight_init(struct coll_comm *comm, int max);
void coll_inflight_fini(struct coll_comm *comm);

/* Calls in the set, not ended. */
int coll_inflight_count(const struct coll_comm *comm);
/* Starts a call beside those in flight (its begin runs now); false when the set
 * is full or cannot be made. */
bool coll_inflight_add(struct coll_comm *comm, const struct coll_call_ops *ops, void *arg);
/* One round over the calls in flight (above); the calls that end in it get
 * their end().  Returns whether any did. */
bool coll_inflight_advance(struct coll_comm *comm);
/* New work was queued for comm (any thread): a wait of the set wakes, so that
 * the thread can start it beside the others. */
void coll_inflight_arrived(struct coll_comm *comm);

/* --- for the engine --- */

/* Whether comm's calls in flight are more than one (the engine then keeps the
 * wire order between them). */
static inline bool coll_inflight_many(const struct coll_comm *comm)
{
    return comm->inflight_running > 1;
}
/* Whether the call being worked on may post on connection c (peek: take
 * received bytes in place): no earlier call in flight holds it. */
bool coll_inflight_conn_free(const struct coll_comm *comm, const struct coll_conn *c, bool peek);
/* Whether an earlier call in flight still holds any connection. */
bool coll_inflight_behind(const struct coll_comm *comm);
static inline bool coll_inflight_behind_any(const struct coll_comm *comm)
{
    return coll_inflight_many(comm) && coll_inflight_behind(comm);
}
/* The call's last stage starts (s, its lanes started) or is over (NULL: the
 * call holds nothing any more). */
void coll_inflight_last(struct coll_comm *comm, const struct coll_sched *s);
/* The sequence number of the oldest call in flight (comm->seq when none):
 * the registration cache spares the entries of calls from there on. */
uint64_t coll_inflight_oldest_seq(const struct coll_comm *comm);

#endif
