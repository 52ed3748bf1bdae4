/*
 * collrun: starts the ranks of a program, on this host or on several, and supervises them.
 *
 *   collrun -n 4 --timeout 60 test_allreduce --count 1000
 *   collrun --hosts node1:2,node2:2 allreduce_perf -b 8 -e 1G
 *   collrun status            what every rank of this user's running job is doing: asked
 *                             over the ranks' bootstrap listeners ("collrun status: the
 *                             run directory" below; tools/job_status.c)
 *
 * Steps:
 *   1. Pick the rendezvous and a random 128-bit secret: rank 0's host (127.0.0.1 with
 *      every rank on this host) and a random port in 61000-65535, above the kernel's
 *      ephemeral ports, tried first when rank 0 runs here (or --port, or COLL_COMM_ID as
 *      given).  Rank 0 of the library listens there.
 *   2. Start each rank with COLL_RANK, COLL_NRANKS, COLL_COMM_ID, COLL_SECRET,
 *      COLL_LOCAL_RANK and COLL_LOCAL_SIZE set, bound to its CPUs (--bind).  A rank on this
 *      host is forked and exec'd.  A rank on another host is started through the remote
 *      shell, "RSH HOST COMMAND", where COMMAND is one shell line that changes to this
 *      directory and runs "collrun --rank-helper ... -- PROG ARGS" there with the COLL_*
 *      environment.  Everything collrun forks shares one new process group, so that one
 *      killpg() reaches every local rank, every remote-shell client and what they fork.
 *   3. Run one poll loop over a signalfd (SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT), the
 *      ranks' stdout and stderr pipes and collrun's own stdout and stderr.  Output is
 *      passed on whole lines at a time, each prefixed with "[rank] " ("[rank host] " with
 *      --hosts).
 *   4. On the first failure (non-zero exit, death by signal, timeout, or a signal sent to
 *      collrun) send SIGTERM to the group, SIGKILL two seconds later, and wait until the
 *      group is empty before exiting with the failure's code.
 *
 *    shell job: collrun (child subreaper)
 *      |
 *      +-- process group G ----------------------------------------------+
 *      |   rank 0 (leader)  rank 1   rsh node2 COMMAND   rsh node2 ...  |
 *      |     +-- anything rank 0 forks stays in G      |                 |
 *      +-----------------------------------------------|-----------------+
 *                                                      | (ssh: another host)
 *                     node2: collrun --rank-helper (stdin: the lifeline)
 *                              +-- process group P: rank 2, what it forks
 *
 * collrun makes itself a child subreaper, so a process whose rank has died is reparented
 * to collrun, which reaps it: when collrun returns, nothing it started on this host is
 * left, not even a zombie.  Each process it forks also gets PR_SET_PDEATHSIG(SIGKILL), so
 * ranks and remote-shell clients die with collrun even when collrun is killed with SIGKILL.
 *
 * A remote rank's helper forks the program into a process group of its own (its stdin on
 * /dev/null, bound as --bind says), forwards SIGTERM, SIGINT, SIGHUP and SIGQUIT to that
 * group with SIGKILL 1.5 s later, and exits the way the program did (same code, same
 * signal).  Its stdin is the lifeline: a pipe that collrun never writes and holds open
 * until it exits, passed on by the remote shell.  End of file on it means that collrun or
 * the connection is gone, and the helper then stops the program's group the same way.
 * Remote shells that do not pass signals on (ssh without a terminal) thus still end the
 * remote processes, and a remote shell that runs the command in collrun's group
 * (tools/netns-rsh) gets the signals to the helper directly.
 *
 * Rank 0 reads collrun's stdin when it runs on this host, unless stdin is a terminal (the
 * ranks' group is not the terminal's foreground group, so reading it would stop the
 * rank); other ranks, and remote ranks, read /dev/null.
 *
 * Limitations: a process that leaves the group (setsid, setpgid) escapes the group kill;
 * output ordering between ranks, and between the stdout and stderr of one rank, is the
 * order in which collrun reads the pipes; a line longer than 1 MiB is split.  A remote
 * host must have this collrun, the program and this directory at the same paths, and a
 * POSIX login shell.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <sched.h>
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
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "collective.h"
#include "job_status.h"
#include "log.h"
#include "param.h"

#define RUN_MAX_RANKS 4096
#define RUN_EXIT_USAGE 2
#define RUN_EXIT_TIMEOUT 124
#define RUN_RESPAWN_MAX 16 /* replacements --respawn starts in one job */
#define RUN_EXIT_INTERNAL 125
#define RUN_EXIT_NOEXEC 127

/* How long ranks get to exit after SIGTERM before SIGKILL, and how long collrun waits
 * after SIGKILL before it gives up on processes stuck in the kernel. */
#define RUN_TERM_GRACE_S 2.0
#define RUN_KILL_GRACE_S 5.0
/* The remote helper's grace is shorter than collrun's, so that a helper in collrun's group
 * (tools/netns-rsh) has sent its own SIGKILL before collrun's SIGKILL ends it. */
#define RUN_HELPER_GRACE_S 1.5
/* While all ranks are gone but their group is not empty, look again this often. */
#define RUN_GROUP_POLL_MS 20

#define RUN_READ_CHUNK 65536
#define RUN_LINE_MAX (1u << 20)  /* a longer line is split */
#define RUN_QUEUE_MAX (4u << 20) /* stop reading ranks while this much output waits */
#define RUN_WRITE_CHUNK 4096

#define RUN_HOST_MAX 255 /* longest host name in --hosts */
/* The rendezvous port is drawn from here: above Linux's default range of ephemeral ports
 * (32768-60999), so that the kernel does not give it to another socket's connection (the
 * library's own, another job's) in the meantime. */
#define RUN_PORT_LOW 61000
#define RUN_PORT_HIGH 65535
#define RUN_PORT_TRIES 32
#define RUN_SYSFS_MAX 16384 /* longest CPU list read from /sys */
#define RUN_VAR_MAX 255     /* longest variable name in -x */

enum run_action { RUN_ACT_RUN, RUN_ACT_HELP, RUN_ACT_VERSION, RUN_ACT_ENV, RUN_ACT_USAGE };
enum run_phase { RUN_RUNNING, RUN_TERMINATING, RUN_KILLED, RUN_GAVE_UP };
/* AUTO: CORE when the host's ranks fit its cores, NONE otherwise. */
enum run_bind { RUN_BIND_AUTO, RUN_BIND_NONE, RUN_BIND_CORE, RUN_BIND_NUMA };
enum run_map { RUN_MAP_BLOCK, RUN_MAP_RR };

/* One entry of --hosts. */
struct run_host {
    char *name;  /* what the remote shell gets: [user@]host, no brackets */
    char *addr;  /* the host alone: prefixes, reports and COLL_COMM_ID */
    int slots;   /* ranks it may take */
    bool local;  /* runs on this host, without the remote shell */
    int key;     /* the first entry that is the same host: local ranks count per key */
};

struct run_opts {
    int nranks;
    double timeout_s; /* 0: none */
    bool prefix;
    bool keep_going; /* a failed rank does not stop the others */
    bool respawn;    /* --respawn: a failed rank is replaced by a new process (COLL_JOIN) */
    bool report_bindings;
    enum run_bind bind;
    enum run_map map;
    int port;                /* 0: collrun chooses */
    const char *rsh;         /* the remote shell command, split at blanks */
    struct run_host *hosts;  /* NULL without --hosts */
    int nhosts;
    const char **exports; /* -x: "VAR=VALUE" or "VAR", as given; NULL without -x */
    int nexports;
    char **argv; /* PROG ARGS..., NULL-terminated */
};

/* The CPUs this process may use, grouped by core and by NUMA node. */
struct run_topo {
    cpu_set_t allowed;
    cpu_set_t *cores; /* each core's allowed CPUs, in the order of their lowest CPU */
    int ncores;
    cpu_set_t *nodes; /* each NUMA node's allowed CPUs; nodes with none are left out */
    int *node_ids;
    int nnodes;
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
    bool replace;   /* --respawn: start a replacement once the dead one's output is read */
    bool joining;   /* this slot's process is a replacement: it gets COLL_JOIN */
    int host;       /* index in hosts */
    int local_rank; /* COLL_LOCAL_RANK and COLL_LOCAL_SIZE */
    int local_size;
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
    pid_t pgid; /* 0 until the first rank exists */
    int sigfd;
    sigset_t orig_mask;
    struct sigaction orig_sigpipe;
    bool stdin_null_for_rank0;
    int devnull; /* stdin of the ranks that do not read collrun's */
    char hostname[RUN_HOST_MAX + 1];
    struct run_host *hosts; /* opts.hosts, or one entry for this host */
    int nhosts;
    bool multi;         /* --hosts: "[rank host] " prefixes */
    bool any_remote;    /* some rank starts through the remote shell */
    int lifeline[2];    /* the remote shells' stdin; collrun keeps [1] open until it exits */
    char *rsh_copy;     /* --rsh, cut into words in place */
    char **rsh_argv;    /* the --rsh words, then the host, the command and NULL */
    int rsh_words;
    char *self_exe;     /* this collrun, which remote hosts run as the helper */
    char *cwd;          /* where remote ranks start */
    struct run_buf cmd; /* the command line of the remote rank being started */
    struct run_topo topo;
    char comm_id[RUN_HOST_MAX + 16];
    char secret[33];
    /* collrun status: this job's file in the run directory, and the file rank 0
     * writes its ranks' addresses to (COLL_STATUS_FILE); "" when the run
     * directory is not usable. */
    char status_job[PATH_MAX + 32];
    char status_ranks[PATH_MAX + 32];
    struct run_out outs[2];
    int exit_code; /* -1 until the first failure, timeout or signal decides it */
    int replacements; /* started by --respawn so far */
    enum run_phase phase;
    double phase_deadline;
    double timeout_deadline; /* 0: none */
    bool abandon_output;
};

extern char **environ;

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
    char prefix[RUN_HOST_MAX + 24];
    int plen = st->multi ? snprintf(prefix, sizeof prefix, "[%d %s] ", rank,
                                    st->hosts[st->ranks[rank].host].addr)
                         : snprintf(prefix, sizeof prefix, "[%d] ", rank);
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
    /* --respawn: a new process takes the slot and joins the survivors (not when
     * a replacement could not even start: the next would fail alike). */
    if (st->opts.respawn && st->ranks[rank].joining && code == RUN_EXIT_NOEXEC) {
        run_note(st, "rank %d is not replaced again: its replacement could not start", rank);
    } else if (st->opts.respawn && st->replacements < RUN_RESPAWN_MAX) {
        st->ranks[rank].replace = true;
        st->replacements++;
    } else if (st->opts.respawn) {
        run_note(st, "rank %d is not replaced: %d replacements started already (the most "
                 "--respawn starts)", rank, RUN_RESPAWN_MAX);
    }
    /* --keep-going: the survivors may carry on without this rank (elastic jobs). */
    if (!st->opts.keep_going)
        run_begin_kill(st, SIGTERM);
}

static int run_spawn(struct run_state *st, int rank);
static void run_status_write(struct run_state *st);

/* --respawn: starts the replacements due, each once the output of the process it
 * replaces has been read to its end (the slot's pipes are then closed). */
static void run_respawn(struct run_state *st)
{
    for (int r = 0; r < st->opts.nranks && st->phase == RUN_RUNNING; r++) {
        struct run_rank *rk = &st->ranks[r];
        if (!rk->replace || rk->streams[0].fd >= 0 || rk->streams[1].fd >= 0)
            continue;
        rk->replace = false;
        if (st->nalive == 0) {
            /* Nobody is left to join: the job is over. */
            run_note(st, "rank %d is not replaced: no rank is left to join", r);
            continue;
        }
        rk->joining = true;
        run_note(st, "starting a replacement for rank %d (COLL_JOIN=%s)", r, st->comm_id);
        int code = run_spawn(st, r);
        if (code != 0)
            run_set_exit(st, code);
        else
            run_status_write(st); /* the slot's new pid, for collrun status */
    }
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
        run_respawn(st);
        double now = run_now();
        run_check_time(st, now);
        bool waiting = false; /* a replacement is due: the job is not over */
        for (int r = 0; r < n && st->phase == RUN_RUNNING; r++)
            waiting = waiting || st->ranks[r].replace;
        bool gone = (st->nalive == 0 && !waiting && run_group_empty(st)) ||
                    st->phase == RUN_GAVE_UP;
        if (st->nalive == 0 && !gone && !waiting && st->phase == RUN_RUNNING) {
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

/* Reads a small file of /sys into buf, NUL-terminated. */
static bool run_read_file(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n;
    do {
        n = read(fd, buf, size - 1);
    } while (n < 0 && errno == EINTR);
    close(fd);
    if (n < 0)
        return false;
    buf[n] = '\0';
    return true;
}

/* Parses a kernel CPU list ("0-3,8,10-11\n") into *set. */
static bool run_cpulist_parse(const char *s, cpu_set_t *set)
{
    CPU_ZERO(set);
    while (*s != '\0' && *s != '\n') {
        char *end;
        errno = 0;
        long a = strtol(s, &end, 10), b = a;
        if (end == s || errno != 0 || a < 0)
            return false;
        if (*end == '-') {
            s = end + 1;
            b = strtol(s, &end, 10);
            if (end == s || errno != 0 || b < a)
                return false;
        }
        for (long c = a; c <= b && c < CPU_SETSIZE; c++)
            CPU_SET(c, set);
        s = end;
        if (*s == ',')
            s++;
        else if (*s != '\0' && *s != '\n')
            return false;
    }
    return true;
}

/* Writes *set as the kernel writes CPU lists ("0-3,8"), as /proc/PID/status shows them. */
static void run_cpulist_format(const cpu_set_t *set, char *buf, size_t size)
{
    size_t o = 0;
    buf[0] = '\0';
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, set))
            continue;
        int e = c;
        while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, set))
            e++;
        int n = e > c ? snprintf(buf + o, size - o, "%s%d-%d", o > 0 ? "," : "", c, e)
                      : snprintf(buf + o, size - o, "%s%d", o > 0 ? "," : "", c);
        if (n < 0 || (size_t)n >= size - o)
            return; /* cut short: only reports use it */
        o += (size_t)n;
        c = e;
    }
}

/* Reads the CPUs this process may use and groups them by core (the hardware threads of
 * one core, from /sys/devices/system/cpu/cpuN/topology/thread_siblings_list) and by NUMA
 * node (/sys/devices/system/node).  Without those files each CPU is a core, and all CPUs
 * are one node.  Returns 0, or -1 with errno set. */
static int run_topo_load(struct run_topo *t)
{
    memset(t, 0, sizeof *t);
    if (sched_getaffinity(0, sizeof t->allowed, &t->allowed) != 0)
        return -1;
    int ncpus = CPU_COUNT(&t->allowed);
    t->cores = calloc((size_t)ncpus, sizeof *t->cores);
    t->nodes = calloc((size_t)ncpus, sizeof *t->nodes);
    t->node_ids = calloc((size_t)ncpus, sizeof *t->node_ids);
    char *buf = malloc(RUN_SYSFS_MAX);
    if (t->cores == NULL || t->nodes == NULL || t->node_ids == NULL || buf == NULL) {
        free(buf);
        errno = ENOMEM;
        return -1;
    }
    char path[96];
    cpu_set_t seen, set;
    CPU_ZERO(&seen);
    for (int c = 0; c < CPU_SETSIZE && t->ncores < ncpus; c++) {
        if (!CPU_ISSET(c, &t->allowed) || CPU_ISSET(c, &seen))
            continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list",
                 c);
        if (!run_read_file(path, buf, RUN_SYSFS_MAX) || !run_cpulist_parse(buf, &set))
            CPU_ZERO(&set);
        CPU_AND(&set, &set, &t->allowed);
        CPU_SET(c, &set);
        CPU_OR(&seen, &seen, &set);
        t->cores[t->ncores++] = set;
    }
    cpu_set_t ids;
    if (run_read_file("/sys/devices/system/node/online", buf, RUN_SYSFS_MAX) &&
        run_cpulist_parse(buf, &ids)) {
        for (int k = 0; k < CPU_SETSIZE && t->nnodes < ncpus; k++) {
            if (!CPU_ISSET(k, &ids))
                continue;
            snprintf(path, sizeof path, "/sys/devices/system/node/node%d/cpulist", k);
            if (!run_read_file(path, buf, RUN_SYSFS_MAX) || !run_cpulist_parse(buf, &set))
                continue;
            CPU_AND(&set, &set, &t->allowed);
            if (CPU_COUNT(&set) == 0)
                continue;
            t->nodes[t->nnodes] = set;
            t->node_ids[t->nnodes++] = k;
        }
    }
    if (t->nnodes == 0) {
        t->nodes[0] = t->allowed;
        t->nnodes = 1;
    }
    free(buf);
    return 0;
}

static void run_topo_free(struct run_topo *t)
{
    free(t->cores);
    free(t->nodes);
    free(t->node_ids);
}

/* The CPUs of the rank with local index i of n on this host under mode, in *set, and how
 * they were chosen in what.  Returns false when the rank is not bound. */
static bool run_bind_cpus(const struct run_topo *t, enum run_bind mode, int i, int n,
                          cpu_set_t *set, char *what, size_t size)
{
    if (mode == RUN_BIND_AUTO)
        mode = n <= t->ncores ? RUN_BIND_CORE : RUN_BIND_NONE;
    if (mode == RUN_BIND_CORE) {
        *set = t->cores[i % t->ncores];
        snprintf(what, size, "core");
        return true;
    }
    if (mode == RUN_BIND_NUMA) {
        *set = t->nodes[i % t->nnodes];
        snprintf(what, size, "numa node %d", t->node_ids[i % t->nnodes]);
        return true;
    }
    *set = t->allowed;
    snprintf(what, size, "not bound");
    return false;
}

/* True when the host name a and the name b are one host: equal, or one is the other
 * without its domain ("node1" and "node1.example.org"). */
static bool run_same_name(const char *a, const char *b)
{
    size_t la = strcspn(a, "."), lb = strcspn(b, ".");
    if (strcmp(a, b) == 0)
        return true;
    return la == lb && la > 0 && strncmp(a, b, la) == 0 && (a[la] == '\0' || b[lb] == '\0');
}

static bool run_is_loopback_name(const char *a)
{
    return strcmp(a, "localhost") == 0 || strncmp(a, "127.", 4) == 0 || strcmp(a, "::1") == 0;
}

/* Appends s to the command line in single quotes, which a POSIX shell takes literally. */
static void run_cmd_quoted(struct run_state *st, const char *s)
{
    struct run_buf *b = &st->cmd;
    run_buf_append(st, b, " '", 2);
    for (;;) {
        size_t n = strcspn(s, "'");
        run_buf_append(st, b, s, n);
        if (s[n] == '\0')
            break;
        run_buf_append(st, b, "'\\''", 4);
        s += n + 1;
    }
    run_buf_append(st, b, "'", 1);
}

static void run_cmd_plain(struct run_state *st, const char *s)
{
    run_buf_append(st, &st->cmd, s, strlen(s));
}

static void run_cmd_var(struct run_state *st, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void run_cmd_var(struct run_state *st, const char *name, const char *fmt, ...)
{
    char val[RUN_HOST_MAX + 64];
    int n = snprintf(val, sizeof val, "%s=", name);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(val + n, sizeof val - (size_t)n, fmt, ap);
    va_end(ap);
    run_cmd_quoted(st, val);
}

/* The variables collrun sets for each rank; the others of its environment go as given. */
static bool run_is_rank_var(const char *entry)
{
    static const char *const names[] = {"COLL_RANK",       "COLL_NRANKS",     "COLL_COMM_ID",
                                        "COLL_SECRET",     "COLL_LOCAL_RANK", "COLL_LOCAL_SIZE",
                                        "COLL_JOIN"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        size_t n = strlen(names[i]);
        if (strncmp(entry, names[i], n) == 0 && entry[n] == '=')
            return true;
    }
    return false;
}

/* The "NAME=VALUE" entry of collrun's environment for the variable NAME, or NULL. */
static const char *run_env_entry(const char *name)
{
    size_t n = strlen(name);
    for (char **e = environ; *e != NULL; e++) {
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            return *e;
    }
    return NULL;
}

/* Builds in st->cmd the shell line that starts rank on its remote host:
 *   cd 'DIR' && exec env 'COLL_RANK=2' ... 'COLLRUN' --rank-helper --host 'H' -- 'PROG' ...
 * Each word is quoted, so that the remote shell passes it on byte for byte.  The -x
 * variables come after collrun's COLL_* ones, so that env gives them the last word. */
static void run_build_command(struct run_state *st, int rank)
{
    const struct run_rank *rk = &st->ranks[rank];
    static const char *const bind_names[] = {
        [RUN_BIND_NONE] = "none", [RUN_BIND_CORE] = "core", [RUN_BIND_NUMA] = "numa"};
    st->cmd.len = 0;
    run_cmd_plain(st, "cd");
    run_cmd_quoted(st, st->cwd);
    run_cmd_plain(st, " && exec env");
    run_cmd_var(st, "COLL_RANK", "%d", rank);
    run_cmd_var(st, "COLL_NRANKS", "%d", st->opts.nranks);
    run_cmd_var(st, "COLL_COMM_ID", "%s", st->comm_id);
    run_cmd_var(st, "COLL_SECRET", "%s", st->secret);
    run_cmd_var(st, "COLL_LOCAL_RANK", "%d", rk->local_rank);
    run_cmd_var(st, "COLL_LOCAL_SIZE", "%d", rk->local_size);
    if (rk->joining)
        run_cmd_var(st, "COLL_JOIN", "%s", st->comm_id);
    for (char **e = environ; *e != NULL; e++) {
        if (strncmp(*e, "COLL_", 5) == 0 && strchr(*e, '=') != NULL && !run_is_rank_var(*e))
            run_cmd_quoted(st, *e);
    }
    for (int x = 0; x < st->opts.nexports; x++) {
        const char *entry = st->opts.exports[x];
        if (strchr(entry, '=') == NULL)
            entry = run_env_entry(entry); /* -x VAR: its value here, when it has one */
        if (entry != NULL)
            run_cmd_quoted(st, entry);
    }
    run_cmd_quoted(st, st->self_exe);
    run_cmd_plain(st, " --rank-helper --host");
    run_cmd_quoted(st, st->hosts[rk->host].addr);
    if (st->opts.bind != RUN_BIND_AUTO) {
        run_cmd_plain(st, " --bind ");
        run_cmd_plain(st, bind_names[st->opts.bind]);
    }
    if (st->opts.report_bindings)
        run_cmd_plain(st, " --report-bindings");
    run_cmd_plain(st, " --");
    for (char **a = st->opts.argv; *a != NULL; a++)
        run_cmd_quoted(st, *a);
    run_buf_append(st, &st->cmd, "", 1); /* the NUL */
}

/* Runs in the forked child; never returns.  A local rank execs the program, bound to
 * cpus when that is not NULL; a remote rank execs the remote shell with st->rsh_argv. */
static _Noreturn void run_child(struct run_state *st, int rank, int out_fd, int err_fd,
                                int exec_fd, const cpu_set_t *cpus)
{
    const struct run_rank *rk = &st->ranks[rank];
    bool remote = !st->hosts[rk->host].local;
    /* What failed goes back through exec_fd: {0, errno} for execvp, {1, errno} before. */
    int report[2] = {1, 0};
    /* Belt and braces besides the group kill: the rank dies with collrun.  collrun may
     * have died between fork and prctl, in which case the parent is no longer st->self. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != st->self)
        _exit(RUN_EXIT_INTERNAL);
    if (setpgid(0, st->pgid) != 0)
        goto fail;
    int in_fd = remote ? st->lifeline[0]
                       : (rank > 0 || st->stdin_null_for_rank0) ? st->devnull : STDIN_FILENO;
    if (in_fd != STDIN_FILENO && dup2(in_fd, STDIN_FILENO) < 0)
        goto fail;
    if (st->opts.prefix) {
        if (dup2(out_fd, STDOUT_FILENO) < 0 || dup2(err_fd, STDERR_FILENO) < 0)
            goto fail;
    }
    if (!remote) {
        char val[32];
        snprintf(val, sizeof val, "%d", rank);
        if (setenv("COLL_RANK", val, 1) != 0)
            goto fail;
        snprintf(val, sizeof val, "%d", rk->local_rank);
        if (setenv("COLL_LOCAL_RANK", val, 1) != 0)
            goto fail;
        snprintf(val, sizeof val, "%d", st->opts.nranks);
        if (setenv("COLL_NRANKS", val, 1) != 0)
            goto fail;
        snprintf(val, sizeof val, "%d", rk->local_size);
        if (setenv("COLL_LOCAL_SIZE", val, 1) != 0 ||
            setenv("COLL_COMM_ID", st->comm_id, 1) != 0 ||
            setenv("COLL_SECRET", st->secret, 1) != 0)
            goto fail;
        if (st->status_ranks[0] != '\0' && setenv("COLL_STATUS_FILE", st->status_ranks, 1) != 0)
            goto fail;
        if (rk->joining && setenv("COLL_JOIN", st->comm_id, 1) != 0)
            goto fail;
        /* -x VAR=VALUE; a plain -x VAR is inherited with the rest of the environment. */
        for (int x = 0; x < st->opts.nexports; x++) {
            const char *entry = st->opts.exports[x];
            const char *eq = strchr(entry, '=');
            char name[RUN_VAR_MAX + 1];
            if (eq == NULL)
                continue;
            memcpy(name, entry, (size_t)(eq - entry));
            name[eq - entry] = '\0';
            if (setenv(name, eq + 1, 1) != 0)
                goto fail;
        }
        if (cpus != NULL && sched_setaffinity(0, sizeof *cpus, cpus) != 0)
            goto fail;
    }
    /* The program starts with the signal state collrun was started with. */
    sigaction(SIGPIPE, &st->orig_sigpipe, NULL);
    sigprocmask(SIG_SETMASK, &st->orig_mask, NULL);
    char **argv = remote ? st->rsh_argv : st->opts.argv;
    execvp(argv[0], argv);
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
    const struct run_host *host = &st->hosts[rk->host];
    cpu_set_t cpus;
    bool bound = false;
    if (host->local) {
        char what[32];
        bound = run_bind_cpus(&st->topo, st->opts.bind, rk->local_rank, rk->local_size, &cpus,
                              what, sizeof what);
        if (st->opts.report_bindings) {
            char list[RUN_SYSFS_MAX];
            run_cpulist_format(&cpus, list, sizeof list);
            run_note(st, "rank %d on %s: cpus %s (%s)", rank, host->addr, list, what);
        }
    } else {
        run_build_command(st, rank);
        st->rsh_argv[st->rsh_words] = host->name;
        st->rsh_argv[st->rsh_words + 1] = st->cmd.data;
    }
    const char *prog = host->local ? st->opts.argv[0] : st->rsh_argv[0];
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
        run_child(st, rank, out[1], err[1], exe[1], bound ? &cpus : NULL);
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
    run_note(st, "cannot execute %s: %s", prog, strerror(report[1]));
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

/* True when port can be bound on every IPv4 address of this host right now. */
static bool run_port_free(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return true; /* cannot tell: rank 0 will say */
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    bool ok = bind(fd, (struct sockaddr *)&addr, sizeof addr) == 0;
    close(fd);
    return ok;
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

/* COLL_COMM_ID for the ranks: rank 0's host (127.0.0.1 with every rank on this host;
 * otherwise as named in --hosts, this host's name when it was named localhost) and a
 * random port of RUN_PORT_LOW-RUN_PORT_HIGH, above the kernel's range of ephemeral ports,
 * so that no other socket's connection is given it between this choice and rank 0's
 * listen (a port the kernel hands out, free when collrun looked, could be); a port that
 * can be bound now when rank 0 runs here.  Or --port, or COLL_COMM_ID as collrun was
 * given it. */
static int run_choose_comm_id(struct run_state *st)
{
    const char *given = st->multi ? coll_env_get("COLL_COMM_ID") : NULL;
    int port = st->opts.port;
    if (given != NULL) {
        if (strlen(given) >= sizeof st->comm_id) {
            fprintf(stderr, "collrun: COLL_COMM_ID is longer than %zu bytes\n",
                    sizeof st->comm_id - 1);
            return -1;
        }
        snprintf(st->comm_id, sizeof st->comm_id, "%s", given);
        return 0;
    }
    const char *addr = "127.0.0.1";
    bool local = true;
    if (st->any_remote) {
        const struct run_host *h0 = &st->hosts[st->ranks[0].host];
        addr = h0->local && run_is_loopback_name(h0->addr) ? st->hostname : h0->addr;
        local = h0->local;
    }
    for (int tries = 0; port == 0; tries++) {
        uint16_t r;
        if (run_random((unsigned char *)&r, sizeof r) != 0) {
            fprintf(stderr, "collrun: cannot read random bytes for the port\n");
            return -1;
        }
        int p = RUN_PORT_LOW + r % (RUN_PORT_HIGH - RUN_PORT_LOW + 1);
        if (!local || tries == RUN_PORT_TRIES - 1 || run_port_free(p))
            port = p;
    }
    snprintf(st->comm_id, sizeof st->comm_id, strchr(addr, ':') != NULL ? "[%s]:%d" : "%s:%d",
             addr, port);
    return 0;
}

/* Marks the local hosts and gives each rank its host and local rank: block mapping fills
 * each host's slots in turn, rr deals the ranks out one per host with slots left. */
static void run_map_ranks(struct run_state *st)
{
    int nh = st->nhosts > 0 ? st->nhosts : 1; /* at least one: setup makes one */
    int *left = calloc((size_t)nh, sizeof *left);
    int *count = calloc((size_t)nh, sizeof *count);
    if (left == NULL || count == NULL)
        run_die_nomem(st);
    int first_local = -1;
    for (int h = 0; h < nh; h++) {
        struct run_host *host = &st->hosts[h];
        left[h] = host->slots;
        if (host->local && first_local < 0)
            first_local = h;
        host->key = host->local ? first_local : h;
        for (int k = 0; k < h && !host->local; k++) {
            if (!st->hosts[k].local && strcmp(st->hosts[k].name, host->name) == 0) {
                host->key = k;
                break;
            }
        }
    }
    int h = 0;
    for (int r = 0; r < st->opts.nranks; r++) {
        while (left[h] == 0)
            h = st->opts.map == RUN_MAP_RR ? (h + 1) % nh : h + 1;
        st->ranks[r].host = h;
        left[h]--;
        st->ranks[r].local_rank = count[st->hosts[h].key]++;
        st->any_remote |= !st->hosts[h].local;
        if (st->opts.map == RUN_MAP_RR)
            h = (h + 1) % nh;
    }
    for (int r = 0; r < st->opts.nranks; r++)
        st->ranks[r].local_size = count[st->hosts[st->ranks[r].host].key];
    free(left);
    free(count);
}

/* What remote ranks need: the remote shell's words, collrun's own path, this directory
 * (as $PWD names it when that is the same directory, which keeps symbolic links that
 * the other hosts may share) and the lifeline pipe. */
static int run_setup_remote(struct run_state *st)
{
    char *words = st->rsh_copy = strdup(st->opts.rsh);
    st->rsh_argv = calloc(strlen(st->opts.rsh) / 2 + 4, sizeof *st->rsh_argv);
    st->self_exe = calloc(PATH_MAX, 1);
    if (words == NULL || st->rsh_argv == NULL || st->self_exe == NULL)
        run_die_nomem(st);
    char *save = NULL;
    for (char *w = strtok_r(words, " \t", &save); w != NULL; w = strtok_r(NULL, " \t", &save))
        st->rsh_argv[st->rsh_words++] = w;
    if (st->rsh_words == 0) {
        fprintf(stderr, "collrun: --rsh names no command\n");
        return -1;
    }
    ssize_t n = readlink("/proc/self/exe", st->self_exe, PATH_MAX - 1);
    if (n <= 0) {
        fprintf(stderr, "collrun: cannot read /proc/self/exe: %s\n", strerror(errno));
        return -1;
    }
    st->cwd = getcwd(NULL, 0);
    if (st->cwd == NULL) {
        fprintf(stderr, "collrun: cannot read the current directory: %s\n", strerror(errno));
        return -1;
    }
    const char *pwd = coll_env_get("PWD");
    struct stat a, b;
    if (pwd != NULL && pwd[0] == '/' && stat(pwd, &a) == 0 && stat(".", &b) == 0 &&
        a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
        char *copy = strdup(pwd);
        if (copy == NULL)
            run_die_nomem(st);
        free(st->cwd);
        st->cwd = copy;
    }
    if (pipe2(st->lifeline, O_CLOEXEC) != 0) {
        fprintf(stderr, "collrun: cannot create a pipe: %s\n", strerror(errno));
        return -1;
    }
    return 0;
}

/* ---- collrun status: the run directory ---- */

/* collrun keeps, for `collrun status`, a file per job in a directory of this user's alone
 * ($XDG_RUNTIME_DIR/collrun, else /tmp/collrun-UID, mode 0700; made when missing):
 *   PID.job    written by collrun once its ranks run, removed when it exits: its start
 *              time (to tell a live collrun from a reused pid), nranks, COLL_COMM_ID,
 *              COLL_SECRET, the program and each rank's pid and host (mode 0600)
 *   PID.ranks  written by rank 0 of the library (COLL_STATUS_FILE, which collrun sets for
 *              its ranks on this host) once the communicator is up: every rank's
 *              bootstrap listener; removed by collrun when it exits
 * A directory that is not a directory, not this user's or open to others is not used:
 * the job runs all the same, without status. */
#define RUN_JOB_VERSION 1

struct run_job {
    long pid;
    unsigned long long start; /* the collrun's start time, in clock ticks since boot */
    int nranks;
    char comm_id[RUN_HOST_MAX + 16];
    char secret[256];
    char program[PATH_MAX];
};

/* The run directory into dir, made when create; false with the cause in why when it is
 * missing or not this user's alone. */
static bool run_status_dir(char *dir, size_t cap, bool create, char *why, size_t whylen)
{
    const char *xdg = coll_env_get("XDG_RUNTIME_DIR");
    int n = xdg != NULL && xdg[0] == '/'
                ? snprintf(dir, cap, "%s/collrun", xdg)
                : snprintf(dir, cap, "/tmp/collrun-%u", (unsigned)getuid());
    if (n < 0 || (size_t)n + 32 >= cap) {
        snprintf(why, whylen, "the run directory's path is too long");
        return false;
    }
    if (create && mkdir(dir, 0700) != 0 && errno != EEXIST) {
        snprintf(why, whylen, "cannot create %s: %s", dir, strerror(errno));
        return false;
    }
    struct stat sb;
    if (lstat(dir, &sb) != 0) {
        snprintf(why, whylen, "%s: %s", dir, strerror(errno));
        return false;
    }
    if (!S_ISDIR(sb.st_mode) || sb.st_uid != getuid() || (sb.st_mode & 077) != 0) {
        snprintf(why, whylen, "%s is not a directory of this user's alone (mode 0700): not used",
                 dir);
        return false;
    }
    return true;
}

/* A process's start time (field 22 of /proc/PID/stat), 0 when it does not exist. */
static unsigned long long run_proc_start(long pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
    for (int field = 2; p != NULL && field < 22; field++) {
        p = strchr(p + 1, ' ');
    }
    return p != NULL ? strtoull(p + 1, NULL, 10) : 0;
}

/* The paths of this job's files, "" when the run directory cannot be used. */
static void run_status_paths(struct run_state *st)
{
    char dir[PATH_MAX], why[PATH_MAX + 64];
    st->status_job[0] = st->status_ranks[0] = '\0';
    if (!run_status_dir(dir, sizeof dir, true, why, sizeof why))
        return; /* collrun status says why */
    snprintf(st->status_job, sizeof st->status_job, "%s/%ld.job", dir, (long)st->self);
    snprintf(st->status_ranks, sizeof st->status_ranks, "%s/%ld.ranks", dir, (long)st->self);
}

/* Copies s into buf with control characters made '?': one line of a file. */
static const char *run_status_line(const char *s, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", s);
    for (char *c = buf; *c; c++)
        if ((unsigned char)*c < ' ' || *c == 0x7f)
            *c = '?';
    return buf;
}

/* Writes PID.job (through a rename, so that a reader never sees half of it). */
static void run_status_write(struct run_state *st)
{
    if (st->status_job[0] == '\0')
        return;
    char tmp[sizeof st->status_job + 8], prog[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s.tmp", st->status_job);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (f == NULL) {
        if (fd >= 0)
            close(fd);
        st->status_job[0] = '\0';
        return;
    }
    fprintf(f, "collrun-job %d\nstart %llu\nnranks %d\ncomm_id %s\nsecret %s\nprogram %s\n",
            RUN_JOB_VERSION, run_proc_start((long)st->self), st->opts.nranks, st->comm_id,
            st->secret, run_status_line(st->opts.argv[0], prog, sizeof prog));
    for (int r = 0; r < st->opts.nranks; r++)
        fprintf(f, "rank %d %ld %s\n", r, (long)st->ranks[r].pid,
                st->hosts[st->ranks[r].host].addr);
    bool ok = !ferror(f);
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, st->status_job) != 0) {
        unlink(tmp);
        st->status_job[0] = '\0';
    }
}

static void run_status_remove(const struct run_state *st)
{
    if (st->status_job[0] != '\0')
        unlink(st->status_job);
    if (st->status_ranks[0] != '\0')
        unlink(st->status_ranks);
}

/* Reads a PID.job file; false when it is not one of this version. */
static bool run_status_read_job(const char *path, long pid, struct run_job *j)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return false;
    memset(j, 0, sizeof *j);
    j->pid = pid;
    char line[PATH_MAX + 32];
    int version = 0, have = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        char *val = strchr(line, ' ');
        if (val == NULL)
            continue;
        *val++ = '\0';
        if (strcmp(line, "collrun-job") == 0)
            version = atoi(val);
        else if (strcmp(line, "start") == 0 && ++have)
            j->start = strtoull(val, NULL, 10);
        else if (strcmp(line, "nranks") == 0 && ++have)
            j->nranks = atoi(val);
        else if (strcmp(line, "comm_id") == 0 && ++have)
            snprintf(j->comm_id, sizeof j->comm_id, "%s", val);
        else if (strcmp(line, "secret") == 0 && ++have)
            snprintf(j->secret, sizeof j->secret, "%s", val);
        else if (strcmp(line, "program") == 0)
            snprintf(j->program, sizeof j->program, "%s", val);
    }
    fclose(f);
    return version == RUN_JOB_VERSION && have == 4;
}

/* Whether the job's collrun still runs (and is not another process with its pid). */
static bool run_status_alive(const struct run_job *j)
{
    return j->start != 0 && run_proc_start(j->pid) == j->start;
}

/* "123.job" -> 123; 0 for any other name. */
static long run_status_job_pid(const char *name)
{
    char *end;
    long pid = strtol(name, &end, 10);
    return pid > 0 && end != name && strcmp(end, ".job") == 0 ? pid : 0;
}

static void run_status_usage(FILE *f)
{
    fprintf(f, "Usage: collrun status [PID] [--json] [--wait MS]\n"
               "Asks every rank of this user's running collrun job (or of the one collrun PID\n"
               "runs) what it is doing: the call in progress, for how long, the peer it waits\n"
               "for, the last call done; then names the rank the others wait for.  A rank\n"
               "that does not answer within MS ms (default %d) is reported as such: a\n"
               "stopped process cannot answer.  Exit codes: 0 a report, 1 no job or no\n"
               "answer, 2 bad arguments.\n",
            COLL_JOB_STATUS_WAIT_MS);
}

/*   collrun status [PID] [--json] [--wait MS] */
static int run_status_main(int argc, char **argv)
{
    bool json = false;
    long pid = 0;
    int wait_ms = COLL_JOB_STATUS_WAIT_MS;
    for (int i = 1; i < argc; i++) {
        char *end;
        if (strcmp(argv[i], "--json") == 0) {
            json = true;
        } else if (strcmp(argv[i], "--wait") == 0 && i + 1 < argc) {
            long v = strtol(argv[++i], &end, 10);
            if (*end != '\0' || end == argv[i] || v < 1 || v > 600000) {
                fprintf(stderr, "collrun: invalid --wait '%s' (want 1 to 600000 ms)\n", argv[i]);
                return RUN_EXIT_USAGE;
            }
            wait_ms = (int)v;
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            run_status_usage(stdout);
            return 0;
        } else if (pid == 0 && (pid = strtol(argv[i], &end, 10)) > 0 && *end == '\0') {
            /* the job's collrun */
        } else {
            fprintf(stderr, "collrun: status: unexpected argument '%s'\n", argv[i]);
            run_status_usage(stderr);
            return RUN_EXIT_USAGE;
        }
    }
    char dir[PATH_MAX], why[PATH_MAX + 64], path[PATH_MAX + 300];
    if (!run_status_dir(dir, sizeof dir, false, why, sizeof why)) {
        fprintf(stderr, "collrun: no collrun job of this user to ask: %s\n", why);
        return 1;
    }
    struct run_job job;
    if (pid > 0) {
        snprintf(path, sizeof path, "%s/%ld.job", dir, pid);
        if (!run_status_read_job(path, pid, &job) || !run_status_alive(&job)) {
            fprintf(stderr, "collrun: no running collrun job of this user has pid %ld (no job "
                    "file %s, or its collrun has ended)\n", pid, path);
            return 1;
        }
    } else {
        DIR *d = opendir(dir);
        int found = 0;
        char list[2048] = "";
        size_t len = 0;
        for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;) {
            long p = run_status_job_pid(e->d_name);
            struct run_job j;
            if (p == 0)
                continue;
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            if (!run_status_read_job(path, p, &j) || !run_status_alive(&j)) {
                /* Its collrun was killed before it could clean up. */
                unlink(path);
                snprintf(path, sizeof path, "%s/%ld.ranks", dir, p);
                unlink(path);
                continue;
            }
            if (found++ == 0)
                job = j;
            coll_buf_printf(list, sizeof list, &len, "\n  %ld  %d ranks  %s", j.pid, j.nranks,
                            j.program);
        }
        if (d != NULL)
            closedir(d);
        if (found != 1) {
            if (found == 0)
                fprintf(stderr, "collrun: no collrun job of this user is running\n");
            else
                fprintf(stderr, "collrun: %d collrun jobs of this user are running; name one "
                        "(collrun status PID):%s\n", found, list);
            return 1;
        }
    }
    struct coll_job_rank *ranks;
    int n;
    snprintf(path, sizeof path, "%s/%ld.ranks", dir, job.pid);
    if (coll_job_status_file("collrun", path, &ranks, &n) != 0) {
        fprintf(stderr, "collrun: rank 0 of job %ld writes that file once its communicator is "
                "up (collCommInitFromEnv), when it runs on this host; otherwise ask a rank "
                "with collinfo --status HOST:PORT (COLL_DEBUG=INFO logs it)\n", job.pid);
        return 1;
    }
    uint8_t secret[COLL_SECRET_BYTES];
    char err[160], title[PATH_MAX + 64];
    if (!coll_wire_secret_text(job.comm_id, job.secret, secret, err, sizeof err)) {
        fprintf(stderr, "collrun: job %ld: %s\n", job.pid, err);
        free(ranks);
        return 1;
    }
    snprintf(title, sizeof title, "collrun job %ld: %d rank%s of %s", job.pid, n,
             n > 1 ? "s" : "", job.program);
    int rc = coll_job_status_report("collrun", ranks, n, secret, wait_ms, json, title, stdout);
    free(ranks);
    return rc;
}

static int run_setup(struct run_state *st)
{
    unsigned char raw[16];
    if (gethostname(st->hostname, sizeof st->hostname - 1) != 0)
        snprintf(st->hostname, sizeof st->hostname, "localhost");
    if (st->opts.hosts != NULL) {
        st->hosts = st->opts.hosts;
        st->nhosts = st->opts.nhosts;
        st->multi = true;
        for (int h = 0; h < st->nhosts; h++) {
            struct run_host *host = &st->hosts[h];
            host->local = strchr(host->name, '@') == NULL &&
                          (run_is_loopback_name(host->addr) ||
                           run_same_name(host->addr, st->hostname));
        }
    } else {
        st->hosts = calloc(1, sizeof *st->hosts);
        if (st->hosts == NULL)
            run_die_nomem(st);
        st->hosts[0] = (struct run_host){
            .name = st->hostname, .addr = st->hostname, .slots = st->opts.nranks, .local = true};
        st->nhosts = 1;
    }
    run_map_ranks(st);
    if (run_topo_load(&st->topo) != 0) {
        fprintf(stderr, "collrun: cannot read the CPUs this process may use: %s\n",
                strerror(errno));
        return -1;
    }
    if (st->any_remote && run_setup_remote(st) != 0)
        return -1;
    if (run_choose_comm_id(st) != 0)
        return -1;
    if (run_random(raw, sizeof raw) != 0) {
        fprintf(stderr, "collrun: cannot read random bytes for COLL_SECRET\n");
        return -1;
    }
    for (size_t i = 0; i < sizeof raw; i++)
        snprintf(st->secret + 2 * i, 3, "%02x", raw[i]);
    run_status_paths(st);

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
        .lifeline = {-1, -1},
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
    /* The remote shells hold the read end now; the write end stays open until collrun
     * exits, however it exits. */
    if (st.lifeline[0] >= 0)
        close(st.lifeline[0]);
    run_status_write(&st);
    run_loop(&st);
    run_status_remove(&st);

    for (int r = 0; r < opts->nranks; r++) {
        free(st.ranks[r].streams[0].line.data);
        free(st.ranks[r].streams[1].line.data);
    }
    free(st.ranks);
    free(st.outs[0].queue.data);
    free(st.outs[1].queue.data);
    free(st.cmd.data);
    free(st.rsh_copy);
    free(st.rsh_argv);
    free(st.self_exe);
    free(st.cwd);
    if (opts->hosts == NULL)
        free(st.hosts);
    run_topo_free(&st.topo);
    close(st.sigfd);
    close(st.devnull);
    return st.exit_code < 0 ? 0 : st.exit_code;
}

/* ---- collrun --rank-helper: a remote rank's supervisor, on the remote host ---- */

struct run_helper {
    pid_t pid;  /* the program, leader of its own process group */
    int status; /* its wait status, once done */
    bool done;
    int lifeline; /* stdin while it is watched; -1 otherwise */
    enum run_phase phase;
    double deadline;
};

/* Sends sig to the program's group now, and SIGKILL after the helper's grace period. */
static void run_helper_kill(struct run_helper *h, int sig)
{
    if (h->phase != RUN_RUNNING)
        return;
    h->phase = RUN_TERMINATING;
    h->deadline = run_now() + RUN_HELPER_GRACE_S;
    killpg(h->pid, sig);
    killpg(h->pid, SIGCONT);
}

/* Ends the helper the way the program ended: same exit code, or same signal. */
static _Noreturn void run_helper_exit(int status)
{
    fflush(NULL);
    if (WIFEXITED(status))
        _exit(WEXITSTATUS(status));
    int sig = WTERMSIG(status);
    /* The program has left its core already, if it was to leave one. */
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    signal(sig, SIG_DFL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    sigprocmask(SIG_UNBLOCK, &set, NULL);
    raise(sig);
    _exit(128 + sig);
}

static int run_env_int(const char *name, int def)
{
    const char *v = coll_env_get(name);
    if (v == NULL)
        return def;
    char *end;
    long x = strtol(v, &end, 10);
    return *end != '\0' || x < 0 || x > INT_MAX ? def : (int)x;
}

static bool run_parse_bind(const char *s, enum run_bind *bind_p);

/*   collrun --rank-helper [--host NAME] [--bind MODE] [--report-bindings] -- PROG ARGS
 * Started by the remote-shell command line that run_build_command writes, with the rank's
 * COLL_* variables in its environment and the lifeline on its stdin. */
static int run_helper_main(int argc, char **argv)
{
    enum run_bind bind = RUN_BIND_AUTO;
    bool report = false;
    const char *host = "?";
    int i = 2;
    for (; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) {
            i++;
            break;
        }
        if (strcmp(argv[i], "--report-bindings") == 0) {
            report = true;
        } else if (strcmp(argv[i], "--host") == 0 && i + 1 < argc) {
            host = argv[++i];
        } else if (strcmp(argv[i], "--bind") != 0 || i + 1 >= argc ||
                   !run_parse_bind(argv[++i], &bind)) {
            break;
        }
    }
    if (i >= argc || strcmp(argv[i - 1], "--") != 0) {
        fprintf(stderr, "collrun: --rank-helper is started by collrun --hosts, not by hand\n");
        return RUN_EXIT_USAGE;
    }
    char **prog = argv + i;
    int rank = run_env_int("COLL_RANK", -1);
    int local_rank = run_env_int("COLL_LOCAL_RANK", 0);
    int local_size = run_env_int("COLL_LOCAL_SIZE", 1);

    /* The helper outlives its parent when that is collrun itself (a remote shell that
     * execs, as tools/netns-rsh does): it must stay to stop the program. */
    prctl(PR_SET_PDEATHSIG, 0);
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    struct run_topo topo;
    cpu_set_t cpus;
    bool bound = false;
    if (run_topo_load(&topo) == 0) {
        char what[32];
        bound = run_bind_cpus(&topo, bind, local_rank, local_size, &cpus, what, sizeof what);
        if (report) {
            char list[RUN_SYSFS_MAX];
            run_cpulist_format(&cpus, list, sizeof list);
            fprintf(stderr, "collrun: rank %d on %s: cpus %s (%s)\n", rank, host, list, what);
        }
        run_topo_free(&topo);
    } else {
        fprintf(stderr, "collrun: rank %d on %s: not bound: cannot read the CPUs: %s\n", rank,
                host, strerror(errno));
        run_topo_free(&topo);
    }

    sigset_t set, orig_mask;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    static const int forwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
    for (size_t k = 0; k < sizeof forwarded / sizeof forwarded[0]; k++) {
        struct sigaction old;
        if (sigaction(forwarded[k], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
            sigaddset(&set, forwarded[k]);
    }
    signal(SIGCHLD, SIG_DFL);
    int sigfd = -1;
    if (sigprocmask(SIG_BLOCK, &set, &orig_mask) == 0)
        sigfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sigfd < 0) {
        fprintf(stderr, "collrun: rank %d on %s: cannot watch signals: %s\n", rank, host,
                strerror(errno));
        return RUN_EXIT_INTERNAL;
    }
    /* A note written after the connection is gone must not end the helper. */
    struct sigaction ign = {.sa_handler = SIG_IGN}, orig_pipe;
    sigaction(SIGPIPE, &ign, &orig_pipe);
    /* Only a pipe or a socket is a lifeline; a terminal or /dev/null (a remote shell that
     * passes no stdin) is not watched. */
    struct stat in;
    struct run_helper h = {.lifeline = -1, .phase = RUN_RUNNING};
    if (fstat(STDIN_FILENO, &in) == 0 && (S_ISFIFO(in.st_mode) || S_ISSOCK(in.st_mode)))
        h.lifeline = STDIN_FILENO;
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devnull < 0) {
        fprintf(stderr, "collrun: cannot open /dev/null: %s\n", strerror(errno));
        return RUN_EXIT_INTERNAL;
    }
    pid_t self = getpid();
    fflush(NULL);
    h.pid = fork();
    if (h.pid == 0) {
        if (setpgid(0, 0) != 0 || prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != self ||
            dup2(devnull, STDIN_FILENO) < 0 ||
            (bound && sched_setaffinity(0, sizeof cpus, &cpus) != 0)) {
            fprintf(stderr, "collrun: cannot set up rank %d on %s: %s\n", rank, host,
                    strerror(errno));
            _exit(RUN_EXIT_INTERNAL);
        }
        sigaction(SIGPIPE, &orig_pipe, NULL);
        sigprocmask(SIG_SETMASK, &orig_mask, NULL);
        execvp(prog[0], prog);
        fprintf(stderr, "collrun: cannot execute %s: %s\n", prog[0], strerror(errno));
        _exit(RUN_EXIT_NOEXEC);
    }
    if (h.pid < 0) {
        fprintf(stderr, "collrun: cannot start rank %d on %s: %s\n", rank, host,
                strerror(errno));
        return RUN_EXIT_INTERNAL;
    }
    setpgid(h.pid, h.pid);
    close(devnull);

    for (;;) {
        int status;
        pid_t pid;
        while ((pid = waitpid(-1, &status, WNOHANG)) > 0 || (pid < 0 && errno == EINTR)) {
            if (pid == h.pid) {
                h.done = true;
                h.status = status;
            }
        }
        /* Done once the program and everything left in its group have ended. */
        if (h.done && killpg(h.pid, 0) < 0 && errno == ESRCH)
            run_helper_exit(h.status);
        double now = run_now();
        if (h.done && h.phase == RUN_RUNNING)
            run_helper_kill(&h, SIGTERM); /* what the program left behind */
        if (h.phase == RUN_TERMINATING && now >= h.deadline) {
            killpg(h.pid, SIGKILL);
            h.phase = RUN_KILLED;
            h.deadline = now + RUN_KILL_GRACE_S;
        } else if (h.phase == RUN_KILLED && now >= h.deadline) {
            fprintf(stderr, "collrun: rank %d on %s: giving up on processes that outlived "
                    "SIGKILL\n", rank, host);
            /* A wait status of SIGKILL reads as death by SIGKILL. */
            run_helper_exit(h.done ? h.status : SIGKILL);
        }
        struct pollfd pfds[2] = {{.fd = sigfd, .events = POLLIN},
                                 {.fd = h.lifeline, .events = POLLIN}};
        int timeout = -1;
        if (h.phase == RUN_TERMINATING || h.phase == RUN_KILLED)
            timeout = run_ms_until(h.deadline, now);
        if (h.done && (timeout < 0 || timeout > RUN_GROUP_POLL_MS))
            timeout = RUN_GROUP_POLL_MS;
        if (poll(pfds, h.lifeline >= 0 ? 2 : 1, timeout) < 0)
            continue;
        struct signalfd_siginfo si;
        while (pfds[0].revents != 0 && read(sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
            if (si.ssi_signo == SIGCHLD)
                continue;
            if (h.phase == RUN_RUNNING) {
                run_helper_kill(&h, (int)si.ssi_signo);
            } else if (h.phase == RUN_TERMINATING) {
                /* A second signal means: now. */
                killpg(h.pid, SIGKILL);
                h.phase = RUN_KILLED;
                h.deadline = now + RUN_KILL_GRACE_S;
            }
        }
        if (h.lifeline >= 0 && pfds[1].revents != 0) {
            char buf[256];
            ssize_t n = read(h.lifeline, buf, sizeof buf);
            if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
                /* collrun, or the connection to it, is gone. */
                h.lifeline = -1;
                run_helper_kill(&h, SIGTERM);
            }
        }
    }
}

/* ---- options ---- */

#define RUN_USAGE                                                                          \
    "Usage: collrun (-n N | --hosts H[:N],...) [OPTIONS] [--] PROG [ARGS...]\n"
static void run_help(FILE *f)
{
    fprintf(f,
            RUN_USAGE
            "       collrun status [PID] [--json] [--wait MS]\n"
            "       collrun --env | --help | --version\n"
            "\n"
            "Starts N ranks of PROG with COLL_RANK, COLL_NRANKS, COLL_COMM_ID, COLL_SECRET,\n"
            "COLL_LOCAL_RANK and COLL_LOCAL_SIZE set, and waits for them.\n"
            "\n"
            "  -n N, -np N   number of ranks, 1 to %d (with --hosts: at most the slots,\n"
            "                which are the default); --np N is the same\n"
            "  --hosts LIST  run on these hosts: host[:slots],... (slots default to 1;\n"
            "                user@host and [ipv6] work); localhost and this host's name run\n"
            "                here, the others through the remote shell; -H LIST and\n"
            "                --host LIST are the same\n"
            "  -x VAR[=VAL]  set VAR for every rank, on every host: to VAL, or to its value\n"
            "                here (ranks on this host get collrun's whole environment, ranks\n"
            "                on other hosts only the COLL_* and -x variables); repeatable\n"
            "  --rsh CMD     remote shell, called as CMD HOST COMMAND (default: ssh; CMD is\n"
            "                split at blanks)\n"
            "  --map MODE    block (default): fill each host in turn; rr: one rank per host\n"
            "                in turn\n"
            "  --port P      port of rank 0's rendezvous (default: a random one of %d-%d,\n"
            "                free now when rank 0 runs on this host)\n"
            "  --bind MODE   none, core (one core per rank, in turn) or numa (one NUMA node\n"
            "                per rank, in turn); default: core when a host's ranks fit its\n"
            "                cores, none otherwise\n"
            "  --report-bindings  print each rank's CPUs on stderr\n"
            "  --timeout S   stop all ranks after S seconds (fractional; 0: none) and exit 124;\n"
            "                the default comes from COLLRUN_TIMEOUT\n"
            "  --no-prefix   pass output through as is, without the \"[rank] \" line prefix\n"
            "  --keep-going  a failed rank does not stop the others (for jobs that shrink\n"
            "                their communicator and go on); the exit code is still the\n"
            "                first failure's\n"
            "  --respawn     --keep-going, and a failed rank is replaced by a new process\n"
            "                started as it was, with COLL_JOIN=COLL_COMM_ID's address, to\n"
            "                join the survivors (dp_trainer --elastic; at most 16 a job)\n"
            "  --env         list every COLL_* variable with its default and meaning\n"
            "  status [PID]  ask every rank of this user's running job (or of the one\n"
            "                collrun PID runs) what it is doing, and name the rank the\n"
            "                others wait for; --json: one JSON document; --wait MS: how\n"
            "                long a rank gets to answer (default %d)\n"
            "  -h, --help    show this help\n"
            "  --version     show the version\n"
            "\n"
            "When a rank fails the others get SIGTERM, then SIGKILL after %g s, and collrun\n"
            "exits with the first failure's code (128+N for death by signal N).\n"
            "Exit codes: 0 all ranks succeeded, 2 bad arguments, 124 timeout, 125 collrun\n"
            "failed, 127 PROG cannot be executed, 128+N collrun got signal N.\n"
            "An option of mpirun, srun or torchrun that collrun does not take is refused\n"
            "with collrun's counterpart, if any (docs/collrun.md, \"Coming from mpirun\").\n",
            RUN_MAX_RANKS, RUN_PORT_LOW, RUN_PORT_HIGH, COLL_JOB_STATUS_WAIT_MS,
            RUN_TERM_GRACE_S);
}

__attribute__((format(printf, 1, 2))) static enum run_action run_usage(const char *fmt, ...)
{
    va_list ap;
    fputs("collrun: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\n" RUN_USAGE "Try 'collrun --help' for more information.\n", stderr);
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

static bool run_parse_bind(const char *s, enum run_bind *bind_p)
{
    if (strcmp(s, "none") == 0)
        *bind_p = RUN_BIND_NONE;
    else if (strcmp(s, "core") == 0)
        *bind_p = RUN_BIND_CORE;
    else if (strcmp(s, "numa") == 0)
        *bind_p = RUN_BIND_NUMA;
    else
        return false;
    return true;
}

/* A host name goes to the remote shell's command line, into COLL_COMM_ID and into the
 * prefix: letters, digits and ".-_:%" (':' and '%' only inside [ipv6]). */
static bool run_host_chars_ok(const char *s, bool v6)
{
    if (*s == '\0' || *s == '-')
        return false;
    for (; *s != '\0'; s++) {
        bool ok = (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
                  (*s >= '0' && *s <= '9') || *s == '.' || *s == '-' || *s == '_' ||
                  (v6 && (*s == ':' || *s == '%'));
        if (!ok)
            return false;
    }
    return true;
}

/* Parses one entry of --hosts, "[user@]host[:slots]" or "[user@][ipv6][:slots]". */
static enum run_action run_parse_host(const char *item, struct run_host *h)
{
    char buf[RUN_HOST_MAX + 32];
    if (strlen(item) >= sizeof buf)
        return run_usage("host '%.40s...' in --hosts is too long", item);
    snprintf(buf, sizeof buf, "%s", item);
    char *at = strchr(buf, '@');
    char *host = at != NULL ? at + 1 : buf;
    bool v6 = host[0] == '[';
    char *close_b = v6 ? strchr(host, ']') : NULL;
    if (v6 && close_b == NULL)
        return run_usage("invalid host '%s' in --hosts (no ']')", item);
    char *colon = strchr(v6 ? close_b : host, ':');
    h->slots = 1;
    if (colon != NULL) {
        *colon = '\0';
        if (!run_parse_nranks(colon + 1, &h->slots))
            return run_usage("invalid number of ranks '%s' for host '%s' in --hosts (want 1 "
                             "to %d)", colon + 1, buf, RUN_MAX_RANKS);
    }
    if (v6) {
        if (close_b[1] != '\0')
            return run_usage("invalid host '%s' in --hosts", item);
        *close_b = '\0';
        host++;
    }
    if (at != NULL)
        *at = '\0';
    if (!run_host_chars_ok(host, v6) || (at != NULL && !run_host_chars_ok(buf, false)))
        return run_usage("invalid host '%s' in --hosts", item);
    size_t ulen = at != NULL ? strlen(buf) + 1 : 0;
    h->addr = strdup(host);
    h->name = malloc(ulen + strlen(host) + 1);
    if (h->addr == NULL || h->name == NULL)
        run_die_nomem(NULL);
    sprintf(h->name, "%s%s%s", at != NULL ? buf : "", at != NULL ? "@" : "", host);
    return RUN_ACT_RUN;
}

static enum run_action run_parse_hosts(const char *spec, struct run_opts *o)
{
    int n = 1;
    for (const char *p = spec; *p != '\0'; p++)
        n += *p == ',';
    if (n > RUN_MAX_RANKS)
        return run_usage("too many hosts in --hosts (at most %d)", RUN_MAX_RANKS);
    o->hosts = calloc((size_t)n, sizeof *o->hosts);
    if (o->hosts == NULL)
        run_die_nomem(NULL);
    long slots = 0;
    const char *p = spec;
    for (int k = 0; k < n; k++) {
        size_t len = strcspn(p, ",");
        char item[RUN_HOST_MAX + 32];
        if (len == 0)
            return run_usage("empty host in --hosts '%s'", spec);
        if (len >= sizeof item)
            return run_usage("host '%.40s...' in --hosts is too long", p);
        memcpy(item, p, len);
        item[len] = '\0';
        o->nhosts = k + 1;
        if (run_parse_host(item, &o->hosts[k]) != RUN_ACT_RUN)
            return RUN_ACT_USAGE;
        slots += o->hosts[k].slots;
        p += len + 1;
    }
    if (slots > RUN_MAX_RANKS)
        return run_usage("--hosts has %ld slots, more than %d", slots, RUN_MAX_RANKS);
    if (o->nranks == 0)
        o->nranks = (int)slots;
    else if (o->nranks > slots)
        return run_usage("-n %d is more than the %ld slots of --hosts", o->nranks, slots);
    return RUN_ACT_RUN;
}

static void run_free_hosts(struct run_opts *o)
{
    for (int h = 0; h < o->nhosts; h++) {
        free(o->hosts[h].name);
        free(o->hosts[h].addr);
    }
    free(o->hosts);
    o->hosts = NULL;
}

/* Matches "--name VALUE" and "--name=VALUE": false when a is another option; otherwise
 * *val_p is the value, NULL when it is missing. */
static bool run_opt_value(const char *a, const char *name, int argc, char **argv, int *i,
                          const char **val_p)
{
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0 || (a[n] != '\0' && a[n] != '='))
        return false;
    *val_p = a[n] == '=' ? a + n + 1 : (*i + 1 < argc ? argv[++*i] : NULL);
    return true;
}

/* Parses -x VAR or -x VAR=VALUE into o->exports, which has room for argc entries. */
static enum run_action run_parse_export(const char *val, int argc, struct run_opts *o)
{
    if (val == NULL)
        return run_usage("option -x needs a variable: -x VAR or -x VAR=VALUE");
    size_t n = strcspn(val, "=");
    bool ok = n > 0 && n <= RUN_VAR_MAX && !(val[0] >= '0' && val[0] <= '9');
    for (size_t k = 0; ok && k < n; k++)
        ok = val[k] == '_' || (val[k] >= 'a' && val[k] <= 'z') ||
             (val[k] >= 'A' && val[k] <= 'Z') || (val[k] >= '0' && val[k] <= '9');
    if (!ok)
        return run_usage("invalid -x '%s' (want VAR or VAR=VALUE, VAR made of letters, digits "
                         "and '_')", val);
    char entry[RUN_VAR_MAX + 2];
    snprintf(entry, sizeof entry, "%.*s=", (int)n, val);
    if (run_is_rank_var(entry))
        return run_usage("-x %s: collrun sets %.*s for each rank itself", val, (int)n, val);
    if (o->exports == NULL) {
        o->exports = calloc((size_t)argc, sizeof *o->exports);
        if (o->exports == NULL)
            run_die_nomem(NULL);
    }
    o->exports[o->nexports++] = val;
    return RUN_ACT_RUN;
}

/* Options of other launchers that collrun does not take, and what to use instead.  The
 * names are compared without their leading dashes, '_' and '-' alike, so that mpirun's
 * -bind-to, torchrun's --nproc_per_node and --nproc-per-node all match. */
static const struct {
    const char *name;
    const char *whose; /* "mpirun's" */
    const char *hint;
} run_foreign_opts[] = {
    {"oversubscribe", "mpirun's",
     "collrun needs none: -n N starts N ranks on this host whatever its cores (--bind then "
     "defaults to none); with --hosts, give a host more slots (host:N)"},
    {"bind-to", "mpirun's", "collrun's is --bind none|core|numa"},
    {"bind-to-core", "mpirun's", "collrun's is --bind core"},
    {"cpu-bind", "srun's", "collrun's is --bind none|core|numa"},
    {"map-by", "mpirun's",
     "collrun's is --map block|rr (--map-by slot or core is block, --map-by node is rr)"},
    {"N", "mpirun's and srun's",
     "collrun has none: give each host's ranks as its slots, --hosts host:N,... (-n N alone "
     "runs N ranks on this host)"},
    {"npernode", "mpirun's",
     "collrun has none: give each host's ranks as its slots, --hosts host:N,..."},
    {"ppn", "mpiexec's",
     "collrun has none: give each host's ranks as its slots, --hosts host:N,..."},
    {"ntasks-per-node", "srun's",
     "collrun has none: give each host's ranks as its slots, --hosts host:N,..."},
    {"nproc-per-node", "torchrun's",
     "collrun's is -n N on this host; with several hosts, --hosts host:N,... (one collrun "
     "starts them all)"},
    {"nnodes", "torchrun's",
     "collrun has none: list the hosts in --hosts host[:slots],... and one collrun starts "
     "every host's ranks"},
    {"nodes", "srun's",
     "collrun has none: list the hosts in --hosts host[:slots],... and one collrun starts "
     "every host's ranks"},
    {"node-rank", "torchrun's",
     "collrun has none: one collrun, given every host in --hosts, starts all the ranks"},
    {"master-addr", "torchrun's",
     "collrun has none: it picks the rendezvous (rank 0's host); --port sets its port"},
    {"master-port", "torchrun's", "collrun's is --port P"},
    {"rdzv-endpoint", "torchrun's",
     "collrun has none: it picks the rendezvous (rank 0's host); --port sets its port"},
    {"standalone", "torchrun's", "collrun needs none: -n N runs N ranks on this host"},
    {"ntasks", "srun's", "collrun's is -n N"},
    {"c", "mpirun's", "mpirun's -c N is collrun's -n N"},
    {"hosts", "mpiexec's", "collrun's is --hosts host[:slots],... (two dashes), or -H"},
    {"hostfile", "mpirun's",
     "collrun has no host file: list the hosts in --hosts host[:slots],... (for a file of "
     "one host per line: --hosts \"$(paste -sd, FILE)\")"},
    {"machinefile", "mpirun's",
     "collrun has no host file: list the hosts in --hosts host[:slots],... (for a file of "
     "one host per line: --hosts \"$(paste -sd, FILE)\")"},
    {"nodelist", "srun's", "collrun's is --hosts host[:slots],..."},
    {"genv", "mpiexec's", "collrun's is -x VAR=VALUE"},
    {"env", "mpiexec's", "collrun's is -x VAR=VALUE (--env lists the COLL_* variables)"},
    {"genvall", "mpiexec's",
     "collrun needs none: ranks on this host get collrun's whole environment; -x VAR passes "
     "VAR to other hosts"},
    {"export", "srun's",
     "collrun's is -x VAR[=VALUE], once per variable; ranks on this host get collrun's whole "
     "environment"},
    {"mca", "mpirun's",
     "collrun has none: the library's settings are COLL_* variables in collrun's environment "
     "(collrun --env lists them)"},
    {"allow-run-as-root", "mpirun's", "collrun needs none: it runs as root as it runs as anyone"},
    {"tag-output", "mpirun's",
     "collrun needs none: it prefixes every line with [rank] unless given --no-prefix"},
    {"wdir", "mpirun's", "collrun has none: ranks start in collrun's directory, on every host"},
    {"chdir", "srun's", "collrun has none: ranks start in collrun's directory, on every host"},
    {"time", "srun's", "collrun's is --timeout S (seconds)"},
    {"launcher", "mpiexec's", "collrun's is --rsh CMD"},
    {"launch-agent", "mpirun's", "collrun's is --rsh CMD"},
};

/* The index in run_foreign_opts of another launcher's option a, or -1. */
static int run_foreign_opt(const char *a)
{
    a += strspn(a, "-");
    size_t n = strcspn(a, "=");
    for (size_t k = 0; k < sizeof run_foreign_opts / sizeof run_foreign_opts[0]; k++) {
        const char *name = run_foreign_opts[k].name;
        size_t j = 0;
        while (j < n && name[j] != '\0' &&
               (a[j] == name[j] || (a[j] == '_' && name[j] == '-')))
            j++;
        if (j == n && name[j] == '\0')
            return (int)k;
    }
    return -1;
}

static enum run_action run_parse_args(int argc, char **argv, struct run_opts *o)
{
    bool have_timeout = false, have_map = false, have_rsh = false;
    const char *hosts = NULL;
    *o = (struct run_opts){.prefix = true, .rsh = "ssh"};
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        const char *val = NULL;
        if (a[0] != '-' || strcmp(a, "-") == 0)
            break;
        bool short_n = strcmp(a, "-n") == 0 || (a[1] == 'n' && a[2] >= '0' && a[2] <= '9');
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
        } else if (strcmp(a, "--respawn") == 0) {
            o->respawn = true;
            o->keep_going = true;
        } else if (strcmp(a, "--report-bindings") == 0) {
            o->report_bindings = true;
        } else if (short_n || run_opt_value(a, "-np", argc, argv, &i, &val) ||
                   run_opt_value(a, "--np", argc, argv, &i, &val)) {
            /* -n N and -nN, and mpirun's -np N and --np N. */
            if (short_n)
                val = a[2] != '\0' ? a + 2 : (i + 1 < argc ? argv[++i] : NULL);
            if (val == NULL)
                return run_usage("option %s needs a number of ranks", a);
            if (!run_parse_nranks(val, &o->nranks))
                return run_usage("invalid number of ranks '%s' (want 1 to %d)", val, RUN_MAX_RANKS);
        } else if (strcmp(a, "-x") == 0) {
            if (run_parse_export(i + 1 < argc ? argv[++i] : NULL, argc, o) != RUN_ACT_RUN)
                return RUN_ACT_USAGE;
        } else if (run_opt_value(a, "--timeout", argc, argv, &i, &val)) {
            if (val == NULL)
                return run_usage("option --timeout needs a number of seconds");
            if (!run_parse_seconds(val, &o->timeout_s))
                return run_usage("invalid timeout '%s' (want seconds >= 0)", val);
            have_timeout = true;
        } else if (run_opt_value(a, "--hosts", argc, argv, &i, &val) ||
                   run_opt_value(a, "--host", argc, argv, &i, &val) ||
                   run_opt_value(a, "-host", argc, argv, &i, &val) ||
                   run_opt_value(a, "-H", argc, argv, &i, &val)) {
            /* mpirun's -H and --host are --hosts: host[:slots],..., one slot by default. */
            if (val == NULL || val[0] == '\0')
                return run_usage("option %s needs a list of hosts", a);
            hosts = val;
        } else if (run_opt_value(a, "--rsh", argc, argv, &i, &val)) {
            if (val == NULL || strspn(val, " \t") == strlen(val))
                return run_usage("option --rsh needs a command");
            o->rsh = val;
            have_rsh = true;
        } else if (run_opt_value(a, "--map", argc, argv, &i, &val)) {
            if (val != NULL && strcmp(val, "block") == 0)
                o->map = RUN_MAP_BLOCK;
            else if (val != NULL && strcmp(val, "rr") == 0)
                o->map = RUN_MAP_RR;
            else
                return run_usage("invalid --map '%s' (want block or rr)", val ? val : "");
            have_map = true;
        } else if (run_opt_value(a, "--bind", argc, argv, &i, &val)) {
            if (val == NULL || !run_parse_bind(val, &o->bind))
                return run_usage("invalid --bind '%s' (want none, core or numa)",
                                 val ? val : "");
        } else if (run_opt_value(a, "--port", argc, argv, &i, &val)) {
            char *end;
            long p = val != NULL ? strtol(val, &end, 10) : 0;
            if (val == NULL || end == val || *end != '\0' || p < 1 || p > 65535)
                return run_usage("invalid --port '%s' (want 1 to 65535)", val ? val : "");
            o->port = (int)p;
        } else {
            int k = run_foreign_opt(a);
            if (k >= 0)
                return run_usage("unknown option '%s' (%s): %s", a, run_foreign_opts[k].whose,
                                 run_foreign_opts[k].hint);
            return run_usage("unknown option '%s'", a);
        }
    }
    if (hosts != NULL) {
        if (run_parse_hosts(hosts, o) != RUN_ACT_RUN)
            return RUN_ACT_USAGE;
    } else {
        if (o->nranks == 0)
            return run_usage("missing -n N, the number of ranks (or --hosts)");
        if (have_map || have_rsh)
            return run_usage("--map and --rsh need --hosts");
    }
    if (i >= argc)
        return run_usage("missing the program to run");
    o->argv = argv + i;
    const char *env = coll_env_get("COLLRUN_TIMEOUT");
    if (!have_timeout && env != NULL && env[0] != '\0' && !run_parse_seconds(env, &o->timeout_s))
        return run_usage("invalid COLLRUN_TIMEOUT '%s' (want seconds >= 0)", env);
    /* Likely a typo, and remote ranks would keep whatever their login shell sets. */
    for (int x = 0; x < o->nexports; x++) {
        if (strchr(o->exports[x], '=') == NULL && run_env_entry(o->exports[x]) == NULL)
            fprintf(stderr, "collrun: note: -x %s: %s is not set here, so the ranks get no "
                    "value for it from collrun\n", o->exports[x], o->exports[x]);
    }
    return RUN_ACT_RUN;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "status") == 0)
        return run_status_main(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "--rank-helper") == 0)
        return run_helper_main(argc, argv);
    struct run_opts opts;
    enum run_action act = run_parse_args(argc, argv, &opts);
    int code = 0;
    switch (act) {
    case RUN_ACT_HELP:
        run_help(stdout);
        break;
    case RUN_ACT_VERSION:
        printf("collrun (libcollective) %d.%d.%d\n", COLL_MAJOR, COLL_MINOR, COLL_PATCH);
        break;
    case RUN_ACT_ENV:
        coll_param_print(stdout);
        code = fflush(stdout) == 0 ? 0 : RUN_EXIT_INTERNAL;
        break;
    case RUN_ACT_USAGE:
        code = RUN_EXIT_USAGE;
        break;
    case RUN_ACT_RUN:
        /* Nothing buffered may be duplicated into the children by fork. */
        fflush(NULL);
        code = run_main(&opts);
        break;
    }
    run_free_hosts(&opts);
    free(opts.exports);
    return code;
}
