/* Error propagation macros.  Each failure logs "-> result" with file:line at INFO
 * so COLL_DEBUG=INFO traces the unwind; the cause itself is logged once at WARN
 * where it is first known. */
#ifndef COLL_CHECK_H
#define COLL_CHECK_H

#include <errno.h>
#include <string.h>

#include "collective.h"
#include "log.h"

const char *coll_result_name(collResult_t result);

#define COLL_CHECK(call)                                                              \
    do {                                                                              \
        collResult_t res_ = (call);                                                   \
        if (res_ != collSuccess) {                                                    \
            COLL_INFO(COLL_SUBSYS_ALL, "%s:%d -> %s", __FILE__, __LINE__,             \
                      coll_result_name(res_));                                        \
            return res_;                                                              \
        }                                                                             \
    } while (0)

#define COLL_CHECK_GOTO(call, res, label)                                             \
    do {                                                                              \
        (res) = (call);                                                               \
        if ((res) != collSuccess) {                                                   \
            COLL_INFO(COLL_SUBSYS_ALL, "%s:%d -> %s", __FILE__, __LINE__,             \
                      coll_result_name(res));                                         \
            goto label;                                                               \
        }                                                                             \
    } while (0)

/* Retries EINTR; on failure logs the call and strerror and returns collSystemError. */
#define COLL_SYSCHECK(call, name)                                                     \
    do {                                                                              \
        int ret_;                                                                     \
        do {                                                                          \
            ret_ = (int)(call);                                                       \
        } while (ret_ == -1 && errno == EINTR);                                       \
        if (ret_ == -1) {                                                             \
            COLL_WARN("%s failed: %s", name, strerror(errno));                        \
            return collSystemError;                                                   \
        }                                                                             \
    } while (0)

#endif
