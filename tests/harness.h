/* Minimal test harness: CHECK macros that report file:line and fail the test. */
#ifndef COLL_TEST_HARNESS_H
#define COLL_TEST_HARNESS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collective.h"

#define TEST_SKIP 77

static int test_failures;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            test_failures++;                                                         \
        }                                                                            \
    } while (0)

#define CHECK_MSG(cond, ...)                                                         \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                            \
            fputc('\n', stderr);                                                     \
            test_failures++;                                                         \
        }                                                                            \
    } while (0)

/* Checks a library call returns `want`; prints the last error otherwise. */
#define CHECK_RES(call, want, comm)                                                     \
    do {                                                                                \
        collResult_t r_ = (call);                                                       \
        if (r_ != (want)) {                                                             \
            fprintf(stderr, "%s:%d: %s returned %s, want %s (%s)\n", __FILE__, __LINE__, \
                    #call, collGetErrorString(r_), collGetErrorString(want),            \
                    collGetLastError(comm));                                            \
            test_failures++;                                                            \
        }                                                                               \
    } while (0)

/* Fatal: stop the test at once (for set-up failures). */
#define REQUIRE(cond)                                                                 \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "%s:%d: REQUIRE failed: %s\n", __FILE__, __LINE__, #cond); \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

static inline int test_result(void)
{
    if (test_failures)
        fprintf(stderr, "%d check(s) failed\n", test_failures);
    return test_failures ? 1 : 0;
}

#endif
