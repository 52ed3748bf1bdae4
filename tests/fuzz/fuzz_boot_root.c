/* Fuzz target: what the bootstrap root and a rank's ring listener read from a
 * connection (coll_wire_boot_register, coll_wire_ring_hello), fed as the bytes
 * arrive: every prefix in steps chosen by the first input byte, as a client
 * sending a few bytes at a time would deliver them. */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t step = (size_t)(data[0] % 64) + 1;
    const uint8_t *msg = data + 1;
    size_t n = size - 1;
    bool done_reg = false, done_ring = false;
    for (size_t got = 1; got <= n; got = got + step > n && got < n ? n : got + step) {
        const char *why = NULL;
        struct coll_boot_register reg;
        if (!done_reg) {
            enum coll_wire_verdict v = coll_wire_boot_register(msg, got, fuzz_secret, &reg, &why);
            FUZZ_ASSERT(v >= COLL_WIRE_OK && v <= COLL_WIRE_BAD_FIELD);
            /* MORE only while the message is not whole yet. */
            FUZZ_ASSERT(v != COLL_WIRE_MORE || got < sizeof(reg));
            FUZZ_ASSERT(v != COLL_WIRE_BAD_FIELD || why != NULL);
            if (v == COLL_WIRE_OK) {
                FUZZ_ASSERT(got == sizeof(reg));
                FUZZ_ASSERT(reg.nranks >= 1 && reg.nranks <= COLL_WIRE_MAX_NRANKS);
                FUZZ_ASSERT(reg.rank >= 0 && reg.rank < reg.nranks);
                FUZZ_ASSERT(coll_wire_secret_equal(reg.secret, fuzz_secret));
                fuzz_check_info(&reg.info, reg.rank);
            }
            done_reg = v != COLL_WIRE_MORE;
        }
        if (!done_ring) {
            int prev = data[0] % FUZZ_NRANKS;
            enum coll_wire_verdict v = coll_wire_ring_hello(msg, got, fuzz_secret, prev, &why);
            FUZZ_ASSERT(v != COLL_WIRE_MORE || got < sizeof(struct coll_boot_ring_hello));
            if (v == COLL_WIRE_OK) {
                struct coll_boot_ring_hello h;
                memcpy(&h, msg, sizeof(h));
                FUZZ_ASSERT(got == sizeof(h) && h.rank == prev);
            }
            done_ring = v != COLL_WIRE_MORE;
        }
        if (done_reg && done_ring)
            break;
    }
    return 0;
}
