/* The checks every wire format shares (the bootstrap's in wire.h, the
 * transports' own in transports/): verdicts, the magic-and-secret prefix, a
 * fixed-size message, a published address.  Pure functions, fuzzed with their
 * callers (tests/fuzz); the base layer, so transports may include it. */
#ifndef COLL_WIRE_CHECK_H
#define COLL_WIRE_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "socket.h"

/* The communicator's secret, shown in every handshake. */
#define COLL_SECRET_BYTES 16

enum coll_wire_verdict {
    COLL_WIRE_OK = 0,     /* whole and valid */
    COLL_WIRE_MORE,       /* valid so far: read on */
    COLL_WIRE_BAD_MAGIC,  /* not one of ours (a scanner, another program) */
    COLL_WIRE_BAD_SECRET, /* ours, but another communicator's secret */
    COLL_WIRE_BAD_FIELD,  /* secret shown, but a length, count or rank is out of range */
};

/* Compares two secrets in constant time: how long it takes says nothing about
 * how many leading bytes a guess got right. */
bool coll_wire_secret_equal(const uint8_t *a, const uint8_t *b);

/* The first got bytes of a message that starts {u32 magic, secret}: MORE, OK
 * (the prefix is whole and right), BAD_MAGIC or BAD_SECRET. */
enum coll_wire_verdict coll_wire_prefix(const void *buf, size_t got, uint32_t magic,
                                        const uint8_t *secret);

/* The framing every fixed-size message shares: the magic and the secret (as
 * coll_wire_prefix), then exactly size bytes.  MORE until they have come; more
 * than size is refused with too_long (a static text).  OK: the caller goes on
 * with the fields. */
enum coll_wire_verdict coll_wire_fixed(const void *buf, size_t got, uint32_t magic,
                                       const uint8_t *secret, size_t size, const char *too_long,
                                       const char **why_p);

/* An address as published by a rank (its bootstrap listener, a transport's
 * listener): family IPv4 or IPv6 with the length of that family, a port. */
bool coll_wire_addr_ok(const union coll_sockaddr *addr, uint32_t addrlen);

/* "host:port" or "[v6]:port" split into host (NUL-terminated, hostlen bytes at
 * most) and a port 1-65535.  False with a message in err when malformed. */
bool coll_wire_split_hostport(const char *s, char *host, size_t hostlen, uint16_t *port_p,
                              char *err, size_t errlen);

#endif
