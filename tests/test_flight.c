/*
 * The flight recorder and the errors of a stalled or broken collective.
 *
 * The test forks 3 ranks itself (collrun would end them all on the first
 * failure), as test_kill does: COLL_COMM_ID=127.0.0.1:<free port>, COLL_RANK,
 * COLL_NRANKS=3, a short COLL_TIMEOUT_MS and COLL_ALGO=ring, each rank's stderr
 * in a file of its own.  The ranks run two allreduces of 4096 float32, then:
 *
 *   stall (shm)  rank 2 sleeps instead of calling the third allreduce.  Ranks 0
 *                and 1 fail it: one at least by its timeout, whose collGetLastError
 *                names "allreduce #3", "timed out", "no progress for N ms", the
 *                rank waited for and its host; the other may learn of it by the
 *                failure notice first.  Each prints its flight recorder: #1 and #2
 *                done, #3 failed, and rank 0's line of #3 shows rank 2, from whom
 *                it received nothing ("rank 2 sent 0/0 B recv 0/").
 *   reset (tcp)  rank 2 exits after the second allreduce; a survivor's error names
 *                "#3", rank 2, its host and what the socket said (closed, reset,
 *                broken pipe), and the recorder is printed.
 *
 * Then, in this process, two ranks as threads: rank 0 calls an allreduce that
 * rank 1 never joins, and the main thread calls collCommAbort meanwhile; the
 * recorder printed by the aborting thread shows the call in flight (the read
 * from another thread is what a TSan build checks).
 *
 *   test_flight [-v]
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "launch.h"

#define NRANKS 3
#define SILENT 2
#define TIMEOUT_MS 4000
#define COUNT 4096
#define LOG_BYTES (64 * 1024)

struct flight_record {
    int rank;
    int result;     /* of the third allreduce */
    double call_s;
    char msg[512];  /* collGetLastError after it */
};

static bool verbose;
static char tmpdir[64];
static char host[64];
static int failures;

#define CHECK(cond, ...)                                                          \
    do {                                                                          \
        if (!(cond)) {                                                            \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);       \
            fprintf(stderr, __VA_ARGS__);                                         \
            fputc('\n', stderr);                                                  \
            failures++;                                                           \
        }                                                                         \
    } while (0)

static void log_path(char *buf, size_t n, const char *scenario, int rank)
{
    snprintf(buf, n, "%s/%s.%d.log", tmpdir, scenario, rank);
}

/* The whole of a rank's stderr, NUL-terminated (at most LOG_BYTES). */
static char *read_log(const char *scenario, int rank)
{
    char path[128];
    log_path(path, sizeof(path), scenario, rank);
    char *buf = calloc(1, LOG_BYTES + 1);
    FILE *f = fopen(path, "r");
    if (buf && f)
        buf[fread(buf, 1, LOG_BYTES, f)] = '\0';
    if (f)
        fclose(f);
    if (verbose && buf)
        fprintf(stderr, "----- %s rank %d -----\n%s", scenario, rank, buf);
    return buf;
}

/* The line of log that holds want, copied into line (empty when none). */
static void find_line(const char *log, const char *want, char *line, size_t n)
{
    line[0] = '\0';
    const char *p = log ? strstr(log, want) : NULL;
    if (p == NULL)
        return;
    while (p > log && p[-1] != '\n')
        p--;
    const char *e = strchr(p, '\n');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len >= n)
        len = n - 1;
    memcpy(line, p, len);
    line[len] = '\0';
}

static int rank_main(int rank, const char *scenario, const char *comm_id, int wfd)
{
    char v[32], path[128];
    log_path(path, sizeof(path), scenario, rank);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || dup2(fd, 2) < 0)
        return 10;
    close(fd);
    bool stall = strcmp(scenario, "stall") == 0;
    snprintf(v, sizeof(v), "%d", rank);
    setenv("COLL_RANK", v, 1);
    snprintf(v, sizeof(v), "%d", NRANKS);
    setenv("COLL_NRANKS", v, 1);
    snprintf(v, sizeof(v), "%d", TIMEOUT_MS);
    setenv("COLL_TIMEOUT_MS", v, 1);
    setenv("COLL_COMM_ID", comm_id, 1);
    setenv("COLL_SECRET", "0123456789abcdef0123456789abcdef", 1);
    setenv("COLL_TRANSPORTS", stall ? "shm" : "tcp", 1);
    setenv("COLL_ALGO", "ring", 1);
    setenv("COLL_DEBUG", "WARN", 1);
    unsetenv("COLL_DEBUG_FILE");

    collComm_t comm;
    collResult_t r = collCommInitFromEnv(&comm);
    if (r != collSuccess) {
        fprintf(stderr, "[rank %d] init failed: %s\n", rank, collGetLastError(NULL));
        return 11;
    }
    float *send = malloc(COUNT * sizeof(float)), *recv = malloc(COUNT * sizeof(float));
    if (!send || !recv)
        return 12;
    for (size_t i = 0; i < COUNT; i++)
        send[i] = (float)(rank + 1);
    for (int it = 0; it < 2; it++) {
        r = collAllReduce(send, recv, COUNT, collFloat32, collSum, comm, NULL);
        if (r != collSuccess || recv[COUNT - 1] != 6.0f) {
            fprintf(stderr, "[rank %d] allreduce %d: %s, %g: %s\n", rank, it + 1,
                    collGetErrorString(r), (double)recv[COUNT - 1], collGetLastError(comm));
            return 13;
        }
    }
    if (rank == SILENT) {
        if (!stall)
            _exit(0); /* its sockets close with the process */
        /* Long enough for the others to time out and finish. */
        usleep((useconds_t)TIMEOUT_MS * 2500);
        collCommDestroy(comm);
        return 0;
    }
    struct flight_record rec = {.rank = rank};
    double t0 = launch_now();
    rec.result = collAllReduce(send, recv, COUNT, collFloat32, collSum, comm, NULL);
    rec.call_s = launch_now() - t0;
    snprintf(rec.msg, sizeof(rec.msg), "%s", collGetLastError(comm));
    collCommDestroy(comm);
    free(send);
    free(recv);
    return write(wfd, &rec, sizeof(rec)) == (ssize_t)sizeof(rec) ? 0 : 14;
}

/* Forks the ranks of scenario and collects the survivors' records; false when
 * a rank failed before the third allreduce or the whole ran far too long. */
static bool run_ranks(const char *scenario, struct flight_record *recs)
{
    char comm_id[64];
    int port = launch_free_port();
    if (port < 0)
        return false;
    snprintf(comm_id, sizeof(comm_id), "127.0.0.1:%d", port);
    pid_t pids[NRANKS];
    int fds[NRANKS];
    for (int r = 0; r < NRANKS; r++) {
        int p[2];
        if (pipe(p) != 0)
            return false;
        fflush(stdout);
        fflush(stderr);
        pids[r] = fork();
        if (pids[r] < 0)
            return false;
        if (pids[r] == 0) {
            close(p[0]);
            _exit(rank_main(r, scenario, comm_id, p[1]));
        }
        close(p[1]);
        fds[r] = p[0];
    }
    bool ok = true;
    double limit = launch_now() + 60.0 + 3.0 * TIMEOUT_MS / 1000.0;
    for (int r = 0; r < NRANKS; r++) {
        int status = 0;
        pid_t w;
        while ((w = waitpid(pids[r], &status, WNOHANG)) == 0 && launch_now() < limit)
            usleep(20000);
        if (w == 0) {
            fprintf(stderr, "FAIL: %s: rank %d still runs; killing it\n", scenario, r);
            kill(pids[r], SIGKILL);
            waitpid(pids[r], &status, 0);
            ok = false;
        } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "FAIL: %s: rank %d ended with status 0x%x\n", scenario, r, status);
            ok = false;
        }
        recs[r].rank = -1;
        if (r != SILENT &&
            read(fds[r], &recs[r], sizeof(recs[r])) != (ssize_t)sizeof(recs[r])) {
            fprintf(stderr, "FAIL: %s: rank %d sent no record\n", scenario, r);
            ok = false;
        }
        close(fds[r]);
    }
    return ok;
}

/* Every survivor printed its recorder with #1 and #2 done and #3 failed. */
static void check_recorder(const char *scenario, int rank, const char *log)
{
    char line[1024], want[64];
    snprintf(want, sizeof(want), "flight recorder of rank %d", rank);
    find_line(log, want, line, sizeof(line));
    CHECK(line[0] != '\0', "%s rank %d: no \"%s\" in its stderr", scenario, rank, want);
    for (int seq = 1; seq <= 3; seq++) {
        snprintf(want, sizeof(want), "#%d allreduce %d x float32 sum via ring: ", seq, COUNT);
        find_line(log, want, line, sizeof(line));
        CHECK(line[0] != '\0', "%s rank %d: no record \"%s\"", scenario, rank, want);
        CHECK(strstr(line, seq < 3 ? ": done" : ": failed"), "%s rank %d: #%d not %s: %s",
              scenario, rank, seq, seq < 3 ? "done" : "failed", line);
        /* Each rank of the ring sends to the next rank and receives from the one before. */
        snprintf(want, sizeof(want), "rank %d sent", (rank + 1) % NRANKS);
        CHECK(strstr(line, want), "%s rank %d: #%d has no \"%s\": %s", scenario, rank, seq,
              want, line);
    }
}

static void test_stall(void)
{
    struct flight_record recs[NRANKS];
    if (!run_ranks("stall", recs)) {
        failures++;
        return;
    }
    int timed_out = 0;
    for (int r = 0; r < NRANKS; r++) {
        if (r == SILENT)
            continue;
        const struct flight_record *rec = &recs[r];
        printf("stall: rank %d: %s in %.2f s: %s\n", r,
               collGetErrorString((collResult_t)rec->result), rec->call_s, rec->msg);
        CHECK(rec->result == collTimeout || rec->result == collRemoteError,
              "rank %d: the stalled allreduce returned %s", r,
              collGetErrorString((collResult_t)rec->result));
        CHECK(strstr(rec->msg, "allreduce #3"), "rank %d: message lacks \"allreduce #3\": %s", r,
              rec->msg);
        if (rec->result == collTimeout) {
            timed_out++;
            char want[128];
            snprintf(want, sizeof(want), "timed out after %d ms: no progress for ", TIMEOUT_MS);
            CHECK(strstr(rec->msg, want), "rank %d: message lacks \"%s\": %s", r, want,
                  rec->msg);
            snprintf(want, sizeof(want), "(%s, ", host);
            CHECK(strstr(rec->msg, "waiting to ") && strstr(rec->msg, " rank ") &&
                      strstr(rec->msg, want),
                  "rank %d: message names no peer and host \"%s\": %s", r, host, rec->msg);
        }
        char *log = read_log("stall", r);
        check_recorder("stall", r, log);
        if (r == 0) {
            /* Rank 0 waits to receive from rank 2, which never sent. */
            char line[1024];
            find_line(log, "#3 allreduce", line, sizeof(line));
            CHECK(strstr(line, "rank 2 sent 0/0 B recv 0/"),
                  "rank 0: #3 does not show rank 2 silent: %s", line);
        }
        free(log);
    }
    CHECK(timed_out > 0, "no survivor timed out");
}

static void test_reset(void)
{
    struct flight_record recs[NRANKS];
    if (!run_ranks("reset", recs)) {
        failures++;
        return;
    }
    int named = 0;
    for (int r = 0; r < NRANKS; r++) {
        if (r == SILENT)
            continue;
        const struct flight_record *rec = &recs[r];
        printf("reset: rank %d: %s in %.2f s: %s\n", r,
               collGetErrorString((collResult_t)rec->result), rec->call_s, rec->msg);
        CHECK(rec->result != collSuccess, "rank %d: the allreduce without rank 2 succeeded", r);
        CHECK(strstr(rec->msg, "allreduce #3"), "rank %d: message lacks \"allreduce #3\": %s", r,
              rec->msg);
        char want[96];
        snprintf(want, sizeof(want), "rank %d (%s, ", SILENT, host);
        if (strstr(rec->msg, want) &&
            (strstr(rec->msg, "closed") || strstr(rec->msg, "reset") ||
             strstr(rec->msg, "Broken pipe")))
            named++;
        char *log = read_log("reset", r);
        check_recorder("reset", r, log);
        free(log);
    }
    CHECK(named > 0, "no survivor's message names rank 2 on %s and what its socket said", host);
}

struct abort_rank {
    int rank;
    collUniqueId id;
    collComm_t comm;
    collResult_t init, call;
    _Atomic int in_call;
};

static void *abort_init(void *arg)
{
    struct abort_rank *a = arg;
    a->init = collCommInitRank(&a->comm, 2, a->id, a->rank);
    return NULL;
}

static void *abort_call(void *arg)
{
    struct abort_rank *a = arg;
    static float send[COUNT], recv[COUNT];
    atomic_store(&a->in_call, 1);
    a->call = collAllReduce(send, recv, COUNT, collFloat32, collSum, a->comm, NULL);
    return NULL;
}

static void test_abort(void)
{
    struct abort_rank ranks[2] = {{.rank = 0}, {.rank = 1}};
    collUniqueId id;
    if (collGetUniqueId(&id) != collSuccess) {
        CHECK(false, "collGetUniqueId: %s", collGetLastError(NULL));
        return;
    }
    pthread_t th[2];
    for (int r = 0; r < 2; r++) {
        ranks[r].id = id;
        pthread_create(&th[r], NULL, abort_init, &ranks[r]);
    }
    for (int r = 0; r < 2; r++)
        pthread_join(th[r], NULL);
    if (ranks[0].init != collSuccess || ranks[1].init != collSuccess) {
        CHECK(false, "init: %s", collGetLastError(NULL));
        return;
    }
    /* The recorder goes to stderr: into a file for the time of the abort. */
    char path[128];
    log_path(path, sizeof(path), "abort", 0);
    fflush(stderr);
    int saved = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (saved < 0 || fd < 0 || dup2(fd, 2) < 0) {
        CHECK(false, "cannot redirect stderr to %s: %s", path, strerror(errno));
        return;
    }
    close(fd);
    pthread_create(&th[0], NULL, abort_call, &ranks[0]);
    while (!atomic_load(&ranks[0].in_call))
        usleep(1000);
    usleep(300000); /* rank 0 is waiting for rank 1 */
    collResult_t ar = collCommAbort(ranks[0].comm);
    pthread_join(th[0], NULL);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    collCommDestroy(ranks[1].comm);
    CHECK(ar == collSuccess, "collCommAbort returned %s", collGetErrorString(ar));
    CHECK(ranks[0].call != collSuccess, "the allreduce rank 1 never joined succeeded");
    char *log = read_log("abort", 0);
    char line[1024];
    find_line(log, "flight recorder of rank 0 (collCommAbort)", line, sizeof(line));
    CHECK(line[0] != '\0', "no recorder printed by collCommAbort");
    find_line(log, "#1 allreduce 4096 x float32 sum", line, sizeof(line));
    CHECK(strstr(line, ": issued") || strstr(line, ": running"),
          "the allreduce in flight is not shown issued or running: %s", line);
    CHECK(strstr(line, "rank 1 sent"), "the allreduce in flight shows no peer: %s", line);
    printf("abort: %s\n", line);
    free(log);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-v") == 0) {
            verbose = true;
        } else {
            fprintf(stderr, "usage: %s [-v]\n", argv[0]);
            return 2;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    gethostname(host, sizeof(host) - 1);
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_flight.XXXXXX");
    if (mkdtemp(tmpdir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    test_stall();
    test_reset();
    test_abort();
    if (failures == 0) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
        if (system(cmd) != 0)
            fprintf(stderr, "cannot remove %s\n", tmpdir);
    } else {
        fprintf(stderr, "logs kept in %s\n", tmpdir);
    }
    printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
