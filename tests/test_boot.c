/*
 * Rendezvous failures: every rank of a communicator that cannot form gets an error
 * within COLL_TIMEOUT_MS plus slack, and never hangs; and a stranger talking to the
 * root does not disturb a communicator that can form.
 *
 *   a. wrong nranks: one rank passes 3, the other 2 (both ways round); and, 20 times,
 *      rank 0 (whose process runs the root) refused after rank 1 registered
 *   b. duplicate rank: ranks 0, 1, 1 of 3
 *   c. the root never answers: nobody listens at COLL_COMM_ID; the listener of a
 *      collGetUniqueId id is gone (its process exited); a listener that accepts
 *      connections and never says anything
 *   d. wrong secret: one rank's id has its secret bytes flipped (lib/engine/bootstrap.h's
 *      struct coll_id), with COLL_COMM_ID and with a collGetUniqueId listener
 *   e. 200 bytes of garbage sent to the root's address, and a connection that sends
 *      nothing, while the real ranks join: their init must succeed
 *
 * Each rank is a fresh process forked from this one, which never calls the library
 * itself: the library reads its parameters (COLL_TIMEOUT_MS=3000 here) once per
 * process, and collrun cannot be used because it ends every rank on the first
 * failure.  A rank writes what it saw (result, elapsed time, last error) to a pipe;
 * the parent checks it and kills any rank that outlives the deadline.
 *
 *   test_boot [-v]
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bootstrap.h"
#include "launch.h"

#define TIMEOUT_MS 3000
#define SLACK_MS 5000
#define SECRET_HEX "00112233445566778899aabbccddeeff"
#define MAX_RANKS 4

struct boot_record {
    int rank;
    int result;     /* collResult_t of the init, or of the allreduce after it */
    int stage;      /* 0: init failed or was refused, 1: allreduce, 2: all done */
    double elapsed; /* seconds in collCommInitRank */
    char msg[400];  /* collGetLastError */
};

struct rank_spec {
    int rank;
    int nranks;
    const char *comm_id; /* COLL_COMM_ID, or NULL to use `id` */
    bool have_id;
    collUniqueId id;
    bool flip_secret;
    int id_out_fd; /* >= 0: make the id with collGetUniqueId, write it here ... */
    int go_in_fd;  /* ... and wait for a byte here before the init */
};

struct child {
    pid_t pid;
    int fd; /* read end of the record pipe */
    struct boot_record rec;
    bool have_rec;
    int status;
    bool exited;
};

static bool verbose;
static int failures;

#define FAIL(...)                                                                       \
    do {                                                                                \
        fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                            \
        fprintf(stderr, __VA_ARGS__);                                                   \
        fputc('\n', stderr);                                                            \
        failures++;                                                                     \
    } while (0)

/* ---- the rank side ---------------------------------------------------------------- */

static void write_record(int fd, const struct boot_record *rec)
{
    /* One write of less than PIPE_BUF bytes arrives whole. */
    if (write(fd, rec, sizeof(*rec)) != (ssize_t)sizeof(*rec))
        _exit(3);
}

static void set_env(const char *comm_id)
{
    char t[32];

    snprintf(t, sizeof(t), "%d", TIMEOUT_MS);
    setenv("COLL_TIMEOUT_MS", t, 1);
    setenv("COLL_SECRET", SECRET_HEX, 1);
    if (comm_id)
        setenv("COLL_COMM_ID", comm_id, 1);
    else
        unsetenv("COLL_COMM_ID");
    /* The rank comes from the test, never from a launcher around it. */
    unsetenv("COLL_RANK");
    unsetenv("COLL_NRANKS");
}

static void rank_main(struct rank_spec *sp, int wfd)
{
    struct boot_record rec = {.rank = sp->rank, .result = collSuccess};
    collUniqueId id = sp->id;
    collComm_t comm = NULL;
    collResult_t r;

    set_env(sp->comm_id);
    if (sp->id_out_fd >= 0 || !sp->have_id) {
        r = collGetUniqueId(&id);
        if (r != collSuccess) {
            rec.result = r;
            snprintf(rec.msg, sizeof(rec.msg), "collGetUniqueId: %s", collGetLastError(NULL));
            write_record(wfd, &rec);
            _exit(0);
        }
    }
    if (sp->id_out_fd >= 0) {
        char go;
        if (write(sp->id_out_fd, &id, sizeof(id)) != (ssize_t)sizeof(id) ||
            read(sp->go_in_fd, &go, 1) != 1)
            _exit(3);
    }
    if (sp->flip_secret) {
        struct coll_id cid;
        memcpy(&cid, id.internal, sizeof(cid));
        for (int i = 0; i < COLL_SECRET_BYTES; i++)
            cid.secret[i] ^= 0xff;
        memcpy(id.internal, &cid, sizeof(cid));
    }

    double t0 = launch_now();
    r = collCommInitRank(&comm, sp->nranks, id, sp->rank);
    rec.elapsed = launch_now() - t0;
    rec.result = r;
    if (r != collSuccess) {
        snprintf(rec.msg, sizeof(rec.msg), "%s", collGetLastError(NULL));
        write_record(wfd, &rec);
        _exit(0);
    }

    /* It formed: it must also work. */
    rec.stage = 1;
    int32_t v[16];
    for (int i = 0; i < 16; i++)
        v[i] = sp->rank + i;
    r = collAllReduce(v, v, 16, collInt32, collSum, comm, NULL);
    rec.result = r;
    if (r == collSuccess) {
        for (int i = 0; i < 16; i++)
            if (v[i] != sp->nranks * (sp->nranks - 1) / 2 + sp->nranks * i) {
                rec.result = collInternalError;
                snprintf(rec.msg, sizeof(rec.msg), "allreduce v[%d] = %d is wrong", i, v[i]);
                break;
            }
    } else {
        snprintf(rec.msg, sizeof(rec.msg), "%s", collGetLastError(comm));
    }
    if (rec.result == collSuccess) {
        rec.stage = 2;
        rec.result = collCommDestroy(comm);
    }
    write_record(wfd, &rec);
    _exit(0);
}

/* ---- the parent side -------------------------------------------------------------- */

static void start_rank(struct child *ch, struct rank_spec *sp)
{
    int p[2];

    memset(ch, 0, sizeof(*ch));
    if (pipe(p) != 0) {
        perror("pipe");
        exit(1);
    }
    fflush(stdout);
    fflush(stderr);
    ch->pid = fork();
    if (ch->pid < 0) {
        perror("fork");
        exit(1);
    }
    if (ch->pid == 0) {
        close(p[0]);
        rank_main(sp, p[1]);
        _exit(0);
    }
    close(p[1]);
    ch->fd = p[0];
}

/*
 * Waits until every child has exited and sent its record, or the deadline passes;
 * then kills what is left and reaps it.  Returns false when something had to be
 * killed (a hang).
 */
static bool wait_children(struct child *ch, int n, double deadline, const char *name)
{
    bool ok = true;

    for (;;) {
        bool all = true;
        for (int i = 0; i < n; i++) {
            if (!ch[i].exited) {
                pid_t w = waitpid(ch[i].pid, &ch[i].status, WNOHANG);
                if (w == ch[i].pid)
                    ch[i].exited = true;
            }
            if (!ch[i].have_rec && ch[i].fd >= 0) {
                struct pollfd pf = {.fd = ch[i].fd, .events = POLLIN};
                if (poll(&pf, 1, 0) > 0) {
                    ssize_t got = read(ch[i].fd, &ch[i].rec, sizeof(ch[i].rec));
                    ch[i].have_rec = got == (ssize_t)sizeof(ch[i].rec);
                    close(ch[i].fd);
                    ch[i].fd = -1;
                }
            }
            all = all && ch[i].exited && (ch[i].have_rec || ch[i].fd < 0);
        }
        if (all)
            break;
        if (launch_now() > deadline) {
            for (int i = 0; i < n; i++) {
                if (!ch[i].exited) {
                    FAIL("%s: process %d (pid %d) still running %.0f s after the start: a hang",
                         name, i, (int)ch[i].pid, (double)(TIMEOUT_MS + 2 * SLACK_MS) / 1000);
                    kill(ch[i].pid, SIGKILL);
                    waitpid(ch[i].pid, &ch[i].status, 0);
                    ch[i].exited = true;
                    ok = false;
                }
            }
            break;
        }
        usleep(10000);
    }
    for (int i = 0; i < n; i++) {
        if (ch[i].fd >= 0) {
            close(ch[i].fd);
            ch[i].fd = -1;
        }
        if (ch[i].exited && !(WIFEXITED(ch[i].status) && WEXITSTATUS(ch[i].status) == 0)) {
            FAIL("%s: process %d ended with status 0x%x (crash or exit code)", name, i,
                 ch[i].status);
            ok = false;
        }
    }
    return ok;
}

/* Every rank must fail its init in time, with a message; `words` (a list separated
 * by '|', or NULL) must appear in the message of every rank when given. */
static void expect_all_fail(struct child *ch, int n, const char *name, const char *words)
{
    for (int i = 0; i < n; i++) {
        const struct boot_record *rec = &ch[i].rec;
        if (!ch[i].have_rec) {
            FAIL("%s: process %d sent no record", name, i);
            continue;
        }
        if (verbose || rec->result == collSuccess)
            printf("  %s: rank %d: %s after %.2f s: %s\n", name, rec->rank,
                   collGetErrorString((collResult_t)rec->result), rec->elapsed, rec->msg);
        if (rec->result == collSuccess || rec->stage != 0) {
            FAIL("%s: rank %d: init succeeded (stage %d), want an error", name, rec->rank,
                 rec->stage);
            continue;
        }
        if (rec->elapsed * 1000 > TIMEOUT_MS + SLACK_MS)
            FAIL("%s: rank %d: the error took %.2f s, want under %.1f s", name, rec->rank,
                 rec->elapsed, (TIMEOUT_MS + SLACK_MS) / 1000.0);
        if (rec->msg[0] == '\0')
            FAIL("%s: rank %d: collGetLastError(NULL) is empty", name, rec->rank);
        if (words) {
            bool found = false;
            char list[128], *save = NULL;
            snprintf(list, sizeof(list), "%s", words);
            for (char *w = strtok_r(list, "|", &save); w && !found; w = strtok_r(NULL, "|", &save))
                found = strcasestr(rec->msg, w) != NULL;
            if (!found)
                FAIL("%s: rank %d: last error '%s' mentions none of '%s'", name, rec->rank,
                     rec->msg, words);
        }
    }
}

static void expect_all_succeed(struct child *ch, int n, const char *name)
{
    for (int i = 0; i < n; i++) {
        const struct boot_record *rec = &ch[i].rec;
        if (!ch[i].have_rec) {
            FAIL("%s: process %d sent no record", name, i);
            continue;
        }
        if (verbose)
            printf("  %s: rank %d: init %.2f s, %s\n", name, rec->rank, rec->elapsed,
                   collGetErrorString((collResult_t)rec->result));
        if (rec->result != collSuccess || rec->stage != 2)
            FAIL("%s: rank %d: %s at stage %d (0 init, 1 allreduce, 2 destroy): %s", name,
                 rec->rank, collGetErrorString((collResult_t)rec->result), rec->stage,
                 rec->msg);
    }
}

static void comm_id_free(char *buf, size_t len)
{
    int port = launch_free_port();

    if (port < 0) {
        perror("no free port");
        exit(1);
    }
    snprintf(buf, len, "127.0.0.1:%d", port);
}

/* One line per scenario. */
static void scenario_done(const char *name, double t0)
{
    printf("%-40s %s, %.1f s\n", name, failures ? "(failures so far)" : "ok", launch_now() - t0);
    fflush(stdout);
}

static void close_pipes(int a[2], int b[2])
{
    close(a[0]);
    close(a[1]);
    close(b[0]);
    close(b[1]);
}

/* Runs ranks that all use COLL_COMM_ID; ranks[i] and nranks[i] per process. */
static void run_env_scenario(const char *name, int n, const int *ranks, const int *nranks,
                             int flip, const char *comm_id, bool want_success, const char *words)
{
    struct child ch[MAX_RANKS];
    struct rank_spec sp[MAX_RANKS];
    char idbuf[64];
    double t0 = launch_now();

    if (!comm_id) {
        comm_id_free(idbuf, sizeof(idbuf));
        comm_id = idbuf;
    }
    for (int i = 0; i < n; i++) {
        sp[i] = (struct rank_spec){.rank = ranks[i], .nranks = nranks[i], .comm_id = comm_id,
                                   .flip_secret = i == flip, .id_out_fd = -1, .go_in_fd = -1};
        start_rank(&ch[i], &sp[i]);
    }
    wait_children(ch, n, t0 + (TIMEOUT_MS + 2 * SLACK_MS) / 1000.0, name);
    if (want_success)
        expect_all_succeed(ch, n, name);
    else
        expect_all_fail(ch, n, name, words);
    scenario_done(name, t0);
}

/* The id of a root listener made by collGetUniqueId in a process of its own, which
 * exits at once: a root that is gone. */
static collUniqueId id_of_gone_listener(void)
{
    int idp[2], gop[2];
    collUniqueId id;
    struct child ch;
    struct rank_spec sp = {.rank = 0, .nranks = 2};

    if (pipe(idp) != 0 || pipe(gop) != 0)
        exit(1);
    sp.id_out_fd = idp[1];
    sp.go_in_fd = gop[0];
    start_rank(&ch, &sp);
    if (read(idp[0], &id, sizeof(id)) != (ssize_t)sizeof(id)) {
        FAIL("listener-gone: no id from the helper");
        memset(&id, 0, sizeof(id));
    }
    kill(ch.pid, SIGKILL);
    waitpid(ch.pid, NULL, 0);
    close(ch.fd);
    close_pipes(idp, gop);
    return id;
}

static void scenario_listener_gone(void)
{
    const char *name = "c2 root listener gone";
    collUniqueId id = id_of_gone_listener();
    struct child ch[2];
    struct rank_spec sp[2];
    double t0 = launch_now();

    for (int i = 0; i < 2; i++) {
        sp[i] = (struct rank_spec){.rank = i, .nranks = 2, .have_id = true, .id = id,
                                   .id_out_fd = -1, .go_in_fd = -1};
        start_rank(&ch[i], &sp[i]);
    }
    wait_children(ch, 2, t0 + (TIMEOUT_MS + 2 * SLACK_MS) / 1000.0, name);
    expect_all_fail(ch, 2, name, NULL);
    scenario_done(name, t0);
}

/* A listener that accepts into its backlog and never reads or answers. */
static int silent_listener(char *comm_id, size_t len)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 16) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &sl) != 0) {
        perror("silent listener");
        exit(1);
    }
    snprintf(comm_id, len, "127.0.0.1:%d", ntohs(sa.sin_port));
    return fd;
}

/* Connects to addr, retrying while nobody listens yet, until the deadline. */
static int connect_retry(const struct sockaddr *addr, socklen_t len, double deadline)
{
    for (;;) {
        int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return -1;
        if (connect(fd, addr, len) == 0)
            return fd;
        close(fd);
        if (launch_now() > deadline)
            return -1;
        usleep(20000);
    }
}

static void send_garbage(int fd)
{
    unsigned char junk[200];

    for (size_t i = 0; i < sizeof(junk); i++)
        junk[i] = (unsigned char)(i * 73u + 11u);
    if (write(fd, junk, sizeof(junk)) != (ssize_t)sizeof(junk))
        FAIL("garbage: write to the root failed: %s", strerror(errno));
}

/* Starts rank 0 (of nranks) with an id of its own from collGetUniqueId, which it
 * passes up through idp before it waits for a byte on gop; *id_p gets the id.
 * False (with a failure counted) when no id came. */
static bool start_root_rank(struct child *ch, struct rank_spec *sp, int nranks, int idp[2],
                            int gop[2], collUniqueId *id_p, const char *name)
{
    if (pipe(idp) != 0 || pipe(gop) != 0)
        exit(1);
    *sp = (struct rank_spec){.rank = 0, .nranks = nranks, .id_out_fd = idp[1],
                             .go_in_fd = gop[0]};
    start_rank(ch, sp);
    if (read(idp[0], id_p, sizeof(*id_p)) != (ssize_t)sizeof(*id_p)) {
        FAIL("%s: no id from rank 0", name);
        kill(ch->pid, SIGKILL);
        wait_children(ch, 1, launch_now(), name);
        return false;
    }
    return true;
}

/*
 * d2 / e1: rank 0 makes the id with collGetUniqueId (a listener thread of its own)
 * and passes it up; the parent may talk to the listener before it lets rank 0 and
 * the others start their init.
 */
static void run_listener_scenario(const char *name, int n, int flip, bool garbage,
                                  bool want_success)
{
    struct child ch[MAX_RANKS];
    struct rank_spec sp[MAX_RANKS];
    int idp[2], gop[2];
    int junk_fd = -1, idle_fd = -1;
    collUniqueId id;
    double t0 = launch_now();

    if (!start_root_rank(&ch[0], &sp[0], n, idp, gop, &id, name))
        return;
    if (garbage) {
        struct coll_id cid;
        memcpy(&cid, id.internal, sizeof(cid));
        junk_fd = connect_retry((struct sockaddr *)&cid.addr, cid.addrlen, launch_now() + 3);
        idle_fd = connect_retry((struct sockaddr *)&cid.addr, cid.addrlen, launch_now() + 3);
        if (junk_fd < 0 || idle_fd < 0)
            FAIL("%s: cannot connect to the root listener: %s", name, strerror(errno));
        else
            send_garbage(junk_fd);
    }
    if (write(gop[1], "g", 1) != 1)
        exit(1);
    for (int i = 1; i < n; i++) {
        sp[i] = (struct rank_spec){.rank = i, .nranks = n, .have_id = true, .id = id,
                                   .flip_secret = i == flip, .id_out_fd = -1, .go_in_fd = -1};
        start_rank(&ch[i], &sp[i]);
    }
    wait_children(ch, n, t0 + (TIMEOUT_MS + 2 * SLACK_MS) / 1000.0, name);
    if (want_success)
        expect_all_succeed(ch, n, name);
    else
        expect_all_fail(ch, n, name, NULL);
    if (junk_fd >= 0)
        close(junk_fd);
    if (idle_fd >= 0)
        close(idle_fd);
    close_pipes(idp, gop);
    scenario_done(name, t0);
}

/* a3: the rank in the root's process is the one refused, and registers after the
 * others: they must still get the root's answer, not a closed connection, even when
 * the refused rank's process exits the moment it has its own.  Rank 0 makes the id
 * with collGetUniqueId and passes nranks 2; rank 1 passes 3 and registers first. */
static void scenario_refused_root_rank(int rounds)
{
    const char *name = "a3 rank 0 refused after rank 1, x20";
    double t0 = launch_now();
    int bad = 0;

    for (int round = 0; round < rounds && !bad; round++) {
        struct child ch[2];
        struct rank_spec sp[2];
        int idp[2], gop[2];
        collUniqueId id;
        int before = failures;

        if (!start_root_rank(&ch[0], &sp[0], 2, idp, gop, &id, name))
            return;
        sp[1] = (struct rank_spec){.rank = 1, .nranks = 3, .have_id = true, .id = id,
                                   .id_out_fd = -1, .go_in_fd = -1};
        start_rank(&ch[1], &sp[1]);
        usleep(50000); /* rank 1 has registered by now */
        if (write(gop[1], "g", 1) != 1)
            exit(1);
        wait_children(ch, 2, launch_now() + (TIMEOUT_MS + 2 * SLACK_MS) / 1000.0, name);
        expect_all_fail(ch, 2, name, "nranks");
        bad = failures != before;
        close_pipes(idp, gop);
    }
    scenario_done(name, t0);
}

/* e2: with COLL_COMM_ID rank 0 listens during its init; garbage reaches it first. */
static void scenario_garbage_env(void)
{
    const char *name = "e2 garbage to the COLL_COMM_ID root";
    struct child ch[3];
    struct rank_spec sp[3];
    char comm_id[64];
    int port;
    double t0 = launch_now();

    comm_id_free(comm_id, sizeof(comm_id));
    port = atoi(strchr(comm_id, ':') + 1);
    for (int i = 0; i < 3; i++)
        sp[i] = (struct rank_spec){.rank = i, .nranks = 3, .comm_id = comm_id, .id_out_fd = -1,
                                   .go_in_fd = -1};
    start_rank(&ch[0], &sp[0]);

    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int junk_fd = connect_retry((struct sockaddr *)&sa, sizeof(sa), launch_now() + 3);
    int idle_fd = connect_retry((struct sockaddr *)&sa, sizeof(sa), launch_now() + 3);
    if (junk_fd < 0 || idle_fd < 0)
        FAIL("%s: cannot connect to rank 0's root listener", name);
    else
        send_garbage(junk_fd);
    for (int i = 1; i < 3; i++)
        start_rank(&ch[i], &sp[i]);
    wait_children(ch, 3, t0 + (TIMEOUT_MS + 2 * SLACK_MS) / 1000.0, name);
    expect_all_succeed(ch, 3, name);
    if (junk_fd >= 0)
        close(junk_fd);
    if (idle_fd >= 0)
        close(idle_fd);
    scenario_done(name, t0);
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

    /* a. wrong nranks, the root's count larger, then smaller. */
    run_env_scenario("a1 nranks 3 on the root, 2 elsewhere", 2, (const int[]){0, 1},
                     (const int[]){3, 2}, -1, NULL, false, "nranks|number of ranks|size");
    run_env_scenario("a2 nranks 2 on the root, 3 elsewhere", 2, (const int[]){0, 1},
                     (const int[]){2, 3}, -1, NULL, false, "nranks|number of ranks|size");
    scenario_refused_root_rank(20);

    /* b. duplicate rank. */
    run_env_scenario("b  duplicate rank 1", 3, (const int[]){0, 1, 1}, (const int[]){3, 3, 3},
                     -1, NULL, false, "rank");

    /* c. the root never answers. */
    run_env_scenario("c1 nobody listens at COLL_COMM_ID", 1, (const int[]){1}, (const int[]){2},
                     -1, NULL, false, NULL);
    scenario_listener_gone();
    char silent_id[64];
    int silent_fd = silent_listener(silent_id, sizeof(silent_id));
    run_env_scenario("c3 the root accepts and never answers", 2, (const int[]){1, 2},
                     (const int[]){3, 3}, -1, silent_id, false, NULL);
    close(silent_fd);

    /* d. wrong secret on one rank. */
    run_env_scenario("d1 flipped secret, COLL_COMM_ID", 3, (const int[]){0, 1, 2},
                     (const int[]){3, 3, 3}, 2, NULL, false, NULL);
    run_listener_scenario("d2 flipped secret, unique id listener", 3, 2, false, false);

    /* e. strangers at the root do not disturb a good init. */
    run_listener_scenario("e1 garbage to the unique id listener", 3, -1, true, true);
    scenario_garbage_env();

    if (failures)
        fprintf(stderr, "%d check(s) failed\n", failures);
    return failures ? 1 : 0;
}
