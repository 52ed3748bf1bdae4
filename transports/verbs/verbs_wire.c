/* Checks of the verbs transport's handle and hello (verbs_wire.h). */
#include "verbs_wire.h"

#include <string.h>

static bool verbs_wire_shape_ok(uint32_t nslots, uint32_t slot_bytes)
{
    return nslots >= 2 && nslots <= VERBS_MAX_SLOTS && slot_bytes >= VERBS_MIN_SLOT_BYTES &&
           slot_bytes <= VERBS_MAX_SLOT_BYTES && slot_bytes % 64 == 0;
}

int verbs_wire_hello(const void *buf, size_t got, const void *arg, const char **why_p)
{
    const struct verbs_wire_ctx *ctx = arg;
    struct verbs_hello h;
    enum coll_wire_verdict v = coll_wire_fixed(buf, got, VERBS_MAGIC, ctx->secret, sizeof(h),
                                               "verbs hello longer than its format", why_p);
    if (v != COLL_WIRE_OK)
        return v;
    memcpy(&h, buf, sizeof(h));
    if (h.rank < 0 || h.rank >= ctx->nranks) {
        *why_p = "verbs hello with a rank outside the communicator";
        return COLL_WIRE_BAD_FIELD;
    }
    if (h.nslots != ctx->nslots || h.slot_bytes != ctx->slot_bytes) {
        *why_p = "verbs hello with a ring shape other than this rank's (COLL_IB_NSLOTS and "
                 "COLL_IB_SLOT_BYTES differ between ranks)";
        return COLL_WIRE_BAD_FIELD;
    }
    if (h.qp.mtu < 1 || h.qp.mtu > 5 || h.qp.global > 1) {
        *why_p = "verbs hello with a queue pair MTU or addressing flag out of range";
        return COLL_WIRE_BAD_FIELD;
    }
    return COLL_WIRE_OK;
}

enum coll_wire_verdict verbs_wire_rts(const void *buf, size_t len, struct verbs_rts *out,
                                      const char **why_p)
{
    struct verbs_rts r;
    if (len != sizeof(r)) {
        *why_p = "verbs rendezvous announcement of the wrong size";
        return COLL_WIRE_BAD_FIELD;
    }
    memcpy(&r, buf, sizeof(r));
    if (r.magic != VERBS_RTS_MAGIC) {
        *why_p = "verbs rendezvous announcement without its magic";
        return COLL_WIRE_BAD_MAGIC;
    }
    if (r.len == 0 || r.addr + r.len < r.addr) {
        *why_p = "verbs rendezvous announcement of an empty or wrapping range";
        return COLL_WIRE_BAD_FIELD;
    }
    *out = r;
    return COLL_WIRE_OK;
}

enum coll_wire_verdict verbs_wire_handle(const void *buf, size_t len, struct verbs_handle *out,
                                         const char **why_p)
{
    struct verbs_handle h;
    if (len < sizeof(h)) {
        *why_p = "verbs handle shorter than its format";
        return COLL_WIRE_BAD_FIELD;
    }
    memcpy(&h, buf, sizeof(h));
    if (h.magic != VERBS_MAGIC) {
        *why_p = "no verbs handle (the rank does not listen for verbs)";
        return COLL_WIRE_BAD_MAGIC;
    }
    if (!verbs_wire_shape_ok(h.nslots, h.slot_bytes)) {
        *why_p = "verbs handle with a ring shape out of range";
        return COLL_WIRE_BAD_FIELD;
    }
    if (h.eth > 1 || !coll_wire_addr_ok(&h.addr, h.addrlen)) {
        *why_p = "verbs handle with a bad link layer or side channel address";
        return COLL_WIRE_BAD_FIELD;
    }
    *out = h;
    return COLL_WIRE_OK;
}
