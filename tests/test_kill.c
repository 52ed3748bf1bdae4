/*
 * A rank dies in the middle of a collective: every survivor must get an error in
 * bounded time, and the communicator must stay poisoned and be destroyable.
 *
 * The test forks 4 ranks itself (collrun would end them all on the first death):
 * COLL_COMM_ID=127.0.0.1:<free port>, COLL_RANK, COLL_NRANKS=4 and
 * COLL_TIMEOUT_MS=10000.  They loop on 8 MiB float32 allreduces; once the first
 * has completed, a thread of rank 2 waits 300 ms and raises SIGKILL, which lands in
 * the middle of a later allreduce.  Each survivor then checks, and reports through
 * its exit code and a record on a pipe:
 *
 *   - the failing call returned collRemoteError, collSystemError or collTimeout,
 *     within COLL_TIMEOUT_MS + 5 s of its start;
 *   - collGetLastError(comm) says something (it is printed);
 *   - the next allreduce fails too, quickly, and collCommGetAsyncError reports it;
 *   - collCommDestroy returns within 5 s.
 *
 *   - its neighbours were reached over the transport asked for;
 *   - after collCommDestroy no shared-memory segment is mapped any more.
 *
 * The parent checks rank 2 died of SIGKILL, that each survivor's error came within
 * the timeout + 5 s of that death (CLOCK_MONOTONIC is one clock for all processes),
 * that every survivor exited with 0, that nothing of the process group is left,
 * and that /dev/shm holds nothing of the library (segments are memfds: they go
 * with the last process that maps them).
 *
 *   test_kill [-v] [--transport shm|tcp|verbs]    (COLL_TRANSPORTS for the ranks)
 *
 * verbs needs an RDMA device (tests/test_verbs.sh runs it on Soft-RoCE in a VM);
 * without verbs built in, --transport verbs exits 77 (skipped).
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config.h"
#include "launch.h"
#include "transport.h"

#define NRANKS 4
#define VICTIM 2
#define TIMEOUT_MS 10000
#define SLACK_S 5.0
#define KILL_AFTER_US 300000
#define COUNT ((size_t)8 << 20 >> 2) /* 8 MiB of float32 */
#define MAX_ITERS 100000

/* Exit codes of a survivor: what went wrong first. */
enum kill_exit {
    EXIT_OK = 0,
    EXIT_INIT = 10,         /* the communicator did not form */
    EXIT_NO_ERROR = 11,     /* the loop ended without an error */
    EXIT_WRONG_KIND = 12,   /* an error other than remote, system or timeout */
    EXIT_TOO_LATE = 13,     /* the failing call took longer than timeout + slack */
    EXIT_NO_MESSAGE = 14,   /* collGetLastError was empty */
    EXIT_NOT_POISONED = 15, /* a later call succeeded, or took long to fail */
    EXIT_SLOW_DESTROY = 16, /* collCommDestroy took over 5 s */
    EXIT_WRONG_DATA = 17,   /* an allreduce before the death gave a wrong sum */
    EXIT_TRANSPORT = 18,    /* a neighbour was reached over another transport */
    EXIT_SEGMENT_LEFT = 19, /* a shared-memory segment is still mapped after destroy */
};

struct kill_record {
    int rank;
    int result;        /* of the failing call */
    int iterations;    /* allreduces completed before it */
    double t_error;    /* CLOCK_MONOTONIC when the failing call returned */
    double call_s;     /* how long the failing call took */
    int later_result;  /* of the allreduce after the error */
    double later_s;
    int async_result;  /* collCommGetAsyncError after the error */
    double destroy_s;
    int destroy_result;
    char msg[400];
};

static bool verbose;
static const char *transport = "shm";


/* Entries of /dev/shm whose name mentions the library. */
static int dev_shm_leftovers(void)
{
    DIR *d = opendir("/dev/shm");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        if (strstr(e->d_name, "libcollective") || strstr(e->d_name, "coll-")) {
            fprintf(stderr, "FAIL: /dev/shm/%s is left\n", e->d_name);
            n++;
        }
    if (d)
        closedir(d);
    return n;
}

static void *victim_thread(void *arg)
{
    (void)arg;
    usleep(KILL_AFTER_US);
    raise(SIGKILL);
    return NULL;
}

static bool is_failure_kind(collResult_t r)
{
    return r == collRemoteError || r == collSystemError || r == collTimeout;
}

static int rank_main(int rank, const char *comm_id, int wfd)
{
    struct kill_record rec = {.rank = rank, .result = collSuccess};
    char v[32];
    collComm_t comm;
    collResult_t r;
    int code = EXIT_OK;

    snprintf(v, sizeof(v), "%d", rank);
    setenv("COLL_RANK", v, 1);
    snprintf(v, sizeof(v), "%d", NRANKS);
    setenv("COLL_NRANKS", v, 1);
    snprintf(v, sizeof(v), "%d", TIMEOUT_MS);
    setenv("COLL_TIMEOUT_MS", v, 1);
    setenv("COLL_COMM_ID", comm_id, 1);
    setenv("COLL_SECRET", "0123456789abcdef0123456789abcdef", 1);
    setenv("COLL_TRANSPORTS", transport, 1);

    r = collCommInitFromEnv(&comm);
    if (r != collSuccess) {
        fprintf(stderr, "[rank %d] init failed: %s: %s\n", rank, collGetErrorString(r),
                collGetLastError(NULL));
        return EXIT_INIT;
    }

    float *send = malloc(COUNT * sizeof(float));
    float *recv = malloc(COUNT * sizeof(float));
    if (!send || !recv)
        return EXIT_INIT;
    for (size_t i = 0; i < COUNT; i++)
        send[i] = (float)(rank + 1) + (float)(i % 7);

    double t0 = 0;
    int it;
    for (it = 0; it < MAX_ITERS; it++) {
        t0 = launch_now();
        r = collAllReduce(send, recv, COUNT, collFloat32, collSum, comm, NULL);
        if (r != collSuccess)
            break;
        const size_t probe[] = {0, COUNT / 2 + 1, COUNT - 1};
        for (size_t k = 0; k < 3; k++) {
            float want = 10.0f + 4.0f * (float)(probe[k] % 7);
            if (recv[probe[k]] != want) {
                fprintf(stderr, "[rank %d] allreduce %d: recv[%zu] = %g, want %g\n", rank, it,
                        probe[k], (double)recv[probe[k]], (double)want);
                code = EXIT_WRONG_DATA;
            }
        }
        if (it == 0) {
            /* The ring's neighbours are connected by now. */
            int next = (rank + 1) % NRANKS, prev = (rank + NRANKS - 1) % NRANKS;
            const char *tn = coll_transport_peer_name(comm, next);
            const char *tp = coll_transport_peer_name(comm, prev);
            if (!tn || !tp || strcmp(tn, transport) || strcmp(tp, transport)) {
                fprintf(stderr, "[rank %d] ranks %d and %d reached over %s and %s, want %s\n",
                        rank, next, prev, tn ? tn : "nothing", tp ? tp : "nothing",
                        transport);
                code = EXIT_TRANSPORT;
            }
        }
        if (it == 0 && rank == VICTIM) {
            pthread_t th;
            if (pthread_create(&th, NULL, victim_thread, NULL) != 0)
                raise(SIGKILL);
        }
    }
    rec.t_error = launch_now();
    rec.call_s = rec.t_error - t0;
    rec.iterations = it;
    rec.result = r;
    const char *last = collGetLastError(comm);
    snprintf(rec.msg, sizeof(rec.msg), "%s", last ? last : "");
    fprintf(stderr, "[rank %d] after %d allreduces: %s in %.2f s: %s\n", rank, it,
            collGetErrorString(r), rec.call_s, rec.msg);

    if (r == collSuccess)
        code = code ? code : EXIT_NO_ERROR;
    else if (!is_failure_kind(r))
        code = code ? code : EXIT_WRONG_KIND;
    else if (rec.call_s > TIMEOUT_MS / 1000.0 + SLACK_S)
        code = code ? code : EXIT_TOO_LATE;
    else if (rec.msg[0] == '\0')
        code = code ? code : EXIT_NO_MESSAGE;

    /* Poisoned: a later call fails at once, with the error that poisoned it or
     * another failure, and the async error says so. */
    double t1 = launch_now();
    rec.later_result = collAllReduce(send, recv, 1024, collFloat32, collSum, comm, NULL);
    rec.later_s = launch_now() - t1;
    collResult_t async = collSuccess;
    if (collCommGetAsyncError(comm, &async) != collSuccess)
        async = collInternalError;
    rec.async_result = async;
    if (rec.later_result == collSuccess || rec.later_s > 1.0 || async == collSuccess) {
        fprintf(stderr, "[rank %d] not poisoned: later allreduce %s in %.2f s, async %s\n", rank,
                collGetErrorString((collResult_t)rec.later_result), rec.later_s,
                collGetErrorString(async));
        code = code ? code : EXIT_NOT_POISONED;
    }

    double t2 = launch_now();
    rec.destroy_result = collCommDestroy(comm);
    rec.destroy_s = launch_now() - t2;
    if (rec.destroy_s > 5.0) {
        fprintf(stderr, "[rank %d] collCommDestroy took %.2f s\n", rank, rec.destroy_s);
        code = code ? code : EXIT_SLOW_DESTROY;
    }
    if (launch_maps_shm_segment()) {
        fprintf(stderr, "[rank %d] a shared-memory segment is mapped after destroy\n", rank);
        code = code ? code : EXIT_SEGMENT_LEFT;
    }
    if (write(wfd, &rec, sizeof(rec)) != (ssize_t)sizeof(rec))
        code = code ? code : EXIT_INIT;
    free(send);
    free(recv);
    return code;
}

static const char *exit_name(int code)
{
    switch (code) {
    case EXIT_OK:
        return "ok";
    case EXIT_INIT:
        return "init failed";
    case EXIT_NO_ERROR:
        return "no error";
    case EXIT_WRONG_KIND:
        return "wrong kind of error";
    case EXIT_TOO_LATE:
        return "error too late";
    case EXIT_NO_MESSAGE:
        return "empty collGetLastError";
    case EXIT_NOT_POISONED:
        return "not poisoned";
    case EXIT_SLOW_DESTROY:
        return "slow collCommDestroy";
    case EXIT_WRONG_DATA:
        return "wrong data before the death";
    case EXIT_TRANSPORT:
        return "wrong transport";
    case EXIT_SEGMENT_LEFT:
        return "shared-memory segment left mapped";
    default:
        return "unexpected exit code";
    }
}

int main(int argc, char **argv)
{
    pid_t pids[NRANKS];
    int fds[NRANKS], status[NRANKS];
    bool done[NRANKS] = {false};
    struct kill_record recs[NRANKS];
    bool have_rec[NRANKS] = {false};
    int failures = 0, port;
    char comm_id[64];
    pid_t pgid = 0;
    double t_start = launch_now(), t_kill = 0;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-v") == 0) {
            verbose = true;
        } else if (strcmp(argv[i], "--transport") == 0 && i + 1 < argc &&
                   (strcmp(argv[i + 1], "shm") == 0 || strcmp(argv[i + 1], "tcp") == 0 ||
                    strcmp(argv[i + 1], "verbs") == 0)) {
            transport = argv[++i];
        } else {
            fprintf(stderr, "usage: %s [-v] [--transport shm|tcp|verbs]\n", argv[0]);
            return 2;
        }
    }
    if (!COLL_HAVE_VERBS && strcmp(transport, "verbs") == 0) {
        printf("SKIP: libcollective was built without verbs (libibverbs-dev not found)\n");
        return 77;
    }
    signal(SIGPIPE, SIG_IGN);
    port = launch_free_port();
    if (port < 0) {
        perror("no free port");
        return 1;
    }
    snprintf(comm_id, sizeof(comm_id), "127.0.0.1:%d", port);

    for (int r = 0; r < NRANKS; r++) {
        int p[2];
        if (pipe(p) != 0) {
            perror("pipe");
            return 1;
        }
        fflush(stdout);
        fflush(stderr);
        pids[r] = fork();
        if (pids[r] < 0) {
            perror("fork");
            return 1;
        }
        if (pids[r] == 0) {
            /* Set in both processes, so the group exists whichever runs first. */
            setpgid(0, pgid);
            close(p[0]);
            _exit(rank_main(r, comm_id, p[1]));
        }
        if (r == 0)
            pgid = pids[0];
        setpgid(pids[r], pgid);
        close(p[1]);
        fds[r] = p[0];
    }

    /* Wait: everything must end within the init, a few iterations, the timeout and
     * the slack, counted from the death once it has happened. */
    for (;;) {
        int left = 0;
        for (int r = 0; r < NRANKS; r++) {
            if (!have_rec[r] && fds[r] >= 0) {
                struct pollfd pf = {.fd = fds[r], .events = POLLIN};
                if (poll(&pf, 1, 0) > 0) {
                    have_rec[r] = read(fds[r], &recs[r], sizeof(recs[r])) ==
                                  (ssize_t)sizeof(recs[r]);
                    close(fds[r]);
                    fds[r] = -1;
                }
            }
            if (!done[r] && waitpid(pids[r], &status[r], WNOHANG) == pids[r]) {
                done[r] = true;
                if (r == VICTIM)
                    t_kill = launch_now();
            }
            left += !done[r];
        }
        if (left == 0)
            break;
        double limit = t_kill > 0 ? t_kill + TIMEOUT_MS / 1000.0 + SLACK_S + 10.0
                                  : t_start + 60.0;
        if (launch_now() > limit) {
            fprintf(stderr, "FAIL: ranks still running %.0f s after %s; killing them\n",
                    launch_now() - (t_kill > 0 ? t_kill : t_start),
                    t_kill > 0 ? "the death of rank 2" : "the start");
            failures++;
            kill(-pgid, SIGKILL);
            for (int r = 0; r < NRANKS; r++)
                if (!done[r]) {
                    waitpid(pids[r], &status[r], 0);
                    done[r] = true;
                    fprintf(stderr, "FAIL: rank %d hung\n", r);
                }
            break;
        }
        usleep(10000);
    }
    for (int r = 0; r < NRANKS; r++)
        if (fds[r] >= 0)
            close(fds[r]);

    if (!(WIFSIGNALED(status[VICTIM]) && WTERMSIG(status[VICTIM]) == SIGKILL)) {
        fprintf(stderr, "FAIL: rank %d did not die of SIGKILL (status 0x%x)\n", VICTIM,
                status[VICTIM]);
        failures++;
    }
    for (int r = 0; r < NRANKS; r++) {
        if (r == VICTIM)
            continue;
        int code = WIFEXITED(status[r]) ? WEXITSTATUS(status[r]) : -1;
        if (code != EXIT_OK) {
            fprintf(stderr, "FAIL: rank %d: %s (status 0x%x)\n", r, exit_name(code), status[r]);
            failures++;
        }
        if (!have_rec[r]) {
            fprintf(stderr, "FAIL: rank %d sent no record\n", r);
            failures++;
            continue;
        }
        const struct kill_record *rec = &recs[r];
        /* The parent sees the death up to one poll (10 ms) late, so a survivor can
         * seem to learn of it a little before it happened. */
        double after_death = t_kill > 0 ? rec->t_error - t_kill : -1;
        if (t_kill > 0 && after_death < 0)
            after_death = 0;
        printf("rank %d: %s after %d allreduces, %.2f s after the death (call %.2f s); "
               "then %s in %.3f s, async %s, destroy %s in %.3f s: %s\n",
               r, collGetErrorString((collResult_t)rec->result), rec->iterations, after_death,
               rec->call_s, collGetErrorString((collResult_t)rec->later_result), rec->later_s,
               collGetErrorString((collResult_t)rec->async_result),
               collGetErrorString((collResult_t)rec->destroy_result), rec->destroy_s, rec->msg);
        if (after_death > TIMEOUT_MS / 1000.0 + SLACK_S) {
            fprintf(stderr, "FAIL: rank %d learned of the death after %.2f s\n", r,
                    after_death);
            failures++;
        }
    }

    failures += dev_shm_leftovers();
    /* Nothing of the group may be left: kill(-pgid, 0) finds no process. */
    errno = 0;
    if (kill(-pgid, 0) == 0 || errno != ESRCH) {
        fprintf(stderr, "FAIL: processes of group %d are still running\n", (int)pgid);
        failures++;
        kill(-pgid, SIGKILL);
    }
    if (verbose || failures)
        printf("test_kill: %.1f s in all\n", launch_now() - t_start);
    if (failures)
        fprintf(stderr, "%d check(s) failed\n", failures);
    return failures ? 1 : 0;
}
