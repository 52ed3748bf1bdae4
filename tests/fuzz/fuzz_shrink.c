/* Fuzz target: what collCommShrink reads from the network (lib/core/split.c): a join
 * at the coordinator, read a piece at a time (coll_wire_shrink_join on every
 * prefix, as the coordinator does), and the coordinator's answer at a member
 * (coll_wire_shrink_reply).  The first input byte picks which, and the size of
 * the old communicator (1 to 8 ranks); the epoch is 3. */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    bool reply = data[0] & 1;
    int nranks = (data[0] >> 1) % 8 + 1;
    data++;
    size--;
    const char *why = NULL;
    if (!reply) {
        struct coll_shrink_join j;
        for (size_t got = 0; got <= size; got++) {
            why = NULL;
            enum coll_wire_verdict v =
                coll_wire_shrink_join(data, got, fuzz_secret, 3, nranks, &j, &why);
            if (v == COLL_WIRE_MORE) {
                FUZZ_ASSERT(got < sizeof(j));
                continue;
            }
            if (v == COLL_WIRE_OK) {
                FUZZ_ASSERT(got == sizeof(j));
                FUZZ_ASSERT(j.magic == COLL_SHRINK_MAGIC && j.epoch == 3);
                FUZZ_ASSERT(coll_wire_secret_equal(j.secret, fuzz_secret));
                FUZZ_ASSERT(j.rank >= 0 && j.rank < nranks);
                FUZZ_ASSERT(j.suspect >= -1 && j.suspect < nranks);
            } else {
                FUZZ_ASSERT(why != NULL);
            }
            break; /* a verdict ends the reading, as at the coordinator */
        }
        return 0;
    }
    struct coll_shrink_reply rep;
    if (coll_wire_shrink_reply(data, size, fuzz_secret, 3, nranks, &rep, &why) == COLL_WIRE_OK) {
        FUZZ_ASSERT(size == sizeof(rep));
        FUZZ_ASSERT(rep.epoch == 3 && strlen(rep.msg) < sizeof(rep.msg));
        FUZZ_ASSERT(rep.status >= collSuccess && rep.status < collNumResults);
        if (rep.status == collSuccess) {
            FUZZ_ASSERT(rep.nranks >= 1 && rep.nranks <= nranks);
            FUZZ_ASSERT(rep.rank >= 1 && rep.rank < rep.nranks);
            FUZZ_ASSERT(rep.id.magic == COLL_ID_MAGIC && coll_wire_addr_ok(&rep.id.addr,
                                                                           rep.id.addrlen));
        }
    } else {
        FUZZ_ASSERT(why != NULL);
    }
    return 0;
}
