/* Shared-memory transport: ranks on the same host (same boot and network
 * namespace) move bytes through a segment per directed pair instead of the TCP
 * stack.
 *
 * Segment (memfd, never named in any file system): a control block, then a ring
 * of nslots slots of slot_bytes each.  The sender owns `head` (slots published),
 * the receiver owns `tail` (slots released); each counter sits on its own cache
 * line.  A message of n bytes fills ceil(n / slot_bytes) consecutive slots, every
 * slot but the last full; len[slot] holds the bytes in it.
 *
 *   sender                                   receiver
 *   wait until head - tail < nslots          wait until head > tail
 *   copy a fragment into slot[head % N]      use slot[tail % N] (copy it out, or
 *   len[..] = bytes; head++ (release)          reduce straight from it: recv_peek)
 *                                            tail++ (release)
 *
 * Connection: the receiver listens on an abstract unix socket (SOCK_SEQPACKET;
 * it vanishes with the process).  The sender creates the memfd, maps it, and
 * passes it with SCM_RIGHTS in a hello carrying the communicator's secret and
 * its rank; the receiver checks the secret, maps the memfd and closes it.  From
 * then on the memory is only mapped: when both processes are gone, so is the
 * segment, whatever killed them.
 *
 * Peers in this process (ranks as threads): the sender finds the listener in
 * the process's list of its own listeners by name, and both ends drop the
 * socket once the hello is read.  Each rank's context has one eventfd, its
 * bell, that every in-process peer rings instead of writing on a socket, and
 * that all its in-process connections wait on; close and shutdown are flags in
 * the segment with a ring of the bell.  A process of L rank threads thus holds
 * about L bells instead of 2 L (L - 1) sockets in an all-to-all.  What the
 * receiver needs of the sender (its bell) passes through a record in process
 * memory named by a number in the hello; nothing read from the segment is
 * used as a pointer.
 *
 * Ring size: a per-host budget (COLL_SHM_BUDGET_MB, 1 GiB) that every ring
 * on the host is carved from.  A communicator's share: the sender sizes a ring
 * when it makes its first segment, from the host's rank count L: in the worst
 * case (an all-to-all, a naive star) all L (L - 1) directed pairs talk, so each
 * ring gets at most budget / (L (L - 1)).  When the configured ring
 * (COLL_SHM_NSLOTS x COLL_SHM_SLOT_BYTES, 16 x 256 KiB) fits that share it is
 * used as it is: with the default budget, up to 16 ranks on a host (240 rings
 * of 4 MiB, 961 MiB) see no change.  Beyond, the ring keeps its slot size with
 * fewer slots down to 4, then keeps 4 slots that shrink (multiples of 4 KiB),
 * and at last goes down to the floor of 2 slots of 4 KiB, which still moves any
 * message (a message streams through the ring fragment by fragment; only the
 * pipelining ahead of the receiver shrinks).  96 ranks: 4 x 24 KiB; 128 ranks:
 * 4 x 12 KiB.  The host's whole: every communicator and process of the user
 * counts its segments in one ledger (ledger.c), and a new ring shrinks by the
 * same steps to what the ledger has left, never below the floor.  The receiver
 * takes the geometry the hello gives, so no rank needs to agree with another.
 * Pairs that never talk cost nothing (segments are made on first use), so the
 * budget is a bound, not what a ring or a tree uses.  Growing rings when large
 * messages flow was the alternative: it would need a swap of a live segment
 * under both ranks, for little gain where many ranks already split the memory
 * bandwidth.
 *
 * Waiting: the core spins on test() first.  Before it blocks it calls
 * wait_prepare(), which raises this side's sleep flag and looks once more; the
 * other side, after moving a counter, clears a raised flag and writes one byte
 * on the socket.  The core's poll() on the socket thus wakes on progress, and on
 * the peer's death (the socket closes), so a dead peer is noticed within the
 * usual deadlines without a timer.  Flags and counters use sequentially
 * consistent atomics, so a wake-up cannot be lost between the flag and the
 * counter.  A bell is shared by a rank's in-process connections, so reading it
 * may take a ring meant for another connection whose flag is already down:
 * wait_prepare() that reads a ring answers "test again" instead of raising its
 * flag, and the core then tests every connection before it prepares again.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/eventfd.h>
#include <sys/un.h>
#include <unistd.h>

#include "alloc.h"
#include "check.h"
#include "common/slot_ring.h"
#include "ledger.h"
#include "log.h"
#include "param.h"
#include "transport.h"

#define SHM_MAGIC 0x4d485343u /* "CSHM" */
#define SHM_MAX_SLOTS 64
#define SHM_REQ_CAP 128
#define SHM_CACHELINE 64
#define SHM_MIN_PENDING 64
#define SHM_FLOOR_SLOTS 2
#define SHM_FLOOR_SLOT_BYTES 4096
#define SHM_CTRL_BYTES ((sizeof(struct shm_ctrl) + 4095) & ~(size_t)4095)

struct shm_handle {
    uint32_t magic;
    uint32_t pad;
    uint64_t netns;         /* inode of the network namespace: the socket is reachable */
    char name[96];          /* abstract socket name, without the leading NUL */
};
_Static_assert(sizeof(struct shm_handle) <= COLL_TP_HANDLE_BYTES, "shm handle too large");

struct shm_hello {
    uint32_t magic;
    uint8_t secret[COLL_SECRET_BYTES];
    int32_t rank;
    uint32_t nslots;
    uint32_t slot_bytes;
    uint64_t seg_bytes;
    uint64_t link;          /* a peer in this process: its shm_link's id; 0: none */
};

struct shm_ctrl {
    _Alignas(SHM_CACHELINE) _Atomic uint64_t head;  /* written by the sender */
    _Alignas(SHM_CACHELINE) _Atomic uint64_t tail;  /* written by the receiver */
    _Alignas(SHM_CACHELINE) _Atomic uint32_t recv_sleep;
    _Alignas(SHM_CACHELINE) _Atomic uint32_t send_sleep;
    /* In-process peers: the sender [0] or the receiver [1] closed or shut down;
     * the receiver took the link (set under shm_local.lock). */
    _Alignas(SHM_CACHELINE) _Atomic uint32_t closed[2];
    _Atomic uint32_t taken;
    _Alignas(SHM_CACHELINE) uint32_t len[SHM_MAX_SLOTS];
    uint32_t nslots, slot_bytes;
};

struct shm_ctx {
    const struct coll_tp_env *env;
    uint64_t netns;
    uint32_t nslots, slot_bytes; /* the ring of every send segment (shm_size_ring) */
    int64_t budget_mb;           /* COLL_SHM_BUDGET_MB; 0: none */
    bool sized;                  /* nslots and slot_bytes fitted to the budget */
    struct shm_bell *bell;       /* in-process peers ring it (under shm_local.lock) */
};

/* An eventfd that in-process peers ring; it lives while a context or a
 * connection holds a reference, so a peer never writes a closed number. */
struct shm_bell {
    int fd;
    int refs; /* under shm_local.lock */
};

struct shm_req {
    struct coll_req base;
    char *buf;
    size_t size;
    size_t done_bytes;
    bool reported;
};

struct shm_conn {
    struct coll_conn base;
    struct shm_ctx *ctx;
    struct shm_ctrl *ctrl;
    char *slots;
    size_t seg_bytes;
    uint32_t nslots, slot_bytes;
    uint64_t next;         /* sender: head to publish */
    struct coll_slot_ring rx; /* receiver: the slots, up to head; tail is rx.next */
    uint64_t head, tail;   /* requests [head, tail) in the FIFO */
    struct shm_req reqs[SHM_REQ_CAP];
    bool peer_gone;        /* the socket closed (in-process: the peer's closed flag) */
    bool local;            /* the peer is in this process: bells, no socket */
    uint64_t link;         /* local sender: the link until the receiver took it; 0 then */
    bool ledgered;         /* sender: the segment is in the host's ledger */
    bool mapped_in;        /* the slots' page tables are filled (shm_map_in) */
    struct shm_bell *own, *peer_bell; /* local: this context's bell, the peer's */
    atomic_bool shut;      /* shutdown() was called */
    unsigned idle_tests;
    collResult_t failed;
};

struct shm_pending {
    int fd;
};

struct shm_listener {
    struct coll_conn base;
    struct shm_ctx *ctx;
    int lfd;
    char name[96];               /* the abstract socket's */
    pid_t pid;                   /* the process that listens (a fork has a copy) */
    struct shm_listener *next;   /* shm_local.listeners */
    struct shm_pending *pend; /* accepted, hello not read yet */
    int npend, pend_cap;
};

static uint64_t shm_netns(void)
{
    struct stat st;
    return stat("/proc/self/ns/net", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* --- Peers in this process --- */

/* A connection to a listener of this process whose hello is not read yet: what
 * the receiver takes over when it reads the hello naming `id`. */
struct shm_link {
    uint64_t id;
    struct shm_listener *to;
    struct shm_bell *bell; /* the sender's, a reference for the receiver */
    struct shm_link *next;
};

static struct {
    pthread_mutex_t lock;
    struct shm_listener *listeners; /* this process's */
    struct shm_link *links;
    uint64_t next_id;
} shm_local = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* A link's id: random, so that a refused hello (which any process on the host
 * can send) cannot name another sender's link; never 0.  Under the lock. */
static uint64_t shm_link_id(void)
{
    uint64_t id = 0;
    if (getrandom(&id, sizeof(id), GRND_NONBLOCK) != (ssize_t)sizeof(id))
        id = 0;
    id ^= ++shm_local.next_id * UINT64_C(0x9e3779b97f4a7c15);
    return id != 0 ? id : 1;
}

/* A reference to ctx's bell, made on first use; NULL with errno set when no
 * eventfd can be had.  Under shm_local.lock. */
static struct shm_bell *shm_bell_ref(struct shm_ctx *ctx)
{
    if (ctx->bell == NULL) {
        struct shm_bell *b = calloc(1, sizeof(*b));
        if (b == NULL)
            return NULL;
        b->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (b->fd < 0) {
            int err = errno;
            free(b);
            errno = err;
            return NULL;
        }
        b->refs = 1; /* the context's own */
        ctx->bell = b;
    }
    ctx->bell->refs++;
    return ctx->bell;
}

/* Under shm_local.lock. */
static void shm_bell_unref(struct shm_bell *b)
{
    if (b != NULL && --b->refs == 0) {
        close(b->fd);
        free(b);
    }
}

static void shm_bell_ring(const struct shm_bell *b)
{
    uint64_t one = 1;
    (void)!write(b->fd, &one, sizeof(one));
}

/* Whether the listener named `name` is this process's; if so, the two bells of
 * the connection to it (*own: ctx's, *peer: the listener's) and the id of the
 * link that hands the receiver its side.  -1 with errno when a bell cannot be
 * made. */
static int shm_local_link(struct shm_ctx *ctx, const char *name, uint64_t *id_p,
                          struct shm_bell **own_p, struct shm_bell **peer_p)
{
    pid_t me = getpid();
    int found = 0;
    pthread_mutex_lock(&shm_local.lock);
    struct shm_listener *lis = shm_local.listeners;
    while (lis != NULL && (lis->pid != me || strcmp(lis->name, name) != 0))
        lis = lis->next;
    if (lis != NULL) {
        struct shm_link *l = calloc(1, sizeof(*l));
        struct shm_bell *own = l ? shm_bell_ref(ctx) : NULL;
        struct shm_bell *peer = own ? shm_bell_ref(lis->ctx) : NULL;
        struct shm_bell *given = peer ? shm_bell_ref(ctx) : NULL;
        if (given == NULL) {
            int err = errno ? errno : ENOMEM;
            shm_bell_unref(peer);
            shm_bell_unref(own);
            free(l);
            errno = err;
            found = -1;
        } else {
            *l = (struct shm_link){.id = shm_link_id(), .to = lis, .bell = given,
                                   .next = shm_local.links};
            shm_local.links = l;
            *id_p = l->id;
            *own_p = own;
            *peer_p = peer;
            found = 1;
        }
    }
    pthread_mutex_unlock(&shm_local.lock);
    return found;
}

/* Takes the link `id` addressed to lis out of the list, marking ctrl taken:
 * *peer_p gets the sender's bell and *own_p a reference to lis's context's
 * bell.  0 when there is no such link (a hello naming one that this process
 * never made), -1 with errno when no bell could be made. */
static int shm_local_take(struct shm_listener *lis, uint64_t id, struct shm_ctrl *ctrl,
                          struct shm_bell **own_p, struct shm_bell **peer_p)
{
    int ok = 0;
    pthread_mutex_lock(&shm_local.lock);
    for (struct shm_link **pl = &shm_local.links; *pl != NULL; pl = &(*pl)->next) {
        struct shm_link *l = *pl;
        if (l->id != id || l->to != lis)
            continue;
        *own_p = shm_bell_ref(lis->ctx);
        if (*own_p != NULL) {
            atomic_store(&ctrl->taken, 1);
            *peer_p = l->bell;
            *pl = l->next;
            free(l);
            ok = 1;
        } else {
            ok = -1;
        }
        break;
    }
    pthread_mutex_unlock(&shm_local.lock);
    return ok;
}

/* Takes *pl out of the list untaken and rings its sender: a link gone untaken
 * is a peer gone (shm_local_check).  Under shm_local.lock. */
static void shm_link_drop(struct shm_link **pl)
{
    struct shm_link *l = *pl;
    *pl = l->next;
    shm_bell_ring(l->bell);
    shm_bell_unref(l->bell);
    free(l);
}

/* Drops the link `id` if it is addressed to `to` (any listener: NULL): the
 * sender failed after making it, or the receiver refused its hello. */
static void shm_local_drop(uint64_t id, const struct shm_listener *to)
{
    pthread_mutex_lock(&shm_local.lock);
    for (struct shm_link **pl = &shm_local.links; *pl != NULL; pl = &(*pl)->next)
        if ((*pl)->id == id && (to == NULL || (*pl)->to == to)) {
            shm_link_drop(pl);
            break;
        }
    pthread_mutex_unlock(&shm_local.lock);
}

/* In-process sender: whether the receiver has taken the link yet.  A link gone
 * untaken (its hello refused, its listener closed first) will never be taken:
 * the peer is gone, as a socket closed by the receiver said before. */
static void shm_local_check(struct shm_conn *c)
{
    if (c->link == 0)
        return;
    if (atomic_load(&c->ctrl->taken)) { /* the usual end: no lock */
        c->link = 0;
        return;
    }
    bool present = false;
    pthread_mutex_lock(&shm_local.lock);
    bool taken = atomic_load(&c->ctrl->taken) != 0;
    for (const struct shm_link *l = shm_local.links; l != NULL && !taken && !present; l = l->next)
        present = l->id == c->link;
    pthread_mutex_unlock(&shm_local.lock);
    if (taken || !present)
        c->link = 0;
    if (!taken && !present)
        c->peer_gone = true;
}

static void shm_local_add_listener(struct shm_listener *lis)
{
    pthread_mutex_lock(&shm_local.lock);
    lis->next = shm_local.listeners;
    shm_local.listeners = lis;
    pthread_mutex_unlock(&shm_local.lock);
}

/* Takes lis out of the list, with the links to it that no hello was read for. */
static void shm_local_remove_listener(struct shm_listener *lis)
{
    pthread_mutex_lock(&shm_local.lock);
    for (struct shm_listener **p = &shm_local.listeners; *p != NULL; p = &(*p)->next)
        if (*p == lis) {
            *p = lis->next;
            break;
        }
    for (struct shm_link **pl = &shm_local.links; *pl != NULL;)
        if ((*pl)->to == lis)
            shm_link_drop(pl);
        else
            pl = &(*pl)->next;
    pthread_mutex_unlock(&shm_local.lock);
}

static void shm_local_unref2(struct shm_bell *a, struct shm_bell *b)
{
    pthread_mutex_lock(&shm_local.lock);
    shm_bell_unref(a);
    shm_bell_unref(b);
    pthread_mutex_unlock(&shm_local.lock);
}

static collResult_t shm_init(const struct coll_tp_env *env, void **ctx_p)
{
    struct shm_ctx *ctx;
    COLL_CHECK(coll_calloc(&ctx, 1));
    ctx->env = env;
    ctx->netns = shm_netns();
    /* Slots hold the pipeline's slices whole; 16 of them keep a sender well ahead
     * of its receiver.  Oversubscribed hosts use small slices, and only the
     * first bytes of each slot are touched, so the ring stays in cache. */
    int64_t slot = coll_param_int(COLL_PARAM_SHM_SLOT_BYTES);
    int64_t nslots = coll_param_int(COLL_PARAM_SHM_NSLOTS);
    if (slot != 0 && (slot < 4096 || slot > (64 << 20) || slot % 64 != 0)) {
        COLL_WARN("COLL_SHM_SLOT_BYTES=%lld is not a multiple of 64 in 4 KiB-64 MiB; using "
                  "256 KiB", (long long)slot);
        slot = 0;
    }
    if (nslots != 0 && (nslots < 2 || nslots > SHM_MAX_SLOTS)) {
        COLL_WARN("COLL_SHM_NSLOTS=%lld is outside 2-%d; using 16", (long long)nslots,
                  SHM_MAX_SLOTS);
        nslots = 0;
    }
    ctx->nslots = nslots ? (uint32_t)nslots : 16;
    ctx->slot_bytes = slot ? (uint32_t)slot : 256 * 1024;
    ctx->budget_mb = coll_param_int(COLL_PARAM_SHM_BUDGET_MB);
    if (ctx->budget_mb < 0 || ctx->budget_mb > (INT64_C(1) << 30)) {
        COLL_WARN("COLL_SHM_BUDGET_MB=%lld is outside 0-2^30; using 1024",
                  (long long)ctx->budget_mb);
        ctx->budget_mb = 1024;
    }
    *ctx_p = ctx;
    return collSuccess;
}

static void shm_fini(void *vctx)
{
    struct shm_ctx *ctx = vctx;
    shm_local_unref2(ctx->bell, NULL);
    free(ctx);
}

static collResult_t shm_can_connect(void *vctx, const struct coll_rank_info *peer,
                                    const void *handle, bool *ok_p)
{
    struct shm_ctx *ctx = vctx;
    struct shm_handle h;
    memcpy(&h, handle, sizeof(h));
    const struct coll_rank_info *mine = coll_tp_peer(ctx->env, ctx->env->rank);
    /* host_hash covers the boot id and the host name */
    *ok_p = h.magic == SHM_MAGIC && peer->host_hash == mine->host_hash &&
            h.netns == ctx->netns && ctx->netns != 0;
    return collSuccess;
}

static socklen_t shm_sockaddr(const char *name, struct sockaddr_un *sa)
{
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    size_t len = strnlen(name, sizeof(sa->sun_path) - 2);
    memcpy(sa->sun_path + 1, name, len); /* sun_path[0] = 0: the abstract namespace */
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len);
}

static collResult_t shm_listen(void *vctx, void *handle, struct coll_conn **lis_p)
{
    struct shm_ctx *ctx = vctx;
    struct shm_handle h = {.magic = SHM_MAGIC, .netns = ctx->netns};
    uint8_t rnd[8];
    if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
        COLL_WARN("shm: getrandom failed: %s", strerror(errno));
        return collSystemError;
    }
    snprintf(h.name, sizeof(h.name), "libcollective-shm-%d-%02x%02x%02x%02x%02x%02x%02x%02x",
             (int)getpid(), rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        COLL_WARN("shm: socket: %s", strerror(errno));
        return collSystemError;
    }
    struct sockaddr_un sa;
    socklen_t len = shm_sockaddr(h.name, &sa);
    if (bind(fd, (struct sockaddr *)&sa, len) != 0 || listen(fd, 128) != 0) {
        COLL_WARN("shm: cannot listen on the abstract socket %s: %s", h.name, strerror(errno));
        close(fd);
        return collSystemError;
    }
    struct shm_listener *lis;
    if (coll_calloc(&lis, 1) != collSuccess) {
        close(fd);
        return collSystemError;
    }
    lis->ctx = ctx;
    lis->lfd = fd;
    memcpy(lis->name, h.name, sizeof(lis->name));
    lis->pid = getpid();
    lis->base.tp = &coll_shm_transport;
    lis->base.peer = -1;
    lis->base.nfds = 1;
    lis->base.fds[0] = fd;
    shm_local_add_listener(lis);
    memcpy(handle, &h, sizeof(h));
    COLL_INFO(COLL_SUBSYS_SHM, "listening on @%s", h.name);
    *lis_p = &lis->base;
    return collSuccess;
}

static size_t shm_seg_bytes(uint32_t nslots, uint32_t slot_bytes)
{
    return SHM_CTRL_BYTES + (size_t)nslots * slot_bytes;
}

/* Shrinks the ring n x s to fit `room` bytes with its control page: fewer slots
 * of the same size down to 4, then 4 slots that shrink in steps of 4 KiB, at
 * last the floor of 2 slots of 4 KiB.  False when even the floor does not fit
 * (the floor is kept). */
static bool shm_fit(uint32_t *n_p, uint32_t *s_p, uint64_t room_bytes)
{
    uint32_t n = *n_p, s = *s_p;
    if (shm_seg_bytes(n, s) <= room_bytes)
        return true;
    uint64_t room = room_bytes > SHM_CTRL_BYTES ? room_bytes - SHM_CTRL_BYTES : 0;
    uint32_t few = n < 4 ? n : 4; /* fewest slots before slots shrink */
    if (room / s >= few) {
        n = (uint32_t)(room / s); /* fewer slots of the same size */
    } else if (room / few >= 2 * SHM_FLOOR_SLOT_BYTES) {
        n = few;
        s = (uint32_t)((room / few) & ~(uint64_t)(SHM_FLOOR_SLOT_BYTES - 1));
    } else {
        s = SHM_FLOOR_SLOT_BYTES;
        n = room / s < SHM_FLOOR_SLOTS ? SHM_FLOOR_SLOTS : (uint32_t)(room / s);
        if (n > few)
            n = few;
    }
    *n_p = n;
    *s_p = s;
    return shm_seg_bytes(n, s) <= room_bytes;
}

/* Fits the ring of this rank's send segments to its share of the budget (see
 * the top of the file), once the host's rank count is known. */
static void shm_size_ring(struct shm_ctx *ctx)
{
    if (ctx->sized)
        return;
    ctx->sized = true;
    int local = coll_tp_local_ranks(ctx->env);
    if (local < 2)
        local = 2;
    uint64_t pairs = (uint64_t)local * (uint64_t)(local - 1);
    uint64_t full = shm_seg_bytes(ctx->nslots, ctx->slot_bytes);
    uint64_t share = ctx->budget_mb > 0 ? ((uint64_t)ctx->budget_mb << 20) / pairs : UINT64_MAX;
    if (!shm_fit(&ctx->nslots, &ctx->slot_bytes, share))
        COLL_WARN("shm: COLL_SHM_BUDGET_MB=%lld cannot hold a ring for each of the %llu "
                  "pairs of the %d ranks on this host; each takes the floor of %u slots of "
                  "%u KiB (%llu MiB if every pair talks)", (long long)ctx->budget_mb,
                  (unsigned long long)pairs, local, ctx->nslots, ctx->slot_bytes / 1024,
                  (unsigned long long)((shm_seg_bytes(ctx->nslots, ctx->slot_bytes) * pairs) >>
                                       20));
    COLL_INFO(COLL_SUBSYS_SHM, "%d rank(s) on this host, budget %lld MiB: rings of %u slots of "
              "%u KiB per peer%s", local, (long long)ctx->budget_mb, ctx->nslots,
              ctx->slot_bytes / 1024, full > share ? " (shrunk to the budget's share)" : "");
}

/* The ring of the next send segment: the communicator's share, shrunk to what
 * the host's ledger has left of the budget.  *ledgered_p: the segment is in the
 * ledger (released when it is unmapped). */
static void shm_reserve_ring(struct shm_ctx *ctx, int peer, uint32_t *n_p, uint32_t *s_p,
                             bool *ledgered_p)
{
    static _Atomic bool warned;
    shm_size_ring(ctx);
    uint32_t n = ctx->nslots, s = ctx->slot_bytes;
    *ledgered_p = false;
    if (ctx->budget_mb > 0) {
        uint64_t budget = (uint64_t)ctx->budget_mb << 20;
        uint64_t used = coll_shm_ledger_begin(budget, shm_seg_bytes(n, s), ledgered_p);
        if (*ledgered_p) {
            uint64_t left = used < budget ? budget - used : 0;
            if (shm_seg_bytes(n, s) > left) {
                if (!shm_fit(&n, &s, left) && !atomic_exchange(&warned, true))
                    COLL_WARN("shm: the host's rings already take %llu MiB of "
                              "COLL_SHM_BUDGET_MB=%lld (every communicator and process of "
                              "this user); new rings take the floor of %u slots of %u KiB",
                              (unsigned long long)(used >> 20), (long long)ctx->budget_mb, n,
                              s / 1024);
                COLL_INFO(COLL_SUBSYS_SHM, "ring to rank %d: %u slots of %u KiB, what the "
                          "host's budget has left (%llu KiB)", peer, n, s / 1024,
                          (unsigned long long)(left >> 10));
            }
            coll_shm_ledger_end(shm_seg_bytes(n, s));
        }
    }
    *n_p = n;
    *s_p = s;
}

/* For a failure for want of descriptors, what to do about it; "" otherwise. */
static const char *shm_nofile_hint(int err, char *buf, size_t len)
{
    struct rlimit rl;
    if (err != EMFILE || getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return "";
    snprintf(buf, len, " (this process has used up its open files limit, RLIMIT_NOFILE = "
             "%llu: each rank holds a few, and one per direction for every peer in another "
             "process on this host that it talks to; raise the hard limit, ulimit -Hn)",
             (unsigned long long)rl.rlim_cur);
    return buf;
}

static uint64_t shm_arrived(struct coll_slot_ring *r);
static void shm_freed(struct coll_slot_ring *r);

/* A connection over seg; fd is its socket, or with bells (in-process) -1 and
 * the bells' references, which the connection takes over. */
static collResult_t shm_conn_new(struct shm_ctx *ctx, int peer, bool is_send, int fd, void *seg,
                                 size_t seg_bytes, struct shm_bell *own, struct shm_bell *peer_bell,
                                 struct coll_conn **conn_p)
{
    struct shm_conn *c;
    COLL_CHECK(coll_calloc(&c, 1));
    c->ctx = ctx;
    c->ctrl = seg;
    c->nslots = c->ctrl->nslots;
    c->slot_bytes = c->ctrl->slot_bytes;
    c->slots = (char *)seg + SHM_CTRL_BYTES;
    c->seg_bytes = seg_bytes;
    if (!is_send)
        coll_slot_ring_init(&c->rx, c->slots, c->nslots, c->slot_bytes, c->ctrl->len, NULL,
                            shm_arrived, shm_freed);
    c->base.tp = &coll_shm_transport;
    c->base.peer = peer;
    c->base.is_send = is_send;
    c->base.poll_in = true; /* wake-ups arrive on the socket (the bell) in both directions */
    c->base.ring_slots = c->nslots;
    c->base.ring_slot_bytes = c->slot_bytes;
    c->base.nfds = 1;
    c->base.fds[0] = own != NULL ? own->fd : fd;
    c->local = own != NULL;
    c->own = own;
    c->peer_bell = peer_bell;
    *conn_p = &c->base;
    return collSuccess;
}

static collResult_t shm_connect(void *vctx, const void *handle, int peer,
                                struct coll_conn **conn_p)
{
    struct shm_ctx *ctx = vctx;
    const struct coll_tp_env *env = ctx->env;
    struct shm_handle h;
    memcpy(&h, handle, sizeof(h));
    /* Another transport's bytes, or garbage: refused before the name (which
     * must end within the handle) is used as a socket address. */
    if (h.magic != SHM_MAGIC || memchr(h.name, '\0', sizeof(h.name)) == NULL) {
        coll_tp_error(env, "shm: rank %d published no usable shm handle", peer);
        return collInternalError;
    }
    uint32_t nslots, slot_bytes;
    bool ledgered;
    shm_reserve_ring(ctx, peer, &nslots, &slot_bytes, &ledgered);
    size_t seg_bytes = shm_seg_bytes(nslots, slot_bytes);
    int mfd;
    void *seg;
    const char *step;
    /* The segment carries this rank's sends: its pages go on the receiver's
     * NUMA node, where they are read (and, lent in place, reduced from). */
    int err = coll_memfd_map("libcollective-shm", seg_bytes, coll_tp_peer(env, peer)->numa,
                             &mfd, &seg, &step);
    char hint[256];
    if (err != 0) {
        if (strcmp(step, "reserve") == 0)
            coll_tp_error(env, "shm: cannot reserve %zu bytes of shared memory (memfd, the "
                           "same memory as /dev/shm) for rank %d: %s", seg_bytes, peer,
                           strerror(err));
        else
            coll_tp_error(env, "shm: %s of %zu bytes for rank %d failed: %s%s", step,
                           seg_bytes, peer, strerror(err),
                           shm_nofile_hint(err, hint, sizeof(hint)));
        if (ledgered)
            coll_shm_ledger_release(seg_bytes);
        return collSystemError;
    }
    struct shm_ctrl *ctrl = seg;
    ctrl->nslots = nslots;
    ctrl->slot_bytes = slot_bytes;

    uint64_t link = 0;
    struct shm_bell *own = NULL, *peer_bell = NULL;
    if (shm_local_link(ctx, h.name, &link, &own, &peer_bell) < 0) {
        err = errno;
        coll_tp_error(env, "shm: cannot make the wake-up descriptor (eventfd) of a connection "
                      "to rank %d: %s%s", peer, strerror(err),
                      shm_nofile_hint(err, hint, sizeof(hint)));
        close(mfd);
        munmap(seg, seg_bytes);
        if (ledgered)
            coll_shm_ledger_release(seg_bytes);
        return collSystemError;
    }
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa;
    socklen_t len = shm_sockaddr(h.name, &sa);
    collResult_t res = collSuccess;
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, len) != 0) {
        err = errno;
        coll_tp_error(env, "shm: cannot connect to rank %d at @%s: %s%s", peer, h.name,
                       strerror(err), shm_nofile_hint(err, hint, sizeof(hint)));
        res = collRemoteError;
    } else {
        struct shm_hello hello = {.magic = SHM_MAGIC, .rank = env->rank,
                                  .nslots = nslots, .slot_bytes = slot_bytes,
                                  .seg_bytes = seg_bytes, .link = link};
        memcpy(hello.secret, env->secret, COLL_SECRET_BYTES);
        struct iovec iov = {.iov_base = &hello, .iov_len = sizeof(hello)};
        union {
            char buf[CMSG_SPACE(sizeof(int))];
            struct cmsghdr align;
        } u;
        memset(&u, 0, sizeof(u));
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                             .msg_controllen = sizeof(u.buf)};
        struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &mfd, sizeof(int));
        if (sendmsg(fd, &msg, MSG_NOSIGNAL) != (ssize_t)sizeof(hello)) {
            coll_tp_error(env, "shm: handshake with rank %d failed: %s", peer, strerror(errno));
            res = collRemoteError;
        }
    }
    close(mfd);
    if (res == collSuccess && own != NULL) {
        /* In-process: the hello stays readable after the close, and the bells
         * take the socket's place. */
        close(fd);
        fd = -1;
    } else if (res == collSuccess) {
        int fl = fcntl(fd, F_GETFL);
        (void)fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    }
    if (res == collSuccess)
        res = shm_conn_new(ctx, peer, true, fd, seg, seg_bytes, own, peer_bell, conn_p);
    if (res == collSuccess) {
        struct shm_conn *c = coll_container_of(*conn_p, struct shm_conn, base);
        c->link = own != NULL ? link : 0;
        c->ledgered = ledgered;
    }
    if (res != collSuccess) {
        if (fd >= 0)
            close(fd);
        munmap(seg, seg_bytes);
        if (ledgered)
            coll_shm_ledger_release(seg_bytes);
        if (own != NULL) {
            shm_local_drop(link, NULL);
            shm_local_unref2(own, peer_bell);
        }
        return res;
    }
    COLL_INFO(COLL_SUBSYS_SHM, "connected to rank %d: %zu KiB segment%s", peer, seg_bytes / 1024,
              own != NULL ? ", in this process" : "");
    return collSuccess;
}

static void shm_listener_update_fds(struct shm_listener *lis)
{
    lis->base.fds[0] = lis->lfd;
    int n = 1;
    for (int i = 0; i < lis->npend && n < COLL_CONN_MAX_FDS; i++)
        lis->base.fds[n++] = lis->pend[i].fd;
    lis->base.nfds = n;
}

/* Reads a hello from fd.  Returns 1 with a mapped segment, 0 when nothing has
 * arrived yet, -1 when the socket is to be dropped, -2 when the memfd could not
 * be received for want of descriptors (the hello was whole, its fd was not). */
static int shm_read_hello(struct shm_listener *lis, int fd, int *rank_p, void **seg_p,
                          size_t *bytes_p, uint64_t *link_p)
{
    const struct coll_tp_env *env = lis->ctx->env;
    struct shm_hello hello;
    struct iovec iov = {.iov_base = &hello, .iov_len = sizeof(hello)};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                         .msg_controllen = sizeof(u.buf)};
    ssize_t r = recvmsg(fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (r < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    *link_p = r == (ssize_t)sizeof(hello) ? hello.link : 0; /* refused too: its sender is told */
    int mfd = -1;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); r > 0 && cm; cm = CMSG_NXTHDR(&msg, cm))
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS &&
            cm->cmsg_len == CMSG_LEN(sizeof(int)))
            memcpy(&mfd, CMSG_DATA(cm), sizeof(int));
    if (r == (ssize_t)sizeof(hello) && (msg.msg_flags & MSG_CTRUNC) && mfd < 0 &&
        hello.magic == SHM_MAGIC && memcmp(hello.secret, env->secret, COLL_SECRET_BYTES) == 0)
        return -2; /* the kernel drops a passed descriptor it cannot install */
    bool ok = r == (ssize_t)sizeof(hello) && !(msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) &&
              mfd >= 0 && hello.magic == SHM_MAGIC &&
              memcmp(hello.secret, env->secret, COLL_SECRET_BYTES) == 0 && hello.rank >= 0 &&
              hello.rank < env->nranks && hello.nslots >= 2 && hello.nslots <= SHM_MAX_SLOTS &&
              hello.slot_bytes >= 4096 && hello.slot_bytes <= (64u << 20) &&
              hello.slot_bytes % 64 == 0 &&
              hello.seg_bytes == shm_seg_bytes(hello.nslots, hello.slot_bytes);
    struct stat st;
    if (ok && (fstat(mfd, &st) != 0 || (uint64_t)st.st_size < hello.seg_bytes))
        ok = false;
    void *seg = MAP_FAILED;
    if (ok) {
        seg = mmap(NULL, hello.seg_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
        struct shm_ctrl *ctrl = seg;
        if (seg == MAP_FAILED || ctrl->nslots != hello.nslots ||
            ctrl->slot_bytes != hello.slot_bytes) {
            if (seg != MAP_FAILED)
                munmap(seg, hello.seg_bytes);
            seg = MAP_FAILED;
            ok = false;
        }
    }
    if (mfd >= 0)
        close(mfd);
    if (!ok) {
        if (r != 0)
            COLL_WARN("shm: refused a connection: it did not show the communicator's secret "
                      "or a valid segment");
        return -1;
    }
    *rank_p = hello.rank;
    *seg_p = seg;
    *bytes_p = hello.seg_bytes;
    return 1;
}

/* Reads the hello on pending socket i.  True when *res_p is set: a new
 * connection in *conn_p, or an error; false when no hello has arrived, or it
 * was refused (the socket is dropped then). */
static bool shm_take_hello(struct shm_listener *lis, int i, struct coll_conn **conn_p,
                           collResult_t *res_p)
{
    const struct coll_tp_env *env = lis->ctx->env;
    char hint[256];
    int fd = lis->pend[i].fd, rank;
    void *seg;
    size_t bytes;
    uint64_t link = 0;
    int got = shm_read_hello(lis, fd, &rank, &seg, &bytes, &link);
    if (got == 0)
        return false;
    if (got == -2) {
        coll_tp_error(env, "shm: cannot receive a peer's segment: %s%s", strerror(EMFILE),
                      shm_nofile_hint(EMFILE, hint, sizeof(hint)));
        *res_p = collSystemError;
        return true;
    }
    lis->pend[i] = lis->pend[--lis->npend];
    shm_listener_update_fds(lis);
    if (got < 0) {
        close(fd);
        if (link != 0)
            shm_local_drop(link, lis);
        return false;
    }
    struct shm_bell *own = NULL, *peer_bell = NULL;
    if (link != 0) {
        /* A sender in this process: its side comes from the link, and the socket
         * has done its work. */
        close(fd);
        fd = -1;
        int took = shm_local_take(lis, link, seg, &own, &peer_bell);
        if (took < 0) {
            int err = errno ? errno : ENOMEM;
            coll_tp_error(env, "shm: cannot make the wake-up descriptor (eventfd) of a "
                          "connection from rank %d: %s%s", rank, strerror(err),
                          shm_nofile_hint(err, hint, sizeof(hint)));
            munmap(seg, bytes);
            *res_p = collSystemError;
            return true;
        }
        if (took == 0) {
            COLL_WARN("shm: refused a connection from rank %d: it names an in-process link "
                      "this process does not have", rank);
            munmap(seg, bytes);
            return false;
        }
    }
    COLL_INFO(COLL_SUBSYS_SHM, "accepted rank %d: %zu KiB segment%s", rank, bytes / 1024,
              own != NULL ? ", in this process" : "");
    *res_p = shm_conn_new(lis->ctx, rank, false, fd, seg, bytes, own, peer_bell, conn_p);
    if (*res_p != collSuccess) {
        munmap(seg, bytes);
        if (fd >= 0)
            close(fd);
        if (own != NULL)
            shm_local_unref2(own, peer_bell);
    }
    return true;
}

static collResult_t shm_accept(struct coll_conn *lbase, struct coll_conn **conn_p)
{
    struct shm_listener *lis = coll_container_of(lbase, struct shm_listener, base);
    *conn_p = NULL;
    const struct coll_tp_env *env = lis->ctx->env;
    char hint[256];
    collResult_t res;
    /* Hellos that arrived on sockets accepted before first. */
    for (int i = lis->npend - 1; i >= 0; i--)
        if (shm_take_hello(lis, i, conn_p, &res))
            return res;
    /* Then one socket at a time, its hello read at once: a sender writes it as
     * soon as it is connected, so only hellos still in flight keep a socket here
     * (taking every waiting sender first held one per sender: with 96 ranks as
     * threads, thousands at once).  Room for a hello from every rank at once (a
     * star's root, an all-to-all): a connection dropped here fails its sender.
     * Past that, strangers go. */
    int most = 2 * env->nranks > SHM_MIN_PENDING ? 2 * env->nranks : SHM_MIN_PENDING;
    for (;;) {
        int fd = accept4(lis->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE) {
                int err = errno;
                coll_tp_error(env, "shm: cannot accept a peer's connection: %s%s",
                               strerror(err), shm_nofile_hint(err, hint, sizeof(hint)));
                return collSystemError;
            }
            break;
        }
        if (lis->npend == lis->pend_cap && lis->pend_cap < most) {
            int cap = lis->pend_cap ? 2 * lis->pend_cap : 16;
            struct shm_pending *p = realloc(lis->pend, (size_t)cap * sizeof(*p));
            if (p != NULL) {
                lis->pend = p;
                lis->pend_cap = cap;
            }
        }
        if (lis->npend == lis->pend_cap) {
            close(fd);
            continue;
        }
        lis->pend[lis->npend++].fd = fd;
        if (shm_take_hello(lis, lis->npend - 1, conn_p, &res))
            return res;
    }
    shm_listener_update_fds(lis);
    return collSuccess;
}

/* Wakes the other side if it sleeps on *flag. */
static void shm_wake(struct shm_conn *c, _Atomic uint32_t *flag)
{
    if (atomic_load(flag) && atomic_exchange(flag, 0)) {
        char b = 1;
        if (c->local)
            shm_bell_ring(c->peer_bell);
        else
            (void)send(c->base.fds[0], &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    }
}

/* Reads the wake-up bytes (the bell's count); notes a closed socket (the
 * peer's closed flag).  Returns whether anything was read. */
static bool shm_drain(struct shm_conn *c)
{
    if (c->local) {
        uint64_t v;
        bool rang = read(c->base.fds[0], &v, sizeof(v)) == (ssize_t)sizeof(v);
        shm_local_check(c);
        if (atomic_load(&c->ctrl->closed[c->base.is_send ? 1 : 0]))
            c->peer_gone = true;
        return rang;
    }
    char buf[64];
    bool got = false;
    for (;;) {
        ssize_t r = recv(c->base.fds[0], buf, sizeof(buf), MSG_DONTWAIT);
        if (r > 0) {
            got = true;
            continue;
        }
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
            c->peer_gone = true;
        if (r < 0 && errno == EINTR)
            continue;
        return got;
    }
}

/* Sender: copies queued requests into free slots. */
static bool shm_progress_send(struct shm_conn *c)
{
    struct shm_ctrl *ctrl = c->ctrl;
    bool moved = false;
    uint64_t tail = atomic_load_explicit(&ctrl->tail, memory_order_acquire);
    for (uint64_t q = c->head; q < c->tail; q++) {
        struct shm_req *r = &c->reqs[q % SHM_REQ_CAP];
        while (r->done_bytes < r->size) {
            if (c->next - tail >= c->nslots) {
                tail = atomic_load_explicit(&ctrl->tail, memory_order_acquire);
                if (c->next - tail >= c->nslots)
                    goto out;
            }
            size_t k = r->size - r->done_bytes;
            if (k > c->slot_bytes)
                k = c->slot_bytes;
            uint32_t s = (uint32_t)(c->next % c->nslots);
            memcpy(c->slots + (size_t)s * c->slot_bytes, r->buf + r->done_bytes, k);
            ctrl->len[s] = (uint32_t)k;
            r->done_bytes += k;
            c->next++;
            atomic_store(&ctrl->head, c->next); /* seq_cst: ordered before the flag's load */
            moved = true;
        }
    }
out:
    if (moved)
        shm_wake(c, &ctrl->recv_sleep);
    return moved;
}

/* Receiver: the slots the sender has published. */
static uint64_t shm_arrived(struct coll_slot_ring *r)
{
    struct shm_conn *c = coll_container_of(r, struct shm_conn, rx);
    return atomic_load_explicit(&c->ctrl->head, memory_order_acquire);
}

/* Receiver: a slot is all read: it goes back to the sender. */
static void shm_freed(struct coll_slot_ring *r)
{
    struct shm_conn *c = coll_container_of(r, struct shm_conn, rx);
    atomic_store(&c->ctrl->tail, r->next);
    shm_wake(c, &c->ctrl->send_sleep);
}

/* Receiver: a slot whose length the sender wrote out of range. */
static void shm_bad_slot(struct shm_conn *c, size_t len)
{
    COLL_WARN("shm: rank %d published a slot of %zu bytes (slots hold %u)", c->base.peer, len,
              c->slot_bytes);
    c->failed = collInternalError;
}

/* Receiver: copies arrived fragments into the queued requests.  A slot may be
 * taken in several parts (a receive cut differently from the send, as when
 * sizes mismatch: the layer above checks). */
static bool shm_progress_recv(struct shm_conn *c)
{
    if (atomic_load_explicit(&c->ctrl->head, memory_order_acquire) == c->rx.next)
        return false; /* nothing new: the common case of a poll */
    bool moved = false;
    for (uint64_t q = c->head; q < c->tail; q++) {
        struct shm_req *r = &c->reqs[q % SHM_REQ_CAP];
        size_t before = r->done_bytes;
        enum coll_slot_look got = coll_slot_ring_copy(&c->rx, r->buf, r->size, &r->done_bytes);
        moved = moved || r->done_bytes != before;
        if (got == COLL_SLOT_BAD)
            shm_bad_slot(c, c->rx.len[coll_slot_ring_index(&c->rx, c->rx.next)]);
        if (got != COLL_SLOT_DATA)
            return moved;
    }
    return moved;
}

/* A message this large or larger maps the whole ring in (shm_map_in). */
#define SHM_MAP_IN_BYTES (16 * 1024)

/* Fills this side's page tables for all the slots at once, the first time a
 * message of SHM_MAP_IN_BYTES or more passes.  The pages themselves exist from
 * the start (lib/base/memfd.c reserves them), but each mapping takes a fault
 * per 4 KiB page the first time it touches it: about 1 us on this host, so
 * the first trips of large messages round a 4 MiB ring took 3-4 times as long
 * as later ones (and the planner's init probe measured that instead of the
 * copy).  One madvise costs about the same as the faults but is paid in one
 * place, once; pairs that only ever carry small messages touch a page per slot
 * and never pay it.  A kernel without MADV_POPULATE_* (before 5.14) refuses
 * it, and the faults come as before. */
static void shm_map_in(struct shm_conn *c)
{
    c->mapped_in = true;
    (void)madvise(c->slots, (size_t)c->nslots * c->slot_bytes,
                  c->base.is_send ? MADV_POPULATE_WRITE : MADV_POPULATE_READ);
}

static collResult_t shm_post(struct coll_conn *base, void *buf, size_t n, struct coll_req **r_p)
{
    struct shm_conn *c = coll_container_of(base, struct shm_conn, base);
    if (c->failed != collSuccess)
        return c->failed;
    if (c->tail - c->head == SHM_REQ_CAP) {
        COLL_WARN("shm: more than %d requests in flight to rank %d", SHM_REQ_CAP, base->peer);
        return collInternalError;
    }
    if (n >= SHM_MAP_IN_BYTES && !c->mapped_in)
        shm_map_in(c);
    struct shm_req *r = &c->reqs[c->tail % SHM_REQ_CAP];
    *r = (struct shm_req){.base.conn = base, .buf = buf, .size = n};
    c->tail++;
    if (base->is_send)
        shm_progress_send(c); /* start at once: most of a small message's latency */
    *r_p = &r->base;
    return collSuccess;
}

static collResult_t shm_isend(struct coll_conn *c, const void *buf, size_t n, void *mh,
                              unsigned flags, struct coll_req **r_p)
{
    return shm_post(c, (void *)(uintptr_t)buf, n, r_p);
}

static collResult_t shm_irecv(struct coll_conn *c, void *buf, size_t n, void *mh,
                              struct coll_req **r_p)
{
    return shm_post(c, buf, n, r_p);
}

/* A request that cannot finish: the peer is gone, or shutdown() was called.
 * `gone` is what was known of the socket before the pass that moved nothing: a
 * peer publishes its last bytes before it closes, so only a pass made after the
 * close was seen proves that nothing more will come. */
static collResult_t shm_check_alive(struct shm_conn *c, bool moved, bool gone)
{
    if (atomic_load(&c->shut)) {
        c->failed = collRemoteError;
        return c->failed;
    }
    /* Look at the socket now and then while spinning; the core's poll() looks at it
     * whenever it blocks. */
    if (!moved && (++c->idle_tests & 255) == 0)
        shm_drain(c);
    if (gone && !moved) {
        c->base.err_no = 0;
        c->failed = collRemoteError;
    }
    return c->failed;
}

static collResult_t shm_test(struct coll_req *rbase, bool *done_p, size_t *n_p)
{
    struct shm_req *r = coll_container_of(rbase, struct shm_req, base);
    struct shm_conn *c = coll_container_of(rbase->conn, struct shm_conn, base);
    *done_p = false;
    if (c->failed != collSuccess)
        return c->failed;
    if (r->done_bytes < r->size) {
        bool gone = c->peer_gone;
        bool moved = c->base.is_send ? shm_progress_send(c) : shm_progress_recv(c);
        if (c->failed != collSuccess)
            return c->failed;
        /* A receiver still drains what a dead sender published: the error comes
         * only once nothing moves. */
        if (r->done_bytes < r->size)
            return shm_check_alive(c, moved, gone);
    }
    /* A send is complete once its bytes sit in the slots: the receiver may
     * consume them after this rank has moved on. */
    *done_p = true;
    if (n_p)
        *n_p = r->size;
    r->reported = true;
    while (c->head < c->tail && c->reqs[c->head % SHM_REQ_CAP].reported)
        c->head++;
    return collSuccess;
}

static bool shm_wait_prepare(struct coll_req *rbase)
{
    struct shm_conn *c = coll_container_of(rbase->conn, struct shm_conn, base);
    struct shm_ctrl *ctrl = c->ctrl;
    if (shm_drain(c) && c->local)
        return true; /* the ring may have been another connection's (see the top) */
    if (c->peer_gone || atomic_load(&c->shut))
        return true; /* test() reports it */
    if (c->base.is_send) {
        atomic_store(&ctrl->send_sleep, 1);
        if (c->next - atomic_load(&ctrl->tail) < c->nslots) {
            atomic_store(&ctrl->send_sleep, 0);
            return true;
        }
    } else {
        atomic_store(&ctrl->recv_sleep, 1);
        if (atomic_load(&ctrl->head) != c->rx.next) {
            atomic_store(&ctrl->recv_sleep, 0);
            return true;
        }
    }
    return false;
}

/* Zero-copy receive: the next fragment of a message of `want` more bytes, in
 * the peer's slot, for the caller to read (reduce from it) and then release. */
static collResult_t shm_recv_peek(struct coll_conn *base, size_t want, const void **p,
                                  size_t *len_p)
{
    struct shm_conn *c = coll_container_of(base, struct shm_conn, base);
    *p = NULL;
    if (c->failed != collSuccess)
        return c->failed;
    if (c->head != c->tail) {
        COLL_WARN("shm: zero-copy receive while receives are queued from rank %d", base->peer);
        return collInternalError;
    }
    if (want >= SHM_MAP_IN_BYTES && !c->mapped_in)
        shm_map_in(c);
    bool gone = c->peer_gone;
    if (coll_slot_ring_peek(&c->rx, want, p, len_p) == COLL_SLOT_BAD)
        shm_bad_slot(c, *len_p);
    if (c->failed != collSuccess)
        return c->failed;
    if (*p == NULL)
        return shm_check_alive(c, false, gone);
    return collSuccess;
}

/* What has arrived and not been taken, copied out without taking it. */
static collResult_t shm_recv_probe(struct coll_conn *base, void *dst, size_t want,
                                   size_t *got_p)
{
    struct shm_conn *c = coll_container_of(base, struct shm_conn, base);
    if (c->failed != collSuccess)
        return c->failed;
    if (c->head != c->tail)
        return collSuccess; /* a receive is queued: what arrives is its */
    const char *p;
    size_t len;
    bool gone = c->peer_gone;
    enum coll_slot_look got = coll_slot_ring_look(&c->rx, want, &p, &len);
    if (got == COLL_SLOT_BAD)
        shm_bad_slot(c, len);
    if (c->failed != collSuccess)
        return c->failed;
    if (got != COLL_SLOT_DATA)
        return shm_check_alive(c, false, gone);
    memcpy(dst, p, len);
    *got_p = len;
    return collSuccess;
}

static void shm_recv_release(struct coll_conn *base)
{
    struct shm_conn *c = coll_container_of(base, struct shm_conn, base);
    coll_slot_ring_unpeek(&c->rx);
}

/* In-process: tells the peer this side is done, as a socket's close would. */
static void shm_local_close(struct shm_conn *c)
{
    atomic_store(&c->ctrl->closed[c->base.is_send ? 0 : 1], 1);
    shm_bell_ring(c->peer_bell);
}

static void shm_shutdown(struct coll_conn *base)
{
    if (base->peer >= 0) {
        struct shm_conn *c = coll_container_of(base, struct shm_conn, base);
        atomic_store(&c->shut, true);
        if (c->local) {
            /* The bell is shared: a shutdown of the descriptor would end the
             * context's other connections too. */
            shm_local_close(c);
            shm_bell_ring(c->own); /* a wait on this connection in another thread */
            return;
        }
    }
    for (int i = 0; i < base->nfds; i++)
        (void)shutdown(base->fds[i], SHUT_RDWR);
}

static collResult_t shm_close(struct coll_conn *base)
{
    if (base == NULL)
        return collSuccess;
    if (base->peer < 0) {
        struct shm_listener *lis = coll_container_of(base, struct shm_listener, base);
        shm_local_remove_listener(lis);
        close(lis->lfd);
        for (int i = 0; i < lis->npend; i++)
            close(lis->pend[i].fd);
        free(lis->pend);
        free(lis);
        return collSuccess;
    }
    struct shm_conn *c = coll_container_of(base, struct shm_conn, base);
    if (c->local) {
        shm_local_close(c);
        shm_local_unref2(c->own, c->peer_bell);
    } else {
        close(base->fds[0]);
    }
    munmap(c->ctrl, c->seg_bytes);
    if (c->ledgered)
        coll_shm_ledger_release(c->seg_bytes);
    free(c);
    return collSuccess;
}

const struct coll_transport coll_shm_transport = {
    .abi = COLL_TRANSPORT_ABI,
    .name = "shm",
    .caps = COLL_TP_CAP_HOST_MEM | COLL_TP_CAP_SHARED_MEM,
    /* A message is a few stores and waiting ranks spin, so there are no wake-ups
     * to count, and a rank's messages cost little beside a round (measured, 8 B,
     * 8 ranks on 2 cores: the star's 2 rounds with 14 messages at the root take
     * 8-10 us, recursive doubling's 3 rounds of 2 messages 12-14 us, the tree's 6
     * rounds 15 us). */
    .plan_msg_ratio = 0.1,
    .plan_wake_ratio = 0.0,
    .cheap_poll = true,
    .init = shm_init,
    .fini = shm_fini,
    .can_connect = shm_can_connect,
    .listen = shm_listen,
    .connect = shm_connect,
    .accept = shm_accept,
    .isend = shm_isend,
    .irecv = shm_irecv,
    .test = shm_test,
    .wait_prepare = shm_wait_prepare,
    .recv_peek = shm_recv_peek,
    .recv_probe = shm_recv_probe,
    .recv_release = shm_recv_release,
    .shutdown = shm_shutdown,
    .close = shm_close,
};
