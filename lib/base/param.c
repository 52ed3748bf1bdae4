/* The table of tunables.  Every COLL_* variable the library reads is one row here;
 * values are read from the environment once per process, under pthread_once, with
 * NCCL's counterpart of a variable read when it is unset (below the table). */
#include "param.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "log.h"

extern char **environ;

static const struct coll_param_def param_defs[COLL_PARAM_COUNT] = {
    [COLL_PARAM_DEBUG] = {"COLL_DEBUG", COLL_PARAM_TYPE_STR, "WARN",
                          "log level: NONE, VERSION, WARN, INFO or TRACE"},
    [COLL_PARAM_DEBUG_SUBSYS] = {"COLL_DEBUG_SUBSYS", COLL_PARAM_TYPE_STR, "ALL",
                                 "subsystems logged at INFO/TRACE: INIT,BOOT,TRANSPORT,TCP,"
                                 "SHM,VERBS,CUDA,COLL,ALGO,ALLOC,ENV or ALL; ^ negates"},
    [COLL_PARAM_DEBUG_FILE] = {"COLL_DEBUG_FILE", COLL_PARAM_TYPE_STR, NULL,
                               "log file instead of stderr; %h expands to the host, %p to "
                               "the pid"},
    [COLL_PARAM_TIMEOUT_MS] = {"COLL_TIMEOUT_MS", COLL_PARAM_TYPE_INT, "300000",
                               "deadline in ms of every wait: bootstrap, connection set-up "
                               "and each collective"},
    [COLL_PARAM_COMM_ID] = {"COLL_COMM_ID", COLL_PARAM_TYPE_STR, NULL,
                            "host:port of the root; rank 0 listens there instead of a "
                            "thread started by collGetUniqueId"},
    [COLL_PARAM_SECRET] = {"COLL_SECRET", COLL_PARAM_TYPE_STR, NULL,
                           "hex secret every connection must show when the id is built "
                           "from the environment (collrun sets a random one)"},
    [COLL_PARAM_STATUS_FILE] = {"COLL_STATUS_FILE", COLL_PARAM_TYPE_STR, NULL,
                                "where rank 0 of collCommInitFromEnv's communicator writes "
                                "every rank's bootstrap address, for collrun status (collrun "
                                "sets it)"},
    [COLL_PARAM_RANK] = {"COLL_RANK", COLL_PARAM_TYPE_INT, NULL,
                         "this process's rank, for collCommInitFromEnv"},
    [COLL_PARAM_NRANKS] = {"COLL_NRANKS", COLL_PARAM_TYPE_INT, NULL,
                           "number of ranks, for collCommInitFromEnv"},
    [COLL_PARAM_SOCKET_IFNAME] = {"COLL_SOCKET_IFNAME", COLL_PARAM_TYPE_STR, NULL,
                                  "interfaces for TCP: prefixes, '^' excludes, '=' exact "
                                  "(eth,ib / ^docker / =eth0); default: the interface "
                                  "that reaches the root, else any but lo and docker*"},
    [COLL_PARAM_SOCKET_FAMILY] = {"COLL_SOCKET_FAMILY", COLL_PARAM_TYPE_STR, NULL,
                                  "AF_INET or AF_INET6 to force an address family"},
    [COLL_PARAM_NSOCKS_PERPEER] = {"COLL_NSOCKS_PERPEER", COLL_PARAM_TYPE_INT, "0",
                                   "TCP sockets per peer and direction (1-16); 0 picks by "
                                   "the interface: 1 on loopback, 2 otherwise"},
    [COLL_PARAM_SOCKET_BUFSIZE] = {"COLL_SOCKET_BUFSIZE", COLL_PARAM_TYPE_SIZE, "0",
                                   "SO_SNDBUF/SO_RCVBUF of data sockets; 0: 512 KiB on "
                                   "loopback, the kernel's autotuning otherwise"},
    [COLL_PARAM_TRANSPORTS] = {"COLL_TRANSPORTS", COLL_PARAM_TYPE_STR, NULL,
                               "transports to use (shm, verbs, tcp; same-host peers take "
                               "shm first); ^ excludes"},
    [COLL_PARAM_ALGO] = {"COLL_ALGO", COLL_PARAM_TYPE_STR, NULL,
                         "algorithm override (ring, tree, naive, rd): ring, or "
                         "allreduce:ring;broadcast:ring; ^ excludes"},
    [COLL_PARAM_CHUNKSIZE] = {"COLL_CHUNKSIZE", COLL_PARAM_TYPE_SIZE, "0",
                              "bytes per pipelined slice; 0: 512 KiB, or 32 KiB when the host "
                              "has more ranks than cores"},
    [COLL_PARAM_BUFFSIZE] = {"COLL_BUFFSIZE", COLL_PARAM_TYPE_SIZE, "0",
                             "bytes of staging per connection (slices in flight x slice); "
                             "0 lets the plan choose"},
    [COLL_PARAM_SPIN_US] = {"COLL_SPIN_US", COLL_PARAM_TYPE_INT, "-1",
                            "microseconds a wait polls without sleeping before it blocks "
                            "in poll(); -1 picks by transport and load (shared memory: "
                            "1 ms; more ranks than cores: less)"},
    [COLL_PARAM_LINK_LATENCY_NS] = {"COLL_LINK_LATENCY_NS", COLL_PARAM_TYPE_INT, "-1",
                                    "latency of one message to a neighbour, for the planner's "
                                    "cost model; -1 measures it at init"},
    [COLL_PARAM_LINK_BW_MBS] = {"COLL_LINK_BW_MBS", COLL_PARAM_TYPE_INT, "-1",
                                "bandwidth of one link in MB/s, for the planner's cost model; "
                                "-1 measures it at init"},
    [COLL_PARAM_MODEL_FILE] = {"COLL_MODEL_FILE", COLL_PARAM_TYPE_STR, NULL,
                               "file of the planner's measurements: read instead of "
                               "measuring when it has them, written when they are taken, so "
                               "that later runs choose the same algorithms"},
    [COLL_PARAM_MODEL_REMEASURE] = {"COLL_MODEL_REMEASURE", COLL_PARAM_TYPE_INT, "0",
                                    "1: measure the machine at every communicator's creation; "
                                    "0: once per process, shared by every later communicator"},
    [COLL_PARAM_SHM_SLOT_BYTES] = {"COLL_SHM_SLOT_BYTES", COLL_PARAM_TYPE_SIZE, "0",
                                   "bytes per slot of a shared-memory ring (4 KiB-64 MiB, a "
                                   "multiple of 64); 0: 256 KiB"},
    [COLL_PARAM_SHM_NSLOTS] = {"COLL_SHM_NSLOTS", COLL_PARAM_TYPE_INT, "0",
                               "slots per shared-memory ring (2-64); 0: 16"},
    [COLL_PARAM_SHM_BUDGET_MB] = {"COLL_SHM_BUDGET_MB", COLL_PARAM_TYPE_INT, "1024",
                                  "MiB of shared memory the rings of all pairs of ranks on a "
                                  "host may take together, over every communicator and process "
                                  "of the user (each ring shrinks to its share of it and to "
                                  "what is left, never below 2 slots of 4 KiB); 0: no budget"},
    [COLL_PARAM_SHM_LEDGER] = {"COLL_SHM_LEDGER", COLL_PARAM_TYPE_STR, NULL,
                               "file in /dev/shm that counts the rings' memory against "
                               "COLL_SHM_BUDGET_MB on this host; unset: "
                               "libcollective-ledger-<uid>, one per user"},
    [COLL_PARAM_SHM_DIRECT_BYTES] = {"COLL_SHM_DIRECT_BYTES", COLL_PARAM_TYPE_SIZE, "262144",
                                     "the direct allreduce on collMemAlloc buffers can run "
                                     "from this many bytes (set: is taken from there); -1: "
                                     "never"},
    [COLL_PARAM_IB_HCA] = {"COLL_IB_HCA", COLL_PARAM_TYPE_STR, NULL,
                           "RDMA devices and ports for verbs: prefixes with optional ports, "
                           "'^' excludes, '=' exact (mlx5_0:1,mlx5_1 / ^mlx5_2 / =rxe0); "
                           "default: the first active port of any device"},
    [COLL_PARAM_IB_GID_INDEX] = {"COLL_IB_GID_INDEX", COLL_PARAM_TYPE_INT, "-1",
                                 "GID index for verbs; -1 picks the IPv4-mapped RoCE v2 GID "
                                 "on RoCE, none (LID) on InfiniBand"},
    [COLL_PARAM_IB_NSLOTS] = {"COLL_IB_NSLOTS", COLL_PARAM_TYPE_INT, "16",
                              "slots per verbs receive ring (2-256)"},
    [COLL_PARAM_IB_SLOT_BYTES] = {"COLL_IB_SLOT_BYTES", COLL_PARAM_TYPE_SIZE, "131072",
                                  "bytes per slot of a verbs receive ring (4 KiB-8 MiB, a "
                                  "multiple of 64)"},
    [COLL_PARAM_IB_RDV_BYTES] = {"COLL_IB_RDV_BYTES", COLL_PARAM_TYPE_SIZE, "131072",
                                 "verbs messages from this size whose buffers are registered "
                                 "on both sides (collMemAlloc, collCommRegister) move by RDMA "
                                 "READ straight between them; -1: never"},
    [COLL_PARAM_REG_CACHE_ENTRIES] = {"COLL_REG_CACHE_ENTRIES", COLL_PARAM_TYPE_INT, "64",
                                      "registrations a communicator keeps with transports "
                                      "that need them (verbs), least recently used evicted"},
    [COLL_PARAM_REG_CACHE_BYTES] = {"COLL_REG_CACHE_BYTES", COLL_PARAM_TYPE_SIZE, "16G",
                                    "bytes those registrations may pin in all"},
    [COLL_PARAM_CHECK_MISMATCH] = {"COLL_CHECK_MISMATCH", COLL_PARAM_TYPE_INT, "0",
                                   "1: every collective first checks that all ranks called it "
                                   "with the same operation, count, datatype, op and root"},
    [COLL_PARAM_STREAM_OVERLAP] = {"COLL_STREAM_OVERLAP", COLL_PARAM_TYPE_INT, "4",
                                   "collectives of one communicator queued on streams that may "
                                   "run at once when their buffers are apart (1-8; 1: one after "
                                   "another)"},
    [COLL_PARAM_DEVICE_STAGE_KEEP] = {"COLL_DEVICE_STAGE_KEEP", COLL_PARAM_TYPE_SIZE, "256M",
                                      "bytes of pinned staging for device buffers that a "
                                      "communicator keeps between calls (docs/device.md)"},
    [COLL_PARAM_TOPO_DUMP_FILE] = {"COLL_TOPO_DUMP_FILE", COLL_PARAM_TYPE_STR, NULL,
                                   "write each rank's topology and transports as JSON there at "
                                   "the end of init (%r rank, %h host, %p pid, %% a %)"},
    [COLL_PARAM_TOPO_HWLOC] = {"COLL_TOPO_HWLOC", COLL_PARAM_TYPE_INT, "1",
                               "0: read the topology from /proc and sysfs even where the build "
                               "has hwloc"},
    [COLL_PARAM_TOPO_SYSFS_ROOT] = {"COLL_TOPO_SYSFS_ROOT", COLL_PARAM_TYPE_STR, "/sys",
                                    "where the topology reads sysfs (a copy, for tests); hwloc "
                                    "reads /sys only"},
    [COLL_PARAM_HIER_ACROSS] = {"COLL_HIER_ACROSS", COLL_PARAM_TYPE_STR, "auto",
                                "hier's broadcast and reduce across the hosts: chain "
                                "(pipelined), tree (binomial), auto (the planner's model)"},
    [COLL_PARAM_FLIGHT_DIR] = {"COLL_FLIGHT_DIR", COLL_PARAM_TYPE_STR, NULL,
                               "directory where each rank writes its flight record when a "
                               "call fails or the communicator is aborted or revoked "
                               "(collinfo --flight DIR reads them)"},
};

static pthread_once_t param_once = PTHREAD_ONCE_INIT;
static const char *param_raw[COLL_PARAM_COUNT];
static const char *param_src[COLL_PARAM_COUNT]; /* the variable that gave the value */
static int64_t param_int[COLL_PARAM_COUNT];

int coll_parse_size(const char *s, int64_t *v_p)
{
    char *end;
    if (s == NULL)
        return -1;
    while (isspace((unsigned char)*s))
        s++;
    if (*s == '\0')
        return -1;
    errno = 0;
    long long v = strtoll(s, &end, 0);
    if (errno != 0 || end == s)
        return -1;
    int shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    default: break;
    }
    if (shift && (*end == 'B' || *end == 'b'))
        end++;
    if (*end != '\0')
        return -1;
    if (shift && (v > (INT64_MAX >> shift) || v < -(INT64_MAX >> shift)))
        return -1;
    *v_p = (int64_t)(v * (1LL << shift));
    return 0;
}

/* NCCL's variables.  A parameter with a counterpart in NCCL reads NCCL's variable
 * when its own is unset, so that a job set up for NCCL keeps its interfaces, log
 * level and overrides; the COLL_ variable wins when both are set.  Values are
 * translated where the grammars differ.  What each NCCL_* variable did is kept as
 * text (the log is not up while parameters load: it reads them) and logged at
 * INFO once the log is up, by coll_param_log_nccl.  docs/env.md, "NCCL's
 * variables", has both tables below; test_param checks that they agree. */

struct nccl_map;
/* Translates NCCL's values v (NULL where unset) into out.  Returns true when out
 * holds the value to take (why may add a remark), false when nothing is taken
 * (why says why). */
typedef bool (*nccl_xlate_fn)(const struct nccl_map *m, const char *const *v, char *out,
                              size_t cap, char *why, size_t whycap);

struct nccl_map {
    enum coll_param_id id;
    const char *names[2]; /* the second NULL when one NCCL variable is read */
    nccl_xlate_fn xlate;  /* NULL: the value as it is */
};

static bool name_in(const char *s, const char *const *names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcasecmp(s, names[i]) == 0)
            return true;
    return false;
}
#define NAME_IN(s, arr) name_in((s), (arr), sizeof(arr) / sizeof((arr)[0]))

/* NCCL_DEBUG: the same level names, and ABORT, which sits above INFO in NCCL
 * (it prints the INFO lines too). */
static bool xlate_debug(const struct nccl_map *m, const char *const *v, char *out, size_t cap,
                        char *why, size_t whycap)
{
    static const char *const same[] = {"NONE", "VERSION", "WARN", "INFO", "TRACE"};
    (void)m;
    for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++)
        if (strcasecmp(v[0], same[i]) == 0) {
            snprintf(out, cap, "%s", same[i]);
            return true;
        }
    if (strcasecmp(v[0], "ABORT") == 0) {
        snprintf(out, cap, "INFO");
        snprintf(why, whycap, "NCCL's ABORT prints the INFO lines too");
        return true;
    }
    snprintf(why, whycap, "not a level of NCCL (VERSION, WARN, INFO, ABORT, TRACE)");
    return false;
}

/* NCCL_DEBUG_SUBSYS: each name as the nearest of ours (log.c's aliases); names
 * that neither knows are left out, where COLL_DEBUG_SUBSYS refuses them. */
static bool xlate_subsys(const struct nccl_map *m, const char *const *v, char *out, size_t cap,
                         char *why, size_t whycap)
{
    (void)m;
    bool negate = v[0][0] == '^';
    char buf[256], unknown[128] = "";
    size_t ulen = 0;
    uint32_t all = 0;
    if (strlen(v[0]) >= sizeof(buf)) {
        snprintf(why, whycap, "too long");
        return false;
    }
    snprintf(buf, sizeof(buf), "%s", v[0] + (negate ? 1 : 0));
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        uint32_t mask;
        if (tok[0] == '^' || coll_log_parse_subsys(tok, &mask) != 0)
            coll_buf_printf(unknown, sizeof(unknown), &ulen, "%s%s", ulen ? ", " : "", tok);
        else
            all |= mask;
    }
    if (ulen > 0)
        snprintf(why, whycap, "left out %s, not a subsystem of NCCL", unknown);
    else if (all == 0)
        snprintf(why, whycap, "no subsystem named");
    if (all == 0)
        return false;
    char names[128];
    coll_log_subsys_names(all, names, sizeof(names));
    snprintf(out, cap, "%s%s", negate ? "^" : "", names);
    return true;
}

/* COLL_NSOCKS_PERPEER's range, as tcp.c takes it. */
#define NCCL_MAX_NSOCKS 16

/* NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD sockets per connection (each
 * direction to a peer): here the progress engine drives every socket, so only
 * the product counts.  One unset (or 0: NCCL's automatic) counts 1. */
static bool xlate_nsocks(const struct nccl_map *m, const char *const *v, char *out, size_t cap,
                         char *why, size_t whycap)
{
    int64_t n[2] = {0, 0};
    for (int k = 0; k < 2; k++)
        if (v[k] != NULL && (coll_parse_size(v[k], &n[k]) != 0 || n[k] > 64)) {
            snprintf(why, whycap, "%s is not a number up to 64", m->names[k]);
            return false;
        }
    if (n[0] <= 0 && n[1] <= 0) {
        snprintf(why, whycap, "automatic, as COLL_NSOCKS_PERPEER=0 is");
        return false;
    }
    int64_t total = (n[0] > 0 ? n[0] : 1) * (n[1] > 0 ? n[1] : 1);
    if (total > NCCL_MAX_NSOCKS) {
        snprintf(why, whycap, "%lld sockets capped at %d", (long long)total, NCCL_MAX_NSOCKS);
        total = NCCL_MAX_NSOCKS;
    }
    snprintf(out, cap, "%lld", (long long)total);
    return true;
}

/* NCCL_SHM_DISABLE=1 and NCCL_IB_DISABLE=1: the transports they turn off here
 * too, shared memory and verbs, excluded from COLL_TRANSPORTS. */
static bool xlate_transports(const struct nccl_map *m, const char *const *v, char *out,
                             size_t cap, char *why, size_t whycap)
{
    static const char *const tps[2] = {"shm", "verbs"};
    char list[32] = "";
    size_t len = 0;
    for (int k = 0; k < 2; k++) {
        int64_t off = 0;
        if (v[k] == NULL)
            continue;
        if (coll_parse_size(v[k], &off) != 0) {
            snprintf(why, whycap, "%s is not a number", m->names[k]);
            return false;
        }
        if (off != 0)
            coll_buf_printf(list, sizeof(list), &len, "%s%s", len ? "," : "", tps[k]);
    }
    if (len == 0) {
        snprintf(why, whycap, "0 turns nothing off");
        return false;
    }
    snprintf(out, cap, "^%s", list);
    return true;
}

/* NCCL_ALGO, whose grammar COLL_ALGO shares: Ring and Tree are ring and tree;
 * NCCL's other algorithms have no equivalent and are left out, as are terms left
 * with none (the planner chooses there).  A term for a collective NCCL_ALGO has
 * and COLL_ALGO has not is left out rather than failing init. */
static bool xlate_algo(const struct nccl_map *m, const char *const *v, char *out, size_t cap,
                       char *why, size_t whycap)
{
    static const char *const funcs[] = {"allreduce", "broadcast", "reduce", "allgather",
                                        "reducescatter"};
    static const char *const same[] = {"ring", "tree"};
    static const char *const none[] = {"collnetdirect", "collnetchain", "nvls", "nvlstree",
                                       "pat"};
    char buf[256], noeq[128] = "", unknown[128] = "", nofunc[128] = "";
    size_t len = 0, nlen = 0, ulen = 0, flen = 0;
    (void)m;
    if (strlen(v[0]) >= sizeof(buf)) {
        snprintf(why, whycap, "too long");
        return false;
    }
    snprintf(buf, sizeof(buf), "%s", v[0]);
    out[0] = '\0';
    char *save_t = NULL;
    for (char *term = strtok_r(buf, ";", &save_t); term; term = strtok_r(NULL, ";", &save_t)) {
        char *list = term, *colon = strchr(term, ':');
        if (colon != NULL) {
            *colon = '\0';
            list = colon + 1;
            for (char *c = term; *c; c++)
                *c = (char)tolower((unsigned char)*c);
            if (!NAME_IN(term, funcs)) {
                coll_buf_printf(nofunc, sizeof(nofunc), &flen, "%s%s", flen ? ", " : "", term);
                continue;
            }
        }
        bool exclude = list[0] == '^';
        char algos[64] = "";
        size_t alen = 0;
        char *save_a = NULL;
        for (char *a = strtok_r(list + (exclude ? 1 : 0), ",", &save_a); a;
             a = strtok_r(NULL, ",", &save_a)) {
            for (char *c = a; *c; c++)
                *c = (char)tolower((unsigned char)*c);
            if (NAME_IN(a, same)) {
                if (strstr(algos, a) == NULL) /* each once */
                    coll_buf_printf(algos, sizeof(algos), &alen, "%s%s", alen ? "," : "", a);
            } else if (NAME_IN(a, none)) {
                coll_buf_printf(noeq, sizeof(noeq), &nlen, "%s%s", nlen ? ", " : "", a);
            } else {
                coll_buf_printf(unknown, sizeof(unknown), &ulen, "%s%s", ulen ? ", " : "", a);
            }
        }
        if (alen == 0)
            continue;
        coll_buf_printf(out, cap, &len, "%s%s%s%s%s", len ? ";" : "", colon ? term : "",
                        colon ? ":" : "", exclude ? "^" : "", algos);
    }
    size_t wlen = 0;
    why[0] = '\0';
    if (nlen > 0)
        coll_buf_printf(why, whycap, &wlen, "left out %s: no equivalent here", noeq);
    if (ulen > 0)
        coll_buf_printf(why, whycap, &wlen, "%sleft out %s: not an algorithm of NCCL",
                        wlen ? "; " : "", unknown);
    if (flen > 0)
        coll_buf_printf(why, whycap, &wlen, "%sleft out %s: no such collective here",
                        wlen ? "; " : "", nofunc);
    if (len == 0 && wlen == 0)
        coll_buf_printf(why, whycap, &wlen, "no algorithm named");
    if (len >= cap - 1) {
        snprintf(why, whycap, "too long");
        return false;
    }
    return len > 0;
}

static const struct nccl_map nccl_maps[] = {
    {COLL_PARAM_DEBUG, {"NCCL_DEBUG", NULL}, xlate_debug},
    {COLL_PARAM_DEBUG_SUBSYS, {"NCCL_DEBUG_SUBSYS", NULL}, xlate_subsys},
    {COLL_PARAM_DEBUG_FILE, {"NCCL_DEBUG_FILE", NULL}, NULL},
    {COLL_PARAM_COMM_ID, {"NCCL_COMM_ID", NULL}, NULL},
    {COLL_PARAM_SOCKET_IFNAME, {"NCCL_SOCKET_IFNAME", NULL}, NULL},
    {COLL_PARAM_SOCKET_FAMILY, {"NCCL_SOCKET_FAMILY", NULL}, NULL},
    {COLL_PARAM_NSOCKS_PERPEER, {"NCCL_SOCKET_NTHREADS", "NCCL_NSOCKS_PERTHREAD"}, xlate_nsocks},
    {COLL_PARAM_TRANSPORTS, {"NCCL_SHM_DISABLE", "NCCL_IB_DISABLE"}, xlate_transports},
    {COLL_PARAM_ALGO, {"NCCL_ALGO", NULL}, xlate_algo},
    {COLL_PARAM_BUFFSIZE, {"NCCL_BUFFSIZE", NULL}, NULL},
    {COLL_PARAM_IB_HCA, {"NCCL_IB_HCA", NULL}, NULL},
    {COLL_PARAM_IB_GID_INDEX, {"NCCL_IB_GID_INDEX", NULL}, NULL},
};
#define NCCL_NMAPS ((int)(sizeof(nccl_maps) / sizeof(nccl_maps[0])))

#define NO_KERNELS "device buffers are staged through host memory and reduced on the host"
#define NO_CHANNELS "each connection carries one stream of slices (COLL_CHUNKSIZE, COLL_BUFFSIZE)"
#define NO_IB_KNOB "the verbs transport has no such setting"
#define NO_GDR "no GPUDirect RDMA: " NO_KERNELS
#define NO_P2P "no GPU peer-to-peer transport: " NO_KERNELS
#define NO_NVLINK "no NVLink transport here"
#define PLANNER "the planner chooses by its cost model (COLL_ALGO overrides)"
#define CHECKED "arguments are always checked (COLL_CHECK_MISMATCH also compares the ranks)"
#define REGISTERED "collCommRegister registers buffers, kept in a cache (COLL_REG_CACHE_*)"
#define NO_RAS "no RAS service: each rank answers collrun status on its bootstrap listener"
#define PYTORCH "read by PyTorch (now spelt TORCH_NCCL_*), not by NCCL"
#define BUILD "where build systems look for NCCL, not a setting"
#define GID "the GID is chosen by COLL_IB_GID_INDEX"
#define NO_TIMESTAMP "log lines carry no timestamp here"
#define P2P_SLICES "point-to-point slices follow COLL_CHUNKSIZE"
#define STAGGER "ranks are not staggered when they reach the bootstrap root"
#define RETRIED "connections are retried until COLL_TIMEOUT_MS"
#define NO_PLUGINS "no network plugins: transports are built in (COLL_TRANSPORTS chooses)"

/* NCCL's variables that mean nothing here, with why: set, each is logged once at
 * INFO.  An NCCL_* variable in neither table is logged as unknown. */
static const struct {
    const char *name;
    const char *why;
} nccl_unused[] = {
    {"NCCL_ALLOC_P2P_NET_LL_BUFFERS", NO_CHANNELS},
    {"NCCL_ASYNC_ERROR_HANDLING", PYTORCH},
    {"NCCL_BLOCKING_WAIT", PYTORCH},
    {"NCCL_CGA_CLUSTER_SIZE", NO_KERNELS},
    {"NCCL_CHECKS_DISABLE", CHECKED},
    {"NCCL_CHECK_POINTERS", CHECKED},
    {"NCCL_COLLNET_ENABLE", "no in-network reduction here"},
    {"NCCL_COLLNET_NODE_THRESHOLD", "no in-network reduction here"},
    {"NCCL_COMM_BLOCKING", "no variable here: collConfig_t's blocking field chooses"},
    {"NCCL_CONF_FILE", "no configuration file is read here, only the environment"},
    {"NCCL_CROSS_NIC", NO_CHANNELS},
    {"NCCL_CTA_POLICY", NO_KERNELS},
    {"NCCL_CUMEM_ENABLE", NO_KERNELS},
    {"NCCL_CUMEM_HOST_ENABLE", NO_KERNELS},
    {"NCCL_DEBUG_TIMESTAMP_FORMAT", NO_TIMESTAMP},
    {"NCCL_DEBUG_TIMESTAMP_LEVELS", NO_TIMESTAMP},
    {"NCCL_DESYNC_DEBUG", PYTORCH},
    {"NCCL_DIR", BUILD},
    {"NCCL_DMABUF_ENABLE", NO_GDR},
    {"NCCL_GRAPH_MIXING_SUPPORT", NO_KERNELS},
    {"NCCL_GRAPH_REGISTER", NO_KERNELS},
    {"NCCL_HOME", BUILD},
    {"NCCL_HOSTID", "hosts are told apart by host name, boot id and network namespace"},
    {"NCCL_IB_ADAPTIVE_ROUTING", NO_IB_KNOB},
    {"NCCL_IB_ADDR_FAMILY", GID},
    {"NCCL_IB_ADDR_RANGE", GID},
    {"NCCL_IB_AR_THRESHOLD", NO_IB_KNOB},
    {"NCCL_IB_CUDA_SUPPORT", NO_GDR},
    {"NCCL_IB_ECE_ENABLE", NO_IB_KNOB},
    {"NCCL_IB_FIFO_TC", NO_IB_KNOB},
    {"NCCL_IB_MERGE_NICS", NO_IB_KNOB},
    {"NCCL_IB_PCI_RELAXED_ORDERING", NO_IB_KNOB},
    {"NCCL_IB_QPS_PER_CONNECTION", NO_IB_KNOB},
    {"NCCL_IB_RETRY_CNT", "the verbs transport retries 7 times; waits end at COLL_TIMEOUT_MS"},
    {"NCCL_IB_RETURN_ASYNC_EVENTS", NO_IB_KNOB},
    {"NCCL_IB_ROCE_VERSION_NUM", GID},
    {"NCCL_IB_SL", NO_IB_KNOB},
    {"NCCL_IB_SPLIT_DATA_ON_QPS", NO_IB_KNOB},
    {"NCCL_IB_TC", NO_IB_KNOB},
    {"NCCL_IB_TIMEOUT", "the verbs ACK timeout is fixed (18); waits end at COLL_TIMEOUT_MS"},
    {"NCCL_IGNORE_CPU_AFFINITY", "the library leaves CPU affinity as it finds it"},
    {"NCCL_INCLUDE_DIR", BUILD},
    {"NCCL_LAUNCH_MODE", NO_KERNELS},
    {"NCCL_LEGACY_CUDA_REGISTER", REGISTERED},
    {"NCCL_LIB_DIR", BUILD},
    {"NCCL_LL128_BUFFSIZE", "no protocols: " NO_CHANNELS},
    {"NCCL_LL_BUFFSIZE", "no protocols: " NO_CHANNELS},
    {"NCCL_LL_THRESHOLD", PLANNER},
    {"NCCL_LOCAL_REGISTER", REGISTERED},
    {"NCCL_MAX_CTAS", NO_KERNELS},
    {"NCCL_MAX_NCHANNELS", NO_CHANNELS},
    {"NCCL_MEM_SYNC_DOMAIN", NO_KERNELS},
    {"NCCL_MIN_CTAS", NO_KERNELS},
    {"NCCL_MIN_NCHANNELS", NO_CHANNELS},
    {"NCCL_MNNVL_ENABLE", NO_NVLINK},
    {"NCCL_NCHANNELS_PER_NET_PEER", NO_CHANNELS},
    {"NCCL_NET", NO_PLUGINS},
    {"NCCL_NET_DISABLE_INTRA", "same-host peers take shm unless COLL_TRANSPORTS excludes it"},
    {"NCCL_NET_FORCE_FLUSH", NO_GDR},
    {"NCCL_NET_GDR_C2C", NO_GDR},
    {"NCCL_NET_GDR_LEVEL", NO_GDR},
    {"NCCL_NET_GDR_READ", NO_GDR},
    {"NCCL_NET_PLUGIN", NO_PLUGINS},
    {"NCCL_NET_SHARED_BUFFERS", NO_CHANNELS},
    {"NCCL_NET_SHARED_COMMS", NO_CHANNELS},
    {"NCCL_NTHREADS", NO_KERNELS},
    {"NCCL_NVB_DISABLE", NO_NVLINK},
    {"NCCL_NVLS_CHUNKSIZE", "no NVLink SHARP here"},
    {"NCCL_NVLS_ENABLE", "no NVLink SHARP here"},
    {"NCCL_OOB_NET_ENABLE", "the bootstrap always runs over TCP (COLL_SOCKET_IFNAME)"},
    {"NCCL_OOB_NET_IFNAME", "the bootstrap always runs over TCP (COLL_SOCKET_IFNAME)"},
    {"NCCL_P2P_DIRECT_DISABLE", NO_P2P},
    {"NCCL_P2P_DISABLE", NO_P2P},
    {"NCCL_P2P_LEVEL", NO_P2P},
    {"NCCL_P2P_LL_THRESHOLD", P2P_SLICES},
    {"NCCL_P2P_NET_CHUNKSIZE", P2P_SLICES},
    {"NCCL_P2P_NVL_CHUNKSIZE", P2P_SLICES},
    {"NCCL_P2P_PCI_CHUNKSIZE", P2P_SLICES},
    {"NCCL_P2P_PXN_LEVEL", NO_NVLINK},
    {"NCCL_PROFILER_PLUGIN", "no profiler plugins here"},
    {"NCCL_PROTO", "no LL/LL128/Simple protocols: " NO_CHANNELS},
    {"NCCL_PXN_C2C", NO_NVLINK},
    {"NCCL_PXN_DISABLE", NO_NVLINK},
    {"NCCL_RAS_ADDR", NO_RAS},
    {"NCCL_RAS_ENABLE", NO_RAS},
    {"NCCL_RAS_TIMEOUT_FACTOR", NO_RAS},
    {"NCCL_ROOT", BUILD},
    {"NCCL_ROOT_DIR", BUILD},
    {"NCCL_RUNTIME_CONNECT", "connections are always made on first use here"},
    {"NCCL_SET_STACK_SIZE", NO_KERNELS},
    {"NCCL_SET_THREAD_NAME", "the library's threads keep their names"},
    {"NCCL_SINGLE_RING_THRESHOLD", PLANNER},
    {"NCCL_SOCKET_POLL_TIMEOUT_MSEC", "waits end at COLL_TIMEOUT_MS"},
    {"NCCL_SOCKET_RETRY_CNT", RETRIED},
    {"NCCL_SOCKET_RETRY_SLEEP_MSEC", RETRIED},
    {"NCCL_TOPO_DUMP_FILE", "COLL_TOPO_DUMP_FILE writes the topology as JSON, not NCCL's XML"},
    {"NCCL_TOPO_FILE", "the topology is read from sysfs (COLL_TOPO_SYSFS_ROOT), not from XML"},
    {"NCCL_TREE_THRESHOLD", PLANNER},
    {"NCCL_TUNER_PLUGIN", PLANNER},
    {"NCCL_UID_STAGGER_RATE", STAGGER},
    {"NCCL_UID_STAGGER_THRESHOLD", STAGGER},
    {"NCCL_VERSION", "set by NVIDIA's containers to the NCCL they ship, not a setting"},
    {"NCCL_WARN_ENABLE_DEBUG_INFO", "no switch to INFO after a WARN here"},
    {"NCCL_WIN_ENABLE", REGISTERED},
    {"NCCL_WORK_FIFO_BYTES", NO_KERNELS},
    {"NCCL_WORK_FIFO_DEPTH", NO_KERNELS},
};
#define NCCL_NUNUSED ((int)(sizeof(nccl_unused) / sizeof(nccl_unused[0])))

/* The lines coll_param_log_nccl logs, each ending in a newline. */
static char nccl_notes[8192];
static size_t nccl_notes_len;
static int nccl_notes_lost;
static char nccl_values[NCCL_NMAPS][256]; /* translated values */

static void nccl_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void nccl_note(const char *fmt, ...)
{
    char line[600];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    size_t len = strlen(line);
    if (nccl_notes_len + len + 2 > sizeof(nccl_notes)) {
        nccl_notes_lost++;
        return;
    }
    memcpy(nccl_notes + nccl_notes_len, line, len);
    nccl_notes_len += len;
    nccl_notes[nccl_notes_len++] = '\n';
    nccl_notes[nccl_notes_len] = '\0';
}

static const char *env_value(const char *name)
{
    const char *v = getenv(name);
    return (v != NULL && v[0] != '\0') ? v : NULL;
}

/* The value of parameter d (mapped by m) when its COLL_ variable has coll: that
 * one, else what m's NCCL variables give.  Notes what the NCCL ones did. */
static const char *nccl_take(const struct nccl_map *m, const struct coll_param_def *d,
                             const char *coll, const char **src_p)
{
    const char *v[2] = {NULL, NULL};
    char set[600] = "";
    size_t len = 0;
    const char *first = NULL;
    for (int k = 0; k < 2 && m->names[k] != NULL; k++) {
        v[k] = env_value(m->names[k]);
        if (v[k] != NULL) {
            coll_buf_printf(set, sizeof(set), &len, "%s%s=%.200s", len ? " and " : "",
                            m->names[k], v[k]);
            if (first == NULL)
                first = m->names[k];
        }
    }
    if (first == NULL)
        return coll;
    if (coll != NULL) {
        nccl_note("%s %s not used: %s=%.200s is set and wins", set, v[0] && v[1] ? "are" : "is",
                  d->name, coll);
        return coll;
    }
    char *out = nccl_values[m - nccl_maps], why[300] = "";
    const char *val = v[0];
    if (m->xlate != NULL)
        val = m->xlate(m, v, out, sizeof(nccl_values[0]), why, sizeof(why)) ? out : NULL;
    int64_t num;
    if (val != NULL && d->type != COLL_PARAM_TYPE_STR &&
        (coll_parse_size(val, &num) != 0 ||
         (d->type == COLL_PARAM_TYPE_INT && num != (int64_t)(int)num))) {
        snprintf(why, sizeof(why), "not a number");
        val = NULL;
    }
    if (val == NULL) {
        nccl_note("%s %s not used: %s", set, v[0] && v[1] ? "are" : "is", why);
        return NULL;
    }
    nccl_note("%s %s taken as %s=%.200s%s%s%s", set, v[0] && v[1] ? "are" : "is", d->name, val,
              why[0] ? " (" : "", why, why[0] ? ")" : "");
    *src_p = first;
    return val;
}

/* Notes every NCCL_* variable of the environment that no parameter reads. */
static void nccl_scan_environ(void)
{
    for (char **e = environ; e != NULL && *e != NULL; e++) {
        if (strncmp(*e, "NCCL_", 5) != 0)
            continue;
        const char *eq = strchr(*e, '=');
        if (eq == NULL || eq[1] == '\0')
            continue;
        int n = (int)(eq - *e);
        bool mapped = false;
        for (int i = 0; i < NCCL_NMAPS && !mapped; i++)
            for (int k = 0; k < 2 && nccl_maps[i].names[k] != NULL; k++)
                if ((int)strlen(nccl_maps[i].names[k]) == n &&
                    strncmp(nccl_maps[i].names[k], *e, (size_t)n) == 0)
                    mapped = true;
        if (mapped)
            continue;
        const char *why = NULL;
        for (int i = 0; i < NCCL_NUNUSED && why == NULL; i++)
            if ((int)strlen(nccl_unused[i].name) == n &&
                strncmp(nccl_unused[i].name, *e, (size_t)n) == 0)
                why = nccl_unused[i].why;
        if (why != NULL)
            nccl_note("%.*s is set but has no meaning here: %s", n, *e, why);
        else
            nccl_note("%.*s is set but is no NCCL variable known here (a typo, or one newer "
                      "than this list); ignored", n, *e);
    }
}

static const struct nccl_map *nccl_map_of(int id)
{
    for (int i = 0; i < NCCL_NMAPS; i++)
        if ((int)nccl_maps[i].id == id)
            return &nccl_maps[i];
    return NULL;
}

static void param_load(void)
{
    for (int i = 0; i < COLL_PARAM_COUNT; i++) {
        const struct coll_param_def *d = &param_defs[i];
        const char *env = getenv(d->name);
        if (env != NULL && env[0] == '\0')
            env = NULL;
        param_src[i] = env != NULL ? d->name : NULL;
        const struct nccl_map *m = nccl_map_of(i);
        if (m != NULL)
            env = nccl_take(m, d, env, &param_src[i]);
        param_raw[i] = env;
        if (d->type == COLL_PARAM_TYPE_STR)
            continue;
        int64_t v = 0;
        if (d->def != NULL)
            (void)coll_parse_size(d->def, &v);
        if (env != NULL) {
            int64_t parsed;
            if (coll_parse_size(env, &parsed) == 0 &&
                (d->type == COLL_PARAM_TYPE_SIZE || (parsed == (int64_t)(int)parsed))) {
                v = parsed;
            } else {
                /* The log is not up yet when the log's own params are loaded, so
                 * print directly; this happens once per process. */
                fprintf(stderr, "COLL WARN ignoring %s=%s: not a number; using %s\n",
                        d->name, env, d->def ? d->def : "unset");
                param_raw[i] = NULL;
                param_src[i] = NULL;
            }
        }
        param_int[i] = v;
    }
    nccl_scan_environ();
}

static void param_init(void)
{
    pthread_once(&param_once, param_load);
}

int64_t coll_param_int(enum coll_param_id id)
{
    param_init();
    return param_int[id];
}

const char *coll_param_str(enum coll_param_id id)
{
    param_init();
    return param_raw[id] != NULL ? param_raw[id] : param_defs[id].def;
}

int coll_param_is_set(enum coll_param_id id)
{
    param_init();
    return param_raw[id] != NULL;
}

const struct coll_param_def *coll_param_table(int *n_p)
{
    *n_p = COLL_PARAM_COUNT;
    return param_defs;
}

void coll_param_print(FILE *f)
{
    param_init();
    for (int i = 0; i < COLL_PARAM_COUNT; i++) {
        const struct coll_param_def *d = &param_defs[i];
        fprintf(f, "%-22s default %-8s", d->name, d->def ? d->def : "(unset)");
        if (param_raw[i] != NULL)
            fprintf(f, " set to %s", param_raw[i]);
        if (param_src[i] != NULL && strncmp(param_src[i], "NCCL_", 5) == 0)
            fprintf(f, " (from %s)", param_src[i]);
        fprintf(f, "\n    %s\n", d->help);
    }
}

const char *coll_param_source(enum coll_param_id id)
{
    param_init();
    return param_src[id];
}

const char *coll_param_nccl_var(int i, enum coll_param_id *id_p)
{
    for (int m = 0; m < NCCL_NMAPS; m++)
        for (int k = 0; k < 2 && nccl_maps[m].names[k] != NULL; k++)
            if (i-- == 0) {
                *id_p = nccl_maps[m].id;
                return nccl_maps[m].names[k];
            }
    return NULL;
}

const char *coll_param_nccl_unused(int i, const char **why_p)
{
    if (i < 0 || i >= NCCL_NUNUSED)
        return NULL;
    *why_p = nccl_unused[i].why;
    return nccl_unused[i].name;
}

void coll_param_log_nccl(void)
{
    static atomic_flag logged = ATOMIC_FLAG_INIT;
    if (atomic_flag_test_and_set(&logged))
        return;
    param_init();
    for (const char *p = nccl_notes; *p != '\0';) {
        const char *nl = strchr(p, '\n');
        COLL_INFO(COLL_SUBSYS_ENV, "%.*s", (int)(nl - p), p);
        p = nl + 1;
    }
    if (nccl_notes_lost > 0)
        COLL_INFO(COLL_SUBSYS_ENV, "and %d more NCCL_* variable(s)", nccl_notes_lost);
}

const char *coll_env_get(const char *name)
{
    const char *v = getenv(name);
    return (v != NULL && v[0] != '\0') ? v : NULL;
}
