/* Verbs device handling: which device and port (COLL_IB_HCA), which GID
 * (COLL_IB_GID_INDEX, else the IPv4-mapped RoCE v2 entry), and the queue pair
 * state machine (RESET -> INIT -> RTR -> RTS).
 *
 * GID choice on RoCE: a port lists one GID per address of its net device and
 * RoCE version.  The IPv4-mapped RoCE v2 entry (::ffff:a.b.c.d) is routable and
 * is what two hosts on an IPv4 network share, so it is the default; after it
 * any RoCE v2 entry (an IPv6 address), then index 0.  On InfiniBand the LID
 * addresses the peer and no GRH is sent unless COLL_IB_GID_INDEX asks for one.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "check.h"
#include "log.h"
#include "param.h"
#include "topo.h"
#include "transport.h"
#include "verbs.h"

bool verbs_hca_match(const char *spec, const char *name, int port)
{
    if (spec == NULL || spec[0] == '\0')
        return true;
    bool exclude = spec[0] == '^';
    if (exclude)
        spec++;
    bool exact = spec[0] == '=';
    if (exact)
        spec++;
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", spec);
    bool listed = false;
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t && !listed; t = strtok_r(NULL, ",", &save)) {
        int want_port = 0;
        char *colon = strchr(t, ':');
        if (colon) {
            *colon = '\0';
            want_port = atoi(colon + 1);
        }
        bool name_ok = exact ? strcmp(t, name) == 0 : strncmp(t, name, strlen(t)) == 0;
        /* A port in the list narrows the match; asking about "any port" (0)
         * of a device matches as long as the name does. */
        listed = name_ok && (want_port == 0 || port == 0 || want_port == port);
    }
    if (exclude) {
        /* "^mlx5_0:1" excludes port 1 only; asking about the whole device then
         * still allows it (other ports may be usable). */
        return !listed || (port == 0 && strchr(spec, ':') != NULL);
    }
    return listed;
}

static bool verbs_gid_is_v4_mapped(const union ibv_gid *g)
{
    static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return memcmp(g->raw, prefix, sizeof(prefix)) == 0;
}

static bool verbs_gid_is_zero(const union ibv_gid *g)
{
    static const uint8_t zero[16];
    return memcmp(g->raw, zero, sizeof(zero)) == 0;
}

/* The GID index for d's port: COLL_IB_GID_INDEX when set, else by the rule
 * in the file's comment.  Returns false (after a WARN naming the parameter)
 * when the requested index is not usable. */
static bool verbs_pick_gid(struct verbs_dev *d, int tbl_len)
{
    int64_t want = coll_param_int(COLL_PARAM_IB_GID_INDEX);
    if (want >= 0) {
        if (want >= tbl_len || ibv_query_gid(d->ibctx, d->port, (int)want, &d->gid) != 0 ||
            verbs_gid_is_zero(&d->gid)) {
            COLL_WARN("COLL_IB_GID_INDEX=%lld: %s port %u has no GID there (table of %d)",
                      (long long)want, d->name, d->port, tbl_len);
            return false;
        }
        d->gid_index = (int)want;
        return true;
    }
    if (!d->eth) {
        d->gid_index = -1; /* InfiniBand: LID routing inside the subnet */
        return true;
    }
    int best = -1, best_rank = 0;
    for (int i = 0; i < tbl_len; i++) {
        struct ibv_gid_entry e;
        if (ibv_query_gid_ex(d->ibctx, d->port, (uint32_t)i, &e, 0) != 0)
            continue; /* an empty entry */
        if (verbs_gid_is_zero(&e.gid))
            continue;
        int rank = 1;
        if (e.gid_type == IBV_GID_TYPE_ROCE_V2)
            rank = verbs_gid_is_v4_mapped(&e.gid) ? 3 : 2;
        if (rank > best_rank) {
            best = i;
            best_rank = rank;
        }
    }
    if (best < 0 || ibv_query_gid(d->ibctx, d->port, best, &d->gid) != 0)
        return false;
    d->gid_index = best;
    return true;
}

/* Opens dev and looks for a usable port on it.  *ok_p false (device closed)
 * when it has none. */
static collResult_t verbs_try_device(struct verbs_dev *d, struct ibv_device *dev,
                                     const char *spec, bool *ok_p)
{
    *ok_p = false;
    struct ibv_context *ibctx = ibv_open_device(dev);
    if (ibctx == NULL)
        return collSuccess; /* e.g. no permission on /dev/infiniband: try the next */
    struct ibv_device_attr da;
    if (ibv_query_device(ibctx, &da) != 0) {
        ibv_close_device(ibctx);
        return collSuccess;
    }
    for (uint8_t p = 1; p <= da.phys_port_cnt; p++) {
        struct ibv_port_attr pa;
        if (!verbs_hca_match(spec, ibv_get_device_name(dev), p) ||
            ibv_query_port(ibctx, p, &pa) != 0 || pa.state != IBV_PORT_ACTIVE)
            continue;
        snprintf(d->name, sizeof(d->name), "%s", ibv_get_device_name(dev));
        d->ibctx = ibctx;
        d->port = p;
        d->eth = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
        d->lid = pa.lid;
        d->mtu = pa.active_mtu;
        d->max_msg_sz = pa.max_msg_sz;
        if (!verbs_pick_gid(d, pa.gid_tbl_len)) {
            if (coll_param_is_set(COLL_PARAM_IB_GID_INDEX)) {
                ibv_close_device(ibctx);
                d->ibctx = NULL;
                return collInvalidArgument;
            }
            continue;
        }
        *ok_p = true;
        return collSuccess;
    }
    ibv_close_device(ibctx);
    d->ibctx = NULL;
    return collSuccess;
}

#define VERBS_MAX_DEVS 64

collResult_t verbs_dev_open(struct verbs_dev *d, bool *found_p, const char **why_p)
{
    memset(d, 0, sizeof(*d));
    *found_p = false;
    const char *spec = coll_param_str(COLL_PARAM_IB_HCA);
    int ndev = 0;
    struct ibv_device **list = ibv_get_device_list(&ndev);
    if (list == NULL || ndev == 0) {
        if (list)
            ibv_free_device_list(list);
        *why_p = "no RDMA device";
        return collSuccess;
    }
    /* Devices nearest this rank's cores first (its NUMA node, then one it
     * partly covers), each group in the system's order. */
    int dist[VERBS_MAX_DEVS];
    int nd = ndev < VERBS_MAX_DEVS ? ndev : VERBS_MAX_DEVS;
    struct coll_topo *t = NULL;
    if (nd > 1 && coll_topo_load(NULL, &t) != collSuccess)
        t = NULL;
    for (int i = 0; i < nd; i++)
        dist[i] = t ? coll_topo_rdma_distance(t, ibv_get_device_name(list[i])) : 0;
    coll_topo_free(t);
    bool any_named = false;
    collResult_t res = collSuccess;
    for (int k = 0; k < 3 * nd && !*found_p && res == collSuccess; k++) {
        int i = k % nd;
        if (dist[i] != k / nd || !verbs_hca_match(spec, ibv_get_device_name(list[i]), 0))
            continue;
        any_named = true;
        res = verbs_try_device(d, list[i], spec, found_p);
    }
    if (res == collSuccess && !*found_p && spec != NULL && !any_named) {
        COLL_WARN("COLL_IB_HCA=%s matches none of the %d RDMA device(s) here (the first is %s)",
                  spec, ndev, ibv_get_device_name(list[0]));
    }
    ibv_free_device_list(list);
    if (res != collSuccess)
        return res;
    if (!*found_p) {
        *why_p = any_named ? "no active port on the RDMA device(s)"
                           : "COLL_IB_HCA matches no RDMA device";
        return collSuccess;
    }
    d->pd = ibv_alloc_pd(d->ibctx);
    if (d->pd == NULL) {
        COLL_WARN("verbs: ibv_alloc_pd on %s: %s", d->name, strerror(errno));
        ibv_close_device(d->ibctx);
        d->ibctx = NULL;
        *found_p = false;
        return collSystemError;
    }
    return collSuccess;
}

void verbs_dev_close(struct verbs_dev *d)
{
    if (d->pd)
        ibv_dealloc_pd(d->pd);
    if (d->ibctx)
        ibv_close_device(d->ibctx);
    d->pd = NULL;
    d->ibctx = NULL;
}

collResult_t verbs_qp_create(struct verbs_dev *d, struct ibv_cq *cq, uint32_t send_depth,
                             uint32_t recv_depth, uint32_t *max_inline_p, struct ibv_qp **qp_p)
{
    /* Ask for room for a small message inline, and settle for less (some
     * devices allow none): inline only spares the device a DMA read. */
    static const uint32_t inline_tries[] = {256, 64, 0};
    struct ibv_qp *qp = NULL;
    struct ibv_qp_init_attr ia;
    for (size_t t = 0; t < sizeof(inline_tries) / sizeof(inline_tries[0]) && !qp; t++) {
        ia = (struct ibv_qp_init_attr){
            .send_cq = cq,
            .recv_cq = cq,
            .qp_type = IBV_QPT_RC,
            .cap = {.max_send_wr = send_depth, .max_recv_wr = recv_depth, .max_send_sge = 1,
                    .max_recv_sge = 1, .max_inline_data = inline_tries[t]},
        };
        qp = ibv_create_qp(d->pd, &ia);
    }
    if (qp == NULL) {
        COLL_WARN("verbs: ibv_create_qp on %s (%u send, %u receive WRs): %s", d->name,
                  send_depth, recv_depth, strerror(errno));
        return collSystemError;
    }
    struct ibv_qp_attr a = {
        .qp_state = IBV_QPS_INIT,
        .pkey_index = 0,
        .port_num = d->port,
        /* Remote read: a receiver reads rendezvous messages from the sender. */
        .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                           IBV_ACCESS_LOCAL_WRITE,
    };
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                  IBV_QP_ACCESS_FLAGS) != 0) {
        COLL_WARN("verbs: moving a queue pair on %s to INIT: %s", d->name, strerror(errno));
        ibv_destroy_qp(qp);
        return collSystemError;
    }
    *max_inline_p = ia.cap.max_inline_data;
    *qp_p = qp;
    return collSuccess;
}

void verbs_qp_info(const struct verbs_dev *d, const struct ibv_qp *qp, uint32_t psn,
                   struct verbs_qp_info *info)
{
    memset(info, 0, sizeof(*info));
    info->qpn = qp->qp_num;
    info->psn = psn & 0xffffff;
    memcpy(info->gid, d->gid.raw, sizeof(info->gid));
    info->lid = d->lid;
    info->mtu = (uint8_t)d->mtu;
    info->global = d->gid_index >= 0;
}

/* RoCE packets are lost under load now and then, and Soft-RoCE runs on
 * whatever CPU is left: an ACK timeout of about a second (4.096 us x 2^18)
 * with seven retries rides out both, and a dead peer is noticed sooner by its
 * side socket anyway.  rnr_retry 7 retries a write with immediate forever when
 * the peer has not re-posted its receives yet. */
#define VERBS_ACK_TIMEOUT 18
#define VERBS_RETRY_CNT 7
#define VERBS_RNR_RETRY 7
#define VERBS_MIN_RNR_TIMER 12 /* 0.64 ms */

collResult_t verbs_qp_connect(struct verbs_dev *d, struct ibv_qp *qp, uint32_t local_psn,
                              const struct verbs_qp_info *remote, int *err_p,
                              const char **step_p)
{
    enum ibv_mtu mtu = d->mtu < (enum ibv_mtu)remote->mtu ? d->mtu : (enum ibv_mtu)remote->mtu;
    struct ibv_qp_attr a = {
        .qp_state = IBV_QPS_RTR,
        .path_mtu = mtu,
        .dest_qp_num = remote->qpn,
        .rq_psn = remote->psn,
        .max_dest_rd_atomic = 1,
        .min_rnr_timer = VERBS_MIN_RNR_TIMER,
        .ah_attr = {.dlid = remote->lid, .sl = 0, .src_path_bits = 0, .port_num = d->port},
    };
    if (d->gid_index >= 0 && remote->global) {
        a.ah_attr.is_global = 1;
        memcpy(a.ah_attr.grh.dgid.raw, remote->gid, sizeof(remote->gid));
        a.ah_attr.grh.sgid_index = (uint8_t)d->gid_index;
        a.ah_attr.grh.hop_limit = 64;
    }
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                  IBV_QP_MIN_RNR_TIMER) != 0) {
        *err_p = errno;
        *step_p = "moving the queue pair to RTR";
        return collSystemError;
    }
    a = (struct ibv_qp_attr){
        .qp_state = IBV_QPS_RTS,
        .timeout = VERBS_ACK_TIMEOUT,
        .retry_cnt = VERBS_RETRY_CNT,
        .rnr_retry = VERBS_RNR_RETRY,
        .sq_psn = local_psn & 0xffffff,
        .max_rd_atomic = 1,
    };
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) != 0) {
        *err_p = errno;
        *step_p = "moving the queue pair to RTS";
        return collSystemError;
    }
    return collSuccess;
}
