/*
 * gather_perf: times collGather as nccl-tests' gather_perf does.
 *
 * Size is the root's whole receive buffer, n * count elements, where count (the
 * count column) is what each rank sends; as in nccl-tests, count is rounded down
 * to a multiple of 16 bytes, so small sizes may run with count 0.  algbw is the
 * whole buffer over the time and busbw = algbw * (n-1)/n: the root receives the
 * (n-1)/n of the buffer it does not hold already.  In place, rank r sends from
 * recvbuff + r * count.  -r all times every rank as root in turn.
 *
 * Checks: the root's receive buffer; on the other ranks, that the receive buffer
 * is left as it was (the API does not use it there): zeros, with the rank's own
 * input in its block in place.
 */
#include "common.h"

#include <string.h>

static void gather_layout(size_t count, size_t elt_size, int nranks, struct perf_layout *lay_p)
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

/* Rank r's input is elements [r * count, (r+1) * count) of the gathered buffer. */
static void gather_init_data(struct perf_case *c)
{
    size_t elt = perf_type_size(c->type);
    size_t base = c->lay.param_count;
    perf_fill_input(c, c->sendp, base, (size_t)c->rank * base, c->rank);
    if (c->rank == c->root) {
        for (int r = 0; r < c->nranks; r++)
            perf_fill_input(c, (char *)c->expected + (size_t)r * base * elt, base,
                            (size_t)r * base, r);
        return;
    }
    /* The harness zeroed the receive buffer before the input went in. */
    memcpy(c->expected, c->recvp, c->lay.recv_count * elt);
}

static void gather_bandwidth(size_t param_count, size_t elt_size, double seconds, int nranks,
                             double *algbw_p, double *busbw_p)
{
    double algbw = (double)(param_count * elt_size * (size_t)nranks) / 1e9 / seconds;
    *algbw_p = algbw;
    *busbw_p = algbw * (nranks - 1) / nranks;
}

static collResult_t gather_run(const void *sendbuff, void *recvbuff, size_t count,
                               collDataType_t type, collRedOp_t op, int root, collComm_t comm,
                               collStream_t stream)
{
    return collGather(sendbuff, recvbuff, count, type, root, comm, stream);
}

static const struct perf_coll gather_coll = {
    .name = "gather",
    .has_op = false,
    .has_root = true,
    .layout = gather_layout,
    .init_data = gather_init_data,
    .bandwidth = gather_bandwidth,
    .run = gather_run,
};

int main(int argc, char **argv)
{
    return perf_main(argc, argv, &gather_coll);
}
