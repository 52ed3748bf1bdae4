/* Result codes: names and messages. */
#include <assert.h>

#include "check.h"

static const char *const result_msgs[] = {
    [collSuccess] = "no error",
    [collUnhandledCudaError] = "unhandled cuda error (run with COLL_DEBUG=INFO for details)",
    [collSystemError] = "unhandled system error (run with COLL_DEBUG=INFO for details)",
    [collInternalError] = "internal error - please report it to the libcollective developers",
    [collInvalidArgument] = "invalid argument (run with COLL_DEBUG=WARN for details)",
    [collInvalidUsage] = "invalid usage (run with COLL_DEBUG=WARN for details)",
    [collRemoteError] = "remote process exited or there was a network error",
    [collInProgress] = "operation in progress",
    [collTimeout] = "operation timed out (COLL_TIMEOUT_MS)",
};
static_assert(sizeof(result_msgs) / sizeof(result_msgs[0]) == collNumResults,
              "every result code needs a message");

static const char *const result_names[] = {
    [collSuccess] = "collSuccess",
    [collUnhandledCudaError] = "collUnhandledCudaError",
    [collSystemError] = "collSystemError",
    [collInternalError] = "collInternalError",
    [collInvalidArgument] = "collInvalidArgument",
    [collInvalidUsage] = "collInvalidUsage",
    [collRemoteError] = "collRemoteError",
    [collInProgress] = "collInProgress",
    [collTimeout] = "collTimeout",
};
static_assert(sizeof(result_names) / sizeof(result_names[0]) == collNumResults,
              "every result code needs a name");

COLL_API const char *collGetErrorString(collResult_t result)
{
    if ((unsigned)result >= collNumResults)
        return "unknown result code";
    return result_msgs[result];
}

const char *coll_result_name(collResult_t result)
{
    if ((unsigned)result >= collNumResults)
        return "collUnknownResult";
    return result_names[result];
}
