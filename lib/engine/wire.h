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
#include "wire_check.h"

/* The most ranks a communicator may have: a registration naming more is refused
 * before anything is sized by it. */
#define COLL_WIRE_MAX_NRANKS (1 << 20)

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

/* collCommShrink (lib/core/split.c), on the survivors' bootstrap listeners. */
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

/* The secret of an id built from text: COLL_SECRET's hex digits (any even
 * number, folded into COLL_SECRET_BYTES), or, without one, bytes derived from
 * the address text.  False with a message in err when the hex is malformed. */
bool coll_wire_secret_text(const char *hostport, const char *secret_hex, uint8_t *secret,
                           char *err, size_t errlen);

#endif
