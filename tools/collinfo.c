/*
 * collinfo: the host's topology as a process sees it, and under a launcher every rank's
 * place and the transport the library takes between each pair of ranks.
 *
 *   collinfo [--json]                   this host: packages, NUMA nodes, cores, the
 *                                       binding, interfaces, RDMA devices, GPUs
 *   collrun -n 4 collinfo [--json]      rank 0 prints every host and rank, and the pairs
 *
 * Under a launcher (any variable collCommInitFromEnv reads a rank from is set) each rank
 *   1. loads its topology (lib/base/topo.c) and makes its summary, a struct
 *      coll_topo_rank of fixed size, with the interface of its bootstrap address;
 *   2. joins the communicator (collCommInitFromEnv) and gathers every rank's summary
 *      with collAllGather on bytes;
 *   3. writes its row of the transport table, one byte per peer (lib/core/info.c: the
 *      transport coll_transport_for_peer gives, connected or not), and gathers the
 *      rows the same way;
 *   4. rank 0 prints the hosts (ranks with the same host name, boot id and network
 *      namespace, the rule of the shm transport), the ranks and the pairs.
 *
 * The same document for one rank, without a launcher, is what COLL_TOPO_DUMP_FILE
 * writes at the end of every communicator's init.  docs/topology.md.
 *
 *   collinfo --flight DIR [--json]      reads the flight records the ranks wrote to
 *                                       COLL_FLIGHT_DIR=DIR and says which rank is
 *                                       behind, ahead or missing, and in which call
 *                                       (flight_report.c; docs/reliability.md)
 *
 *   collinfo --status HOST:PORT [--json]
 *                                       asks every rank of a running job what it is doing,
 *                                       through the bootstrap listener of one of its ranks
 *                                       at HOST:PORT, with the secret of COLL_SECRET
 *                                       (job_status.c; docs/collrun.md)
 *
 * Exit status: 0, 1 on a failure (the message says which), 2 on bad arguments.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collective.h"
#include "flight_report.h"
#include "info.h"
#include "job_status.h"
#include "param.h"
#include "topo.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: collinfo [--json] [--alone]\n"
               "       collinfo --flight DIR [--json]\n"
               "       collinfo --status HOST:PORT [--json]\n"
               "  alone: prints this host's topology and this process's binding;\n"
               "  under a launcher (collrun -n N collinfo): rank 0 prints every rank, per host,\n"
               "  and the transport between each pair of ranks.\n"
               "  --json        one JSON document on stdout\n"
               "  --alone       ignore launcher variables: this process only\n"
               "  --flight DIR  read the flight records the ranks wrote to COLL_FLIGHT_DIR=DIR\n"
               "                and say, per communicator, which rank is behind, ahead or\n"
               "                missing, and in which call\n"
               "  --status HOST:PORT  ask every rank of a running job what it is doing, through\n"
               "                the bootstrap listener of one rank (COLL_DEBUG=INFO logs it);\n"
               "                the job's secret comes from COLL_SECRET\n");
}

/* collinfo --status HOST:PORT: the job's secret is COLL_SECRET, or, for a job
 * started without one, derived from COLL_COMM_ID as its ranks derive it. */
static int ask_status(const char *hostport, bool json)
{
    const char *hex = coll_param_str(COLL_PARAM_SECRET);
    const char *id = coll_param_str(COLL_PARAM_COMM_ID);
    if (hex == NULL && id == NULL) {
        fprintf(stderr, "collinfo: --status needs the job's secret: set COLL_SECRET to it (or "
                        "COLL_COMM_ID to the job's, when it runs without COLL_SECRET)\n");
        return 1;
    }
    uint8_t secret[COLL_SECRET_BYTES];
    char err[160];
    if (!coll_wire_secret_text(id != NULL ? id : "", hex, secret, err, sizeof(err))) {
        fprintf(stderr, "collinfo: %s\n", err);
        return 1;
    }
    struct coll_job_rank *ranks;
    int n;
    if (coll_job_status_table("collinfo", hostport, secret, COLL_JOB_STATUS_WAIT_MS, &ranks,
                              &n) != 0)
        return 1;
    char title[COLL_ADDR_STRLEN + 64];
    snprintf(title, sizeof(title), "%d rank%s, asked through %s", n, n > 1 ? "s" : "",
             hostport);
    int rc = coll_job_status_report("collinfo", ranks, n, secret, COLL_JOB_STATUS_WAIT_MS, json,
                                    title, stdout);
    free(ranks);
    return rc;
}

static bool under_launcher(void)
{
    static const char *const vars[] = {"COLL_RANK", "RANK", "OMPI_COMM_WORLD_RANK",
                                       "SLURM_PROCID", "PMI_RANK"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        const char *v = getenv(vars[i]);
        if (v != NULL && v[0] != '\0')
            return true;
    }
    return false;
}

static int alone(const struct coll_topo *t, bool json)
{
    struct coll_topo_rank r;
    coll_topo_rank_fill(t, NULL, &r);
    if (json) {
        coll_info_write_json(stdout, t, &r, NULL);
    } else {
        coll_topo_print(t, stdout);
        printf("  interface for the bootstrap and TCP: %s\n", r.netdev[0] ? r.netdev : "none");
    }
    return fflush(stdout) == 0 ? 0 : 1;
}

/* The gathered job: every rank's summary and row of transports, and its hosts. */
struct view {
    const struct coll_topo_rank *all;
    const uint8_t *rows; /* rows[a * n + b]: the transport from rank a to rank b */
    int n;
    int nhosts;
    int *host;           /* rank -> its host, numbered in the order of their lowest rank */
    int *lead;           /* host -> its lowest rank */
};

/* Hosts: ranks with the same host name, boot id and network namespace, the rule
 * of the shm transport. */
static void group_hosts(struct view *v)
{
    v->nhosts = 0;
    for (int r = 0; r < v->n; r++) {
        const struct coll_topo_rank *s = &v->all[r];
        int h = 0;
        while (h < v->nhosts) {
            const struct coll_topo_rank *q = &v->all[v->lead[h]];
            if (strcmp(q->host, s->host) == 0 && q->boot == s->boot && q->netns == s->netns)
                break;
            h++;
        }
        if (h == v->nhosts)
            v->lead[v->nhosts++] = r;
        v->host[r] = h;
    }
}

static void print_numa(const struct coll_topo_rank *s)
{
    if (s->numa >= 0) {
        printf("NUMA node %d", (int)s->numa);
    } else if (s->numa_mask != 0) {
        printf("NUMA nodes");
        for (int b = 0, k = 0; b < 64; b++)
            if ((s->numa_mask >> b) & 1u)
                printf("%s%d", k++ ? "," : " ", b);
    } else {
        printf("NUMA node unknown");
    }
}

static void print_text(const struct view *v)
{
    int n = v->n;
    printf("collinfo: %d rank%s on %d host%s\n", n, n == 1 ? "" : "s", v->nhosts,
           v->nhosts == 1 ? "" : "s");
    for (int h = 0; h < v->nhosts; h++) {
        const struct coll_topo_rank *s = &v->all[v->lead[h]];
        printf("host %s (network namespace %llu): %d package%s, %d NUMA node%s, %d cores, "
               "%d PUs, %d RDMA device%s, %d GPU%s (%s)\n",
               s->host, (unsigned long long)s->netns, (int)s->packages,
               s->packages == 1 ? "" : "s", (int)s->numa_nodes, s->numa_nodes == 1 ? "" : "s",
               (int)s->cores, (int)s->pus, (int)s->rdma_devices, s->rdma_devices == 1 ? "" : "s",
               (int)s->gpus, s->gpus == 1 ? "" : "s", s->hwloc ? "hwloc" : "sysfs");
        for (int r = v->lead[h]; r < n; r++) {
            if (v->host[r] != h)
                continue;
            const struct coll_topo_rank *q = &v->all[r];
            printf("  rank %d: pid %d, cpus %s (%d PU%s, %d core%s), ", r, (int)q->pid, q->cpus,
                   (int)q->bound_pus, q->bound_pus == 1 ? "" : "s", (int)q->bound_cores,
                   q->bound_cores == 1 ? "" : "s");
            print_numa(q);
            printf(", interface %s", q->netdev[0] ? q->netdev : "none");
            if (q->netdev_numa >= 0)
                printf(" (NUMA node %d)", (int)q->netdev_numa);
            printf("\n");
        }
    }
    if (n < 2)
        return;
    if (n <= 16) {
        printf("transports (from the rank of the row to the rank of the column):\n     ");
        for (int b = 0; b < n; b++)
            printf(" %6d", b);
        printf("\n");
        for (int a = 0; a < n; a++) {
            printf("  %3d", a);
            for (int b = 0; b < n; b++)
                printf(" %6s", a == b ? "-" : coll_info_tp_name(v->rows[(size_t)a * n + b]));
            printf("\n");
        }
        return;
    }
    /* Many ranks: how many pairs take each transport, within and between hosts. */
    long within[256] = {0}, between[256] = {0};
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++)
            if (a != b)
                (v->host[a] == v->host[b] ? within : between)[v->rows[(size_t)a * n + b]]++;
    printf("transports of the %ld ordered pairs:", (long)n * (n - 1));
    for (int c = 0; c < 256; c++) {
        if (within[c])
            printf(" %s %ld within hosts;", coll_info_tp_name((uint8_t)c), within[c]);
        if (between[c])
            printf(" %s %ld between hosts;", coll_info_tp_name((uint8_t)c), between[c]);
    }
    printf("\n");
}

static void print_json(const struct view *v)
{
    int n = v->n;
    printf("{\"nranks\": %d,\n\"hosts\": [", n);
    for (int h = 0; h < v->nhosts; h++) {
        const struct coll_topo_rank *s = &v->all[v->lead[h]];
        printf("%s\n {\"host\": ", h ? "," : "");
        coll_topo_json_str(stdout, s->host);
        printf(", \"netns\": %llu, \"boot\": \"%016llx\", \"packages\": %d, \"numa_nodes\": %d, "
               "\"cores\": %d, \"pus\": %d, \"rdma_devices\": %d, \"gpus\": %d, \"ranks\": [",
               (unsigned long long)s->netns, (unsigned long long)s->boot, (int)s->packages,
               (int)s->numa_nodes, (int)s->cores, (int)s->pus, (int)s->rdma_devices,
               (int)s->gpus);
        for (int r = v->lead[h], k = 0; r < n; r++)
            if (v->host[r] == h)
                printf("%s%d", k++ ? ", " : "", r);
        printf("]}");
    }
    printf("],\n\"ranks\": [");
    for (int r = 0; r < n; r++) {
        printf("%s\n {\"rank\": %d, \"host_index\": %d, \"summary\": ", r ? "," : "", r,
               v->host[r]);
        coll_topo_rank_write_json(&v->all[r], stdout);
        printf("}");
    }
    printf("],\n\"pairs\": [");
    for (int a = 0, k = 0; a < n; a++)
        for (int b = a + 1; b < n; b++) {
            uint8_t ab = v->rows[(size_t)a * n + b], ba = v->rows[(size_t)b * n + a];
            printf("%s\n {\"a\": %d, \"b\": %d, \"transport\": \"%s\"", k++ ? "," : "", a, b,
                   coll_info_tp_name(ab));
            if (ba != ab) /* each side chose for itself and they differ */
                printf(", \"reverse\": \"%s\"", coll_info_tp_name(ba));
            printf("}");
        }
    printf("]}\n");
}

static int job(const struct coll_topo *t, bool json)
{
    collComm_t comm;
    collResult_t res = collCommInitFromEnv(&comm);
    if (res != collSuccess) {
        fprintf(stderr, "collinfo: cannot join the job: %s\n", collGetLastError(NULL));
        return 1;
    }
    int rank = 0, n = 0;
    collCommUserRank(comm, &rank);
    collCommCount(comm, &n);
    struct coll_topo_rank mine;
    coll_info_rank(comm, t, &mine);
    struct coll_topo_rank *all = calloc((size_t)n, sizeof(*all));
    uint8_t *rows = calloc((size_t)n * (size_t)n, 1);
    int *hosts = calloc((size_t)n * 2, sizeof(int));
    int rc = 1;
    if (all == NULL || rows == NULL || hosts == NULL) {
        /* The peers then fail in the gather, when this rank's exit closes its
         * connections. */
        fprintf(stderr, "collinfo: out of memory for %d ranks\n", n);
        goto out;
    }
    res = collAllGather(&mine, all, sizeof(mine), collUint8, comm, NULL);
    if (res == collSuccess) {
        uint8_t *row = rows + (size_t)rank * n;
        for (int p = 0; p < n; p++)
            row[p] = coll_info_tp_code(comm, p);
        res = collAllGather(row, rows, (size_t)n, collUint8, comm, NULL);
    }
    if (res != collSuccess) {
        fprintf(stderr, "collinfo: rank %d: the gather failed: %s\n", rank, collGetLastError(comm));
        goto out;
    }
    for (int r = 0; r < n; r++)
        if (!coll_topo_rank_valid(&all[r])) {
            fprintf(stderr, "collinfo: rank %d sent a summary of another layout (another "
                            "version of collinfo?)\n", r);
            goto out;
        }
    if (rank == 0) {
        struct view v = {.all = all, .rows = rows, .n = n, .host = hosts, .lead = hosts + n};
        group_hosts(&v);
        if (json)
            print_json(&v);
        else
            print_text(&v);
    }
    rc = fflush(stdout) == 0 ? 0 : 1;
out:
    free(all);
    free(rows);
    free(hosts);
    collCommDestroy(comm);
    return rc;
}

int main(int argc, char **argv)
{
    bool json = false, force_alone = false;
    const char *flight_dir = NULL;
    const char *status_addr = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = true;
        } else if (strcmp(argv[i], "--flight") == 0) {
            if (i + 1 == argc) {
                fprintf(stderr, "collinfo: --flight needs a directory\n");
                usage(stderr);
                return 2;
            }
            flight_dir = argv[++i];
        } else if (strcmp(argv[i], "--status") == 0) {
            if (i + 1 == argc) {
                fprintf(stderr, "collinfo: --status needs HOST:PORT\n");
                usage(stderr);
                return 2;
            }
            status_addr = argv[++i];
        } else if (strcmp(argv[i], "--alone") == 0) {
            force_alone = true;
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "collinfo: unknown argument %s\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    /* The records are read alone, whatever launcher runs collinfo. */
    if (flight_dir != NULL && force_alone) {
        fprintf(stderr, "collinfo: --flight and --alone exclude each other\n");
        usage(stderr);
        return 2;
    }
    if (status_addr != NULL && (flight_dir != NULL || force_alone)) {
        fprintf(stderr, "collinfo: --status goes with --json only\n");
        usage(stderr);
        return 2;
    }
    if (status_addr != NULL)
        return ask_status(status_addr, json);
    if (flight_dir != NULL)
        return coll_flight_report(flight_dir, json, stdout, stderr);
    struct coll_topo *t;
    if (coll_topo_load(NULL, &t) != collSuccess) {
        fprintf(stderr, "collinfo: cannot read this host's topology (the reason is above)\n");
        return 1;
    }
    int rc = force_alone || !under_launcher() ? alone(t, json) : job(t, json);
    coll_topo_free(t);
    return rc;
}
