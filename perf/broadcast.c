/*
 * broadcast_perf: times collBroadcast as nccl-tests' broadcast_perf does.
 *
 * Size is the buffer of count elements the root sends and every rank receives.
 * Bus bandwidth equals algbw: in a pipelined chain every link carries the whole
 * buffer once, whatever n.  -r all times every rank as root in turn.
 */
#include "common.h"

static void broadcast_layout(size_t count, size_t elt_size, int nranks, struct perf_layout *lay_p)
{
    *lay_p = (struct perf_layout){
        .send_count = count,
        .recv_count = count,
        .param_count = count,
    };
}

static void broadcast_init_data(struct perf_case *c)
{
    /* Only the root's send buffer is read; the others' receive buffers start
     * zeroed, so a rank the data never reached shows up as wrong. */
    if (c->rank == c->root)
        perf_fill_input(c, c->sendp, c->lay.send_count, 0, c->rank);
    perf_fill_input(c, c->expected, c->lay.recv_count, 0, c->root);
}

static void broadcast_bandwidth(size_t param_count, size_t elt_size, double seconds, int nranks,
                                double *algbw_p, double *busbw_p)
{
    double algbw = (double)(param_count * elt_size) / 1e9 / seconds;
    *algbw_p = algbw;
    *busbw_p = algbw;
}

static collResult_t broadcast_run(const void *sendbuff, void *recvbuff, size_t count,
                                  collDataType_t type, collRedOp_t op, int root, collComm_t comm,
                                  collStream_t stream)
{
    return collBroadcast(sendbuff, recvbuff, count, type, root, comm, stream);
}

static const struct perf_coll broadcast_coll = {
    .name = "broadcast",
    .has_op = false,
    .has_root = true,
    .layout = broadcast_layout,
    .init_data = broadcast_init_data,
    .bandwidth = broadcast_bandwidth,
    .run = broadcast_run,
};

int main(int argc, char **argv)
{
    return perf_main(argc, argv, &broadcast_coll);
}
