/* The TCP transport's wire formats: the listen handle a rank publishes through
 * the bootstrap, and the hello on each socket (there is no per-message header:
 * both sides cut a message from its size alone).  The checks are pure, for
 * tcp.c and the fuzz targets (tests/fuzz). */
#ifndef COLL_TCP_WIRE_H
#define COLL_TCP_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "transport.h"
#include "wire_check.h"

#define TCP_MAGIC 0x50435443u /* "CTCP" */
#define TCP_MAX_SOCKS 16

struct tcp_handle {
    uint32_t magic;
    uint32_t nsocks;
    uint32_t addrlen;
    uint32_t pad;
    union coll_sockaddr addr;
};
_Static_assert(sizeof(struct tcp_handle) <= COLL_TP_HANDLE_BYTES, "tcp handle too large");

struct tcp_hello {
    uint32_t magic;
    uint8_t secret[COLL_SECRET_BYTES];
    int32_t rank;
    int32_t sock_idx;
    int32_t nsocks;
};

/* What the check of a hello needs to know of the listener. */
struct tcp_wire_ctx {
    const uint8_t *secret;
    int nranks;
};

/* The got bytes of a hello so far (a coll_hello_check_fn; arg is a struct
 * tcp_wire_ctx): rank in [0, nranks), nsocks in [1, TCP_MAX_SOCKS], sock_idx
 * below nsocks.  Returns an enum coll_wire_verdict. */
int tcp_wire_hello(const void *buf, size_t got, const void *arg, const char **why_p);
/* A handle from the rank table: magic, nsocks in [1, TCP_MAX_SOCKS], address. */
enum coll_wire_verdict tcp_wire_handle(const void *buf, size_t len, struct tcp_handle *out,
                                       const char **why_p);

#endif
