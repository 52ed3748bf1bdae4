/*
 * all_gather_perf: times collAllGather as nccl-tests' all_gather_perf does.
 *
 * Size is the whole receive buffer, n * count elements, where count (the count
 * column) is what each rank sends; as in nccl-tests, count is rounded down to a
 * multiple of 16 bytes, so small sizes may run with count 0.  algbw is the whole
 * buffer over the time and busbw = algbw * (n-1)/n: each rank receives the
 * (n-1)/n of the buffer it does not already hold.  In place, rank r sends from
 * recvbuff + r * count.
 */
#include "common.h"

static void all_gather_layout(size_t count, size_t elt_size, int nranks,
                              struct perf_layout *lay_p)
{
    size_t base = (count / (size_t)nranks) & ~(16 / elt_size - 1);
    *lay_p = (struct perf_layout){
        .send_count = base,
        .recv_count = base * (size_t)nranks,
        .param_count = base,
        .send_ip_offset = base,
        .recv_ip_offset = 0,
    };
}

static void all_gather_init_data(struct perf_case *c)
{
    size_t elt = perf_type_size(c->type);
    size_t base = c->lay.param_count;
    perf_fill_input(c, c->sendp, base, 0, c->rank);
    for (int r = 0; r < c->nranks; r++)
        perf_fill_input(c, (char *)c->expected + (size_t)r * base * elt, base, 0, r);
}

static void all_gather_bandwidth(size_t param_count, size_t elt_size, double seconds, int nranks,
                                 double *algbw_p, double *busbw_p)
{
    double algbw = (double)(param_count * elt_size * (size_t)nranks) / 1e9 / seconds;
    *algbw_p = algbw;
    *busbw_p = algbw * (nranks - 1) / nranks;
}

static collResult_t all_gather_run(const void *sendbuff, void *recvbuff, size_t count,
                                   collDataType_t type, collRedOp_t op, int root, collComm_t comm,
                                   collStream_t stream)
{
    return collAllGather(sendbuff, recvbuff, count, type, comm, stream);
}

static const struct perf_coll all_gather_coll = {
    .name = "all_gather",
    .has_op = false,
    .has_root = false,
    .layout = all_gather_layout,
    .init_data = all_gather_init_data,
    .bandwidth = all_gather_bandwidth,
    .run = all_gather_run,
};

int main(int argc, char **argv)
{
    return perf_main(argc, argv, &all_gather_coll);
}
