/* collCommRegister and collCommDeregister: ranges of user memory the
 * registration cache (lib/engine/regcache.c) keeps registered with the
 * transports that need it, until removed. */
#include <stdint.h>

#include "internal.h"
#include "regcache.h"
#include "stream.h"

COLL_API collResult_t collCommRegister(const collComm_t comm, void *buff, size_t size,
                                       void **handle)
{
    if (comm == NULL) {
        coll_set_error(NULL, "collCommRegister: comm is NULL");
        return collInvalidArgument;
    }
    if (handle == NULL) {
        coll_set_error(comm, "collCommRegister: handle is NULL");
        return collInvalidArgument;
    }
    *handle = NULL;
    if (buff == NULL) {
        coll_set_error(comm, "collCommRegister: buff is NULL");
        return collInvalidArgument;
    }
    if (size == 0) {
        coll_set_error(comm, "collCommRegister: size is 0");
        return collInvalidArgument;
    }
    if ((uintptr_t)buff + size < (uintptr_t)buff) {
        coll_set_error(comm, "collCommRegister: buff %p + size %zu wraps around the address "
                       "space", buff, size);
        return collInvalidArgument;
    }
    COLL_CHECK(coll_comm_check_usable(comm, "collCommRegister"));
    /* After the calls queued on streams: they use the cache on the progress
     * thread. */
    coll_comm_enter(comm);
    struct coll_regcache *rc;
    collResult_t res = coll_comm_regcache(comm, &rc);
    if (res == collSuccess)
        res = coll_regcache_user_add(rc, buff, size, handle);
    coll_comm_leave(comm);
    return res;
}

COLL_API collResult_t collCommDeregister(const collComm_t comm, void *handle)
{
    if (comm == NULL) {
        coll_set_error(NULL, "collCommDeregister: comm is NULL");
        return collInvalidArgument;
    }
    if (handle == NULL) {
        coll_set_error(comm, "collCommDeregister: handle is NULL");
        return collInvalidArgument;
    }
    coll_comm_enter(comm); /* as collCommRegister */
    bool found = comm->regcache != NULL &&
                 coll_regcache_user_remove(comm->regcache, handle) == collSuccess;
    coll_comm_leave(comm);
    if (!found) {
        coll_set_error(comm, "collCommDeregister: handle %p was not returned by "
                       "collCommRegister on this comm (or was deregistered already)", handle);
        return collInvalidArgument;
    }
    return collSuccess;
}
