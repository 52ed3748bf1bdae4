/* The monotonic clock every deadline is measured on (declared in socket.h). */
#include <stdint.h>
#include <time.h>

#include "socket.h"

int64_t coll_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
