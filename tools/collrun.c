/*
 * collrun: starts N ranks of a program on this host and supervises them.
 *
 *   collrun -n 4 --timeout 60 test_allreduce --count 1000
 *
 * Steps:
 *   1. Pick a free TCP port on 127.0.0.1 (bind port 0, read it back, close it) and a
 *      random 128-bit secret.  Rank 0 of the library listens on that port.
 *   2. Fork and exec each rank with COLL_RANK, COLL_NRANKS, COLL_COMM_ID, COLL_SECRET,
 *      COLL_LOCAL_RANK and COLL_LOCAL_SIZE set.  All ranks share one new process group,
 *      so that one killpg() reaches every rank and everything the ranks forked.
 *   3. Run one poll loop over a signalfd (SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT), the
 *      ranks' stdout and stderr pipes and collrun's own stdout and stderr.  Output is
 *      passed on whole lines at a time, each prefixed with "[rank] ".
 *   4. On the first failure (non-zero exit, death by signal, timeout, or a signal sent to
 *      collrun) send SIGTERM to the group, SIGKILL two seconds later, and wait until the
 *      group is empty before exiting with the failure's code.
 *
 *    shell job: collrun (child subreaper)
 *      |
 *      +-- process group G -----------------------------+
 *      |   rank 0 (leader, pid G)   rank 1   rank 2 ... |
 *      |     +-- anything rank 0 forks stays in G       |
 *      +------------------------------------------------+
 *
 * collrun makes itself a child subreaper, so a process whose rank has died is reparented
 * to collrun, which reaps it: when collrun returns, nothing it started is left, not even
 * a zombie.  Each rank also gets PR_SET_PDEATHSIG(SIGKILL), so ranks die with collrun
 * even when collrun itself is killed with SIGKILL.
 *
 * Rank 0 reads collrun's stdin unless it is a terminal (the ranks' group is not the
 * terminal's foreground group, so reading it would stop the rank); other ranks read
 * /dev/null.
 *
 * Limitations: a process that leaves the group (setsid, setpgid) escapes the group kill;
 * output ordering between ranks, and between the stdout and stderr of one rank, is the
 * order in which collrun reads the pipes; a line longer than 1 MiB is split.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "collective.h"
#include "param.h"

#define RUN_MAX_RANKS 4096
#define RUN_EXIT_USAGE 2
#define RUN_EXIT_TIMEOUT 124
#define RUN_EXIT_INTERNAL 125
#define RUN_EXIT_NOEXEC 127

/* How long ranks get to exit after SIGTERM before SIGKILL, and how long collrun waits
 * after SIGKILL before it gives up on processes stuck in the kernel. */
#define RUN_TERM_GRACE_S 2.0
#define RUN_KILL_GRACE_S 5.0
/* While all ranks are gone but their group is not empty, look again this often. */
#define RUN_GROUP_POLL_MS 20

#define RUN_READ_CHUNK 65536
#define RUN_LINE_MAX (1u << 20)  /* a longer line is split */
#define RUN_QUEUE_MAX (4u << 20) /* stop reading ranks while this much output waits */
#define RUN_WRITE_CHUNK 4096

enum run_action { RUN_ACT_RUN, RUN_ACT_HELP, RUN_ACT_VERSION, RUN_ACT_ENV, RUN_ACT_USAGE };
enum run_phase { RUN_RUNNING, RUN_TERMINATING, RUN_KILLED, RUN_GAVE_UP };

struct run_opts {
    int nranks;
    double timeout_s; /* 0: none */
    bool prefix;
    bool keep_going; /* a failed rank does not stop the others */
    char **argv; /* PROG ARGS..., NULL-terminated */
};

struct run_buf {
    char *data;
    size_t len;
    size_t cap;
};

/* One of a rank's two output pipes. */
struct run_stream {
    int fd;              /* read end; -1 once closed */
    struct run_buf line; /* bytes after the last newline seen */
};

struct run_rank {
    pid_t pid;
    bool alive;
    struct run_stream streams[2]; /* [0] stdout, [1] stderr */
};

/* collrun's own stdout or stderr, fed only with whole lines. */
struct run_out {
    int fd;
    struct run_buf queue;
    size_t head;   /* bytes of queue already written */
    bool mid_line; /* the last write stopped inside a line */
    bool broken;   /* a write failed: drop everything from now on */
};

struct run_state {
    struct run_opts opts;
    struct run_rank *ranks;
    int nalive;
    pid_t self;
    pid_t pgid; /* 0 until rank 0 exists */
    int sigfd;
    sigset_t orig_mask;
    struct sigaction orig_sigpipe;
    bool stdin_null_for_rank0;
    int devnull; /* stdin of the ranks that do not read collrun's */
    char comm_id[32];
    char secret[33];
    struct run_out outs[2];
    int exit_code; /* -1 until the first failure, timeout or signal decides it */
    enum run_phase phase;
    double phase_deadline;
    double timeout_deadline; /* 0: none */
    bool abandon_output;
};

static double run_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Out of memory in the launcher: nothing sensible is left to do but stop the ranks. */
static _Noreturn void run_die_nomem(const struct run_state *st)
{
    static const char msg[] = "collrun: out of memory\n";
    if (write(STDERR_FILENO, msg, sizeof msg - 1) < 0) {
        /* Nothing to do: we are exiting anyway. */
    }
    if (st != NULL && st->pgid > 0)
        killpg(st->pgid, SIGKILL);
    _exit(RUN_EXIT_INTERNAL);
}

static void run_buf_append(const struct run_state *st, struct run_buf *b, const void *p, size_t n)
{
    if (n == 0)
        return; /* data may still be NULL, which memcpy does not accept even for 0 bytes */
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        char *data = realloc(b->data, cap);
        if (data == NULL)
            run_die_nomem(st);
        b->data = data;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

static size_t run_out_pending(const struct run_out *o)
{
    return o->queue.len - o->head;
}

/* Queues one line, given without its newline, behind the rank's prefix. */
static void run_emit_line(struct run_state *st, int rank, int which, const char *p, size_t n)
{
    struct run_out *o = &st->outs[which];
    if (o->broken || st->abandon_output)
        return;
    char prefix[24];
    int plen = snprintf(prefix, sizeof prefix, "[%d] ", rank);
    run_buf_append(st, &o->queue, prefix, (size_t)plen);
    run_buf_append(st, &o->queue, p, n);
    run_buf_append(st, &o->queue, "\n", 1);
}

/* A message from collrun itself goes through the stderr queue, so that it never lands in
 * the middle of a rank's line. */
__attribute__((format(printf, 2, 3))) static void run_note(struct run_state *st, const char *fmt,
                                                           ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof msg)
        n = sizeof msg - 1;
    struct run_out *o = &st->outs[1];
    if (o->broken)
        return;
    run_buf_append(st, &o->queue, "collrun: ", 9);
    run_buf_append(st, &o->queue, msg, (size_t)n);
    run_buf_append(st, &o->queue, "\n", 1);
}

/* Writes queued output from the head, ending at a line boundary: when stdout and stderr
 * are one file, the two queues then never split each other's lines. */
static void run_out_write(struct run_out *o)
{
    const char *p = o->queue.data + o->head;
    size_t avail = run_out_pending(o);
    size_t n = avail < RUN_WRITE_CHUNK ? avail : RUN_WRITE_CHUNK;
    if (n < avail) {
        const char *nl = memrchr(p, '\n', n);
        if (nl == NULL)
            nl = memchr(p + n, '\n', avail - n);
        n = nl != NULL ? (size_t)(nl - p) + 1 : avail;
    }
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(o->fd, p + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (w <= 0) {
            o->broken = true;
            o->queue.len = o->head = 0;
            o->mid_line = false;
            return;
        }
        done += (size_t)w;
    }
    o->head += done;
    if (done > 0)
        o->mid_line = p[done - 1] != '\n';
    if (o->head == o->queue.len) {
        o->head = o->queue.len = 0;
    } else if (o->head > o->queue.cap / 2) {
        memmove(o->queue.data, o->queue.data + o->head, o->queue.len - o->head);
        o->queue.len -= o->head;
        o->head = 0;
    }
}

static void run_stream_close(struct run_state *st, int rank, int which)
{
    struct run_stream *s = &st->ranks[rank].streams[which];
    if (s->line.len > 0)
        run_emit_line(st, rank, which, s->line.data, s->line.len); /* adds the newline */
    s->line.len = 0;
    close(s->fd);
    s->fd = -1;
}

/* Reads once from a rank's pipe and queues every completed line.  Returns false at end of
 * file or when nothing more is available right now. */
static bool run_stream_read(struct run_state *st, int rank, int which)
{
    struct run_stream *s = &st->ranks[rank].streams[which];
    char chunk[RUN_READ_CHUNK];
    ssize_t n = read(s->fd, chunk, sizeof chunk);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
        return false;
    if (n <= 0) {
        run_stream_close(st, rank, which);
        return false;
    }
    const char *p = chunk;
    const char *end = chunk + n;
    const char *nl;
    while ((nl = memchr(p, '\n', (size_t)(end - p))) != NULL) {
        if (s->line.len == 0) {
            run_emit_line(st, rank, which, p, (size_t)(nl - p));
        } else {
            run_buf_append(st, &s->line, p, (size_t)(nl - p));
            run_emit_line(st, rank, which, s->line.data, s->line.len);
            s->line.len = 0;
        }
        p = nl + 1;
    }
    run_buf_append(st, &s->line, p, (size_t)(end - p));
    if (s->line.len >= RUN_LINE_MAX) {
        run_emit_line(st, rank, which, s->line.data, s->line.len);
        s->line.len = 0;
    }
    return true;
}

static const char *run_signame(int sig, char *buf, size_t size)
{
    static const char *const names[] = {
        [SIGHUP] = "SIGHUP",   [SIGINT] = "SIGINT",       [SIGQUIT] = "SIGQUIT",
        [SIGILL] = "SIGILL",   [SIGTRAP] = "SIGTRAP",     [SIGABRT] = "SIGABRT",
        [SIGBUS] = "SIGBUS",   [SIGFPE] = "SIGFPE",       [SIGKILL] = "SIGKILL",
        [SIGUSR1] = "SIGUSR1", [SIGSEGV] = "SIGSEGV",     [SIGUSR2] = "SIGUSR2",
        [SIGPIPE] = "SIGPIPE", [SIGALRM] = "SIGALRM",     [SIGTERM] = "SIGTERM",
        [SIGCHLD] = "SIGCHLD", [SIGCONT] = "SIGCONT",     [SIGSTOP] = "SIGSTOP",
        [SIGTSTP] = "SIGTSTP", [SIGTTIN] = "SIGTTIN",     [SIGTTOU] = "SIGTTOU",
        [SIGURG] = "SIGURG",   [SIGXCPU] = "SIGXCPU",     [SIGXFSZ] = "SIGXFSZ",
        [SIGPROF] = "SIGPROF", [SIGVTALRM] = "SIGVTALRM", [SIGWINCH] = "SIGWINCH",
        [SIGIO] = "SIGIO",     [SIGSYS] = "SIGSYS",
    };
    if (sig > 0 && (size_t)sig < sizeof names / sizeof names[0] && names[sig] != NULL)
        return names[sig];
    snprintf(buf, size, "%d", sig);
    return buf;
}

static void run_set_exit(struct run_state *st, int code)
{
    if (st->exit_code < 0)
        st->exit_code = code;
}

/* Sends sig to the whole group now and SIGKILL after the grace period. */
static void run_begin_kill(struct run_state *st, int sig)
{
    if (st->phase != RUN_RUNNING)
        return;
    st->phase = RUN_TERMINATING;
    st->phase_deadline = run_now() + RUN_TERM_GRACE_S;
    if (st->pgid > 0) {
        killpg(st->pgid, sig);
        /* A stopped process acts on SIGTERM only once it runs again. */
        killpg(st->pgid, SIGCONT);
    }
}

static void run_send_kill(struct run_state *st)
{
    st->phase = RUN_KILLED;
    st->phase_deadline = run_now() + RUN_KILL_GRACE_S;
    if (st->pgid > 0)
        killpg(st->pgid, SIGKILL);
}

static bool run_group_empty(const struct run_state *st)
{
    return st->pgid <= 0 || (killpg(st->pgid, 0) < 0 && errno == ESRCH);
}

static void run_rank_exited(struct run_state *st, int rank, int status)
{
    char buf[16];
    st->ranks[rank].alive = false;
    st->nalive--;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    /* Deaths caused by collrun's own kill are expected and not reported. */
    if (code == 0 || st->phase != RUN_RUNNING)
        return;
    if (WIFEXITED(status))
        run_note(st, "rank %d exited with code %d", rank, code);
    else
        run_note(st, "rank %d killed by signal %s%s", rank,
                 run_signame(WTERMSIG(status), buf, sizeof buf),
                 WCOREDUMP(status) ? " (core dumped)" : "");
    run_set_exit(st, code);
    /* --keep-going: the survivors may carry on without this rank (elastic jobs). */
    if (!st->opts.keep_going)
        run_begin_kill(st, SIGTERM);
}

/* Reaps every exited child: ranks, and anything reparented to collrun as subreaper. */
static void run_reap(struct run_state *st)
{
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid < 0 && errno == EINTR)
            continue;
        if (pid <= 0)
            return;
        for (int r = 0; r < st->opts.nranks; r++) {
            if (st->ranks[r].alive && st->ranks[r].pid == pid) {
                run_rank_exited(st, r, status);
                break;
            }
        }
    }
}

static void run_on_signal(struct run_state *st, int sig)
{
    if (st->nalive == 0 && run_group_empty(st)) {
        /* Only output is left to write: stop writing it. */
        run_set_exit(st, 128 + sig);
        st->abandon_output = true;
        return;
    }
    if (st->phase == RUN_RUNNING) {
        run_set_exit(st, 128 + sig);
        run_begin_kill(st, sig);
    } else if (st->phase == RUN_TERMINATING) {
        /* A second interrupt means: now. */
        run_send_kill(st);
    }
}

static void run_read_signals(struct run_state *st)
{
    struct signalfd_siginfo si;
    for (;;) {
        ssize_t n = read(st->sigfd, &si, sizeof si);
        if (n < 0 && errno == EINTR)
            continue;
        if (n != (ssize_t)sizeof si)
            return;
        if (si.ssi_signo != SIGCHLD)
            run_on_signal(st, (int)si.ssi_signo);
    }
}

/* Phase changes that depend on time alone. */
static void run_check_time(struct run_state *st, double now)
{
    if (st->phase == RUN_RUNNING && st->timeout_deadline > 0 && now >= st->timeout_deadline) {
        run_note(st, "timeout after %g s", st->opts.timeout_s);
        run_set_exit(st, RUN_EXIT_TIMEOUT);
        run_begin_kill(st, SIGTERM);
    } else if (st->phase == RUN_TERMINATING && now >= st->phase_deadline) {
        run_note(st, "processes still running %g s after the stop signal, sending SIGKILL",
                 RUN_TERM_GRACE_S);
        run_send_kill(st);
    } else if (st->phase == RUN_KILLED && now >= st->phase_deadline) {
        run_note(st, "giving up on processes of group %d that outlived SIGKILL", (int)st->pgid);
        st->phase = RUN_GAVE_UP;
    }
}

static int run_ms_until(double deadline, double now)
{
    /* Rounded up, so that the deadline has passed when poll returns. */
    double ms = (deadline - now) * 1e3;
    if (ms <= 0)
        return 0;
    return ms >= INT_MAX - 1 ? INT_MAX : (int)ms + 1;
}

/* Once no process of the group is left, nobody writes to the pipes any more (short of a
 * process that left the group): take what they hold and close them. */
static void run_drain_streams(struct run_state *st)
{
    for (int r = 0; r < st->opts.nranks; r++) {
        for (int w = 0; w < 2; w++) {
            if (st->ranks[r].streams[w].fd < 0)
                continue;
            while (run_stream_read(st, r, w)) {
            }
            if (st->ranks[r].streams[w].fd >= 0)
                run_stream_close(st, r, w);
        }
    }
}

static void run_loop(struct run_state *st)
{
    int n = st->opts.nranks;
    struct pollfd *pfds = calloc((size_t)(2 * n + 3), sizeof *pfds);
    int *owner = calloc((size_t)(2 * n + 3), sizeof *owner);
    if (pfds == NULL || owner == NULL)
        run_die_nomem(st);
    for (;;) {
        run_reap(st);
        double now = run_now();
        run_check_time(st, now);
        bool gone = (st->nalive == 0 && run_group_empty(st)) || st->phase == RUN_GAVE_UP;
        if (st->nalive == 0 && !gone && st->phase == RUN_RUNNING) {
            run_note(st, "all ranks exited; stopping the processes they left behind");
            run_begin_kill(st, SIGTERM);
        }
        if (gone)
            run_drain_streams(st);
        if (gone && (st->abandon_output ||
                     (run_out_pending(&st->outs[0]) == 0 && run_out_pending(&st->outs[1]) == 0)))
            break;

        int np = 0;
        pfds[np] = (struct pollfd){.fd = st->sigfd, .events = POLLIN};
        owner[np++] = -1;
        bool full = run_out_pending(&st->outs[0]) + run_out_pending(&st->outs[1]) >= RUN_QUEUE_MAX;
        for (int r = 0; r < n && !full; r++) {
            for (int w = 0; w < 2; w++) {
                if (st->ranks[r].streams[w].fd < 0)
                    continue;
                pfds[np] = (struct pollfd){.fd = st->ranks[r].streams[w].fd, .events = POLLIN};
                owner[np++] = 2 * r + w;
            }
        }
        for (int w = 0; w < 2; w++) {
            struct run_out *o = &st->outs[w];
            if (run_out_pending(o) == 0 || o->broken || st->outs[1 - w].mid_line)
                continue;
            pfds[np] = (struct pollfd){.fd = o->fd, .events = POLLOUT};
            owner[np++] = -2 - w;
        }

        int timeout = -1;
        if (st->phase == RUN_RUNNING && st->timeout_deadline > 0)
            timeout = run_ms_until(st->timeout_deadline, now);
        if (st->phase == RUN_TERMINATING || st->phase == RUN_KILLED)
            timeout = run_ms_until(st->phase_deadline, now);
        if (st->nalive == 0 && !gone && (timeout < 0 || timeout > RUN_GROUP_POLL_MS))
            timeout = RUN_GROUP_POLL_MS;

        int ready = poll(pfds, (nfds_t)np, timeout);
        if (ready < 0 && errno != EINTR) {
            run_note(st, "poll failed: %s", strerror(errno));
            run_set_exit(st, RUN_EXIT_INTERNAL);
            run_send_kill(st);
            continue;
        }
        for (int i = 0; i < np && ready > 0; i++) {
            if (pfds[i].revents == 0)
                continue;
            if (owner[i] == -1) {
                run_read_signals(st);
            } else if (owner[i] <= -2) {
                struct run_out *o = &st->outs[-2 - owner[i]];
                if (pfds[i].revents & (POLLERR | POLLNVAL)) {
                    o->broken = true;
                    o->queue.len = o->head = 0;
                    o->mid_line = false;
                } else {
                    run_out_write(o);
                }
            } else {
                run_stream_read(st, owner[i] / 2, owner[i] % 2);
            }
        }
    }
    free(pfds);
    free(owner);
}

/* Runs in the forked child; never returns. */
static _Noreturn void run_child(struct run_state *st, int rank, int out_fd, int err_fd, int exec_fd)
{
    /* What failed goes back through exec_fd: {0, errno} for execvp, {1, errno} before. */
    int report[2] = {1, 0};
    /* Belt and braces besides the group kill: the rank dies with collrun.  collrun may
     * have died between fork and prctl, in which case the parent is no longer st->self. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != st->self)
        _exit(RUN_EXIT_INTERNAL);
    if (setpgid(0, st->pgid) != 0)
        goto fail;
    if ((rank > 0 || st->stdin_null_for_rank0) && dup2(st->devnull, STDIN_FILENO) < 0)
        goto fail;
    if (st->opts.prefix) {
        if (dup2(out_fd, STDOUT_FILENO) < 0 || dup2(err_fd, STDERR_FILENO) < 0)
            goto fail;
    }
    char val[32];
    snprintf(val, sizeof val, "%d", rank);
    if (setenv("COLL_RANK", val, 1) != 0 || setenv("COLL_LOCAL_RANK", val, 1) != 0)
        goto fail;
    snprintf(val, sizeof val, "%d", st->opts.nranks);
    if (setenv("COLL_NRANKS", val, 1) != 0 || setenv("COLL_LOCAL_SIZE", val, 1) != 0 ||
        setenv("COLL_COMM_ID", st->comm_id, 1) != 0 || setenv("COLL_SECRET", st->secret, 1) != 0)
        goto fail;
    /* The program starts with the signal state collrun was started with. */
    sigaction(SIGPIPE, &st->orig_sigpipe, NULL);
    sigprocmask(SIG_SETMASK, &st->orig_mask, NULL);
    execvp(st->opts.argv[0], st->opts.argv);
    report[0] = 0;
fail:
    report[1] = errno;
    if (write(exec_fd, report, sizeof report) < 0) {
        /* The parent then sees a plain exit with code 127. */
    }
    _exit(RUN_EXIT_NOEXEC);
}

/* Starts one rank.  Returns 0, or the exit code collrun should end with. */
static int run_spawn(struct run_state *st, int rank)
{
    int out[2] = {-1, -1}, err[2] = {-1, -1}, exe[2];
    struct run_rank *rk = &st->ranks[rank];
    if (st->opts.prefix && (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0)) {
        run_note(st, "cannot create a pipe for rank %d: %s", rank, strerror(errno));
        goto err_close;
    }
    if (pipe2(exe, O_CLOEXEC) != 0) {
        run_note(st, "cannot create a pipe for rank %d: %s", rank, strerror(errno));
        goto err_close;
    }
    pid_t pid = fork();
    if (pid == 0)
        run_child(st, rank, out[1], err[1], exe[1]);
    if (pid < 0) {
        run_note(st, "cannot start rank %d: %s", rank, strerror(errno));
        close(exe[0]);
        close(exe[1]);
        goto err_close;
    }
    /* Both sides set the group so neither order of events races; the second call fails
     * harmlessly once the child has exec'd. */
    setpgid(pid, st->pgid > 0 ? st->pgid : pid);
    if (st->pgid == 0)
        st->pgid = pid;
    rk->pid = pid;
    rk->alive = true;
    st->nalive++;
    close(exe[1]);
    for (int w = 0; w < 2; w++) {
        int *p = w == 0 ? out : err;
        rk->streams[w].fd = p[0];
        if (p[1] >= 0)
            close(p[1]);
        if (p[0] >= 0)
            fcntl(p[0], F_SETFL, fcntl(p[0], F_GETFL) | O_NONBLOCK);
    }
    /* The exec pipe closes on a successful exec; otherwise it says what failed. */
    int report[2];
    ssize_t n;
    do {
        n = read(exe[0], report, sizeof report);
    } while (n < 0 && errno == EINTR);
    close(exe[0]);
    if (n != (ssize_t)sizeof report)
        return 0;
    if (report[0] == 1) {
        run_note(st, "cannot set up rank %d: %s", rank, strerror(report[1]));
        return RUN_EXIT_INTERNAL;
    }
    run_note(st, "cannot execute %s: %s", st->opts.argv[0], strerror(report[1]));
    return RUN_EXIT_NOEXEC;

err_close:
    for (int i = 0; i < 2; i++) {
        if (out[i] >= 0)
            close(out[i]);
        if (err[i] >= 0)
            close(err[i]);
    }
    return RUN_EXIT_INTERNAL;
}

/* Finds a port that is free right now.  The socket is closed before the ranks start, so
 * another program could take the port in between; rank 0 then fails to listen, loudly. */
static int run_free_port(int *port_p)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = 0};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0 ||
        getsockname(fd, (struct sockaddr *)&addr, &len) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    close(fd);
    *port_p = ntohs(addr.sin_port);
    return 0;
}

static int run_random(unsigned char *p, size_t n)
{
    size_t done = 0;
    while (done < n) {
        ssize_t got = getrandom(p + done, n - done, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            break;
        done += (size_t)got;
    }
    if (done == n)
        return 0;
    /* Kernels before 3.17 lack getrandom. */
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    done = 0;
    while (done < n) {
        ssize_t got = read(fd, p + done, n - done);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        done += (size_t)got;
    }
    close(fd);
    return done == n ? 0 : -1;
}

static int run_setup(struct run_state *st)
{
    int port;
    unsigned char raw[16];
    if (run_free_port(&port) != 0) {
        fprintf(stderr, "collrun: cannot find a free port on 127.0.0.1: %s\n", strerror(errno));
        return -1;
    }
    snprintf(st->comm_id, sizeof st->comm_id, "127.0.0.1:%d", port);
    if (run_random(raw, sizeof raw) != 0) {
        fprintf(stderr, "collrun: cannot read random bytes for COLL_SECRET\n");
        return -1;
    }
    for (size_t i = 0; i < sizeof raw; i++)
        snprintf(st->secret + 2 * i, 3, "%02x", raw[i]);

    /* Reparented descendants come to collrun, which reaps them: none outlives it. */
    prctl(PR_SET_CHILD_SUBREAPER, 1);

    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    /* A signal that arrives ignored stays ignored, as the shell meant (a background job
     * ignores SIGINT, nohup ignores SIGHUP).  Blocking it would make Linux queue it for
     * the signalfd after all, so such a signal is left out of the set. */
    static const int forwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
    for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; i++) {
        struct sigaction old;
        if (sigaction(forwarded[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
            sigaddset(&set, forwarded[i]);
    }
    /* SIGCHLD may arrive ignored from the parent, which would make waitpid useless. */
    signal(SIGCHLD, SIG_DFL);
    if (sigprocmask(SIG_BLOCK, &set, &st->orig_mask) != 0) {
        fprintf(stderr, "collrun: cannot block signals: %s\n", strerror(errno));
        return -1;
    }
    st->sigfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (st->sigfd < 0) {
        fprintf(stderr, "collrun: cannot create a signalfd: %s\n", strerror(errno));
        return -1;
    }
    /* A closed stdout must not kill collrun before it has stopped the ranks. */
    struct sigaction ign = {.sa_handler = SIG_IGN};
    sigaction(SIGPIPE, &ign, &st->orig_sigpipe);
    /* Ranks run in a background group: one reading a terminal would be stopped. */
    st->stdin_null_for_rank0 = isatty(STDIN_FILENO);
    st->devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (st->devnull < 0) {
        fprintf(stderr, "collrun: cannot open /dev/null: %s\n", strerror(errno));
        return -1;
    }
    return 0;
}

static int run_main(const struct run_opts *opts)
{
    struct run_state st = {
        .opts = *opts,
        .self = getpid(),
        .sigfd = -1,
        .devnull = -1,
        .outs = {{.fd = STDOUT_FILENO}, {.fd = STDERR_FILENO}},
        .exit_code = -1,
        .phase = RUN_RUNNING,
    };
    st.ranks = calloc((size_t)opts->nranks, sizeof *st.ranks);
    if (st.ranks == NULL)
        run_die_nomem(NULL);
    for (int r = 0; r < opts->nranks; r++)
        st.ranks[r].streams[0].fd = st.ranks[r].streams[1].fd = -1;
    if (run_setup(&st) != 0)
        return RUN_EXIT_INTERNAL;

    if (opts->timeout_s > 0)
        st.timeout_deadline = run_now() + opts->timeout_s;
    for (int r = 0; r < opts->nranks; r++) {
        int code = run_spawn(&st, r);
        if (code != 0) {
            run_set_exit(&st, code);
            run_begin_kill(&st, SIGTERM);
            break;
        }
    }
    run_loop(&st);

    for (int r = 0; r < opts->nranks; r++) {
        free(st.ranks[r].streams[0].line.data);
        free(st.ranks[r].streams[1].line.data);
    }
    free(st.ranks);
    free(st.outs[0].queue.data);
    free(st.outs[1].queue.data);
    close(st.sigfd);
    close(st.devnull);
    return st.exit_code < 0 ? 0 : st.exit_code;
}

static void run_help(FILE *f)
{
    fprintf(f,
            "Usage: collrun -n N [--timeout S] [--no-prefix] [--keep-going] [--] PROG [ARGS...]\n"
            "       collrun --env | --help | --version\n"
            "\n"
            "Starts N ranks of PROG on this host with COLL_RANK, COLL_NRANKS, COLL_COMM_ID,\n"
            "COLL_SECRET, COLL_LOCAL_RANK and COLL_LOCAL_SIZE set, and waits for them.\n"
            "\n"
            "  -n N          number of ranks, 1 to %d\n"
            "  --timeout S   stop all ranks after S seconds (fractional; 0: none) and exit 124;\n"
            "                the default comes from COLLRUN_TIMEOUT\n"
            "  --no-prefix   pass output through as is, without the \"[rank] \" line prefix\n"
            "  --keep-going  a failed rank does not stop the others (for jobs that shrink\n"
            "                their communicator and go on); the exit code is still the\n"
            "                first failure's\n"
            "  --env         list every COLL_* variable with its default and meaning\n"
            "  -h, --help    show this help\n"
            "  --version     show the version\n"
            "\n"
            "When a rank fails the others get SIGTERM, then SIGKILL after %g s, and collrun\n"
            "exits with the first failure's code (128+N for death by signal N).\n"
            "Exit codes: 0 all ranks succeeded, 2 bad arguments, 124 timeout, 125 collrun\n"
            "failed, 127 PROG cannot be executed, 128+N collrun got signal N.\n",
            RUN_MAX_RANKS, RUN_TERM_GRACE_S);
}

__attribute__((format(printf, 1, 2))) static enum run_action run_usage(const char *fmt, ...)
{
    va_list ap;
    fputs("collrun: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\nUsage: collrun -n N [--timeout S] [--no-prefix] [--keep-going] [--] PROG [ARGS...]\n"
          "Try 'collrun --help' for more information.\n",
          stderr);
    return RUN_ACT_USAGE;
}

static bool run_parse_nranks(const char *s, int *n_p)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < 1 || v > RUN_MAX_RANKS)
        return false;
    *n_p = (int)v;
    return true;
}

static bool run_parse_seconds(const char *s, double *v_p)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !isfinite(v) || v < 0)
        return false;
    *v_p = v;
    return true;
}

static enum run_action run_parse_args(int argc, char **argv, struct run_opts *o)
{
    bool have_n = false, have_timeout = false;
    *o = (struct run_opts){.prefix = true};
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        const char *val = NULL;
        if (a[0] != '-' || strcmp(a, "-") == 0)
            break;
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0)
            return RUN_ACT_HELP;
        if (strcmp(a, "--version") == 0)
            return RUN_ACT_VERSION;
        if (strcmp(a, "--env") == 0)
            return RUN_ACT_ENV;
        if (strcmp(a, "--no-prefix") == 0) {
            o->prefix = false;
        } else if (strcmp(a, "--keep-going") == 0) {
            o->keep_going = true;
        } else if (strncmp(a, "-n", 2) == 0) {
            val = a[2] != '\0' ? a + 2 : (i + 1 < argc ? argv[++i] : NULL);
            if (val == NULL)
                return run_usage("option -n needs a number of ranks");
            if (!run_parse_nranks(val, &o->nranks))
                return run_usage("invalid number of ranks '%s' (want 1 to %d)", val, RUN_MAX_RANKS);
            have_n = true;
        } else if (strcmp(a, "--timeout") == 0 || strncmp(a, "--timeout=", 10) == 0) {
            val = a[9] == '=' ? a + 10 : (i + 1 < argc ? argv[++i] : NULL);
            if (val == NULL)
                return run_usage("option --timeout needs a number of seconds");
            if (!run_parse_seconds(val, &o->timeout_s))
                return run_usage("invalid timeout '%s' (want seconds >= 0)", val);
            have_timeout = true;
        } else {
            return run_usage("unknown option '%s'", a);
        }
    }
    if (!have_n)
        return run_usage("missing -n N, the number of ranks");
    if (i >= argc)
        return run_usage("missing the program to run");
    o->argv = argv + i;
    const char *env = coll_env_get("COLLRUN_TIMEOUT");
    if (!have_timeout && env != NULL && env[0] != '\0' && !run_parse_seconds(env, &o->timeout_s))
        return run_usage("invalid COLLRUN_TIMEOUT '%s' (want seconds >= 0)", env);
    return RUN_ACT_RUN;
}

int main(int argc, char **argv)
{
    struct run_opts opts;
    switch (run_parse_args(argc, argv, &opts)) {
    case RUN_ACT_HELP:
        run_help(stdout);
        return 0;
    case RUN_ACT_VERSION:
        printf("collrun (libcollective) %d.%d.%d\n", COLL_MAJOR, COLL_MINOR, COLL_PATCH);
        return 0;
    case RUN_ACT_ENV:
        coll_param_print(stdout);
        return fflush(stdout) == 0 ? 0 : RUN_EXIT_INTERNAL;
    case RUN_ACT_USAGE:
        return RUN_EXIT_USAGE;
    case RUN_ACT_RUN:
        break;
    }
    /* Nothing buffered may be duplicated into the children by fork. */
    fflush(NULL);
    return run_main(&opts);
}
