/* Tunables: every COLL_* variable is one row of the table in param.c, read once. */
#ifndef COLL_PARAM_H
#define COLL_PARAM_H

#include <stdint.h>
#include <stdio.h>

enum coll_param_id {
    COLL_PARAM_DEBUG,
    COLL_PARAM_DEBUG_SUBSYS,
    COLL_PARAM_DEBUG_FILE,
    COLL_PARAM_TIMEOUT_MS,
    COLL_PARAM_COMM_ID,
    COLL_PARAM_SECRET,
    COLL_PARAM_STATUS_FILE,
    COLL_PARAM_RANK,
    COLL_PARAM_NRANKS,
    COLL_PARAM_SOCKET_IFNAME,
    COLL_PARAM_SOCKET_FAMILY,
    COLL_PARAM_NSOCKS_PERPEER,
    COLL_PARAM_SOCKET_BUFSIZE,
    COLL_PARAM_TRANSPORTS,
    COLL_PARAM_ALGO,
    COLL_PARAM_CHUNKSIZE,
    COLL_PARAM_BUFFSIZE,
    COLL_PARAM_SPIN_US,
    COLL_PARAM_LINK_LATENCY_NS,
    COLL_PARAM_LINK_BW_MBS,
    COLL_PARAM_MODEL_FILE,
    COLL_PARAM_MODEL_REMEASURE,
    COLL_PARAM_SHM_SLOT_BYTES,
    COLL_PARAM_SHM_NSLOTS,
    COLL_PARAM_SHM_BUDGET_MB,
    COLL_PARAM_SHM_LEDGER,
    COLL_PARAM_SHM_DIRECT_BYTES,
    COLL_PARAM_IB_HCA,
    COLL_PARAM_IB_GID_INDEX,
    COLL_PARAM_IB_NSLOTS,
    COLL_PARAM_IB_SLOT_BYTES,
    COLL_PARAM_IB_RDV_BYTES,
    COLL_PARAM_REG_CACHE_ENTRIES,
    COLL_PARAM_REG_CACHE_BYTES,
    COLL_PARAM_CHECK_MISMATCH,
    COLL_PARAM_STREAM_OVERLAP,
    COLL_PARAM_DEVICE_STAGE_KEEP,
    COLL_PARAM_TOPO_DUMP_FILE,
    COLL_PARAM_TOPO_HWLOC,
    COLL_PARAM_TOPO_SYSFS_ROOT,
    COLL_PARAM_HIER_ACROSS,
    COLL_PARAM_FLIGHT_DIR,
    COLL_PARAM_COUNT
};

enum coll_param_type { COLL_PARAM_TYPE_INT, COLL_PARAM_TYPE_SIZE, COLL_PARAM_TYPE_STR };

struct coll_param_def {
    const char *name; /* full variable name, "COLL_TIMEOUT_MS" */
    enum coll_param_type type;
    const char *def;  /* default as text; NULL = unset */
    const char *help;
};

/* The value of an integer or size parameter (sizes accept K/M/G suffixes).  A
 * malformed value is reported once at WARN and the default is used. */
int64_t coll_param_int(enum coll_param_id id);
/* The value of a string parameter, or NULL when unset and without default. */
const char *coll_param_str(enum coll_param_id id);
/* True when the variable was set in the environment. */
int coll_param_is_set(enum coll_param_id id);
/* The table, for collrun --env and docs. */
const struct coll_param_def *coll_param_table(int *n_p);
/* Prints every parameter: name, default, current value if set, help. */
void coll_param_print(FILE *f);
/* Parses "123", "64K", "1M", "2G" (powers of 1024).  Returns 0 on success. */
int coll_parse_size(const char *s, int64_t *v_p);
/* The name of the variable that gave id its value: its COLL_ name, the NCCL name
 * read in its place (docs/env.md, "NCCL's variables"), or NULL when unset. */
const char *coll_param_source(enum coll_param_id id);
/* NCCL's variables read in place of an unset COLL_ one, one per call: the i-th
 * name, with the parameter it sets in *id_p; NULL past the last. */
const char *coll_param_nccl_var(int i, enum coll_param_id *id_p);
/* NCCL's variables that mean nothing here, one per call: the i-th name, with why
 * in *why_p; NULL past the last. */
const char *coll_param_nccl_unused(int i, const char **why_p);
/* Logs at INFO (ENV) what each NCCL_* variable of the environment did: taken for a
 * COLL_ one (and how it was translated), overridden by the COLL_ one, or ignored
 * because it has no meaning here or is not known.  The log calls it once, when it
 * is set up. */
void coll_param_log_nccl(void);
/* getenv for variables that are not tunables (launcher variables such as RANK);
 * the one place besides the table that reads the environment. */
const char *coll_env_get(const char *name);

#endif
