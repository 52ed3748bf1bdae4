/* Wire formats of the bootstrap and the checks applied to every byte that comes
 * from the network before it is used.
 *
 * Each check is a pure function (bytes in, validated struct or a refusal out: no
 * I/O, no logging, no allocation), called by the code that received the bytes and
 * by the fuzz targets in tests/fuzz, so what is fuzzed is what runs.  A refusal
 * comes with a short static text naming the field, for the caller's one log line.
 *
 * The checks that take `got` accept a prefix of a message: they answer
 * COLL_WIRE_MORE while what has come is consistent so far, so a listener drops a
 * stranger as soon as its first 20 bytes (magic and secret) are wrong instead of
 * waiting for a whole message that may never come. */
#ifndef COLL_WIRE_H
#define COLL_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bootstrap.h"

/* The most ranks a communicator may have: a registration naming more is refused
 * before anything is sized by it. */
#define COLL_WIRE_MAX_NRANKS (1 << 20)

enum coll_wire_verdict {
    COLL_WIRE_OK = 0,     /* whole and valid */
    COLL_WIRE_MORE,       /* valid so far: read on */
    COLL_WIRE_BAD_MAGIC,  /* not one of ours (a scanner, another program) */
    COLL_WIRE_BAD_SECRET, /* ours, but another communicator's secret */
    COLL_WIRE_BAD_FIELD,  /* secret shown, but a length, count or rank is out of range */
};

#define COLL_BOOT_MAGIC 0x544f4f42u /* "BOOT" */
#define COLL_BOOT_MSG_BYTES 256

/* rank -> root: the first message on a connection to the root. */
struct coll_boot_register {
    uint32_t magic;
    uint8_t secret[COLL_SECRET_BYTES];
    int32_t nranks;
    int32_t rank;
    struct coll_rank_info info;
};

/* root -> rank: the answer, followed on success by nranks struct coll_rank_info. */
struct coll_boot_reply {
    uint32_t magic;
    int32_t status; /* collResult_t */
    char msg[COLL_BOOT_MSG_BYTES];
};

/* rank r -> rank r+1 on its bootstrap listener. */
struct coll_boot_ring_hello {
    uint32_t magic;
    uint8_t secret[COLL_SECRET_BYTES];
    int32_t rank;
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

/* A rank's info as it came from the network, for rank `rank`: its address, its
 * transport mask; host is NUL-terminated in *out. */
enum coll_wire_verdict coll_wire_rank_info(const void *buf, size_t len, int rank,
                                           struct coll_rank_info *out, const char **why_p);

/* A registration at the root, of which got bytes have come. */
enum coll_wire_verdict coll_wire_boot_register(const void *buf, size_t got, const uint8_t *secret,
                                               struct coll_boot_register *out,
                                               const char **why_p);

/* A ring hello on a rank's bootstrap listener, which must come from rank `prev`. */
enum coll_wire_verdict coll_wire_ring_hello(const void *buf, size_t got, const uint8_t *secret,
                                            int prev, const char **why_p);

/* The root's answer: magic, a status that is a collResult_t (anything else reads
 * as collRemoteError), msg NUL-terminated. */
enum coll_wire_verdict coll_wire_boot_reply(const void *buf, size_t len,
                                            struct coll_boot_reply *out, const char **why_p);

/* The rank table that follows a successful answer: nranks entries, entry k for
 * rank k. */
enum coll_wire_verdict coll_wire_rank_table(const void *buf, size_t len, int nranks,
                                            struct coll_rank_info *out, const char **why_p);

/* A unique id (collUniqueId.internal): magic, format, root address. */
enum coll_wire_verdict coll_wire_id(const void *buf, size_t len, struct coll_id *out,
                                    const char **why_p);

/* collCommShrink (lib/split.c), on the survivors' bootstrap listeners. */
#define COLL_SHRINK_MAGIC 0x4b524853u /* "SHRK" */
#define COLL_SHRINK_MSG_BYTES 160

/* member -> coordinator */
struct coll_shrink_join {
    uint32_t magic;
    uint8_t secret[COLL_SECRET_BYTES];
    uint32_t epoch;     /* shrinks of the communicator so far */
    int32_t rank;       /* in the old communicator */
    uint32_t flags;
    uint64_t excl_hash; /* of the exclusion list, to check agreement */
};

/* coordinator -> member: first an acknowledgement (status collInProgress), then
 * the result. */
struct coll_shrink_reply {
    uint32_t magic;
    uint8_t secret[COLL_SECRET_BYTES];
    uint32_t epoch;
    int32_t status;     /* collInProgress: joined, wait; else the result */
    int32_t nranks;     /* of the new communicator */
    int32_t rank;       /* the receiver's rank in it */
    struct coll_id id;
    char msg[COLL_SHRINK_MSG_BYTES];
};

/* A join of shrink `epoch` of a communicator of nranks ranks, of which got bytes
 * have come: the rank is one of the communicator's. */
enum coll_wire_verdict coll_wire_shrink_join(const void *buf, size_t got, const uint8_t *secret,
                                             uint32_t epoch, int nranks,
                                             struct coll_shrink_join *out, const char **why_p);

/* The coordinator's answer to shrink `epoch` of a communicator of nranks ranks:
 * a status that is a collResult_t (anything else reads as collRemoteError); on
 * collSuccess a new size in [1, nranks], the receiver's new rank in [1, size)
 * (the coordinator is new rank 0) and a valid id; msg NUL-terminated. */
enum coll_wire_verdict coll_wire_shrink_reply(const void *buf, size_t len, const uint8_t *secret,
                                              uint32_t epoch, int nranks,
                                              struct coll_shrink_reply *out,
                                              const char **why_p);

/* "host:port" or "[v6]:port" split into host (NUL-terminated, hostlen bytes at
 * most) and a port 1-65535.  False with a message in err when malformed. */
bool coll_wire_split_hostport(const char *s, char *host, size_t hostlen, uint16_t *port_p,
                              char *err, size_t errlen);

/* The secret of an id built from text: COLL_SECRET's hex digits (any even
 * number, folded into COLL_SECRET_BYTES), or, without one, bytes derived from
 * the address text.  False with a message in err when the hex is malformed. */
bool coll_wire_secret_text(const char *hostport, const char *secret_hex, uint8_t *secret,
                           char *err, size_t errlen);

#endif
