/*
 * collCommInitFromEnv under the variables other launchers set: torchrun (RANK,
 * WORLD_SIZE, MASTER_ADDR, MASTER_PORT; the root through torchrun's own store is
 * tests/test_torchrun.sh's, under the real torchrun), Open MPI (OMPI_COMM_WORLD_*), Slurm (SLURM_PROCID,
 * SLURM_NTASKS) and PMI (PMI_RANK, PMI_SIZE); collrun's COLL_RANK taking
 * precedence; and the errors that name the variable at fault.
 *
 * Each scenario forks its ranks (parameters are read once per process), with every
 * launcher variable cleared first, then only the scenario's set.  A rank inits,
 * checks its rank, runs an int32 sum allreduce and exits 0 when all is right.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "launch.h"

static const char *const launcher_vars[] = {
    "COLL_RANK", "COLL_NRANKS", "COLL_COMM_ID", "COLL_SECRET", "RANK", "WORLD_SIZE",
    "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "PMI_RANK", "PMI_SIZE",
};

/* Scenario variables: "NAME=value" strings, %d replaced by the rank, %p by the port. */
struct scenario {
    const char *name;
    int nranks;
    const char *vars[8];
    collResult_t want;   /* collSuccess, or the error of every rank */
    const char *message; /* substring of collGetLastError(NULL) on error */
};

static void set_vars(const struct scenario *s, int rank, int port)
{
    for (size_t i = 0; i < sizeof(launcher_vars) / sizeof(launcher_vars[0]); i++)
        unsetenv(launcher_vars[i]);
    for (int i = 0; i < 8 && s->vars[i]; i++) {
        char buf[256], out[256];
        snprintf(buf, sizeof(buf), "%s", s->vars[i]);
        char *eq = strchr(buf, '=');
        *eq = '\0';
        size_t o = 0;
        for (const char *p = eq + 1; *p && o < sizeof(out) - 12; p++) {
            if (p[0] == '%' && p[1] == 'd')
                o += (size_t)snprintf(out + o, sizeof(out) - o, "%d", rank), p++;
            else if (p[0] == '%' && p[1] == 'p')
                o += (size_t)snprintf(out + o, sizeof(out) - o, "%d", port), p++;
            else
                out[o++] = *p;
        }
        out[o] = '\0';
        setenv(buf, out, 1);
    }
}

/* The body of one rank; returns the exit code. */
static int run_rank(const struct scenario *s, int rank, int port)
{
    set_vars(s, rank, port);
    setenv("COLL_TIMEOUT_MS", "20000", 1);
    collComm_t comm;
    collResult_t r = collCommInitFromEnv(&comm);
    if (s->want != collSuccess) {
        const char *msg = collGetLastError(NULL);
        if (r != s->want || strstr(msg, s->message) == NULL) {
            fprintf(stderr, "%s: got %s '%s', want %s mentioning '%s'\n", s->name,
                    collGetErrorString(r), msg, collGetErrorString(s->want), s->message);
            return 1;
        }
        return 0;
    }
    if (r != collSuccess) {
        fprintf(stderr, "%s rank %d: init failed: %s\n", s->name, rank, collGetLastError(NULL));
        return 1;
    }
    int got_rank = -1, got_n = -1;
    collCommUserRank(comm, &got_rank);
    collCommCount(comm, &got_n);
    int32_t v = got_rank + 1, sum = 0;
    r = collAllReduce(&v, &sum, 1, collInt32, collSum, comm, NULL);
    collCommDestroy(comm);
    int want_sum = s->nranks * (s->nranks + 1) / 2;
    if (got_rank != rank || got_n != s->nranks || r != collSuccess || sum != want_sum) {
        fprintf(stderr, "%s rank %d: rank %d of %d, allreduce %s sum %d (want %d)\n", s->name,
                rank, got_rank, got_n, collGetErrorString(r), sum, want_sum);
        return 1;
    }
    return 0;
}

static void run_scenario(const struct scenario *s)
{
    int port = launch_free_port();
    REQUIRE(port > 0);
    pid_t pids[8];
    for (int r = 0; r < s->nranks; r++) {
        pids[r] = fork();
        REQUIRE(pids[r] >= 0);
        if (pids[r] == 0)
            _exit(run_rank(s, r, port));
    }
    int ok = 1;
    for (int r = 0; r < s->nranks; r++) {
        int st;
        waitpid(pids[r], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            ok = 0;
    }
    CHECK_MSG(ok, "scenario %s failed", s->name);
    printf("env %-28s %s\n", s->name, ok ? "ok" : "FAILED");
}

int main(void)
{
#define OK(nm, n, ...) {.name = nm, .nranks = n, .vars = {__VA_ARGS__}, .want = collSuccess}
#define BAD(nm, msg, ...)                                                                      \
    {.name = nm, .nranks = 1, .vars = {__VA_ARGS__}, .want = collInvalidArgument, .message = msg}
    const struct scenario scenarios[] = {
        OK("torchrun", 3, "RANK=%d", "WORLD_SIZE=3", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=%p"),
        /* torchrun without its agent's store (1.13's --standalone): the root on
         * MASTER_PORT; with the store, tests/test_torchrun.sh runs the real torchrun. */
        OK("torchrun-no-agent-store", 2, "RANK=%d", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1",
           "MASTER_PORT=%p", "TORCHELASTIC_RUN_ID=job", "TORCHELASTIC_USE_AGENT_STORE=False"),
        OK("openmpi", 3, "OMPI_COMM_WORLD_RANK=%d", "OMPI_COMM_WORLD_SIZE=3",
           "COLL_COMM_ID=127.0.0.1:%p"),
        OK("slurm", 2, "SLURM_PROCID=%d", "SLURM_NTASKS=2", "MASTER_ADDR=127.0.0.1",
           "MASTER_PORT=%p"),
        OK("pmi", 2, "PMI_RANK=%d", "PMI_SIZE=2", "COLL_COMM_ID=127.0.0.1:%p"),
        OK("coll-before-torchrun", 2, "COLL_RANK=%d", "COLL_NRANKS=2", "RANK=7", "WORLD_SIZE=9",
           "COLL_COMM_ID=127.0.0.1:%p", "COLL_SECRET=00112233445566778899aabbccddeeff"),
        BAD("no-variables", "COLL_RANK", NULL),
        BAD("rank-without-size", "WORLD_SIZE", "RANK=0", "MASTER_ADDR=127.0.0.1",
            "MASTER_PORT=%p"),
        BAD("rank-not-a-number", "RANK=abc", "RANK=abc", "WORLD_SIZE=2",
            "COLL_COMM_ID=127.0.0.1:%p"),
        BAD("rank-outside-size", "outside", "RANK=5", "WORLD_SIZE=2", "COLL_COMM_ID=127.0.0.1:%p"),
        BAD("no-root-address", "COLL_COMM_ID", "RANK=0", "WORLD_SIZE=1"),
        BAD("bad-root-address", "COLL_COMM_ID", "RANK=0", "WORLD_SIZE=1",
            "COLL_COMM_ID=no-port-here"),
        BAD("bad-secret", "COLL_SECRET", "RANK=0", "WORLD_SIZE=1", "COLL_COMM_ID=127.0.0.1:%p",
            "COLL_SECRET=xyz"),
    };
#undef OK
#undef BAD
    for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++)
        run_scenario(&scenarios[i]);
    return test_result();
}
