/*
 * scatter_perf: times collScatter as nccl-tests' scatter_perf does.
 *
 * Size is the root's whole send buffer, n * count elements, where count (the
 * count column) is what each rank receives; as in nccl-tests, count is rounded
 * down to a multiple of 16 bytes, so small sizes may run with count 0.  algbw is
 * the whole buffer over the time and busbw = algbw * (n-1)/n: the root sends the
 * (n-1)/n of the buffer that other ranks receive.  In place, rank r receives at
 * sendbuff + r * count.  -r all times every rank as root in turn.
 *
 * Checks: every rank's receive buffer holds its block of the root's input.
 */
#include "common.h"

static void scatter_layout(size_t count, size_t elt_size, int nranks, struct perf_layout *lay_p)
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

/* The root's input is the whole buffer; rank r receives elements
 * [r * count, (r+1) * count) of it.  The other ranks' send buffers are not read. */
static void scatter_init_data(struct perf_case *c)
{
    size_t base = c->lay.param_count;
    if (c->rank == c->root)
        perf_fill_input(c, c->sendp, c->lay.send_count, 0, c->root);
    perf_fill_input(c, c->expected, base, (size_t)c->rank * base, c->root);
}

static void scatter_bandwidth(size_t param_count, size_t elt_size, double seconds, int nranks,
                              double *algbw_p, double *busbw_p)
{
    double algbw = (double)(param_count * elt_size * (size_t)nranks) / 1e9 / seconds;
    *algbw_p = algbw;
    *busbw_p = algbw * (nranks - 1) / nranks;
}

static collResult_t scatter_run(const void *sendbuff, void *recvbuff, size_t count,
                                collDataType_t type, collRedOp_t op, int root, collComm_t comm,
                                collStream_t stream)
{
    return collScatter(sendbuff, recvbuff, count, type, root, comm, stream);
}

static const struct perf_coll scatter_coll = {
    .name = "scatter",
    .has_op = false,
    .has_root = true,
    .layout = scatter_layout,
    .init_data = scatter_init_data,
    .bandwidth = scatter_bandwidth,
    .run = scatter_run,
};

int main(int argc, char **argv)
{
    return perf_main(argc, argv, &scatter_coll);
}
