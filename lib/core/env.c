/* collCommInitFromEnv: rank, size and root from the variables that launchers
 * already set, so the library runs under torchrun, mpirun or srun without a
 * launcher of its own.
 *
 * Under torchrun the root's address goes through torchrun's own store (the
 * TCPStore its agent serves at MASTER_ADDR:MASTER_PORT): rank 0 serves the root
 * on a port the kernel gives it and sets a key to "host:port", the others wait
 * for the key (docs/env.md, "The root under torchrun"). */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "status.h"
#include "torch_store.h"

struct env_source {
    const char *launcher;
    const char *rank_var;
    const char *size_var;
};

static const struct env_source env_sources[] = {
    {"collrun", "COLL_RANK", "COLL_NRANKS"},
    {"torchrun", "RANK", "WORLD_SIZE"},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS"},
    {"PMI", "PMI_RANK", "PMI_SIZE"},
};

static collResult_t env_int(const char *name, const char *v, int *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end != '\0' || x < 0 || x > (1 << 24)) {
        coll_set_error(NULL, "collCommInitFromEnv: %s=%s is not a valid number", name, v);
        return collInvalidArgument;
    }
    *out = (int)x;
    return collSuccess;
}

/* Whether the root goes through torchrun's store: under torchrun with its agent's
 * store on MASTER_PORT.  torch's own test (torch.distributed.rendezvous): the
 * workers are clients of the agent's store exactly when TORCHELASTIC_USE_AGENT_STORE
 * is "True".  Otherwise (torch 1.13's c10d rendezvous, --standalone, or no
 * torchrun) nothing of torchrun's listens on MASTER_PORT: rank 0 serves the root
 * there, as it would serve its torch store. */
static bool env_torchrun_store(void)
{
    const char *agent = coll_env_get("TORCHELASTIC_USE_AGENT_STORE");
    return coll_env_get("TORCHELASTIC_RUN_ID") != NULL && agent != NULL &&
           strcmp(agent, "True") == 0;
}

/* Communicators this process has made through torchrun's store: the n-th one's
 * key ends in root_<n>.  Every rank makes them in the same order (as every rank
 * must call collCommInitFromEnv alike), so the n-th of every rank meets at one
 * key.  A process-wide counter is the one piece of state that can say which
 * communicator of the program this is; atomic, so that two threads never take
 * one number. */
static atomic_uint env_store_comms;

/* The key of the n-th communicator of this attempt of this run: a restart of
 * the job (TORCHELASTIC_RESTART_COUNT) or another job on a shared store
 * (TORCHELASTIC_RUN_ID) never finds an old key. */
static collResult_t env_store_key(unsigned n, char *key, size_t cap)
{
    const char *run = coll_env_get("TORCHELASTIC_RUN_ID");
    const char *attempt = coll_env_get("TORCHELASTIC_RESTART_COUNT");
    int k = snprintf(key, cap, "libcollective/%s/attempt_%s/root_%u", run ? run : "none",
                     attempt ? attempt : "0", n);
    if (k < 0 || (size_t)k >= cap) {
        coll_set_error(NULL, "collCommInitFromEnv: TORCHELASTIC_RUN_ID is too long for a key "
                       "of torchrun's store (set COLL_COMM_ID=host:port to name the root)");
        return collInvalidArgument;
    }
    return collSuccess;
}

/* Rank 0: binds a listener on the interface that reaches the store (where the
 * other ranks come from), on a port the kernel picks; the id is built from the
 * bound address's text, as from COLL_COMM_ID. */
static collResult_t env_root_bind(const char *store_hostport, int *lfd_p, struct coll_id *id,
                                  char *text, size_t cap)
{
    union coll_sockaddr store, ss;
    socklen_t len;
    char why[160];
    collResult_t res = coll_socket_parse_hostport(store_hostport, &store, &len, why, sizeof(why));
    if (res != collSuccess) {
        coll_set_error(NULL, "collCommInitFromEnv: torchrun's store at MASTER_ADDR:MASTER_PORT"
                       " (%s): %s", store_hostport, why);
        return res;
    }
    res = coll_socket_pick_addr(&store.sa, &ss, &len, NULL, 0);
    if (res != collSuccess) {
        coll_set_error(NULL, "collCommInitFromEnv: rank 0 finds no interface to serve the "
                       "root on (COLL_SOCKET_IFNAME)");
        return res;
    }
    if (ss.sa.sa_family == AF_INET)
        ss.in.sin_port = 0;
    else
        ss.in6.sin6_port = 0;
    res = coll_socket_listen(&ss, &len, lfd_p);
    if (res != collSuccess) {
        coll_set_error(NULL, "collCommInitFromEnv: rank 0 cannot listen for the root on "
                       "%s: %s", coll_socket_addr_str(&ss.sa, text, cap), strerror(errno));
        return res;
    }
    coll_socket_addr_str(&ss.sa, text, cap);
    res = coll_bootstrap_id_from_addr(text, coll_param_str(COLL_PARAM_SECRET), id);
    if (res != collSuccess) {
        close(*lfd_p);
        coll_set_error(NULL, "collCommInitFromEnv: bad COLL_SECRET");
    }
    return res;
}

/* Under torchrun with the agent's store: rank 0 serves the root on a port of the
 * kernel's choice and sets the communicator's key to its "host:port"; the other
 * ranks wait for the key (within COLL_TIMEOUT_MS) and build the id from it.  The
 * address is copied into text for the log. */
static collResult_t env_root_from_store(int rank, struct coll_id *id, char *text, size_t cap)
{
    const char *addr = coll_env_get("MASTER_ADDR");
    const char *port = coll_env_get("MASTER_PORT");
    if (addr == NULL || port == NULL) {
        coll_set_error(NULL, "collCommInitFromEnv: torchrun without MASTER_ADDR and "
                       "MASTER_PORT (the address of its store): set COLL_COMM_ID=host:port");
        return collInvalidArgument;
    }
    int p;
    COLL_CHECK(env_int("MASTER_PORT", port, &p));
    char store_hp[300], key[COLL_TSTORE_MAX_KEY];
    snprintf(store_hp, sizeof(store_hp), strchr(addr, ':') ? "[%s]:%d" : "%s:%d", addr, p);
    unsigned n = atomic_fetch_add(&env_store_comms, 1);
    COLL_CHECK(env_store_key(n, key, sizeof(key)));
    /* As comm.c: COLL_TIMEOUT_MS, 5 minutes when not positive. */
    int64_t timeout_ms = coll_param_int(COLL_PARAM_TIMEOUT_MS);
    if (timeout_ms <= 0)
        timeout_ms = 300000;
    int64_t deadline = coll_now_ns() + timeout_ms * 1000000LL;

    char err[COLL_ERRMSG_BYTES];
    struct coll_torch_store store;
    int lfd = -1;
    collResult_t res = collSuccess;
    if (rank == 0) {
        /* Bound before anything is published, so that the address is ours. */
        COLL_CHECK(env_root_bind(store_hp, &lfd, id, text, cap));
    }
    res = coll_torch_store_connect(&store, store_hp, deadline, err, sizeof(err));
    if (res == collSuccess && rank == 0)
        res = coll_torch_store_set(&store, key, text, strlen(text), deadline, err, sizeof(err));
    if (res == collSuccess && rank != 0) {
        char value[COLL_TSTORE_MAX_VALUE];
        size_t vlen = 0;
        const char *why = NULL;
        res = coll_torch_store_get(&store, key, value, sizeof(value), &vlen, deadline, err,
                                   sizeof(err));
        if (res == collSuccess && !coll_tstore_value_text(value, vlen, text, cap, &why)) {
            coll_torch_store_close(&store);
            coll_set_error(NULL, "collCommInitFromEnv: rank %d: torchrun's store at %s: key "
                           "%s: %s", rank, store_hp, key, why);
            return collRemoteError;
        }
        if (res == collSuccess &&
            coll_bootstrap_id_from_addr(text, coll_param_str(COLL_PARAM_SECRET), id) !=
                collSuccess) {
            coll_torch_store_close(&store);
            coll_set_error(NULL, "collCommInitFromEnv: rank %d: torchrun's store at %s: key "
                           "%s holds '%s', not a root's address (or COLL_SECRET is malformed)",
                           rank, store_hp, key, text);
            return collRemoteError;
        }
    }
    coll_torch_store_close(&store);
    if (res != collSuccess) {
        if (lfd >= 0)
            close(lfd);
        coll_set_error(NULL, "collCommInitFromEnv: rank %d: %s (COLL_TIMEOUT_MS %lld; "
                       "COLL_COMM_ID=host:port names the root without the store)", rank, err,
                       (long long)timeout_ms);
        return res;
    }
    if (rank == 0)
        COLL_CHECK(coll_bootstrap_serve_root(lfd, id, timeout_ms));
    COLL_INFO(COLL_SUBSYS_ENV, "root %s through torchrun's store at %s, key %s", text, store_hp,
              key);
    return collSuccess;
}

COLL_API collResult_t collCommInitFromEnv(collComm_t *comm)
{
    if (comm == NULL) {
        coll_set_error(NULL, "collCommInitFromEnv: comm is NULL");
        return collInvalidArgument;
    }
    const struct env_source *src = NULL;
    for (size_t i = 0; i < sizeof(env_sources) / sizeof(env_sources[0]); i++) {
        const struct env_source *s = &env_sources[i];
        bool has_rank = coll_env_get(s->rank_var) != NULL;
        bool has_size = coll_env_get(s->size_var) != NULL;
        if (has_rank != has_size) {
            coll_set_error(NULL, "collCommInitFromEnv: %s is set but %s is not (%s)",
                           has_rank ? s->rank_var : s->size_var,
                           has_rank ? s->size_var : s->rank_var, s->launcher);
            return collInvalidArgument;
        }
        if (has_rank) {
            src = s;
            break;
        }
    }
    if (src == NULL) {
        coll_set_error(NULL, "collCommInitFromEnv: no rank in the environment: set COLL_RANK "
                       "and COLL_NRANKS, or run under collrun, torchrun, mpirun or srun");
        return collInvalidArgument;
    }
    int rank, nranks;
    COLL_CHECK(env_int(src->rank_var, coll_env_get(src->rank_var), &rank));
    COLL_CHECK(env_int(src->size_var, coll_env_get(src->size_var), &nranks));
    if (nranks < 1 || rank >= nranks) {
        coll_set_error(NULL, "collCommInitFromEnv: %s=%d is outside [0, %s=%d)", src->rank_var,
                       rank, src->size_var, nranks);
        return collInvalidArgument;
    }

    char hostport[300];
    struct coll_id id;
    const char *root = coll_param_str(COLL_PARAM_COMM_ID);
    if (root == NULL && env_torchrun_store()) {
        COLL_CHECK(env_root_from_store(rank, &id, hostport, sizeof(hostport)));
        root = hostport;
    } else {
        if (root == NULL) {
            const char *addr = coll_env_get("MASTER_ADDR");
            const char *port = coll_env_get("MASTER_PORT");
            if (addr == NULL || port == NULL) {
                coll_set_error(NULL, "collCommInitFromEnv: no root address: set COLL_COMM_ID="
                               "host:port, or MASTER_ADDR and MASTER_PORT");
                return collInvalidArgument;
            }
            int p;
            COLL_CHECK(env_int("MASTER_PORT", port, &p));
            if (p < 1 || p > 65535) {
                coll_set_error(NULL, "collCommInitFromEnv: MASTER_PORT=%s is not a port", port);
                return collInvalidArgument;
            }
            snprintf(hostport, sizeof(hostport), strchr(addr, ':') ? "[%s]:%d" : "%s:%d", addr,
                     p);
            root = hostport;
        }
        if (coll_bootstrap_id_from_addr(root, coll_param_str(COLL_PARAM_SECRET), &id) !=
            collSuccess) {
            const char *from = coll_param_source(COLL_PARAM_COMM_ID);
            coll_set_error(NULL, "collCommInitFromEnv: bad root address '%s' or COLL_SECRET "
                           "(%s must be host:port)", root, from ? from : "COLL_COMM_ID");
            return collInvalidArgument;
        }
    }
    COLL_INFO(COLL_SUBSYS_ENV, "rank %d of %d from %s variables, root %s", rank, nranks,
              src->launcher, root);
    collResult_t res = coll_comm_create(comm, nranks, &id, rank, NULL);
    /* Where collrun status finds the ranks (collrun sets COLL_STATUS_FILE). */
    const char *status_file = coll_param_str(COLL_PARAM_STATUS_FILE);
    if (res == collSuccess && rank == 0 && status_file != NULL && status_file[0] != '\0')
        coll_status_publish(*comm, status_file);
    return res;
}
