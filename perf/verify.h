/*
 * Internal to the perf harness: what common.c needs from verify.c (types and
 * ops by name, and the check of a result).  The tools include common.h only.
 */
#ifndef COLL_PERF_VERIFY_H
#define COLL_PERF_VERIFY_H

#include <stdbool.h>
#include <stdint.h>

#include "common.h"

/* nccl-tests' name of type t, as the type column prints it. */
const char *perf_type_name(collDataType_t t);
/* The type a -d name (nccl-tests' or the library's) stands for.  Returns false,
 * leaving *type_p alone, for an unknown name. */
bool perf_type_parse(const char *name, collDataType_t *type_p);
/* The name of op, as -o takes it and the redop column prints it. */
const char *perf_op_name(collRedOp_t op);
/* The op an -o name stands for.  Returns false, leaving *op_p alone, for an
 * unknown name. */
bool perf_op_parse(const char *name, collRedOp_t *op_p);

/* Compares c->check_count elements at c->recvp with c->expected and returns how
 * many differ.  When some do, says so on stderr with the first of them, naming
 * the tool and the collective, in case the count combined across ranks is itself
 * wrong. */
int64_t perf_check(const struct perf_case *c, const struct perf_coll *coll, const char *tool);

#endif
