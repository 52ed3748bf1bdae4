/*
 * reduce_scatter_perf: times collReduceScatter as nccl-tests'
 * reduce_scatter_perf does.
 *
 * Size is the whole send buffer, n * count elements, where count (the count
 * column) is what each rank receives; as in nccl-tests, count is rounded down
 * to a multiple of 16 bytes, so small sizes may run with count 0.  algbw is the
 * whole buffer over the time and busbw = algbw * (n-1)/n: each rank sends and
 * receives (n-1)/n of the buffer.  In place, rank r's result lands at
 * sendbuff + r * count.
 */
#include "common.h"

static void reduce_scatter_layout(size_t count, size_t elt_size, int nranks,
                                  struct perf_layout *lay_p)
{
    size_t base = (count / (size_t)nranks) & ~(16 / elt_size - 1);
    *lay_p = (struct perf_layout){
        .send_count = base * (size_t)nranks,
        .recv_count = base,
        .param_count = base,
        .send_ip_offset = 0,
        .recv_ip_offset = base,
    };
}

static void reduce_scatter_init_data(struct perf_case *c)
{
    perf_fill_input(c, c->sendp, c->lay.send_count, 0, c->rank);
    perf_fill_reduced(c, c->expected, c->lay.recv_count,
                      (size_t)c->rank * c->lay.recv_count);
}

static void reduce_scatter_bandwidth(size_t param_count, size_t elt_size, double seconds,
                                     int nranks, double *algbw_p, double *busbw_p)
{
    double algbw = (double)(param_count * elt_size * (size_t)nranks) / 1e9 / seconds;
    *algbw_p = algbw;
    *busbw_p = algbw * (nranks - 1) / nranks;
}

static collResult_t reduce_scatter_run(const void *sendbuff, void *recvbuff, size_t count,
                                       collDataType_t type, collRedOp_t op, int root,
                                       collComm_t comm, collStream_t stream)
{
    return collReduceScatter(sendbuff, recvbuff, count, type, op, comm, stream);
}

static const struct perf_coll reduce_scatter_coll = {
    .name = "reduce_scatter",
    .has_op = true,
    .has_root = false,
    .layout = reduce_scatter_layout,
    .init_data = reduce_scatter_init_data,
    .bandwidth = reduce_scatter_bandwidth,
    .run = reduce_scatter_run,
};

int main(int argc, char **argv)
{
    return perf_main(argc, argv, &reduce_scatter_coll);
}
