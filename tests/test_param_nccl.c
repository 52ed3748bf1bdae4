/*
 * NCCL's variables read in place of unset COLL_ ones (lib/base/param.c, docs/env.md
 * "NCCL's variables"): NCCL_SOCKET_IFNAME, NCCL_DEBUG, NCCL_DEBUG_SUBSYS,
 * NCCL_DEBUG_FILE, NCCL_BUFFSIZE, NCCL_ALGO, NCCL_COMM_ID, the socket counts and
 * the transports set alone (taken, translated), unset (the default) and beside
 * the COLL_ variable (which wins); NCCL variables with no meaning here and
 * unknown ones (one INFO line each, no WARN, init still succeeds).
 *
 * Parameters and the log are read once per process, so each scenario runs in a
 * child with every COLL_* and NCCL_* variable cleared first, then only the
 * scenario's set.  The INFO lines are read back from a COLL_DEBUG_FILE (or an
 * NCCL_DEBUG_FILE), and the child's stderr from a file of its own.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "log.h"
#include "param.h"
#include "socket.h"

extern char **environ;

static char log_path[64];
static char err_path[64];

/* Unsets every COLL_* and NCCL_* variable (names first: unsetenv edits environ). */
static void clear_env(void)
{
    char names[256][128];
    int n = 0;
    for (char **e = environ; *e != NULL && n < 256; e++)
        if (strncmp(*e, "COLL_", 5) == 0 || strncmp(*e, "NCCL_", 5) == 0) {
            size_t len = strcspn(*e, "=");
            if (len < sizeof(names[0]))
                snprintf(names[n++], sizeof(names[0]), "%.*s", (int)len, *e);
        }
    for (int i = 0; i < n; i++)
        unsetenv(names[i]);
}

/* The whole of a file, or "" (static buffer). */
static const char *slurp(const char *path)
{
    static char buf[1 << 16];
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return buf;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* Lines of text that contain needle. */
static int count_lines(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        const char *hit = strstr(p, needle);
        if (hit != NULL && hit < p + len)
            n++;
        p += len + (nl ? 1 : 0);
    }
    return n;
}

static int str_eq(const char *a, const char *b)
{
    return (a == NULL || b == NULL) ? a == b : strcmp(a, b) == 0;
}

#define CHECK_STR(id, want)                                                                   \
    do {                                                                                      \
        const char *got_ = coll_param_str(id), *want_ = (want);                               \
        CHECK_MSG(str_eq(got_, want_), "%s: got '%s', want '%s'", #id, got_ ? got_ : "NULL",  \
                  want_ ? want_ : "NULL");                                                    \
    } while (0)
#define CHECK_SRC(id, want) CHECK_MSG(str_eq(coll_param_source(id), (want)), "source of %s", #id)

/* ---- the scenarios' checks, each run in its child ---- */

static void unset(void)
{
    CHECK_STR(COLL_PARAM_SOCKET_IFNAME, NULL);
    CHECK(!coll_param_is_set(COLL_PARAM_SOCKET_IFNAME));
    CHECK_SRC(COLL_PARAM_SOCKET_IFNAME, NULL);
    CHECK_STR(COLL_PARAM_DEBUG, "WARN");
    CHECK_STR(COLL_PARAM_DEBUG_SUBSYS, "ALL");
    CHECK_STR(COLL_PARAM_DEBUG_FILE, NULL);
    CHECK_STR(COLL_PARAM_ALGO, NULL);
    CHECK_STR(COLL_PARAM_COMM_ID, NULL);
    CHECK_STR(COLL_PARAM_TRANSPORTS, NULL);
    CHECK(coll_param_int(COLL_PARAM_BUFFSIZE) == 0 && !coll_param_is_set(COLL_PARAM_BUFFSIZE));
    CHECK(coll_param_int(COLL_PARAM_NSOCKS_PERPEER) == 0);
    CHECK(coll_param_int(COLL_PARAM_IB_GID_INDEX) == -1);
    coll_log_init();
    CHECK(coll_log_level_cur == COLL_LOG_WARN && coll_log_mask_cur == COLL_SUBSYS_ALL);
}

static void ifname(void)
{
    CHECK_STR(COLL_PARAM_SOCKET_IFNAME, "^=docker0");
    CHECK(coll_param_is_set(COLL_PARAM_SOCKET_IFNAME));
    CHECK_SRC(COLL_PARAM_SOCKET_IFNAME, "NCCL_SOCKET_IFNAME");
    /* NCCL's grammar, as COLL_SOCKET_IFNAME takes it */
    const char *spec = coll_param_str(COLL_PARAM_SOCKET_IFNAME);
    CHECK(spec != NULL && !coll_socket_ifname_match(spec, "docker0") &&
          coll_socket_ifname_match(spec, "docker01") && coll_socket_ifname_match(spec, "eth0"));
}

static void both(void)
{
    CHECK_STR(COLL_PARAM_SOCKET_IFNAME, "lo");
    CHECK_SRC(COLL_PARAM_SOCKET_IFNAME, "COLL_SOCKET_IFNAME");
    CHECK_STR(COLL_PARAM_DEBUG, "VERSION");
    CHECK_STR(COLL_PARAM_DEBUG_SUBSYS, "INIT");
    CHECK_STR(COLL_PARAM_ALGO, "naive");
    CHECK(coll_param_int(COLL_PARAM_BUFFSIZE) == 1 << 20);
    CHECK_SRC(COLL_PARAM_BUFFSIZE, "COLL_BUFFSIZE");
    CHECK(coll_param_int(COLL_PARAM_NSOCKS_PERPEER) == 3);
    coll_log_init();
    CHECK(coll_log_level_cur == COLL_LOG_VERSION && coll_log_mask_cur == COLL_SUBSYS_INIT);
}

static void debug_info(void)
{
    CHECK_STR(COLL_PARAM_DEBUG, "INFO");
    CHECK_SRC(COLL_PARAM_DEBUG, "NCCL_DEBUG");
    CHECK_STR(COLL_PARAM_DEBUG_SUBSYS, "^INIT,TCP,VERBS");
    coll_log_init();
    CHECK(coll_log_level_cur == COLL_LOG_INFO);
    CHECK(coll_log_mask_cur == (COLL_SUBSYS_ALL & ~(uint32_t)(COLL_SUBSYS_INIT | COLL_SUBSYS_TCP |
                                                              COLL_SUBSYS_VERBS)));
}

static void debug_abort(void)
{
    CHECK_STR(COLL_PARAM_DEBUG, "INFO"); /* NCCL's ABORT prints its INFO lines too */
    CHECK_STR(COLL_PARAM_DEBUG_SUBSYS, "BOOT,ALGO");
    coll_log_init();
    CHECK(coll_log_mask_cur == (COLL_SUBSYS_BOOT | COLL_SUBSYS_ALGO));
}

static void debug_bad(void)
{
    CHECK_STR(COLL_PARAM_DEBUG, "WARN"); /* not a level: not taken */
    CHECK(!coll_param_is_set(COLL_PARAM_DEBUG));
    CHECK_STR(COLL_PARAM_DEBUG_SUBSYS, "ALL"); /* no name known: not taken */
    CHECK(!coll_param_is_set(COLL_PARAM_DEBUG_SUBSYS));
    coll_log_init();
    CHECK(coll_log_level_cur == COLL_LOG_WARN && coll_log_mask_cur == COLL_SUBSYS_ALL);
    CHECK(count_lines(slurp(err_path), "WARN") == 0);
}

static void buffsize(void)
{
    CHECK(coll_param_int(COLL_PARAM_BUFFSIZE) == 4194304);
    CHECK(coll_param_is_set(COLL_PARAM_BUFFSIZE));
    CHECK_SRC(COLL_PARAM_BUFFSIZE, "NCCL_BUFFSIZE");
    CHECK(coll_param_int(COLL_PARAM_IB_GID_INDEX) == 3);
}

static void buffsize_bad(void)
{
    CHECK(coll_param_int(COLL_PARAM_BUFFSIZE) == 0);
    CHECK(!coll_param_is_set(COLL_PARAM_BUFFSIZE));
    coll_log_init();
    CHECK(count_lines(slurp(err_path), "WARN") == 0); /* a COLL_ one would WARN */
    CHECK(count_lines(slurp(log_path), "NCCL_BUFFSIZE=big is not used: not a number") == 1);
}

static void algo_ring(void)
{
    CHECK_STR(COLL_PARAM_ALGO, "ring");
    CHECK_SRC(COLL_PARAM_ALGO, "NCCL_ALGO");
    CHECK(coll_param_int(COLL_PARAM_NSOCKS_PERPEER) == 8);
    CHECK_STR(COLL_PARAM_TRANSPORTS, "^shm");
    CHECK_STR(COLL_PARAM_COMM_ID, "127.0.0.1:29500");
    CHECK_SRC(COLL_PARAM_COMM_ID, "NCCL_COMM_ID");
}

static void algo_terms(void)
{
    CHECK_STR(COLL_PARAM_ALGO, "allreduce:tree;broadcast:^ring");
    CHECK(coll_param_int(COLL_PARAM_NSOCKS_PERPEER) == 16); /* 8 x 8 capped */
    CHECK_STR(COLL_PARAM_TRANSPORTS, "^shm,verbs");
}

static void algo_none(void)
{
    CHECK_STR(COLL_PARAM_ALGO, NULL); /* nothing translates: the planner chooses */
    CHECK(!coll_param_is_set(COLL_PARAM_ALGO));
    CHECK(coll_param_int(COLL_PARAM_NSOCKS_PERPEER) == 4);
    CHECK_STR(COLL_PARAM_TRANSPORTS, NULL); /* 0 turns nothing off */
}

/* Every NCCL_* variable costs one INFO line, once, with no WARN, and init works. */
static void logged(void)
{
    CHECK_STR(COLL_PARAM_SOCKET_IFNAME, "lo");
    CHECK_STR(COLL_PARAM_ALGO, "ring;broadcast:^tree");
    coll_log_init();
    coll_param_log_nccl(); /* a second call logs nothing */
    collUniqueId id;
    collComm_t comm = NULL;
    CHECK_RES(collGetUniqueId(&id), collSuccess, NULL);
    CHECK_RES(collCommInitRank(&comm, 1, id, 0), collSuccess, NULL);
    if (comm != NULL) {
        int32_t v = 5, sum = 0;
        CHECK_RES(collAllReduce(&v, &sum, 1, collInt32, collSum, comm, NULL), collSuccess, comm);
        CHECK(sum == 5);
        collCommDestroy(comm);
    }
    const char *log = slurp(log_path);
    static const char *const once[] = {
        "NCCL_PROTO is set but has no meaning here: ",
        "NCCL_NVLS_ENABLE is set but has no meaning here: ",
        "NCCL_IB_TIMEOUT is set but has no meaning here: ",
        "NCCL_NOT_A_REAL_VARIABLE is set but is no NCCL variable known here",
        "NCCL_SOCKET_IFNAME=lo is taken as COLL_SOCKET_IFNAME=lo",
        ("NCCL_ALGO=NVLS,Ring;Broadcast:^Tree is taken as COLL_ALGO=ring;broadcast:^tree "
         "(left out nvls: no equivalent here)"),
        "NCCL_BUFFSIZE=4194304 is not used: COLL_BUFFSIZE=2M is set and wins",
    };
    for (size_t i = 0; i < sizeof(once) / sizeof(once[0]); i++)
        CHECK_MSG(count_lines(log, once[i]) == 1, "'%s' %d times in the log", once[i],
                  count_lines(log, once[i]));
    CHECK_MSG(count_lines(log, "COLL INFO ENV NCCL_") == 7, "%d NCCL lines",
              count_lines(log, "COLL INFO ENV NCCL_"));
    CHECK(count_lines(log, "WARN") == 0);
    CHECK(count_lines(slurp(err_path), "WARN") == 0);
}

/* NCCL_DEBUG, NCCL_DEBUG_SUBSYS and NCCL_DEBUG_FILE alone. */
static void logged_nccl_debug(void)
{
    CHECK_STR(COLL_PARAM_DEBUG_FILE, log_path);
    CHECK_STR(COLL_PARAM_DEBUG_SUBSYS, "ENV");
    coll_log_init();
    const char *log = slurp(log_path);
    CHECK(count_lines(log, "NCCL_DEBUG=INFO is taken as COLL_DEBUG=INFO") == 1);
    CHECK(count_lines(log, "NCCL_DEBUG_SUBSYS=ENV,BOGUS is taken as COLL_DEBUG_SUBSYS=ENV "
                           "(left out BOGUS, not a subsystem of NCCL)") == 1);
    CHECK(count_lines(log, "is taken as COLL_DEBUG_FILE=") == 1);
    CHECK(count_lines(log, "WARN") == 0);
}

static void both_transports(void)
{
    CHECK_STR(COLL_PARAM_TRANSPORTS, "tcp");
    CHECK_SRC(COLL_PARAM_TRANSPORTS, "COLL_TRANSPORTS");
}

struct scenario {
    const char *name;
    void (*check)(void);
    const char *vars[12]; /* "NAME=value"; "@LOG" stands for the log file's path */
};

static const struct scenario scenarios[] = {
    {"unset", unset, {NULL}},
    {"ifname", ifname, {"NCCL_SOCKET_IFNAME=^=docker0"}},
    {"both-set", both,
     {"COLL_SOCKET_IFNAME=lo", "NCCL_SOCKET_IFNAME=eth0", "COLL_DEBUG=VERSION", "NCCL_DEBUG=INFO",
      "COLL_DEBUG_SUBSYS=INIT", "NCCL_DEBUG_SUBSYS=NET", "COLL_ALGO=naive", "NCCL_ALGO=Ring",
      "COLL_BUFFSIZE=1M", "NCCL_BUFFSIZE=4194304", "COLL_NSOCKS_PERPEER=3",
      "NCCL_SOCKET_NTHREADS=2"}},
    {"both-set-transports", both_transports, {"COLL_TRANSPORTS=tcp", "NCCL_SHM_DISABLE=1"}},
    {"debug-info", debug_info, {"NCCL_DEBUG=info", "NCCL_DEBUG_SUBSYS=^INIT,NET,BOGUS"}},
    {"debug-abort", debug_abort, {"NCCL_DEBUG=ABORT", "NCCL_DEBUG_SUBSYS=BOOTSTRAP,TUNING"}},
    {"debug-bad", debug_bad, {"NCCL_DEBUG=LOUD", "NCCL_DEBUG_SUBSYS=BOGUS"}},
    {"buffsize", buffsize, {"NCCL_BUFFSIZE=4194304", "NCCL_IB_GID_INDEX=3"}},
    {"buffsize-bad", buffsize_bad,
     {"NCCL_BUFFSIZE=big", "COLL_DEBUG=INFO", "COLL_DEBUG_SUBSYS=ENV", "COLL_DEBUG_FILE=@LOG"}},
    {"algo-ring", algo_ring,
     {"NCCL_ALGO=Ring", "NCCL_SOCKET_NTHREADS=4", "NCCL_NSOCKS_PERTHREAD=2", "NCCL_SHM_DISABLE=1",
      "NCCL_COMM_ID=127.0.0.1:29500"}},
    {"algo-terms", algo_terms,
     {"NCCL_ALGO=^NVLS;allreduce:Tree,PAT;sendrecv:ring;Broadcast:^Ring,CollnetDirect",
      "NCCL_SOCKET_NTHREADS=8", "NCCL_NSOCKS_PERTHREAD=8", "NCCL_SHM_DISABLE=1",
      "NCCL_IB_DISABLE=1"}},
    {"algo-none", algo_none, {"NCCL_ALGO=NVLS", "NCCL_NSOCKS_PERTHREAD=4", "NCCL_SHM_DISABLE=0"}},
    {"logged", logged,
     {"COLL_DEBUG=INFO", "COLL_DEBUG_SUBSYS=ENV", "COLL_DEBUG_FILE=@LOG", "NCCL_PROTO=LL128",
      "NCCL_NVLS_ENABLE=0", "NCCL_IB_TIMEOUT=22", "NCCL_NOT_A_REAL_VARIABLE=1",
      "NCCL_SOCKET_IFNAME=lo", "NCCL_ALGO=NVLS,Ring;Broadcast:^Tree", "NCCL_BUFFSIZE=4194304",
      "COLL_BUFFSIZE=2M"}},
    {"logged-nccl-debug", logged_nccl_debug,
     {"NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=ENV,BOGUS", "NCCL_DEBUG_FILE=@LOG"}},
};

static int run_child(const struct scenario *s)
{
    test_failures = 0; /* the parent's are its own */
    clear_env();
    if (freopen(err_path, "w", stderr) == NULL)
        return 2;
    setvbuf(stderr, NULL, _IONBF, 0); /* the child ends in _exit */
    for (int i = 0; i < 12 && s->vars[i] != NULL; i++) {
        char buf[256];
        snprintf(buf, sizeof(buf), "%s", s->vars[i]);
        char *eq = strchr(buf, '=');
        *eq = '\0';
        setenv(buf, strcmp(eq + 1, "@LOG") == 0 ? log_path : eq + 1, 1);
    }
    s->check();
    if (test_failures)
        fprintf(stderr, "%d check(s) failed\n", test_failures);
    return test_failures ? 1 : 0;
}

int main(void)
{
    snprintf(log_path, sizeof(log_path), "/tmp/coll-nccl-log-%d.txt", (int)getpid());
    snprintf(err_path, sizeof(err_path), "/tmp/coll-nccl-err-%d.txt", (int)getpid());
    for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++) {
        const struct scenario *s = &scenarios[i];
        unlink(log_path);
        unlink(err_path);
        fflush(NULL);
        pid_t pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0)
            _exit(run_child(s));
        int st;
        REQUIRE(waitpid(pid, &st, 0) == pid);
        int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
        if (!ok) { /* the child's stderr and log, for the reader */
            fprintf(stderr, "--- %s (status 0x%x): stderr\n%s", s->name, st, slurp(err_path));
            fprintf(stderr, "--- %s: log\n%s", s->name, slurp(log_path));
        }
        CHECK_MSG(ok, "scenario %s failed", s->name);
        printf("nccl-env %-22s %s\n", s->name, ok ? "ok" : "FAILED");
    }
    unlink(log_path);
    unlink(err_path);
    return test_result();
}
