/*
 * The harness shared by the perf tools (allreduce_perf, broadcast_perf, ...).
 *
 * Each tool is one small file that describes its collective with a struct
 * perf_coll (buffer layout per size, input and expected data, bandwidth
 * factors, the call itself) and hands it to perf_main, which does the rest as
 * nccl-tests does: flags, ranks as threads (-t) or one rank per process under
 * a launcher, warm-up, timing, checking and the report.  See docs/perf.md.
 */
#ifndef COLL_PERF_COMMON_H
#define COLL_PERF_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "collective.h"

/*
 * The buffers of one call at one size, in elements, as nccl-tests lays them
 * out.  In place, the send buffer is recvbuff + rank * send_ip_offset and the
 * receive buffer is recvbuff + rank * recv_ip_offset.
 */
struct perf_layout {
    size_t send_count;     /* elements the call reads */
    size_t recv_count;     /* elements the call writes: the span that is checked */
    size_t param_count;    /* the count argument passed to the call */
    size_t send_ip_offset;
    size_t recv_ip_offset;
};

/*
 * One call being prepared for a check.  The harness fills every field but
 * check_count before init_data runs, zeroes recv_count elements at recvp, and
 * afterwards compares check_count elements at recvp with expected.
 */
struct perf_case {
    int rank;
    int nranks;
    collDataType_t type;
    collRedOp_t op; /* collSum for the collectives without a reduction */
    int root;       /* -1 for the collectives without a root */
    bool in_place;
    uint64_t seed;
    struct perf_layout lay;
    void *sendp;    /* where the call reads its input (inside the receive buffer in place) */
    void *recvp;    /* where the call writes its result */
    void *expected; /* recv_count elements */
    size_t check_count; /* preset to lay.recv_count; 0 checks nothing on this rank */
};

/* Internal to the library, linked from its static archive: the transport between
 * this rank and peer ("shm", "tcp"), for the header's line on rank 0's peers.  What
 * each timed call used comes from the public collCommGetLastCallInfo. */
const char *coll_transport_peer_name(const struct coll_comm *comm, int peer);

struct perf_coll {
    const char *name; /* "allreduce": for messages and the JSON output */
    bool has_op;      /* loops over -o; otherwise the redop column reads "none" */
    bool has_root;    /* loops over -r; otherwise the root column reads -1 */
    /* The layout for a size of count elements of elt_size bytes. */
    void (*layout)(size_t count, size_t elt_size, int nranks, struct perf_layout *lay_p);
    /* Writes this rank's input at sendp and the expected result at expected. */
    void (*init_data)(struct perf_case *c);
    /* Algorithm bandwidth (bytes moved per second by the call as its user sees
     * it) and bus bandwidth (that times the collective's factor), both in GB/s. */
    void (*bandwidth)(size_t param_count, size_t elt_size, double seconds, int nranks,
                      double *algbw_p, double *busbw_p);
    /* Issues one call; stream is NULL (blocking) unless -y 0. */
    collResult_t (*run)(const void *sendbuff, void *recvbuff, size_t count,
                        collDataType_t type, collRedOp_t op, int root, collComm_t comm,
                        collStream_t stream);
};

/* Parses the flags, runs the benchmark and returns the process exit status:
 * 0, 1 (wrong results or a failed call) or 2 (bad flags). */
int perf_main(int argc, char **argv, const struct perf_coll *coll);

/* The input value of element `index` (counted from the start of the whole
 * buffer the collective reduces or gathers) on `rank`, written as the case's
 * type: count elements starting at index `offset` go to dst. */
void perf_fill_input(const struct perf_case *c, void *dst, size_t count, size_t offset, int rank);
/* The reduction with the case's op over all ranks of those inputs, rounded as
 * the library does: the exact result for count elements from `offset`. */
void perf_fill_reduced(const struct perf_case *c, void *dst, size_t count, size_t offset);
/* Size in bytes of one element of type t. */
size_t perf_type_size(collDataType_t t);

#endif
