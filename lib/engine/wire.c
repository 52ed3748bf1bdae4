/* The checks of bytes from the network (lib/engine/wire.h).  Pure: no I/O, no logging,
 * no allocation, so the fuzz targets in tests/fuzz run them as they are. */
#include "wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flight.h"

static enum coll_wire_verdict wire_bad(const char *why, const char **why_p)
{
    if (why_p)
        *why_p = why;
    return COLL_WIRE_BAD_FIELD;
}

enum coll_wire_verdict coll_wire_rank_info(const void *buf, size_t len, int rank,
                                           struct coll_rank_info *out, const char **why_p)
{
    struct coll_rank_info in;
    if (len != sizeof(in))
        return wire_bad("rank info of the wrong size", why_p);
    memcpy(&in, buf, sizeof(in));
    if (in.rank != rank)
        return wire_bad("rank info for another rank", why_p);
    if (!coll_wire_addr_ok(&in.boot_addr, in.boot_addrlen))
        return wire_bad("bootstrap address of a bad family or length", why_p);
    if (in.tp_mask >> COLL_MAX_TRANSPORTS)
        return wire_bad("transport mask names transports that do not exist", why_p);
    in.host[sizeof(in.host) - 1] = '\0';
    *out = in;
    return COLL_WIRE_OK;
}

enum coll_wire_verdict coll_wire_boot_register(const void *buf, size_t got, const uint8_t *secret,
                                               struct coll_boot_register *out,
                                               const char **why_p)
{
    struct coll_boot_register reg;
    enum coll_wire_verdict v = coll_wire_fixed(buf, got, COLL_BOOT_MAGIC, secret, sizeof(reg),
                                               "registration longer than its format", why_p);
    if (v != COLL_WIRE_OK)
        return v;
    memcpy(&reg, buf, sizeof(reg));
    if (reg.nranks < 1 || reg.nranks > COLL_WIRE_MAX_NRANKS)
        return wire_bad("nranks outside [1, 2^20]", why_p);
    if (reg.rank < 0 || reg.rank >= reg.nranks)
        return wire_bad("rank outside [0, nranks)", why_p);
    v = coll_wire_rank_info(&reg.info, sizeof(reg.info), reg.rank, &reg.info, why_p);
    if (v != COLL_WIRE_OK)
        return v;
    *out = reg;
    return COLL_WIRE_OK;
}

enum coll_wire_verdict coll_wire_ring_hello(const void *buf, size_t got, const uint8_t *secret,
                                            int prev, const char **why_p)
{
    struct coll_boot_ring_hello h;
    enum coll_wire_verdict v = coll_wire_fixed(buf, got, COLL_BOOT_MAGIC, secret, sizeof(h),
                                               "ring hello longer than its format", why_p);
    if (v != COLL_WIRE_OK)
        return v;
    memcpy(&h, buf, sizeof(h));
    if (h.rank != prev)
        return wire_bad("ring hello from a rank that is not the previous one", why_p);
    return COLL_WIRE_OK;
}

enum coll_wire_verdict coll_wire_boot_reply(const void *buf, size_t len,
                                            struct coll_boot_reply *out, const char **why_p)
{
    struct coll_boot_reply rep;
    if (len != sizeof(rep))
        return wire_bad("answer of the wrong size", why_p);
    memcpy(&rep, buf, sizeof(rep));
    if (rep.magic != COLL_BOOT_MAGIC) {
        if (why_p)
            *why_p = "answer without the bootstrap magic";
        return COLL_WIRE_BAD_MAGIC;
    }
    /* The status is returned to the application: only a result it knows. */
    if (rep.status < collSuccess || rep.status >= collNumResults || rep.status == collInProgress)
        rep.status = collRemoteError;
    rep.msg[sizeof(rep.msg) - 1] = '\0';
    *out = rep;
    return COLL_WIRE_OK;
}

enum coll_wire_verdict coll_wire_shrink_join(const void *buf, size_t got, const uint8_t *secret,
                                             uint32_t epoch, int nranks,
                                             struct coll_shrink_join *out, const char **why_p)
{
    struct coll_shrink_join j;
    enum coll_wire_verdict v = coll_wire_fixed(buf, got, COLL_SHRINK_MAGIC, secret, sizeof(j),
                                               "shrink join longer than its format", why_p);
    if ((v == COLL_WIRE_BAD_MAGIC || v == COLL_WIRE_BAD_SECRET) && why_p)
        *why_p = v == COLL_WIRE_BAD_MAGIC ? "not a shrink join" : "a shrink join without the secret";
    if (v != COLL_WIRE_OK)
        return v;
    memcpy(&j, buf, sizeof(j));
    if (j.epoch != epoch)
        return wire_bad("shrink join of another shrink (epoch)", why_p);
    if (j.rank < 0 || j.rank >= nranks)
        return wire_bad("shrink join from a rank outside the communicator", why_p);
    if (j.suspect < -1 || j.suspect >= nranks)
        return wire_bad("shrink join blaming a rank outside the communicator", why_p);
    *out = j;
    return COLL_WIRE_OK;
}

enum coll_wire_verdict coll_wire_shrink_reply(const void *buf, size_t len, const uint8_t *secret,
                                              uint32_t epoch, int nranks,
                                              struct coll_shrink_reply *out,
                                              const char **why_p)
{
    struct coll_shrink_reply rep;
    if (len != sizeof(rep))
        return wire_bad("shrink answer of the wrong size", why_p);
    enum coll_wire_verdict v = coll_wire_prefix(buf, len, COLL_SHRINK_MAGIC, secret);
    if (v != COLL_WIRE_OK) {
        if (why_p)
            *why_p = "shrink answer without the magic and the secret";
        return v;
    }
    memcpy(&rep, buf, sizeof(rep));
    if (rep.epoch != epoch)
        return wire_bad("shrink answer of another shrink (epoch)", why_p);
    rep.msg[sizeof(rep.msg) - 1] = '\0';
    if (rep.status == collInProgress) {
        *out = rep;
        return COLL_WIRE_OK;
    }
    if (rep.status < collSuccess || rep.status >= collNumResults)
        rep.status = collRemoteError;
    if (rep.status == collSuccess) {
        if (rep.nranks < 1 || rep.nranks > nranks)
            return wire_bad("shrink answer: new size out of range", why_p);
        if (rep.rank < 1 || rep.rank >= rep.nranks)
            return wire_bad("shrink answer: new rank out of range", why_p);
        struct coll_id id;
        if (coll_wire_id(&rep.id, sizeof(rep.id), &id, why_p) != COLL_WIRE_OK)
            return COLL_WIRE_BAD_FIELD;
        rep.id = id;
    }
    *out = rep;
    return COLL_WIRE_OK;
}

enum coll_wire_verdict coll_wire_rank_table(const void *buf, size_t len, int nranks,
                                            struct coll_rank_info *out, const char **why_p)
{
    if (nranks < 1 || nranks > COLL_WIRE_MAX_NRANKS ||
        len != (size_t)nranks * sizeof(struct coll_rank_info))
        return wire_bad("rank table of the wrong size", why_p);
    const char *b = buf;
    for (int k = 0; k < nranks; k++) {
        enum coll_wire_verdict v =
            coll_wire_rank_info(b + (size_t)k * sizeof(*out), sizeof(*out), k, &out[k], why_p);
        if (v != COLL_WIRE_OK)
            return v;
    }
    return COLL_WIRE_OK;
}

enum coll_wire_verdict coll_wire_id(const void *buf, size_t len, struct coll_id *out,
                                    const char **why_p)
{
    struct coll_id id;
    if (len < sizeof(id))
        return wire_bad("id shorter than its format", why_p);
    memcpy(&id, buf, sizeof(id));
    if (id.magic != COLL_ID_MAGIC || id.format != COLL_ID_FORMAT) {
        if (why_p)
            *why_p = "not made by collGetUniqueId (or of another version)";
        return COLL_WIRE_BAD_MAGIC;
    }
    if (id.root_is_rank0 > 1)
        return wire_bad("root_is_rank0 is neither 0 nor 1", why_p);
    if (!coll_wire_addr_ok(&id.addr, id.addrlen))
        return wire_bad("root address of a bad family, length or port", why_p);
    if (id.grow_from > COLL_WIRE_MAX_NRANKS || (id.grow_from == 0) != (id.grow_of == 0))
        return wire_bad("grow fields out of range", why_p);
    *out = id;
    return COLL_WIRE_OK;
}

static int wire_hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

bool coll_wire_secret_text(const char *hostport, const char *secret_hex, uint8_t *secret,
                           char *err, size_t errlen)
{
    memset(secret, 0, COLL_SECRET_BYTES);
    if (secret_hex == NULL) {
        /* Keeps apart only jobs that use different addresses. */
        uint64_t h1 = 1469598103934665603ULL, h2 = 0x9e3779b97f4a7c15ULL;
        for (const char *p = hostport; *p; p++) {
            h1 = (h1 ^ (uint8_t)*p) * 1099511628211ULL;
            h2 = (h2 ^ (uint8_t)*p) * 0x100000001b3ULL + (h2 >> 29);
        }
        memcpy(secret, &h1, 8);
        memcpy(secret + 8, &h2, 8);
        return true;
    }
    size_t n = strlen(secret_hex);
    if (n == 0 || n % 2 != 0) {
        snprintf(err, errlen, "COLL_SECRET must be an even number of hex digits");
        return false;
    }
    /* Any length of hex: folded into the secret bytes. */
    for (size_t i = 0; i < n; i += 2) {
        int hi = wire_hex_digit(secret_hex[i]), lo = wire_hex_digit(secret_hex[i + 1]);
        if (hi < 0 || lo < 0) {
            snprintf(err, errlen, "COLL_SECRET has a non-hex digit at position %zu",
                     hi < 0 ? i : i + 1);
            return false;
        }
        secret[(i / 2) % COLL_SECRET_BYTES] ^= (uint8_t)(hi << 4 | lo);
    }
    return true;
}

/* ---- status queries ---- */

enum coll_wire_verdict coll_wire_status_req(const void *buf, size_t got, const uint8_t *secret,
                                            struct coll_status_req *out, const char **why_p)
{
    struct coll_status_req q;
    enum coll_wire_verdict v = coll_wire_fixed(buf, got, COLL_STATUS_MAGIC, secret, sizeof(q),
                                               "status request longer than its format", why_p);
    if (v != COLL_WIRE_OK)
        return v;
    memcpy(&q, buf, sizeof(q));
    if (q.version != COLL_STATUS_VERSION)
        return wire_bad("status request of another version", why_p);
    if (q.ask != COLL_STATUS_ASK_RANK && q.ask != COLL_STATUS_ASK_TABLE)
        return wire_bad("status request asks for nothing known", why_p);
    *out = q;
    return COLL_WIRE_OK;
}

/* rank is -1 (none) or one of nranks. */
static bool wire_rank_or_none(int32_t rank, int32_t nranks)
{
    return rank >= -1 && rank < nranks;
}

static bool wire_status_call_ok(struct coll_status_call *c, int32_t nranks)
{
    c->name[sizeof(c->name) - 1] = '\0';
    c->algo[sizeof(c->algo) - 1] = '\0';
    return c->state >= -1 && c->state <= COLL_FLIGHT_FAILED && wire_rank_or_none(c->root, nranks) &&
           wire_rank_or_none(c->peer, nranks);
}

/* The framing of an answer: exact length, magic and secret, version. */
static enum coll_wire_verdict wire_status_head(const void *buf, size_t len, size_t size,
                                               const uint8_t *secret, const char **why_p)
{
    if (len != size)
        return wire_bad("status answer of the wrong size", why_p);
    enum coll_wire_verdict v = coll_wire_prefix(buf, len, COLL_STATUS_MAGIC, secret);
    if (v != COLL_WIRE_OK) {
        if (why_p)
            *why_p = "status answer without the magic and the secret";
        return v;
    }
    uint32_t version;
    memcpy(&version, (const uint8_t *)buf + sizeof(uint32_t) + COLL_SECRET_BYTES,
           sizeof(version));
    if (version != COLL_STATUS_VERSION)
        return wire_bad("status answer of another version", why_p);
    return COLL_WIRE_OK;
}

enum coll_wire_verdict coll_wire_status_reply(const void *buf, size_t len, const uint8_t *secret,
                                              int want_rank, struct coll_status_reply *out,
                                              const char **why_p)
{
    struct coll_status_reply r;
    enum coll_wire_verdict v = wire_status_head(buf, len, sizeof(r), secret, why_p);
    if (v != COLL_WIRE_OK)
        return v;
    memcpy(&r, buf, sizeof(r));
    if (r.nranks < 1 || r.nranks > COLL_WIRE_MAX_NRANKS)
        return wire_bad("status answer: nranks outside [1, 2^20]", why_p);
    if (r.rank < 0 || r.rank >= r.nranks || (want_rank >= 0 && r.rank != want_rank))
        return wire_bad("status answer from another rank", why_p);
    if (!wire_rank_or_none(r.revoked_by, r.nranks) || !wire_rank_or_none(r.failed_peer, r.nranks) ||
        !wire_rank_or_none(r.wait_peer, r.nranks))
        return wire_bad("status answer names a rank out of range", why_p);
    if (r.open < 0 || r.npeers < 0 || r.npeers > COLL_STATUS_PEERS)
        return wire_bad("status answer: count of calls or peers out of range", why_p);
    if (!wire_status_call_ok(&r.cur, r.nranks) || !wire_status_call_ok(&r.last, r.nranks))
        return wire_bad("status answer: a call's state or rank out of range", why_p);
    for (int k = 0; k < r.npeers; k++)
        if (!wire_rank_or_none(r.peers[k].peer, r.nranks))
            return wire_bad("status answer: a peer out of range", why_p);
    r.host[sizeof(r.host) - 1] = '\0';
    r.comm_name[sizeof(r.comm_name) - 1] = '\0';
    *out = r;
    return COLL_WIRE_OK;
}

enum coll_wire_verdict coll_wire_status_table(const void *buf, size_t len, const uint8_t *secret,
                                              struct coll_status_table *out, const char **why_p)
{
    struct coll_status_table t;
    enum coll_wire_verdict v = wire_status_head(buf, len, sizeof(t), secret, why_p);
    if (v != COLL_WIRE_OK)
        return v;
    memcpy(&t, buf, sizeof(t));
    if (t.nranks < 1 || t.nranks > COLL_WIRE_MAX_NRANKS)
        return wire_bad("status table: nranks outside [1, 2^20]", why_p);
    if (t.rank < 0 || t.rank >= t.nranks)
        return wire_bad("status table from a rank outside it", why_p);
    *out = t;
    return COLL_WIRE_OK;
}

enum coll_wire_verdict coll_wire_status_addrs(const void *buf, size_t len, int nranks,
                                              struct coll_status_addr *out, const char **why_p)
{
    if (nranks < 1 || nranks > COLL_WIRE_MAX_NRANKS ||
        len != (size_t)nranks * sizeof(struct coll_status_addr))
        return wire_bad("status table of the wrong size", why_p);
    for (int k = 0; k < nranks; k++) {
        struct coll_status_addr a;
        memcpy(&a, (const char *)buf + (size_t)k * sizeof(a), sizeof(a));
        if (a.rank != k)
            return wire_bad("status table: entry for another rank", why_p);
        if (!coll_wire_addr_ok(&a.addr, a.addrlen))
            return wire_bad("status table: address of a bad family or length", why_p);
        a.host[sizeof(a.host) - 1] = '\0';
        out[k] = a;
    }
    return COLL_WIRE_OK;
}
