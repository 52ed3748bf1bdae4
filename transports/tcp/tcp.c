/* TCP transport: any two ranks that can reach each other over IP.
 *
 * A connection is one direction between two ranks and uses nsocks sockets.  A
 * message of n bytes is cut into nsocks contiguous parts, part p on socket p,
 * when it is large enough to gain from it (both sides compute the same cut from
 * n, so no header is sent); small messages travel whole on socket 0.  Each
 * socket works through the connection's FIFO of requests on its own, so one slow
 * socket does not stall the others.  All sockets are non-blocking; test() moves
 * what the kernel takes without waiting, and the core polls the descriptors
 * when nothing moves.
 *
 * Connection handshake, on each socket: {magic, secret, source rank, socket
 * index, nsocks}.  The listener refuses a socket that does not show the secret.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "alloc.h"
#include "check.h"
#include "log.h"
#include "param.h"
#include "transport.h"
#include "socket.h"
#include "tcp_wire.h"

#define TCP_REQ_CAP 128          /* requests in flight per connection */
#define TCP_MIN_PART (64 * 1024) /* below nsocks x this, a message uses one socket */
#define TCP_MAX_PENDING 256
#define TCP_GATHER 8             /* requests' parts moved by one system call */

struct tcp_ctx {
    const struct coll_tp_env *env;
    int nsocks;
    int bufsize;
};

struct tcp_req {
    struct coll_req base;
    char *buf;
    size_t size;
    int parts_left;  /* sockets that have not finished their part */
    bool done;
    bool reported;   /* test() returned done: the slot may be reused */
};

struct tcp_conn {
    struct coll_conn base;
    struct tcp_ctx *ctx;
    int nsocks;
    uint64_t head, tail;             /* requests [head, tail) are in the FIFO */
    uint64_t pos[TCP_MAX_SOCKS];     /* request each socket works on */
    size_t off[TCP_MAX_SOCKS];       /* bytes of its part done */
    struct tcp_req reqs[TCP_REQ_CAP];
    int lowat[TCP_MAX_SOCKS];        /* SO_RCVLOWAT set on each socket */
    collResult_t failed;             /* sticky error */
};

struct tcp_listener {
    struct coll_conn base;
    struct tcp_ctx *ctx;
    int lfd;
    struct coll_hellos hellos;    /* accepted, hello incomplete */
    struct tcp_wire_ctx wire;     /* what tcp_wire_hello checks against */
    /* Sockets that passed the handshake, grouped per source rank until all
     * nsocks of that rank have arrived. */
    struct {
        int fds[TCP_MAX_SOCKS];
        int have;
        int nsocks;
    } *ready;
    int nranks;
};

static collResult_t tcp_init(const struct coll_tp_env *env, void **ctx_p)
{
    struct tcp_ctx *ctx;
    COLL_CHECK(coll_calloc(&ctx, 1));
    ctx->env = env;
    int64_t ns = coll_param_int(COLL_PARAM_NSOCKS_PERPEER);
    if (ns < 0 || ns > TCP_MAX_SOCKS) {
        COLL_WARN("COLL_NSOCKS_PERPEER=%lld is outside 0-%d; using 0 (automatic)",
                  (long long)ns, TCP_MAX_SOCKS);
        ns = 0;
    }
    ctx->nsocks = (int)ns;
    int64_t bs = coll_param_int(COLL_PARAM_SOCKET_BUFSIZE);
    ctx->bufsize = bs > 0 && bs < (1 << 30) ? (int)bs : 0;
    *ctx_p = ctx;
    return collSuccess;
}

static void tcp_fini(void *ctx)
{
    free(ctx);
}

static collResult_t tcp_can_connect(void *ctx, const struct coll_rank_info *peer,
                                    const void *handle, bool *ok_p)
{
    /* IP reaches everywhere the bootstrap did, given a tcp handle to go to. */
    struct tcp_handle h;
    const char *why;
    *ok_p = tcp_wire_handle(handle, COLL_TP_HANDLE_BYTES, &h, &why) == COLL_WIRE_OK;
    return collSuccess;
}

static void tcp_tune_socket(struct tcp_ctx *ctx, int fd)
{
    coll_socket_set_nodelay(fd);
    if (ctx->bufsize > 0) {
        (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &ctx->bufsize, sizeof(ctx->bufsize));
        (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &ctx->bufsize, sizeof(ctx->bufsize));
    }
}

static collResult_t tcp_listen(void *vctx, void *handle, struct coll_conn **lis_p)
{
    struct tcp_ctx *ctx = vctx;
    const struct coll_tp_env *env = ctx->env;
    struct tcp_listener *lis;
    struct tcp_handle h = {.magic = TCP_MAGIC};
    socklen_t len;
    char ifname[64];
    /* The data interface follows the bootstrap's choice: the one that reaches
     * the root, unless COLL_SOCKET_IFNAME says otherwise. */
    COLL_CHECK(coll_socket_pick_addr((const struct sockaddr *)&coll_tp_peer(env, env->rank)->boot_addr,
                                     &h.addr, &len, ifname, sizeof(ifname)));
    bool loopback = coll_socket_is_loopback((struct sockaddr *)&h.addr);
    if (ctx->nsocks == 0)
        ctx->nsocks = loopback ? 1 : 2;
    /* On loopback, buffers of 512 KiB keep what the kernel copies in cache between
     * the sender's copy and the receiver's: measured 1.2-1.3x the allreduce bus
     * bandwidth of the autotuned (up to 4 MiB) buffers with 4 and 8 ranks on 2
     * cores.  On a real link autotuning follows the bandwidth-delay product. */
    if (ctx->bufsize == 0 && loopback)
        ctx->bufsize = 512 * 1024;
    COLL_CHECK(coll_calloc(&lis, 1));
    collResult_t res = coll_calloc(&lis->ready, (size_t)env->nranks);
    if (res != collSuccess) {
        free(lis);
        return res;
    }
    lis->nranks = env->nranks;
    lis->ctx = ctx;
    lis->wire = (struct tcp_wire_ctx){.secret = env->secret, .nranks = env->nranks};
    res = coll_socket_listen(&h.addr, &len, &lis->lfd);
    if (res == collSuccess) {
        res = coll_hellos_init(&lis->hellos, lis->lfd, "tcp listener", TCP_MAX_PENDING,
                               sizeof(struct tcp_hello), tcp_wire_hello, &lis->wire);
        if (res != collSuccess)
            close(lis->lfd);
    }
    if (res != collSuccess) {
        free(lis->ready);
        free(lis);
        return res;
    }
    h.addrlen = len;
    h.nsocks = (uint32_t)ctx->nsocks;
    memcpy(handle, &h, sizeof(h));
    lis->base.tp = &coll_tcp_transport;
    lis->base.peer = -1;
    lis->base.nfds = 1;
    lis->base.fds[0] = lis->lfd;
    char a[COLL_ADDR_STRLEN];
    COLL_INFO(COLL_SUBSYS_TCP, "listening on %s via %s, %d socket(s) per peer",
              coll_socket_addr_str((struct sockaddr *)&h.addr, a, sizeof(a)), ifname,
              ctx->nsocks);
    *lis_p = &lis->base;
    return collSuccess;
}

static collResult_t tcp_conn_new(struct tcp_ctx *ctx, int peer, bool is_send, int nsocks,
                                 const int *fds, struct coll_conn **conn_p)
{
    struct tcp_conn *c;
    COLL_CHECK(coll_calloc(&c, 1));
    c->ctx = ctx;
    c->nsocks = nsocks;
    c->base.tp = &coll_tcp_transport;
    c->base.peer = peer;
    c->base.is_send = is_send;
    c->base.nfds = nsocks;
    for (int i = 0; i < nsocks; i++) {
        c->lowat[i] = 1;
        c->base.fds[i] = fds[i];
        tcp_tune_socket(ctx, fds[i]);
    }
    *conn_p = &c->base;
    return collSuccess;
}

static collResult_t tcp_connect(void *vctx, const void *handle, int peer,
                                struct coll_conn **conn_p)
{
    struct tcp_ctx *ctx = vctx;
    const struct coll_tp_env *env = ctx->env;
    struct tcp_handle h;
    const char *why = "";
    if (tcp_wire_handle(handle, COLL_TP_HANDLE_BYTES, &h, &why) != COLL_WIRE_OK) {
        coll_tp_error(env, "tcp: rank %d published no usable tcp address: %s", peer, why);
        return collInternalError;
    }
    int fds[TCP_MAX_SOCKS];
    int n = (int)h.nsocks; /* the receiver decides: it listens with its own count */
    collResult_t res = collSuccess;
    int i;
    char a[COLL_ADDR_STRLEN];
    /* The peer listened before its handle was shared: a refusal means it is
     * gone, so each socket fails at once rather than retry until the deadline. */
    struct coll_hello_dest to = {.sa = (struct sockaddr *)&h.addr, .len = h.addrlen,
                                 .what = "tcp", .reach = "connect to", .rank = peer,
                                 .host = coll_tp_peer(env, peer)->host};
    for (i = 0; i < n; i++) {
        struct tcp_hello hello = {.magic = TCP_MAGIC, .rank = env->rank, .sock_idx = i,
                                  .nsocks = n};
        memcpy(hello.secret, env->secret, COLL_SECRET_BYTES);
        char err[256];
        res = coll_hello_connect(&to, &hello, sizeof(hello), coll_tp_deadline(env), &fds[i], err,
                                 sizeof(err));
        if (res != collSuccess) {
            coll_tp_error(env, "%s", err);
            break;
        }
    }
    if (res != collSuccess) {
        while (i-- > 0)
            close(fds[i]);
        return res;
    }
    COLL_INFO(COLL_SUBSYS_TCP, "connected to rank %d at %s with %d socket(s)", peer,
              coll_socket_addr_str((struct sockaddr *)&h.addr, a, sizeof(a)), n);
    res = tcp_conn_new(ctx, peer, true, n, fds, conn_p);
    if (res != collSuccess)
        for (i = 0; i < n; i++)
            close(fds[i]);
    return res;
}

static collResult_t tcp_accept(struct coll_conn *lbase, struct coll_conn **conn_p)
{
    struct tcp_listener *lis = coll_container_of(lbase, struct tcp_listener, base);
    *conn_p = NULL;
    struct tcp_hello h;
    int pfd;
    /* coll_hellos_next returns only hellos that passed tcp_wire_hello. */
    while ((pfd = coll_hellos_next(lis->lfd, &lis->hellos, &h)) >= 0) {
        __typeof__(lis->ready[0]) *rd = &lis->ready[h.rank];
        if (rd->have == 0) {
            rd->nsocks = h.nsocks;
            for (int k = 0; k < TCP_MAX_SOCKS; k++)
                rd->fds[k] = -1;
        }
        if (h.nsocks != rd->nsocks || rd->fds[h.sock_idx] >= 0) {
            coll_hellos_dropped(&lis->hellos, "a handshake that names a socket count or index "
                                "inconsistent with its rank's earlier sockets");
            close(pfd);
            continue;
        }
        rd->fds[h.sock_idx] = pfd;
        if (++rd->have == rd->nsocks) {
            int nsocks = rd->nsocks;
            int fds[TCP_MAX_SOCKS];
            memcpy(fds, rd->fds, sizeof(fds));
            rd->have = 0;
            lis->base.nfds = coll_hellos_fds(lis->lfd, &lis->hellos, lis->base.fds,
                                             COLL_CONN_MAX_FDS);
            COLL_INFO(COLL_SUBSYS_TCP, "accepted rank %d with %d socket(s)", h.rank, nsocks);
            return tcp_conn_new(lis->ctx, h.rank, false, nsocks, fds, conn_p);
        }
    }
    lis->base.nfds = coll_hellos_fds(lis->lfd, &lis->hellos, lis->base.fds, COLL_CONN_MAX_FDS);
    return collSuccess;
}

/* The byte range of message size n that socket p carries. */
static inline void tcp_part(const struct tcp_conn *c, size_t n, int p, size_t *off_p,
                            size_t *len_p)
{
    int s = c->nsocks;
    if (s == 1 || n < (size_t)s * TCP_MIN_PART) {
        *off_p = 0;
        *len_p = p == 0 ? n : 0;
        return;
    }
    size_t base = n / (size_t)s, rem = n % (size_t)s;
    *off_p = base * (size_t)p + ((size_t)p < rem ? (size_t)p : rem);
    *len_p = base + ((size_t)p < rem ? 1 : 0);
}

/* Socket p moved k more bytes: its requests whose part is complete (and those
 * with nothing for it) are done with it. */
static void tcp_advance(struct tcp_conn *c, int p, size_t k)
{
    while (c->pos[p] < c->tail) {
        struct tcp_req *r = &c->reqs[c->pos[p] % TCP_REQ_CAP];
        size_t poff, plen;
        tcp_part(c, r->size, p, &poff, &plen);
        size_t left = plen - c->off[p];
        if (k < left) {
            c->off[p] += k;
            return;
        }
        k -= left;
        c->off[p] = 0;
        c->pos[p]++;
        if (--r->parts_left == 0)
            r->done = true;
    }
}

/* Moves bytes on socket p until the kernel pushes back, up to TCP_GATHER
 * requests' parts per system call: a message's header and data leave in one
 * sendmsg (one segment when small) and arrive in one recvmsg.  Reading the next
 * request's bytes at once is what two recv calls would do: each request takes
 * exactly its size.  Returns false on error. */
static bool tcp_progress_sock(struct tcp_conn *c, int p)
{
    int fd = c->base.fds[p];
    for (;;) {
        struct iovec iov[TCP_GATHER];
        int n = 0;
        size_t off = c->off[p];
        for (uint64_t q = c->pos[p]; q < c->tail && n < TCP_GATHER; q++, off = 0) {
            struct tcp_req *r = &c->reqs[q % TCP_REQ_CAP];
            size_t poff, plen;
            tcp_part(c, r->size, p, &poff, &plen);
            if (plen > off)
                iov[n++] = (struct iovec){.iov_base = r->buf + poff + off, .iov_len = plen - off};
        }
        if (n == 0) {
            tcp_advance(c, p, 0); /* parts of zero length */
            return true;
        }
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t k = c->base.is_send ? sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT)
                                    : recvmsg(fd, &m, MSG_DONTWAIT);
        if (k > 0) {
            tcp_advance(c, p, (size_t)k);
            continue;
        }
        if (k == 0) { /* only recv returns 0: the peer closed */
            c->base.err_no = 0;
            c->failed = collRemoteError;
            return false;
        }
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return true;
        if (errno == EINTR)
            continue;
        c->base.err_no = errno;
        c->failed = (errno == EPIPE || errno == ECONNRESET || errno == ESHUTDOWN)
                        ? collRemoteError
                        : collSystemError;
        return false;
    }
}

static collResult_t tcp_post(struct coll_conn *base, void *buf, size_t n, bool more,
                             struct coll_req **r_p)
{
    struct tcp_conn *c = coll_container_of(base, struct tcp_conn, base);
    if (c->failed != collSuccess)
        return c->failed;
    if (c->tail - c->head == TCP_REQ_CAP) {
        COLL_WARN("tcp: more than %d requests in flight to rank %d", TCP_REQ_CAP, base->peer);
        return collInternalError;
    }
    struct tcp_req *r = &c->reqs[c->tail % TCP_REQ_CAP];
    *r = (struct tcp_req){.base.conn = base, .buf = buf, .size = n, .parts_left = c->nsocks};
    c->tail++;
    /* Sockets with nothing to carry for this request finish their part now. */
    for (int p = 0; p < c->nsocks; p++) {
        if (c->pos[p] == c->tail - 1) {
            size_t o, l;
            tcp_part(c, n, p, &o, &l);
            if (l == 0) {
                c->pos[p]++;
                r->parts_left--;
            }
        }
    }
    if (r->parts_left == 0)
        r->done = true;
    /* Start a send at once, unless another follows (COLL_SEND_MORE): the bytes
     * leave a round of the caller's loop earlier, which is most of the latency
     * of a small message.  A failure is sticky and reported by test(). */
    if (base->is_send && !r->done && !more)
        for (int p = 0; p < c->nsocks && tcp_progress_sock(c, p); p++)
            ;
    *r_p = &r->base;
    return collSuccess;
}

static collResult_t tcp_isend(struct coll_conn *c, const void *buf, size_t n, void *mh,
                              unsigned flags, struct coll_req **r_p)
{
    return tcp_post(c, (void *)(uintptr_t)buf, n, (flags & COLL_SEND_MORE) != 0, r_p);
}

static collResult_t tcp_irecv(struct coll_conn *c, void *buf, size_t n, void *mh,
                              struct coll_req **r_p)
{
    return tcp_post(c, buf, n, false, r_p);
}

/* What has arrived and not been taken, copied out without taking it: the kernel's
 * bytes on socket 0, where a message of fewer than nsocks x TCP_MIN_PART bytes
 * travels whole and where every message starts. */
static collResult_t tcp_recv_probe(struct coll_conn *base, void *dst, size_t want,
                                   size_t *got_p)
{
    struct tcp_conn *c = coll_container_of(base, struct tcp_conn, base);
    if (c->failed != collSuccess)
        return c->failed;
    if (c->head != c->tail)
        return collSuccess; /* a receive is queued: what arrives is its */
    for (;;) {
        ssize_t k = recv(base->fds[0], dst, want, MSG_PEEK | MSG_DONTWAIT);
        if (k > 0) {
            *got_p = (size_t)k;
            return collSuccess;
        }
        if (k == 0) { /* the peer closed */
            base->err_no = 0;
            c->failed = collRemoteError;
            return c->failed;
        }
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return collSuccess;
        if (errno != EINTR) {
            base->err_no = errno;
            c->failed = errno == ECONNRESET ? collRemoteError : collSystemError;
            return c->failed;
        }
    }
}

static collResult_t tcp_test(struct coll_req *rbase, bool *done_p, size_t *n_p)
{
    struct tcp_req *r = coll_container_of(rbase, struct tcp_req, base);
    struct tcp_conn *c = coll_container_of(rbase->conn, struct tcp_conn, base);
    if (!r->done && c->failed == collSuccess) {
        for (int p = 0; p < c->nsocks; p++) {
            /* Sockets behind on earlier requests skip over parts of zero length
             * as they reach them, in tcp_progress_sock. */
            if (!tcp_progress_sock(c, p))
                break;
        }
    }
    if (!r->done) {
        *done_p = false;
        return c->failed;
    }
    *done_p = true;
    if (n_p)
        *n_p = r->size;
    r->reported = true;
    while (c->head < c->tail && c->reqs[c->head % TCP_REQ_CAP].reported)
        c->head++;
    return collSuccess;
}

/* The largest wake-up threshold: a reader blocked in poll() is woken once this
 * much of what it waits for has arrived, instead of at every segment.  With more
 * ranks than cores every wake-up is a context switch, so fewer and larger reads
 * leave more of the cores to copying. */
#define TCP_RCVLOWAT_MAX (256 * 1024)

static bool tcp_wait_prepare(struct coll_req *rbase)
{
    struct tcp_conn *c = coll_container_of(rbase->conn, struct tcp_conn, base);
    if (c->base.is_send)
        return false;
    for (int p = 0; p < c->nsocks; p++) {
        int want = 1;
        if (c->pos[p] < c->tail) {
            struct tcp_req *r = &c->reqs[c->pos[p] % TCP_REQ_CAP];
            size_t poff, plen;
            tcp_part(c, r->size, p, &poff, &plen);
            size_t left = plen - c->off[p];
            want = left > TCP_RCVLOWAT_MAX ? TCP_RCVLOWAT_MAX : (int)(left ? left : 1);
        }
        if (want != c->lowat[p]) {
            (void)setsockopt(c->base.fds[p], SOL_SOCKET, SO_RCVLOWAT, &want, sizeof(want));
            c->lowat[p] = want;
        }
    }
    return false;
}

static void tcp_shutdown(struct coll_conn *base)
{
    for (int i = 0; i < base->nfds; i++)
        (void)shutdown(base->fds[i], SHUT_RDWR);
}

static collResult_t tcp_close(struct coll_conn *base)
{
    if (base == NULL)
        return collSuccess;
    if (base->peer < 0) {
        struct tcp_listener *lis = coll_container_of(base, struct tcp_listener, base);
        close(lis->lfd);
        coll_hellos_fini(&lis->hellos);
        for (int k = 0; k < lis->nranks; k++)
            for (int s = 0; s < lis->ready[k].have && s < TCP_MAX_SOCKS; s++)
                if (lis->ready[k].fds[s] >= 0)
                    close(lis->ready[k].fds[s]);
        free(lis->ready);
        free(lis);
        return collSuccess;
    }
    struct tcp_conn *c = coll_container_of(base, struct tcp_conn, base);
    for (int i = 0; i < c->nsocks; i++)
        close(base->fds[i]);
    free(c);
    return collSuccess;
}

const struct coll_transport coll_tcp_transport = {
    .abi = COLL_TRANSPORT_ABI,
    .name = "tcp",
    .caps = COLL_TP_CAP_HOST_MEM,
    /* Fitted to the 4-byte allreduce of ring, tree and naive with 2, 4 and 8 ranks
     * on 2 cores (docs/algorithms.md): system calls, and wake-ups in the kernel. */
    .plan_msg_ratio = 0.75,
    .plan_wake_ratio = 0.85,
    .init = tcp_init,
    .fini = tcp_fini,
    .can_connect = tcp_can_connect,
    .listen = tcp_listen,
    .connect = tcp_connect,
    .accept = tcp_accept,
    .isend = tcp_isend,
    .irecv = tcp_irecv,
    .recv_probe = tcp_recv_probe,
    .test = tcp_test,
    .wait_prepare = tcp_wait_prepare,
    .shutdown = tcp_shutdown,
    .close = tcp_close,
};
