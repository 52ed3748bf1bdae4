/*
 * barrier_perf: times collBarrier (not in nccl-tests; the columns are theirs).
 *
 * A barrier moves no data of the caller's: run it with -b 0 -e 0, and read the
 * time column (size, algbw and busbw stay 0).  -y 0 queues the barriers on a
 * stream.
 */
#include "common.h"

static void barrier_layout(size_t count, size_t elt_size, int nranks, struct perf_layout *lay_p)
{
    (void)count;
    (void)elt_size;
    (void)nranks;
    *lay_p = (struct perf_layout){0};
}

static void barrier_init_data(struct perf_case *c)
{
    (void)c;
}

static void barrier_bandwidth(size_t param_count, size_t elt_size, double seconds, int nranks,
                              double *algbw_p, double *busbw_p)
{
    (void)param_count;
    (void)elt_size;
    (void)seconds;
    (void)nranks;
    *algbw_p = 0;
    *busbw_p = 0;
}

static collResult_t barrier_run(const void *sendbuff, void *recvbuff, size_t count,
                                collDataType_t type, collRedOp_t op, int root, collComm_t comm,
                                collStream_t stream)
{
    (void)sendbuff;
    (void)recvbuff;
    (void)count;
    (void)type;
    (void)op;
    (void)root;
    return collBarrier(comm, stream);
}

static const struct perf_coll barrier_coll = {
    .name = "barrier",
    .has_op = false,
    .has_root = false,
    .layout = barrier_layout,
    .init_data = barrier_init_data,
    .bandwidth = barrier_bandwidth,
    .run = barrier_run,
};

int main(int argc, char **argv)
{
    return perf_main(argc, argv, &barrier_coll);
}
