/*
 * allreduce_perf: times collAllReduce as nccl-tests' all_reduce_perf does.
 *
 * Size is the buffer of count elements every rank sends and receives.  Bus
 * bandwidth is algbw * 2(n-1)/n: a ring allreduce sends and receives 2(n-1)/n of
 * the buffer per rank, so busbw is comparable with the link speed for any n.
 */
#include "common.h"

static void allreduce_layout(size_t count, size_t elt_size, int nranks, struct perf_layout *lay_p)
{
    *lay_p = (struct perf_layout){
        .send_count = count,
        .recv_count = count,
        .param_count = count,
    };
}

static void allreduce_init_data(struct perf_case *c)
{
    perf_fill_input(c, c->sendp, c->lay.send_count, 0, c->rank);
    perf_fill_reduced(c, c->expected, c->lay.recv_count, 0);
}

static void allreduce_bandwidth(size_t param_count, size_t elt_size, double seconds, int nranks,
                                double *algbw_p, double *busbw_p)
{
    double algbw = (double)(param_count * elt_size) / 1e9 / seconds;
    *algbw_p = algbw;
    *busbw_p = algbw * (2.0 * (nranks - 1)) / nranks;
}

static collResult_t allreduce_run(const void *sendbuff, void *recvbuff, size_t count,
                                  collDataType_t type, collRedOp_t op, int root, collComm_t comm,
                                  collStream_t stream)
{
    return collAllReduce(sendbuff, recvbuff, count, type, op, comm, stream);
}

static const struct perf_coll allreduce_coll = {
    .name = "allreduce",
    .has_op = true,
    .has_root = false,
    .layout = allreduce_layout,
    .init_data = allreduce_init_data,
    .bandwidth = allreduce_bandwidth,
    .run = allreduce_run,
};

int main(int argc, char **argv)
{
    return perf_main(argc, argv, &allreduce_coll);
}
