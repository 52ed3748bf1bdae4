/*
 * The transport interface itself (transports/transport.h), driven directly rather than
 * through collectives: what every entry of coll_transport_table() must do, so that
 * a new transport can be checked against the contract before any collective runs
 * on it.  One transport per run:
 *
 *   test_transport --transport NAME [--case CASE] [-v]
 *
 * Exits 77 (skipped) when NAME is not in the table (not built) or its init offers
 * nothing on this host (no device).  Each case runs in a process of its own,
 * killed (and failed) past its time limit, so a transport that hangs fails instead;
 * every wait inside has a limit too.  One line per case, then a summary.
 *
 * The ranks are real communicators whose transport context, listener and
 * published handle the test borrows (side_open: the one place that knows how a
 * context is obtained); nothing here calls a collective.  The waits are those of
 * the core (lib/engine/exec.c): test() until nothing completes, then wait_prepare() and
 * poll() on c->fds, POLLIN for receives and for conns with poll_in, POLLOUT for
 * other sends; a lent receive (recv_peek) waits with a stand-in request {conn}.
 *
 *   table     the entry: abi, name, every required slot; recv_peek and
 *             recv_release both or neither
 *   connect   accept gives NULL at once while nothing is complete; connect, then
 *             accept within 5 s: the right peer, directions, tp, 0-16 fds; then
 *             NULL again.  A handshake with another communicator's secret is
 *             dropped: accept never hands it out, the stranger's 16 MiB send fails
 *             instead of completing or hanging, and a good peer still gets in; a
 *             16 MiB send to a listener closed before it read the hello fails too
 *   sizes     0 B to 4 MiB (around every power of two from 64 B, the slot, part
 *             and ring sizes of the transports here, and odd sizes) both ways at
 *             once, receive posted before or after the send; every byte checked,
 *             the size test() reports, and 64 guard bytes past each receive
 *   inflight  16 messages in flight on one connection (sends first, then receives
 *             first), equal sizes with different bytes so that order shows; then
 *             3 ranks with all 6 directions at once, 4 messages each
 *   peek      where recv_peek is offered: NULL before anything is sent; messages
 *             taken in place fragment by fragment, every fragment starting at a
 *             multiple of 64, the same splits for the same size twice (a message
 *             of another size and a plain irecv between them), the bytes checked
 *   wake      a receive (and a lent receive) whose sender comes 300 ms late, and
 *             a 16 MiB send whose receiver comes 300 ms late, wait in poll() with
 *             a 10 s timeout: each must end by a wake-up on c->fds, never by the
 *             timeout
 *   shutdown  from another thread, 300 ms into a pending receive (a lent one too)
 *             and a pending 16 MiB send, each waiting in poll() with a 10 s
 *             timeout: the wait ends with an error within 2 s; later posts fail;
 *             the peer of the shut receive fails its 16 MiB send within 10 s
 *   close     a 32 MiB message half through (its first 64 KiB arrived): closing
 *             the sender fails the receive, closing the receiver fails the send,
 *             within 10 s, no success and no hang; idle connections close cleanly
 *   kill      the same with the other rank a forked process killed (SIGKILL)
 *             mid-message, both ways; a connect to the dead rank's handle fails
 *             within 10 s.  With reg, also a sender killed with a registered
 *             send announced (the survivor's registered receive then reads from
 *             the dead rank) and a receiver killed while it reads one
 *   handles   connect with a garbage handle (zeros, 0xff, random, the valid one
 *             with byte 0, the magic of every transport here, flipped, the valid
 *             one cut after 8 bytes) and with the other transports' handles: an
 *             error, no crash, within 10 s; can_connect on them says no (or
 *             fails) and yes on the peer's own handle
 *   more      sends posted with COLL_SEND_MORE: a 16 B send with it then 100 B
 *             without, received intact; a send with it and nothing after still
 *             completes (test() sends what was held).  Over TCP, with the
 *             receives posted first, the pair leaves as one data segment and so
 *             do 8 sends of 16 B (tcpi_data_segs_out of the socket)
 *   reg       COLL_TP_CAP_NEEDS_REG exactly when reg and dereg are both set.
 *             With reg (verbs): device memory without COLL_TP_CAP_CUDA_MEM is
 *             refused with a NULL handle; an empty range (outside the contract:
 *             the core never registers one) does not crash, and a handle it
 *             gives deregisters (rxe refuses NULL, 0 B and gives a buffer of
 *             0 B a handle).  Then, for every transport (NULL handles
 *             without reg): sizes 0 B to 4 MiB + 5 around verbs' rendezvous
 *             threshold (COLL_IB_RDV_BYTES) both ways at once, sent registered
 *             to a registered receive (the rendezvous read), to an unregistered
 *             one and to a lent one (both declined: the bytes stream through
 *             the slots), and unregistered to a registered one; buffers off
 *             alignment, a receive's registration taking in its guard (still
 *             untouched); 8 in flight each way, registered and not in turn;
 *             a send's handle deregistered and its buffer overwritten once it
 *             completed, the receive still getting what was sent; one buffer
 *             registered twice, both handles usable, the second after the first
 *             is released; shutdown() from another thread of a registered send
 *             announced and unreceived, of one being read (with reg), and of a
 *             registered receive: fails within 2 s, the peer's request ends
 *             within 10 s (failed, or done with every byte).  Sizes always
 *             match: a receive of another size than the send is the core's
 *             error, never given to a transport
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <linux/tcp.h> /* struct tcp_info with tcpi_data_segs_out */
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "internal.h"

#define GUARD 64
#define MAX_SIDES 3
#define LONG_TICK_MS 10000   /* waits that must end by a wake-up, not by poll's timeout */
#define CORE_TICK_MS 100     /* the core's poll slice */
#define LIMIT_MS 20000       /* any one drive (three times that for the threaded ones) */
#define BIG (16u << 20)      /* more than any transport here buffers (shm: 4 MiB ring) */
#define HALF_BIG (32u << 20) /* a message caught half through */
#define MAX_SPLITS 512

static const struct coll_transport *tp; /* the transport under test */
static int tp_index;                    /* its place in the table: tp_mask bit, tp_handle slot */
static bool verbose;

static double now_s(void)
{
    return (double)coll_now_ns() * 1e-9;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* --- contexts: how the test obtains one is kept to side_open / side_close --- */

/* One rank of the transport under test: its context and listener, and what its
 * peers know of it. */
struct side {
    int rank;
    collComm_t comm;
    void *ctx;
    struct coll_conn *lis;
    const uint8_t *handle;             /* COLL_TP_HANDLE_BYTES, what peers connect with */
    const struct coll_rank_info *info; /* this rank as peers see it, for can_connect */
};

/* Makes rank `rank` of an nranks communicator of id and borrows its context of
 * the transport under test.  init takes a struct coll_tp_env whose peers'
 * records come from the bootstrap, so a real communicator is made through the public API
 * (blocking until every rank joins), and its context, listener and published
 * handle are used.  False when the transport offered nothing on this host;
 * other failures end the process. */
static bool side_open(struct side *s, int nranks, int rank, const collUniqueId *id)
{
    *s = (struct side){.rank = rank};
    collResult_t res = collCommInitRank(&s->comm, nranks, *id, rank);
    if (res != collSuccess) {
        fprintf(stderr, "rank %d: collCommInitRank: %s (%s)\n", rank, collGetErrorString(res),
                collGetLastError(NULL));
        exit(1);
    }
    struct coll_comm *cc = s->comm;
    for (int i = 0; i < cc->ntps; i++) {
        if (cc->tps[i].tp == tp) {
            s->ctx = cc->tps[i].ctx;
            s->lis = cc->tps[i].listener;
        }
    }
    s->info = &cc->peers[rank].info;
    s->handle = s->info->tp_handle[tp_index];
    return s->ctx != NULL;
}

/* The handle peer published, as s knows it (the kill case's ranks are not all
 * in this process). */
static const uint8_t *side_peer_handle(const struct side *s, int peer)
{
    return s->comm->peers[peer].info.tp_handle[tp_index];
}

/* Transports read the deadline of the comm's operation in connect (through
 * coll_tp_env's deadline, the comm's): each connect gets a fresh one. */
static void side_arm(struct side *s, int ms)
{
    s->comm->deadline_ns = coll_now_ns() + (int64_t)ms * 1000000LL;
}

static void side_close(struct side *s)
{
    CHECK(collCommDestroy(s->comm) == collSuccess);
    s->comm = NULL;
}

struct open_arg {
    struct side *s;
    int nranks;
    collUniqueId id;
    bool ok;
};

static void *open_main(void *p)
{
    struct open_arg *a = p;
    a->ok = side_open(a->s, a->nranks, a->s->rank, &a->id);
    return NULL;
}

/* n ranks of a fresh communicator, as threads; exits 77 when the transport has no
 * context here (only the probe case can meet that). */
static void sides_open(int n, struct side *s)
{
    collUniqueId id;
    REQUIRE(collGetUniqueId(&id) == collSuccess);
    pthread_t th[MAX_SIDES];
    struct open_arg args[MAX_SIDES];
    for (int r = 0; r < n; r++) {
        s[r].rank = r;
        args[r] = (struct open_arg){.s = &s[r], .nranks = n, .id = id};
        REQUIRE(pthread_create(&th[r], NULL, open_main, &args[r]) == 0);
    }
    bool ok = true;
    for (int r = 0; r < n; r++) {
        pthread_join(th[r], NULL);
        ok &= args[r].ok;
    }
    if (!ok) {
        printf("SKIP: transport %s offers nothing on this host (COLL_DEBUG=INFO says why)\n",
               tp->name);
        exit(TEST_SKIP);
    }
}

static void sides_close(int n, struct side *s)
{
    for (int r = 0; r < n; r++)
        side_close(&s[r]);
}

/* --- requests and the core's way of waiting on them --- */

enum op_kind { OP_SEND, OP_RECV, OP_PEEK };

/* One message end: a posted send or receive, or a receive taken in place with
 * recv_peek (copied into buf fragment by fragment, the splits noted). */
struct op {
    enum op_kind kind;
    struct coll_conn *c;
    size_t n;
    uint8_t *buf;          /* send: the bytes; receive: n + GUARD */
    uint8_t *mem;          /* what buf lies in, freed by op_free */
    void *mh;              /* the handle posted with it: NULL, unregistered */
    void *mh_ctx;          /* when op_free deregisters mh: its context */
    unsigned flags;        /* a send's isend flags (COLL_SEND_MORE) */
    const uint8_t *want;   /* receive: what must arrive; NULL: not checked */
    struct coll_req *r;
    struct coll_req stand_in; /* OP_PEEK: what waits are given */
    collResult_t res;      /* of the post, or of the test or peek that ended it */
    bool done;
    size_t got;
    size_t off;            /* OP_PEEK: bytes taken */
    size_t splits[MAX_SPLITS];
    int nsplits;
    bool bad_split;        /* a fragment began off a multiple of 64, or was empty */
};

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Bytes that differ at every offset and for every seed, so that a fragment put in
 * the wrong place or a message from the wrong send shows. */
static void fill(uint8_t *p, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = mix64(seed * 0x100000001b3ull + i);
        size_t k = n - i < 8 ? n - i : 8;
        memcpy(p + i, &v, k);
    }
}

static uint8_t *xmalloc(size_t n)
{
    uint8_t *p = malloc(n ? n : 1);
    REQUIRE(p != NULL);
    return p;
}

static void op_send(struct op *o, struct coll_conn *c, size_t n, uint64_t seed)
{
    *o = (struct op){.kind = OP_SEND, .c = c, .n = n, .buf = xmalloc(n)};
    o->mem = o->buf;
    fill(o->buf, n, seed);
}

/* A receive of n bytes that must equal want (NULL: the bytes of seed). */
static void op_recv(struct op *o, enum op_kind kind, struct coll_conn *c, size_t n,
                    const uint8_t *want)
{
    *o = (struct op){.kind = kind, .c = c, .n = n, .buf = xmalloc(n + GUARD), .want = want};
    o->mem = o->buf;
    memset(o->buf, 0x5a, n);
    memset(o->buf + n, 0xa5, GUARD);
    o->stand_in.conn = c;
}

/* Moves o's buffer to `skew` bytes past an aligned address (its contents kept),
 * before it is registered or posted: user buffers need not be aligned. */
static void op_skew(struct op *o, size_t skew)
{
    size_t len = o->n + (o->kind == OP_SEND ? 0 : GUARD);
    uint8_t *m = xmalloc(len + skew);
    memcpy(m + skew, o->buf, len);
    free(o->mem);
    o->mem = m;
    o->buf = m + skew;
}

/* Registers [buf, buf+len) of o's buffer with ctx (len >= n: a receive's may
 * take in the guard, which must stay untouched all the same); o posts with the
 * handle and op_free deregisters it.  A transport without reg (shm, tcp) is
 * given NULL, as the core gives it. */
static void op_reg(struct op *o, void *ctx, size_t len)
{
    if (tp->reg == NULL)
        return;
    void *mh = NULL;
    collResult_t res = tp->reg(ctx, o->buf, len ? len : 1, COLL_MEM_HOST, &mh);
    CHECK_MSG(res == collSuccess && mh != NULL, "reg of %zu B of host memory: %s, handle %p",
              len, collGetErrorString(res), mh);
    o->mh = res == collSuccess ? mh : NULL;
    o->mh_ctx = o->mh ? ctx : NULL;
}

static void op_free(struct op *o)
{
    if (o->mh_ctx != NULL)
        tp->dereg(o->mh_ctx, o->mh);
    o->mh = o->mh_ctx = NULL;
    free(o->mem);
    o->buf = o->mem = NULL;
}

static void op_post(struct op *o)
{
    if (o->kind == OP_SEND)
        o->res = tp->isend(o->c, o->buf, o->n, o->mh, o->flags, &o->r);
    else if (o->kind == OP_RECV)
        o->res = tp->irecv(o->c, o->buf, o->n, o->mh, &o->r);
    if (o->res != collSuccess)
        o->r = NULL;
}

static bool op_pending(const struct op *o)
{
    return !o->done && o->res == collSuccess && (o->kind == OP_PEEK || o->r != NULL);
}

/* One look at o.  True when it ended (done or failed). */
static bool op_step(struct op *o)
{
    if (o->kind != OP_PEEK) {
        bool done = false;
        size_t got = 0;
        o->res = tp->test(o->r, &done, &got);
        if (o->res != collSuccess)
            return true;
        if (done) {
            o->done = true;
            o->got = got;
            o->r = NULL;
        }
        return done;
    }
    while (o->off < o->n) {
        const void *p = NULL;
        size_t len = 0;
        o->res = tp->recv_peek(o->c, o->n - o->off, &p, &len);
        if (o->res != collSuccess)
            return true;
        if (p == NULL)
            return false;
        if (len == 0 || len > o->n - o->off || o->off % 64 != 0)
            o->bad_split = true;
        if (len > o->n - o->off)
            len = o->n - o->off;
        if (o->nsplits < MAX_SPLITS)
            o->splits[o->nsplits] = len;
        o->nsplits++;
        memcpy(o->buf + o->off, p, len);
        tp->recv_release(o->c);
        o->off += len;
    }
    o->done = true;
    o->got = o->off;
    return true;
}

/* Drives ops the way the core waits (lib/engine/exec.c, coll_exec_idle): test() each;
 * after passes in which none ended, wait_prepare() each pending one and poll()
 * their descriptors for tick_ms.  Returns how many are still pending after
 * limit_ms; *timeouts_p (when given) counts the polls that ran out their tick. */
static int drive(struct op *ops, int nops, int limit_ms, int tick_ms, int *timeouts_p)
{
    int64_t end = coll_now_ns() + (int64_t)limit_ms * 1000000LL;
    int idle = 0;
    for (;;) {
        int pending = 0;
        bool ended = false;
        for (int i = 0; i < nops; i++) {
            if (!op_pending(&ops[i]))
                continue;
            if (op_step(&ops[i]))
                ended = true;
            else
                pending++;
        }
        if (pending == 0)
            return 0;
        int64_t now = coll_now_ns();
        if (now >= end)
            return pending;
        if (ended || ++idle < 64) {
            if (ended)
                idle = 0;
            continue;
        }
        struct pollfd pfds[64];
        nfds_t n = 0;
        bool again = false;
        for (int i = 0; i < nops && !again; i++) {
            struct op *o = &ops[i];
            if (!op_pending(o))
                continue;
            struct coll_req *r = o->kind == OP_PEEK ? &o->stand_in : o->r;
            if (tp->wait_prepare != NULL && tp->wait_prepare(r)) {
                again = true;
                break;
            }
            short ev = o->c->is_send && !o->c->poll_in ? POLLOUT : POLLIN;
            for (int k = 0; k < o->c->nfds && n < 64; k++)
                pfds[n++] = (struct pollfd){.fd = o->c->fds[k], .events = ev};
        }
        if (again)
            continue;
        int64_t left = (end - now) / 1000000 + 1;
        int ms = left < tick_ms ? (int)left : tick_ms;
        int pr = poll(pfds, n, ms);
        if (pr == 0 && ms == tick_ms && timeouts_p)
            (*timeouts_p)++;
    }
}

/* The checks of a receive that should have succeeded: its size, its bytes, the
 * guard after it, the splits of a lent one. */
static void op_check(const struct op *o, const char *what)
{
    CHECK_MSG(o->res == collSuccess && o->done, "%s: %zu B: %s, %s", what, o->n,
              collGetErrorString(o->res), o->done ? "done" : "not done");
    if (!o->done || o->kind == OP_SEND)
        return;
    CHECK_MSG(o->got == o->n, "%s: %zu B reported as %zu", what, o->n, o->got);
    if (o->want != NULL && memcmp(o->buf, o->want, o->n) != 0) {
        size_t i = 0;
        while (o->buf[i] == o->want[i])
            i++;
        CHECK_MSG(false, "%s: %zu B: byte %zu is 0x%02x, want 0x%02x", what, o->n, i, o->buf[i],
                  o->want[i]);
    }
    for (size_t i = 0; i < GUARD; i++) {
        if (o->buf[o->n + i] != 0xa5) {
            CHECK_MSG(false, "%s: %zu B: guard byte %zu after the buffer overwritten", what,
                      o->n, i);
            break;
        }
    }
    if (o->kind == OP_PEEK)
        CHECK_MSG(!o->bad_split, "%s: %zu B: a fragment started off a multiple of 64 or was "
                  "empty", what, o->n);
}

/* A driver thread: after delay_ms it posts its ops (unless posted already) and
 * drives them with tick_ms; records when it posted and when they ended. */
struct driver {
    struct op *ops;
    int nops;
    int delay_ms;
    int tick_ms;
    bool post;
    int pending;
    int timeouts;
    double t_post, t_end;
    pthread_t th;
};

static void *driver_main(void *p)
{
    struct driver *d = p;
    if (d->delay_ms)
        sleep_ms(d->delay_ms);
    d->t_post = now_s();
    for (int i = 0; d->post && i < d->nops; i++)
        op_post(&d->ops[i]);
    d->pending = drive(d->ops, d->nops, 3 * LIMIT_MS, d->tick_ms, &d->timeouts);
    d->t_end = now_s();
    return NULL;
}

static void driver_start(struct driver *d)
{
    REQUIRE(pthread_create(&d->th, NULL, driver_main, d) == 0);
}

/* --- connections --- */

/* Accepts on s's listener until a connection completes or ms pass, polling its
 * descriptors between looks as the core does.  *c_p NULL when none came. */
static collResult_t accept_within(struct side *s, int ms, struct coll_conn **c_p)
{
    int64_t end = coll_now_ns() + (int64_t)ms * 1000000LL;
    *c_p = NULL;
    for (;;) {
        collResult_t res = tp->accept(s->lis, c_p);
        if (res != collSuccess || *c_p != NULL || coll_now_ns() >= end)
            return res;
        struct pollfd pfds[COLL_CONN_MAX_FDS];
        for (int i = 0; i < s->lis->nfds; i++)
            pfds[i] = (struct pollfd){.fd = s->lis->fds[i], .events = POLLIN};
        (void)poll(pfds, (nfds_t)s->lis->nfds, 20);
    }
}

/* One direction between two ranks, set up and used once (a byte sent), so that
 * set-up that completes in test() (verbs) is behind it. */
struct link {
    struct side *from, *to;
    struct coll_conn *s, *r; /* from's send, to's receive connection */
};

static void link_open(struct link *l, struct side *from, struct side *to)
{
    *l = (struct link){.from = from, .to = to};
    side_arm(from, 10000);
    collResult_t res = tp->connect(from->ctx, to->handle, to->rank, &l->s);
    if (res != collSuccess) {
        fprintf(stderr, "connect %d -> %d: %s (%s)\n", from->rank, to->rank,
                collGetErrorString(res), collGetLastError(from->comm));
        exit(1);
    }
    res = accept_within(to, 5000, &l->r);
    if (res != collSuccess || l->r == NULL) {
        fprintf(stderr, "accept %d -> %d: %s (%s)\n", from->rank, to->rank,
                collGetErrorString(res), res ? collGetLastError(to->comm) : "nothing in 5 s");
        exit(1);
    }
    REQUIRE(l->r->peer == from->rank);
    struct op o[2];
    op_send(&o[0], l->s, 1, 1);
    op_recv(&o[1], OP_RECV, l->r, 1, o[0].buf);
    op_post(&o[1]);
    op_post(&o[0]);
    drive(o, 2, LIMIT_MS, CORE_TICK_MS, NULL);
    op_check(&o[1], "first byte");
    op_check(&o[0], "first byte (send)");
    op_free(&o[0]);
    op_free(&o[1]);
}

static void link_close(struct link *l)
{
    if (l->s)
        CHECK(tp->close(l->s) == collSuccess);
    if (l->r)
        CHECK(tp->close(l->r) == collSuccess);
    l->s = l->r = NULL;
}

/* --- cases --- */

static void case_table(void)
{
    CHECK(tp->abi == COLL_TRANSPORT_ABI);
    CHECK(tp->name != NULL && tp->name[0] != '\0');
    CHECK(tp->init && tp->fini && tp->can_connect && tp->listen && tp->connect && tp->accept &&
          tp->isend && tp->irecv && tp->test && tp->shutdown && tp->close);
    CHECK_MSG((tp->recv_peek == NULL) == (tp->recv_release == NULL),
              "recv_peek and recv_release come together");
    CHECK_MSG(tp->caps & COLL_TP_CAP_HOST_MEM, "this test moves host memory");
    CHECK(tp->plan_msg_ratio >= 0 && tp->plan_wake_ratio >= 0);
    struct side s[1];
    sides_open(1, s); /* exits 77 when there is no context here */
    CHECK(s[0].lis != NULL && s[0].lis->tp == tp && s[0].lis->peer == -1);
    CHECK(s[0].info->tp_mask & (1u << tp_index));
    sides_close(1, s);
}

/* Whether a send of BIG bytes on c fails within 10 s (rather than completing or
 * hanging) while accept keeps reading lis's hellos. */
static void stranger_send_fails(struct coll_conn *c, struct side *lis_side)
{
    struct op o;
    op_send(&o, c, BIG, 7);
    op_post(&o);
    double t0 = now_s();
    while (op_pending(&o) && now_s() - t0 < 10.0) {
        drive(&o, 1, 50, 10, NULL);
        struct coll_conn *x = NULL;
        CHECK(tp->accept(lis_side->lis, &x) == collSuccess);
        CHECK_MSG(x == NULL, "a connection with the wrong secret was accepted");
        if (x)
            tp->close(x);
    }
    CHECK_MSG(o.res != collSuccess, "the stranger's %u B send %s", BIG,
              o.done ? "completed" : "neither completed nor failed in 10 s");
    op_free(&o);
}

static void case_connect(void)
{
    struct side s[2], x[1];
    sides_open(2, s);
    /* Nothing is being set up: NULL, at once. */
    for (int i = 0; i < 5; i++) {
        struct coll_conn *c = (struct coll_conn *)&c; /* not NULL: accept must set it */
        double t0 = now_s();
        CHECK(tp->accept(s[0].lis, &c) == collSuccess);
        CHECK_MSG(c == NULL, "accept handed out a connection nobody made");
        CHECK_MSG(now_s() - t0 < 1.0, "accept took %.2f s with nothing to accept", now_s() - t0);
    }
    bool ok = false;
    CHECK(tp->can_connect(s[1].ctx, s[0].info, s[0].handle, &ok) == collSuccess);
    CHECK_MSG(ok, "can_connect says no to a peer on this host with a valid handle");

    side_arm(&s[1], 10000);
    struct coll_conn *snd = NULL, *rcv = NULL;
    CHECK_RES(tp->connect(s[1].ctx, s[0].handle, 0, &snd), collSuccess, s[1].comm);
    REQUIRE(snd != NULL);
    CHECK(snd->tp == tp && snd->peer == 0 && snd->is_send);
    CHECK(snd->nfds >= 0 && snd->nfds <= COLL_CONN_MAX_FDS);
    CHECK_RES(accept_within(&s[0], 5000, &rcv), collSuccess, s[0].comm);
    CHECK_MSG(rcv != NULL, "accept gave nothing in 5 s after a connect");
    if (rcv != NULL) {
        CHECK(rcv->tp == tp && rcv->peer == 1 && !rcv->is_send);
        CHECK(rcv->nfds >= 0 && rcv->nfds <= COLL_CONN_MAX_FDS);
        for (int i = 0; i < rcv->nfds; i++)
            CHECK(rcv->fds[i] >= 0);
        struct coll_conn *c = NULL;
        CHECK(tp->accept(s[0].lis, &c) == collSuccess && c == NULL);
        /* The connection works. */
        struct op o[2];
        op_send(&o[0], snd, 100, 2);
        op_recv(&o[1], OP_RECV, rcv, 100, o[0].buf);
        op_post(&o[0]);
        op_post(&o[1]);
        drive(o, 2, LIMIT_MS, CORE_TICK_MS, NULL);
        op_check(&o[1], "after connect");
        op_free(&o[0]);
        op_free(&o[1]);
    }

    /* Another communicator (another secret) at rank 0's listener: dropped. */
    sides_open(1, x);
    side_arm(&x[0], 10000);
    struct coll_conn *bad = NULL;
    collResult_t res = tp->connect(x[0].ctx, s[0].handle, 0, &bad);
    if (res == collSuccess && bad != NULL) {
        stranger_send_fails(bad, &s[0]);
        tp->close(bad);
    }
    /* Still open to its own. */
    struct link l;
    link_open(&l, &s[0], &s[1]);
    link_close(&l);
    if (snd)
        CHECK(tp->close(snd) == collSuccess);
    if (rcv)
        CHECK(tp->close(rcv) == collSuccess);
    side_close(&x[0]);
    sides_close(2, s);

    /* A listener gone before it read the hello (its communicator destroyed):
     * the connection's send fails within 10 s, as to a stranger. */
    struct side t[2];
    sides_open(2, t);
    side_arm(&t[1], 10000);
    struct coll_conn *orphan = NULL;
    res = tp->connect(t[1].ctx, t[0].handle, 0, &orphan);
    side_close(&t[0]);
    if (res == collSuccess && orphan != NULL) {
        struct op o;
        op_send(&o, orphan, BIG, 9);
        op_post(&o);
        double t0 = now_s();
        while (op_pending(&o) && now_s() - t0 < 10.0)
            drive(&o, 1, 50, 10, NULL);
        CHECK_MSG(o.res != collSuccess, "a %u B send to a listener closed before it read the "
                  "hello %s", BIG, o.done ? "completed" : "neither completed nor failed in 10 s");
        op_free(&o);
        CHECK(tp->close(orphan) == collSuccess);
    }
    side_close(&t[1]);
}

static const size_t sizes[] = {
    0, 1, 7, 63, 64, 65, 100, 511, 512, 513, 1000, 4095, 4096, 4097, 8191, 8192, 8193,
    65535, 65536, 65537, 100003, 131071, 131072, 131073, 262143, 262144, 262145, 262147,
    524288, 1048575, 1048576, 1048577, 2097152, 3145741, 4194303, 4194304,
};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static void case_sizes(void)
{
    struct side s[2];
    sides_open(2, s);
    struct link ab, ba;
    link_open(&ab, &s[0], &s[1]);
    link_open(&ba, &s[1], &s[0]);
    for (size_t i = 0; i < NSIZES; i++) {
        size_t n = sizes[i];
        struct op o[4];
        op_send(&o[0], ab.s, n, 100 + i);
        op_recv(&o[1], OP_RECV, ab.r, n, o[0].buf);
        op_send(&o[2], ba.s, n, 200 + i);
        op_recv(&o[3], OP_RECV, ba.r, n, o[2].buf);
        /* Receives first for even sizes, sends first for odd ones. */
        int order[2][4] = {{1, 3, 0, 2}, {0, 2, 1, 3}};
        for (int k = 0; k < 4; k++)
            op_post(&o[order[i % 2][k]]);
        int left = drive(o, 4, LIMIT_MS, CORE_TICK_MS, NULL);
        CHECK_MSG(left == 0, "%zu B both ways: %d of 4 requests pending after %d s", n, left,
                  LIMIT_MS / 1000);
        op_check(&o[1], "0 -> 1");
        op_check(&o[3], "1 -> 0");
        op_check(&o[0], "0 -> 1 (send)");
        op_check(&o[2], "1 -> 0 (send)");
        for (int k = 0; k < 4; k++)
            op_free(&o[k]);
        if (test_failures)
            break; /* one size's failure is enough to read */
    }
    link_close(&ab);
    link_close(&ba);
    sides_close(2, s);
}

static void case_inflight(void)
{
    struct side s[3];
    sides_open(3, s);
    /* 16 on one connection: four of 1000 B whose order shows only in the bytes. */
    static const size_t mix[16] = {1000, 1000, 1000, 1000, 0, 65537, 1, 262145,
                                   4097, 1048577, 64, 63, 131072, 3, 1000, 2097153};
    struct link l;
    link_open(&l, &s[1], &s[0]);
    for (int round = 0; round < 2; round++) {
        struct op o[32];
        for (int k = 0; k < 16; k++) {
            op_send(&o[k], l.s, mix[k], 1000 + 16 * round + k);
            op_recv(&o[16 + k], OP_RECV, l.r, mix[k], o[k].buf);
        }
        for (int k = 0; k < 32; k++)
            op_post(&o[round == 0 ? k : (k + 16) % 32]);
        int left = drive(o, 32, LIMIT_MS, CORE_TICK_MS, NULL);
        CHECK_MSG(left == 0, "16 in flight (%s first): %d pending", round ? "receives" : "sends",
                  left);
        for (int k = 0; k < 32; k++) {
            char what[64];
            snprintf(what, sizeof(what), "message %d of 16, %s first", k % 16,
                     round ? "receives" : "sends");
            op_check(&o[k], what);
        }
        for (int k = 0; k < 32; k++)
            op_free(&o[k]); /* the receives' checks read the sends' buffers */
    }
    link_close(&l);

    /* Every direction among 3 ranks at once, 4 in flight on each. */
    struct link ls[6];
    int nl = 0;
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++)
            if (a != b)
                link_open(&ls[nl++], &s[a], &s[b]);
    struct op o[6 * 8];
    int no = 0;
    for (int i = 0; i < 6; i++) {
        for (int k = 0; k < 4; k++) {
            size_t n = mix[(i * 4 + k) % 16] + (size_t)i;
            op_send(&o[no], ls[i].s, n, 5000 + (uint64_t)(i * 4 + k));
            op_recv(&o[no + 1], OP_RECV, ls[i].r, n, o[no].buf);
            no += 2;
        }
    }
    for (int k = 0; k < no; k++)
        op_post(&o[k % 2 ? k - 1 : k + 1]); /* each receive before its send */
    int left = drive(o, no, LIMIT_MS, CORE_TICK_MS, NULL);
    CHECK_MSG(left == 0, "6 directions x 4 in flight: %d pending", left);
    for (int k = 0; k < no; k++) {
        char what[64];
        snprintf(what, sizeof(what), "%d -> %d, message %d", ls[k / 8].from->rank,
                 ls[k / 8].to->rank, (k / 2) % 4);
        op_check(&o[k], what);
    }
    for (int k = 0; k < no; k++)
        op_free(&o[k]);
    for (int i = 0; i < nl; i++)
        link_close(&ls[i]);
    sides_close(3, s);
}

/* Data segments socket fd sent so far (TCP). */
static uint32_t data_segs_out(int fd)
{
    struct tcp_info ti;
    socklen_t len = sizeof(ti);
    memset(&ti, 0, sizeof(ti));
    REQUIRE(getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0);
    return ti.tcpi_data_segs_out;
}

/* k sends on l, each but the last with COLL_SEND_MORE, of the sizes in n[];
 * the receives posted first when recv_first.  Returns the data segments the
 * sends left as (TCP), or 0. */
static uint32_t more_run(struct link *l, const size_t *n, int k, bool recv_first, uint64_t seed)
{
    struct op o[16];
    for (int i = 0; i < k; i++) {
        op_send(&o[i], l->s, n[i], seed + (uint64_t)i);
        o[i].flags = i + 1 < k ? COLL_SEND_MORE : 0;
        op_recv(&o[k + i], OP_RECV, l->r, n[i], o[i].buf);
    }
    bool tcp = strcmp(tp->name, "tcp") == 0;
    if (recv_first)
        for (int i = 0; i < k; i++)
            op_post(&o[k + i]);
    uint32_t segs0 = tcp ? data_segs_out(l->s->fds[0]) : 0;
    for (int i = 0; i < k; i++)
        op_post(&o[i]);
    uint32_t segs = tcp ? data_segs_out(l->s->fds[0]) - segs0 : 0;
    if (!recv_first)
        for (int i = 0; i < k; i++)
            op_post(&o[k + i]);
    int left = drive(o, 2 * k, LIMIT_MS, CORE_TICK_MS, NULL);
    CHECK_MSG(left == 0, "%d sends with COLL_SEND_MORE: %d requests pending", k, left);
    for (int i = 0; i < 2 * k; i++) {
        char what[64];
        snprintf(what, sizeof(what), "%s %d of %d (COLL_SEND_MORE)", i < k ? "send" : "message",
                 i % k, k);
        op_check(&o[i], what);
    }
    for (int i = 0; i < 2 * k; i++)
        op_free(&o[i]);
    return segs;
}

static void case_more(void)
{
    struct side s[2];
    sides_open(2, s);
    struct link l;
    link_open(&l, &s[0], &s[1]);
    static const size_t pair[2] = {16, 100};
    static const size_t eight[8] = {16, 16, 16, 16, 16, 16, 16, 16};
    static const size_t alone[1] = {4000};
    (void)more_run(&l, pair, 2, false, 7000);
    /* Held with nothing after it: it leaves at test(). */
    struct op o[2];
    op_send(&o[0], l.s, alone[0], 7100);
    o[0].flags = COLL_SEND_MORE;
    op_recv(&o[1], OP_RECV, l.r, alone[0], o[0].buf);
    op_post(&o[0]);
    op_post(&o[1]);
    int left = drive(o, 2, LIMIT_MS, CORE_TICK_MS, NULL);
    CHECK_MSG(left == 0, "a send with COLL_SEND_MORE and none after: %d pending", left);
    op_check(&o[1], "held send");
    op_check(&o[0], "held send (send)");
    op_free(&o[0]);
    op_free(&o[1]);
    if (strcmp(tp->name, "tcp") == 0) {
        uint32_t segs = more_run(&l, pair, 2, true, 7200);
        CHECK_MSG(segs == 1, "header and data with COLL_SEND_MORE left as %u segments, want 1",
                  segs);
        segs = more_run(&l, eight, 8, true, 7300);
        CHECK_MSG(segs == 1, "8 sends of 16 B with COLL_SEND_MORE left as %u segments, want 1",
                  segs);
    }
    link_close(&l);
    sides_close(2, s);
}

/* Sends n bytes on l and takes them in place at the other end: o[0] the send,
 * o[1] the lent receive, left for the caller's checks. */
static void peek_one(struct link *l, struct op o[2], size_t n, uint64_t seed)
{
    op_send(&o[0], l->s, n, seed);
    op_recv(&o[1], OP_PEEK, l->r, n, o[0].buf);
    op_post(&o[0]);
    int left = drive(o, 2, LIMIT_MS, CORE_TICK_MS, NULL);
    CHECK_MSG(left == 0, "%zu B taken in place: %d pending", n, left);
}

static void case_peek(void)
{
    if (tp->recv_peek == NULL) {
        printf("  (%s offers no recv_peek: nothing to check)\n", tp->name);
        return;
    }
    struct side s[2];
    sides_open(2, s);
    struct link l;
    link_open(&l, &s[1], &s[0]);
    const void *p = (const void *)&p; /* not NULL: recv_peek must set it */
    size_t len = 0;
    CHECK(tp->recv_peek(l.r, 100, &p, &len) == collSuccess);
    CHECK_MSG(p == NULL, "recv_peek lent bytes before anything was sent");
    static const size_t psizes[] = {1, 63, 64, 65, 4097, 65537, 262145, 1048577, 4194304};
    for (size_t i = 0; i < sizeof(psizes) / sizeof(psizes[0]); i++) {
        size_t n = psizes[i];
        struct op first[2], mid[2], second[2];
        peek_one(&l, first, n, 300 + i);
        /* A message of another size between, taken with irecv. */
        op_send(&mid[0], l.s, 100 + i, 400 + i);
        op_recv(&mid[1], OP_RECV, l.r, 100 + i, mid[0].buf);
        op_post(&mid[0]);
        op_post(&mid[1]);
        drive(mid, 2, LIMIT_MS, CORE_TICK_MS, NULL);
        op_check(&mid[1], "irecv between lent receives");
        peek_one(&l, second, n, 500 + i);
        op_check(&first[1], "in place, first");
        op_check(&second[1], "in place, second");
        const struct op *a = &first[1], *b = &second[1];
        bool same = a->nsplits == b->nsplits;
        for (int k = 0; same && k < a->nsplits && k < MAX_SPLITS; k++)
            same = a->splits[k] == b->splits[k];
        CHECK_MSG(same, "%zu B split differently: %d fragments (the first %zu B), then %d (the "
                  "first %zu B)", n, a->nsplits, a->splits[0], b->nsplits, b->splits[0]);
        if (verbose)
            printf("  %zu B in place: %d fragment(s), the first %zu B\n", n, a->nsplits,
                   a->splits[0]);
        for (int k = 0; k < 2; k++) {
            op_free(&first[k]);
            op_free(&mid[k]);
            op_free(&second[k]);
        }
    }
    link_close(&l);
    sides_close(2, s);
}

/* A wait that must end by a wake-up: the ops of `waiter` wait in poll() with the
 * long tick while `late` starts delay_ms later. */
static void wake_check(struct op *waiter, struct op *late, const char *what)
{
    struct driver d = {.ops = late, .nops = 1, .delay_ms = 300, .tick_ms = CORE_TICK_MS,
                       .post = true};
    op_post(waiter);
    driver_start(&d);
    int timeouts = 0;
    /* Slow is fine (tiny slots under emulation take seconds); sleeping through a
     * wake-up is not: no poll may run out its tick. */
    int left = drive(waiter, 1, 3 * LIMIT_MS, LONG_TICK_MS, &timeouts);
    double t_end = now_s();
    pthread_join(d.th, NULL);
    CHECK_MSG(left == 0 && timeouts == 0, "%s: %s after %d poll timeout(s) of %d s", what,
              left ? "still pending" : "done", timeouts, LONG_TICK_MS / 1000);
    if (verbose)
        printf("  %s: done %.3f s after the other side started\n", what, t_end - d.t_post);
}

static void case_wake(void)
{
    struct side s[2];
    sides_open(2, s);
    struct link l;
    link_open(&l, &s[1], &s[0]);
    struct op o[2];
    /* A receive whose sender is late. */
    op_send(&o[0], l.s, 1 << 20, 11);
    op_recv(&o[1], OP_RECV, l.r, 1 << 20, o[0].buf);
    wake_check(&o[1], &o[0], "1 MiB receive, sender 300 ms late");
    op_check(&o[1], "1 MiB receive, sender late");
    op_free(&o[0]);
    op_free(&o[1]);
    if (tp->recv_peek) {
        op_send(&o[0], l.s, 1 << 20, 12);
        op_recv(&o[1], OP_PEEK, l.r, 1 << 20, o[0].buf);
        wake_check(&o[1], &o[0], "1 MiB lent receive, sender 300 ms late");
        op_check(&o[1], "1 MiB lent receive, sender late");
        op_free(&o[0]);
        op_free(&o[1]);
    }
    /* A send that fills everything the transport buffers, receiver late. */
    op_send(&o[0], l.s, BIG, 13);
    op_recv(&o[1], OP_RECV, l.r, BIG, o[0].buf);
    wake_check(&o[0], &o[1], "16 MiB send, receiver 300 ms late");
    op_check(&o[1], "16 MiB, receiver late");
    op_free(&o[0]);
    op_free(&o[1]);
    link_close(&l);
    sides_close(2, s);
}

/* Shuts c down from this thread 300 ms into the wait of waiter (posted here,
 * driven in another thread with the long tick): it must fail within 2 s. */
static void shutdown_check(struct op *waiter, struct coll_conn *c, const char *what)
{
    if (!op_pending(waiter) && !waiter->done)
        op_post(waiter); /* unless the caller has posted it */
    CHECK_MSG(waiter->res == collSuccess, "%s: the post failed", what);
    struct driver d = {.ops = waiter, .nops = 1, .tick_ms = LONG_TICK_MS};
    driver_start(&d);
    sleep_ms(300);
    double t0 = now_s();
    tp->shutdown(c);
    pthread_join(d.th, NULL);
    CHECK_MSG(waiter->res != collSuccess, "%s: shutdown from another thread, and it %s", what,
              waiter->done ? "completed" : "is still pending");
    CHECK_MSG(d.t_end - t0 < 2.0 && d.timeouts == 0,
              "%s: failed %.1f s after the shutdown, %d poll timeout(s)", what, d.t_end - t0,
              d.timeouts);
    if (verbose)
        printf("  %s: failed %.3f s after the shutdown\n", what, d.t_end - t0);
}

/* A post on a shut connection fails, at the post or in its first test. */
static void post_after_shutdown(struct coll_conn *c, bool is_send)
{
    struct op o;
    if (is_send)
        op_send(&o, c, 1000, 21);
    else
        op_recv(&o, OP_RECV, c, 1000, NULL);
    op_post(&o);
    if (o.res == collSuccess)
        drive(&o, 1, 2000, CORE_TICK_MS, NULL);
    CHECK_MSG(o.res != collSuccess, "a %s posted after shutdown %s",
              is_send ? "send" : "receive", o.done ? "completed" : "is pending after 2 s");
    op_free(&o);
}

static void case_shutdown(void)
{
    struct side s[2];
    sides_open(2, s);
    struct link l10, l01;
    link_open(&l10, &s[1], &s[0]);
    link_open(&l01, &s[0], &s[1]);
    struct op o;
    op_recv(&o, OP_RECV, l10.r, 1000, NULL);
    shutdown_check(&o, l10.r, "pending receive");
    op_free(&o);
    post_after_shutdown(l10.r, false);
    /* The peer of a shut connection hears of it. */
    op_send(&o, l10.s, BIG, 22);
    op_post(&o);
    int left = drive(&o, 1, 10000, CORE_TICK_MS, NULL);
    CHECK_MSG(o.res != collSuccess, "a %u B send to a shut receive connection %s", BIG,
              left ? "is pending after 10 s" : "completed");
    op_free(&o);

    op_send(&o, l01.s, BIG, 23);
    shutdown_check(&o, l01.s, "pending 16 MiB send");
    op_free(&o);
    post_after_shutdown(l01.s, true);

    if (tp->recv_peek) {
        struct link l;
        link_open(&l, &s[1], &s[0]);
        op_recv(&o, OP_PEEK, l.r, 1000, NULL);
        shutdown_check(&o, l.r, "pending lent receive");
        op_free(&o);
        link_close(&l);
    }
    link_close(&l10);
    link_close(&l01);
    sides_close(2, s);
}

/* One look at each pending op, no waiting: a transfer can be stopped part way. */
static void step(struct op *ops, int nops)
{
    for (int i = 0; i < nops; i++)
        if (op_pending(&ops[i]))
            (void)op_step(&ops[i]);
}

/* Whether the first 64 KiB of receive o have come: its bytes equal want's. */
static bool head_arrived(const struct op *o, const uint8_t *want)
{
    return memcmp(o->buf, want, 65536) == 0;
}

/* Steps a HALF_BIG transfer until the receive's first 64 KiB are in, at most
 * 10 s.  False when the message could not be caught part way. */
static bool catch_half_through(struct op o[2])
{
    double t0 = now_s();
    while (now_s() - t0 < 10.0 && !head_arrived(&o[1], o[0].buf) && op_pending(&o[1])) {
        step(o, 2);
        sleep_ms(1);
    }
    bool caught = head_arrived(&o[1], o[0].buf) && op_pending(&o[0]) && op_pending(&o[1]);
    CHECK_MSG(caught, "could not catch a %u B message half through (%s, %s)", HALF_BIG,
              op_pending(&o[0]) ? "send pending" : "send ended",
              op_pending(&o[1]) ? "receive pending" : "receive ended");
    return caught;
}

/* The survivor's op fails within 10 s: not done, no hang. */
static void survivor_fails(struct op *o, const char *what)
{
    double t0 = now_s();
    int left = drive(o, 1, 10000, CORE_TICK_MS, NULL);
    CHECK_MSG(o->res != collSuccess, "%s: the %s %s", what,
              o->kind == OP_SEND ? "send" : "receive",
              left ? "is still pending after 10 s" : "completed");
    if (verbose)
        printf("  %s: %s after %.3f s (%s)\n", what, collGetErrorString(o->res), now_s() - t0,
               o->c->err_text  ? o->c->err_text
               : o->c->err_no ? strerror(o->c->err_no)
                              : "closed by the peer");
}

static void case_close(void)
{
    struct side s[2];
    sides_open(2, s);
    for (int which = 0; which < 2; which++) {
        struct link l;
        link_open(&l, &s[1], &s[0]);
        struct op o[2];
        op_send(&o[0], l.s, HALF_BIG, 31 + which);
        op_recv(&o[1], OP_RECV, l.r, HALF_BIG, NULL);
        op_post(&o[1]);
        op_post(&o[0]);
        if (catch_half_through(o)) {
            /* Close one end with its request pending; the other must fail. */
            struct coll_conn **gone = which == 0 ? &l.s : &l.r;
            CHECK(tp->close(*gone) == collSuccess);
            *gone = NULL;
            survivor_fails(&o[which == 0 ? 1 : 0],
                           which == 0 ? "sender closed mid-message" : "receiver closed mid-message");
        }
        link_close(&l);
        op_free(&o[0]);
        op_free(&o[1]);
    }
    sides_close(2, s);
}

/* Reads one byte from fd within ms; 0 when none came. */
static char read_byte(int fd, int ms)
{
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    char b = 0;
    if (poll(&pf, 1, ms) == 1 && read(fd, &b, 1) == 1)
        return b;
    return 0;
}

/* Drives o for ms and says whether it is still pending: stuck, with what the
 * transport holds of it filled (nobody takes the rest). */
static bool stuck_after(struct op *o, int ms)
{
    drive(o, 1, ms, CORE_TICK_MS, NULL);
    return op_pending(o);
}

/* The rank in a forked process: rank 1 of id, told by the parent on in, telling
 * it on out.  dir 0: it connects to rank 0 and, once rank 0 says it accepted,
 * sends HALF_BIG bytes nobody receives yet, says 'r' when its send is stuck
 * part way, and drives it until killed.  dir 1: it accepts rank 0's connection,
 * says 'a', and takes nothing until killed.  Only with reg: dir 2 is dir 0 with
 * the send registered (announced, and stuck until a receive reads it); dir 3
 * is dir 1 which, told 'p' (rank 0 posted a registered send), posts a
 * registered receive, tests it once (the reads begin; they are counted done
 * only at its next test, so rank 0's send stays pending), says 'r' and
 * waits to be killed. */
static void kill_child(const collUniqueId *id, int dir, int in, int out)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    struct side me;
    if (!side_open(&me, 2, 1, id))
        _exit(TEST_SKIP);
    struct coll_conn *c = NULL;
    if (dir % 2 == 0) {
        side_arm(&me, 10000);
        if (tp->connect(me.ctx, side_peer_handle(&me, 0), 0, &c) !=
                collSuccess ||
            read_byte(in, 10000) != 'a')
            _exit(1);
        struct op o;
        op_send(&o, c, HALF_BIG, 41);
        if (dir == 2)
            op_reg(&o, me.ctx, HALF_BIG);
        op_post(&o);
        if ((dir == 2 && o.mh == NULL) || !stuck_after(&o, 500) || write(out, "r", 1) != 1)
            _exit(1);
        drive(&o, 1, 30000, CORE_TICK_MS, NULL);
        _exit(2); /* it should have been killed first */
    }
    if (accept_within(&me, 10000, &c) != collSuccess || c == NULL || write(out, "a", 1) != 1)
        _exit(1);
    if (dir == 3) {
        struct op o;
        op_recv(&o, OP_RECV, c, HALF_BIG, NULL);
        op_reg(&o, me.ctx, HALF_BIG);
        if (o.mh == NULL || read_byte(in, 10000) != 'p')
            _exit(1);
        sleep_ms(100); /* the announcement arrives */
        op_post(&o);
        if (o.res != collSuccess || op_step(&o) || write(out, "r", 1) != 1)
            _exit(1);
    }
    sleep(30);
    _exit(2);
}

/* A peer process killed (SIGKILL) with a message half through: what it had put
 * in the transport's buffers is there, the rest never comes. */
static void case_kill(void)
{
    static const char *const whats[4] = {
        "sender killed mid-message", "receiver killed mid-message",
        "sender killed with a registered send announced",
        "receiver killed reading a registered send"};
    for (int dir = 0; dir < (tp->reg ? 4 : 2); dir++) {
        const char *what = whats[dir];
        collUniqueId id;
        REQUIRE(collGetUniqueId(&id) == collSuccess);
        int down[2], up[2];
        REQUIRE(pipe(down) == 0 && pipe(up) == 0);
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            close(down[1]);
            close(up[0]);
            kill_child(&id, dir, down[0], up[1]);
        }
        close(down[0]);
        close(up[1]);
        struct side me;
        if (!side_open(&me, 2, 0, &id)) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            exit(TEST_SKIP);
        }
        struct op o;
        struct coll_conn *c = NULL;
        bool caught = false;
        if (dir % 2 == 0) {
            CHECK_RES(accept_within(&me, 10000, &c), collSuccess, me.comm);
            if (c != NULL && write(down[1], "a", 1) == 1)
                caught = read_byte(up[0], 10000) == 'r';
            op_recv(&o, OP_RECV, c, HALF_BIG, NULL);
            if (dir == 2)
                op_reg(&o, me.ctx, HALF_BIG); /* it reads from the dead rank */
        } else {
            side_arm(&me, 10000);
            CHECK_RES(tp->connect(me.ctx, side_peer_handle(&me, 1), 1, &c),
                      collSuccess, me.comm);
            op_send(&o, c, HALF_BIG, 42);
            if (dir == 3)
                op_reg(&o, me.ctx, HALF_BIG);
            if (c != NULL && read_byte(up[0], 10000) == 'a') {
                op_post(&o);
                if (dir == 3)
                    caught = write(down[1], "p", 1) == 1 && read_byte(up[0], 10000) == 'r';
                caught = (dir != 3 || caught) && stuck_after(&o, 500);
            }
        }
        CHECK_MSG(caught, "%s: could not catch a %u B message half through", what, HALF_BIG);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        if (caught) {
            if (dir % 2 == 0)
                op_post(&o); /* the receive meets what the dead sender left */
            survivor_fails(&o, what);
        }
        if (dir == 0) {
            /* Nobody listens there any more. */
            struct coll_conn *x = NULL;
            side_arm(&me, 10000);
            double t0 = now_s();
            collResult_t res = tp->connect(me.ctx, side_peer_handle(&me, 1), 1,
                                           &x);
            if (res == collSuccess && x != NULL) {
                struct op so;
                op_send(&so, x, BIG, 43);
                op_post(&so);
                drive(&so, 1, 10000, CORE_TICK_MS, NULL);
                res = so.res;
                op_free(&so);
                tp->close(x);
            }
            CHECK_MSG(res != collSuccess && now_s() - t0 < 10.5,
                      "a connection to a killed rank: %s after %.1f s", collGetErrorString(res),
                      now_s() - t0);
        }
        if (c)
            CHECK(tp->close(c) == collSuccess);
        op_free(&o);
        close(down[1]);
        close(up[0]);
        side_close(&me);
    }
}

static void case_handles(void)
{
    struct side s[2];
    sides_open(2, s);
    enum { NBAD = 6 + COLL_MAX_TRANSPORTS };
    uint8_t bad[NBAD][COLL_TP_HANDLE_BYTES];
    const char *names[NBAD];
    int nbad = 0;
    names[nbad] = "zeros";
    memset(bad[nbad++], 0, COLL_TP_HANDLE_BYTES);
    names[nbad] = "0xff";
    memset(bad[nbad++], 0xff, COLL_TP_HANDLE_BYTES);
    names[nbad] = "random";
    fill(bad[nbad++], COLL_TP_HANDLE_BYTES, 99);
    names[nbad] = "byte 0 flipped";
    memcpy(bad[nbad], s[0].handle, COLL_TP_HANDLE_BYTES);
    bad[nbad++][0] ^= 0xff;
    names[nbad] = "cut after 8 bytes";
    memset(bad[nbad], 0, COLL_TP_HANDLE_BYTES);
    memcpy(bad[nbad++], s[0].handle, 8);
    names[nbad] = "random after 8 bytes";
    fill(bad[nbad], COLL_TP_HANDLE_BYTES, 98);
    memcpy(bad[nbad++], s[0].handle, 8);
    /* The handles rank 0 published for the other transports. */
    int n;
    const struct coll_transport *const *table = coll_transport_table(&n);
    for (int i = 0; i < n; i++) {
        if (i == tp_index || !(s[0].info->tp_mask & (1u << i)))
            continue;
        names[nbad] = table[i]->name;
        memcpy(bad[nbad++], s[0].info->tp_handle[i], COLL_TP_HANDLE_BYTES);
    }
    for (int i = 0; i < nbad; i++) {
        bool ok = true;
        collResult_t res = tp->can_connect(s[1].ctx, s[0].info, bad[i], &ok);
        CHECK_MSG(res != collSuccess || !ok, "can_connect says yes to a handle: %s", names[i]);
        struct coll_conn *c = NULL;
        side_arm(&s[1], 10000);
        double t0 = now_s();
        res = tp->connect(s[1].ctx, bad[i], 0, &c);
        double secs = now_s() - t0;
        CHECK_MSG(res != collSuccess, "connect took a handle: %s", names[i]);
        CHECK_MSG(secs < 10.5, "connect with a handle (%s) took %.1f s", names[i], secs);
        if (verbose)
            printf("  handle %s: %s in %.3f s: %s\n", names[i], collGetErrorString(res), secs,
                   collGetLastError(s[1].comm));
        if (res == collSuccess && c != NULL)
            tp->close(c);
    }
    bool ok = false;
    CHECK(tp->can_connect(s[1].ctx, s[0].info, s[0].handle, &ok) == collSuccess && ok);
    /* Still usable after all that. */
    struct link l;
    link_open(&l, &s[1], &s[0]);
    link_close(&l);
    sides_close(2, s);
}

/* --- registration --- */

/* Verbs' rendezvous threshold (COLL_IB_RDV_BYTES, 128 KiB by default), which the
 * reg case's sizes are placed around; the default when it is off. */
static size_t rdv_threshold(void)
{
    int64_t t = coll_param_int(COLL_PARAM_IB_RDV_BYTES);
    return t > 0 && t <= (1 << 20) ? (size_t)t : 131072;
}

/* How a message of the reg case is sent and taken. */
struct reg_mode {
    bool send_reg;
    enum op_kind rkind;
    bool recv_reg;
    const char *name;
};

static const struct reg_mode reg_modes[] = {
    {true, OP_RECV, true, "registered -> registered"},
    {true, OP_RECV, false, "registered -> unregistered"},
    {false, OP_RECV, true, "unregistered -> registered"},
    {true, OP_PEEK, false, "registered -> lent"},
};
#define NMODES ((int)(sizeof(reg_modes) / sizeof(reg_modes[0])))

/* A message of n bytes on l in mode m: o[0] the send, o[1] the receive, each
 * registered with its own rank's context as m says.  Variant v: bit 0 moves
 * both buffers off alignment, bit 1 lets the receive's registration take in its
 * guard (the transport must still write n bytes only). */
static void reg_pair(struct op o[2], struct link *l, size_t n, const struct reg_mode *m,
                     uint64_t seed, int v)
{
    op_send(&o[0], l->s, n, seed);
    op_recv(&o[1], m->rkind, l->r, n, NULL);
    if (v & 1) {
        op_skew(&o[0], 1 + (size_t)v);
        op_skew(&o[1], 3 + (size_t)v);
    }
    o[1].want = o[0].buf;
    if (m->send_reg)
        op_reg(&o[0], l->from->ctx, n);
    if (m->recv_reg)
        op_reg(&o[1], l->to->ctx, v & 2 ? n + GUARD : n);
}

/* What reg does with what it cannot register: device memory on a transport
 * without COLL_TP_CAP_CUDA_MEM is refused with a NULL handle.  An empty range is
 * outside the contract (the core never registers one: lib/engine/regcache.c gives no
 * handle for 0 bytes); reg must not crash on it, and a handle it gives back
 * must dereg. */
static void reg_refusals(struct side *s)
{
    uint8_t *buf = xmalloc(4096);
    void *mh = (void *)&mh;
    collResult_t res;
    if (!(tp->caps & COLL_TP_CAP_CUDA_MEM)) {
        res = tp->reg(s->ctx, buf, 4096, COLL_MEM_DEVICE, &mh);
        CHECK_MSG(res != collSuccess && mh == NULL,
                  "reg of device memory without COLL_TP_CAP_CUDA_MEM: %s, handle %p",
                  collGetErrorString(res), mh);
        if (res == collSuccess && mh != NULL)
            tp->dereg(s->ctx, mh);
    }
    struct {
        void *p;
        const char *what;
    } empty[2] = {{NULL, "NULL, 0 B"}, {buf, "a buffer, 0 B"}};
    for (int i = 0; i < 2; i++) {
        mh = (void *)&mh;
        res = tp->reg(s->ctx, empty[i].p, 0, COLL_MEM_HOST, &mh);
        CHECK_MSG(res == collSuccess ? mh != NULL : mh == NULL,
                  "reg of %s: %s with handle %p", empty[i].what, collGetErrorString(res), mh);
        if (verbose)
            printf("  reg of %s: %s\n", empty[i].what,
                   res == collSuccess ? "a handle" : collGetErrorString(res));
        if (res == collSuccess && mh != NULL)
            tp->dereg(s->ctx, mh);
    }
    free(buf);
}

/* Every mode at every size, both ways at once: every byte and the guard. */
static void reg_sizes(struct link *ab, struct link *ba)
{
    size_t t = rdv_threshold();
    const size_t rsizes[] = {0,         1,         4097,          t - 1,         t,
                             t + 1,     t + 4093,  3 * t + 1,     (1u << 20) + 3,
                             (4u << 20) + 5};
    for (size_t i = 0; i < sizeof(rsizes) / sizeof(rsizes[0]); i++) {
        for (int m = 0; m < NMODES; m++) {
            const struct reg_mode *md = &reg_modes[m];
            if (md->rkind == OP_PEEK && tp->recv_peek == NULL)
                continue;
            size_t n = rsizes[i];
            struct op o[4];
            int v = (int)(i % 4);
            reg_pair(&o[0], ab, n, md, 600 + 8 * i + (size_t)m, v);
            reg_pair(&o[2], ba, n, md, 700 + 8 * i + (size_t)m, 3 - v);
            /* Receives first for even sizes, sends first for odd ones. */
            int order[2][4] = {{1, 3, 0, 2}, {0, 2, 1, 3}};
            for (int k = 0; k < 4; k++)
                op_post(&o[order[i % 2][k]]);
            int left = drive(o, 4, LIMIT_MS, CORE_TICK_MS, NULL);
            char what[4][96];
            for (int k = 0; k < 4; k++)
                snprintf(what[k], sizeof(what[k]), "%s, %s%s", md->name,
                         k < 2 ? "0 -> 1" : "1 -> 0", k % 2 ? "" : " (send)");
            CHECK_MSG(left == 0, "%s: %zu B both ways: %d of 4 requests pending after %d s",
                      md->name, n, left, LIMIT_MS / 1000);
            for (int k = 0; k < 4; k++)
                op_check(&o[k], what[k]);
            for (int k = 0; k < 4; k++)
                op_free(&o[k]);
            if (test_failures)
                return; /* one failure is enough to read */
        }
    }
}

/* 8 messages in flight each way, around the threshold, registered and not in
 * turn (announced and streamed messages interleaved on one connection), sends
 * posted first, then receives first. */
static void reg_inflight(struct link *ab, struct link *ba)
{
    size_t t = rdv_threshold();
    const size_t mix[8] = {t, 1000, (1u << 20) + 3, t - 1, 2 * t + 7, 1, t + 1,
                           (2u << 20) + 9};
    for (int round = 0; round < 2; round++) {
        struct op o[32];
        for (int k = 0; k < 16; k++) {
            struct link *l = k < 8 ? ab : ba;
            const struct reg_mode *m = &reg_modes[(k + round) % 3];
            reg_pair(&o[2 * k], l, mix[k % 8], m, 800 + 16 * (uint64_t)round + (uint64_t)k,
                     k % 4);
        }
        for (int k = 0; k < 32; k++) {
            int send = round == 0 ? k < 16 : k >= 16;
            op_post(&o[2 * (k % 16) + (send ? 0 : 1)]);
        }
        int left = drive(o, 32, LIMIT_MS, CORE_TICK_MS, NULL);
        CHECK_MSG(left == 0, "8 in flight each way (%s first): %d pending",
                  round ? "receives" : "sends", left);
        for (int k = 0; k < 32; k++) {
            char what[96];
            snprintf(what, sizeof(what), "%s, message %d of 8 %s, %s first",
                     reg_modes[(k / 2 + round) % 3].name, (k / 2) % 8, k < 16 ? "0 -> 1" : "1 -> 0",
                     round ? "receives" : "sends");
            op_check(&o[k], what);
        }
        for (int k = 0; k < 32; k++)
            op_free(&o[k]);
    }
}

/* A send's buffer is the user's again once test() reported it done: its
 * handle deregistered and its bytes overwritten then, the receive still gets
 * what was sent (a registered receive and an unregistered one, which may still
 * be taking the message out of the slots). */
static void reg_dereg_early(struct link *l)
{
    const size_t n[2] = {(1u << 20) + 3, (4u << 20) + 5};
    for (int i = 0; i < 2; i++) {
        struct op o[2];
        reg_pair(o, l, n[i], &reg_modes[i], 900 + (uint64_t)i, 0);
        uint8_t *want = xmalloc(n[i]);
        memcpy(want, o[0].buf, n[i]);
        o[1].want = want;
        op_post(&o[1]);
        op_post(&o[0]);
        double t0 = now_s();
        while (op_pending(&o[0]) && now_s() - t0 < LIMIT_MS / 1000.0) {
            step(o, 2);
            if (op_pending(&o[0]))
                sleep_ms(1);
        }
        CHECK_MSG(o[0].done, "%s: %zu B send: %s", reg_modes[i].name, n[i],
                  op_pending(&o[0]) ? "pending" : collGetErrorString(o[0].res));
        if (o[0].mh_ctx)
            tp->dereg(o[0].mh_ctx, o[0].mh);
        o[0].mh = o[0].mh_ctx = NULL;
        memset(o[0].buf, 0xc3, n[i]);
        int left = drive(&o[1], 1, LIMIT_MS, CORE_TICK_MS, NULL);
        CHECK_MSG(left == 0, "%s: %zu B receive pending after the send completed", reg_modes[i].name,
                  n[i]);
        op_check(&o[1], i ? "unregistered receive, the send's buffer reused"
                          : "registered receive, the send's buffer reused");
        /* So is a receive's, at once. */
        if (o[1].mh_ctx)
            tp->dereg(o[1].mh_ctx, o[1].mh);
        o[1].mh = o[1].mh_ctx = NULL;
        op_free(&o[0]);
        op_free(&o[1]);
        free(want);
    }
}

/* The same buffers registered twice: two handles, each usable, the second
 * still after the first is released. */
static void reg_twice(struct link *l)
{
    if (tp->reg == NULL)
        return;
    size_t n = (1u << 20) + 3;
    uint8_t *src = xmalloc(n), *dst = xmalloc(n + GUARD);
    void *smh[2] = {NULL, NULL}, *rmh[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
        CHECK(tp->reg(l->from->ctx, src, n, COLL_MEM_HOST, &smh[k]) == collSuccess &&
              smh[k] != NULL);
        CHECK(tp->reg(l->to->ctx, dst, n + GUARD, COLL_MEM_HOST, &rmh[k]) == collSuccess &&
              rmh[k] != NULL);
    }
    /* The send's and the receive's handle: first and second, second and first,
     * then the second of each once the first is released. */
    static const int use[3][2] = {{0, 1}, {1, 0}, {1, 1}};
    for (int i = 0; i < 3 && !test_failures; i++) {
        if (i == 2) { /* the first of each released: the second still works */
            tp->dereg(l->from->ctx, smh[0]);
            tp->dereg(l->to->ctx, rmh[0]);
            smh[0] = rmh[0] = NULL;
        }
        struct op o[2] = {
            {.kind = OP_SEND, .c = l->s, .n = n, .buf = src, .mh = smh[use[i][0]]},
            {.kind = OP_RECV, .c = l->r, .n = n, .buf = dst, .want = src,
             .mh = rmh[use[i][1]]},
        };
        fill(src, n, 950 + (uint64_t)i);
        memset(dst, 0x5a, n);
        memset(dst + n, 0xa5, GUARD);
        op_post(&o[0]);
        op_post(&o[1]);
        int left = drive(o, 2, LIMIT_MS, CORE_TICK_MS, NULL);
        CHECK_MSG(left == 0, "registered twice, pass %d: %d pending", i, left);
        op_check(&o[1], "a buffer registered twice");
        op_check(&o[0], "a buffer registered twice (send)");
    }
    for (int k = 0; k < 2; k++) {
        if (smh[k])
            tp->dereg(l->from->ctx, smh[k]);
        if (rmh[k])
            tp->dereg(l->to->ctx, rmh[k]);
    }
    free(src);
    free(dst);
}

/* Drives o (the peer of a shut connection) for 10 s at most: it must end.
 * Either way is right: failed, or done with every byte (a rendezvous read of a
 * sender shut after announcing may still find its buffer there). */
static void peer_of_shut_ends(struct op *o, const char *what)
{
    int left = drive(o, 1, 10000, CORE_TICK_MS, NULL);
    CHECK_MSG(left == 0, "%s: still pending 10 s after its peer's shutdown", what);
    if (o->res == collSuccess && o->done && o->kind != OP_SEND)
        op_check(o, what);
    if (verbose)
        printf("  %s: %s\n", what, o->res == collSuccess ? "done" : collGetErrorString(o->res));
}

/* shutdown() from another thread while a rendezvous is pending: a registered
 * send announced with no receive posted, one whose receiver has begun to read
 * it (one test() of its registered receive, which then posts the reads but
 * counts them done only at its next test; only with reg), and a registered
 * receive with nothing sent.  Each wait fails within 2 s; the peer's request ends within
 * 10 s. */
static void reg_shutdown(struct side *s)
{
    size_t t = rdv_threshold();
    for (int which = 0; which < 3; which++) {
        if (which == 1 && tp->reg == NULL)
            continue; /* no rendezvous: the receive would just take bytes */
        struct link l;
        link_open(&l, &s[1], &s[0]);
        struct op o[2];
        const char *what[3] = {"registered send, no receive", "registered send being read",
                               "registered receive, nothing sent"};
        /* The sends are larger than any transport here buffers, so that they
         * are pending on shm and tcp too (where the handles are NULL). */
        reg_pair(o, &l, BIG + 3 * t, &reg_modes[0], 960 + (uint64_t)which, 0);
        if (which < 2) {
            if (which == 1) {
                op_post(&o[0]);
                sleep_ms(100); /* the announcement arrives */
                op_post(&o[1]);
                (void)op_step(&o[1]);
            }
            shutdown_check(&o[0], l.s, what[which]);
            if (which == 0)
                op_post(&o[1]);
            peer_of_shut_ends(&o[1], which ? "the receive reading a shut sender"
                                           : "a receive posted after its sender was shut");
        } else {
            shutdown_check(&o[1], l.r, what[which]);
            op_post(&o[0]);
            int left = drive(&o[0], 1, 10000, CORE_TICK_MS, NULL);
            CHECK_MSG(o[0].res != collSuccess, "a %u B registered send to a shut receive "
                      "connection %s", BIG, left ? "is pending after 10 s" : "completed");
        }
        link_close(&l);
        /* Handles go only once no request is pending: the connections are gone. */
        op_free(&o[0]);
        op_free(&o[1]);
    }
}

static void case_reg(void)
{
    bool has = tp->reg != NULL;
    bool cap = (tp->caps & COLL_TP_CAP_NEEDS_REG) != 0;
    CHECK_MSG(cap == has && (tp->dereg != NULL) == has,
              "COLL_TP_CAP_NEEDS_REG %s, reg %s, dereg %s: the cap comes with both, and only",
              cap ? "set" : "unset", has ? "set" : "NULL", tp->dereg ? "set" : "NULL");
    if (!has)
        printf("  (%s has no reg: every handle is NULL)\n", tp->name);
    struct side s[2];
    sides_open(2, s);
    if (has)
        reg_refusals(&s[0]);
    struct link ab, ba;
    link_open(&ab, &s[0], &s[1]);
    link_open(&ba, &s[1], &s[0]);
    reg_sizes(&ab, &ba);
    if (!test_failures)
        reg_inflight(&ab, &ba);
    if (!test_failures)
        reg_dereg_early(&ab);
    if (!test_failures)
        reg_twice(&ba);
    link_close(&ab);
    link_close(&ba);
    if (!test_failures)
        reg_shutdown(s);
    sides_close(2, s);
}

/* --- the runner --- */

struct test_case {
    const char *name;
    void (*fn)(void);
    int limit_s;
};

static const struct test_case cases[] = {
    {"table", case_table, 60},       {"connect", case_connect, 90},
    {"sizes", case_sizes, 180},      {"inflight", case_inflight, 120},
    {"peek", case_peek, 120},        {"wake", case_wake, 240},
    {"shutdown", case_shutdown, 120}, {"close", case_close, 120},
    {"kill", case_kill, 120},        {"handles", case_handles, 120},
    {"reg", case_reg, 240},          {"more", case_more, 60},
};
#define NCASES ((int)(sizeof(cases) / sizeof(cases[0])))

/* Runs one case in a process group of its own; returns its exit status (0, 1,
 * 77), 1 for a crash or a hang. */
static int run_case(const struct test_case *tc)
{
    fflush(stdout);
    fflush(stderr);
    double t0 = now_s();
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) {
        setpgid(0, 0);
        tc->fn();
        exit(test_result()); /* exit, not _exit: leak checkers run at exit */
    }
    setpgid(pid, pid);
    int status = 0;
    bool hung = false;
    while (waitpid(pid, &status, WNOHANG) == 0) {
        if (now_s() - t0 > tc->limit_s) {
            hung = true;
            kill(-pid, SIGKILL);
            waitpid(pid, &status, 0);
            break;
        }
        sleep_ms(10);
    }
    kill(-pid, SIGKILL); /* whatever it forked */
    double secs = now_s() - t0;
    int rc;
    if (hung) {
        printf("  FAIL  %-10s %5.1f s (still running after %d s: killed)\n", tc->name, secs,
               tc->limit_s);
        rc = 1;
    } else if (WIFSIGNALED(status)) {
        printf("  FAIL  %-10s %5.1f s (killed by signal %d)\n", tc->name, secs,
               WTERMSIG(status));
        rc = 1;
    } else {
        rc = WEXITSTATUS(status);
        printf("  %-4s  %-10s %5.1f s\n", rc == 0 ? "ok" : rc == TEST_SKIP ? "skip" : "FAIL",
               tc->name, secs);
    }
    fflush(stdout);
    return rc;
}

int main(int argc, char **argv)
{
    const char *name = NULL, *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--transport") == 0 && i + 1 < argc) {
            name = argv[++i];
        } else if (strcmp(argv[i], "--case") == 0 && i + 1 < argc) {
            only = argv[++i];
        } else if (strcmp(argv[i], "-v") == 0) {
            verbose = true;
        } else {
            name = NULL;
            break;
        }
    }
    if (name == NULL) {
        fprintf(stderr, "usage: %s --transport NAME [--case CASE] [-v]\n", argv[0]);
        return 2;
    }
    int n;
    const struct coll_transport *const *table = coll_transport_table(&n);
    for (int i = 0; i < n; i++) {
        if (strcmp(table[i]->name, name) == 0) {
            tp = table[i];
            tp_index = i;
        }
    }
    if (tp == NULL) {
        printf("SKIP: transport %s is not built into this libcollective\n", name);
        return TEST_SKIP;
    }
    /* Every transport this host offers is set up, so that the others' handles
     * can be shown to this one; the test uses only its own. */
    unsetenv("COLL_TRANSPORTS");
    signal(SIGPIPE, SIG_IGN);
    printf("transport %s (table entry %d of %d)\n", tp->name, tp_index, n);
    int failed = 0, ran = 0;
    for (int i = 0; i < NCASES; i++) {
        if (only && strcmp(only, cases[i].name) != 0)
            continue;
        int rc = run_case(&cases[i]);
        if (rc == TEST_SKIP && ran == 0)
            return TEST_SKIP; /* the case said why */
        ran++;
        failed += rc != 0;
    }
    if (ran == 0) {
        fprintf(stderr, "no case named %s\n", only);
        return 2;
    }
    printf("%s: %d of %d case(s) failed\n", tp->name, failed, ran);
    return failed ? 1 : 0;
}
