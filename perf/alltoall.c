/*
 * alltoall_perf: times collAllToAll as nccl-tests' alltoall_perf does.
 *
 * Size is the whole send buffer, n * count elements, where count (the count
 * column) is the block each rank sends to each rank.  algbw is the whole buffer
 * over the time and busbw = algbw * (n-1)/n: each rank sends and receives all
 * blocks but its own.  In place, the call runs with sendbuff == recvbuff.
 */
#include "common.h"

static void alltoall_layout(size_t count, size_t elt_size, int nranks, struct perf_layout *lay_p)
{
    size_t block = count / (size_t)nranks;
    *lay_p = (struct perf_layout){
        .send_count = block * (size_t)nranks,
        .recv_count = block * (size_t)nranks,
        .param_count = block,
        .send_ip_offset = 0,
        .recv_ip_offset = 0,
    };
}

/* Rank r sends input elements [j * count, (j+1) * count) of its buffer to rank j, so
 * its block i comes from rank i's elements [r * count, (r+1) * count). */
static void alltoall_init_data(struct perf_case *c)
{
    size_t block = c->lay.param_count;
    size_t elt = perf_type_size(c->type);
    perf_fill_input(c, c->sendp, c->lay.send_count, 0, c->rank);
    for (int i = 0; i < c->nranks; i++)
        perf_fill_input(c, (char *)c->expected + (size_t)i * block * elt, block,
                        (size_t)c->rank * block, i);
}

static void alltoall_bandwidth(size_t param_count, size_t elt_size, double seconds, int nranks,
                               double *algbw_p, double *busbw_p)
{
    double algbw = (double)(param_count * elt_size * (size_t)nranks) / 1e9 / seconds;
    *algbw_p = algbw;
    *busbw_p = algbw * (nranks - 1) / nranks;
}

static collResult_t alltoall_run(const void *sendbuff, void *recvbuff, size_t count,
                                 collDataType_t type, collRedOp_t op, int root, collComm_t comm,
                                 collStream_t stream)
{
    return collAllToAll(sendbuff, recvbuff, count, type, comm, stream);
}

static const struct perf_coll alltoall_coll = {
    .name = "alltoall",
    .has_op = false,
    .has_root = false,
    .layout = alltoall_layout,
    .init_data = alltoall_init_data,
    .bandwidth = alltoall_bandwidth,
    .run = alltoall_run,
};

int main(int argc, char **argv)
{
    return perf_main(argc, argv, &alltoall_coll);
}
