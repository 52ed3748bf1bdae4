/*
 * dp_trainer's command line.
 */
#ifndef TRAINER_OPTIONS_H
#define TRAINER_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>

#include "pipeline.h"

#define TRAINER_MAX_HIDDEN 16

enum trainer_mode { MODE_DDP, MODE_PS };

struct options {
    long steps;
    long batch;
    double lr;
    double momentum;
    uint64_t seed;
    int hidden[TRAINER_MAX_HIDDEN];
    int nhidden;
    enum trainer_mode mode;
    const char *algo;       /* NULL: ps takes naive, ddp leaves the choice to the planner */
    double bucket_mb;
    bool no_overlap;
    const char *data;       /* NULL: the synthetic set */
    const char *checkpoint;
    long checkpoint_every;  /* 0: only after the last step */
    const char *resume;
    const char *dump_params;
    bool quiet;
    bool rank_report;       /* a line per rank at the end (always with --tp/--pp > 1) */
    bool elastic;           /* on a rank's failure, shrink and go on */
    const char *join;       /* --join HOST:PORT (or COLL_JOIN): a new process joining
                             * a running elastic job there */
    const char *grow_listen;/* --grow-listen HOST:PORT: where rank 0 of an elastic job
                             * takes new processes (default: COLL_COMM_ID's address) */
    long fail_rank;         /* test hook --fail-at R:S: rank R kills itself at step S; */
    long fail_step;         /* -1: none */
    /* model parallelism (docs/parallelism.md) */
    int tp;                 /* tensor group size T */
    int pp;                 /* pipeline stages P */
    long micro_batches;     /* M; 0 until resolved: 1 when P = 1, else 4 */
    enum pipe_schedule schedule;
};

/* Parses argv into o.  Returns 0 to run, 1 after printing the help (exit 0), or 2
 * after printing an error that names the flag (exit 2). */
int options_parse(int argc, char **argv, struct options *o);

/* Sets COLL_ALGO for the mode and --algo, unless the environment already has one.
 * Returns a description for the start line. */
const char *options_apply_algo(const struct options *o);

#endif
