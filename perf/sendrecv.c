/*
 * sendrecv_perf: times a ring exchange of collSend and collRecv in one group, as
 * nccl-tests' sendrecv_perf does: each rank sends count elements to rank + 1 and
 * receives as many from rank - 1.
 *
 * Size is the buffer of count elements each rank sends.  algbw is that over the
 * time and busbw = algbw: each rank's link carries the buffer once each way.  In
 * place, the same buffer is sent and received into (the group sends the bytes as
 * they were before the receive).
 */
#include "common.h"

static void sendrecv_layout(size_t count, size_t elt_size, int nranks, struct perf_layout *lay_p)
{
    *lay_p = (struct perf_layout){
        .send_count = count,
        .recv_count = count,
        .param_count = count,
    };
}

static void sendrecv_init_data(struct perf_case *c)
{
    perf_fill_input(c, c->sendp, c->lay.send_count, 0, c->rank);
    perf_fill_input(c, c->expected, c->lay.recv_count, 0, (c->rank + c->nranks - 1) % c->nranks);
}

static void sendrecv_bandwidth(size_t param_count, size_t elt_size, double seconds, int nranks,
                               double *algbw_p, double *busbw_p)
{
    double algbw = (double)(param_count * elt_size) / 1e9 / seconds;
    *algbw_p = algbw;
    *busbw_p = algbw;
}

static collResult_t sendrecv_run(const void *sendbuff, void *recvbuff, size_t count,
                                 collDataType_t type, collRedOp_t op, int root, collComm_t comm,
                                 collStream_t stream)
{
    int rank, nranks;
    collResult_t res = collCommUserRank(comm, &rank);
    if (res == collSuccess)
        res = collCommCount(comm, &nranks);
    if (res != collSuccess)
        return res;
    res = collGroupStart();
    if (res != collSuccess)
        return res;
    /* A refused call inside the group is reported again by collGroupEnd, which
     * must run anyway to close the group. */
    (void)collSend(sendbuff, count, type, (rank + 1) % nranks, comm, stream);
    (void)collRecv(recvbuff, count, type, (rank + nranks - 1) % nranks, comm, stream);
    return collGroupEnd();
}

static const struct perf_coll sendrecv_coll = {
    .name = "sendrecv",
    .has_op = false,
    .has_root = false,
    .layout = sendrecv_layout,
    .init_data = sendrecv_init_data,
    .bandwidth = sendrecv_bandwidth,
    .run = sendrecv_run,
};

int main(int argc, char **argv)
{
    return perf_main(argc, argv, &sendrecv_coll);
}
