/* What the fuzz targets share: the secret their listeners expect, the valid
 * messages the seed corpus starts from (fuzz_seeds.c writes them), and a check
 * that stops the run when a parser let an invariant through. */
#ifndef COLL_FUZZ_H
#define COLL_FUZZ_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#include "tcp_wire.h"
#include "verbs_wire.h"
#include "wire.h"

/* A finding: libFuzzer saves the input that got here. */
#define FUZZ_ASSERT(cond)                                                            \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                 \
        }                                                                            \
    } while (0)

static const uint8_t fuzz_secret[COLL_SECRET_BYTES] = {0x00, 0x11, 0x22, 0x33, 0x44, 0x55,
                                                       0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb,
                                                       0xcc, 0xdd, 0xee, 0xff};
#define FUZZ_NRANKS 4

static inline void fuzz_addr(union coll_sockaddr *a, uint32_t *len_p, int port)
{
    memset(a, 0, sizeof(*a));
    a->in.sin_family = AF_INET;
    a->in.sin_addr.s_addr = htonl(0x7f000001);
    a->in.sin_port = htons((uint16_t)port);
    *len_p = sizeof(struct sockaddr_in);
}

/* A rank's info as a rank sends it. */
static inline struct coll_rank_info fuzz_rank_info(int rank)
{
    struct coll_rank_info info = {.rank = rank, .pid = 1000 + rank, .host_hash = 42,
                                  .tp_mask = 1};
    snprintf(info.host, sizeof(info.host), "host%d", rank);
    fuzz_addr(&info.boot_addr, &info.boot_addrlen, 20000 + rank);
    struct tcp_handle th = {.magic = TCP_MAGIC, .nsocks = 2};
    fuzz_addr(&th.addr, &th.addrlen, 21000 + rank);
    memcpy(info.tp_handle[0], &th, sizeof(th));
    return info;
}

static inline struct coll_boot_register fuzz_register(int rank)
{
    struct coll_boot_register reg = {.magic = COLL_BOOT_MAGIC, .nranks = FUZZ_NRANKS,
                                     .rank = rank, .info = fuzz_rank_info(rank)};
    memcpy(reg.secret, fuzz_secret, COLL_SECRET_BYTES);
    return reg;
}

static inline struct coll_boot_ring_hello fuzz_ring_hello(int rank)
{
    struct coll_boot_ring_hello h = {.magic = COLL_BOOT_MAGIC, .rank = rank};
    memcpy(h.secret, fuzz_secret, COLL_SECRET_BYTES);
    return h;
}

static inline struct tcp_hello fuzz_tcp_hello(int rank, int idx, int nsocks)
{
    struct tcp_hello h = {.magic = TCP_MAGIC, .rank = rank, .sock_idx = idx, .nsocks = nsocks};
    memcpy(h.secret, fuzz_secret, COLL_SECRET_BYTES);
    return h;
}

#define FUZZ_VERBS_NSLOTS 16
#define FUZZ_VERBS_SLOT_BYTES (128 * 1024)

static inline struct verbs_hello fuzz_verbs_hello(int rank)
{
    struct verbs_hello h = {.magic = VERBS_MAGIC, .rank = rank, .nslots = FUZZ_VERBS_NSLOTS,
                            .slot_bytes = FUZZ_VERBS_SLOT_BYTES,
                            .qp = {.qpn = 17, .psn = 99, .lid = 1, .mtu = 3, .global = 1},
                            .credit_addr = 0x1000, .credit_rkey = 7};
    memcpy(h.secret, fuzz_secret, COLL_SECRET_BYTES);
    return h;
}

static inline struct verbs_handle fuzz_verbs_handle(void)
{
    struct verbs_handle h = {.magic = VERBS_MAGIC, .nslots = FUZZ_VERBS_NSLOTS,
                             .slot_bytes = FUZZ_VERBS_SLOT_BYTES, .eth = 1};
    fuzz_addr(&h.addr, &h.addrlen, 22000);
    return h;
}

static inline struct coll_id fuzz_id(void)
{
    struct coll_id id = {.magic = COLL_ID_MAGIC, .format = COLL_ID_FORMAT, .root_is_rank0 = 1};
    memcpy(id.secret, fuzz_secret, COLL_SECRET_BYTES);
    fuzz_addr(&id.addr, &id.addrlen, 29500);
    return id;
}

/* What every check that returned COLL_WIRE_OK for a rank's info promises. */
static inline void fuzz_check_info(const struct coll_rank_info *info, int rank)
{
    FUZZ_ASSERT(info->rank == rank);
    FUZZ_ASSERT(memchr(info->host, '\0', sizeof(info->host)) != NULL);
    FUZZ_ASSERT(info->boot_addrlen <= sizeof(info->boot_addr));
    FUZZ_ASSERT(coll_wire_addr_ok(&info->boot_addr, info->boot_addrlen));
    FUZZ_ASSERT(info->tp_mask < (1u << COLL_MAX_TRANSPORTS));
}

#endif
