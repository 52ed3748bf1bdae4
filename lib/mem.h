/* collMemAlloc memory and the direct allreduce that reads it across processes. */
#ifndef COLL_MEM_H
#define COLL_MEM_H

#include <stdbool.h>

#include "algo.h"
#include "internal.h"

/* At init, once the transports are up: whether every rank reaches every other over
 * shared memory (agreed by all ranks), which the direct allreduce needs. */
collResult_t coll_mem_comm_init(struct coll_comm *comm);
/* Unmaps the peers' buffers this comm mapped. */
void coll_mem_comm_free(struct coll_comm *comm);
/* Runs the allreduce directly on the ranks' collMemAlloc buffers when every rank's
 * are, the call is large enough and every rank could map them: *done_p tells
 * whether it ran.  Collective: every rank decides the same. */
collResult_t coll_mem_allreduce(struct coll_comm *comm, const struct coll_args *a, bool *done_p);

#endif
