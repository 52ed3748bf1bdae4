/* Fuzz target: the unique id as collCommInitRank checks it (coll_wire_id), and
 * the text of COLL_COMM_ID and COLL_SECRET as coll_bootstrap_id_from_addr reads
 * it (coll_wire_split_hostport, coll_wire_secret_text; the host name is then
 * resolved, which is not fuzzed).  Input: the first byte picks binary or text;
 * text is "hostport\0secret" (no NUL: no COLL_SECRET). */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    bool text = data[0] & 1;
    data++;
    size--;
    const char *why = NULL;
    if (!text) {
        /* collUniqueId is COLL_UNIQUE_ID_BYTES; shorter inputs are padded. */
        uint8_t raw[COLL_UNIQUE_ID_BYTES] = {0};
        memcpy(raw, data, size < sizeof(raw) ? size : sizeof(raw));
        struct coll_id id;
        if (coll_wire_id(raw, sizeof(raw), &id, &why) == COLL_WIRE_OK) {
            FUZZ_ASSERT(id.magic == COLL_ID_MAGIC && id.format == COLL_ID_FORMAT);
            FUZZ_ASSERT(id.root_is_rank0 <= 1);
            FUZZ_ASSERT(id.addrlen <= sizeof(id.addr));
            FUZZ_ASSERT(coll_wire_addr_ok(&id.addr, id.addrlen));
        } else {
            FUZZ_ASSERT(why != NULL);
        }
        return 0;
    }
    char *s = malloc(size + 1);
    if (s == NULL)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    size_t hl = strlen(s);
    const char *secret_hex = hl < size ? s + hl + 1 : NULL;
    char host[256], err[160];
    uint16_t port = 0;
    if (coll_wire_split_hostport(s, host, sizeof(host), &port, err, sizeof(err))) {
        FUZZ_ASSERT(port >= 1);
        FUZZ_ASSERT(strlen(host) < sizeof(host) && strlen(host) < hl);
        FUZZ_ASSERT(strstr(s, host) != NULL);
    } else {
        FUZZ_ASSERT(strlen(err) < sizeof(err));
    }
    uint8_t secret[COLL_SECRET_BYTES];
    if (!coll_wire_secret_text(s, secret_hex, secret, err, sizeof(err)))
        FUZZ_ASSERT(secret_hex != NULL && strlen(err) > 0);
    free(s);
    return 0;
}
