/* The table of tunables.  Every COLL_* variable the library reads is one row here;
 * values are read from the environment once per process, under pthread_once. */
#include "param.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

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

static void param_load(void)
{
    for (int i = 0; i < COLL_PARAM_COUNT; i++) {
        const struct coll_param_def *d = &param_defs[i];
        const char *env = getenv(d->name);
        if (env != NULL && env[0] == '\0')
            env = NULL;
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
            }
        }
        param_int[i] = v;
    }
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
        fprintf(f, "\n    %s\n", d->help);
    }
}

const char *coll_env_get(const char *name)
{
    const char *v = getenv(name);
    return (v != NULL && v[0] != '\0') ? v : NULL;
}
