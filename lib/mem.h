/* collMemAlloc memory and the direct allreduce that reads it across processes. */
#ifndef COLL_MEM_H
#define COLL_MEM_H

#include <stdbool.h>
#include <stdint.h>

#include "algo.h"
#include "internal.h"

/* The collMemAlloc region holding [p, p+len): its base, size and id (unique in
 * the process, never reused: memory freed and allocated again at the same address
 * is another id).  False when [p, p+len) is not inside one region. */
bool coll_mem_region(const void *p, size_t len, char **base_p, size_t *size_p, uint64_t *id_p);
/* Whether the region with this id is still allocated. */
bool coll_mem_live(uint64_t id);
/* How many regions collMemFree has freed so far (any thread). */
uint64_t coll_mem_frees(void);

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
