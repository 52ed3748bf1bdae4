/*
 * dp_trainer's flags: --name VALUE or --name=VALUE.  Every value is checked in full
 * (no trailing junk, in range); an error names the flag and the value, and the
 * program exits 2.  Every rank parses the same command line, so every rank exits
 * alike, before any of them has joined the communicator.
 */
#include "options.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "Usage: collrun -n N dp_trainer [flags]   (or torchrun, mpirun, srun)\n"
    "Trains a multi-layer perceptron with data-parallel SGD over libcollective.\n"
    "  --steps N              optimiser steps in all (default 300)\n"
    "  --batch B              global batch, split over the ranks (default 256, >= ranks)\n"
    "  --lr X                 learning rate (default 0.05)\n"
    "  --momentum X           SGD momentum in [0, 1) (default 0.9)\n"
    "  --seed S               initial weights and data order (default 1)\n"
    "  --hidden W1,W2,...     hidden layer widths (default 256,128)\n"
    "  --mode ddp|ps          ddp: bucketed allreduce overlapping backward (default);\n"
    "                         ps: reduce to rank 0, update there, broadcast\n"
    "  --algo ring|tree|naive|rd\n"
    "                         ps: algorithm of reduce and broadcast (default naive; not rd)\n"
    "                         ddp: algorithm of the allreduce (default: the planner's)\n"
    "                         an existing COLL_ALGO in the environment wins\n"
    "  --bucket-mb X          ddp: gradient bucket size in MiB (default 1; 0: one per layer)\n"
    "  --no-overlap           ddp: launch the buckets only after the whole backward pass\n"
    "  --data FILE            CSV (or .csv.gz) rows, label last (default: synthetic set)\n"
    "  --checkpoint FILE      write a checkpoint (rank 0) after the last step and ...\n"
    "  --checkpoint-every K   ... after every K steps\n"
    "  --resume FILE          continue from a checkpoint\n"
    "  --dump-params FILE     write the final parameters (float32 little-endian, rank 0)\n"
    "  --quiet                print only the final line\n"
    "  --rank-report          every rank prints what it holds and sends per step (always\n"
    "                         on with --tp or --pp above 1)\n"
    "  --elastic              ddp: when ranks fail, the survivors shrink the communicator,\n"
    "                         re-shard the data among themselves and go on from the\n"
    "                         current step (run under collrun --keep-going); rank 0\n"
    "                         takes in new processes at the next step (--join)\n"
    "  --grow-listen HOST:PORT  --elastic: where rank 0 listens for new processes\n"
    "                         (default: the address of COLL_COMM_ID, free after init)\n"
    "  --join HOST:PORT       a new process: join the elastic job whose rank 0 listens\n"
    "                         there (default: COLL_JOIN, which collrun --respawn sets);\n"
    "                         it gets the parameters, momentum and step and trains on\n"
    "                         (implies --elastic)\n"
    "  --tp T                 tensor parallelism: hidden layers in pairs split over T\n"
    "                         ranks (default 1)\n"
    "  --pp P                 pipeline parallelism: the layers in P stages (default 1);\n"
    "                         the ranks form a grid of T x P x D, D data-parallel replicas\n"
    "  --micro-batches M      pipeline: micro-batches per global batch (default 1 with\n"
    "                         --pp 1, else 4)\n"
    "  --schedule gpipe|1f1b  pipeline schedule (default 1f1b)\n"
    "  --fail-at R:S          test hook: rank R kills itself (SIGKILL) before step S\n"
    "  --help                 this text\n";

static void defaults(struct options *o)
{
    memset(o, 0, sizeof(*o));
    o->steps = 300;
    o->batch = 256;
    o->lr = 0.05;
    o->momentum = 0.9;
    o->seed = 1;
    o->hidden[0] = 256;
    o->hidden[1] = 128;
    o->nhidden = 2;
    o->fail_rank = -1;
    o->fail_step = -1;
    o->mode = MODE_DDP;
    o->bucket_mb = 1.0;
    o->tp = 1;
    o->pp = 1;
    o->schedule = PIPE_1F1B;
}

static int bad(const char *flag, const char *value, const char *want)
{
    fprintf(stderr, "dp_trainer: %s: '%s' is not %s (see --help)\n", flag, value, want);
    return 2;
}

static int parse_long(const char *flag, const char *v, long lo, long *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || x < lo)
        return bad(flag, v, lo > 0 ? "a positive integer" : "an integer >= 0");
    *out = x;
    return 0;
}

static int parse_double(const char *flag, const char *v, double lo, double hi, double *out,
                        const char *want)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno != 0 || end == v || *end != '\0' || !isfinite(x) || x < lo || x >= hi)
        return bad(flag, v, want);
    *out = x;
    return 0;
}

static int parse_seed(const char *flag, const char *v, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 0);
    if (errno != 0 || end == v || *end != '\0' || strchr(v, '-') != NULL)
        return bad(flag, v, "an unsigned integer");
    *out = (uint64_t)x;
    return 0;
}

static int parse_hidden(const char *flag, const char *v, struct options *o)
{
    const char *p = v;
    o->nhidden = 0;
    for (;;) {
        char *end;
        errno = 0;
        long w = strtol(p, &end, 10);
        if (errno != 0 || end == p || w < 1 || w > 65536 || (*end != ',' && *end != '\0') ||
            o->nhidden == TRAINER_MAX_HIDDEN)
            return bad(flag, v, "a list of 1 to 16 widths in [1, 65536], such as 256,128");
        o->hidden[o->nhidden++] = (int)w;
        if (*end == '\0')
            return 0;
        p = end + 1;
    }
}

static int parse_mode(const char *flag, const char *v, struct options *o)
{
    if (strcmp(v, "ddp") == 0)
        o->mode = MODE_DDP;
    else if (strcmp(v, "ps") == 0)
        o->mode = MODE_PS;
    else
        return bad(flag, v, "ddp or ps");
    return 0;
}

static int parse_schedule(const char *flag, const char *v, struct options *o)
{
    if (strcmp(v, "gpipe") == 0)
        o->schedule = PIPE_GPIPE;
    else if (strcmp(v, "1f1b") == 0)
        o->schedule = PIPE_1F1B;
    else
        return bad(flag, v, "gpipe or 1f1b");
    return 0;
}

/* --tp, --pp: a group size in [1, 64]. */
static int parse_width(const char *flag, const char *v, int *out)
{
    long x;
    if (parse_long(flag, v, 1, &x) != 0)
        return 2;
    if (x > 64)
        return bad(flag, v, "a number of ranks in [1, 64]");
    *out = (int)x;
    return 0;
}

static int parse_algo(const char *flag, const char *v, struct options *o)
{
    static const char *const names[] = {"ring", "tree", "naive", "rd"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strcmp(v, names[i]) == 0) {
            o->algo = names[i];
            return 0;
        }
    return bad(flag, v, "ring, tree, naive or rd");
}

/* One flag with its value v (NULL for a flag without one). */
static int parse_flag(const char *flag, const char *v, struct options *o)
{
    if (strcmp(flag, "--steps") == 0)
        return parse_long(flag, v, 1, &o->steps);
    if (strcmp(flag, "--batch") == 0)
        return parse_long(flag, v, 1, &o->batch);
    if (strcmp(flag, "--lr") == 0)
        return parse_double(flag, v, 1e-300, INFINITY, &o->lr, "a positive number");
    if (strcmp(flag, "--momentum") == 0)
        return parse_double(flag, v, 0.0, 1.0, &o->momentum, "a number in [0, 1)");
    if (strcmp(flag, "--seed") == 0)
        return parse_seed(flag, v, &o->seed);
    if (strcmp(flag, "--hidden") == 0)
        return parse_hidden(flag, v, o);
    if (strcmp(flag, "--mode") == 0)
        return parse_mode(flag, v, o);
    if (strcmp(flag, "--algo") == 0)
        return parse_algo(flag, v, o);
    if (strcmp(flag, "--bucket-mb") == 0)
        return parse_double(flag, v, 0.0, 1e6, &o->bucket_mb, "a number of MiB >= 0");
    if (strcmp(flag, "--tp") == 0)
        return parse_width(flag, v, &o->tp);
    if (strcmp(flag, "--pp") == 0)
        return parse_width(flag, v, &o->pp);
    if (strcmp(flag, "--micro-batches") == 0)
        return parse_long(flag, v, 1, &o->micro_batches);
    if (strcmp(flag, "--schedule") == 0)
        return parse_schedule(flag, v, o);
    if (strcmp(flag, "--checkpoint-every") == 0)
        return parse_long(flag, v, 1, &o->checkpoint_every);
    if (strcmp(flag, "--fail-at") == 0) {
        char *end;
        long r = strtol(v, &end, 10);
        long st = *end == ':' ? strtol(end + 1, &end, 10) : -1;
        if (*v == '\0' || *end != '\0' || r < 0 || st < 0 || strchr(v, ':') == NULL)
            return bad(flag, v, "RANK:STEP, both numbers >= 0");
        o->fail_rank = r;
        o->fail_step = st;
        return 0;
    }
    if (strcmp(flag, "--join") == 0 || strcmp(flag, "--grow-listen") == 0) {
        if (strchr(v, ':') == NULL)
            return bad(flag, v, "HOST:PORT");
        *(strcmp(flag, "--join") == 0 ? &o->join : &o->grow_listen) = v;
        return 0;
    }
    const char **path = strcmp(flag, "--data") == 0          ? &o->data
                        : strcmp(flag, "--checkpoint") == 0  ? &o->checkpoint
                        : strcmp(flag, "--resume") == 0      ? &o->resume
                                                             : &o->dump_params;
    if (*v == '\0')
        return bad(flag, v, "a file name");
    *path = v;
    return 0;
}

static bool known_flag(const char *flag)
{
    static const char *const names[] = {
        "--steps", "--batch", "--lr", "--momentum", "--seed", "--hidden", "--mode", "--algo",
        "--bucket-mb", "--checkpoint-every", "--data", "--checkpoint", "--resume",
        "--dump-params", "--fail-at", "--tp", "--pp", "--micro-batches", "--schedule", "--join",
        "--grow-listen"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strcmp(flag, names[i]) == 0)
            return true;
    return false;
}

static int takes_no_value(const char *flag, struct options *o)
{
    if (strcmp(flag, "--no-overlap") == 0)
        o->no_overlap = true;
    else if (strcmp(flag, "--quiet") == 0)
        o->quiet = true;
    else if (strcmp(flag, "--elastic") == 0)
        o->elastic = true;
    else if (strcmp(flag, "--rank-report") == 0)
        o->rank_report = true;
    else
        return 0;
    return 1;
}

/* Checks between flags, once all are known. */
static int check_combination(const struct options *o)
{
    if (o->mode == MODE_PS && o->algo != NULL && strcmp(o->algo, "rd") == 0) {
        fprintf(stderr, "dp_trainer: --algo: 'rd' runs only allreduce and allgather; "
                        "--mode ps needs ring, tree or naive\n");
        return 2;
    }
    if (o->elastic && o->mode == MODE_PS) {
        fprintf(stderr, "dp_trainer: --elastic: needs --mode ddp (in ps mode rank 0 alone "
                        "holds the optimizer state)\n");
        return 2;
    }
    bool model_parallel = o->tp > 1 || o->pp > 1;
    if (model_parallel && o->mode == MODE_PS) {
        fprintf(stderr, "dp_trainer: --mode: ps keeps the whole model on every rank; model "
                        "parallelism (--tp %d, --pp %d) needs --mode ddp\n", o->tp, o->pp);
        return 2;
    }
    if (model_parallel && o->elastic) {
        fprintf(stderr, "dp_trainer: --elastic: needs --tp 1 --pp 1 (a lost rank takes a "
                        "part of the model with it)\n");
        return 2;
    }
    if (o->grow_listen != NULL && !o->elastic) {
        fprintf(stderr, "dp_trainer: --grow-listen: needs --elastic\n");
        return 2;
    }
    if (o->join != NULL && o->resume != NULL) {
        fprintf(stderr, "dp_trainer: --join: a joining process takes the job's state; it "
                        "cannot --resume a checkpoint\n");
        return 2;
    }
    if (o->checkpoint_every != 0 && o->checkpoint == NULL) {
        fprintf(stderr, "dp_trainer: --checkpoint-every: needs --checkpoint FILE\n");
        return 2;
    }
    return 0;
}

int options_parse(int argc, char **argv, struct options *o)
{
    defaults(o);
    for (int i = 1; i < argc; i++) {
        char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(usage, stdout);
            return 1;
        }
        if (takes_no_value(a, o))
            continue;
        if (strncmp(a, "--", 2) != 0) {
            fprintf(stderr, "dp_trainer: unexpected argument '%s' (see --help)\n", a);
            return 2;
        }
        char *eq = strchr(a, '=');
        const char *v;
        if (eq != NULL)
            *eq = '\0';
        if (!known_flag(a)) {
            bool plain = strcmp(a, "--no-overlap") == 0 || strcmp(a, "--quiet") == 0 ||
                         strcmp(a, "--elastic") == 0 || strcmp(a, "--rank-report") == 0;
            fprintf(stderr, plain ? "dp_trainer: %s takes no value (see --help)\n"
                                  : "dp_trainer: unknown flag '%s' (see --help)\n", a);
            return 2;
        }
        if (eq != NULL) {
            v = eq + 1;
        } else if (i + 1 < argc) {
            v = argv[++i];
        } else {
            fprintf(stderr, "dp_trainer: %s: needs a value (see --help)\n", a);
            return 2;
        }
        int r = parse_flag(a, v, o);
        if (r != 0)
            return r;
    }
    if (o->micro_batches == 0)
        o->micro_batches = o->pp == 1 ? 1 : 4;
    /* A process collrun --respawn started in place of a dead rank. */
    const char *join_env = getenv("COLL_JOIN");
    if (o->join == NULL && o->elastic && join_env != NULL && *join_env != '\0')
        o->join = join_env;
    if (o->join != NULL)
        o->elastic = true;
    return check_combination(o);
}

const char *options_apply_algo(const struct options *o)
{
    static char desc[128];
    const char *env = getenv("COLL_ALGO");
    if (env != NULL) {
        snprintf(desc, sizeof(desc), "COLL_ALGO=%s (from the environment)", env);
        return desc;
    }
    const char *name = o->algo != NULL ? o->algo : o->mode == MODE_PS ? "naive" : NULL;
    if (name == NULL)
        return "algorithm chosen by the planner";
    char spec[96];
    if (o->mode == MODE_PS)
        snprintf(spec, sizeof(spec), "reduce:%s;broadcast:%s", name, name);
    else
        snprintf(spec, sizeof(spec), "allreduce:%s", name);
    /* Before collCommInitFromEnv: the library reads its parameters once, at init. */
    setenv("COLL_ALGO", spec, 1);
    snprintf(desc, sizeof(desc), "COLL_ALGO=%s", spec);
    return desc;
}
