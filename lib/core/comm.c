/* Communicator lifecycle: creation from a unique id, destruction, abort, errors. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <unistd.h>

#include "algo.h"
#include "device.h"
#include "engine.h"
#include "exec.h"
#include "flight.h"
#include "inflight.h"
#include "info.h"
#include "internal.h"
#include "mismatch.h"
#include "pattern.h"
#include "regcache.h"
#include "status.h"
#include "stream.h"
#include "wire.h"

COLL_API collResult_t collGetVersion(int *version)
{
    if (version == NULL) {
        coll_set_error(NULL, "collGetVersion: version is NULL");
        return collInvalidArgument;
    }
    *version = COLL_VERSION_CODE;
    return collSuccess;
}

COLL_API collResult_t collGetUniqueId(collUniqueId *uniqueId)
{
    if (uniqueId == NULL) {
        coll_set_error(NULL, "collGetUniqueId: uniqueId is NULL");
        return collInvalidArgument;
    }
    struct coll_id id;
    const char *env = coll_param_str(COLL_PARAM_COMM_ID);
    if (env != NULL)
        COLL_CHECK(coll_bootstrap_id_from_addr(env, coll_param_str(COLL_PARAM_SECRET), &id));
    else
        COLL_CHECK(coll_bootstrap_get_unique_id(&id));
    memset(uniqueId, 0, sizeof(*uniqueId));
    memcpy(uniqueId->internal, &id, sizeof(id));
    return collSuccess;
}

static uint64_t host_hash(char *host, size_t hostlen)
{
    gethostname(host, hostlen - 1);
    host[hostlen - 1] = '\0';
    char boot[64] = "";
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (fgets(boot, sizeof(boot), f) == NULL)
            boot[0] = '\0';
        fclose(f);
    }
    uint64_t h = 1469598103934665603ULL;
    for (const char *p = host; *p; p++)
        h = (h ^ (uint8_t)*p) * 1099511628211ULL;
    for (const char *p = boot; *p; p++)
        h = (h ^ (uint8_t)*p) * 1099511628211ULL;
    /* and the network namespace: ranks in different ones reach each other as
     * other hosts do (shared memory is not used between them) */
    struct stat st;
    uint64_t ns = stat("/proc/self/ns/net", &st) == 0 ? (uint64_t)st.st_ino : 0;
    for (int i = 0; i < 8; i++)
        h = (h ^ (uint8_t)(ns >> (8 * i))) * 1099511628211ULL;
    return h;
}

/* Resolves tuning that depends on the job's shape. */
static void comm_tune(struct coll_comm *comm)
{
    const struct coll_hosts *h = &comm->hosts;
    int local = h->start[h->host[comm->rank] + 1] - h->start[h->host[comm->rank]];
    int cores = get_nprocs();
    comm->local_ranks = local;
    comm->cores = cores;
    comm->oversubscribed = local > cores;

    /* Slices: with a core per rank, large slices cost fewest system calls.  With
     * more ranks than cores, small slices that stay in cache and keep every rank
     * of the ring busy win (measured: 32 KiB against 512 KiB gives 1.2-1.4x the
     * bus bandwidth with 4 and 8 ranks on 2 cores; see docs/performance.md).
     * Every rank must cut alike, so the rule reads the most crowded host. */
    int64_t chunk = coll_param_int(COLL_PARAM_CHUNKSIZE);
    bool crowded = h->max_local > h->min_cores;
    comm->chunk_bytes = chunk > 0 ? (size_t)chunk : crowded ? 32 * 1024 : 512 * 1024;
    if (comm->chunk_bytes < 4096)
        comm->chunk_bytes = 4096;
    int64_t buff = coll_param_int(COLL_PARAM_BUFFSIZE);
    comm->depth = buff > 0 ? (int)(buff / (int64_t)comm->chunk_bytes) : 4;
    if (comm->depth < 2)
        comm->depth = 2;
    if (comm->depth > 32)
        comm->depth = 32;

    /* Spinning always yields: sched_yield costs little when the core is ours,
     * and when another process shares it (a busy machine, or more ranks than
     * cores) it lets that process, maybe the peer we wait for, run at once. */
    int64_t spin = coll_param_int(COLL_PARAM_SPIN_US);
    comm->spin_yield = true;
    if (spin >= 0)
        comm->spin_ns = spin * 1000;
    else
        comm->spin_ns = comm->oversubscribed ? 50 * 1000 : 200 * 1000;
    /* Polling shared memory costs no system call, and blocking there costs one on
     * each side: such waits poll up to 1 ms unless COLL_SPIN_US says otherwise. */
    comm->spin_cheap_ns = spin >= 0 ? comm->spin_ns : 1000 * 1000;
    COLL_INFO(COLL_SUBSYS_INIT, "rank %d/%d: %d rank(s) on this host, %d core(s); slice %zu B, "
              "depth %d, spin %lld us%s", comm->rank, comm->nranks, local, cores,
              comm->chunk_bytes, comm->depth, (long long)(comm->spin_ns / 1000),
              comm->oversubscribed ? " oversubscribed" : "");
}

/* Waits for a non-blocking init's thread, once. */
static void comm_init_join(struct coll_comm *comm)
{
    pthread_mutex_lock(&comm->init_lock);
    if (comm->init_thread_live) {
        pthread_join(comm->init_thread, NULL);
        comm->init_thread_live = false;
    }
    pthread_mutex_unlock(&comm->init_lock);
}

static void comm_free(struct coll_comm *comm)
{
    if (comm == NULL)
        return;
    comm_init_join(comm);
    coll_status_unregister(comm); /* before anything it reads goes */
    coll_stream_comm_fini(comm);
    coll_device_comm_fini(comm);
    if (comm->nb_stream != NULL)
        (void)collStreamDestroy(comm->nb_stream);
    pthread_mutex_destroy(&comm->init_lock);
    coll_regcache_free(comm->regcache); /* deregisters: the transports are still up */
    comm->regcache = NULL;
    if (comm->peers)
        coll_transport_fini(comm);
    coll_bootstrap_fini(comm);
    coll_algo_comm_fini(comm);
    coll_flight_fini(comm);
    coll_mismatch_fini(comm);
    coll_engine_fini(comm);
    coll_hosts_fini(comm);
    free(comm->peers);
    free(comm->scratch);
    free(comm);
}

collResult_t coll_config_check(const char *fn, const collConfig_t *config)
{
    if (config == NULL)
        return collSuccess;
    if (config->magic != COLL_CONFIG_MAGIC || config->size < sizeof(collConfig_t)) {
        coll_set_error(NULL, "%s: config was not set up with COLL_CONFIG_INITIALIZER (magic "
                       "0x%x, size %zu)", fn, config->magic, config->size);
        return collInvalidArgument;
    }
    if (config->blocking != COLL_CONFIG_UNDEF_INT && config->blocking != 0 &&
        config->blocking != 1) {
        coll_set_error(NULL, "%s: config->blocking %d is neither 0 nor 1", fn, config->blocking);
        return collInvalidArgument;
    }
    if (config->timeoutMs != COLL_CONFIG_UNDEF_INT && config->timeoutMs <= 0) {
        coll_set_error(NULL, "%s: config->timeoutMs %d is not positive", fn, config->timeoutMs);
        return collInvalidArgument;
    }
    if (config->commName != NULL && strlen(config->commName) >= sizeof(((struct coll_comm *)0)->name)) {
        coll_set_error(NULL, "%s: config->commName is longer than %zu characters", fn,
                       sizeof(((struct coll_comm *)0)->name) - 1);
        return collInvalidArgument;
    }
    return collSuccess;
}

void coll_config_inherit(const struct coll_comm *comm, const collConfig_t *config,
                         collConfig_t *out)
{
    *out = (collConfig_t)COLL_CONFIG_INITIALIZER;
    out->blocking = comm->blocking ? 1 : 0;
    out->timeoutMs = comm->timeout_ms > INT32_MAX ? INT32_MAX : (int)comm->timeout_ms;
    out->commName = comm->name[0] ? comm->name : NULL;
    if (config == NULL)
        return;
    if (config->blocking != COLL_CONFIG_UNDEF_INT)
        out->blocking = config->blocking;
    if (config->timeoutMs != COLL_CONFIG_UNDEF_INT)
        out->timeoutMs = config->timeoutMs;
    if (config->commName != NULL)
        out->commName = config->commName;
}

collResult_t coll_comm_check_usable(struct coll_comm *comm, const char *fn)
{
    if (atomic_load(&comm->init_running)) {
        coll_set_error(comm, "%s: the communicator's non-blocking init is still in progress "
                       "(wait until collCommGetAsyncError returns collSuccess)", fn);
        return collInvalidUsage;
    }
    if (atomic_load(&comm->finalized)) {
        coll_set_error(comm, "%s: the communicator was finalized (collCommFinalize): only "
                       "collCommDestroy or collCommAbort may follow", fn);
        return collInvalidUsage;
    }
    return (collResult_t)atomic_load(&comm->async_error); /* the cause is in last_error */
}

/* A communicator with its configuration and nothing connected yet. */
static collResult_t comm_alloc(struct coll_comm **comm_p, int nranks, int rank,
                               const collConfig_t *config)
{
    struct coll_comm *comm;
    COLL_CHECK(coll_calloc(&comm, 1));
    comm->rank = rank;
    comm->nranks = nranks;
    comm->boot_listen_fd = comm->boot_next_fd = comm->boot_prev_fd = -1;
    atomic_init(&comm->failed_peer, -1);
    atomic_init(&comm->revoked_by, -1);
    atomic_init(&comm->wait_peer, -1);
    comm->timeout_ms = coll_param_int(COLL_PARAM_TIMEOUT_MS);
    if (comm->timeout_ms <= 0)
        comm->timeout_ms = 300000;
    comm->blocking = true;
    if (config != NULL && config->timeoutMs != COLL_CONFIG_UNDEF_INT)
        comm->timeout_ms = config->timeoutMs;
    if (config != NULL && config->blocking != COLL_CONFIG_UNDEF_INT)
        comm->blocking = config->blocking != 0;
    if (config != NULL && config->commName != NULL)
        snprintf(comm->name, sizeof(comm->name), "%s", config->commName);
    pthread_mutex_init(&comm->init_lock, NULL);
    atomic_init(&comm->init_running, false);
    atomic_init(&comm->finalized, false);
    atomic_init(&comm->async_error, collSuccess);
    atomic_init(&comm->aborting, false);
    atomic_init(&comm->busy, 0);
    atomic_init(&comm->bytes_sent, 0);
    atomic_init(&comm->bytes_received, 0);
    collResult_t res = coll_engine_init(comm);
    if (res != collSuccess) {
        pthread_mutex_destroy(&comm->init_lock);
        free(comm);
        return res;
    }
    *comm_p = comm;
    return collSuccess;
}

/* Every pair of ranks on a host that talks holds a socket per direction (shm),
 * so a process running many ranks as threads needs tens of thousands of
 * descriptors (128 ranks, all-to-all: 128 x 2 x 127), far above the usual soft
 * limit of 1024.  As many libraries do, the soft limit is raised to the hard
 * one, once per process; beyond that a connection fails naming RLIMIT_NOFILE. */
static pthread_once_t comm_nofile_once = PTHREAD_ONCE_INIT;

static void comm_raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= rl.rlim_max)
        return;
    rlim_t was = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
        COLL_INFO(COLL_SUBSYS_INIT, "raised the open files limit (RLIMIT_NOFILE) from %llu to "
                  "its hard limit %llu", (unsigned long long)was,
                  (unsigned long long)rl.rlim_max);
}

/* Connects comm to its peers.  On failure the cause is in comm->last_error and
 * the comm is left for comm_free.  collCommAbort from another thread (setting
 * comm->aborting) ends every wait here within one poll slice. */
static collResult_t comm_setup(struct coll_comm *comm, const struct coll_id *id)
{
    int rank = comm->rank, nranks = comm->nranks;
    coll_socket_set_cancel(&comm->aborting);
    coll_exec_begin(comm, "init");
    coll_log_set_rank(rank);
    (void)pthread_once(&comm_nofile_once, comm_raise_nofile);
    collResult_t res;
    COLL_CHECK_GOTO(coll_calloc(&comm->peers, (size_t)nranks), res, out);
    for (int k = 0; k < nranks; k++)
        comm->peers[k].tp_index = -1;
    COLL_CHECK_GOTO(coll_algo_check_env(comm), res, out);
    COLL_CHECK_GOTO(coll_flight_init(comm), res, out);
    comm->check_mismatch = coll_param_int(COLL_PARAM_CHECK_MISMATCH) != 0;
    int64_t overlap = coll_param_int(COLL_PARAM_STREAM_OVERLAP);
    if (overlap < 1 || overlap > COLL_INFLIGHT_MAX) {
        coll_set_error(comm, "COLL_STREAM_OVERLAP=%lld is out of range [1, %d]",
                       (long long)overlap, COLL_INFLIGHT_MAX);
        res = collInvalidArgument;
        goto out;
    }
    comm->stream_overlap = (int)overlap;

    struct coll_rank_info mine = {.rank = rank, .pid = (int32_t)getpid()};
    mine.host_hash = host_hash(mine.host, sizeof(mine.host));
    mine.cores = get_nprocs();
    mine.numa = coll_topo_bound_numa();
    COLL_CHECK_GOTO(coll_bootstrap_prepare(comm, id, &mine), res, out);
    comm->peers[rank].info = mine;
    COLL_CHECK_GOTO(coll_transport_init(comm), res, out);
    mine = comm->peers[rank].info; /* now with the transports' handles */
    COLL_CHECK_GOTO(coll_bootstrap_init(comm, id, &mine), res, out);
    COLL_CHECK_GOTO(coll_hosts_init(comm), res, out);
    comm_tune(comm);

    /* Ring neighbours connect now, so set-up errors surface at init and the
     * first collective pays no connection cost. */
    if (nranks > 1) {
        int prev, next;
        struct coll_conn *c;
        coll_ring_neighbors(rank, nranks, &prev, &next);
        COLL_CHECK_GOTO(coll_transport_get_conn(comm, next, true, &c), res, out);
        COLL_CHECK_GOTO(coll_transport_get_conn(comm, prev, false, &c), res, out);
    }
    COLL_CHECK_GOTO(coll_plan_init(comm), res, out);
    COLL_CHECK_GOTO(coll_algo_comm_init(comm), res, out);
    if (!comm->blocking && collStreamCreate(&comm->nb_stream) != collSuccess) {
        coll_set_error(comm, "init: out of memory for the non-blocking communicator's queue");
        res = collSystemError;
        goto out;
    }
    coll_info_dump(comm); /* COLL_TOPO_DUMP_FILE */
    comm->boot_watch = true;
    /* Status queries on the bootstrap listener (collrun status); without them
     * the communicator works all the same. */
    if (coll_status_register(comm) != collSuccess)
        COLL_INFO(COLL_SUBSYS_INIT, "rank %d: status queries will not be answered", rank);
    COLL_INFO(COLL_SUBSYS_INIT, "rank %d of %d ready on %s pid %d%s%s", rank, nranks,
              comm->peers[rank].info.host, (int)getpid(), comm->name[0] ? " comm " : "",
              comm->name);
    res = collSuccess;
out:
    if (res != collSuccess && atomic_load(&comm->aborting))
        coll_set_error(comm, "init of rank %d of %d: aborted (collCommAbort)", rank, nranks);
    else if (res != collSuccess && comm->last_error[0] == '\0')
        coll_set_error(comm, "collCommInitRank: rank %d of %d failed: %s (see COLL_DEBUG=WARN "
                       "output)", rank, nranks, collGetErrorString(res));
    coll_socket_set_cancel(NULL);
    return res;
}

struct init_job {
    struct coll_comm *comm;
    struct coll_id id;
};

static void *init_main(void *arg)
{
    struct init_job *job = arg;
    struct coll_comm *comm = job->comm;
    collResult_t res = comm_setup(comm, &job->id);
    free(job);
    if (res != collSuccess)
        atomic_store(&comm->async_error, (int)res);
    atomic_store(&comm->init_running, false);
    return NULL;
}

collResult_t coll_comm_create(collComm_t *comm_p, int nranks, const struct coll_id *id, int rank,
                              const collConfig_t *config)
{
    struct coll_comm *comm;
    COLL_CHECK(comm_alloc(&comm, nranks, rank, config));
    if (!comm->blocking) {
        struct init_job *job;
        if (coll_calloc(&job, 1) != collSuccess) {
            comm_free(comm);
            return collSystemError;
        }
        job->comm = comm;
        job->id = *id;
        atomic_store(&comm->init_running, true);
        int err = pthread_create(&comm->init_thread, NULL, init_main, job);
        if (err != 0) {
            free(job);
            comm_free(comm);
            coll_set_error(NULL, "collCommInitRankConfig: cannot start the init thread: %s",
                           strerror(err));
            return collSystemError;
        }
        comm->init_thread_live = true;
        *comm_p = comm;
        return collInProgress;
    }
    collResult_t res = comm_setup(comm, id);
    if (res != collSuccess) {
        coll_set_thread_error(comm->last_error);
        comm_free(comm);
        return res;
    }
    *comm_p = comm;
    return collSuccess;
}

/* The checks collCommInitRank and collCommInitRankConfig share. */
static collResult_t init_args(const char *fn, collComm_t *comm, int nranks,
                              const collUniqueId *commId, int rank, struct coll_id *id)
{
    if (comm == NULL) {
        coll_set_error(NULL, "%s: comm is NULL", fn);
        return collInvalidArgument;
    }
    if (nranks < 1) {
        coll_set_error(NULL, "%s: nranks %d is not positive", fn, nranks);
        return collInvalidArgument;
    }
    if (rank < 0 || rank >= nranks) {
        coll_set_error(NULL, "%s: rank %d is outside [0, %d)", fn, rank, nranks);
        return collInvalidArgument;
    }
    /* The id usually came over the network (the application broadcast it). */
    const char *why = "";
    if (coll_wire_id(commId->internal, sizeof(commId->internal), id, &why) != COLL_WIRE_OK) {
        coll_set_error(NULL, "%s: commId is malformed: %s", fn, why);
        return collInvalidArgument;
    }
    return collSuccess;
}

COLL_API collResult_t collCommInitRank(collComm_t *comm, int nranks, collUniqueId commId, int rank)
{
    struct coll_id id;
    COLL_CHECK(init_args("collCommInitRank", comm, nranks, &commId, rank, &id));
    return coll_comm_create(comm, nranks, &id, rank, NULL);
}

COLL_API collResult_t collCommInitRankConfig(collComm_t *comm, int nranks, collUniqueId commId,
                                             int rank, collConfig_t *config)
{
    struct coll_id id;
    COLL_CHECK(init_args("collCommInitRankConfig", comm, nranks, &commId, rank, &id));
    COLL_CHECK(coll_config_check("collCommInitRankConfig", config));
    return coll_comm_create(comm, nranks, &id, rank, config);
}

COLL_API collResult_t collCommDestroy(collComm_t comm)
{
    if (comm == NULL)
        return collSuccess;
    comm_free(comm);
    return collSuccess;
}

COLL_API collResult_t collCommAbort(collComm_t comm)
{
    if (comm == NULL)
        return collSuccess;
    /* What every recent call was doing, before the abort fails the one in flight.
     * A non-blocking init still running owns the recorder: no calls yet. */
    if (!atomic_load(&comm->init_running))
        coll_flight_dump(comm, "collCommAbort");
    atomic_store(&comm->aborting, true);
    coll_engine_wake(comm); /* a blocked wait sees the flag now */
    /* A non-blocking init in progress sees the flag within one poll slice. */
    comm_init_join(comm);
    coll_comm_poison(comm, collRemoteError);
    coll_transport_shutdown_all(comm);
    /* Work queued on streams now fails at once; the progress thread ends. */
    coll_stream_comm_stop(comm);
    /* Let a call blocked in another thread notice (its waits poll at most 100
     * ms at a time) before the memory goes away. */
    int64_t deadline = coll_now_ns() + 5LL * 1000000000LL;
    while (atomic_load(&comm->busy) > 0 && coll_now_ns() < deadline) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    if (atomic_load(&comm->busy) > 0) {
        COLL_WARN("collCommAbort: a call on the communicator did not return; leaking it");
        return collInternalError;
    }
    comm_free(comm);
    return collSuccess;
}

/* How long collCommRevoke waits for the calls of other threads to leave: they
 * notice the poisoning within a poll slice (100 ms). */
#define REVOKE_WAIT_NS (5LL * 1000000000LL)

COLL_API collResult_t collCommRevoke(collComm_t comm, int revokeFlags)
{
    if (comm == NULL) {
        coll_set_error(NULL, "collCommRevoke: comm is NULL");
        return collInvalidArgument;
    }
    if (revokeFlags != 0) {
        coll_set_error(comm, "collCommRevoke: revokeFlags is %d; no flag is defined (pass 0)",
                       revokeFlags);
        return collInvalidArgument;
    }
    if (atomic_load(&comm->init_running))
        return coll_comm_check_usable(comm, "collCommRevoke");
    int none = -1;
    if (atomic_compare_exchange_strong(&comm->revoked_by, &none, comm->rank) &&
        atomic_load(&comm->async_error) == collSuccess) {
        coll_flight_dump(comm, "collCommRevoke");
        coll_set_error(comm, "the communicator was revoked by this rank (%d) with "
                       "collCommRevoke", comm->rank);
    }
    /* The peers hear of it over the bootstrap ring ('R' notices) and fail their
     * calls on it too; the connections close, so a call blocked in any thread
     * here or there ends within a poll slice. */
    coll_comm_poison(comm, collRemoteError);
    coll_engine_wake(comm);
    coll_stream_comm_stop(comm); /* queued calls fail at once; the thread ends */
    int64_t deadline = coll_now_ns() + REVOKE_WAIT_NS;
    while (atomic_load(&comm->busy) > 0 && coll_now_ns() < deadline) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    if (atomic_load(&comm->busy) > 0) {
        coll_set_error(comm, "collCommRevoke: a call on the communicator in another thread did "
                       "not return within %lld s", REVOKE_WAIT_NS / 1000000000LL);
        return collInternalError;
    }
    return collSuccess;
}

COLL_API collResult_t collCommGetAsyncError(collComm_t comm, collResult_t *asyncError)
{
    if (comm == NULL || asyncError == NULL) {
        coll_set_error(comm, "collCommGetAsyncError: %s is NULL", comm ? "asyncError" : "comm");
        return collInvalidArgument;
    }
    if (atomic_load(&comm->init_running)) {
        *asyncError = collInProgress;
        return collSuccess;
    }
    collResult_t res = (collResult_t)atomic_load(&comm->async_error);
    /* A non-blocking comm's calls: in progress until its queue is done, then the
     * first failure among them (kept, as the poison is). */
    if (res == collSuccess && comm->nb_stream != NULL)
        res = collStreamQuery(comm->nb_stream);
    *asyncError = res;
    return collSuccess;
}

COLL_API collResult_t collCommFinalize(collComm_t comm)
{
    if (comm == NULL) {
        coll_set_error(NULL, "collCommFinalize: comm is NULL");
        return collInvalidArgument;
    }
    comm_init_join(comm);
    coll_comm_enter(comm);
    collResult_t res = (collResult_t)atomic_load(&comm->async_error);
    if (res == collSuccess && comm->nb_stream != NULL)
        res = collStreamQuery(comm->nb_stream);
    atomic_store(&comm->finalized, true);
    coll_comm_leave(comm);
    return res;
}

COLL_API collResult_t collCommCount(const collComm_t comm, int *count)
{
    if (comm == NULL || count == NULL) {
        coll_set_error(comm, "collCommCount: %s is NULL", comm ? "count" : "comm");
        return collInvalidArgument;
    }
    *count = comm->nranks;
    return collSuccess;
}

COLL_API collResult_t collCommUserRank(const collComm_t comm, int *rank)
{
    if (comm == NULL || rank == NULL) {
        coll_set_error(comm, "collCommUserRank: %s is NULL", comm ? "rank" : "comm");
        return collInvalidArgument;
    }
    *rank = comm->rank;
    return collSuccess;
}

COLL_API collResult_t collCommGetBytes(const collComm_t comm, uint64_t *sent, uint64_t *received)
{
    if (comm == NULL) {
        coll_set_error(NULL, "collCommGetBytes: comm is NULL");
        return collInvalidArgument;
    }
    if (sent != NULL)
        *sent = atomic_load_explicit(&comm->bytes_sent, memory_order_relaxed);
    if (received != NULL)
        *received = atomic_load_explicit(&comm->bytes_received, memory_order_relaxed);
    return collSuccess;
}

bool coll_comm_has_conn(const struct coll_comm *comm, int peer, bool is_send)
{
    return (is_send ? comm->peers[peer].send_conn : comm->peers[peer].recv_conn) != NULL;
}

const char *coll_comm_last_algo(const struct coll_comm *comm)
{
    return comm->last_algo_name ? comm->last_algo_name : "none";
}

COLL_API const char *collGetLastError(collComm_t comm)
{
    return comm ? comm->last_error : coll_thread_error();
}
