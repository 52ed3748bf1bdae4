/* RDMA verbs transport: ranks with an RDMA device (InfiniBand, RoCE, or
 * Soft-RoCE) move bytes by RDMA WRITE WITH IMMEDIATE over reliable-connected
 * queue pairs, one queue pair per connection (one direction between two ranks).
 *
 * The receiver registers a ring of nslots slots of slot_bytes each; the sender
 * registers a staging ring of the same shape.  A message of n bytes fills
 * ceil(n / slot_bytes) consecutive slots, every slot but the last full.  The
 * sender copies a fragment into staging slot s and writes it into the
 * receiver's slot s, with the fragment's length as the immediate; the
 * receiver keeps one RECV WR posted per slot, and its completions arrive in
 * slot order (RC keeps order), so the immediate alone says which slot is full
 * and how much of it.  Fragments of at most max_inline_data bytes go inline.
 *
 *   sender                                    receiver
 *   wait until filled - credit < nslots       poll CQ: RECV_RDMA_WITH_IMM,
 *   copy fragment to staging[filled % N]        len[arrived % N] = imm; arrived++
 *   WRITE_WITH_IMM staging[s] -> ring[s] ---> use ring[next % N] (copy it out, or
 *                                               reduce from it: recv_peek); next++
 *   credit = imm of the credit write     <--- every nslots/2 slots (or before it
 *                                               sleeps): WRITE_WITH_IMM, inline,
 *                                               next -> the sender's credit word,
 *                                               imm = low 32 bits of next
 *
 * The sender never writes a slot the receiver has not released: a slot is
 * free once the receiver's consumed counter (its `next`) has passed it.  The
 * counter is written into a registered word on the sender and carried in the
 * immediate as well; the sender trusts the immediate, which arrives whole with
 * its completion, whereas the word may be in the middle of the next update
 * when it is read.  The credit write with immediate also produces a
 * completion on the sender, which is what wakes a sender that sleeps on its
 * completion channel waiting for room.
 *
 * A send request is complete once its bytes sit in staging slots (as with
 * shm), so a sender may run up to nslots slots ahead of its receiver.
 *
 * Connection set-up goes over a small TCP side channel per communicator: the
 * listen handle holds its address.  connect() creates the queue pair, sends
 * {magic, secret, rank, its half of the QP, credit word address and rkey} and
 * returns at once (the receiver may be busy elsewhere: waiting for it would
 * deadlock ranks that connect in different orders); accept() checks the
 * secret, creates its queue pair, moves it to RTS and answers with its half
 * and the ring's address and rkey; the sender completes its queue pair when
 * the answer arrives, in test().  Fragments copied to staging before then are
 * written once the queue pair is up.  The socket stays open for the life of
 * the connection: its EOF says the peer is gone, and shutdown(2) on it wakes a
 * blocked wait.
 *
 * Waiting: test() polls the CQ (no system call with a user-space provider);
 * wait_prepare() arms the CQ's completion channel, whose descriptor the core
 * polls together with the side socket.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "alloc.h"
#include "check.h"
#include "log.h"
#include "param.h"
#include "transport.h"
#include "socket.h"
#include "verbs.h"

#define VERBS_REQ_CAP 128
#define VERBS_MAX_PENDING 64
#define VERBS_POLL_BATCH 16

struct verbs_reply {
    uint32_t magic;
    struct verbs_qp_info qp;
    uint64_t ring_addr;
    uint32_t ring_rkey;
};

struct verbs_listener;

struct verbs_ctx {
    const struct coll_tp_env *env;
    struct verbs_dev dev;
    uint32_t nslots, slot_bytes;
    struct verbs_listener *lis; /* for set-ups answered while waiting on other work */
};

struct verbs_req {
    struct coll_req base;
    char *buf;
    size_t size;
    size_t done_bytes;
    uint64_t end;      /* sender: the slot count once its last fragment is staged */
    bool reported;
};

struct verbs_conn {
    struct coll_conn base;
    struct verbs_ctx *ctx;
    int sock;                      /* side channel: set-up, then EOF detection */
    struct ibv_comp_channel *chan;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    char *ring;                    /* sender: staging; receiver: the slots peers write */
    struct ibv_mr *ring_mr;
    uint64_t *word;                /* sender: credit word the receiver writes;
                                    * receiver: the source of its credit writes */
    struct ibv_mr *word_mr;
    uint32_t nslots, slot_bytes, max_inline;
    uint32_t psn;
    uint32_t send_depth, recv_depth;
    uint32_t sq_out;               /* send WRs posted and not yet completed */
    uint64_t remote_addr;          /* sender: the ring; receiver: the credit word */
    uint32_t remote_rkey;
    uint32_t len[VERBS_MAX_SLOTS]; /* bytes in each slot */
    /* sender */
    bool up;                       /* the queue pair is in RTS */
    size_t reply_got;
    struct verbs_reply reply;
    uint64_t filled;               /* slots copied to staging */
    uint64_t posted;               /* slots written (posted) */
    uint64_t credit;               /* slots the receiver has released */
    /* receiver */
    uint64_t arrived;              /* slots whose immediate has come */
    uint64_t next;                 /* slots released */
    uint64_t credit_sent;          /* `next` as last written to the sender */
    size_t slot_off;               /* bytes of slot `next` already read */
    size_t peeked;
    /* requests [head, tail) in the FIFO */
    uint64_t head, tail;
    struct verbs_req reqs[VERBS_REQ_CAP];
    bool peer_gone;                /* the side socket closed */
    atomic_bool shut;              /* shutdown() was called */
    unsigned idle_tests;
    collResult_t failed;           /* sticky */
    char err[160];                 /* base.err_text when a completion failed */
};

struct verbs_listener {
    struct coll_conn base;
    struct verbs_ctx *ctx;
    int lfd;
    struct coll_hellos hellos;    /* accepted, hello incomplete */
    struct verbs_wire_ctx wire;   /* what verbs_wire_hello checks against */
    /* Receive connections set up and answered, not yet handed out by accept() */
    struct coll_conn **ready;
    int nready;
};

static collResult_t verbs_init(const struct coll_tp_env *env, void **ctx_p)
{
    *ctx_p = NULL;
    /* Sizes first: a malformed value is reported whether or not a device
     * exists, so a job learns of it on any host. */
    int64_t slot = coll_param_int(COLL_PARAM_IB_SLOT_BYTES);
    int64_t nslots = coll_param_int(COLL_PARAM_IB_NSLOTS);
    if (slot < 4096 || slot > (8 << 20) || slot % 64 != 0) {
        COLL_WARN("COLL_IB_SLOT_BYTES=%lld is not a multiple of 64 in 4 KiB-8 MiB; using 128 KiB",
                  (long long)slot);
        slot = 128 * 1024;
    }
    if (nslots < 2 || nslots > VERBS_MAX_SLOTS) {
        COLL_WARN("COLL_IB_NSLOTS=%lld is outside 2-%d; using 16", (long long)nslots,
                  VERBS_MAX_SLOTS);
        nslots = 16;
    }
    struct verbs_ctx *ctx;
    COLL_CHECK(coll_calloc(&ctx, 1));
    ctx->env = env;
    ctx->nslots = (uint32_t)nslots;
    ctx->slot_bytes = (uint32_t)slot;
    bool found = false;
    const char *why = NULL;
    collResult_t res = verbs_dev_open(&ctx->dev, &found, &why);
    if (res != collSuccess || !found) {
        free(ctx);
        if (res == collSuccess)
            COLL_INFO(COLL_SUBSYS_VERBS, "verbs: %s; transport not offered", why);
        return res;
    }
    if (ctx->dev.max_msg_sz != 0 && ctx->slot_bytes > ctx->dev.max_msg_sz) {
        COLL_WARN("COLL_IB_SLOT_BYTES=%u exceeds %s's largest message (%u); using that",
                  ctx->slot_bytes, ctx->dev.name, ctx->dev.max_msg_sz);
        ctx->slot_bytes = ctx->dev.max_msg_sz & ~63u;
    }
    char gid[64] = "none (LID routing)";
    if (ctx->dev.gid_index >= 0) {
        const uint8_t *g = ctx->dev.gid.raw;
        snprintf(gid, sizeof(gid), "%d (%02x%02x:%02x%02x:...:%02x%02x:%u.%u.%u.%u)",
                 ctx->dev.gid_index, g[0], g[1], g[2], g[3], g[10], g[11], g[12], g[13], g[14],
                 g[15]);
    }
    COLL_INFO(COLL_SUBSYS_VERBS, "verbs: %s port %u (%s, mtu %d), gid index %s, %u slots of %u "
              "bytes", ctx->dev.name, ctx->dev.port, ctx->dev.eth ? "RoCE" : "InfiniBand",
              128 << ctx->dev.mtu, gid, ctx->nslots, ctx->slot_bytes);
    *ctx_p = ctx;
    return collSuccess;
}

static void verbs_fini(void *vctx)
{
    struct verbs_ctx *ctx = vctx;
    if (ctx == NULL)
        return;
    verbs_dev_close(&ctx->dev);
    free(ctx);
}

static collResult_t verbs_can_connect(void *vctx, const struct coll_rank_info *peer,
                                      const void *handle, bool *ok_p)
{
    struct verbs_ctx *ctx = vctx;
    struct verbs_handle h;
    const char *why;
    /* Both sides have a device (the peer published a valid handle); same-host
     * peers are fine too: the device loops the traffic back. */
    *ok_p = ctx != NULL && verbs_wire_handle(handle, COLL_TP_HANDLE_BYTES, &h, &why) ==
                               COLL_WIRE_OK && h.eth == ctx->dev.eth;
    return collSuccess;
}

static collResult_t verbs_listen(void *vctx, void *handle, struct coll_conn **lis_p)
{
    struct verbs_ctx *ctx = vctx;
    const struct coll_tp_env *env = ctx->env;
    struct verbs_handle h = {.magic = VERBS_MAGIC, .nslots = ctx->nslots,
                             .slot_bytes = ctx->slot_bytes, .eth = ctx->dev.eth};
    socklen_t len;
    char ifname[64];
    /* The side channel carries a few hundred bytes per connection: the
     * bootstrap's interface choice is good enough. */
    COLL_CHECK(coll_socket_pick_addr((const struct sockaddr *)&coll_tp_peer(env, env->rank)->boot_addr,
                                     &h.addr, &len, ifname, sizeof(ifname)));
    struct verbs_listener *lis;
    COLL_CHECK(coll_calloc(&lis, 1));
    lis->wire = (struct verbs_wire_ctx){.secret = env->secret, .nranks = env->nranks,
                                        .nslots = ctx->nslots, .slot_bytes = ctx->slot_bytes};
    collResult_t res = coll_calloc(&lis->ready, (size_t)env->nranks);
    if (res == collSuccess)
        res = coll_socket_listen(&h.addr, &len, &lis->lfd);
    if (res == collSuccess) {
        res = coll_hellos_init(&lis->hellos, lis->lfd, "verbs side channel", VERBS_MAX_PENDING,
                               sizeof(struct verbs_hello), verbs_wire_hello, &lis->wire);
        if (res != collSuccess)
            close(lis->lfd);
    }
    if (res != collSuccess) {
        free(lis->ready);
        free(lis);
        return res;
    }
    ctx->lis = lis;
    h.addrlen = len;
    memcpy(handle, &h, sizeof(h));
    lis->ctx = ctx;
    lis->base.tp = &coll_verbs_transport;
    lis->base.peer = -1;
    lis->base.nfds = 1;
    lis->base.fds[0] = lis->lfd;
    char a[COLL_ADDR_STRLEN];
    COLL_INFO(COLL_SUBSYS_VERBS, "verbs: side channel listening on %s via %s",
              coll_socket_addr_str((struct sockaddr *)&h.addr, a, sizeof(a)), ifname);
    *lis_p = &lis->base;
    return collSuccess;
}

static void verbs_conn_free(struct verbs_conn *c)
{
    if (c->qp)
        ibv_destroy_qp(c->qp);
    if (c->ring_mr)
        ibv_dereg_mr(c->ring_mr);
    if (c->word_mr)
        ibv_dereg_mr(c->word_mr);
    if (c->cq)
        ibv_destroy_cq(c->cq); /* every event was acknowledged when it was read */
    if (c->chan)
        ibv_destroy_comp_channel(c->chan);
    free(c->ring);
    free(c->word);
    if (c->sock >= 0)
        close(c->sock);
    free(c);
}

/* Posts n receive WRs for immediates (no buffer: the data of a write with
 * immediate lands where the write says). */
static int verbs_post_recvs(struct verbs_conn *c, uint32_t n)
{
    struct ibv_recv_wr wr = {.wr_id = 0, .sg_list = NULL, .num_sge = 0}, *bad;
    for (uint32_t i = 0; i < n; i++) {
        int err = ibv_post_recv(c->qp, &wr, &bad);
        if (err)
            return err;
    }
    return 0;
}

/* A connection's verbs resources: completion channel, CQ, queue pair in INIT,
 * the ring (slots or staging) and the credit word, registered; receive WRs
 * posted.  Failures are described with coll_set_error. */
static collResult_t verbs_conn_new(struct verbs_ctx *ctx, int peer, bool is_send, uint32_t nslots,
                                   uint32_t slot_bytes, struct verbs_conn **c_p)
{
    const struct coll_tp_env *env = ctx->env;
    struct verbs_dev *d = &ctx->dev;
    struct verbs_conn *c;
    COLL_CHECK(coll_calloc(&c, 1));
    c->sock = -1;
    c->ctx = ctx;
    c->nslots = nslots;
    c->slot_bytes = slot_bytes;
    c->base.tp = &coll_verbs_transport;
    c->base.peer = peer;
    c->base.is_send = is_send;
    /* A sender waits for completions (credits) too: wake-ups arrive as input. */
    c->base.poll_in = true;
    /* The sender's queue holds data writes (at most nslots unreleased, plus
     * completions not yet polled) and receives for credits; the receiver's
     * holds one receive per slot and credit writes. */
    c->send_depth = 2 * nslots;
    c->recv_depth = is_send ? 2 * nslots : nslots;
    c->psn = (uint32_t)(coll_now_ns() ^ ((uint64_t)env->rank << 12) ^ (uint64_t)peer) & 0xffffff;
    const char *what = "ibv_create_comp_channel";
    size_t ring_bytes = (size_t)nslots * slot_bytes;
    collResult_t res = collSystemError;
    c->chan = ibv_create_comp_channel(d->ibctx);
    if (c->chan == NULL)
        goto err;
    (void)fcntl(c->chan->fd, F_SETFL, fcntl(c->chan->fd, F_GETFL) | O_NONBLOCK);
    what = "ibv_create_cq";
    c->cq = ibv_create_cq(d->ibctx, (int)(c->send_depth + c->recv_depth), c, c->chan, 0);
    if (c->cq == NULL)
        goto err;
    what = "ibv_create_qp";
    res = verbs_qp_create(d, c->cq, c->send_depth, c->recv_depth, &c->max_inline, &c->qp);
    if (res != collSuccess)
        goto err;
    res = collSystemError;
    what = "allocating the ring";
    if (posix_memalign((void **)&c->ring, 4096, ring_bytes) != 0 ||
        posix_memalign((void **)&c->word, 64, 64) != 0)
        goto err;
    memset(c->word, 0, 64);
    what = "ibv_reg_mr";
    int ring_access = IBV_ACCESS_LOCAL_WRITE | (is_send ? 0 : IBV_ACCESS_REMOTE_WRITE);
    c->ring_mr = ibv_reg_mr(d->pd, c->ring, ring_bytes, ring_access);
    if (c->ring_mr == NULL)
        goto err;
    int word_access = IBV_ACCESS_LOCAL_WRITE | (is_send ? IBV_ACCESS_REMOTE_WRITE : 0);
    c->word_mr = ibv_reg_mr(d->pd, c->word, 64, word_access);
    if (c->word_mr == NULL)
        goto err;
    what = "ibv_post_recv";
    int err = verbs_post_recvs(c, c->recv_depth);
    if (err) {
        errno = err;
        goto err;
    }
    what = "ibv_req_notify_cq";
    if (ibv_req_notify_cq(c->cq, 0) != 0)
        goto err;
    /* The side socket (fds[0], set by the caller), completion events, and the
     * listener, so that a hello wakes a wait and is answered (see
     * verbs_listener_progress). */
    c->base.nfds = ctx->lis ? 3 : 2;
    c->base.fds[1] = c->chan->fd;
    if (ctx->lis)
        c->base.fds[2] = ctx->lis->lfd;
    *c_p = c;
    return collSuccess;
err:
    coll_tp_error(env, "verbs: %s on %s for rank %d failed: %s%s", what, d->name, peer,
                   strerror(errno),
                   errno == ENOMEM || errno == EAGAIN ? " (is the locked-memory limit, ulimit -l, "
                                                        "too small?)"
                                                      : "");
    verbs_conn_free(c);
    return res;
}

static collResult_t verbs_connect(void *vctx, const void *handle, int peer,
                                  struct coll_conn **conn_p)
{
    struct verbs_ctx *ctx = vctx;
    const struct coll_tp_env *env = ctx->env;
    struct verbs_handle h;
    const char *why = "";
    if (verbs_wire_handle(handle, COLL_TP_HANDLE_BYTES, &h, &why) != COLL_WIRE_OK) {
        coll_tp_error(env, "verbs: rank %d published no usable verbs handle: %s", peer, why);
        return collInternalError;
    }
    struct verbs_conn *c;
    COLL_CHECK(verbs_conn_new(ctx, peer, true, h.nslots, h.slot_bytes, &c));
    char a[COLL_ADDR_STRLEN];
    coll_socket_addr_str((struct sockaddr *)&h.addr, a, sizeof(a));
    /* The side channel listened before the handle was shared: a refusal means
     * the peer is gone. */
    collResult_t res = coll_socket_connect((struct sockaddr *)&h.addr, h.addrlen,
                                           coll_tp_deadline(env), false, &c->sock);
    if (res != collSuccess) {
        coll_tp_error(env, "verbs: cannot reach the side channel of rank %d at %s (%.64s): %s",
                       peer, a, coll_tp_peer(env, peer)->host, strerror(errno));
        c->sock = -1;
        verbs_conn_free(c);
        return res;
    }
    struct verbs_hello hello = {.magic = VERBS_MAGIC, .rank = env->rank, .nslots = c->nslots,
                                .slot_bytes = c->slot_bytes,
                                .credit_addr = (uint64_t)(uintptr_t)c->word,
                                .credit_rkey = c->word_mr->rkey};
    memcpy(hello.secret, env->secret, COLL_SECRET_BYTES);
    verbs_qp_info(&ctx->dev, c->qp, c->psn, &hello.qp);
    int err;
    res = coll_socket_send_all(c->sock, &hello, sizeof(hello), coll_tp_deadline(env), &err);
    if (res != collSuccess) {
        coll_tp_error(env, "verbs: handshake with rank %d at %s failed: %s", peer, a,
                       strerror(err));
        verbs_conn_free(c);
        return res;
    }
    c->base.fds[0] = c->sock;
    COLL_INFO(COLL_SUBSYS_VERBS, "verbs: connecting to rank %d via %s (qp %u)", peer, a,
              c->qp->qp_num);
    *conn_p = &c->base;
    return collSuccess;
}

static void verbs_listener_update_fds(struct verbs_listener *lis)
{
    lis->base.fds[0] = lis->lfd;
    int n = 1;
    for (int i = 0; i < lis->hellos.npend && n < COLL_CONN_MAX_FDS; i++)
        lis->base.fds[n++] = lis->hellos.pend[i].fd;
    lis->base.nfds = n;
}

/* The receiving side of a connection whose hello arrived on fd: queue pair up
 * to RTS, receives posted, answer sent. */
static collResult_t verbs_accept_one(struct verbs_listener *lis, int fd,
                                     const struct verbs_hello *hello, struct coll_conn **conn_p)
{
    struct verbs_ctx *ctx = lis->ctx;
    const struct coll_tp_env *env = ctx->env;
    struct verbs_conn *c;
    collResult_t res = verbs_conn_new(ctx, hello->rank, false, ctx->nslots, ctx->slot_bytes, &c);
    if (res != collSuccess) {
        close(fd);
        return res;
    }
    c->sock = fd;
    c->base.fds[0] = fd;
    c->remote_addr = hello->credit_addr;
    c->remote_rkey = hello->credit_rkey;
    int err = 0;
    const char *step = "";
    res = verbs_qp_connect(&ctx->dev, c->qp, c->psn, &hello->qp, &err, &step);
    if (res != collSuccess) {
        coll_tp_error(env, "verbs: %s for rank %d: %s", step, hello->rank, strerror(err));
        verbs_conn_free(c);
        return res;
    }
    struct verbs_reply reply = {.magic = VERBS_MAGIC,
                                .ring_addr = (uint64_t)(uintptr_t)c->ring,
                                .ring_rkey = c->ring_mr->rkey};
    verbs_qp_info(&ctx->dev, c->qp, c->psn, &reply.qp);
    res = coll_socket_send_all(fd, &reply, sizeof(reply), coll_tp_deadline(env), &err);
    if (res != collSuccess) {
        coll_tp_error(env, "verbs: answering rank %d failed: %s", hello->rank,
                       err ? strerror(err) : "connection closed by peer");
        verbs_conn_free(c);
        return res;
    }
    COLL_INFO(COLL_SUBSYS_VERBS, "verbs: accepted rank %d (qp %u -> %u)", hello->rank,
              hello->qp.qpn, c->qp->qp_num);
    *conn_p = &c->base;
    return collSuccess;
}

/* Answers every peer whose hello has come: its receive connection is set up
 * and kept for accept().  Runs from accept() and also while this rank waits on
 * other verbs work, because a sender's data is written only once its queue
 * pair is up: a rank busy elsewhere must not keep its peers' sends waiting for
 * the step where it receives from them (two ranks that each send before they
 * receive would wait on each other). */
static collResult_t verbs_listener_progress(struct verbs_listener *lis)
{
    const struct coll_tp_env *env = lis->ctx->env;
    struct verbs_hello h;
    int fd;
    /* coll_hellos_next returns only hellos that passed verbs_wire_hello. */
    while ((fd = coll_hellos_next(lis->lfd, &lis->hellos, &h)) >= 0) {
        if (lis->nready == env->nranks) {
            coll_hellos_dropped(&lis->hellos, "more set-ups than the communicator has ranks");
            close(fd);
            continue;
        }
        struct coll_conn *c = NULL;
        collResult_t res = verbs_accept_one(lis, fd, &h, &c);
        if (res != collSuccess) {
            verbs_listener_update_fds(lis);
            return res;
        }
        lis->ready[lis->nready++] = c;
    }
    verbs_listener_update_fds(lis);
    return collSuccess;
}

static collResult_t verbs_accept(struct coll_conn *lbase, struct coll_conn **conn_p)
{
    struct verbs_listener *lis = coll_container_of(lbase, struct verbs_listener, base);
    *conn_p = NULL;
    COLL_CHECK(verbs_listener_progress(lis));
    if (lis->nready > 0)
        *conn_p = lis->ready[--lis->nready];
    return collSuccess;
}

/* Set-ups that peers wait for, answered from a wait on other work; a failure
 * was described by coll_set_error and is left for accept() to meet again. */
static void verbs_answer_peers(struct verbs_conn *c)
{
    if (c->ctx->lis != NULL)
        (void)verbs_listener_progress(c->ctx->lis);
}

/* Marks c failed by a work completion, with a text for collGetLastError. */
static void verbs_wc_failed(struct verbs_conn *c, const struct ibv_wc *wc)
{
    if (c->failed != collSuccess)
        return;
    enum ibv_wc_status s = wc->status;
    bool local = s == IBV_WC_LOC_LEN_ERR || s == IBV_WC_LOC_QP_OP_ERR ||
                 s == IBV_WC_LOC_EEC_OP_ERR || s == IBV_WC_LOC_PROT_ERR ||
                 s == IBV_WC_MW_BIND_ERR || s == IBV_WC_LOC_ACCESS_ERR ||
                 s == IBV_WC_LOC_RDD_VIOL_ERR || s == IBV_WC_FATAL_ERR;
    c->failed = local ? collSystemError : collRemoteError;
    const char *op = (wc->opcode & IBV_WC_RECV) ? "receive" : "RDMA write";
    snprintf(c->err, sizeof(c->err), "work completion error: %s (status %d, %s, qp %u)",
             ibv_wc_status_str(s), (int)s, op, c->qp->qp_num);
    c->base.err_text = c->err;
}

/* Takes every completion there is.  Sender: credits; receiver: arrived slots.
 * Returns false when a completion failed. */
static bool verbs_poll(struct verbs_conn *c, bool *moved_p)
{
    struct ibv_wc wc[VERBS_POLL_BATCH];
    for (;;) {
        int n = ibv_poll_cq(c->cq, VERBS_POLL_BATCH, wc);
        if (n < 0) {
            snprintf(c->err, sizeof(c->err), "ibv_poll_cq failed (%d)", n);
            c->base.err_text = c->err;
            c->failed = collSystemError;
            return false;
        }
        uint32_t recvs = 0;
        for (int i = 0; i < n; i++) {
            if (wc[i].status != IBV_WC_SUCCESS) {
                verbs_wc_failed(c, &wc[i]);
                return false;
            }
            if (!(wc[i].opcode & IBV_WC_RECV)) {
                c->sq_out--;
                continue;
            }
            recvs++;
            uint32_t imm = ntohl(wc[i].imm_data);
            if (c->base.is_send) {
                /* The low 32 bits of the receiver's counter: never more than
                 * nslots ahead of what we know, so the difference is exact. */
                c->credit += (uint32_t)(imm - (uint32_t)c->credit);
            } else {
                if (imm > c->slot_bytes || c->arrived - c->next >= c->nslots) {
                    snprintf(c->err, sizeof(c->err), "rank sent a fragment of %u bytes or "
                             "overran the ring (slots hold %u)", imm, c->slot_bytes);
                    c->base.err_text = c->err;
                    c->failed = collRemoteError;
                    return false;
                }
                c->len[c->arrived % c->nslots] = imm;
                c->arrived++;
            }
            *moved_p = true;
        }
        if (recvs) {
            int err = verbs_post_recvs(c, recvs);
            if (err) {
                snprintf(c->err, sizeof(c->err), "ibv_post_recv: %s", strerror(err));
                c->base.err_text = c->err;
                c->failed = collSystemError;
                return false;
            }
        }
        if (n < VERBS_POLL_BATCH)
            return true;
    }
}

/* Posts one RDMA WRITE WITH IMMEDIATE of len bytes from local (lkey) to
 * remote.  Returns false (c failed) when the post is refused. */
static bool verbs_write(struct verbs_conn *c, void *local, uint32_t lkey, uint32_t len,
                        uint64_t remote, uint32_t imm)
{
    struct ibv_sge sge = {.addr = (uint64_t)(uintptr_t)local, .length = len, .lkey = lkey};
    struct ibv_send_wr wr = {
        .wr_id = 0,
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
        .send_flags = IBV_SEND_SIGNALED | (len <= c->max_inline ? IBV_SEND_INLINE : 0),
        .imm_data = htonl(imm),
        .wr.rdma = {.remote_addr = remote, .rkey = c->remote_rkey},
    }, *bad;
    int err = ibv_post_send(c->qp, &wr, &bad);
    if (err) {
        snprintf(c->err, sizeof(c->err), "ibv_post_send: %s", strerror(err));
        c->base.err_text = c->err;
        c->failed = collSystemError;
        return false;
    }
    c->sq_out++;
    return true;
}

/* Sender: reads the receiver's answer on the side channel; with it the queue
 * pair goes to RTS.  Returns false when the connection failed. */
static bool verbs_finish_connect(struct verbs_conn *c)
{
    while (c->reply_got < sizeof(c->reply)) {
        ssize_t r = recv(c->sock, (char *)&c->reply + c->reply_got,
                         sizeof(c->reply) - c->reply_got, MSG_DONTWAIT);
        if (r > 0) {
            c->reply_got += (size_t)r;
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return true;
        c->base.err_no = r == 0 ? 0 : errno; /* 0: "connection closed" */
        c->failed = collRemoteError;
        return false;
    }
    if (c->reply.magic != VERBS_MAGIC) {
        snprintf(c->err, sizeof(c->err), "the peer answered the verbs handshake with garbage");
        c->base.err_text = c->err;
        c->failed = collRemoteError;
        return false;
    }
    int err = 0;
    const char *step = "";
    if (verbs_qp_connect(&c->ctx->dev, c->qp, c->psn, &c->reply.qp, &err, &step) != collSuccess) {
        snprintf(c->err, sizeof(c->err), "%s: %s", step, strerror(err));
        c->base.err_text = c->err;
        c->failed = collSystemError;
        return false;
    }
    c->remote_addr = c->reply.ring_addr;
    c->remote_rkey = c->reply.ring_rkey;
    c->up = true;
    COLL_INFO(COLL_SUBSYS_VERBS, "verbs: connected to rank %d (qp %u -> %u)", c->base.peer,
              c->qp->qp_num, c->reply.qp.qpn);
    return true;
}

/* Sender: completions, the handshake's end, copies into free staging slots and
 * writes of what is staged.  Returns whether anything moved. */
static bool verbs_progress_send(struct verbs_conn *c)
{
    bool moved = false;
    if (!c->up && !verbs_finish_connect(c))
        return false;
    if (!verbs_poll(c, &moved))
        return false;
    for (uint64_t q = c->head; q < c->tail; q++) {
        struct verbs_req *r = &c->reqs[q % VERBS_REQ_CAP];
        while (r->done_bytes < r->size && c->filled - c->credit < c->nslots) {
            size_t k = r->size - r->done_bytes;
            if (k > c->slot_bytes)
                k = c->slot_bytes;
            uint32_t s = (uint32_t)(c->filled % c->nslots);
            memcpy(c->ring + (size_t)s * c->slot_bytes, r->buf + r->done_bytes, k);
            c->len[s] = (uint32_t)k;
            r->done_bytes += k;
            c->filled++;
            moved = true;
        }
        if (r->done_bytes < r->size)
            break;
        if (r->end == 0)
            r->end = c->filled;
    }
    while (c->up && c->posted < c->filled && c->sq_out < c->send_depth) {
        uint32_t s = (uint32_t)(c->posted % c->nslots);
        size_t off = (size_t)s * c->slot_bytes;
        if (!verbs_write(c, c->ring + off, c->ring_mr->lkey, c->len[s], c->remote_addr + off,
                         c->len[s]))
            return false;
        c->posted++;
        moved = true;
    }
    return moved;
}

/* Receiver: tells the sender how far it has released, when enough has been
 * (half the ring: one write per several slots) or always (before sleeping). */
static bool verbs_return_credit(struct verbs_conn *c, bool always)
{
    uint64_t owed = c->next - c->credit_sent;
    if (owed == 0 || (!always && owed < (c->nslots + 1) / 2) || c->sq_out >= c->send_depth)
        return true;
    *c->word = c->next;
    if (!verbs_write(c, c->word, c->word_mr->lkey, sizeof(*c->word), c->remote_addr,
                     (uint32_t)c->next))
        return false;
    c->credit_sent = c->next;
    return true;
}

/* Receiver: up to want bytes from the current slot, or NULL when it has not
 * arrived. */
static const char *verbs_fragment(struct verbs_conn *c, size_t want, size_t *len_p)
{
    if (c->arrived == c->next)
        return NULL;
    uint32_t s = (uint32_t)(c->next % c->nslots);
    size_t k = c->len[s] - c->slot_off;
    *len_p = k < want ? k : want;
    return c->ring + (size_t)s * c->slot_bytes + c->slot_off;
}

static void verbs_release(struct verbs_conn *c, size_t len)
{
    c->slot_off += len;
    if (c->slot_off < c->len[c->next % c->nslots])
        return;
    c->slot_off = 0;
    c->next++;
}

static bool verbs_progress_recv(struct verbs_conn *c)
{
    bool moved = false;
    if (!verbs_poll(c, &moved))
        return false;
    for (uint64_t q = c->head; q < c->tail; q++) {
        struct verbs_req *r = &c->reqs[q % VERBS_REQ_CAP];
        while (r->done_bytes < r->size) {
            size_t k;
            const char *src = verbs_fragment(c, r->size - r->done_bytes, &k);
            if (src == NULL)
                goto out;
            memcpy(r->buf + r->done_bytes, src, k);
            r->done_bytes += k;
            verbs_release(c, k);
            moved = true;
        }
    }
out:
    (void)verbs_return_credit(c, false);
    return moved;
}

/* Reads the side socket: nothing is expected on it once connected, so
 * anything but EAGAIN means the peer is gone. */
static void verbs_check_sock(struct verbs_conn *c)
{
    char b[16];
    ssize_t r = recv(c->sock, b, sizeof(b), MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
        c->peer_gone = true;
}

/* A request that cannot finish: the peer is gone, or shutdown() was called.
 * `gone` is what was known before the pass that moved nothing: a receiver
 * still takes what a dead sender wrote before it died. */
static collResult_t verbs_check_alive(struct verbs_conn *c, bool moved, bool gone)
{
    if (atomic_load(&c->shut)) {
        c->failed = collRemoteError;
        return c->failed;
    }
    if (!moved && (++c->idle_tests & 255) == 0 && (c->up || !c->base.is_send))
        verbs_check_sock(c);
    if (gone && !moved) {
        c->base.err_no = 0;
        c->failed = collRemoteError;
    }
    return c->failed;
}

static collResult_t verbs_post(struct coll_conn *base, void *buf, size_t n, struct coll_req **r_p)
{
    struct verbs_conn *c = coll_container_of(base, struct verbs_conn, base);
    if (c->failed != collSuccess)
        return c->failed;
    if (atomic_load(&c->shut))
        return collRemoteError;
    if (c->tail - c->head == VERBS_REQ_CAP) {
        COLL_WARN("verbs: more than %d requests in flight to rank %d", VERBS_REQ_CAP, base->peer);
        return collInternalError;
    }
    struct verbs_req *r = &c->reqs[c->tail % VERBS_REQ_CAP];
    *r = (struct verbs_req){.base.conn = base, .buf = buf, .size = n};
    c->tail++;
    if (base->is_send)
        (void)verbs_progress_send(c); /* start at once; a failure is sticky */
    *r_p = &r->base;
    return collSuccess;
}

static collResult_t verbs_isend(struct coll_conn *c, const void *buf, size_t n, void *mh,
                                struct coll_req **r_p)
{
    return verbs_post(c, (void *)(uintptr_t)buf, n, r_p);
}

static collResult_t verbs_irecv(struct coll_conn *c, void *buf, size_t n, void *mh,
                                struct coll_req **r_p)
{
    return verbs_post(c, buf, n, r_p);
}

static collResult_t verbs_test(struct coll_req *rbase, bool *done_p, size_t *n_p)
{
    struct verbs_req *r = coll_container_of(rbase, struct verbs_req, base);
    struct verbs_conn *c = coll_container_of(rbase->conn, struct verbs_conn, base);
    *done_p = false;
    if (c->failed != collSuccess)
        return c->failed;
    bool gone = c->peer_gone;
    if (c->base.is_send && !c->up)
        verbs_answer_peers(c); /* the peer may wait for this rank's answer in turn */
    bool moved = c->base.is_send ? verbs_progress_send(c) : verbs_progress_recv(c);
    if (c->failed != collSuccess)
        return c->failed;
    /* A send is complete once its last fragment is posted: staged alone, it
     * would need this rank to come back and post it. */
    if (r->done_bytes < r->size || (c->base.is_send && c->posted < r->end)) {
        if (!moved && (c->idle_tests & 255) == 255)
            verbs_answer_peers(c);
        return verbs_check_alive(c, moved, gone);
    }
    *done_p = true;
    if (n_p)
        *n_p = r->size;
    r->reported = true;
    while (c->head < c->tail && c->reqs[c->head % VERBS_REQ_CAP].reported)
        c->head++;
    return collSuccess;
}

/* Reads and acknowledges the channel's events, so its descriptor stops being
 * readable and the CQ can be destroyed without waiting on them. */
static void verbs_drain_events(struct verbs_conn *c)
{
    struct ibv_cq *cq;
    void *cq_ctx;
    while (ibv_get_cq_event(c->chan, &cq, &cq_ctx) == 0)
        ibv_ack_cq_events(cq, 1);
}

static bool verbs_wait_prepare(struct coll_req *rbase)
{
    struct verbs_conn *c = coll_container_of(rbase->conn, struct verbs_conn, base);
    if (c->failed != collSuccess || atomic_load(&c->shut))
        return true; /* test() reports it */
    verbs_answer_peers(c);
    if (c->base.is_send && !c->up)
        return false; /* the answer arrives on the socket, which the core polls */
    verbs_check_sock(c);
    if (c->peer_gone)
        return true;
    if (!c->base.is_send && !verbs_return_credit(c, true))
        return true;
    verbs_drain_events(c);
    if (ibv_req_notify_cq(c->cq, 0) != 0)
        return true; /* cannot sleep on it: keep polling */
    /* A completion that came between the last poll and the arming raises no
     * event: look once more. */
    bool moved = false;
    if (!verbs_poll(c, &moved) || moved)
        return true;
    if (c->base.is_send)
        return c->posted < c->filled && c->sq_out < c->send_depth;
    return false;
}

/* Zero-copy receive: the next fragment of a message of `want` more bytes, in
 * the registered slot the sender wrote, for the caller to read, then release. */
static collResult_t verbs_recv_peek(struct coll_conn *base, size_t want, const void **p,
                                    size_t *len_p)
{
    struct verbs_conn *c = coll_container_of(base, struct verbs_conn, base);
    *p = NULL;
    if (c->failed != collSuccess)
        return c->failed;
    if (c->head != c->tail) {
        COLL_WARN("verbs: zero-copy receive while receives are queued from rank %d", base->peer);
        return collInternalError;
    }
    bool gone = c->peer_gone;
    bool moved = false;
    *p = verbs_fragment(c, want, len_p);
    if (*p == NULL) {
        if (!verbs_poll(c, &moved))
            return c->failed;
        *p = verbs_fragment(c, want, len_p);
    }
    c->peeked = *p ? *len_p : 0;
    if (*p == NULL)
        return verbs_check_alive(c, moved, gone);
    return collSuccess;
}

static void verbs_recv_release(struct coll_conn *base)
{
    struct verbs_conn *c = coll_container_of(base, struct verbs_conn, base);
    verbs_release(c, c->peeked);
    c->peeked = 0;
    (void)verbs_return_credit(c, false); /* a failure is sticky: the next peek reports it */
}

static void verbs_shutdown(struct coll_conn *base)
{
    if (base->peer >= 0) {
        struct verbs_conn *c = coll_container_of(base, struct verbs_conn, base);
        atomic_store(&c->shut, true);
    }
    /* Wakes a poll() on the socket here, and the peer sees EOF. */
    if (base->nfds > 0)
        (void)shutdown(base->fds[0], SHUT_RDWR);
}

static collResult_t verbs_close(struct coll_conn *base)
{
    if (base == NULL)
        return collSuccess;
    if (base->peer < 0) {
        struct verbs_listener *lis = coll_container_of(base, struct verbs_listener, base);
        close(lis->lfd);
        coll_hellos_fini(&lis->hellos);
        for (int i = 0; i < lis->nready; i++)
            verbs_conn_free(coll_container_of(lis->ready[i], struct verbs_conn, base));
        free(lis->ready);
        lis->ctx->lis = NULL;
        free(lis);
        return collSuccess;
    }
    struct verbs_conn *c = coll_container_of(base, struct verbs_conn, base);
    verbs_drain_events(c);
    verbs_conn_free(c);
    return collSuccess;
}

const struct coll_transport coll_verbs_transport = {
    .abi = COLL_TRANSPORT_ABI,
    .name = "verbs",
    .caps = COLL_TP_CAP_HOST_MEM,
    /* Not fitted yet (only Soft-RoCE was at hand, where the CPU does the
     * device's work): a message costs a post and a completion, less than a
     * TCP system call; a wake-up is a completion event read from the kernel.
     * Kept at or below tcp's, so that building verbs changes no plan on hosts
     * without a device. */
    .plan_msg_ratio = 0.5,
    .plan_wake_ratio = 0.85,
    .cheap_poll = true,
    .init = verbs_init,
    .fini = verbs_fini,
    .can_connect = verbs_can_connect,
    .listen = verbs_listen,
    .connect = verbs_connect,
    .accept = verbs_accept,
    .isend = verbs_isend,
    .irecv = verbs_irecv,
    .test = verbs_test,
    .wait_prepare = verbs_wait_prepare,
    .recv_peek = verbs_recv_peek,
    .recv_release = verbs_recv_release,
    .shutdown = verbs_shutdown,
    .close = verbs_close,
};
