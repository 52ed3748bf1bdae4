/* Bruck's allgather: every rank gets every rank's block in ceil(log2 n) steps. */
#ifndef COLL_BRUCK_H
#define COLL_BRUCK_H

#include <stddef.h>

#include "internal.h"

/* Gathers `bytes` from every rank into out (n x bytes), rotated: position p holds
 * the block of rank (rank + p) mod n.  in may not overlap out. */
collResult_t coll_bruck_allgather(struct coll_comm *comm, const void *in, void *out, size_t bytes);

#endif
