/* PyTorch's TCPStore wire protocol, the client's side (lib/engine/torch_store_wire.h).
 * Pure: no I/O, no logging, no allocation, so the fuzz target runs it as it is. */
#include "torch_store_wire.h"

#include <string.h>

/* The command bytes of each dialect; 0xff: the dialect has no such command. */
static const uint8_t tstore_cmd[][6] = {
    /*                           SET   GET   CHECK WAIT  VALIDATE PING */
    [COLL_TSTORE_LEGACY] = {0, 2, 4, 5, 0xff, 0xff},
    [COLL_TSTORE_VALIDATED] = {1, 3, 5, 6, 0, 13},
};

static enum coll_wire_verdict tstore_bad(const char *why, const char **why_p)
{
    if (why_p)
        *why_p = why;
    return COLL_WIRE_BAD_FIELD;
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* A writer that stops at cap: a query that does not fit is refused at the end. */
struct tstore_out {
    uint8_t *buf;
    size_t cap, o;
    bool full;
};

static void out_bytes(struct tstore_out *w, const void *p, size_t n)
{
    if (w->full || n > w->cap - w->o) {
        w->full = true;
        return;
    }
    memcpy(w->buf + w->o, p, n);
    w->o += n;
}

static void out_u64(struct tstore_out *w, uint64_t v)
{
    uint8_t b[8];
    put_u64(b, v);
    out_bytes(w, b, sizeof(b));
}

static void out_string(struct tstore_out *w, const void *p, size_t n)
{
    out_u64(w, n);
    out_bytes(w, p, n);
}

size_t coll_tstore_encode(enum coll_tstore_dialect d, enum coll_tstore_op op, const char *key,
                          const void *value, size_t vlen, uint32_t nonce, uint8_t *buf,
                          size_t cap)
{
    if ((d != COLL_TSTORE_LEGACY && d != COLL_TSTORE_VALIDATED) || (unsigned)op > COLL_TSTORE_PING)
        return 0;
    uint8_t cmd = tstore_cmd[d][op];
    if (cmd == 0xff)
        return 0;
    size_t klen = 0;
    if (op <= COLL_TSTORE_WAIT) {
        if (key == NULL)
            return 0;
        klen = strnlen(key, COLL_TSTORE_MAX_KEY + 1);
        if (klen == 0 || klen > COLL_TSTORE_MAX_KEY)
            return 0;
    }
    if (op == COLL_TSTORE_SET && (vlen > COLL_TSTORE_MAX_VALUE || (vlen && value == NULL)))
        return 0;
    struct tstore_out w = {.buf = buf, .cap = cap};
    out_bytes(&w, &cmd, 1);
    uint8_t b4[4];
    switch (op) {
    case COLL_TSTORE_SET:
        out_string(&w, key, klen);
        out_string(&w, value, vlen);
        break;
    case COLL_TSTORE_GET:
        out_string(&w, key, klen);
        break;
    case COLL_TSTORE_CHECK:
    case COLL_TSTORE_WAIT:
        out_u64(&w, 1); /* one key */
        out_string(&w, key, klen);
        break;
    case COLL_TSTORE_VALIDATE:
        put_u32(b4, COLL_TSTORE_VALIDATE_MAGIC);
        out_bytes(&w, b4, sizeof(b4));
        break;
    case COLL_TSTORE_PING:
        put_u32(b4, nonce);
        out_bytes(&w, b4, sizeof(b4));
        break;
    }
    return w.full ? 0 : w.o;
}

size_t coll_tstore_probe_nudge(uint8_t *buf, size_t cap)
{
    /* 5, u64 0: WAIT for no keys (legacy), CHECK of no keys (validated). */
    struct tstore_out w = {.buf = buf, .cap = cap};
    uint8_t cmd = 5;
    out_bytes(&w, &cmd, 1);
    out_u64(&w, 0);
    return w.full ? 0 : w.o;
}

size_t coll_tstore_probe(uint8_t *buf, size_t cap)
{
    static const char key[] = COLL_TSTORE_PROBE_KEY;
    struct tstore_out w = {.buf = buf, .cap = cap};
    uint8_t cmd = 5;
    out_bytes(&w, &cmd, 1); /* A */
    out_u64(&w, 0);
    out_bytes(&w, &cmd, 1); /* B: one key, never set */
    out_u64(&w, 1);
    out_string(&w, key, sizeof(key) - 1);
    out_bytes(&w, &cmd, 1); /* A */
    out_u64(&w, 0);
    return w.full ? 0 : w.o;
}

enum coll_wire_verdict coll_tstore_probe_answer(const void *buf, size_t got, bool closed,
                                                enum coll_tstore_dialect *d, const char **why_p)
{
    const uint8_t *b = buf;
    if (got == 0)
        return closed ? (*d = COLL_TSTORE_VALIDATED, COLL_WIRE_OK) : COLL_WIRE_MORE;
    if (b[0] != 0)
        return tstore_bad("its first answer is not 0 (not a TCPStore?)", why_p);
    if (got == 1)
        return closed ? tstore_bad("the store closed the connection after one answer", why_p)
                      : COLL_WIRE_MORE;
    if (b[1] == 0) {
        *d = COLL_TSTORE_LEGACY;
        return COLL_WIRE_OK;
    }
    if (b[1] == 1) {
        *d = COLL_TSTORE_VALIDATED;
        return COLL_WIRE_OK;
    }
    return tstore_bad("its second answer is neither 0 nor 1 (not a TCPStore?)", why_p);
}

enum coll_wire_verdict coll_tstore_ping_answer(const void *buf, size_t got, uint32_t nonce,
                                               const char **why_p)
{
    if (got < 4)
        return COLL_WIRE_MORE;
    if (got > 4)
        return tstore_bad("more than a nonce in answer to a ping", why_p);
    if (get_u32(buf) != nonce)
        return tstore_bad("the ping's answer is not its nonce", why_p);
    return COLL_WIRE_OK;
}

enum coll_wire_verdict coll_tstore_check_answer(const void *buf, size_t got, bool *set_p,
                                                const char **why_p)
{
    const uint8_t *b = buf;
    if (got < 1)
        return COLL_WIRE_MORE;
    if (got > 1 || b[0] > 1)
        return tstore_bad("the answer to a check is neither ready (0) nor not ready (1)", why_p);
    *set_p = b[0] == 0;
    return COLL_WIRE_OK;
}

enum coll_wire_verdict coll_tstore_wait_answer(const void *buf, size_t got, const char **why_p)
{
    const uint8_t *b = buf;
    if (got < 1)
        return COLL_WIRE_MORE;
    if (got > 1 || b[0] != 0)
        return tstore_bad("the answer to a wait is not stop-waiting (0)", why_p);
    return COLL_WIRE_OK;
}

enum coll_wire_verdict coll_tstore_get_answer(const void *buf, size_t got, size_t cap,
                                              size_t *len_p, const char **why_p)
{
    if (got < 8)
        return COLL_WIRE_MORE;
    uint64_t len = get_u64(buf);
    if (len > cap)
        return tstore_bad("the value is longer than an address", why_p);
    *len_p = (size_t)len;
    if (got < 8 + len)
        return COLL_WIRE_MORE;
    if (got > 8 + len)
        return tstore_bad("more than the value in answer to a get", why_p);
    return COLL_WIRE_OK;
}

bool coll_tstore_value_text(const void *value, size_t len, char *text, size_t cap,
                            const char **why_p)
{
    const uint8_t *v = value;
    if (len == 0 || len >= cap) {
        if (why_p)
            *why_p = len == 0 ? "the value is empty" : "the value is too long for an address";
        return false;
    }
    for (size_t i = 0; i < len; i++) {
        if (v[i] <= ' ' || v[i] > '~') {
            if (why_p)
                *why_p = "the value is not the text of an address";
            return false;
        }
    }
    memcpy(text, v, len);
    text[len] = '\0';
    return true;
}
