/* Status queries: what each rank of a running job is doing, asked over its
 * bootstrap listener by `collrun status` and `collinfo --status`
 * (lib/engine/status.c; the wire format in wire.h; docs/collrun.md). */
#ifndef COLL_STATUS_H
#define COLL_STATUS_H

#include "collective.h"
#include "wire.h"

struct coll_comm;

/* Connections the responder holds per listener before their first 4 bytes
 * have come; coll_status_pause hands over at most, for a communicator of n
 * ranks, a shrink join from each rank and those. */
#define COLL_STATUS_UNSORTED_MAX 16
#define COLL_STATUS_HANDOFF_MAX(n) ((n) + COLL_STATUS_UNSORTED_MAX)

/* Starts answering status queries on comm's bootstrap listener, at the end of
 * a successful init (the responder thread starts with the first communicator
 * of the process).  A failure costs only the answers: init goes on. */
collResult_t coll_status_register(struct coll_comm *comm);
/* Stops answering for comm, first in its destroy; returns once the responder
 * holds none of its descriptors and reads nothing of it.  The last
 * communicator's call joins the responder thread.  Harmless for a comm never
 * registered. */
void coll_status_unregister(struct coll_comm *comm);

/* collCommShrink reads comm's listener itself: the responder leaves it alone
 * until coll_status_resume, and hands over into fds (cap entries at most; the
 * rest are closed) the connections it had not answered: shrink joins set aside
 * untouched, and those whose first bytes had not come.  Returns their count;
 * the caller owns them. */
int coll_status_pause(struct coll_comm *comm, int *fds, int cap);
void coll_status_resume(struct coll_comm *comm);

/* What comm is doing now, as a rank answers (any thread; comm registered or
 * owned by the caller). */
void coll_status_fill(struct coll_comm *comm, struct coll_status_reply *rep);

/* Writes every rank's bootstrap address, pid and host to path (mode 0600,
 * replaced whole through a rename), for `collrun status`; a failure is
 * logged at INFO. */
void coll_status_publish(struct coll_comm *comm, const char *path);

#endif
