/* The client's side of PyTorch's TCPStore wire protocol, the store that torchrun's
 * agent serves at MASTER_ADDR:MASTER_PORT (lib/engine/torch_store.h runs it over a
 * socket; docs/env.md, "The root under torchrun", says what it is used for).
 *
 * Every query is one byte naming the command, then its fields: a string or a value
 * is a u64 length and its bytes, a count or a nonce a plain u64 or u32, all in the
 * byte order of the machine (little-endian on every host torch runs on; written
 * here as little-endian whatever the host).  A key on the wire is the key a Python
 * program gives its TCPStore with "/" in front, as torch's own client sends it.
 *
 * Two dialects, by the torch that serves the store:
 *
 *   legacy     torch 1.13 (and the 2.x releases before the handshake): SET 0,
 *              GET 2, CHECK 4, WAIT 5; no handshake.
 *   validated  the later 2.x releases, 2.13 and 2.14 among them: VALIDATE 0
 *              (u32 magic 0x3C85F7CE, no answer) must be a connection's first
 *              query, then SET 1, GET 3, CHECK 5, WAIT 6, PING 13 (u32 nonce,
 *              echoed).
 *
 * The answers: CHECK one byte (0 ready, 1 not ready), WAIT one byte (0) once every
 * key is set, GET a u64 length and the value, SET nothing.  A legacy server reads a
 * query with blocking reads on its one thread and sizes buffers by the lengths it
 * reads, so a query that is not whole, or a VALIDATE it would take for a SET with a
 * key of a gigabyte, would stall or hurt the whole store: nothing but whole legacy
 * queries is ever sent before the dialect is known.
 *
 * The dialect is learnt by a probe that both kinds of server answer apart (see
 * coll_tstore_probe).  Everything here is pure: no I/O, no logging, no
 * allocation; the fuzz target tests/fuzz/fuzz_torch_store.c runs the parsers as
 * they are. */
#ifndef COLL_TORCH_STORE_WIRE_H
#define COLL_TORCH_STORE_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire_check.h"

enum coll_tstore_dialect {
    COLL_TSTORE_UNKNOWN = 0,
    COLL_TSTORE_LEGACY,    /* torch 1.13: no handshake */
    COLL_TSTORE_VALIDATED, /* torch 2.13, 2.14: VALIDATE first */
};

enum coll_tstore_op {
    COLL_TSTORE_SET,      /* key, value: no answer */
    COLL_TSTORE_GET,      /* key: u64 length, value (the key must exist: WAIT first) */
    COLL_TSTORE_CHECK,    /* one key: 0 when set, 1 when not */
    COLL_TSTORE_WAIT,     /* one key: 0 once it is set */
    COLL_TSTORE_VALIDATE, /* validated only: the handshake, no answer */
    COLL_TSTORE_PING,     /* validated only: u32 nonce, echoed */
};

/* The longest key and value this client sends or takes: a key names a job and a
 * communicator, a value is an address. */
#define COLL_TSTORE_MAX_KEY 512
#define COLL_TSTORE_MAX_VALUE 256
/* Room for any one query of this client. */
#define COLL_TSTORE_MAX_QUERY (1 + 8 + 8 + COLL_TSTORE_MAX_KEY + 8 + COLL_TSTORE_MAX_VALUE)

#define COLL_TSTORE_VALIDATE_MAGIC 0x3C85F7CEu
/* The key the probe asks about, which nobody sets. */
#define COLL_TSTORE_PROBE_KEY "/libcollective/probe/never-set"

/* Writes op's query in dialect d into buf (cap bytes): key for SET, GET, CHECK and
 * WAIT (NUL-terminated, at most COLL_TSTORE_MAX_KEY bytes), value and vlen for
 * SET (at most COLL_TSTORE_MAX_VALUE), nonce for PING.  Returns the bytes written,
 * 0 when the query does not fit, a field is too long, or the dialect has no such
 * command. */
size_t coll_tstore_encode(enum coll_tstore_dialect d, enum coll_tstore_op op, const char *key,
                          const void *value, size_t vlen, uint32_t nonce, uint8_t *buf,
                          size_t cap);

/*
 * The probe, sent on a connection of its own before anything else:
 *
 *   A = byte 5, u64 0                  legacy: WAIT for no keys   -> 0
 *                                      validated: CHECK no keys   -> 0
 *   B = byte 5, u64 1, key never set   legacy: WAIT for it        -> (waits)
 *                                      validated: CHECK it        -> 1
 *   A again, then A each time the answer is slow in coming.
 *
 * Every part is a whole, harmless query in both dialects.  A legacy server answers
 * 0 to each A and nothing to B: its first two bytes are 0, 0.  The classic server
 * of torch 2.x closes a connection whose first query is not VALIDATE: the probe
 * sees the connection closed before any byte.  The libuv server of torch 2.x (the
 * default since 2.4) drops the bytes of a connection's first read when they do not
 * start with VALIDATE, and from its next read on parses everything from the start:
 * once a later A arrives it answers 0 (A), 1 (B), 0...  Whatever the timing, the
 * first two bytes or the close tell the dialects apart, and no legacy server is
 * ever sent a query it cannot parse.  The probe's connection is closed after it.
 */
/* The probe's first bytes (A, B, A): returns their length, 0 when cap is short. */
size_t coll_tstore_probe(uint8_t *buf, size_t cap);
/* What is sent again while the answer is slow (A): its length, 0 when cap is short. */
size_t coll_tstore_probe_nudge(uint8_t *buf, size_t cap);
/* The got bytes of the probe's answer, closed when the server has closed the
 * connection after them: MORE while it cannot tell yet, OK with the dialect in *d,
 * BAD_FIELD (with why) for an answer neither dialect gives. */
enum coll_wire_verdict coll_tstore_probe_answer(const void *buf, size_t got, bool closed,
                                                enum coll_tstore_dialect *d, const char **why_p);

/* PING's answer, got bytes of it: OK when it echoes nonce. */
enum coll_wire_verdict coll_tstore_ping_answer(const void *buf, size_t got, uint32_t nonce,
                                               const char **why_p);
/* CHECK's answer: OK with *set true (0) or false (1). */
enum coll_wire_verdict coll_tstore_check_answer(const void *buf, size_t got, bool *set_p,
                                                const char **why_p);
/* WAIT's answer: OK when it is 0 (every key set). */
enum coll_wire_verdict coll_tstore_wait_answer(const void *buf, size_t got, const char **why_p);
/* GET's answer, got bytes of it: a u64 length then the value.  A length over cap
 * is BAD_FIELD; once the length has come (got >= 8) *len_p holds it, and the
 * answer is MORE until all 8 + *len_p bytes have come.  On OK the value is the
 * *len_p bytes at buf + 8. */
enum coll_wire_verdict coll_tstore_get_answer(const void *buf, size_t got, size_t cap,
                                              size_t *len_p, const char **why_p);
/* A value read from the store that should be a root's address: printable ASCII
 * with no space, 1 to cap - 1 bytes; copied into text NUL-terminated. */
bool coll_tstore_value_text(const void *value, size_t len, char *text, size_t cap,
                            const char **why_p);

#endif
