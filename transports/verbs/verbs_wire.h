/* The verbs transport's wire formats: the listen handle a rank publishes through
 * the bootstrap and the hello on the side channel.  The checks are pure (no
 * libibverbs), for verbs.c and the fuzz targets (tests/fuzz). */
#ifndef COLL_VERBS_WIRE_H
#define COLL_VERBS_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "transport.h"
#include "wire_check.h"

#define VERBS_MAGIC 0x42565243u /* "CRVB" */
#define VERBS_MAX_SLOTS 256
/* Slot sizes COLL_IB_SLOT_BYTES allows: a peer's handle asking for other sizes
 * is refused before any buffer is sized by it. */
#define VERBS_MIN_SLOT_BYTES 4096u
#define VERBS_MAX_SLOT_BYTES (8u << 20)

/* One side's half of a queue pair connection, as exchanged at set-up. */
struct verbs_qp_info {
    uint32_t qpn;
    uint32_t psn;
    uint8_t gid[16];
    uint16_t lid;
    uint8_t mtu;         /* enum ibv_mtu */
    uint8_t global;      /* 1: address by GID (GRH), 0: by LID */
};

struct verbs_handle {
    uint32_t magic;
    uint32_t nslots;      /* the receiver's ring: the sender stages the same shape */
    uint32_t slot_bytes;
    uint32_t addrlen;
    uint8_t eth;          /* link layer: RoCE and InfiniBand ports do not talk */
    uint8_t pad[7];
    union coll_sockaddr addr; /* the side channel's listener */
};
_Static_assert(sizeof(struct verbs_handle) <= COLL_TP_HANDLE_BYTES, "verbs handle too large");

struct verbs_hello {
    uint32_t magic;
    uint8_t secret[COLL_SECRET_BYTES];
    int32_t rank;
    uint32_t nslots, slot_bytes;
    struct verbs_qp_info qp;
    uint64_t credit_addr;
    uint32_t credit_rkey;
};

/* Rendezvous (verbs.c): a slot written with VERBS_IMM_RTS in its immediate holds
 * a verbs_rts instead of data: the message of len bytes waits in the sender's
 * registered memory, for the receiver to RDMA READ.  The receiver's credit that
 * releases that slot carries VERBS_IMM_NAK when it will not read it: the sender
 * then streams the message through the slots as usual; without it the receiver
 * reads, and a later credit counts the reads it finished in VERBS_IMM_DONE
 * (oldest first).  Credits count in the low 24 bits. */
#define VERBS_RTS_MAGIC 0x53545256u /* "VRTS" */
#define VERBS_IMM_RTS (1u << 31)
#define VERBS_IMM_NAK (1u << 31)
#define VERBS_IMM_DONE_SHIFT 24
#define VERBS_IMM_DONE_MAX 127u
#define VERBS_IMM_COUNT 0xffffffu

struct verbs_rts {
    uint32_t magic;
    uint32_t rkey;
    uint64_t addr;
    uint64_t len;
};

/* A slot announced as an RTS (len bytes of it): magic, a length of at least one
 * byte, and an address range that does not wrap.  The receiver bounds what it
 * reads by its own buffer; the rkey is the device's to check. */
enum coll_wire_verdict verbs_wire_rts(const void *buf, size_t len, struct verbs_rts *out,
                                      const char **why_p);

/* What the check of a hello needs to know of the listener. */
struct verbs_wire_ctx {
    const uint8_t *secret;
    int nranks;
    uint32_t nslots, slot_bytes; /* this rank's ring: the sender must match it */
};

/* The got bytes of a hello so far (a coll_hello_check_fn; arg is a struct
 * verbs_wire_ctx): rank, the listener's ring shape, the queue pair's MTU (1-5,
 * enum ibv_mtu) and addressing flag.  Returns an enum coll_wire_verdict. */
int verbs_wire_hello(const void *buf, size_t got, const void *arg, const char **why_p);
/* A handle from the rank table: magic, ring shape within the bounds above,
 * side channel address. */
enum coll_wire_verdict verbs_wire_handle(const void *buf, size_t len, struct verbs_handle *out,
                                         const char **why_p);

#endif
