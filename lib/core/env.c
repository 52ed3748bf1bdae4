/* collCommInitFromEnv: rank, size and root from the variables that launchers
 * already set, so the library runs under torchrun, mpirun or srun without a
 * launcher of its own. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"
#include "status.h"

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
    const char *root = coll_param_str(COLL_PARAM_COMM_ID);
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
        /* torchrun's own store already listens on MASTER_PORT. */
        if (coll_env_get("TORCHELASTIC_RUN_ID") != NULL)
            p++;
        if (p < 1 || p > 65535) {
            coll_set_error(NULL, "collCommInitFromEnv: MASTER_PORT=%s is not a port", port);
            return collInvalidArgument;
        }
        snprintf(hostport, sizeof(hostport), strchr(addr, ':') ? "[%s]:%d" : "%s:%d", addr, p);
        root = hostport;
    }
    struct coll_id id;
    if (coll_bootstrap_id_from_addr(root, coll_param_str(COLL_PARAM_SECRET), &id) != collSuccess) {
        const char *from = coll_param_source(COLL_PARAM_COMM_ID);
        coll_set_error(NULL, "collCommInitFromEnv: bad root address '%s' or COLL_SECRET "
                       "(%s must be host:port)", root, from ? from : "COLL_COMM_ID");
        return collInvalidArgument;
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
