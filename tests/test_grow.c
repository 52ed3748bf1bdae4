/*
 * collCommGetUniqueId and collCommGrow with processes: 3 ranks grow to 5, and
 * every way a grow is refused or fails.
 *
 *   test_grow [--transport shm|tcp] [--case NAME] [-v]
 *
 *   ok         3 ranks grow to 5 (new ranks 3 and 4): ranks kept, a checked
 *              allreduce on the new communicator and on the old one; then the
 *              same id again: refused on the 3 ranks at once ("used by an earlier
 *              collCommGrow"), and a new process given it fails at once (the
 *              root is gone); argument checks (rank not -1, nRanks not above 3,
 *              collCommGetUniqueId on rank 1)
 *   wrong-size the ranks pass nRanks 5, the new ones 6: all 5 fail at once,
 *              "disagree on nranks"
 *   bad-id     rank 0 passes a collGetUniqueId id, then the grow id of another
 *              communicator: the 3 ranks fail at once each time; a new process
 *              refuses garbage, a plain id, rank 1, rank 5 of 5 and nRanks 3
 *   duplicate  both new processes pass rank 3: all 5 fail at once, "duplicate"
 *   dies       new rank 4 registers and dies (SIGKILL) before rank 3 comes:
 *              the other 4 fail within the timeout (1.5 of it, measured)
 *
 * The old ranks are forked with COLL_COMM_ID on a free port and
 * COLL_TIMEOUT_MS=3000; rank 0 hands the grow id to the new processes through a
 * pipe each.  Every process checks its own results and exits 0 when they hold;
 * the parent checks the exit codes, that nothing is left running, and that
 * nothing of the library is left in /dev/shm.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "launch.h"

#define OLD 3
#define NEW_MAX 3
#define TIMEOUT_S 3.0

static bool verbose;
static int fails; /* in each process: its own failed checks */

#define CHECK(cond, ...)                                                                  \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "[%d] %s:%d: %s: ", (int)getpid(), __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fprintf(stderr, "\n");                                                        \
            fails++;                                                                      \
        }                                                                                 \
    } while (0)

static bool contains(const char *s, const char *part)
{
    return s != NULL && strstr(s, part) != NULL;
}

/* What one case does: the parent forks OLD old ranks and nnew new processes. */
struct grow_case {
    const char *name;
    int nnew;
    int (*old_main)(int rank, collComm_t comm, int *to_new);
    int (*new_main)(int j, int from_rank0);
};

/* Old ranks: rank 0 writes the id to every new process's pipe. */
static void send_id(const collUniqueId *id, const int *to_new, int nnew)
{
    for (int j = 0; j < nnew; j++)
        if (write(to_new[j], id, sizeof(*id)) != (ssize_t)sizeof(*id))
            fprintf(stderr, "write to new process %d: %s\n", j, strerror(errno));
}

static bool recv_id(int fd, collUniqueId *id)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 20000) != 1)
        return false;
    return read(fd, id, sizeof(*id)) == (ssize_t)sizeof(*id);
}

/* A checked allreduce of rank + 1 over c, which has n ranks. */
static void check_sum(collComm_t c, int rank, int n, const char *what)
{
    int v = rank + 1, sum = -1;
    collResult_t r = collAllReduce(&v, &sum, 1, collInt32, collSum, c, NULL);
    CHECK(r == collSuccess && sum == n * (n + 1) / 2, "%s: allreduce %s, %d (want %d): %s", what,
          collGetErrorString(r), sum, n * (n + 1) / 2, collGetLastError(c));
}

static void check_grown(collComm_t g, int want_rank, int want_n)
{
    int n = -1, r = -1;
    collCommCount(g, &n);
    collCommUserRank(g, &r);
    CHECK(n == want_n && r == want_rank, "grown: rank %d of %d, want %d of %d", r, n, want_rank,
          want_n);
    check_sum(g, r, n, "grown communicator");
}

/* A failing grow: its result is an error, within `within` seconds, with a
 * message containing `part` (NULL: any). */
static void check_fails(collResult_t r, collComm_t c, double t0, double within, const char *part)
{
    double dt = launch_now() - t0;
    const char *msg = collGetLastError(c);
    CHECK(r != collSuccess, "collCommGrow succeeded");
    CHECK(dt < within, "collCommGrow took %.2f s to fail (limit %.2f): %s", dt, within, msg);
    CHECK(part == NULL || contains(msg, part), "message '%s' lacks '%s'", msg, part);
    if (verbose)
        fprintf(stderr, "[%d] failed in %.2f s as expected: %s\n", (int)getpid(), dt, msg);
}

/* An old rank's grow that must fail: rank 0 makes the id and hands it to the
 * nnew new processes, then every old rank grows to 5 and checks the failure;
 * with `alive`, the old communicator must still work afterwards. */
static void old_grow_fails(int rank, collComm_t comm, const int *to_new, int nnew, double within,
                           const char *part, bool alive)
{
    collUniqueId id;
    if (rank == 0) {
        CHECK(collCommGetUniqueId(comm, &id) == collSuccess, "%s", collGetLastError(comm));
        send_id(&id, to_new, nnew);
    }
    collComm_t g = NULL;
    double t0 = launch_now();
    collResult_t r = collCommGrow(comm, 5, rank == 0 ? &id : NULL, -1, &g, NULL);
    check_fails(r, comm, t0, within, part);
    if (alive)
        check_sum(comm, rank, OLD, "the old communicator after a failed grow");
}

/* ------------------------------------------------------------------ ok --- */

static int ok_old(int rank, collComm_t comm, int *to_new)
{
    collUniqueId id;
    collComm_t g = NULL, g2 = NULL;
    if (rank == 1) {
        CHECK(collCommGetUniqueId(comm, &id) == collInvalidUsage, "collCommGetUniqueId on rank 1");
        CHECK(contains(collGetLastError(comm), "only rank 0"), "%s", collGetLastError(comm));
    }
    CHECK(collCommGrow(comm, 5, NULL, rank, &g, NULL) == collInvalidArgument, "rank %d", rank);
    CHECK(contains(collGetLastError(comm), "pass -1"), "%s", collGetLastError(comm));
    CHECK(collCommGrow(comm, OLD, NULL, -1, &g, NULL) == collInvalidArgument, "nRanks 3");
    CHECK(contains(collGetLastError(comm), "nRanks 3 does not exceed"), "%s",
          collGetLastError(comm));
    CHECK(collCommGrow(comm, 5, NULL, -1, NULL, NULL) == collInvalidArgument, "newcomm NULL");
    if (rank == 0) {
        CHECK(collCommGetUniqueId(comm, &id) == collSuccess, "%s", collGetLastError(comm));
        send_id(&id, to_new, 2);
    }
    collResult_t r = collCommGrow(comm, 5, rank == 0 ? &id : NULL, -1, &g, NULL);
    CHECK(r == collSuccess, "grow: %s", collGetLastError(comm));
    if (r != collSuccess)
        return 1;
    if (rank == 0) /* the third new process tries the id once the grow is done */
        send_id(&id, to_new + 2, 1);
    check_grown(g, rank, 5);
    check_sum(comm, rank, OLD, "the old communicator after the grow");
    /* The same id again. */
    double t0 = launch_now();
    r = collCommGrow(comm, 5, rank == 0 ? &id : NULL, -1, &g2, NULL);
    check_fails(r, comm, t0, 1.0, rank == 0 ? "used by an earlier collCommGrow" : "rank 0 refused");
    check_sum(comm, rank, OLD, "the old communicator after a refused grow");
    CHECK(collCommDestroy(g) == collSuccess, "destroy grown");
    return 0;
}

static int ok_new(int j, int from_rank0)
{
    collUniqueId id;
    if (!recv_id(from_rank0, &id)) {
        fprintf(stderr, "new process %d: no id\n", j);
        return 1;
    }
    collComm_t g = NULL;
    if (j == 2) {
        /* The id of a grow that happened (rank 0 sends it once it has). */
        double t0 = launch_now();
        collResult_t r = collCommGrow(NULL, 5, &id, 3, &g, NULL);
        check_fails(r, NULL, t0, 1.0, "serves one grow");
        return fails ? 1 : 0;
    }
    collResult_t r = collCommGrow(NULL, 5, &id, OLD + j, &g, NULL);
    CHECK(r == collSuccess, "new rank %d: %s", OLD + j, collGetLastError(NULL));
    if (r != collSuccess)
        return 1;
    check_grown(g, OLD + j, 5);
    CHECK(collCommDestroy(g) == collSuccess, "destroy grown");
    return fails ? 1 : 0;
}

/* ---------------------------------------------------------- wrong-size --- */

static int size_old(int rank, collComm_t comm, int *to_new)
{
    old_grow_fails(rank, comm, to_new, 2, TIMEOUT_S, "disagree on nranks", true);
    return 0;
}

static int size_new(int j, int from_rank0)
{
    collUniqueId id;
    if (!recv_id(from_rank0, &id))
        return 1;
    collComm_t g = NULL;
    double t0 = launch_now();
    collResult_t r = collCommGrow(NULL, 6, &id, OLD + j, &g, NULL);
    check_fails(r, NULL, t0, TIMEOUT_S, "disagree on nranks");
    return fails ? 1 : 0;
}

/* -------------------------------------------------------------- bad-id --- */

static int bad_old(int rank, collComm_t comm, int *to_new)
{
    collUniqueId plain, grow, other;
    collComm_t g = NULL, one = NULL;
    if (rank == 0) {
        CHECK(collGetUniqueId(&plain) == collSuccess, "collGetUniqueId");
        CHECK(collCommGetUniqueId(comm, &grow) == collSuccess, "%s", collGetLastError(comm));
        send_id(&grow, to_new, 1);
    }
    double t0 = launch_now();
    collResult_t r = collCommGrow(comm, 5, rank == 0 ? &plain : NULL, -1, &g, NULL);
    check_fails(r, comm, t0, 1.0, rank == 0 ? "made by collGetUniqueId" : "rank 0 refused");
    /* The grow id of another communicator (rank 0 alone). */
    CHECK(collCommSplit(comm, rank == 0 ? 0 : COLL_SPLIT_NOCOLOR, 0, &one, NULL) == collSuccess,
          "split: %s", collGetLastError(comm));
    if (rank == 0)
        CHECK(collCommGetUniqueId(one, &other) == collSuccess, "%s", collGetLastError(one));
    t0 = launch_now();
    r = collCommGrow(comm, 5, rank == 0 ? &other : NULL, -1, &g, NULL);
    check_fails(r, comm, t0, 1.0, rank == 0 ? "another communicator" : "rank 0 refused");
    /* An id made before the latest one. */
    if (rank == 0)
        CHECK(collCommGetUniqueId(comm, &other) == collSuccess, "%s", collGetLastError(comm));
    t0 = launch_now();
    r = collCommGrow(comm, 5, rank == 0 ? &grow : NULL, -1, &g, NULL);
    check_fails(r, comm, t0, 1.0, rank == 0 ? "latest collCommGetUniqueId" : "rank 0 refused");
    check_sum(comm, rank, OLD, "the old communicator after refused grows");
    if (one != NULL)
        CHECK(collCommDestroy(one) == collSuccess, "destroy");
    return 0;
}

static int bad_new(int j, int from_rank0)
{
    collUniqueId id, plain, junk;
    (void)j;
    if (!recv_id(from_rank0, &id))
        return 1;
    collComm_t g = NULL;
    memset(&junk, 0x5a, sizeof(junk));
    CHECK(collCommGrow(NULL, 5, &junk, 3, &g, NULL) == collInvalidArgument, "garbage id");
    CHECK(contains(collGetLastError(NULL), "uniqueId is malformed"), "%s", collGetLastError(NULL));
    CHECK(collGetUniqueId(&plain) == collSuccess, "collGetUniqueId");
    CHECK(collCommGrow(NULL, 5, &plain, 3, &g, NULL) == collInvalidArgument, "plain id");
    CHECK(contains(collGetLastError(NULL), "made by collGetUniqueId"), "%s",
          collGetLastError(NULL));
    CHECK(collCommGrow(NULL, 5, &id, 1, &g, NULL) == collInvalidArgument, "rank 1");
    CHECK(contains(collGetLastError(NULL), "outside [3, 5)"), "%s", collGetLastError(NULL));
    CHECK(collCommGrow(NULL, 5, &id, 5, &g, NULL) == collInvalidArgument, "rank 5");
    CHECK(collCommGrow(NULL, 3, &id, 3, &g, NULL) == collInvalidArgument, "nRanks 3");
    CHECK(contains(collGetLastError(NULL), "does not exceed 3"), "%s", collGetLastError(NULL));
    CHECK(collCommGrow(NULL, 5, NULL, 3, &g, NULL) == collInvalidArgument, "id NULL");
    CHECK(collCommGrow(NULL, 0, &id, 3, &g, NULL) == collInvalidArgument, "nRanks 0");
    return fails ? 1 : 0;
}

/* ----------------------------------------------------------- duplicate --- */

static int dup_new(int j, int from_rank0)
{
    collUniqueId id;
    (void)j;
    if (!recv_id(from_rank0, &id))
        return 1;
    collComm_t g = NULL;
    double t0 = launch_now();
    collResult_t r = collCommGrow(NULL, 5, &id, 3, &g, NULL);
    check_fails(r, NULL, t0, TIMEOUT_S, "duplicate rank 3");
    return fails ? 1 : 0;
}

static int dup_old(int rank, collComm_t comm, int *to_new)
{
    old_grow_fails(rank, comm, to_new, 2, TIMEOUT_S, "duplicate rank 3", true);
    return 0;
}

/* ---------------------------------------------------------------- dies --- */

static void *die_later(void *arg)
{
    (void)arg;
    struct timespec ts = {0, 300 * 1000000};
    nanosleep(&ts, NULL);
    raise(SIGKILL);
    return NULL;
}

/* New process 0 (rank 3) comes 1 s late; new process 1 (rank 4) kills itself
 * 300 ms into its collCommGrow, by then registered and waiting for rank 3. */
static int dies_new(int j, int from_rank0)
{
    collUniqueId id;
    if (!recv_id(from_rank0, &id))
        return 1;
    if (j == 0)
        sleep(1);
    pthread_t t;
    if (j == 1 && pthread_create(&t, NULL, die_later, NULL) != 0)
        return 1;
    collComm_t g = NULL;
    double t0 = launch_now();
    collResult_t r = collCommGrow(NULL, 5, &id, OLD + j, &g, NULL);
    check_fails(r, NULL, t0, TIMEOUT_S * 1.5, NULL);
    return fails ? 1 : 0;
}

static int dies_old(int rank, collComm_t comm, int *to_new)
{
    old_grow_fails(rank, comm, to_new, 2, TIMEOUT_S * 1.5, NULL, false);
    return 0;
}

static const struct grow_case cases[] = {
    {"ok", 3, ok_old, ok_new},
    {"wrong-size", 2, size_old, size_new},
    {"bad-id", 1, bad_old, bad_new},
    {"duplicate", 2, dup_old, dup_new},
    {"dies", 2, dies_old, dies_new},
};

static int old_main(const struct grow_case *gc, int rank, int *to_new)
{
    char s[16];
    snprintf(s, sizeof(s), "%d", rank);
    setenv("COLL_RANK", s, 1);
    collComm_t comm;
    if (collCommInitFromEnv(&comm) != collSuccess) {
        fprintf(stderr, "[rank %d] init: %s\n", rank, collGetLastError(NULL));
        return 10;
    }
    gc->old_main(rank, comm, to_new);
    CHECK(collCommDestroy(comm) == collSuccess, "destroy");
    CHECK(launch_dev_shm_leftovers() == 0, "segments left in /dev/shm");
    return fails ? 1 : 0;
}

/* Runs one case; returns its failures. */
static int run_case(const struct grow_case *gc)
{
    int port = launch_free_port();
    if (port < 0)
        return 1;
    char idaddr[64];
    snprintf(idaddr, sizeof(idaddr), "127.0.0.1:%d", port);
    setenv("COLL_COMM_ID", idaddr, 1);
    setenv("COLL_NRANKS", "3", 1);
    int pipes[NEW_MAX][2], to_new[NEW_MAX];
    for (int j = 0; j < gc->nnew; j++) {
        if (pipe(pipes[j]) != 0)
            return 1;
        to_new[j] = pipes[j][1];
    }
    fflush(NULL);
    pid_t olds[OLD], news[NEW_MAX];
    for (int r = 0; r < OLD; r++) {
        olds[r] = fork();
        if (olds[r] == 0)
            _exit(old_main(gc, r, to_new));
    }
    for (int j = 0; j < gc->nnew; j++) {
        news[j] = fork();
        if (news[j] == 0)
            _exit(gc->new_main(j, pipes[j][0]));
    }
    for (int j = 0; j < gc->nnew; j++) {
        close(pipes[j][0]);
        close(pipes[j][1]);
    }
    double t0 = launch_now();
    int failures = 0;
    for (int k = 0; k < OLD + gc->nnew; k++) {
        pid_t p = k < OLD ? olds[k] : news[k - OLD];
        bool victim = strcmp(gc->name, "dies") == 0 && k == OLD + 1;
        int st;
        waitpid(p, &st, 0);
        if (victim) {
            if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL) {
                fprintf(stderr, "%s: the victim did not end by SIGKILL\n", gc->name);
                failures++;
            }
            continue;
        }
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "%s: %s %d ended with %s %d\n", gc->name, k < OLD ? "rank" : "new",
                    k < OLD ? k : k - OLD, WIFEXITED(st) ? "exit" : "signal",
                    WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
            failures++;
        }
    }
    int st;
    if (waitpid(-1, &st, WNOHANG) != -1 || errno != ECHILD) {
        fprintf(stderr, "%s: a process is left\n", gc->name);
        failures++;
    }
    failures += launch_dev_shm_leftovers();
    printf("grow %-10s %s (%.1f s)\n", gc->name, failures ? "FAILED" : "ok", launch_now() - t0);
    fflush(stdout);
    return failures;
}

int main(int argc, char **argv)
{
    const char *transport = "shm", *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--transport") == 0 && i + 1 < argc)
            transport = argv[++i];
        else if (strcmp(argv[i], "--case") == 0 && i + 1 < argc)
            only = argv[++i];
        else if (strcmp(argv[i], "-v") == 0)
            verbose = true;
        else {
            fprintf(stderr, "usage: test_grow [--transport shm|tcp] [--case NAME] [-v]\n");
            return 2;
        }
    }
    char tmo[16];
    snprintf(tmo, sizeof(tmo), "%d", (int)(TIMEOUT_S * 1000));
    setenv("COLL_TIMEOUT_MS", tmo, 1);
    setenv("COLL_TRANSPORTS", transport, 1);
    int failures = 0, ran = 0;
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        if (only != NULL && strcmp(only, cases[k].name) != 0)
            continue;
        ran++;
        failures += run_case(&cases[k]);
    }
    if (ran == 0) {
        fprintf(stderr, "no case named '%s'\n", only);
        return 2;
    }
    printf("%s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
