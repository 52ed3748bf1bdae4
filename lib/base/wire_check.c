/* The checks every wire format shares (wire_check.h).  Pure: no I/O, no logging,
 * no allocation, so the fuzz targets in tests/fuzz run them as they are. */
#include "wire_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool coll_wire_secret_equal(const uint8_t *a, const uint8_t *b)
{
    uint8_t diff = 0;
    for (int i = 0; i < COLL_SECRET_BYTES; i++)
        diff |= (uint8_t)(a[i] ^ b[i]);
    return diff == 0;
}

enum coll_wire_verdict coll_wire_prefix(const void *buf, size_t got, uint32_t magic,
                                        const uint8_t *secret)
{
    const uint8_t *b = buf;
    if (got >= sizeof(uint32_t)) {
        uint32_t m;
        memcpy(&m, b, sizeof(m));
        if (m != magic)
            return COLL_WIRE_BAD_MAGIC;
    }
    if (got < sizeof(uint32_t) + COLL_SECRET_BYTES)
        return COLL_WIRE_MORE;
    return coll_wire_secret_equal(b + sizeof(uint32_t), secret) ? COLL_WIRE_OK
                                                                : COLL_WIRE_BAD_SECRET;
}

enum coll_wire_verdict coll_wire_fixed(const void *buf, size_t got, uint32_t magic,
                                       const uint8_t *secret, size_t size, const char *too_long,
                                       const char **why_p)
{
    enum coll_wire_verdict v = coll_wire_prefix(buf, got, magic, secret);
    if (v != COLL_WIRE_OK)
        return v;
    if (got < size)
        return COLL_WIRE_MORE;
    if (got > size) {
        if (why_p)
            *why_p = too_long;
        return COLL_WIRE_BAD_FIELD;
    }
    return COLL_WIRE_OK;
}

bool coll_wire_addr_ok(const union coll_sockaddr *addr, uint32_t addrlen)
{
    if (addr->sa.sa_family == AF_INET)
        return addrlen == sizeof(struct sockaddr_in) && addr->in.sin_port != 0;
    if (addr->sa.sa_family == AF_INET6)
        return addrlen == sizeof(struct sockaddr_in6) && addr->in6.sin6_port != 0;
    return false;
}

bool coll_wire_split_hostport(const char *s, char *host, size_t hostlen, uint16_t *port_p,
                              char *err, size_t errlen)
{
    const char *port_s;
    size_t hl;
    if (s == NULL || *s == '\0') {
        snprintf(err, errlen, "empty address");
        return false;
    }
    if (s[0] == '[') {
        const char *close_b = strchr(s, ']');
        if (close_b == NULL || close_b[1] != ':' || close_b == s + 1) {
            snprintf(err, errlen, "address '%.100s' is not [ipv6]:port", s);
            return false;
        }
        hl = (size_t)(close_b - s - 1);
        s++;
        port_s = close_b + 2;
    } else {
        const char *colon = strrchr(s, ':');
        if (colon == NULL || colon == s) {
            snprintf(err, errlen, "address '%.100s' is not host:port", s);
            return false;
        }
        hl = (size_t)(colon - s);
        port_s = colon + 1;
    }
    if (hl >= hostlen) {
        snprintf(err, errlen, "host in '%.100s' is longer than %zu bytes", s, hostlen - 1);
        return false;
    }
    memcpy(host, s, hl);
    host[hl] = '\0';
    long port = 0;
    const char *p = port_s;
    /* Digits only, at most 5: no sign, no spaces, no overflow. */
    for (; *p >= '0' && *p <= '9' && p - port_s < 5; p++)
        port = port * 10 + (*p - '0');
    if (p == port_s || *p != '\0' || port < 1 || port > 65535) {
        snprintf(err, errlen, "port '%.20s' is not 1-65535", port_s);
        return false;
    }
    *port_p = (uint16_t)port;
    return true;
}
