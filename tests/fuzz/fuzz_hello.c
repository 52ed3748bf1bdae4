/* Fuzz target: the transports' hellos, read by a listener as they arrive
 * (tcp_wire_hello, verbs_wire_hello, every prefix), and the handles a rank
 * publishes in the rank table (tcp_wire_handle, verbs_wire_handle), and the
 * verbs rendezvous announcement a sender writes into a receiver's slot
 * (verbs_wire_rts, as long as the slot says).  The TCP
 * transport has no per-message header (both sides cut a message by its size),
 * so its hello is all it parses. */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int which = data[0] % 5;
    data++;
    size--;
    const char *why = NULL;
    if (which == 0 || which == 1) {
        struct tcp_wire_ctx tctx = {.secret = fuzz_secret, .nranks = FUZZ_NRANKS};
        struct verbs_wire_ctx vctx = {.secret = fuzz_secret, .nranks = FUZZ_NRANKS,
                                      .nslots = FUZZ_VERBS_NSLOTS,
                                      .slot_bytes = FUZZ_VERBS_SLOT_BYTES};
        size_t full = which == 0 ? sizeof(struct tcp_hello) : sizeof(struct verbs_hello);
        for (size_t got = 1; got <= size; got++) {
            int v = which == 0 ? tcp_wire_hello(data, got, &tctx, &why)
                               : verbs_wire_hello(data, got, &vctx, &why);
            FUZZ_ASSERT(v >= COLL_WIRE_OK && v <= COLL_WIRE_BAD_FIELD);
            FUZZ_ASSERT(v != COLL_WIRE_MORE || got < full);
            if (v == COLL_WIRE_OK && which == 0) {
                struct tcp_hello h;
                FUZZ_ASSERT(got == sizeof(h));
                memcpy(&h, data, sizeof(h));
                FUZZ_ASSERT(h.rank >= 0 && h.rank < FUZZ_NRANKS);
                FUZZ_ASSERT(h.nsocks >= 1 && h.nsocks <= TCP_MAX_SOCKS);
                FUZZ_ASSERT(h.sock_idx >= 0 && h.sock_idx < h.nsocks);
            } else if (v == COLL_WIRE_OK) {
                struct verbs_hello h;
                FUZZ_ASSERT(got == sizeof(h));
                memcpy(&h, data, sizeof(h));
                FUZZ_ASSERT(h.rank >= 0 && h.rank < FUZZ_NRANKS);
                FUZZ_ASSERT(h.nslots == FUZZ_VERBS_NSLOTS && h.slot_bytes == FUZZ_VERBS_SLOT_BYTES);
                FUZZ_ASSERT(h.qp.mtu >= 1 && h.qp.mtu <= 5);
            }
            if (v != COLL_WIRE_MORE)
                break;
        }
    } else if (which == 4) {
        struct verbs_rts r;
        if (verbs_wire_rts(data, size, &r, &why) == COLL_WIRE_OK) {
            FUZZ_ASSERT(size == sizeof(r) && r.magic == VERBS_RTS_MAGIC);
            FUZZ_ASSERT(r.len > 0 && r.addr + r.len > r.addr);
        } else {
            FUZZ_ASSERT(why != NULL);
        }
    } else {
        /* A handle slot is COLL_TP_HANDLE_BYTES in the rank table. */
        uint8_t slot[COLL_TP_HANDLE_BYTES] = {0};
        memcpy(slot, data, size < sizeof(slot) ? size : sizeof(slot));
        if (which == 2) {
            struct tcp_handle h;
            if (tcp_wire_handle(slot, sizeof(slot), &h, &why) == COLL_WIRE_OK) {
                FUZZ_ASSERT(h.nsocks >= 1 && h.nsocks <= TCP_MAX_SOCKS);
                FUZZ_ASSERT(coll_wire_addr_ok(&h.addr, h.addrlen));
            }
        } else {
            struct verbs_handle h;
            if (verbs_wire_handle(slot, sizeof(slot), &h, &why) == COLL_WIRE_OK) {
                /* What the sender's staging ring is sized by. */
                FUZZ_ASSERT(h.nslots >= 2 && h.nslots <= VERBS_MAX_SLOTS);
                FUZZ_ASSERT(h.slot_bytes >= VERBS_MIN_SLOT_BYTES &&
                            h.slot_bytes <= VERBS_MAX_SLOT_BYTES);
                FUZZ_ASSERT(coll_wire_addr_ok(&h.addr, h.addrlen));
            }
        }
    }
    return 0;
}
