/* COLL_CHECK_MISMATCH: before a collective moves any data, the ranks exchange
 * what each was called with and fail alike, with collInvalidUsage, when the
 * calls differ (lib/core/mismatch.c). */
#ifndef COLL_MISMATCH_H
#define COLL_MISMATCH_H

#include "algo.h"
#include "internal.h"

/* The operation codes of the calls that run as sets of messages (lib/core/p2p.c),
 * which are no enum coll_func. */
#define COLL_MISMATCH_ALLTOALL COLL_FUNC_COUNT
#define COLL_MISMATCH_GATHER (COLL_FUNC_COUNT + 1)
#define COLL_MISMATCH_SCATTER (COLL_FUNC_COUNT + 2)
#define COLL_MISMATCH_NFUNCS (COLL_FUNC_COUNT + 3)

/* Agrees with every rank on the call about to run (func: an enum coll_func or
 * a COLL_MISMATCH_ code above; a's count, dtype, op and root, as far as func
 * uses them), under the deadline of the operation already begun.  collInvalidUsage
 * when the calls differ, described on comm naming the ranks and how, the same
 * on every rank; the comm is not poisoned, since no data moved.  A transport
 * failure or timeout of the exchange itself poisons as any operation does. */
collResult_t coll_mismatch_check(struct coll_comm *comm, int func, const struct coll_args *a);
/* Frees what the check keeps in comm. */
void coll_mismatch_fini(struct coll_comm *comm);

#endif
