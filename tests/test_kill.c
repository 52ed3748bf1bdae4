/*
 * Fault injection: one rank of four is killed, stopped or aborted at a chosen
 * moment, and every survivor must get an error in bounded time, with a cause, and
 * never report success with wrong data; the communicator must stay poisoned and be
 * destroyable, and nothing may be left behind.
 *
 * The test forks 4 ranks itself (collrun would end them all on the first death):
 * COLL_COMM_ID=127.0.0.1:<free port>, COLL_RANK, COLL_NRANKS=4 and the fault's
 * COLL_TIMEOUT_MS.  They loop on 8 MiB float32 allreduces whose sums are exact, so
 * every result before the fault is checked.  The fault (--fault, default
 * kill-during), the victim and the timeout:
 *
 *   kill-during  rank 2  10 s  SIGKILL 300 ms after the first allreduce, so in a
 *                              later one
 *   kill-init    rank 2   3 s  SIGKILL before it registers at the root: the other
 *                              ranks' init fails
 *   kill-before  rank 2  10 s  SIGKILL after its init, before its first collective
 *   kill-after   rank 2  10 s  after 5 allreduces every rank tells the parent; rank
 *                              2 waits, and the parent kills it once all have told:
 *                              the survivors' sixth allreduce fails
 *   exit-after   rank 2  10 s  after 5 allreduces rank 2 destroys its comm and exits
 *                              at once; the others' 5 results are right and their
 *                              destroy, 300 ms later, succeeds with no error pending
 *   stop         rank 2   3 s  SIGSTOP 300 ms after the first allreduce: the others
 *                              time out, or hear of the first that did; rank 3
 *                              (which receives from 2) names it if it timed out.
 *                              Once they are done the parent sends SIGCONT, and rank
 *                              2 must fail too (not succeed) and exit cleanly
 *   root-dies    rank 0   3 s  rank 0, whose process serves the rendezvous root, is
 *                              killed 300 ms into its init while ranks 1 and 2
 *                              register; rank 3 starts its init only after the
 *                              death.  Every init fails naming the root
 *   kill-stream  rank 2  10 s  rounds of three 8 MiB allreduces issued at once on a
 *                              stream (buffers apart: they run in flight together),
 *                              then one synchronize; rank 2 dies 300 ms into the
 *                              second round, before it issues any of it, while the
 *                              others have its three calls in flight.  Each
 *                              survivor's synchronize fails naming rank 2, and its
 *                              flight recorder shows all three calls of that round
 *                              failed, none done
 *   abort        rank 1  30 s  after 3 allreduces ranks 0-2 enter a fourth while
 *                              rank 3 waits 2 s; 500 ms in, a second thread of rank
 *                              1 calls collCommAbort: it and the blocked call must
 *                              return (an error) within 1 s, and ranks 0, 2 and 3
 *                              fail within 5 s of it (far below the timeout)
 *
 * Each rank reports through its exit code and a record on a pipe: the result of
 * the failing call and when it returned (CLOCK_MONOTONIC is one clock for all
 * processes), collGetLastError, then that a later allreduce fails at once and
 * collCommGetAsyncError says so, that collCommDestroy returns within 5 s, that its
 * neighbours were reached over the transport asked for, and that no shared-memory
 * segment is mapped after the destroy.  The parent takes the time of the fault
 * (the victim's death or stop as waitpid sees it, the kill it sends itself, or
 * the start of the abort), checks each survivor's error came within the timeout +
 * 5 s of it, prints one line per rank with that delay, and checks that nothing of
 * the process group is left and /dev/shm holds nothing of the library (segments
 * are memfds: they go with the last process that maps them).
 *
 *   test_kill [-v] [--transport shm|tcp|verbs] [--fault NAME] [--count N]
 *   test_kill --one-rank ITERS [--count N]
 *
 * --one-rank runs a single rank from the environment its caller set (COLL_RANK,
 * COLL_NRANKS, COLL_COMM_ID, ...): ITERS checked float32 allreduces of N elements
 * (default 256 Ki), or until one fails.  It prints one line: "rank R: ok|error
 * after I allreduces in S s, at T: message" (T the CLOCK_REALTIME of the end) and
 * exits 0 when all succeeded, 3 after an error, 1 on wrong data (tests/test_netns.sh
 * runs it in network namespaces).
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
#include "flight.h"
#include "launch.h"
#include "transport.h"

#define NRANKS 4
#define SLACK_S 5.0
#define FAULT_AFTER_US 300000
#define COUNT ((size_t)8 << 20 >> 2) /* 8 MiB of float32 */
/* The elements of each rank's allreduces: COUNT, or --count N (small calls take
 * other algorithms: ll, rd). */
static size_t fault_count = COUNT;
#define MAX_ITERS 100000
#define ITERS_BEFORE 5        /* kill-after, exit-after: allreduces before the fault */
#define ABORT_ITERS 3         /* abort: allreduces before the blocked one */
#define ABORT_AFTER_US 500000 /* abort: from the blocked call's start to collCommAbort */
#define ABORT_LATE_US 2000000 /* abort: rank 3's wait before its call */
#define ABORT_LIMIT_S 1.0     /* abort and the blocked call return within this */
#define ABORT_OTHERS_S 5.0    /* the other ranks fail within this of the abort */

enum fault {
    FAULT_KILL_DURING,
    FAULT_KILL_INIT,
    FAULT_KILL_BEFORE,
    FAULT_KILL_AFTER,
    FAULT_EXIT_AFTER,
    FAULT_STOP,
    FAULT_ROOT_DIES,
    FAULT_ABORT,
    FAULT_KILL_STREAM,
};

struct fault_spec {
    const char *name;
    int victim;
    int timeout_ms; /* COLL_TIMEOUT_MS of the ranks */
};

static const struct fault_spec fault_specs[] = {
    [FAULT_KILL_DURING] = {"kill-during", 2, 10000},
    [FAULT_KILL_INIT] = {"kill-init", 2, 3000},
    [FAULT_KILL_BEFORE] = {"kill-before", 2, 10000},
    [FAULT_KILL_AFTER] = {"kill-after", 2, 10000},
    [FAULT_EXIT_AFTER] = {"exit-after", 2, 10000},
    [FAULT_STOP] = {"stop", 2, 3000},
    [FAULT_ROOT_DIES] = {"root-dies", 0, 3000},
    [FAULT_ABORT] = {"abort", 1, 30000},
    [FAULT_KILL_STREAM] = {"kill-stream", 2, 10000},
};
#define NFAULTS (sizeof(fault_specs) / sizeof(fault_specs[0]))

/* Exit codes of a rank: what went wrong first. */
enum kill_exit {
    EXIT_OK = 0,
    EXIT_INIT = 10,         /* the communicator did not form (when it should have) */
    EXIT_NO_ERROR = 11,     /* the loop ended without an error */
    EXIT_WRONG_KIND = 12,   /* an error other than remote, system or timeout */
    EXIT_TOO_LATE = 13,     /* the failing call took longer than timeout + slack */
    EXIT_NO_MESSAGE = 14,   /* collGetLastError was empty */
    EXIT_NOT_POISONED = 15, /* a later call succeeded, or took long to fail */
    EXIT_SLOW_DESTROY = 16, /* collCommDestroy took over 5 s, or failed */
    EXIT_WRONG_DATA = 17,   /* an allreduce before the fault gave a wrong sum */
    EXIT_TRANSPORT = 18,    /* a neighbour was reached over another transport */
    EXIT_SEGMENT_LEFT = 19, /* a shared-memory segment is still mapped after destroy */
    EXIT_ABORT = 20,        /* collCommAbort failed, or it or the blocked call was slow */
    EXIT_DISTURBED = 21,    /* exit-after: a survivor saw an error */
    EXIT_STREAM_CALLS = 22, /* kill-stream: not every call of the failed round failed */
};

enum { STAGE_INIT = 0, STAGE_COLL = 1 };

struct kill_record {
    int rank;
    int stage;         /* STAGE_INIT: the init failed; STAGE_COLL: a collective */
    int result;        /* of the failing call (collSuccess: none failed) */
    int iterations;    /* allreduces completed before it */
    double t_error;    /* CLOCK_MONOTONIC when the failing call returned */
    double call_s;     /* how long the failing call took */
    int later_result;  /* of the allreduce after the error */
    double later_s;
    int async_result;  /* collCommGetAsyncError after the error */
    double destroy_s;
    int destroy_result;
    double t_abort;    /* abort: when collCommAbort was called, and how long it took */
    double abort_s;
    int abort_result;
    char msg[400];
};

static bool verbose;
static const char *transport = "shm";
static enum fault fault = FAULT_KILL_DURING;

static int victim(void)
{
    return fault_specs[fault].victim;
}

static double timeout_s(void)
{
    return fault_specs[fault].timeout_ms / 1000.0;
}

/* Delivers a signal to this process after FAULT_AFTER_US. */
static void *signal_thread(void *arg)
{
    usleep(FAULT_AFTER_US);
    raise((int)(intptr_t)arg);
    return NULL;
}

static void signal_later(int sig)
{
    pthread_t th;
    if (pthread_create(&th, NULL, signal_thread, (void *)(intptr_t)sig) != 0)
        raise(sig);
    else
        pthread_detach(th);
}

struct abort_arg {
    collComm_t comm;
    double t_abort;
    double abort_s;
    collResult_t result;
};

/* Aborts the communicator that the main thread is blocked on. */
static void *abort_thread(void *p)
{
    struct abort_arg *a = p;
    usleep(ABORT_AFTER_US);
    a->t_abort = launch_now();
    a->result = collCommAbort(a->comm);
    a->abort_s = launch_now() - a->t_abort;
    return NULL;
}

static bool is_failure_kind(collResult_t r)
{
    return r == collRemoteError || r == collSystemError || r == collTimeout;
}

static void fill_send(float *send, size_t count, int rank)
{
    for (size_t i = 0; i < count; i++)
        send[i] = (float)(rank + 1) + (float)(i % 7);
}

/* Whether recv holds the sum of fill_send over nranks ranks; names the first
 * wrong element. */
static bool check_sum(const float *recv, size_t count, int nranks, int rank, int it)
{
    float base = (float)(nranks * (nranks + 1) / 2);
    for (size_t i = 0; i < count; i++) {
        float want = base + (float)nranks * (float)(i % 7);
        if (recv[i] != want) {
            fprintf(stderr, "[rank %d] allreduce %d: recv[%zu] = %g, want %g\n", rank, it, i,
                    (double)recv[i], (double)want);
            return false;
        }
    }
    return true;
}

static void set_rank_env(int rank, const char *comm_id)
{
    char v[32];
    snprintf(v, sizeof(v), "%d", rank);
    setenv("COLL_RANK", v, 1);
    snprintf(v, sizeof(v), "%d", NRANKS);
    setenv("COLL_NRANKS", v, 1);
    snprintf(v, sizeof(v), "%d", fault_specs[fault].timeout_ms);
    setenv("COLL_TIMEOUT_MS", v, 1);
    setenv("COLL_COMM_ID", comm_id, 1);
    setenv("COLL_SECRET", "0123456789abcdef0123456789abcdef", 1);
    setenv("COLL_TRANSPORTS", transport, 1);
}

static int send_record(int wfd, const struct kill_record *rec, int code)
{
    if (write(wfd, rec, sizeof(*rec)) != (ssize_t)sizeof(*rec))
        return code ? code : EXIT_INIT;
    return code;
}

/* A rank's last steps once its communicator is gone: no segment may still be
 * mapped; the record goes to the parent; the buffers are freed. */
static int rank_end(int wfd, const struct kill_record *rec, int code, void *send, void *recv)
{
    if (launch_maps_shm_segment()) {
        fprintf(stderr, "[rank %d] a shared-memory segment is mapped after destroy\n",
                rec->rank);
        code = code ? code : EXIT_SEGMENT_LEFT;
    }
    free(send);
    free(recv);
    return send_record(wfd, rec, code);
}

/* Waits (at most 60 s) for the parent's byte on go_fd. */
static void wait_go(int go_fd)
{
    struct pollfd pf = {.fd = go_fd, .events = POLLIN};
    char b;
    if (poll(&pf, 1, 60000) > 0)
        (void)!read(go_fd, &b, 1);
}

#define STREAM_CALLS 3

/* kill-stream: rounds of STREAM_CALLS allreduces of send[k] into recv[k] issued
 * on a stream, each round synchronized once and checked; the victim is killed
 * 300 ms after the first.  Returns the result of the first round that fails
 * (*it_p: the rounds before it; *t0_p: when it was issued). */
static collResult_t stream_rounds(collComm_t comm, int rank, float **send, float **recv,
                                  int *it_p, double *t0_p, int *code_p)
{
    collStream_t st;
    collResult_t r = collStreamCreate(&st);
    if (r != collSuccess)
        return r;
    int it;
    for (it = 0; it < MAX_ITERS; it++) {
        if (it == 1 && rank == victim()) {
            /* The others are in the round by now, its three calls in flight. */
            usleep(FAULT_AFTER_US);
            raise(SIGKILL);
        }
        *t0_p = launch_now();
        for (int k = 0; k < STREAM_CALLS && r == collSuccess; k++)
            r = collAllReduce(send[k], recv[k], fault_count, collFloat32, collSum, comm, st);
        collResult_t s = collStreamSynchronize(st);
        if (r == collSuccess)
            r = s;
        if (r != collSuccess)
            break;
        for (int k = 0; k < STREAM_CALLS; k++)
            if (!check_sum(recv[k], fault_count, NRANKS, rank, it))
                *code_p = EXIT_WRONG_DATA;
    }
    (void)collStreamDestroy(st);
    *it_p = it;
    return r;
}

/* kill-stream: the calls of the failed round in comm's flight recorder (the
 * newest STREAM_CALLS allreduces): how many failed and how many ended well. */
static void stream_round_states(collComm_t comm, int *failed_p, int *done_p)
{
    const struct coll_comm *c = (const struct coll_comm *)comm;
    uint64_t count = coll_flight_count(c);
    int seen = 0;
    *failed_p = *done_p = 0;
    for (uint64_t i = count; i-- > 0 && seen < STREAM_CALLS && count - i < COLL_FLIGHT_RECORDS;) {
        struct coll_flight_copy rc;
        bool ok = false;
        for (int tries = 0; tries < 100 && !ok; tries++)
            ok = coll_flight_copy(c, i, &rc);
        if (!ok || rc.name == NULL || strcmp(rc.name, "allreduce") != 0)
            continue;
        seen++;
        *failed_p += rc.state == COLL_FLIGHT_FAILED;
        *done_p += rc.state == COLL_FLIGHT_DONE;
    }
}

static int rank_main(int rank, const char *comm_id, int wfd, int progress_fd, int go_fd)
{
    struct kill_record rec = {.rank = rank, .stage = STAGE_COLL, .result = collSuccess};
    collComm_t comm;
    collResult_t r;
    int code = EXIT_OK;
    bool is_victim = rank == victim();

    set_rank_env(rank, comm_id);
    if (fault == FAULT_KILL_INIT && is_victim)
        raise(SIGKILL); /* dies while the others register */
    if (fault == FAULT_ROOT_DIES && is_victim)
        signal_later(SIGKILL);
    if (go_fd >= 0)
        wait_go(go_fd);

    double t0 = launch_now();
    r = collCommInitFromEnv(&comm);
    if (r != collSuccess) {
        rec.stage = STAGE_INIT;
        rec.result = r;
        rec.t_error = launch_now();
        rec.call_s = rec.t_error - t0;
        snprintf(rec.msg, sizeof(rec.msg), "%s", collGetLastError(NULL));
        fprintf(stderr, "[rank %d] init failed in %.2f s: %s: %s\n", rank, rec.call_s,
                collGetErrorString(r), rec.msg);
        bool expected = fault == FAULT_KILL_INIT || fault == FAULT_ROOT_DIES;
        if (expected && !is_failure_kind(r))
            code = EXIT_WRONG_KIND;
        else if (expected && rec.call_s > timeout_s() + SLACK_S)
            code = EXIT_TOO_LATE;
        else if (expected && rec.msg[0] == '\0')
            code = EXIT_NO_MESSAGE;
        return send_record(wfd, &rec, expected ? code : EXIT_INIT);
    }
    if (fault == FAULT_KILL_BEFORE && is_victim)
        raise(SIGKILL);

    float *send = malloc(fault_count * sizeof(float));
    float *recv = malloc(fault_count * sizeof(float));
    if (!send || !recv)
        return EXIT_INIT;
    fill_send(send, fault_count, rank);
    if (fault == FAULT_KILL_STREAM) {
        float *ss[STREAM_CALLS], *rs[STREAM_CALLS];
        for (int k = 0; k < STREAM_CALLS; k++) {
            ss[k] = malloc(fault_count * sizeof(float));
            rs[k] = malloc(fault_count * sizeof(float));
            if (ss[k] == NULL || rs[k] == NULL)
                return EXIT_INIT;
            memcpy(ss[k], send, fault_count * sizeof(float));
        }
        r = stream_rounds(comm, rank, ss, rs, &rec.iterations, &t0, &code);
        for (int k = 0; k < STREAM_CALLS; k++) {
            free(ss[k]);
            free(rs[k]);
        }
        rec.t_error = launch_now();
        rec.call_s = rec.t_error - t0;
        rec.result = r;
        int failed, done;
        stream_round_states(comm, &failed, &done);
        if (r != collSuccess && (failed != STREAM_CALLS || done != 0)) {
            fprintf(stderr, "[rank %d] the failed round's %d calls: %d failed, %d done in the "
                    "flight recorder\n", rank, STREAM_CALLS, failed, done);
            code = code ? code : EXIT_STREAM_CALLS;
        }
        goto failed;
    }

    struct abort_arg aa = {.comm = comm, .result = collSuccess};
    pthread_t abort_th;
    bool aborting = false;
    int it = 0;
    /* Small calls take microseconds: enough of them that the fault comes first. */
    int max_iters = fault_count < COUNT ? 100 * MAX_ITERS : MAX_ITERS;
    for (it = 0; it < max_iters; it++) {
        if ((fault == FAULT_KILL_AFTER || fault == FAULT_EXIT_AFTER) && it == ITERS_BEFORE) {
            /* Every rank has its results; only then does the fault come. */
            char b = (char)rank;
            (void)!write(progress_fd, &b, 1);
            if (fault == FAULT_EXIT_AFTER)
                break;
            if (is_victim)
                for (;;)
                    pause(); /* until the parent's SIGKILL */
        }
        if (fault == FAULT_ABORT && it == ABORT_ITERS) {
            if (rank == NRANKS - 1)
                usleep(ABORT_LATE_US);
            if (is_victim) {
                if (pthread_create(&abort_th, NULL, abort_thread, &aa) != 0)
                    return EXIT_ABORT;
                aborting = true;
            }
        }
        t0 = launch_now();
        r = collAllReduce(send, recv, fault_count, collFloat32, collSum, comm, NULL);
        if (r != collSuccess)
            break;
        if (!check_sum(recv, fault_count, NRANKS, rank, it))
            code = EXIT_WRONG_DATA;
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
            if (is_victim && fault == FAULT_KILL_DURING)
                signal_later(SIGKILL);
            if (is_victim && fault == FAULT_STOP)
                signal_later(SIGSTOP);
        }
        memset(recv, 0, fault_count * sizeof(float));
    }
    rec.t_error = launch_now();
    rec.call_s = rec.t_error - t0;
    rec.iterations = it;
    rec.result = r;

    if (fault == FAULT_EXIT_AFTER) {
        if (r != collSuccess) {
            fprintf(stderr, "[rank %d] allreduce %d failed: %s\n", rank, it,
                    collGetLastError(comm));
            code = code ? code : EXIT_DISTURBED;
        }
        if (is_victim) {
            rec.destroy_result = collCommDestroy(comm);
            code = send_record(wfd, &rec, code);
            free(send);
            free(recv);
            return code;
        }
        /* The victim is gone by now, or going: a destroy must not mind. */
        usleep(FAULT_AFTER_US);
        collResult_t async = collInternalError;
        (void)collCommGetAsyncError(comm, &async);
        rec.async_result = async;
        if (async != collSuccess) {
            fprintf(stderr, "[rank %d] async error %s after the last allreduce: %s\n", rank,
                    collGetErrorString(async), collGetLastError(comm));
            code = code ? code : EXIT_DISTURBED;
        }
        double t2 = launch_now();
        rec.destroy_result = collCommDestroy(comm);
        rec.destroy_s = launch_now() - t2;
        if (rec.destroy_result != collSuccess || rec.destroy_s > 5.0)
            code = code ? code : EXIT_SLOW_DESTROY;
        return rank_end(wfd, &rec, code, send, recv);
    }

    if (aborting) {
        /* The comm is freed by collCommAbort: only the results remain. */
        pthread_join(abort_th, NULL);
        rec.t_abort = aa.t_abort;
        rec.abort_s = aa.abort_s;
        rec.abort_result = aa.result;
        snprintf(rec.msg, sizeof(rec.msg), "collAllReduce returned %.2f s after collCommAbort",
                 rec.t_error - aa.t_abort);
        fprintf(stderr, "[rank %d] aborted: collCommAbort %s in %.3f s; the blocked call %s "
                "%.3f s after the abort\n", rank, collGetErrorString(aa.result), aa.abort_s,
                collGetErrorString(r), rec.t_error - aa.t_abort);
        if (r == collSuccess)
            code = code ? code : EXIT_NO_ERROR;
        else if (aa.result != collSuccess || aa.abort_s > ABORT_LIMIT_S ||
                 rec.t_error - aa.t_abort > ABORT_LIMIT_S)
            code = code ? code : EXIT_ABORT;
        return rank_end(wfd, &rec, code, send, recv);
    }

failed:;
    const char *last = collGetLastError(comm);
    snprintf(rec.msg, sizeof(rec.msg), "%s", last ? last : "");
    fprintf(stderr, "[rank %d] after %d allreduces: %s in %.2f s: %s\n", rank, rec.iterations,
            collGetErrorString(r), rec.call_s, rec.msg);

    /* A stopped victim's call lasted as long as it was stopped. */
    bool timed = !(fault == FAULT_STOP && is_victim);
    if (r == collSuccess)
        code = code ? code : EXIT_NO_ERROR;
    else if (!is_failure_kind(r))
        code = code ? code : EXIT_WRONG_KIND;
    else if (timed && rec.call_s > timeout_s() + SLACK_S)
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
    return rank_end(wfd, &rec, code, send, recv);
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
        return "slow or failed collCommDestroy";
    case EXIT_WRONG_DATA:
        return "wrong data before the fault";
    case EXIT_TRANSPORT:
        return "wrong transport";
    case EXIT_SEGMENT_LEFT:
        return "shared-memory segment left mapped";
    case EXIT_ABORT:
        return "collCommAbort failed or was slow";
    case EXIT_DISTURBED:
        return "an error after a peer's clean exit";
    case EXIT_STREAM_CALLS:
        return "a call of the failed round on the stream did not fail";
    default:
        return "unexpected exit code";
    }
}

/* One rank in the environment the caller made: see --one-rank above. */
static int one_rank(int iters, size_t count)
{
    collComm_t comm;
    struct timespec rt;
    int rank = -1, n = 0, it = 0;
    double t0 = launch_now();
    collResult_t r = collCommInitFromEnv(&comm);
    bool inited = r == collSuccess;
    const char *msg = "";
    bool wrong = false;
    float *send = NULL, *recv = NULL;

    if (inited) {
        (void)collCommUserRank(comm, &rank);
        (void)collCommCount(comm, &n);
        send = malloc(count * sizeof(float));
        recv = malloc(count * sizeof(float));
        if (!send || !recv) {
            fprintf(stderr, "out of memory\n");
            return 1;
        }
        fill_send(send, count, rank);
        for (; it < iters; it++) {
            r = collAllReduce(send, recv, count, collFloat32, collSum, comm, NULL);
            if (r != collSuccess)
                break;
            if (!check_sum(recv, count, n, rank, it))
                wrong = true;
            memset(recv, 0, count * sizeof(float));
            if (it == 0) {
                printf("rank %d: running\n", rank);
                fflush(stdout);
            }
        }
        msg = r == collSuccess ? "" : collGetLastError(comm);
    } else {
        msg = collGetLastError(NULL);
    }
    clock_gettime(CLOCK_REALTIME, &rt);
    printf("rank %d: %s after %d allreduces in %.3f s, at %lld.%09ld: %s%s\n", rank,
           r == collSuccess ? "ok" : "error", it, launch_now() - t0, (long long)rt.tv_sec,
           rt.tv_nsec, r == collSuccess ? "" : collGetErrorString(r), msg[0] ? ": " : "");
    if (msg[0])
        printf("rank %d: message: %s\n", rank, msg);
    fflush(stdout);
    if (inited)
        (void)collCommDestroy(comm);
    free(send);
    free(recv);
    return wrong ? 1 : r == collSuccess ? 0 : 3;
}

static void usage(const char *argv0)
{
    fprintf(stderr, "usage: %s [-v] [--transport shm|tcp|verbs] [--fault NAME]\n"
            "       %s --one-rank ITERS [--count N]\nfaults:", argv0, argv0);
    for (size_t f = 0; f < NFAULTS; f++)
        fprintf(stderr, " %s", fault_specs[f].name);
    fprintf(stderr, "\n");
}

int main(int argc, char **argv)
{
    pid_t pids[NRANKS];
    int fds[NRANKS], status[NRANKS];
    bool done[NRANKS] = {false};
    struct kill_record recs[NRANKS];
    bool have_rec[NRANKS] = {false};
    int failures = 0, port, one_iters = -1;
    size_t one_count = 256 * 1024;
    char comm_id[64];
    pid_t pgid = 0;
    double t_start = launch_now(), t_fault = 0;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-v") == 0) {
            verbose = true;
        } else if (strcmp(argv[i], "--transport") == 0 && i + 1 < argc &&
                   (strcmp(argv[i + 1], "shm") == 0 || strcmp(argv[i + 1], "tcp") == 0 ||
                    strcmp(argv[i + 1], "verbs") == 0)) {
            transport = argv[++i];
        } else if (strcmp(argv[i], "--fault") == 0 && i + 1 < argc) {
            size_t f;
            for (f = 0; f < NFAULTS && strcmp(fault_specs[f].name, argv[i + 1]); f++)
                ;
            if (f == NFAULTS) {
                fprintf(stderr, "--fault: unknown fault '%s'\n", argv[i + 1]);
                usage(argv[0]);
                return 2;
            }
            fault = (enum fault)f;
            i++;
        } else if (strcmp(argv[i], "--one-rank") == 0 && i + 1 < argc) {
            one_iters = atoi(argv[++i]);
            if (one_iters < 1) {
                fprintf(stderr, "--one-rank wants a positive number of allreduces\n");
                return 2;
            }
        } else if (strcmp(argv[i], "--count") == 0 && i + 1 < argc) {
            long c = atol(argv[++i]);
            if (c < 1) {
                fprintf(stderr, "--count wants a positive number of elements\n");
                return 2;
            }
            one_count = (size_t)c;
            fault_count = (size_t)c;
        } else {
            usage(argv[0]);
            return 2;
        }
    }
    if (one_iters > 0)
        return one_rank(one_iters, one_count);
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

    /* kill-after, exit-after: each rank writes its number once it has its results. */
    int progress[2], go[2] = {-1, -1};
    if (pipe(progress) != 0 || (fault == FAULT_ROOT_DIES && pipe(go) != 0)) {
        perror("pipe");
        return 1;
    }
    const int late_rank = NRANKS - 1; /* root-dies: starts its init after the death */

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
            close(progress[0]);
            if (go[1] >= 0)
                close(go[1]);
            int go_fd = fault == FAULT_ROOT_DIES && r == late_rank ? go[0] : -1;
            _exit(rank_main(r, comm_id, p[1], progress[1], go_fd));
        }
        if (r == 0)
            pgid = pids[0];
        setpgid(pids[r], pgid);
        close(p[1]);
        fds[r] = p[0];
    }
    close(progress[1]);
    if (go[0] >= 0)
        close(go[0]);

    /* Wait: everything must end within the init, a few iterations, the timeout and
     * the slack, counted from the fault once it has happened. */
    int told = 0;
    bool stopped = false, continued = false;
    for (;;) {
        int left = 0;
        struct pollfd pp = {.fd = progress[0], .events = POLLIN};
        char b;
        while (told < NRANKS && poll(&pp, 1, 0) > 0 && read(progress[0], &b, 1) == 1)
            told++;
        if (fault == FAULT_KILL_AFTER && told == NRANKS && t_fault == 0) {
            kill(pids[victim()], SIGKILL);
            t_fault = launch_now();
        }
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
            if (!done[r] && waitpid(pids[r], &status[r], WNOHANG | WUNTRACED) == pids[r]) {
                if (WIFSTOPPED(status[r])) {
                    if (r == victim() && t_fault == 0)
                        t_fault = launch_now();
                    stopped = true;
                } else {
                    done[r] = true;
                    if (r == victim() && t_fault == 0 && fault != FAULT_EXIT_AFTER &&
                        fault != FAULT_ABORT)
                        t_fault = launch_now();
                    if (r == victim() && go[1] >= 0) {
                        (void)!write(go[1], "g", 1);
                        close(go[1]);
                        go[1] = -1;
                    }
                }
            }
            left += !done[r];
        }
        if (left == 0)
            break;
        /* stop: once every other rank is done, the stopped one goes on and must fail. */
        if (stopped && !continued && left == 1 && !done[victim()]) {
            kill(pids[victim()], SIGCONT);
            continued = true;
        }
        double limit = t_fault > 0 ? t_fault + timeout_s() + SLACK_S + 10.0 : t_start + 60.0;
        if (launch_now() > limit) {
            fprintf(stderr, "FAIL: ranks still running %.0f s after %s; killing them\n",
                    launch_now() - (t_fault > 0 ? t_fault : t_start),
                    t_fault > 0 ? "the fault" : "the start");
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
    close(progress[0]);
    if (go[1] >= 0)
        close(go[1]);

    int v = victim();
    bool victim_killed = fault != FAULT_STOP && fault != FAULT_ABORT && fault != FAULT_EXIT_AFTER;
    if (victim_killed && !(WIFSIGNALED(status[v]) && WTERMSIG(status[v]) == SIGKILL)) {
        fprintf(stderr, "FAIL: rank %d did not die of SIGKILL (status 0x%x)\n", v, status[v]);
        failures++;
    }
    if (fault == FAULT_ABORT && have_rec[v])
        t_fault = recs[v].t_abort;
    for (int r = 0; r < NRANKS; r++) {
        if (r == v && victim_killed)
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
        /* The parent sees a death up to one poll (10 ms) late, so a survivor can
         * seem to learn of it a little before it happened. */
        double after = t_fault > 0 ? rec->t_error - t_fault : -1;
        if (t_fault > 0 && after < 0)
            after = 0;
        printf("%s %s: rank %d%s: %s in %s after %d allreduces, %.2f s after the fault "
               "(call %.2f s); then %s in %.3f s, async %s, destroy %s in %.3f s: %s\n",
               fault_specs[fault].name, transport, r, r == v ? " (victim)" : "",
               collGetErrorString((collResult_t)rec->result),
               rec->stage == STAGE_INIT ? "init" : "allreduce", rec->iterations, after,
               rec->call_s, collGetErrorString((collResult_t)rec->later_result), rec->later_s,
               collGetErrorString((collResult_t)rec->async_result),
               collGetErrorString((collResult_t)rec->destroy_result), rec->destroy_s, rec->msg);
        if (fault == FAULT_EXIT_AFTER) {
            if (rec->result != collSuccess || rec->iterations != ITERS_BEFORE) {
                fprintf(stderr, "FAIL: rank %d: %d allreduces, then %s; want %d and no error\n",
                        r, rec->iterations, collGetErrorString((collResult_t)rec->result),
                        ITERS_BEFORE);
                failures++;
            }
            continue;
        }
        if (rec->result == collSuccess) {
            fprintf(stderr, "FAIL: rank %d reported no error\n", r);
            failures++;
        }
        if (r == v)
            continue; /* the stopped or aborting rank checked itself */
        double bound = fault == FAULT_ABORT ? ABORT_OTHERS_S : timeout_s() + SLACK_S;
        if (after > bound) {
            fprintf(stderr, "FAIL: rank %d learned of the fault after %.2f s, want under %.1f s\n",
                    r, after, bound);
            failures++;
        }
        if ((fault == FAULT_KILL_INIT || fault == FAULT_ROOT_DIES) && rec->stage != STAGE_INIT) {
            fprintf(stderr, "FAIL: rank %d: the init succeeded\n", r);
            failures++;
        }
        if (fault == FAULT_ROOT_DIES && !strstr(rec->msg, "root")) {
            fprintf(stderr, "FAIL: rank %d: '%s' does not name the root\n", r, rec->msg);
            failures++;
        }
        /* The rank after the stopped one in the ring always waits to receive from
         * it: when it times out itself it names it.  (The rank before may have
         * handed all its data to the transport and wait only on its own
         * predecessor.)  Which rank times out first is a race, and the others
         * learn of it by its failure notice, which names the rank it came from:
         * every message names some rank. */
        char vname[16];
        snprintf(vname, sizeof(vname), "rank %d", v);
        if (fault == FAULT_STOP && r == (v + 1) % NRANKS && rec->result == collTimeout &&
            !strstr(rec->msg, vname)) {
            fprintf(stderr, "FAIL: rank %d timed out, but '%s' does not name rank %d\n", r,
                    rec->msg, v);
            failures++;
        }
        /* A killed rank is named by every survivor, whichever peer it heard of the
         * death from: one that merely shut its connections after hearing of it is
         * not the cause (the notice that names the victim may come round the
         * bootstrap ring through busy ranks). */
        bool killed = fault == FAULT_KILL_DURING || fault == FAULT_KILL_BEFORE ||
                      fault == FAULT_KILL_AFTER || fault == FAULT_KILL_STREAM;
        if (killed && rec->stage != STAGE_INIT && !strstr(rec->msg, vname)) {
            fprintf(stderr, "FAIL: rank %d: '%s' does not name rank %d, which was killed\n", r,
                    rec->msg, v);
            failures++;
        }
        if (fault == FAULT_STOP && !strstr(rec->msg, "rank ")) {
            fprintf(stderr, "FAIL: rank %d: '%s' names no rank\n", r, rec->msg);
            failures++;
        }
    }

    failures += launch_dev_shm_leftovers();
    /* Nothing of the group may be left: kill(-pgid, 0) finds no process. */
    errno = 0;
    if (kill(-pgid, 0) == 0 || errno != ESRCH) {
        fprintf(stderr, "FAIL: processes of group %d are still running\n", (int)pgid);
        failures++;
        kill(-pgid, SIGKILL);
    }
    if (verbose || failures)
        printf("test_kill --fault %s: %.1f s in all\n", fault_specs[fault].name,
               launch_now() - t_start);
    if (failures)
        fprintf(stderr, "%d check(s) failed\n", failures);
    return failures ? 1 : 0;
}
