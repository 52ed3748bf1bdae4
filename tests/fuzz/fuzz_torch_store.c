/* Fuzz target: what the client of torchrun's store (lib/engine/torch_store.c) reads
 * from the store, every prefix as it arrives: the probe's answer (open, and closed
 * after it), the answers to PING, CHECK and WAIT, GET's length and value, and the
 * value as the text of a root's address (coll_tstore_value_text, then
 * coll_wire_split_hostport as the id is built from it); and the queries the
 * client writes, for keys and values taken from the input.  Selector byte: which
 * in bits 0-2 (0 probe, 1-2 GET, 3 PING, CHECK and WAIT, 4-7 a query); for GET its
 * cap (16 << bits 3-4), for PING the nonce's low bits (bits 3-7), for a query the
 * dialect (bit 3), the command (bits 4-6) and, unless bit 7, a buffer of only
 * sel & 63 bytes. */
#include "fuzz.h"
#include "torch_store_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_probe(const uint8_t *data, size_t size)
{
    for (size_t got = 0; got <= size && got <= 4; got++) {
        for (int closed = 0; closed < 2; closed++) {
            enum coll_tstore_dialect d = COLL_TSTORE_UNKNOWN;
            const char *why = NULL;
            enum coll_wire_verdict v = coll_tstore_probe_answer(data, got, closed, &d, &why);
            FUZZ_ASSERT(v == COLL_WIRE_OK || v == COLL_WIRE_MORE || v == COLL_WIRE_BAD_FIELD);
            FUZZ_ASSERT(v != COLL_WIRE_MORE || (!closed && got < 2));
            FUZZ_ASSERT(v != COLL_WIRE_OK ||
                        d == COLL_TSTORE_LEGACY || d == COLL_TSTORE_VALIDATED);
            FUZZ_ASSERT(v != COLL_WIRE_BAD_FIELD || why != NULL);
            /* Only two bytes ever decide: the same answer for every longer prefix. */
            FUZZ_ASSERT(got <= 2 || v == (coll_tstore_probe_answer(data, 2, closed, &d, &why)));
        }
    }
}

static void fuzz_get(const uint8_t *data, size_t size, size_t cap)
{
    for (size_t got = 0; got <= size; got++) {
        size_t len = SIZE_MAX;
        const char *why = NULL;
        enum coll_wire_verdict v = coll_tstore_get_answer(data, got, cap, &len, &why);
        if (v == COLL_WIRE_OK) {
            FUZZ_ASSERT(len <= cap && got == 8 + len);
            char text[COLL_TSTORE_MAX_VALUE];
            if (coll_tstore_value_text(data + 8, len, text, sizeof(text), &why)) {
                FUZZ_ASSERT(strlen(text) == len && len < sizeof(text));
                char host[256], err[160];
                uint16_t port = 0;
                if (coll_wire_split_hostport(text, host, sizeof(host), &port, err, sizeof(err)))
                    FUZZ_ASSERT(port >= 1 && strlen(host) < len);
            } else {
                FUZZ_ASSERT(why != NULL);
            }
        } else if (v == COLL_WIRE_MORE) {
            FUZZ_ASSERT(got < 8 || (len <= cap && got < 8 + len));
        } else {
            FUZZ_ASSERT(v == COLL_WIRE_BAD_FIELD && why != NULL && got >= 8);
        }
    }
}

static void fuzz_small(const uint8_t *data, size_t size, uint32_t nonce)
{
    for (size_t got = 0; got <= size && got <= 6; got++) {
        const char *why = NULL;
        enum coll_wire_verdict v = coll_tstore_ping_answer(data, got, nonce, &why);
        FUZZ_ASSERT(v != COLL_WIRE_OK || got == 4);
        FUZZ_ASSERT(v != COLL_WIRE_MORE || got < 4);
        bool set = false;
        v = coll_tstore_check_answer(data, got, &set, &why);
        FUZZ_ASSERT(v != COLL_WIRE_OK || (got == 1 && set == (data[0] == 0) && data[0] <= 1));
        v = coll_tstore_wait_answer(data, got, &why);
        FUZZ_ASSERT(v != COLL_WIRE_OK || (got == 1 && data[0] == 0));
    }
}

/* A query from input bytes: the key up to the first NUL, the value after it. */
static void fuzz_encode(const uint8_t *data, size_t size, uint8_t sel)
{
    char key[COLL_TSTORE_MAX_KEY + 8];
    size_t klen = 0;
    while (klen < size && klen < sizeof(key) - 1 && data[klen] != 0)
        klen++;
    memcpy(key, data, klen);
    key[klen] = '\0';
    const uint8_t *val = klen < size ? data + klen + 1 : data + size;
    size_t vlen = (size_t)(data + size - val);
    enum coll_tstore_dialect d = (sel & 8) ? COLL_TSTORE_VALIDATED : COLL_TSTORE_LEGACY;
    enum coll_tstore_op op = (enum coll_tstore_op)(((sel >> 4) & 7) % 6);
    uint8_t q[COLL_TSTORE_MAX_QUERY];
    size_t cap = (sel & 0x80) ? sizeof(q) : (size_t)(sel & 0x3f);
    size_t n = coll_tstore_encode(d, op, key, val, vlen, 0x12345678, q, cap);
    FUZZ_ASSERT(n <= cap);
    if (n == 0)
        return;
    size_t keyed = 1 + 8 + klen;
    if (op == COLL_TSTORE_SET)
        FUZZ_ASSERT(n == keyed + 8 + vlen && klen >= 1 && klen <= COLL_TSTORE_MAX_KEY &&
                    memcmp(q + keyed + 8, val, vlen) == 0);
    else if (op == COLL_TSTORE_GET)
        FUZZ_ASSERT(n == keyed && memcmp(q + 9, key, klen) == 0);
    else if (op == COLL_TSTORE_CHECK || op == COLL_TSTORE_WAIT)
        FUZZ_ASSERT(n == keyed + 8 && memcmp(q + 17, key, klen) == 0);
    else
        FUZZ_ASSERT(d == COLL_TSTORE_VALIDATED && n == 5);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t sel = data[0];
    data++;
    size--;
    switch (sel & 7) {
    case 0:
        fuzz_probe(data, size);
        break;
    case 1:
    case 2:
        fuzz_get(data, size, (size_t)16 << ((sel >> 3) & 3));
        break;
    case 3:
        fuzz_small(data, size, 0x11223300u | (uint32_t)(sel >> 3));
        break;
    default:
        fuzz_encode(data, size, sel);
        break;
    }
    return 0;
}
