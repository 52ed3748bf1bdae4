/* What the machine measured, kept once per process.
 *
 * The planner (lib/core/plan.c) and ll time the machine the first time a
 * communicator needs the figures; every later communicator of the process (a
 * split, a PyTorch subgroup, a second init) reuses them instead of measuring
 * again.  Figures are stored under a key that names what they were measured
 * over ("plan:shm", "ll:4"), in agreement form: larger is worse (bandwidths
 * negated), so that the largest of every rank's figures is the collective's.
 *
 * Every rank of a communicator must use the same figures, so reuse is agreed:
 * coll_machine_agree says "measure" unless every rank has figures under its
 * key.  COLL_MODEL_REMEASURE=1 measures every time; COLL_MODEL_FILE keeps the
 * figures across runs (read at the first look-up, written at each store), so
 * that a job run again makes the same choices. */
#ifndef COLL_MACHINE_H
#define COLL_MACHINE_H

#include <stdbool.h>
#include <stddef.h>

#include "internal.h"

#define COLL_MACHINE_KEY_MAX 64
#define COLL_MACHINE_FIGS_MAX 16

/* Copies the n figures stored under key into v; false when there are none (or
 * COLL_MODEL_REMEASURE is set).  Thread-safe. */
bool coll_machine_get(const char *key, double *v, size_t n);
/* Stores n figures under key (replacing any), and writes COLL_MODEL_FILE when
 * set.  Thread-safe. */
void coll_machine_put(const char *key, const double *v, size_t n);

/* Collective over comm: whether every rank has n figures under its key (each
 * rank's own: ranks may see the machine through different transports), and
 * then, in v, the largest of each.  *have false: the caller measures, on every
 * rank. */
collResult_t coll_machine_agree(struct coll_comm *comm, const char *key, double *v, size_t n,
                                bool *have);

#endif
