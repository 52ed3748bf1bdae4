/*
 * reduce_perf: times collReduce as nccl-tests' reduce_perf does.
 *
 * Size is the buffer of count elements every rank sends; the root receives the
 * reduction.  Bus bandwidth equals algbw: in a pipelined chain every link
 * carries the whole buffer once.  -r all times every rank as root in turn.
 *
 * Checks: the root's result; on other ranks in place, that the input was left
 * as it was (sendbuff is const).  Out of place, a non-root's receive buffer is
 * not checked: the API lets it be NULL and says nothing of its contents.
 */
#include "common.h"

#include <string.h>

static void reduce_layout(size_t count, size_t elt_size, int nranks, struct perf_layout *lay_p)
{
    *lay_p = (struct perf_layout){
        .send_count = count,
        .recv_count = count,
        .param_count = count,
    };
}

static void reduce_init_data(struct perf_case *c)
{
    perf_fill_input(c, c->sendp, c->lay.send_count, 0, c->rank);
    if (c->rank == c->root)
        perf_fill_reduced(c, c->expected, c->lay.recv_count, 0);
    else if (c->in_place)
        memcpy(c->expected, c->sendp, c->lay.recv_count * perf_type_size(c->type));
    else
        c->check_count = 0;
}

static void reduce_bandwidth(size_t param_count, size_t elt_size, double seconds, int nranks,
                             double *algbw_p, double *busbw_p)
{
    double algbw = (double)(param_count * elt_size) / 1e9 / seconds;
    *algbw_p = algbw;
    *busbw_p = algbw;
}

static collResult_t reduce_run(const void *sendbuff, void *recvbuff, size_t count,
                               collDataType_t type, collRedOp_t op, int root, collComm_t comm,
                               collStream_t stream)
{
    return collReduce(sendbuff, recvbuff, count, type, op, root, comm, stream);
}

static const struct perf_coll reduce_coll = {
    .name = "reduce",
    .has_op = true,
    .has_root = true,
    .layout = reduce_layout,
    .init_data = reduce_init_data,
    .bandwidth = reduce_bandwidth,
    .run = reduce_run,
};

int main(int argc, char **argv)
{
    return perf_main(argc, argv, &reduce_coll);
}
