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
    int32_t suspect;    /* COLL_SHRINK_DETECT: the rank this one blames, -1: none */
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

/* Status queries (lib/engine/status.c; collrun status, collinfo --status), on
 * any rank's bootstrap listener once its communicator is up.  One request per
 * connection, one answer, then the rank closes it; a request without the
 * secret is closed unanswered. */
#define COLL_STATUS_MAGIC 0x54415453u /* "STAT" */
#define COLL_STATUS_VERSION 1u
#define COLL_STATUS_NAME_BYTES 32
#define COLL_STATUS_ALGO_BYTES 16
#define COLL_STATUS_HOST_BYTES 64
#define COLL_STATUS_PEERS 8            /* peers of the call in progress sent */

enum coll_status_ask {
    COLL_STATUS_ASK_RANK = 1,  /* what this rank is doing: struct coll_status_reply */
    COLL_STATUS_ASK_TABLE = 2, /* every rank's listener: struct coll_status_table + entries */
};

/* Flags of a rank's answer. */
#define COLL_STATUS_F_ABORTING 1u  /* collCommAbort was called */
#define COLL_STATUS_F_FINALIZED 2u /* collCommFinalize returned */

/* client -> rank */
struct coll_status_req {
    uint32_t magic;
    uint8_t secret[COLL_SECRET_BYTES];
    uint32_t version;
    uint32_t ask;       /* enum coll_status_ask */
    uint32_t pad;
};

/* One call, from the rank's flight recorder (lib/engine/flight.h). */
struct coll_status_call {
    uint64_t seq;       /* the communicator's call number */
    uint64_t count;     /* elements (messages when dtype is -1) */
    int64_t age_ms;     /* in progress: since it began; finished: since it ended */
    int64_t took_ms;    /* finished: how long it ran; -1 in progress */
    int32_t dtype, op, root, peer; /* -1: none */
    int32_t state;      /* enum coll_flight_state; -1: no such call */
    int32_t result;     /* collResult_t of a finished call */
    char name[COLL_STATUS_NAME_BYTES];
    char algo[COLL_STATUS_ALGO_BYTES];
};

/* Bytes the call in progress posted and completed with one peer (-1: the
 * other peers together). */
struct coll_status_peer {
    int32_t peer;
    uint32_t pad;
    uint64_t sent, sent_posted, recvd, recvd_posted;
};

/* rank -> client, for COLL_STATUS_ASK_RANK. */
struct coll_status_reply {
    uint32_t magic;
    uint8_t secret[COLL_SECRET_BYTES];
    uint32_t version;
    int32_t rank, nranks, pid;
    int32_t error;       /* the collResult_t that poisoned the communicator, or 0 */
    int32_t revoked_by;  /* -1: not revoked */
    int32_t failed_peer; /* the rank a failure is blamed on, -1 */
    int32_t wait_peer;   /* the peer the last wait that found nothing to do was for, -1 */
    uint32_t flags;      /* COLL_STATUS_F_* */
    int32_t open;        /* calls in progress (several on a progress thread) */
    int32_t npeers;      /* entries of peers[] in use */
    uint32_t pad;
    uint64_t calls;      /* calls recorded so far */
    char host[COLL_STATUS_HOST_BYTES];
    char comm_name[64];  /* collConfig_t.commName, "" */
    struct coll_status_call cur;  /* the oldest call in progress (open > 0) */
    struct coll_status_call last; /* the last one finished; state -1 when none */
    struct coll_status_peer peers[COLL_STATUS_PEERS];
};

/* rank -> client, for COLL_STATUS_ASK_TABLE: followed by nranks entries. */
struct coll_status_table {
    uint32_t magic;
    uint8_t secret[COLL_SECRET_BYTES];
    uint32_t version;
    int32_t nranks;
    int32_t rank;        /* the rank that answered */
};

struct coll_status_addr {
    int32_t rank;
    int32_t pid;
    uint32_t addrlen;
    uint32_t pad;
    union coll_sockaddr addr; /* the rank's bootstrap listener */
    char host[COLL_STATUS_HOST_BYTES];
};

/* A request on a bootstrap listener, of which got bytes have come: the magic,
 * the secret, this version, a known ask. */
enum coll_wire_verdict coll_wire_status_req(const void *buf, size_t got, const uint8_t *secret,
                                            struct coll_status_req *out, const char **why_p);

/* A rank's answer: the magic and the secret, this version, nranks in [1, 2^20],
 * rank in [0, nranks) and equal to want_rank unless that is -1, every rank it
 * names in [-1, nranks), states in [-1, COLL_FLIGHT_FAILED], npeers in [0,
 * COLL_STATUS_PEERS]; strings come out NUL-terminated. */
enum coll_wire_verdict coll_wire_status_reply(const void *buf, size_t len, const uint8_t *secret,
                                              int want_rank, struct coll_status_reply *out,
                                              const char **why_p);

/* The head of a table: the magic and the secret, this version, nranks in [1,
 * 2^20], the answering rank in [0, nranks). */
enum coll_wire_verdict coll_wire_status_table(const void *buf, size_t len, const uint8_t *secret,
                                              struct coll_status_table *out, const char **why_p);

/* The nranks entries after it: entry k for rank k, an address as published,
 * host NUL-terminated in out. */
enum coll_wire_verdict coll_wire_status_addrs(const void *buf, size_t len, int nranks,
                                              struct coll_status_addr *out, const char **why_p);

#endif
