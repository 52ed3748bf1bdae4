/* What every layer may set on a communicator: the cause of its last failure,
 * its poison, the rank a failure is blamed on, and its scratch memory. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"

/* The cause of the last failure that had no communicator (a failed init). */
static _Thread_local char tls_last_error[COLL_ERRMSG_BYTES];

void coll_set_thread_error(const char *msg)
{
    snprintf(tls_last_error, sizeof(tls_last_error), "%s", msg);
}

const char *coll_thread_error(void)
{
    return tls_last_error;
}

void coll_set_error(struct coll_comm *comm, const char *fmt, ...)
{
    char *dst = comm ? comm->last_error : tls_last_error;
    int o = comm && comm->name[0] ? snprintf(dst, COLL_ERRMSG_BYTES, "comm \"%s\": ", comm->name)
                                  : 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dst + o, COLL_ERRMSG_BYTES - (size_t)o, fmt, ap);
    va_end(ap);
    COLL_WARN("%s", dst);
}

void coll_comm_poison(struct coll_comm *comm, collResult_t res)
{
    int expected = collSuccess;
    if (atomic_compare_exchange_strong(&comm->async_error, &expected, (int)res)) {
        /* The notice first: a neighbour that then sees its connection close finds
         * the notice waiting, and with it the rank to blame. */
        coll_bootstrap_notify_failure(comm);
        coll_transport_shutdown_all(comm);
    }
}

void coll_comm_blame(struct coll_comm *comm, int peer)
{
    int none = -1;
    if (atomic_load(&comm->async_error) == collSuccess)
        atomic_compare_exchange_strong(&comm->failed_peer, &none, peer);
}

collResult_t coll_comm_scratch(struct coll_comm *comm, size_t bytes, void **p_p)
{
    if (bytes > comm->scratch_bytes) {
        free(comm->scratch);
        comm->scratch = NULL;
        comm->scratch_bytes = 0;
        /* Page-aligned so the reduction kernels see aligned slots. */
        if (posix_memalign(&comm->scratch, 4096, bytes) != 0) {
            coll_set_error(comm, "cannot allocate %zu bytes of scratch", bytes);
            return collSystemError;
        }
        comm->scratch_bytes = bytes;
    }
    *p_p = comm->scratch;
    return collSuccess;
}

