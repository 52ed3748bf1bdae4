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
 * Rendezvous: a message of at least COLL_IB_RDV_BYTES whose send buffer is
 * registered (a handle from verbs_reg, through the core's registration cache)
 * skips both copies when the receive buffer is registered too:
 *
 *   sender                                    receiver
 *   slot s <- {rkey, addr, len}, imm RTS ---> its receive has a handle that
 *   stage nothing after it yet                  covers len bytes: release slot
 *   credit > s without NAK: accepted;    <---   s, credit at once, and RDMA READ
 *     go on staging and announcing              addr..+len -> the user's buffer
 *                                               (chunks of the port's largest
 *                                               message)
 *   DONE count: the oldest accepted      <--- reads complete: a credit with
 *     sends are done                            DONE += 1, at once
 *                                             else (no handle, too short, or a
 *                                               zero-copy receive): release s,
 *   credit > s with NAK: stage the       <---   credit with NAK at once, and
 *   message through the slots as usual          take the slots that follow
 *
 * Such a send completes only once the receiver has read it, so it waits for
 * the receiver's receive (as large messages do in NCCL); a pair of ranks that
 * each finish a send before posting their receive deadlock with registered
 * buffers where the slots would have held the bytes.  Nothing is staged
 * behind an announcement until the receiver has accepted or declined it (a
 * declined message's bytes must come next); an accepted one is released at
 * once, so the next announcement waits in the ring while the reads run.  The
 * announcement and the DONE counts are checked like any peer bytes
 * (verbs_wire_rts; no more DONEs than accepted sends); what the receiver reads
 * is bounded by its own receive.  A registered send buffer is readable by the
 * peers for as long as the registration lives.
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
#include "common/slot_ring.h"
#include "log.h"
#include "param.h"
#include "transport.h"
#include "socket.h"
#include "verbs.h"

#define VERBS_REQ_CAP 128
#define VERBS_MAX_PENDING 64
#define VERBS_POLL_BATCH 16
#define VERBS_WR_READ 1               /* wr_id of a rendezvous read */
#define VERBS_READ_MAX (1u << 30)     /* bytes per read, within the port's largest message */

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
    size_t rdv_bytes;           /* rendezvous from this size; SIZE_MAX: never */
    /* Announced messages this rank read in place / declined, and sends of it
     * read by the peer / declined: logged at fini. */
    uint64_t rdv_read, rdv_declined, rdv_sent, rdv_refused;
    struct verbs_listener *lis; /* for set-ups answered while waiting on other work */
};

enum verbs_rdv { RDV_NONE, RDV_WANT, RDV_ANNOUNCED, RDV_ACCEPTED, RDV_READING };

struct verbs_req {
    struct coll_req base;
    char *buf;
    size_t size;
    size_t done_bytes;
    uint64_t end;      /* sender: the slot count once its last fragment is staged */
    bool reported;
    struct ibv_mr *mr; /* the buffer's registration, NULL: none */
    /* Rendezvous.  Sender: WANT until announced in slot rts_slot, then
     * ANNOUNCED until the receiver releases it: ACCEPTED (the rdv_seq-th) until
     * its DONE comes, or NONE again on a NAK (staged as usual).  Receiver:
     * READING while its reads are out. */
    enum verbs_rdv rdv;
    uint64_t rts_slot;
    uint64_t rdv_seq;
    struct verbs_rts rts;  /* receiver: what is being read */
    size_t read_posted;    /* receiver: bytes of it posted as reads */
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
    bool rts[VERBS_MAX_SLOTS];     /* the slot holds a verbs_rts */
    /* sender */
    bool up;                       /* the queue pair is in RTS */
    size_t reply_got;
    struct verbs_reply reply;
    uint64_t filled;               /* slots copied to staging */
    uint64_t posted;               /* slots written (posted) */
    uint64_t credit;               /* slots the receiver has released */
    bool nak;                      /* the receiver declined the announced message */
    uint64_t rdv_accepted;         /* announced sends the receiver took */
    uint64_t rdv_done;             /* ... and has finished reading (DONE counts) */
    /* receiver */
    uint64_t arrived;              /* slots whose immediate has come */
    struct coll_slot_ring rx;      /* the slots up to `arrived`; rx.next: slots released */
    uint64_t credit_sent;          /* rx.next as last written to the sender */
    bool nak_owed;                 /* the next credit carries VERBS_IMM_NAK */
    bool credit_now;               /* write the next credit at once (a rendezvous moved) */
    uint32_t done_owed;            /* finished reads not yet counted to the sender */
    uint32_t reads_out;            /* rendezvous reads posted and not completed */
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
    int64_t rdv = coll_param_int(COLL_PARAM_IB_RDV_BYTES);
    ctx->rdv_bytes = rdv < 0 ? SIZE_MAX : (size_t)rdv;
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
    char rdvs[48] = "never";
    if (ctx->rdv_bytes != SIZE_MAX)
        snprintf(rdvs, sizeof(rdvs), "from %zu bytes", ctx->rdv_bytes);
    COLL_INFO(COLL_SUBSYS_VERBS, "verbs: %s port %u (%s, mtu %d), gid index %s, %u slots of %u "
              "bytes, rendezvous %s", ctx->dev.name, ctx->dev.port,
              ctx->dev.eth ? "RoCE" : "InfiniBand", 128 << ctx->dev.mtu, gid, ctx->nslots,
              ctx->slot_bytes, rdvs);
    *ctx_p = ctx;
    return collSuccess;
}

static void verbs_fini(void *vctx)
{
    struct verbs_ctx *ctx = vctx;
    if (ctx == NULL)
        return;
    if (ctx->rdv_read + ctx->rdv_declined + ctx->rdv_sent + ctx->rdv_refused > 0)
        COLL_INFO(COLL_SUBSYS_VERBS, "verbs: rendezvous: received %llu in place, declined %llu; "
                  "sent %llu in place, %llu declined by the peer",
                  (unsigned long long)ctx->rdv_read, (unsigned long long)ctx->rdv_declined,
                  (unsigned long long)ctx->rdv_sent, (unsigned long long)ctx->rdv_refused);
    verbs_dev_close(&ctx->dev);
    free(ctx);
}

/* A user buffer for rendezvous: read by peers when sent, written locally by
 * reads when received. */
static collResult_t verbs_reg(void *vctx, void *buf, size_t len, enum coll_memtype mt,
                              void **mh_p)
{
    struct verbs_ctx *ctx = vctx;
    *mh_p = NULL;
    if (mt != COLL_MEM_HOST) {
        COLL_INFO(COLL_SUBSYS_VERBS, "verbs: cannot register device memory (no CUDA support)");
        return collInvalidUsage;
    }
    struct ibv_mr *mr = ibv_reg_mr(ctx->dev.pd, buf, len,
                                   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
    if (mr == NULL) {
        COLL_INFO(COLL_SUBSYS_VERBS, "verbs: ibv_reg_mr of %zu bytes at %p on %s failed: %s%s; "
                  "it goes through the slots", len, buf, ctx->dev.name, strerror(errno),
                  errno == ENOMEM || errno == EAGAIN ? " (ulimit -l?)" : "");
        return collSystemError;
    }
    COLL_INFO(COLL_SUBSYS_VERBS, "verbs: registered %zu bytes at %p (rkey %#x)", len, buf,
              mr->rkey);
    *mh_p = mr;
    return collSuccess;
}

static void verbs_dereg(void *vctx, void *mh)
{
    (void)vctx;
    (void)ibv_dereg_mr(mh);
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

/* Receiver: the slots whose immediates verbs_poll has seen. */
static uint64_t verbs_arrived(struct coll_slot_ring *r)
{
    return coll_container_of(r, struct verbs_conn, rx)->arrived;
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
    if (!is_send)
        coll_slot_ring_init(&c->rx, c->ring, nslots, slot_bytes, c->len, c->rts, verbs_arrived,
                            NULL); /* slots go back in batches: verbs_return_credit */
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
    struct verbs_hello hello = {.magic = VERBS_MAGIC, .rank = env->rank, .nslots = c->nslots,
                                .slot_bytes = c->slot_bytes,
                                .credit_addr = (uint64_t)(uintptr_t)c->word,
                                .credit_rkey = c->word_mr->rkey};
    memcpy(hello.secret, env->secret, COLL_SECRET_BYTES);
    verbs_qp_info(&ctx->dev, c->qp, c->psn, &hello.qp);
    /* The side channel listened before the handle was shared: a refusal means
     * the peer is gone. */
    struct coll_hello_dest to = {.sa = (struct sockaddr *)&h.addr, .len = h.addrlen,
                                 .what = "verbs", .reach = "reach the side channel of",
                                 .rank = peer, .host = coll_tp_peer(env, peer)->host};
    char err[256];
    collResult_t res = coll_hello_connect(&to, &hello, sizeof(hello), coll_tp_deadline(env),
                                          &c->sock, err, sizeof(err));
    if (res != collSuccess) {
        coll_tp_error(env, "%s", err);
        verbs_conn_free(c);
        return res;
    }
    c->base.fds[0] = c->sock;
    char a[COLL_ADDR_STRLEN];
    COLL_INFO(COLL_SUBSYS_VERBS, "verbs: connecting to rank %d via %s (qp %u)", peer,
              coll_socket_addr_str((struct sockaddr *)&h.addr, a, sizeof(a)), c->qp->qp_num);
    *conn_p = &c->base;
    return collSuccess;
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
            lis->base.nfds = coll_hellos_fds(lis->lfd, &lis->hellos, lis->base.fds,
                                             COLL_CONN_MAX_FDS);
            return res;
        }
        lis->ready[lis->nready++] = c;
    }
    lis->base.nfds = coll_hellos_fds(lis->lfd, &lis->hellos, lis->base.fds, COLL_CONN_MAX_FDS);
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
    /* The opcode of a failed completion is undefined; wr_id says what it was. */
    const char *op = wc->wr_id == VERBS_WR_READ       ? "RDMA read"
                     : (wc->opcode & IBV_WC_RECV) ? "receive"
                                                  : "RDMA write";
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
                if (wc[i].wr_id == VERBS_WR_READ) {
                    c->reads_out--;
                    *moved_p = true;
                }
                continue;
            }
            recvs++;
            uint32_t imm = ntohl(wc[i].imm_data);
            if (c->base.is_send) {
                /* The low 31 bits of the receiver's counter: never more than
                 * nslots ahead of what we know, so the difference is exact. */
                c->credit += (imm - (uint32_t)c->credit) & VERBS_IMM_COUNT;
                if (imm & VERBS_IMM_NAK)
                    c->nak = true;
                c->rdv_done += (imm >> VERBS_IMM_DONE_SHIFT) & VERBS_IMM_DONE_MAX;
            } else {
                uint32_t flen = imm & ~VERBS_IMM_RTS;
                bool rts = (imm & VERBS_IMM_RTS) != 0;
                if (flen > c->slot_bytes || c->arrived - c->rx.next >= c->nslots ||
                    (rts && flen != sizeof(struct verbs_rts))) {
                    snprintf(c->err, sizeof(c->err), "rank sent a fragment of %u bytes%s or "
                             "overran the ring (slots hold %u)", flen,
                             rts ? " as a rendezvous announcement" : "", c->slot_bytes);
                    c->base.err_text = c->err;
                    c->failed = collRemoteError;
                    return false;
                }
                c->len[c->arrived % c->nslots] = flen;
                c->rts[c->arrived % c->nslots] = rts;
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

/* Receiver: posts one RDMA READ of len bytes from the sender's remote (rkey)
 * into local (lkey).  Returns false (c failed) when the post is refused. */
static bool verbs_read(struct verbs_conn *c, void *local, uint32_t lkey, uint32_t len,
                       uint64_t remote, uint32_t rkey)
{
    struct ibv_sge sge = {.addr = (uint64_t)(uintptr_t)local, .length = len, .lkey = lkey};
    struct ibv_send_wr wr = {
        .wr_id = VERBS_WR_READ,
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = IBV_WR_RDMA_READ,
        .send_flags = IBV_SEND_SIGNALED,
        .wr.rdma = {.remote_addr = remote, .rkey = rkey},
    }, *bad;
    int err = ibv_post_send(c->qp, &wr, &bad);
    if (err) {
        snprintf(c->err, sizeof(c->err), "ibv_post_send (RDMA read): %s", strerror(err));
        c->base.err_text = c->err;
        c->failed = collSystemError;
        return false;
    }
    c->sq_out++;
    c->reads_out++;
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
        if (r->rdv == RDV_WANT) {
            if (c->filled - c->credit >= c->nslots)
                break;
            uint32_t s = (uint32_t)(c->filled % c->nslots);
            struct verbs_rts a = {.magic = VERBS_RTS_MAGIC, .rkey = r->mr->rkey,
                                  .addr = (uint64_t)(uintptr_t)r->buf, .len = r->size};
            memcpy(c->ring + (size_t)s * c->slot_bytes, &a, sizeof(a));
            c->len[s] = sizeof(a);
            c->rts[s] = true;
            r->rts_slot = c->filled++;
            r->rdv = RDV_ANNOUNCED;
            c->nak = false;
            moved = true;
        }
        if (r->rdv == RDV_ANNOUNCED) {
            if (c->credit <= r->rts_slot)
                break; /* nothing is staged behind an open announcement */
            moved = true;
            if (!c->nak) { /* the receiver reads it */
                r->rdv = RDV_ACCEPTED;
                r->rdv_seq = c->rdv_accepted++;
            } else {
                r->rdv = RDV_NONE;
                c->ctx->rdv_refused++;
            }
        }
        if (r->rdv == RDV_ACCEPTED) {
            if (c->rdv_done > r->rdv_seq) { /* read: done */
                r->rdv = RDV_NONE;
                r->done_bytes = r->size;
                r->end = r->rts_slot + 1;
                c->ctx->rdv_sent++;
                moved = true;
            }
            continue;
        }
        while (r->done_bytes < r->size && c->filled - c->credit < c->nslots) {
            size_t k = r->size - r->done_bytes;
            if (k > c->slot_bytes)
                k = c->slot_bytes;
            uint32_t s = (uint32_t)(c->filled % c->nslots);
            memcpy(c->ring + (size_t)s * c->slot_bytes, r->buf + r->done_bytes, k);
            c->len[s] = (uint32_t)k;
            c->rts[s] = false;
            r->done_bytes += k;
            c->filled++;
            moved = true;
        }
        if (r->done_bytes < r->size)
            break;
        if (r->end == 0)
            r->end = c->filled;
    }
    /* Every announcement the credits passed was resolved above (none sits
     * behind a request still staging): more DONEs than accepted sends are the
     * peer's error. */
    if (c->rdv_done > c->rdv_accepted) {
        snprintf(c->err, sizeof(c->err), "rank counted %llu rendezvous reads done of %llu "
                 "accepted", (unsigned long long)c->rdv_done,
                 (unsigned long long)c->rdv_accepted);
        c->base.err_text = c->err;
        c->failed = collRemoteError;
        return false;
    }
    while (c->up && c->posted < c->filled && c->sq_out < c->send_depth) {
        uint32_t s = (uint32_t)(c->posted % c->nslots);
        size_t off = (size_t)s * c->slot_bytes;
        if (!verbs_write(c, c->ring + off, c->ring_mr->lkey, c->len[s], c->remote_addr + off,
                         c->len[s] | (c->rts[s] ? VERBS_IMM_RTS : 0)))
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
    uint64_t owed = c->rx.next - c->credit_sent;
    always = always || c->credit_now;
    if ((owed == 0 && c->done_owed == 0) || (!always && owed < (c->nslots + 1) / 2) ||
        c->sq_out >= c->send_depth)
        return true;
    *c->word = c->rx.next;
    uint32_t done = c->done_owed < VERBS_IMM_DONE_MAX ? c->done_owed : VERBS_IMM_DONE_MAX;
    uint32_t imm = ((uint32_t)c->rx.next & VERBS_IMM_COUNT) | (done << VERBS_IMM_DONE_SHIFT) |
                   (c->nak_owed ? VERBS_IMM_NAK : 0);
    if (!verbs_write(c, c->word, c->word_mr->lkey, sizeof(*c->word), c->remote_addr, imm))
        return false;
    c->credit_sent = c->rx.next;
    c->done_owed -= done;
    c->nak_owed = false;
    c->credit_now = c->done_owed > 0;
    return true;
}

/* Receiver: a slot whose length the ring refused: verbs_poll let through none
 * longer than a slot, so an empty one (a sender fills none for an empty
 * message). */
static void verbs_bad_slot(struct verbs_conn *c, size_t len)
{
    snprintf(c->err, sizeof(c->err), "rank sent a fragment of %zu bytes (a slot holds 1 to %u)",
             len, c->slot_bytes);
    c->base.err_text = c->err;
    c->failed = collRemoteError;
}

/* Receiver: whether the next slot has arrived and holds an announcement; its
 * checked contents in *a.  Returns -1 (c failed) for a malformed one. */
static int verbs_next_rts(struct verbs_conn *c, struct verbs_rts *a)
{
    const char *p;
    size_t len;
    if (coll_slot_ring_look(&c->rx, 0, &p, &len) != COLL_SLOT_MARKED)
        return 0;
    const char *why = "";
    if (verbs_wire_rts(p, len, a, &why) != COLL_WIRE_OK) {
        snprintf(c->err, sizeof(c->err), "rank sent a bad rendezvous announcement: %s", why);
        c->base.err_text = c->err;
        c->failed = collRemoteError;
        return -1;
    }
    return 1;
}

/* Receiver: declines the announcement in the next slot: the sender streams the
 * message through the slots that follow, told at once. */
static void verbs_decline_rts(struct verbs_conn *c)
{
    c->ctx->rdv_declined++;
    coll_slot_ring_skip(&c->rx);
    c->nak_owed = true;
    c->credit_now = true;
}

/* Receiver: posts the reads of r's announced message that the send queue has
 * room for. */
static bool verbs_post_reads(struct verbs_conn *c, struct verbs_req *r)
{
    size_t chunk = c->ctx->dev.max_msg_sz != 0 && c->ctx->dev.max_msg_sz < VERBS_READ_MAX
                       ? c->ctx->dev.max_msg_sz
                       : VERBS_READ_MAX;
    while (r->read_posted < r->rts.len && c->sq_out + 1 < c->send_depth) {
        size_t k = (size_t)r->rts.len - r->read_posted;
        if (k > chunk)
            k = chunk;
        if (!verbs_read(c, r->buf + r->done_bytes + r->read_posted, r->mr->lkey, (uint32_t)k,
                        r->rts.addr + r->read_posted, r->rts.rkey))
            return false;
        r->read_posted += k;
    }
    return true;
}

static bool verbs_progress_recv(struct verbs_conn *c)
{
    bool moved = false;
    if (!verbs_poll(c, &moved))
        return false;
    for (uint64_t q = c->head; q < c->tail; q++) {
        struct verbs_req *r = &c->reqs[q % VERBS_REQ_CAP];
        while (r->done_bytes < r->size) {
            if (r->rdv == RDV_READING) {
                if (!verbs_post_reads(c, r))
                    return false;
                if (r->read_posted < r->rts.len || c->reads_out > 0)
                    goto out;
                /* Read: the sender is told at once (its slot went back when
                 * the reads began). */
                r->done_bytes += (size_t)r->rts.len;
                r->rdv = RDV_NONE;
                c->ctx->rdv_read++;
                c->done_owed++;
                c->credit_now = true;
                moved = true;
                continue;
            }
            struct verbs_rts a;
            int rts = verbs_next_rts(c, &a);
            if (rts < 0)
                return false;
            if (rts > 0) {
                /* Read in place when this receive is registered and holds the
                 * whole message; else the sender streams it. */
                if (r->mr != NULL && a.len <= r->size - r->done_bytes) {
                    r->rts = a;
                    r->read_posted = 0;
                    r->rdv = RDV_READING;
                    coll_slot_ring_skip(&c->rx); /* back at once: the next announcement */
                    c->credit_now = true;
                } else {
                    verbs_decline_rts(c);
                }
                moved = true;
                continue;
            }
            size_t before = r->done_bytes;
            enum coll_slot_look got =
                coll_slot_ring_copy(&c->rx, r->buf, r->size, &r->done_bytes);
            moved = moved || r->done_bytes != before;
            if (got == COLL_SLOT_BAD) {
                verbs_bad_slot(c, c->len[coll_slot_ring_index(&c->rx, c->rx.next)]);
                return false;
            }
            if (got == COLL_SLOT_NONE)
                goto out;
            /* DATA: this request is whole; MARKED: an announcement, above */
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

static collResult_t verbs_post(struct coll_conn *base, void *buf, size_t n, void *mh,
                              struct coll_req **r_p)
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
    /* A handle is used when it covers the buffer (the cache registers whole
     * regions), and for sends only from the rendezvous size. */
    struct ibv_mr *mr = mh;
    uintptr_t b = (uintptr_t)buf, m0 = mr ? (uintptr_t)mr->addr : 0;
    if (mr != NULL && b >= m0 && n <= mr->length && b - m0 <= mr->length - n &&
        (!base->is_send || n >= c->ctx->rdv_bytes)) {
        r->mr = mr;
        r->rdv = base->is_send ? RDV_WANT : RDV_NONE;
    }
    c->tail++;
    if (base->is_send)
        (void)verbs_progress_send(c); /* start at once; a failure is sticky */
    *r_p = &r->base;
    return collSuccess;
}

static collResult_t verbs_isend(struct coll_conn *c, const void *buf, size_t n, void *mh,
                                unsigned flags, struct coll_req **r_p)
{
    return verbs_post(c, (void *)(uintptr_t)buf, n, mh, r_p);
}

static collResult_t verbs_irecv(struct coll_conn *c, void *buf, size_t n, void *mh,
                                struct coll_req **r_p)
{
    return verbs_post(c, buf, n, mh, r_p);
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
    /* A lent receive has no registered buffer to read into: an announced
     * message is declined, and comes through the slots. */
    struct verbs_rts a;
    for (int pass = 0; pass < 2; pass++) {
        int rts;
        while ((rts = verbs_next_rts(c, &a)) > 0) {
            verbs_decline_rts(c);
            (void)verbs_return_credit(c, true); /* a failure is sticky */
            moved = true;
        }
        if (rts < 0 || c->failed != collSuccess)
            return c->failed;
        if (coll_slot_ring_peek(&c->rx, want, p, len_p) == COLL_SLOT_BAD) {
            verbs_bad_slot(c, *len_p);
            return c->failed;
        }
        if (*p != NULL || pass == 1)
            break;
        if (!verbs_poll(c, &moved))
            return c->failed;
    }
    if (*p == NULL)
        return verbs_check_alive(c, moved, gone);
    return collSuccess;
}

/* What has arrived and not been taken, copied out without taking it: the slot in
 * front, once the completion queue is read.  A rendezvous announcement in front is
 * a message of its own kind, shown as nothing (a receive will take it). */
static collResult_t verbs_recv_probe(struct coll_conn *base, void *dst, size_t want,
                                     size_t *got_p)
{
    struct verbs_conn *c = coll_container_of(base, struct verbs_conn, base);
    if (c->failed != collSuccess)
        return c->failed;
    if (c->head != c->tail)
        return collSuccess; /* a receive is queued: what arrives is its */
    bool gone = c->peer_gone;
    bool moved = false;
    if (!verbs_poll(c, &moved))
        return c->failed;
    const char *p;
    size_t len;
    enum coll_slot_look got = coll_slot_ring_look(&c->rx, want, &p, &len);
    if (got == COLL_SLOT_BAD) {
        verbs_bad_slot(c, len);
        return c->failed;
    }
    if (got == COLL_SLOT_DATA) {
        memcpy(dst, p, len);
        *got_p = len;
        return collSuccess;
    }
    return got == COLL_SLOT_MARKED ? collSuccess : verbs_check_alive(c, moved, gone);
}

static void verbs_recv_release(struct coll_conn *base)
{
    struct verbs_conn *c = coll_container_of(base, struct verbs_conn, base);
    coll_slot_ring_unpeek(&c->rx);
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
    .caps = COLL_TP_CAP_HOST_MEM | COLL_TP_CAP_NEEDS_REG,
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
    .reg = verbs_reg,
    .dereg = verbs_dereg,
    .isend = verbs_isend,
    .irecv = verbs_irecv,
    .test = verbs_test,
    .wait_prepare = verbs_wait_prepare,
    .recv_peek = verbs_recv_peek,
    .recv_probe = verbs_recv_probe,
    .recv_release = verbs_recv_release,
    .shutdown = verbs_shutdown,
    .close = verbs_close,
};
