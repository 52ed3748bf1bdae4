/* What verbs.c (the transport: connections and the data path) and verbs_dev.c
 * (device, port and GID choice; queue pair set-up) share. */
#ifndef COLL_VERBS_H
#define COLL_VERBS_H

#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stdint.h>

#include "collective.h"
#include "verbs_wire.h"

/* The device a communicator uses, opened once in init and closed in fini. */
struct verbs_dev {
    struct ibv_context *ibctx;
    struct ibv_pd *pd;
    char name[IBV_SYSFS_NAME_MAX];
    uint8_t port;
    bool eth;            /* RoCE: every packet needs a GRH, so addresses are GIDs */
    int gid_index;       /* -1: no GRH (InfiniBand addressed by LID) */
    union ibv_gid gid;
    uint16_t lid;
    enum ibv_mtu mtu;    /* the port's active MTU */
    uint32_t max_msg_sz;
};

/* Opens the device and port COLL_IB_HCA selects (the first active port of the
 * first matching device by default) and picks the GID.  *found_p false with
 * collSuccess when this host has nothing usable: *why_p then says why (static
 * text, for the one INFO line that says the transport is not offered). */
collResult_t verbs_dev_open(struct verbs_dev *d, bool *found_p, const char **why_p);
void verbs_dev_close(struct verbs_dev *d);
/* True when name (and port, 0 = any) is allowed by the NCCL-style list spec:
 * "mlx5_0:1,mlx5_1" prefixes with optional ports, "^" excludes, "=" exact. */
bool verbs_hca_match(const char *spec, const char *name, int port);
/* An RC queue pair on cq with the given depths and at least max_inline bytes of
 * inline data if the device allows (*max_inline_p: what it granted), moved to
 * INIT with remote-write access. */
collResult_t verbs_qp_create(struct verbs_dev *d, struct ibv_cq *cq, uint32_t send_depth,
                             uint32_t recv_depth, uint32_t *max_inline_p, struct ibv_qp **qp_p);
/* This side's half for the peer. */
void verbs_qp_info(const struct verbs_dev *d, const struct ibv_qp *qp, uint32_t psn,
                   struct verbs_qp_info *info);
/* INIT -> RTR -> RTS toward the remote half.  Returns the failing step's errno
 * in *err_p and its name in *step_p on failure. */
collResult_t verbs_qp_connect(struct verbs_dev *d, struct ibv_qp *qp, uint32_t local_psn,
                              const struct verbs_qp_info *remote, int *err_p,
                              const char **step_p);

#endif
