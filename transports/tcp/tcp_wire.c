/* Checks of the TCP transport's handle and hello (tcp_wire.h). */
#include "tcp_wire.h"

#include <string.h>

int tcp_wire_hello(const void *buf, size_t got, const void *arg, const char **why_p)
{
    const struct tcp_wire_ctx *ctx = arg;
    struct tcp_hello h;
    enum coll_wire_verdict v = coll_wire_fixed(buf, got, TCP_MAGIC, ctx->secret, sizeof(h),
                                               "tcp hello longer than its format", why_p);
    if (v != COLL_WIRE_OK)
        return v;
    memcpy(&h, buf, sizeof(h));
    if (h.rank < 0 || h.rank >= ctx->nranks) {
        *why_p = "tcp hello with a rank outside the communicator";
        return COLL_WIRE_BAD_FIELD;
    }
    if (h.nsocks < 1 || h.nsocks > TCP_MAX_SOCKS || h.sock_idx < 0 || h.sock_idx >= h.nsocks) {
        *why_p = "tcp hello with a socket count or index out of range";
        return COLL_WIRE_BAD_FIELD;
    }
    return COLL_WIRE_OK;
}

enum coll_wire_verdict tcp_wire_handle(const void *buf, size_t len, struct tcp_handle *out,
                                       const char **why_p)
{
    struct tcp_handle h;
    if (len < sizeof(h)) {
        *why_p = "tcp handle shorter than its format";
        return COLL_WIRE_BAD_FIELD;
    }
    memcpy(&h, buf, sizeof(h));
    if (h.magic != TCP_MAGIC) {
        *why_p = "no tcp handle (the rank does not listen for tcp)";
        return COLL_WIRE_BAD_MAGIC;
    }
    if (h.nsocks < 1 || h.nsocks > TCP_MAX_SOCKS) {
        *why_p = "tcp handle with a socket count out of range";
        return COLL_WIRE_BAD_FIELD;
    }
    if (!coll_wire_addr_ok(&h.addr, h.addrlen)) {
        *why_p = "tcp handle with an address of a bad family or length";
        return COLL_WIRE_BAD_FIELD;
    }
    *out = h;
    return COLL_WIRE_OK;
}
