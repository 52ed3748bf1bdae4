/*
 * The harness of the perf tools: what nccl-tests' common code does, over the
 * public API only.
 *
 * Steps of one run:
 *   1. Parse the flags (nccl-tests' names, plus -t, -A and -J).
 *   2. Start the ranks: with -t N (or with no launcher in the environment, as one
 *      rank) N threads call collCommInitRank with one id from collGetUniqueId;
 *      under collrun or another launcher this process is one rank and calls
 *      collCommInitFromEnv.
 *   3. Gather each rank's pid and host (an allgather) so that rank 0 can print the
 *      "# Using devices" block, then allocate the send, receive and expected
 *      buffers of maxBytes each and agree (an allreduce) that every rank is ready.
 *   4. For each type, op and root: warm up at the largest and smallest size, then
 *      for each size time `iters` calls out of place and in place, combine the time
 *      across ranks (-a), and check one more call against exact expected values.
 *   5. Rank 0 prints one row per size, then the count of failed results and the
 *      average bus bandwidth.
 *
 * Timing and checking use the library itself (a 1-element allreduce as barrier,
 * an allreduce of the time and of the wrong-element counts), so that threads and
 * processes are handled alike.  A rank that finds wrong elements also says so on
 * stderr, with the first bad element, in case the combined count is itself wrong.
 * The types, the inputs, the expected results and that check live in verify.c.
 */
#include "common.h"
#include "device.h"
#include "verify.h"

#include <assert.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PERF_EXIT_OK 0
#define PERF_EXIT_FAIL 1
#define PERF_EXIT_USAGE 2

#define PERF_MAX_THREADS 1024
#define PERF_ALIGN 4096

/* ------------------------------------------------------------------------- */
/* Options                                                                    */

struct perf_opts {
    int nthreads; /* -t; 0 when not given */
    size_t min_bytes;
    size_t max_bytes;
    size_t step_bytes;
    size_t step_factor;
    int iters;
    int warmup;
    int check;   /* checks per result; 0 disables checking */
    int average; /* 0 rank 0, 1 mean, 2 min, 3 max */
    int blocking;
    int stream_null;    /* -y 0: calls on a stream, synchronized once per timed loop */
    int timeout_s;
    int cputime;
    int local_register; /* -R 1: buffers from collMemAlloc */
    int device;         /* -D 1: CUDA device buffers on a CUDA stream */
    int type; /* -1: all */
    int op;   /* -1: all */
    int root; /* -1: all */
    const char *algo;
    const char *json_path;
};

static const char *perf_tool = "perf";

__attribute__((format(printf, 1, 2))) static int perf_usage_error(const char *fmt, ...);

static void perf_usage(FILE *out)
{
    fprintf(out,
            "Usage: %s [options]\n"
            "  -t, --nthreads N       run N ranks as threads of this process (no launcher)\n"
            "  -g, --ngpus N          accepted for compatibility; must be 1\n"
            "  -b, --minbytes SIZE    smallest size (default 32M); K, M, G suffixes\n"
            "  -e, --maxbytes SIZE    largest size (default 32M)\n"
            "  -i, --stepbytes SIZE   size increment when -f is 1 (default 1M)\n"
            "  -f, --stepfactor N     size multiplier (default 1: use -i)\n"
            "  -n, --iters N          timed iterations per size (default 20)\n"
            "  -m, --agg_iters N      accepted for compatibility; must be 1\n"
            "  -w, --warmup_iters N   warm-up iterations (default 5)\n"
            "  -p, --parallel_init 0/1  accepted for compatibility; ranks always init in "
            "parallel\n"
            "  -c, --check N          check results N times per size (default 1; 0: off)\n"
            "  -o, --op OP            sum, prod, max, min, avg or all (default sum)\n"
            "  -d, --datatype TYPE    int8 uint8 int32 uint32 int64 uint64 half float double\n"
            "                         bfloat16 (or float16 float32 float64 bf16), or all "
            "(default float)\n"
            "  -r, --root R           root rank, or all / -1 for every rank (default 0)\n"
            "  -z, --blocking 0/1     1: barrier after each call (calls always block)\n"
            "  -y, --stream_null 0/1  0: issue the calls on a stream and synchronize once per\n"
            "                         timed loop; 1 (default): NULL stream, each call blocks\n"
            "  -T, --timeout S        fail when one call takes more than S seconds (0: off)\n"
            "  -G, --cudagraph N      accepted for compatibility; must be 0\n"
            "  -C, --report_cputime 0/1  label the time column cputime (same value here)\n"
            "  -a, --average 0/1/2/3  time reported: rank 0, mean, min or max over ranks "
            "(default 1)\n"
            "  -R, --local_register 0/1  1: send and receive buffers from collMemAlloc\n"
            "                         (shared memory the peers map; default 0: ordinary memory)\n"
            "  -D, --device 0/1       1: send and receive buffers in CUDA device memory, calls\n"
            "                         on a CUDA stream (as nccl-tests; default 0: host memory)\n"
            "  -A, --algo ALGO        set COLL_ALGO=ALGO before the communicator is created\n"
            "  -J, --json FILE        also write the results as JSON to FILE (rank 0)\n"
            "  -h, --help             this text\n"
            "Without -t, under collrun or another launcher, each process is one rank:\n"
            "  collrun -n 4 %s -b 8 -e 256M -f 2\n",
            perf_tool, perf_tool);
}

static int perf_usage_error(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", perf_tool);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see %s -h)\n", perf_tool);
    return PERF_EXIT_USAGE;
}

/* A size as nccl-tests reads it: a number with an optional K, M or G (powers of
 * 1024).  Returns false for anything else. */
static bool perf_parse_size(const char *s, size_t *v_p)
{
    char *end;
    if (*s == '\0' || *s == '-')
        return false;
    double v = strtod(s, &end);
    if (end == s || !isfinite(v) || v < 0)
        return false;
    double unit = 1;
    switch (*end) {
    case 'k':
    case 'K':
        unit = 1024.0;
        end++;
        break;
    case 'm':
    case 'M':
        unit = 1024.0 * 1024;
        end++;
        break;
    case 'g':
    case 'G':
        unit = 1024.0 * 1024 * 1024;
        end++;
        break;
    default:
        break;
    }
    if (*end != '\0' || v * unit > (double)(SIZE_MAX / 8))
        return false;
    *v_p = (size_t)(v * unit);
    return true;
}

static bool perf_parse_int(const char *s, long lo, long hi, int *v_p)
{
    char *end;
    long v = strtol(s, &end, 0);
    if (end == s || *end != '\0' || v < lo || v > hi)
        return false;
    *v_p = (int)v;
    return true;
}

/* Parses argv into *o.  Returns -1 to go on, else the exit status (0 after -h). */
static int perf_parse(int argc, char **argv, struct perf_opts *o)
{
    static const struct option longopts[] = {
        {"nthreads", required_argument, NULL, 't'},
        {"ngpus", required_argument, NULL, 'g'},
        {"minbytes", required_argument, NULL, 'b'},
        {"maxbytes", required_argument, NULL, 'e'},
        {"stepbytes", required_argument, NULL, 'i'},
        {"stepfactor", required_argument, NULL, 'f'},
        {"iters", required_argument, NULL, 'n'},
        {"agg_iters", required_argument, NULL, 'm'},
        {"warmup_iters", required_argument, NULL, 'w'},
        {"parallel_init", required_argument, NULL, 'p'},
        {"check", required_argument, NULL, 'c'},
        {"op", required_argument, NULL, 'o'},
        {"datatype", required_argument, NULL, 'd'},
        {"root", required_argument, NULL, 'r'},
        {"blocking", required_argument, NULL, 'z'},
        {"stream_null", required_argument, NULL, 'y'},
        {"timeout", required_argument, NULL, 'T'},
        {"cudagraph", required_argument, NULL, 'G'},
        {"report_cputime", required_argument, NULL, 'C'},
        {"average", required_argument, NULL, 'a'},
        {"local_register", required_argument, NULL, 'R'},
        {"device", required_argument, NULL, 'D'},
        {"algo", required_argument, NULL, 'A'},
        {"json", required_argument, NULL, 'J'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (struct perf_opts){
        .min_bytes = 32u << 20,
        .max_bytes = 32u << 20,
        .step_bytes = 1u << 20,
        .step_factor = 1,
        .iters = 20,
        .warmup = 5,
        .check = 1,
        .average = 1,
        .type = collFloat32,
        .op = collSum,
        .root = 0,
        .stream_null = 1,
    };
    opterr = 0; /* our own messages, which name the flag and exit 2 */
    optind = 1;
    for (;;) {
        int c = getopt_long(argc, argv, ":t:g:b:e:i:f:n:m:w:p:c:o:d:r:z:y:T:G:C:a:R:D:A:J:h", longopts,
                            NULL);
        if (c == -1)
            break;
        const char *v = optarg;
        int n = 0;
        collRedOp_t op;
        collDataType_t type;
        switch (c) {
        case 't':
            if (!perf_parse_int(v, 1, PERF_MAX_THREADS, &o->nthreads))
                return perf_usage_error("invalid value '%s' for -t (nthreads): want 1 to %d", v,
                                        PERF_MAX_THREADS);
            break;
        case 'g':
            if (!perf_parse_int(v, 1, 1, &n))
                return perf_usage_error("invalid value '%s' for -g (ngpus): only 1 is supported, "
                                        "one rank per thread or process", v);
            break;
        case 'b':
            if (!perf_parse_size(v, &o->min_bytes))
                return perf_usage_error("invalid value '%s' for -b (minbytes): want a size such "
                                        "as 8, 64K, 256M or 1G", v);
            break;
        case 'e':
            if (!perf_parse_size(v, &o->max_bytes))
                return perf_usage_error("invalid value '%s' for -e (maxbytes): want a size such "
                                        "as 8, 64K, 256M or 1G", v);
            break;
        case 'i':
            if (!perf_parse_size(v, &o->step_bytes))
                return perf_usage_error("invalid value '%s' for -i (stepbytes): want a size", v);
            break;
        case 'f':
            if (!perf_parse_int(v, 1, 1 << 20, &n))
                return perf_usage_error("invalid value '%s' for -f (stepfactor): want an "
                                        "integer >= 1", v);
            o->step_factor = (size_t)n;
            break;
        case 'n':
            if (!perf_parse_int(v, 1, INT_MAX, &o->iters))
                return perf_usage_error("invalid value '%s' for -n (iters): want an integer >= 1",
                                        v);
            break;
        case 'm':
            if (!perf_parse_int(v, 1, 1, &n))
                return perf_usage_error("invalid value '%s' for -m (agg_iters): only 1 is "
                                        "supported (no group calls)", v);
            break;
        case 'w':
            if (!perf_parse_int(v, 0, INT_MAX, &o->warmup))
                return perf_usage_error("invalid value '%s' for -w (warmup_iters): want an "
                                        "integer >= 0", v);
            break;
        case 'p':
            if (!perf_parse_int(v, 0, 1, &n))
                return perf_usage_error("invalid value '%s' for -p (parallel_init): want 0 or 1",
                                        v);
            break;
        case 'c':
            if (!perf_parse_int(v, 0, 1000, &o->check))
                return perf_usage_error("invalid value '%s' for -c (check): want 0 or a count of "
                                        "checks", v);
            break;
        case 'o':
            o->op = -2;
            if (strcmp(v, "all") == 0)
                o->op = -1;
            else if (perf_op_parse(v, &op))
                o->op = (int)op;
            if (o->op == -2)
                return perf_usage_error("invalid value '%s' for -o (op): want sum, prod, max, "
                                        "min, avg or all", v);
            break;
        case 'd':
            o->type = -2;
            if (strcmp(v, "all") == 0)
                o->type = -1;
            else if (perf_type_parse(v, &type))
                o->type = (int)type;
            if (o->type == -2)
                return perf_usage_error("invalid value '%s' for -d (datatype): want int8, uint8, "
                                        "int32, uint32, int64, uint64, half, float, double, "
                                        "bfloat16 or all", v);
            break;
        case 'r':
            if (strcmp(v, "all") == 0)
                o->root = -1;
            else if (!perf_parse_int(v, -1, INT_MAX, &o->root))
                return perf_usage_error("invalid value '%s' for -r (root): want a rank, or all",
                                        v);
            break;
        case 'z':
            if (!perf_parse_int(v, 0, 1, &o->blocking))
                return perf_usage_error("invalid value '%s' for -z (blocking): want 0 or 1", v);
            break;
        case 'y':
            if (!perf_parse_int(v, 0, 1, &o->stream_null))
                return perf_usage_error("invalid value '%s' for -y (stream_null): want 0 or 1", v);
            break;
        case 'T':
            if (!perf_parse_int(v, 0, 1000000, &o->timeout_s))
                return perf_usage_error("invalid value '%s' for -T (timeout): want seconds >= 0",
                                        v);
            break;
        case 'G':
            if (!perf_parse_int(v, 0, 0, &n))
                return perf_usage_error("invalid value '%s' for -G (cudagraph): only 0 is "
                                        "supported", v);
            break;
        case 'C':
            if (!perf_parse_int(v, 0, 1, &o->cputime))
                return perf_usage_error("invalid value '%s' for -C (report_cputime): want 0 or 1",
                                        v);
            break;
        case 'a':
            if (!perf_parse_int(v, 0, 3, &o->average))
                return perf_usage_error("invalid value '%s' for -a (average): want 0 (rank 0), "
                                        "1 (mean), 2 (min) or 3 (max)", v);
            break;
        case 'R':
            if (!perf_parse_int(v, 0, 1, &o->local_register))
                return perf_usage_error("invalid value '%s' for -R (local_register): want 0 "
                                        "(ordinary memory) or 1 (collMemAlloc)", v);
            break;
        case 'D':
            if (!perf_parse_int(v, 0, 1, &o->device))
                return perf_usage_error("invalid value '%s' for -D (device): want 0 (host "
                                        "memory) or 1 (CUDA device memory)", v);
            break;
        case 'A':
            if (*v == '\0')
                return perf_usage_error("empty value for -A (algo)");
            o->algo = v;
            break;
        case 'J':
            if (*v == '\0')
                return perf_usage_error("empty value for -J (json)");
            o->json_path = v;
            break;
        case 'h':
            perf_usage(stdout);
            return PERF_EXIT_OK;
        case ':':
            return perf_usage_error("option '%s' needs a value", argv[optind - 1]);
        default:
            return perf_usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return perf_usage_error("unexpected argument '%s'", argv[optind]);
    if (o->min_bytes > o->max_bytes)
        return perf_usage_error("invalid sizes: minbytes %zu > maxbytes %zu", o->min_bytes,
                                o->max_bytes);
    if (o->step_factor <= 1 && o->step_bytes == 0 && o->min_bytes < o->max_bytes)
        return perf_usage_error("-i (stepbytes) 0 with -f 1 never reaches maxbytes");
    if (o->device && o->local_register)
        return perf_usage_error("-D 1 (device buffers) and -R 1 (collMemAlloc buffers) "
                                "exclude each other");
    return -1;
}

/* ------------------------------------------------------------------------- */
/* Ranks                                                                      */

struct perf_rank;

struct perf_run {
    const struct perf_coll *coll;
    struct perf_opts opts;
    bool threads; /* ranks are threads with an id from collGetUniqueId */
    int nthreads;
    collUniqueId id;
    struct perf_rank *ranks;
    char host[64];
    char cpu[64];
    atomic_bool stop; /* tells the watchdog to end */

    /* Used by rank 0 only. */
    FILE *json;
    bool json_first;
    double bw_sum;
    int bw_count;
    char algos[512];        /* "ring from 8, naive from 32768": what the library chose */
    const char *last_algo;
    char tps[256];          /* "shm from 8": the transports of those calls */
    char last_tps[COLL_CALL_INFO_TRANSPORTS_BYTES];
    collCallInfo_t largest; /* the last out-of-place call at the largest size */
    size_t largest_size;
};

struct perf_rank {
    struct perf_run *run;
    int index; /* thread index in this process */
    pthread_t thread;
    int status;
    collComm_t comm;
    int rank;
    int nranks;
    char *sendbuf;  /* with -D 1, the host copies the data are made and checked in */
    char *recvbuf;
    char *dsend;    /* -D 1: the device buffers the calls get */
    char *drecv;
    void *cu_stream; /* -D 1: the CUDA stream of the calls */
    char *expected;
    size_t buf_bytes;
    uint64_t rep;  /* seed of the next check, the same sequence on every rank */
    int errors;    /* results with wrong elements, the same count on every rank */
    bool poisoned; /* a call failed: abort rather than destroy */
    collCallInfo_t call; /* what the last timed call used (collCommGetLastCallInfo) */
    collStream_t stream; /* -y 0 */

    /* Written by the rank, read by the watchdog thread: no clock reading and no
     * fence per call, which would weigh on 8-byte timings. */
    _Atomic uint64_t busy_calls; /* library calls begun so far */
    atomic_bool busy;            /* inside one of them */
    _Atomic(const char *) busy_what;
    /* The watchdog's own: the count it last saw, and since when. */
    uint64_t wd_calls;
    int64_t wd_since_ns;
    atomic_int label; /* the rank, once known; the thread index before */
};

struct perf_result {
    double time_us;
    double algbw;
    double busbw;
    int64_t wrong;
};

static int64_t perf_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void perf_busy(struct perf_rank *pr, const char *what)
{
    atomic_store_explicit(&pr->busy_what, what, memory_order_relaxed);
    uint64_t n = atomic_load_explicit(&pr->busy_calls, memory_order_relaxed);
    atomic_store_explicit(&pr->busy_calls, n + 1, memory_order_relaxed);
    atomic_store_explicit(&pr->busy, true, memory_order_relaxed);
}

static void perf_idle(struct perf_rank *pr)
{
    atomic_store_explicit(&pr->busy, false, memory_order_relaxed);
}

static void perf_report(struct perf_rank *pr, const char *what, collResult_t res)
{
    fprintf(stderr, "%s: rank %d: %s failed: %s: %s\n", perf_tool, pr->rank, what,
            collGetErrorString(res), collGetLastError(pr->comm));
    pr->poisoned = true;
}

/* Runs a library call under the watchdog; on failure reports it and returns -1
 * from the calling function. */
#define PERF_TRY(pr, what, call)                     \
    do {                                             \
        perf_busy((pr), (what));                     \
        collResult_t perf_res_ = (call);             \
        perf_idle(pr);                               \
        if (perf_res_ != collSuccess) {              \
            perf_report((pr), (what), perf_res_);    \
            return -1;                               \
        }                                            \
    } while (0)

/* With -T, ends the process when one call runs too long: the library's own
 * deadlines (COLL_TIMEOUT_MS) may be far longer than the user wants to wait.
 * A call runs too long when the rank was busy in the same call at every tick
 * for the limit (give or take a tick). */
static void *perf_watchdog(void *arg)
{
    struct perf_run *run = arg;
    int64_t limit = (int64_t)run->opts.timeout_s * 1000000000;
    struct timespec tick = {.tv_sec = 0, .tv_nsec = 50 * 1000 * 1000};
    while (!atomic_load(&run->stop)) {
        nanosleep(&tick, NULL);
        int64_t now = perf_now_ns();
        for (int i = 0; i < run->nthreads; i++) {
            struct perf_rank *pr = &run->ranks[i];
            uint64_t calls = atomic_load_explicit(&pr->busy_calls, memory_order_relaxed);
            if (!atomic_load_explicit(&pr->busy, memory_order_relaxed) ||
                calls != pr->wd_calls) {
                pr->wd_calls = calls;
                pr->wd_since_ns = now;
            } else if (now - pr->wd_since_ns > limit) {
                fflush(stdout);
                fprintf(stderr, "%s: %s: Test timeout (%ds): rank %d in %s\n", perf_tool,
                        run->host, run->opts.timeout_s, atomic_load(&pr->label),
                        atomic_load(&pr->busy_what));
                _exit(PERF_EXIT_FAIL);
            }
        }
    }
    return NULL;
}

static int perf_barrier(struct perf_rank *pr)
{
    int32_t x = 0;
    PERF_TRY(pr, "barrier (allreduce)", collAllReduce(&x, &x, 1, collInt32, collSum, pr->comm, NULL));
    return 0;
}

/* The largest of every rank's v, so that all ranks take the same branch. */
static int perf_agree(struct perf_rank *pr, int32_t *v)
{
    PERF_TRY(pr, "agreement (allreduce)", collAllReduce(v, v, 1, collInt32, collMax, pr->comm, NULL));
    return 0;
}

/* Combines each rank's time as -a says. */
static int perf_combine_time(struct perf_rank *pr, double *sec)
{
    const char *what = "time reduction (allreduce)";
    switch (pr->run->opts.average) {
    case 0:
        PERF_TRY(pr, "time broadcast", collBroadcast(sec, sec, 1, collFloat64, 0, pr->comm, NULL));
        break;
    case 1:
        PERF_TRY(pr, what, collAllReduce(sec, sec, 1, collFloat64, collSum, pr->comm, NULL));
        *sec /= pr->nranks;
        break;
    case 2:
        PERF_TRY(pr, what, collAllReduce(sec, sec, 1, collFloat64, collMin, pr->comm, NULL));
        break;
    default:
        PERF_TRY(pr, what, collAllReduce(sec, sec, 1, collFloat64, collMax, pr->comm, NULL));
        break;
    }
    return 0;
}

/* ------------------------------------------------------------------------- */
/* Header and report (rank 0)                                                 */

struct perf_peer {
    int32_t pid;
    char host[64];
    char cpu[64];
};

static void perf_host_names(struct perf_run *run)
{
    if (gethostname(run->host, sizeof run->host) != 0)
        snprintf(run->host, sizeof run->host, "localhost");
    run->host[sizeof run->host - 1] = '\0';
    /* nccl-tests prints the short name. */
    char *dot = strchr(run->host, '.');
    if (dot != NULL)
        *dot = '\0';

    snprintf(run->cpu, sizeof run->cpu, "host");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f == NULL)
        return;
    char line[256];
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, "model name", 10) != 0)
            continue;
        const char *v = strchr(line, ':');
        if (v == NULL)
            break;
        v++;
        while (*v == ' ' || *v == '\t')
            v++;
        snprintf(run->cpu, sizeof run->cpu, "%s", v);
        run->cpu[strcspn(run->cpu, "\n")] = '\0';
        break;
    }
    fclose(f);
}

/* The transports from this rank to the others, as "shm x3, tcp x4", or "none"
 * on one rank. */
static void perf_transports(const struct perf_rank *pr, char *buf, size_t len)
{
    const char *names[8];
    int counts[8], nn = 0;
    for (int p = 0; p < pr->nranks; p++) {
        if (p == pr->rank)
            continue;
        const char *t = coll_transport_peer_name(pr->comm, p);
        t = t ? t : "unreachable";
        int k = 0;
        while (k < nn && strcmp(names[k], t) != 0)
            k++;
        if (k == nn && nn < 8) {
            names[nn] = t;
            counts[nn++] = 0;
        }
        if (k < nn)
            counts[k]++;
    }
    size_t off = 0;
    buf[0] = '\0';
    for (int k = 0; k < nn && off < len; k++)
        off += (size_t)snprintf(buf + off, len - off, "%s%s x%d", k ? ", " : "", names[k],
                                counts[k]);
    if (nn == 0)
        snprintf(buf, len, "none");
}

static void perf_library_line(const struct perf_rank *pr, char *buf, size_t len)
{
    const struct perf_run *run = pr->run;
    int code = 0;
    if (collGetVersion(&code) != collSuccess)
        code = 0;
    const char *tp = getenv("COLL_TRANSPORTS");
    const char *algo = run->opts.algo != NULL ? run->opts.algo : getenv("COLL_ALGO");
    char used[128];
    perf_transports(pr, used, sizeof(used));
    snprintf(buf, len, "libcollective %d.%d.%d, transport %s (rank %d to its peers: %s), "
             "algorithm %s%s", code / 10000, code / 100 % 100, code % 100,
             tp != NULL && *tp != '\0' ? tp : "auto", pr->rank, used,
             algo != NULL && *algo != '\0' ? algo : "auto",
             run->opts.local_register ? ", buffers from collMemAlloc"
             : run->opts.device       ? ", CUDA device buffers on a CUDA stream"
                                      : "");
}

static void perf_print_header(struct perf_rank *pr, const struct perf_peer *peers)
{
    struct perf_run *run = pr->run;
    const struct perf_opts *o = &run->opts;
    bool factor = o->step_factor > 1;
    char lib[256];
    perf_library_line(pr, lib, sizeof lib);

    printf("# nThread %d nGpus 1 minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d "
           "iters: %d agg iters: 1 validation: %d graph: 0\n",
           run->nthreads, o->min_bytes, o->max_bytes, factor ? o->step_factor : o->step_bytes,
           factor ? "factor" : "bytes", o->warmup, o->iters, o->check);
    if (o->blocking)
        printf("# Blocking Enabled: wait for completion and barrier after each collective \n");
    if (!o->stream_null && !o->device)
        printf("# Stream: calls issued on a collStream_t, synchronized once per timed loop\n");
    printf("# %s\n", lib);
    printf("#\n# Using devices\n");
    for (int r = 0; r < pr->nranks; r++) {
        /* The device number is the rank's index among the ranks of its host. */
        int local = 0;
        for (int q = 0; q < r; q++)
            if (strcmp(peers[q].host, peers[r].host) == 0)
                local++;
        printf("#  Rank %2d Group %2d Pid %6d on %10s device %2d [cpu] %s\n", r, 0,
               (int)peers[r].pid, peers[r].host, local, peers[r].cpu);
    }
    printf("#\n");
    if (run->json != NULL)
        printf("# Writing JSON results to file: %s\n#\n", o->json_path);

    const char *t = o->cputime ? "cputime" : "time";
    printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place  "
           "        \n",
           "", "", "", "", "");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "size", "count",
           "type", "redop", "root", t, "algbw", "busbw", "#wrong", t, "algbw", "busbw", "#wrong");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n", "(B)",
           "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");

    if (run->json != NULL) {
        FILE *j = run->json;
        fprintf(j, "{\n  \"tool\": \"%s\",\n  \"collective\": \"%s\",\n", perf_tool,
                run->coll->name);
        fprintf(j, "  \"library\": \"%s\",\n  \"nranks\": %d,\n  \"nthreads\": %d,\n", lib,
                pr->nranks, run->nthreads);
        fprintf(j,
                "  \"minbytes\": %zu,\n  \"maxbytes\": %zu,\n  \"iters\": %d,\n"
                "  \"warmup_iters\": %d,\n  \"check\": %d,\n  \"average\": %d,\n"
                "  \"blocking\": %d,\n  \"results\": [",
                o->min_bytes, o->max_bytes, o->iters, o->warmup, o->check, o->average,
                o->blocking);
        run->json_first = true;
    }
}

static void perf_format_time(double us, char *buf, size_t len)
{
    if (us >= 10000.0)
        snprintf(buf, len, "%7.0f", us);
    else if (us >= 100.0)
        snprintf(buf, len, "%7.1f", us);
    else
        snprintf(buf, len, "%7.2f", us);
}

static void perf_print_result(struct perf_run *run, const struct perf_result *res)
{
    char time[32];
    char wrong[32];
    perf_format_time(res->time_us, time, sizeof time);
    if (run->opts.check)
        snprintf(wrong, sizeof wrong, "%" PRId64, res->wrong);
    else
        snprintf(wrong, sizeof wrong, "N/A");
    printf("  %7s  %6.2f  %6.2f  %5s", time, res->algbw, res->busbw, wrong);
    run->bw_sum += res->busbw;
    run->bw_count++;
}

/* JSON has no inf or nan; a zero-time result would otherwise produce them. */
static double perf_json_num(double v)
{
    return isfinite(v) ? v : 0.0;
}

static void perf_json_result(FILE *j, const char *key, const struct perf_result *res, bool checked)
{
    fprintf(j, "\"%s\": {\"time_us\": %.3f, \"algbw\": %.6f, \"busbw\": %.6f, \"wrong\": ", key,
            perf_json_num(res->time_us), perf_json_num(res->algbw), perf_json_num(res->busbw));
    if (checked)
        fprintf(j, "%" PRId64 "}", res->wrong);
    else
        fprintf(j, "null}");
}

static void perf_json_row(struct perf_run *run, size_t size, size_t count, const char *type,
                          const char *op, int root, const struct perf_result *oop,
                          const struct perf_result *ip, const collCallInfo_t *call)
{
    FILE *j = run->json;
    if (j == NULL)
        return;
    fprintf(j,
            "%s\n    {\"size\": %zu, \"count\": %zu, \"type\": \"%s\", \"redop\": \"%s\", "
            "\"root\": %d,\n     \"algo\": \"%s\", \"transports\": \"%s\", "
            "\"chunk_bytes\": %zu, \"chunks\": %zu,\n     ",
            run->json_first ? "" : ",", size, count, type, op, root,
            call->algo ? call->algo : "", call->transports, call->chunkBytes, call->chunks);
    perf_json_result(j, "oop", oop, run->opts.check > 0);
    fprintf(j, ",\n     ");
    perf_json_result(j, "ip", ip, run->opts.check > 0);
    fprintf(j, "}");
    fflush(j);
    run->json_first = false;
}

/* ------------------------------------------------------------------------- */
/* Benchmark                                                                  */

static void perf_set_size(struct perf_rank *pr, struct perf_case *c, size_t bytes)
{
    size_t elt = perf_type_size(c->type);
    pr->run->coll->layout(bytes / elt, elt, pr->nranks, &c->lay);
}

/* Points sendp and recvp at the buffers of one call, `shift` bytes in. */
static void perf_place(struct perf_rank *pr, struct perf_case *c, bool in_place, size_t shift)
{
    size_t elt = perf_type_size(c->type);
    char *send = pr->sendbuf + shift;
    char *recv = pr->recvbuf + shift;
    c->in_place = in_place;
    c->sendp = in_place ? recv + c->lay.send_ip_offset * elt * (size_t)pr->rank : send;
    c->recvp = in_place ? recv + c->lay.recv_ip_offset * elt * (size_t)pr->rank : recv;
}

/* Records which algorithm the library ran, once per change of algorithm, and
 * over which transports, once per change of those; and the call at the largest
 * size. */
static void perf_note_algo(struct perf_run *run, const collCallInfo_t *call, size_t size)
{
    const char *algo = call->algo;
    if (algo == NULL)
        return;
    run->largest = *call;
    run->largest_size = size;
    if (run->last_algo == NULL || strcmp(run->last_algo, algo) != 0) {
        size_t len = strlen(run->algos);
        snprintf(run->algos + len, sizeof(run->algos) - len, "%s%s from %zu", len ? ", " : "",
                 algo, size);
        run->last_algo = algo;
    }
    const char *tps = call->transports[0] ? call->transports : "none";
    if (run->tps[0] == '\0' || strcmp(run->last_tps, tps) != 0) {
        size_t len = strlen(run->tps);
        snprintf(run->tps + len, sizeof(run->tps) - len, "%s%s from %zu", len ? ", " : "", tps,
                 size);
        snprintf(run->last_tps, sizeof(run->last_tps), "%s", tps);
    }
}

/* Waits for the calls issued on the stream (-y 0); with a NULL stream they are
 * already done.  Then notes what the last one used. */
static int perf_sync(struct perf_rank *pr)
{
    if (pr->cu_stream != NULL && perf_dev_sync(pr->cu_stream) != 0) {
        fprintf(stderr, "%s: rank %d: cuStreamSynchronize failed\n", perf_tool, pr->rank);
        pr->poisoned = true;
        return -1;
    }
    if (pr->stream != NULL)
        PERF_TRY(pr, "collStreamSynchronize", collStreamSynchronize(pr->stream));
    pr->call = (collCallInfo_t)COLL_CALL_INFO_INITIALIZER;
    PERF_TRY(pr, "collCommGetLastCallInfo", collCommGetLastCallInfo(pr->comm, &pr->call));
    return 0;
}

/* With -D 1, the device address of host copy p (in sendbuf or recvbuf). */
static void *perf_dev_ptr(const struct perf_rank *pr, void *p)
{
    char *c = p;
    if (pr->dsend == NULL || c == NULL)
        return p;
    if (c >= pr->sendbuf && c <= pr->sendbuf + pr->buf_bytes)
        return pr->dsend + (c - pr->sendbuf);
    return pr->drecv + (c - pr->recvbuf);
}

/* With -D 1, copies the host copies of both buffers to the device (to_dev) or
 * the receive buffer back. */
static int perf_dev_copy(struct perf_rank *pr, bool to_dev)
{
    if (pr->dsend == NULL)
        return 0;
    int r = to_dev ? perf_dev_to_dev(pr->dsend, pr->sendbuf, pr->buf_bytes) |
                         perf_dev_to_dev(pr->drecv, pr->recvbuf, pr->buf_bytes)
                   : perf_dev_to_host(pr->recvbuf, pr->drecv, pr->buf_bytes);
    if (r != 0) {
        fprintf(stderr, "%s: rank %d: copying the buffers %s the device failed\n", perf_tool,
                pr->rank, to_dev ? "to" : "from");
        pr->poisoned = true;
    }
    return r;
}

/* One call.  As nccl-tests does, successive iterations move through the whole
 * maxBytes buffers, so that small sizes are not timed from a warm cache only. */
static int perf_start(struct perf_rank *pr, struct perf_case *c, bool in_place, int iter)
{
    const struct perf_coll *coll = pr->run->coll;
    size_t elt = perf_type_size(c->type);
    size_t span = c->lay.send_count > c->lay.recv_count ? c->lay.send_count : c->lay.recv_count;
    size_t total = span * elt;
    size_t steps = total != 0 ? pr->buf_bytes / total : 1;
    perf_place(pr, c, in_place, total * ((size_t)iter % steps));
    PERF_TRY(pr, coll->name,
             coll->run(perf_dev_ptr(pr, c->sendp), perf_dev_ptr(pr, c->recvp),
                       c->lay.param_count, c->type, c->op, c->root, pr->comm,
                       pr->cu_stream != NULL ? pr->cu_stream : pr->stream));
    if (pr->run->opts.blocking)
        return perf_sync(pr) != 0 ? -1 : perf_barrier(pr);
    return 0;
}

static int perf_prepare(struct perf_rank *pr, struct perf_case *c, bool in_place, uint64_t seed)
{
    perf_place(pr, c, in_place, 0);
    c->seed = seed;
    c->expected = pr->expected;
    c->check_count = c->lay.recv_count;
    memset(c->recvp, 0, c->lay.recv_count * perf_type_size(c->type));
    pr->run->coll->init_data(c);
    return perf_dev_copy(pr, true);
}

/* Times one size in one placement, then checks it: nccl-tests' BenchTime. */
static int perf_bench(struct perf_rank *pr, struct perf_case *c, bool in_place,
                      struct perf_result *res)
{
    const struct perf_opts *o = &pr->run->opts;
    size_t elt = perf_type_size(c->type);
    if (o->check && perf_prepare(pr, c, in_place, ++pr->rep) != 0)
        return -1;
    if (perf_start(pr, c, in_place, 0) != 0 || perf_sync(pr) != 0 || perf_barrier(pr) != 0)
        return -1;

    int64_t t0 = perf_now_ns();
    for (int i = 0; i < o->iters; i++)
        if (perf_start(pr, c, in_place, i) != 0)
            return -1;
    if (perf_sync(pr) != 0)
        return -1;
    double sec = (double)(perf_now_ns() - t0) * 1e-9 / o->iters;
    if (perf_combine_time(pr, &sec) != 0)
        return -1;
    res->time_us = sec * 1e6;
    res->algbw = 0;
    res->busbw = 0;
    if (sec > 0)
        pr->run->coll->bandwidth(c->lay.param_count, elt, sec, pr->nranks, &res->algbw,
                                 &res->busbw);

    res->wrong = 0;
    for (int k = 0; k < o->check; k++) {
        if (perf_prepare(pr, c, in_place, ++pr->rep) != 0 ||
            perf_start(pr, c, in_place, 0) != 0 || perf_sync(pr) != 0 ||
            perf_dev_copy(pr, false) != 0)
            return -1;
        res->wrong = perf_check(c, pr->run->coll, perf_tool);
        PERF_TRY(pr, "wrong count reduction (allreduce)",
                 collAllReduce(&res->wrong, &res->wrong, 1, collInt64, collSum, pr->comm, NULL));
        if (res->wrong != 0) {
            pr->errors++;
            break;
        }
    }
    return 0;
}

static size_t perf_next_size(const struct perf_opts *o, size_t size)
{
    size_t next;
    if (o->step_factor > 1)
        next = size == 0 ? 1 : size * o->step_factor;
    else
        next = size + o->step_bytes;
    /* Stop rather than wrap around. */
    if (next <= size || (o->step_factor > 1 && size != 0 && next / o->step_factor != size))
        return SIZE_MAX;
    return next;
}

/* One type, op and root over every size: nccl-tests' TimeTest. */
static int perf_time_test(struct perf_rank *pr, collDataType_t type, collRedOp_t op, int root)
{
    struct perf_run *run = pr->run;
    const struct perf_opts *o = &run->opts;
    struct perf_case c = {
        .rank = pr->rank,
        .nranks = pr->nranks,
        .type = type,
        .op = op,
        .root = root,
    };
    const char *type_name = perf_type_name(type);
    const char *op_name = run->coll->has_op ? perf_op_name(op) : "none";

    if (perf_barrier(pr) != 0)
        return -1;
    perf_set_size(pr, &c, o->max_bytes);
    for (int i = 0; i < o->warmup; i++)
        if (perf_start(pr, &c, false, i) != 0)
            return -1;
    perf_set_size(pr, &c, o->min_bytes);
    for (int i = 0; i < o->warmup; i++)
        if (perf_start(pr, &c, false, i) != 0)
            return -1;
    if (perf_sync(pr) != 0)
        return -1;

    for (size_t size = o->min_bytes; size <= o->max_bytes; size = perf_next_size(o, size)) {
        perf_set_size(pr, &c, size);
        size_t elt = perf_type_size(type);
        size_t shown = (c.lay.send_count > c.lay.recv_count ? c.lay.send_count : c.lay.recv_count) *
                       elt;
        struct perf_result oop;
        struct perf_result ip;
        if (pr->rank == 0)
            printf("%12zu  %12zu  %8s  %6s  %6d", shown, c.lay.param_count, type_name, op_name,
                   root);
        if (perf_bench(pr, &c, false, &oop) != 0)
            return -1;
        collCallInfo_t oop_call = pr->call;
        if (pr->rank == 0) {
            perf_print_result(run, &oop);
            perf_note_algo(run, &oop_call, shown);
        }
        if (perf_bench(pr, &c, true, &ip) != 0)
            return -1;
        if (pr->rank == 0) {
            perf_print_result(run, &ip);
            printf("\n");
            perf_json_row(run, shown, c.lay.param_count, type_name, op_name, root, &oop, &ip,
                          &oop_call);
        }
    }
    return 0;
}

static int perf_run_all(struct perf_rank *pr)
{
    const struct perf_run *run = pr->run;
    const struct perf_opts *o = &run->opts;
    int type_lo = o->type < 0 ? 0 : o->type;
    int type_hi = o->type < 0 ? collNumTypes - 1 : o->type;
    int op_lo = collSum;
    int op_hi = collSum;
    if (run->coll->has_op) {
        op_lo = o->op < 0 ? 0 : o->op;
        op_hi = o->op < 0 ? collNumOps - 1 : o->op;
    }
    int root_lo = -1;
    int root_hi = -1;
    if (run->coll->has_root) {
        root_lo = o->root < 0 ? 0 : o->root;
        root_hi = o->root < 0 ? pr->nranks - 1 : o->root;
    }
    for (int t = type_lo; t <= type_hi; t++)
        for (int op = op_lo; op <= op_hi; op++)
            for (int root = root_lo; root <= root_hi; root++)
                if (perf_time_test(pr, (collDataType_t)t, (collRedOp_t)op, root) != 0)
                    return -1;
    return 0;
}

static void *perf_alloc(size_t bytes, bool shared)
{
    void *p = NULL;
    if (shared ? collMemAlloc(&p, bytes) != collSuccess
               : posix_memalign(&p, PERF_ALIGN, bytes) != 0)
        return NULL;
    /* Touch every page now, so that the first timed calls do not pay for faults. */
    memset(p, 0, bytes);
    return p;
}

/* Everything after init.  Returns the exit status; a failed call sets poisoned. */
static int perf_rank_work(struct perf_rank *pr)
{
    struct perf_run *run = pr->run;
    const struct perf_opts *o = &run->opts;
    PERF_TRY(pr, "collCommCount", collCommCount(pr->comm, &pr->nranks));
    PERF_TRY(pr, "collCommUserRank", collCommUserRank(pr->comm, &pr->rank));
    atomic_store(&pr->label, pr->rank);
    if (run->coll->has_root && o->root >= pr->nranks) {
        if (pr->rank == 0)
            perf_usage_error("invalid value %d for -r (root): there are %d ranks", o->root,
                             pr->nranks);
        return PERF_EXIT_USAGE;
    }

    struct perf_peer mine = {.pid = (int32_t)getpid()};
    static_assert(sizeof mine.host == sizeof run->host && sizeof mine.cpu == sizeof run->cpu,
                  "names copied whole");
    memcpy(mine.host, run->host, sizeof mine.host);
    memcpy(mine.cpu, run->cpu, sizeof mine.cpu);
    struct perf_peer *peers = calloc((size_t)pr->nranks, sizeof *peers);
    if (peers == NULL) {
        fprintf(stderr, "%s: rank %d: out of memory\n", perf_tool, pr->rank);
        pr->poisoned = true; /* the others wait in the allgather: abort */
        return PERF_EXIT_FAIL;
    }
    int32_t failed = 0;
    perf_busy(pr, "rank info (allgather)");
    collResult_t res = collAllGather(&mine, peers, sizeof mine, collUint8, pr->comm, NULL);
    perf_idle(pr);
    if (res != collSuccess) {
        perf_report(pr, "rank info (allgather)", res);
        free(peers);
        return PERF_EXIT_FAIL;
    }

    pr->buf_bytes = o->max_bytes > PERF_ALIGN ? o->max_bytes : PERF_ALIGN;
    pr->sendbuf = perf_alloc(pr->buf_bytes, run->opts.local_register);
    pr->recvbuf = perf_alloc(pr->buf_bytes, run->opts.local_register);
    pr->expected = perf_alloc(pr->buf_bytes, false);
    if (run->opts.device) {
        pr->dsend = perf_dev_alloc(pr->buf_bytes);
        pr->drecv = perf_dev_alloc(pr->buf_bytes);
        pr->cu_stream = perf_dev_stream();
        if (pr->dsend == NULL || pr->drecv == NULL || pr->cu_stream == NULL ||
            perf_dev_copy(pr, true) != 0) {
            fprintf(stderr, "%s: rank %d: cannot set up 2 device buffers of %zu bytes and a "
                    "CUDA stream\n", perf_tool, pr->rank, pr->buf_bytes);
            failed = 1;
        }
    }
    if (pr->sendbuf == NULL || pr->recvbuf == NULL || pr->expected == NULL) {
        fprintf(stderr, "%s: rank %d: cannot allocate 3 buffers of %zu bytes\n", perf_tool,
                pr->rank, pr->buf_bytes);
        failed = 1;
    }
    if (pr->rank == 0 && o->json_path != NULL) {
        run->json = fopen(o->json_path, "w");
        if (run->json == NULL) {
            fprintf(stderr, "%s: cannot open %s for writing: %s\n", perf_tool, o->json_path,
                    strerror(errno));
            failed = 1;
        }
    }
    if (perf_agree(pr, &failed) != 0 || failed) {
        free(peers);
        return PERF_EXIT_FAIL;
    }

    if (pr->rank == 0)
        perf_print_header(pr, peers);
    free(peers);
    if (perf_run_all(pr) != 0) {
        if (pr->rank == 0)
            printf("\n");
        return PERF_EXIT_FAIL;
    }

    if (pr->rank == 0) {
        double avg = run->bw_count ? run->bw_sum / run->bw_count : 0.0;
        printf("# Out of bounds values : %d %s\n", pr->errors, pr->errors ? "FAILED" : "OK");
        printf("# Avg bus bandwidth    : %g \n", avg);
        if (run->algos[0])
            printf("# Algorithm by size (bytes): %s\n", run->algos);
        if (run->tps[0])
            printf("# Transports by size (bytes): %s\n", run->tps);
        const collCallInfo_t *big = &run->largest;
        if (big->algo != NULL) {
            printf("# Largest size, %zu bytes: %s #%llu by %s over %s, %d peer%s, ",
                   run->largest_size, big->func, (unsigned long long)big->seq, big->algo,
                   big->transports[0] ? big->transports : "none", big->peers,
                   big->peers == 1 ? "" : "s");
            if (big->chunks > 0)
                printf("%zu pieces of %zu bytes\n", big->chunks, big->chunkBytes);
            else
                printf("not cut into pieces\n");
        }
        printf("#\n");
        if (run->json != NULL)
            fprintf(run->json,
                    "\n  ],\n  \"out_of_bounds\": %d,\n  \"avg_busbw\": %.6f,\n"
                    "  \"algorithms\": \"%s\",\n  \"transports\": \"%s\"\n}\n",
                    pr->errors, perf_json_num(avg), run->algos, run->tps);
    }
    return pr->errors ? PERF_EXIT_FAIL : PERF_EXIT_OK;
}

static int perf_rank_main(struct perf_rank *pr)
{
    struct perf_run *run = pr->run;
    if (run->opts.device && perf_dev_bind() != 0) {
        fprintf(stderr, "%s: cannot make the CUDA context current\n", perf_tool);
        return PERF_EXIT_FAIL;
    }
    const char *what = run->threads ? "collCommInitRank" : "collCommInitFromEnv";
    perf_busy(pr, what);
    collResult_t res = run->threads
                           ? collCommInitRank(&pr->comm, run->nthreads, run->id, pr->index)
                           : collCommInitFromEnv(&pr->comm);
    perf_idle(pr);
    if (res != collSuccess) {
        fprintf(stderr, "%s: %s failed: %s: %s\n", perf_tool, what, collGetErrorString(res),
                collGetLastError(NULL));
        return PERF_EXIT_FAIL;
    }

    int status = PERF_EXIT_FAIL;
    /* Device buffers take the CUDA stream (-y does not apply). */
    res = run->opts.stream_null || run->opts.device ? collSuccess : collStreamCreate(&pr->stream);
    if (res != collSuccess)
        fprintf(stderr, "%s: collStreamCreate failed: %s\n", perf_tool, collGetLastError(NULL));
    else
        status = perf_rank_work(pr);
    if (pr->stream != NULL && collStreamDestroy(pr->stream) != collSuccess)
        pr->poisoned = true;
    if (pr->poisoned) {
        /* Abort closes this rank's connections at once, so that ranks waiting on
         * it fail now rather than at their deadline. */
        collCommAbort(pr->comm);
        status = PERF_EXIT_FAIL;
    } else {
        perf_busy(pr, "collCommDestroy");
        res = collCommDestroy(pr->comm);
        perf_idle(pr);
        if (res != collSuccess) {
            fprintf(stderr, "%s: rank %d: collCommDestroy failed: %s\n", perf_tool, pr->rank,
                    collGetErrorString(res));
            status = PERF_EXIT_FAIL;
        }
    }
    perf_dev_stream_free(pr->cu_stream);
    perf_dev_free(pr->dsend);
    perf_dev_free(pr->drecv);
    if (pr->run->opts.local_register) {
        collMemFree(pr->sendbuf);
        collMemFree(pr->recvbuf);
    } else {
        free(pr->sendbuf);
        free(pr->recvbuf);
    }
    free(pr->expected);
    return status;
}

static void *perf_rank_thread(void *arg)
{
    struct perf_rank *pr = arg;
    pr->status = perf_rank_main(pr);
    return NULL;
}

/* True when an environment variable the library reads says there are several
 * ranks, so that -t (which makes its own ranks) would clash with a launcher. */
static const char *perf_launcher_size(void)
{
    static const char *const vars[] = {"COLL_NRANKS", "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE",
                                       "SLURM_NTASKS", "PMI_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v != NULL && atoi(v) > 1)
            return vars[i];
    }
    return NULL;
}

static bool perf_launched(void)
{
    static const char *const vars[] = {"COLL_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID",
                                       "PMI_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i]) != NULL)
            return true;
    return false;
}

int perf_main(int argc, char **argv, const struct perf_coll *coll)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *slash = strrchr(argv[0], '/');
    perf_tool = slash != NULL ? slash + 1 : argv[0];

    struct perf_run *run = calloc(1, sizeof *run);
    if (run == NULL) {
        fprintf(stderr, "%s: out of memory\n", perf_tool);
        return PERF_EXIT_FAIL;
    }
    run->coll = coll;
    int status = perf_parse(argc, argv, &run->opts);
    if (status >= 0) {
        free(run);
        return status;
    }
    const struct perf_opts *o = &run->opts;
    if (o->algo != NULL)
        setenv("COLL_ALGO", o->algo, 1);
    char err[256];
    if (o->device && perf_dev_open(err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", perf_tool, err);
        free(run);
        return PERF_EXIT_FAIL;
    }

    if (o->nthreads > 0) {
        const char *var = perf_launcher_size();
        if (var != NULL) {
            free(run);
            return perf_usage_error("-t makes its own ranks and cannot run under a launcher "
                                    "of several ranks (%s=%s)",
                                    var, getenv(var));
        }
        run->threads = true;
        run->nthreads = o->nthreads;
    } else {
        /* Without a launcher, run alone as a single rank, as nccl-tests does. */
        run->threads = !perf_launched();
        run->nthreads = 1;
    }
    perf_host_names(run);

    status = PERF_EXIT_FAIL;
    if (run->threads) {
        collResult_t res = collGetUniqueId(&run->id);
        if (res != collSuccess) {
            fprintf(stderr, "%s: collGetUniqueId failed: %s: %s\n", perf_tool,
                    collGetErrorString(res), collGetLastError(NULL));
            free(run);
            return PERF_EXIT_FAIL;
        }
    }
    run->ranks = calloc((size_t)run->nthreads, sizeof *run->ranks);
    if (run->ranks == NULL) {
        fprintf(stderr, "%s: out of memory\n", perf_tool);
        free(run);
        return PERF_EXIT_FAIL;
    }
    for (int i = 0; i < run->nthreads; i++) {
        struct perf_rank *pr = &run->ranks[i];
        pr->run = run;
        pr->index = i;
        pr->rank = run->threads ? i : -1;
        atomic_init(&pr->busy_calls, 0);
        atomic_init(&pr->busy, false);
        atomic_init(&pr->busy_what, "start");
        atomic_init(&pr->label, pr->rank);
    }
    atomic_init(&run->stop, false);

    pthread_t watchdog;
    bool have_watchdog = false;
    if (o->timeout_s > 0) {
        if (pthread_create(&watchdog, NULL, perf_watchdog, run) != 0)
            fprintf(stderr, "%s: cannot start the -T watchdog; running without it\n", perf_tool);
        else
            have_watchdog = true;
    }

    int started = 1;
    for (; started < run->nthreads; started++) {
        struct perf_rank *pr = &run->ranks[started];
        if (pthread_create(&pr->thread, NULL, perf_rank_thread, pr) != 0) {
            /* The ranks already started time out in init (COLL_TIMEOUT_MS). */
            fprintf(stderr, "%s: cannot start thread %d of %d\n", perf_tool, started,
                    run->nthreads);
            break;
        }
    }
    if (started == run->nthreads) {
        perf_rank_thread(&run->ranks[0]);
        status = run->ranks[0].status;
    }
    for (int i = 1; i < started; i++) {
        pthread_join(run->ranks[i].thread, NULL);
        if (run->ranks[i].status > status)
            status = run->ranks[i].status;
    }

    if (have_watchdog) {
        atomic_store(&run->stop, true);
        pthread_join(watchdog, NULL);
    }
    if (run->json != NULL && fclose(run->json) != 0) {
        fprintf(stderr, "%s: writing %s failed\n", perf_tool, o->json_path);
        status = PERF_EXIT_FAIL;
    }
    free(run->ranks);
    free(run);
    return status;
}
