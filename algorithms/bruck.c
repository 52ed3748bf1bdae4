/* Bruck's allgather, the latency path under small allreduces.
 *
 * Step k (distance d = 2^k) sends the first min(d, n - d) blocks this rank holds to
 * rank r - d and receives as many from rank r + d, appended after its own.  After
 * ceil(log2 n) steps every rank holds all n blocks, starting with its own:
 *
 *   n = 5, rank 0 holds     step 0 (d=1)   step 1 (d=2)     step 2 (d=4)
 *                            0 1            0 1 2 3          0 1 2 3 4
 *
 * Each rank sends (n-1) blocks in all, like a ring allgather, but in ceil(log2 n)
 * hops instead of n-1: for small blocks the hops are the cost.  Works for any n.
 */
#include "bruck.h"

#include <string.h>

#include "exec.h"

collResult_t coll_bruck_allgather(struct coll_comm *comm, const void *in, void *out, size_t bytes)
{
    int n = comm->nranks, r = comm->rank;
    char *o = out;
    memcpy(o, in, bytes);
    for (int d = 1; d < n; d *= 2) {
        int cnt = d < n - d ? d : n - d;
        int to = (r - d + n) % n, from = (r + d) % n;
        struct coll_conn *sc, *rc;
        COLL_CHECK(coll_transport_get_conn(comm, to, true, &sc));
        COLL_CHECK(coll_transport_get_conn(comm, from, false, &rc));
        struct coll_req *reqs[2];
        COLL_CHECK(coll_exec_irecv(comm, rc, o + (size_t)d * bytes, (size_t)cnt * bytes, &reqs[0]));
        COLL_CHECK(coll_exec_isend(comm, sc, o, (size_t)cnt * bytes, &reqs[1]));
        struct coll_wait w;
        coll_exec_wait_init(comm, &w, (size_t)cnt * bytes);
        for (;;) {
            bool d0, d1;
            COLL_CHECK(coll_exec_test(comm, &reqs[0], &d0));
            COLL_CHECK(coll_exec_test(comm, &reqs[1], &d1));
            if (d0 && d1)
                break;
            COLL_CHECK(coll_exec_idle(comm, &w, reqs, 2));
        }
    }
    return collSuccess;
}
