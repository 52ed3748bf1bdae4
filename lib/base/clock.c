/* The monotonic clock every deadline is measured on, and its coarse reading
 * (declared in socket.h). */
#include <stdint.h>
#include <time.h>

#include "socket.h"

int64_t coll_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The same clock at the kernel's tick (a few ms): a fifth of the cost, for rate
 * limits on the call path where a precise reading is not needed. */
int64_t coll_coarse_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
