/*
 * Runs one test body on every rank of a communicator, in either of the two ways
 * the multi-rank tests are started:
 *
 *   collrun -n 4 --timeout 600 test_x ARGS   processes: collrun sets COLL_RANK,
 *                                            COLL_NRANKS, COLL_COMM_ID and
 *                                            COLL_SECRET; each calls collCommInitFromEnv
 *   test_x --threads 4 ARGS                  threads of this process: the main thread
 *                                            calls collGetUniqueId, each thread
 *                                            collCommInitRank(&comm, 4, id, r)
 *
 * Without either, the test runs as one thread (one rank).  Each rank counts its own
 * failed checks in its struct launch_rank, so threads share no counter.  A failure
 * after which the ranks can no longer stay in step (a collective that returned an
 * error) ends the whole process at once with launch_fatal, because the other ranks
 * would otherwise wait for the timeout.
 */
#ifndef COLL_TEST_LAUNCH_H
#define COLL_TEST_LAUNCH_H

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "collective.h"

/* The algorithm of the last call on comm ("ring", "direct", ...; lib/engine/internal.h),
 * for tests that check which path ran. */
const char *coll_comm_last_algo(const struct coll_comm *comm);
/* Whether comm has a send (is_send) or receive connection with peer yet
 * (lib/engine/internal.h). */
bool coll_comm_has_conn(const struct coll_comm *comm, int peer, bool is_send);

struct launch_rank {
    int rank;
    int nranks;
    bool threads;    /* the ranks are threads of this process */
    collComm_t comm; /* made by the launcher, destroyed after the body returns */
    collUniqueId id; /* the id of comm in thread mode; zero in process mode */
    void *arg;       /* what the test passed to launch_run */
    int failures;    /* failed checks of this rank */
    pthread_t thread;
};

typedef void (*launch_body_fn)(struct launch_rank *lr);

/* A failed check of one rank: prints where and why, and counts it. */
#define LR_CHECK(lr, cond, ...)                                                       \
    do {                                                                              \
        if (!(cond)) {                                                                \
            launch_report((lr), __FILE__, __LINE__, #cond, __VA_ARGS__);              \
        }                                                                             \
    } while (0)

/* Checks a call returns `want`; names the result and the comm's last error otherwise. */
#define LR_CHECK_RES(lr, call, want, comm)                                            \
    do {                                                                              \
        collResult_t lr_r_ = (call);                                                  \
        if (lr_r_ != (want)) {                                                        \
            launch_report((lr), __FILE__, __LINE__, #call, "returned %s, want %s (%s)", \
                          collGetErrorString(lr_r_), collGetErrorString(want),        \
                          collGetLastError(comm));                                    \
        }                                                                             \
    } while (0)

static inline double launch_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#if defined(__GNUC__)
__attribute__((format(printf, 5, 6)))
#endif
static inline void launch_report(struct launch_rank *lr, const char *file, int line,
                                 const char *what, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    /* One fprintf per report keeps the lines of concurrent ranks apart. */
    fprintf(stderr, "[rank %d] %s:%d: CHECK failed: %s: %s\n", lr->rank, file, line, what, msg);
    lr->failures++;
}

/* Ends the process at once: the ranks are out of step and cannot finish. */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3), noreturn))
#endif
static inline void launch_fatal(const struct launch_rank *lr, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "[rank %d] FATAL: %s\n", lr ? lr->rank : -1, msg);
    fflush(stderr);
    fflush(stdout);
    _exit(1);
}

/* A call that must succeed: anything else ends the process (the ranks could not
 * stay in step), naming the call, its result and the comm's last error. */
#define LR_MUST(lr, call, comm)                                                           \
    do {                                                                                  \
        collResult_t lr_must_r_ = (call);                                                 \
        if (lr_must_r_ != collSuccess)                                                    \
            launch_fatal((lr), "%s:%d: %s: %s (%s)", __FILE__, __LINE__, #call,          \
                         collGetErrorString(lr_must_r_), collGetLastError(comm));         \
    } while (0)

/*
 * A TCP port on 127.0.0.1 that was free a moment ago: the kernel picks it for a
 * socket bound to port 0, which is then closed.  Another process could take it in
 * between; the tests that use it start their ranks at once.  Returns -1 on error.
 */
/* True when this process still maps a segment of the shared-memory transport. */
static inline bool launch_maps_shm_segment(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    bool found = false;
    while (f && fgets(line, sizeof(line), f))
        found |= strstr(line, "libcollective-shm") != NULL;
    if (f)
        fclose(f);
    return found;
}

/* Entries of /dev/shm whose name mentions the library, each reported; their
 * count.  The host's ledger of shared memory (transports/shm/ledger.c) is meant
 * to stay. */
static inline int launch_dev_shm_leftovers(void)
{
    DIR *d = opendir("/dev/shm");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        if ((strstr(e->d_name, "libcollective") || strstr(e->d_name, "coll-")) &&
            strncmp(e->d_name, "libcollective-ledger-", 21) != 0) { /* the ledger stays */
            fprintf(stderr, "FAIL: /dev/shm/%s is left\n", e->d_name);
            n++;
        }
    if (d)
        closedir(d);
    return n;
}

/* A port for the rendezvous that can be bound now: drawn at random from 61000-65535, above
 * the kernel's ephemeral ports, so that no socket's connection is given it before rank 0
 * listens (as collrun draws its own). */
static inline int launch_free_port(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    unsigned seed = (unsigned)getpid() ^ (unsigned)time(NULL) ^ (unsigned)clock();

    for (int tries = 0; tries < 64; tries++) {
        int port = 61000 + (int)(rand_r(&seed) % 4536);
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return -1;
        sa.sin_port = htons((uint16_t)port);
        bool ok = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
        close(fd);
        if (ok)
            return port;
    }
    return -1;
}

/* Parses the value of --threads; exits with a message when it is not 1..1024. */
static inline int launch_parse_threads(const char *s)
{
    char *end;
    long v = strtol(s, &end, 10);

    if (*s == '\0' || *end != '\0' || v < 1 || v > 1024) {
        fprintf(stderr, "--threads wants a number of ranks from 1 to 1024, not '%s'\n", s);
        exit(2);
    }
    return (int)v;
}

/* True when a launcher started this process as one rank of several. */
static inline bool launch_have_env(void)
{
    static const char *const vars[] = {"COLL_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"};

    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        if (getenv(vars[i]))
            return true;
    return false;
}

static inline void launch_body(struct launch_rank *lr, launch_body_fn body)
{
    collResult_t r;
    int n = -1, me = -1;

    if (lr->threads)
        r = collCommInitRank(&lr->comm, lr->nranks, lr->id, lr->rank);
    else
        r = collCommInitFromEnv(&lr->comm);
    if (r != collSuccess)
        launch_fatal(lr, "communicator init failed: %s (%s)", collGetErrorString(r),
                     collGetLastError(NULL));
    if (collCommCount(lr->comm, &n) != collSuccess ||
        collCommUserRank(lr->comm, &me) != collSuccess)
        launch_fatal(lr, "collCommCount/collCommUserRank failed: %s",
                     collGetLastError(lr->comm));
    if (lr->threads && (n != lr->nranks || me != lr->rank))
        launch_fatal(lr, "communicator says rank %d of %d, want %d of %d", me, n, lr->rank,
                     lr->nranks);
    lr->rank = me;
    lr->nranks = n;
    body(lr);
    r = collCommDestroy(lr->comm);
    if (r != collSuccess)
        launch_report(lr, __FILE__, __LINE__, "collCommDestroy", "returned %s",
                      collGetErrorString(r));
    lr->comm = NULL;
}

struct launch_thread_arg {
    struct launch_rank *lr;
    launch_body_fn body;
};

static inline void *launch_thread_main(void *p)
{
    struct launch_thread_arg *ta = p;

    launch_body(ta->lr, ta->body);
    return NULL;
}

/*
 * Runs body on every rank and returns the exit status for main: 0 when no rank
 * failed a check.  nthreads > 0 runs that many ranks as threads; 0 runs this
 * process as the rank a launcher set up, or as a single rank without one.
 */
static inline int launch_run(int nthreads, launch_body_fn body, void *arg)
{
    int failures = 0;

    if (nthreads == 0 && launch_have_env()) {
        struct launch_rank lr = {.rank = -1, .nranks = -1, .arg = arg};

        launch_body(&lr, body);
        return lr.failures ? 1 : 0;
    }
    if (nthreads == 0)
        nthreads = 1;

    collUniqueId id;
    collResult_t r = collGetUniqueId(&id);
    if (r != collSuccess)
        launch_fatal(NULL, "collGetUniqueId failed: %s (%s)", collGetErrorString(r),
                     collGetLastError(NULL));

    struct launch_rank *lrs = calloc((size_t)nthreads, sizeof(*lrs));
    struct launch_thread_arg *tas = calloc((size_t)nthreads, sizeof(*tas));
    if (!lrs || !tas)
        launch_fatal(NULL, "out of memory");
    for (int i = 0; i < nthreads; i++) {
        lrs[i] = (struct launch_rank){
            .rank = i, .nranks = nthreads, .threads = true, .id = id, .arg = arg};
        tas[i] = (struct launch_thread_arg){.lr = &lrs[i], .body = body};
        if (pthread_create(&lrs[i].thread, NULL, launch_thread_main, &tas[i]) != 0)
            launch_fatal(NULL, "pthread_create failed for rank %d", i);
    }
    for (int i = 0; i < nthreads; i++) {
        pthread_join(lrs[i].thread, NULL);
        failures += lrs[i].failures;
    }
    free(tas);
    free(lrs);
    return failures ? 1 : 0;
}

/* main() of a test whose only option is --threads N: runs body as processes
 * (under a launcher), as one rank, or as N threads. */
static inline int launch_main(int argc, char **argv, launch_body_fn body, void *arg)
{
    int nthreads = 0;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            nthreads = launch_parse_threads(argv[++i]);
        } else {
            fprintf(stderr, "usage: %s [--threads N]\n", argv[0]);
            return 2;
        }
    }
    return launch_run(nthreads, body, arg);
}

#endif
