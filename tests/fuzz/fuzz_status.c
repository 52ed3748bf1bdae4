/* Fuzz target: the status queries' messages (lib/engine/status.c,
 * tools/job_status.c): a request at a rank's listener, read a piece at a time
 * (coll_wire_status_req on every prefix, as the listener's hello table does), a
 * rank's answer at the client (coll_wire_status_reply), and a table at the
 * client (coll_wire_status_table, then coll_wire_status_addrs on the rest).  The
 * first input byte picks which (bits 0-1), the size of the job (1 to 8 ranks)
 * and the rank asked (-1 to nranks - 1). */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int which = data[0] & 3;
    int nranks = (data[0] >> 2) % 8 + 1;
    int want = (int)(data[0] >> 5) % (nranks + 1) - 1;
    data++;
    size--;
    const char *why = NULL;
    if (which == 0) {
        struct coll_status_req q;
        for (size_t got = 0; got <= size; got++) {
            why = NULL;
            enum coll_wire_verdict v = coll_wire_status_req(data, got, fuzz_secret, &q, &why);
            if (v == COLL_WIRE_MORE) {
                FUZZ_ASSERT(got < sizeof(q));
                continue;
            }
            if (v == COLL_WIRE_OK) {
                FUZZ_ASSERT(got == sizeof(q) && q.magic == COLL_STATUS_MAGIC);
                FUZZ_ASSERT(coll_wire_secret_equal(q.secret, fuzz_secret));
                FUZZ_ASSERT(q.version == COLL_STATUS_VERSION);
                FUZZ_ASSERT(q.ask == COLL_STATUS_ASK_RANK || q.ask == COLL_STATUS_ASK_TABLE);
            } else if (v == COLL_WIRE_BAD_FIELD) {
                FUZZ_ASSERT(why != NULL);
            }
            break; /* a verdict ends the reading, as at the listener */
        }
        return 0;
    }
    if (which == 1) {
        struct coll_status_reply r;
        if (coll_wire_status_reply(data, size, fuzz_secret, want, &r, &why) != COLL_WIRE_OK)
            return 0;
        FUZZ_ASSERT(size == sizeof(r) && r.version == COLL_STATUS_VERSION);
        FUZZ_ASSERT(r.nranks >= 1 && r.rank >= 0 && r.rank < r.nranks);
        FUZZ_ASSERT(want < 0 || r.rank == want);
        FUZZ_ASSERT(r.wait_peer >= -1 && r.wait_peer < r.nranks);
        FUZZ_ASSERT(r.failed_peer >= -1 && r.failed_peer < r.nranks);
        FUZZ_ASSERT(r.revoked_by >= -1 && r.revoked_by < r.nranks);
        FUZZ_ASSERT(r.npeers >= 0 && r.npeers <= COLL_STATUS_PEERS && r.open >= 0);
        FUZZ_ASSERT(r.cur.state >= -1 && r.cur.state <= 3 && r.last.state >= -1 &&
                    r.last.state <= 3);
        for (int k = 0; k < r.npeers; k++)
            FUZZ_ASSERT(r.peers[k].peer >= -1 && r.peers[k].peer < r.nranks);
        FUZZ_ASSERT(strlen(r.host) < sizeof(r.host) && strlen(r.comm_name) < sizeof(r.comm_name));
        FUZZ_ASSERT(strlen(r.cur.name) < sizeof(r.cur.name) &&
                    strlen(r.last.algo) < sizeof(r.last.algo));
        return 0;
    }
    struct coll_status_table t;
    if (size < sizeof(t) ||
        coll_wire_status_table(data, sizeof(t), fuzz_secret, &t, &why) != COLL_WIRE_OK)
        return 0;
    FUZZ_ASSERT(t.nranks >= 1 && t.rank >= 0 && t.rank < t.nranks);
    /* The client reads exactly t.nranks entries: here only what the input holds. */
    size_t rest = size - sizeof(t);
    if (rest != (size_t)t.nranks * sizeof(struct coll_status_addr) || t.nranks > nranks)
        return 0;
    struct coll_status_addr out[8];
    if (coll_wire_status_addrs(data + sizeof(t), rest, t.nranks, out, &why) == COLL_WIRE_OK) {
        for (int k = 0; k < t.nranks; k++) {
            FUZZ_ASSERT(out[k].rank == k && coll_wire_addr_ok(&out[k].addr, out[k].addrlen));
            FUZZ_ASSERT(strlen(out[k].host) < sizeof(out[k].host));
        }
    } else {
        FUZZ_ASSERT(why != NULL);
    }
    return 0;
}
