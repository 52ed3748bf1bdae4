/* The flight recorder (flight.h): a ring of the communicator's last
 * COLL_FLIGHT_RECORDS calls, written by the thread that runs them, printed when
 * the communicator fails.
 *
 *   recs[0] recs[1] ... recs[31]      head = calls recorded so far
 *   #33     #34         #32           the newest is recs[(head - 1) % 32]
 *
 * Writing costs no lock and no allocation: a call rewrites the oldest record
 * (begin), the progress engine adds the bytes of each request to its peer's
 * slot when the request is posted and when it completes, and end sets the
 * state.  The reader may be another thread (collCommAbort while a call runs),
 * so every field is an atomic, and a record's rewrite is bracketed by a
 * sequence number (odd while it changes): the reader retries a record whose
 * number moved, and so never prints half of one call and half of the next.
 * Inside the bracket the writer stores with release and the reader loads with
 * acquire order, which keeps the fields inside it without fences (and costs
 * plain moves on x86-64); the hot counters are relaxed.  The byte counters
 * change outside that bracket, one store each, so a line may show the sent
 * bytes of one instant and the received bytes of the next; that is all.
 *
 * The time of the last movement, for "no progress for N ms", is taken lazily:
 * completions only count, and the progress engine, which reads the clock when
 * a pass moved nothing, turns a changed count into a time (coll_flight_idle).
 */
#include "flight.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "param.h"
#include "reduce.h"
#include "transport.h"

#define LD(x) atomic_load_explicit(&(x), memory_order_relaxed)
#define ST(x, v) atomic_store_explicit(&(x), (v), memory_order_relaxed)
/* A record's fields inside its rewrite: release stores and acquire loads (plain
 * moves on x86-64) order them against the sequence number without fences. */
#define STR(x, v) atomic_store_explicit(&(x), (v), memory_order_release)
#define LDA(x) atomic_load_explicit(&(x), memory_order_acquire)

/* Spans shorter than this (three ticks of the coarse clock at 250 Hz) are only
 * said to be short. */
#define FLIGHT_SHORT_NS (12 * 1000000)

struct flight_peer {
    atomic_int peer;                /* -1: the other peers together */
    _Atomic uint64_t sent, sent_posted, recvd, recvd_posted;
};

struct flight_rec {
    atomic_uint ver;                /* odd while the owner rewrites the record */
    _Atomic(const char *) name;
    _Atomic(const char *) algo;
    _Atomic uint64_t seq;
    _Atomic uint64_t count;
    atomic_int dtype, op, root, peer, state, result;
    _Atomic int64_t start_ns, end_ns;
    atomic_uint tp_mask;            /* transports posted on (coll_flight_posted) */
    atomic_bool shared, cut_set;
    _Atomic uint64_t cut_bytes, cut_pieces;
    atomic_int npeers;              /* slots of peers[] in use, the "other" slot apart */
    struct flight_peer peers[COLL_FLIGHT_PEERS + 1]; /* [COLL_FLIGHT_PEERS]: other peers */
};

struct coll_flight {
    struct flight_rec recs[COLL_FLIGHT_RECORDS];
    _Atomic uint64_t head;          /* records opened so far */
    atomic_bool dumped;             /* printed once already */
    /* The owner thread's alone. */
    struct flight_rec *cur;         /* the open record, NULL between calls */
    int hint;                       /* slot of the last peer looked up */
    uint64_t moves, moves_seen;     /* completions, and as of last_move_ns */
    int64_t last_move_ns;
    const struct coll_transport *tp; /* the last transport posted on, and its bit */
    unsigned tp_bit;
};

collResult_t coll_flight_init(struct coll_comm *comm)
{
    struct coll_flight *f;
    COLL_CHECK(coll_calloc(&f, 1));
    for (int i = 0; i < COLL_FLIGHT_RECORDS; i++)
        for (int k = 0; k <= COLL_FLIGHT_PEERS; k++)
            atomic_init(&f->recs[i].peers[k].peer, -1);
    comm->flight = f;
    return collSuccess;
}

void coll_flight_fini(struct coll_comm *comm)
{
    free(comm->flight);
    comm->flight = NULL;
}

void coll_flight_begin(struct coll_comm *comm, const struct coll_flight_desc *d)
{
    struct coll_flight *f = comm->flight;
    if (f == NULL)
        return;
    uint64_t h = LD(f->head);
    struct flight_rec *r = &f->recs[h % COLL_FLIGHT_RECORDS];
    unsigned v = LD(r->ver);
    ST(r->ver, v + 1);
    STR(r->name, d->name);
    STR(r->algo, d->algo);
    STR(r->seq, comm->seq);
    STR(r->count, (uint64_t)d->count);
    STR(r->dtype, d->dtype);
    STR(r->op, d->op);
    STR(r->root, d->root);
    STR(r->peer, d->peer);
    STR(r->state, COLL_FLIGHT_ISSUED);
    STR(r->result, collSuccess);
    STR(r->start_ns, comm->op_start_ns); /* set by coll_exec_begin just before */
    STR(r->end_ns, 0);
    STR(r->tp_mask, 0u);
    STR(r->shared, false);
    STR(r->cut_set, false);
    STR(r->cut_bytes, 0);
    STR(r->cut_pieces, 0);
    int used = LD(r->npeers);
    for (int k = 0; k < used; k++) {
        struct flight_peer *p = &r->peers[k];
        STR(p->peer, -1);
        STR(p->sent, 0);
        STR(p->sent_posted, 0);
        STR(p->recvd, 0);
        STR(p->recvd_posted, 0);
    }
    struct flight_peer *o = &r->peers[COLL_FLIGHT_PEERS];
    STR(o->sent, 0);
    STR(o->sent_posted, 0);
    STR(o->recvd, 0);
    STR(o->recvd_posted, 0);
    STR(r->npeers, 0);
    atomic_store_explicit(&r->ver, v + 2, memory_order_release);
    atomic_store_explicit(&f->head, h + 1, memory_order_release);
    f->cur = r;
    f->hint = 0;
    f->last_move_ns = comm->op_start_ns;
    f->moves_seen = f->moves;
}

void coll_flight_swap(struct coll_comm *comm, struct coll_flight_call *save,
                      const struct coll_flight_call *load)
{
    struct coll_flight *f = comm->flight;
    if (f == NULL)
        return;
    if (save != NULL)
        *save = (struct coll_flight_call){.cur = f->cur, .hint = f->hint,
                                          .moves_seen = f->moves_seen,
                                          .last_move_ns = f->last_move_ns};
    if (load == NULL) {
        f->cur = NULL;
        f->hint = 0;
        return;
    }
    f->cur = load->cur;
    f->hint = load->hint;
    f->last_move_ns = load->last_move_ns;
    /* Completions are counted for the thread, not per call: a call that comes
     * back sees the others' moves as its own, so it never looks idle longer
     * than the thread was. */
    f->moves_seen = load->moves_seen;
}

void coll_flight_algo(struct coll_comm *comm, const char *algo)
{
    if (comm->flight != NULL && comm->flight->cur != NULL)
        ST(comm->flight->cur->algo, algo);
}

void coll_flight_end(struct coll_comm *comm, collResult_t res)
{
    struct coll_flight *f = comm->flight;
    if (f == NULL || f->cur == NULL)
        return;
    struct flight_rec *r = f->cur;
    ST(r->result, (int)res);
    ST(r->end_ns, coll_coarse_ns()); /* the start's clock (coll_exec_begin) */
    ST(r->state, res == collSuccess ? COLL_FLIGHT_DONE : COLL_FLIGHT_FAILED);
    f->cur = NULL;
    if (res != collSuccess && atomic_load(&comm->async_error) != collSuccess)
        coll_flight_dump(comm, coll_result_name(res));
}

/* The slot of peer in the open record r: found, added, or the shared one. */
static struct flight_peer *flight_slot(struct coll_flight *f, struct flight_rec *r, int peer)
{
    if (LD(r->peers[f->hint].peer) == peer)
        return &r->peers[f->hint];
    int n = LD(r->npeers);
    for (int k = 0; k < n; k++)
        if (LD(r->peers[k].peer) == peer) {
            f->hint = k;
            return &r->peers[k];
        }
    if (n == COLL_FLIGHT_PEERS)
        return &r->peers[COLL_FLIGHT_PEERS];
    ST(r->peers[n].peer, peer);
    /* Release: a reader that sees the new count sees the slot's peer too. */
    atomic_store_explicit(&r->npeers, n + 1, memory_order_release);
    f->hint = n;
    return &r->peers[n];
}

void coll_flight_cut(struct coll_comm *comm, size_t piece_bytes, size_t pieces)
{
    struct coll_flight *f = comm->flight;
    if (f == NULL || f->cur == NULL || LD(f->cur->cut_set))
        return;
    ST(f->cur->cut_bytes, (uint64_t)piece_bytes);
    ST(f->cur->cut_pieces, (uint64_t)pieces);
    ST(f->cur->cut_set, true);
}

void coll_flight_shared(struct coll_comm *comm)
{
    struct coll_flight *f = comm->flight;
    if (f != NULL && f->cur != NULL)
        ST(f->cur->shared, true);
}

void coll_flight_posted(struct coll_comm *comm, const struct coll_conn *c, size_t n)
{
    struct coll_flight *f = comm->flight;
    if (f == NULL || f->cur == NULL)
        return;
    if (c->tp != f->tp) {
        f->tp = c->tp;
        f->tp_bit = coll_transport_bit(c->tp);
    }
    unsigned mask = LD(f->cur->tp_mask);
    if (!(mask & f->tp_bit))
        ST(f->cur->tp_mask, mask | f->tp_bit);
    struct flight_peer *p = flight_slot(f, f->cur, c->peer);
    if (c->is_send)
        ST(p->sent_posted, LD(p->sent_posted) + n);
    else
        ST(p->recvd_posted, LD(p->recvd_posted) + n);
}

void coll_flight_moved(struct coll_comm *comm, const struct coll_conn *c, size_t n)
{
    struct coll_flight *f = comm->flight;
    if (f == NULL || f->cur == NULL)
        return;
    struct flight_rec *r = f->cur;
    struct flight_peer *p = flight_slot(f, r, c->peer);
    if (c->is_send)
        ST(p->sent, LD(p->sent) + n);
    else
        ST(p->recvd, LD(p->recvd) + n);
    f->moves++;
    if (LD(r->state) == COLL_FLIGHT_ISSUED)
        ST(r->state, COLL_FLIGHT_RUNNING);
}

int64_t coll_flight_idle(struct coll_comm *comm, int64_t now)
{
    struct coll_flight *f = comm->flight;
    if (f == NULL || f->cur == NULL)
        return -1;
    if (f->moves != f->moves_seen) {
        f->moves_seen = f->moves;
        f->last_move_ns = now;
    }
    return (now - f->last_move_ns) / 1000000;
}

bool coll_flight_peer_bytes(const struct coll_comm *comm, int peer, uint64_t *sent_p,
                            uint64_t *sent_posted_p, uint64_t *recvd_p,
                            uint64_t *recvd_posted_p)
{
    const struct coll_flight *f = comm->flight;
    if (f == NULL || f->cur == NULL)
        return false;
    const struct flight_rec *r = f->cur;
    int n = LD(r->npeers);
    for (int k = 0; k < n; k++) {
        const struct flight_peer *p = &r->peers[k];
        if (LD(p->peer) != peer)
            continue;
        *sent_p = LD(p->sent);
        *sent_posted_p = LD(p->sent_posted);
        *recvd_p = LD(p->recvd);
        *recvd_posted_p = LD(p->recvd_posted);
        return true;
    }
    return false;
}

static const char *const state_names[] = {
    [COLL_FLIGHT_ISSUED] = "issued", [COLL_FLIGHT_RUNNING] = "running",
    [COLL_FLIGHT_DONE] = "done", [COLL_FLIGHT_FAILED] = "failed",
};

/* Copies record r into *s (struct coll_flight_copy, flight.h: the peers in use,
 * then the other peers together at peers[npeers]), for the log, the file and
 * the status responder; false when the owner rewrote it meanwhile. */
static bool flight_read(const struct flight_rec *r, struct coll_flight_copy *s)
{
    unsigned v1 = atomic_load_explicit(&r->ver, memory_order_acquire);
    if (v1 & 1u)
        return false;
    *s = (struct coll_flight_copy){
        .name = LDA(r->name), .algo = LDA(r->algo), .seq = LDA(r->seq), .count = LDA(r->count),
        .dtype = LDA(r->dtype), .op = LDA(r->op), .root = LDA(r->root), .peer = LDA(r->peer),
        .state = LDA(r->state), .result = LDA(r->result), .start_ns = LDA(r->start_ns),
        .end_ns = LDA(r->end_ns), .tp_mask = LDA(r->tp_mask), .shared = LDA(r->shared),
        .cut_set = LDA(r->cut_set), .cut_bytes = LDA(r->cut_bytes),
        .cut_pieces = LDA(r->cut_pieces)};
    int n = atomic_load_explicit(&r->npeers, memory_order_acquire);
    s->npeers = n < 0 ? 0 : n > COLL_FLIGHT_PEERS ? COLL_FLIGHT_PEERS : n;
    for (int k = 0; k <= s->npeers; k++) {
        const struct flight_peer *p = &r->peers[k < s->npeers ? k : COLL_FLIGHT_PEERS];
        s->peers[k] = (struct coll_flight_copy_peer){
            .peer = k < s->npeers ? LDA(p->peer) : -1, .sent = LDA(p->sent),
            .sent_posted = LDA(p->sent_posted), .recvd = LDA(p->recvd),
            .recvd_posted = LDA(p->recvd_posted)};
    }
    return atomic_load_explicit(&r->ver, memory_order_relaxed) == v1;
}

/* Reads record r, retrying while the owner rewrites it; false when it never held
 * still. */
static bool flight_read_retry(const struct flight_rec *r, struct coll_flight_copy *s)
{
    for (int tries = 0; tries < 100; tries++)
        if (flight_read(r, s))
            return true;
    return false;
}

static void flight_put_peer(char *buf, size_t cap, size_t *len,
                            const struct coll_flight_copy_peer *p,
                            bool first)
{
    uint64_t s = p->sent, sp = p->sent_posted, r = p->recvd, rp = p->recvd_posted;
    if (p->peer < 0 && s == 0 && sp == 0 && r == 0 && rp == 0)
        return;
    if (p->peer >= 0)
        coll_buf_printf(buf, cap, len, "%srank %d", first ? "" : ", ", p->peer);
    else
        coll_buf_printf(buf, cap, len, "%sother ranks", first ? "" : ", ");
    /* Bytes completed / posted: a receive stuck at 0/N names the silent peer. */
    coll_buf_printf(buf, cap, len, " sent %llu/%llu B recv %llu/%llu B", (unsigned long long)s,
               (unsigned long long)sp, (unsigned long long)r, (unsigned long long)rp);
}

/* Formats record s into line. */
static void flight_format(const struct coll_flight_copy *s, int64_t now, char *line,
                          size_t cap)
{
    unsigned long long seq = s->seq, count = s->count;
    int state = s->state;
    size_t len = 0;
    coll_buf_printf(line, cap, &len, "  #%llu %s", seq, s->name ? s->name : "?");
    if (s->dtype >= 0)
        coll_buf_printf(line, cap, &len, " %llu x %s", count,
                        coll_dtype_name((collDataType_t)s->dtype));
    else
        coll_buf_printf(line, cap, &len, " of %llu message(s)", count);
    if (s->op >= 0)
        coll_buf_printf(line, cap, &len, " %s", coll_op_name((collRedOp_t)s->op));
    if (s->root >= 0)
        coll_buf_printf(line, cap, &len, " root %d", s->root);
    if (s->peer >= 0)
        coll_buf_printf(line, cap, &len, " peer %d", s->peer);
    coll_buf_printf(line, cap, &len, " via %s: %s", s->algo ? s->algo : "?",
               (unsigned)state < 4 ? state_names[state] : "?");
    if (state == COLL_FLIGHT_FAILED)
        coll_buf_printf(line, cap, &len, " (%s)", coll_result_name((collResult_t)s->result));
    coll_buf_printf(line, cap, &len, ", started %lld ms ago",
                    (long long)((now - s->start_ns) / 1000000));
    /* Both ends are on the coarse clock: a span under a few of its ticks says
     * little more than that it was short. */
    int64_t start = s->start_ns, end = s->end_ns;
    if (end > 0 && end - start < FLIGHT_SHORT_NS)
        coll_buf_printf(line, cap, &len, ", took under %d ms", FLIGHT_SHORT_NS / 1000000);
    else if (end > 0)
        coll_buf_printf(line, cap, &len, ", took %.0f ms", (double)(end - start) / 1e6);
    coll_buf_printf(line, cap, &len, "%s", s->npeers > 0 ? "; " : "");
    for (int k = 0; k < s->npeers; k++)
        flight_put_peer(line, cap, &len, &s->peers[k], k == 0);
    flight_put_peer(line, cap, &len, &s->peers[s->npeers], s->npeers == 0);
}

/* COLL_FLIGHT_DIR: the records in a file of that directory, one per rank and
 * communicator, for collinfo --flight (tools/flight_report.c reads the format;
 * docs/reliability.md describes it).  Written aside and renamed, so that a
 * reader never sees half a file. */
struct flight_file {
    const char *dir;
    FILE *f;
    char path[4096], tmp[4096];
};

/* What every rank of comm shares and no other communicator does: a hash of its
 * secret and of rank 0's record (host, pid, bootstrap address), so that jobs
 * that reuse one COLL_SECRET stay apart.  Many secrets share each of its 2^64
 * values, so it does not give the secret back (though it cannot make a
 * guessable COLL_SECRET safe). */
static uint64_t flight_comm_hash(const struct coll_comm *comm)
{
    uint64_t h = 1469598103934665603ULL;
#define FLIGHT_MIX(p, n)                                                                  \
    for (size_t i_ = 0; i_ < (n); i_++)                                                   \
        h = (h ^ ((const uint8_t *)(p))[i_]) * 1099511628211ULL
    FLIGHT_MIX("coll-flight", 11);
    FLIGHT_MIX(comm->secret, COLL_SECRET_BYTES);
    int32_t n = comm->nranks;
    FLIGHT_MIX(&n, sizeof(n));
    if (comm->peers != NULL) {
        const struct coll_rank_info *r0 = &comm->peers[0].info;
        uint32_t alen = r0->boot_addrlen;
        if (alen > sizeof(r0->boot_addr))
            alen = sizeof(r0->boot_addr);
        FLIGHT_MIX(&r0->pid, sizeof(r0->pid));
        FLIGHT_MIX(&r0->host_hash, sizeof(r0->host_hash));
        FLIGHT_MIX(&r0->boot_addr, alen);
    }
#undef FLIGHT_MIX
    /* Spread every input bit over the whole value (splitmix64's finaliser). */
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebULL;
    h ^= h >> 31;
    return h;
}

/* Writes "key s" as one line, control characters (newlines among them) as
 * spaces: a free-text value is the rest of its line. */
static void flight_put_text(FILE *f, const char *key, const char *s)
{
    fprintf(f, "%s ", key);
    for (; *s != '\0'; s++)
        fputc((unsigned char)*s < 0x20 || *s == 0x7f ? ' ' : *s, f);
    fputc('\n', f);
}

static int64_t flight_wall_us(int64_t t_ns, int64_t now_ns, int64_t wall_ns)
{
    return t_ns > 0 ? (wall_ns - (now_ns - t_ns)) / 1000 : 0;
}

static void flight_file_warn(const struct flight_file *ff, int rank, const char *what,
                             const char *path, int err)
{
    COLL_WARN("COLL_FLIGHT_DIR %s: rank %d's flight record is not written: %s %s: %s "
              "(errno %d)", ff->dir, rank, what, path, strerror(err), err);
}

/* Opens the file of comm's records in COLL_FLIGHT_DIR and writes its header;
 * false (and one WARN) when it cannot, or when the variable is unset. */
static bool flight_file_open(struct coll_comm *comm, const char *why, uint64_t head,
                             struct flight_file *ff)
{
    ff->dir = coll_param_str(COLL_PARAM_FLIGHT_DIR);
    ff->f = NULL;
    if (ff->dir == NULL)
        return false;
    uint64_t id = flight_comm_hash(comm);
    int pid = (int)getpid();
    int a = snprintf(ff->path, sizeof(ff->path), "%s/flight-%016llx-%d-of-%d-%d.txt", ff->dir,
                     (unsigned long long)id, comm->rank, comm->nranks, pid);
    int b = snprintf(ff->tmp, sizeof(ff->tmp), "%s/.flight-%016llx-%d-of-%d-%d.tmp", ff->dir,
                     (unsigned long long)id, comm->rank, comm->nranks, pid);
    if (a < 0 || b < 0 || (size_t)a >= sizeof(ff->path) || (size_t)b >= sizeof(ff->tmp)) {
        flight_file_warn(ff, comm->rank, "path too long:", ff->dir, ENAMETOOLONG);
        return false;
    }
    /* No symbolic link followed, and a FIFO in the way does not block. */
    int fd = open(ff->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK,
                  0644);
    if (fd < 0) {
        flight_file_warn(ff, comm->rank, "cannot create", ff->tmp, errno);
        return false;
    }
    ff->f = fdopen(fd, "w");
    if (ff->f == NULL) {
        flight_file_warn(ff, comm->rank, "cannot write", ff->tmp, errno);
        close(fd);
        unlink(ff->tmp);
        return false;
    }
    bool aborted = strcmp(why, "collCommAbort") == 0, revoked = strcmp(why, "collCommRevoke") == 0;
    char host[256] = "";
    if (gethostname(host, sizeof(host) - 1) != 0)
        snprintf(host, sizeof(host), "unknown");
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    FILE *f = ff->f;
    fprintf(f, "COLL-FLIGHT %d\n", COLL_FLIGHT_FILE_VERSION);
    fprintf(f, "comm %016llx\n", (unsigned long long)id);
    if (comm->name[0] != '\0')
        flight_put_text(f, "name", comm->name);
    fprintf(f, "rank %d\nnranks %d\n", comm->rank, comm->nranks);
    flight_put_text(f, "host", host);
    fprintf(f, "pid %d\n", pid);
    fprintf(f, "reason %s\nwhy %s\n", aborted ? "aborted" : revoked ? "revoked" : "failed", why);
    /* The cause, when a call failed: set by the thread that runs the call, which
     * is this one (coll_flight_end).  An abort or a revoke may come from another
     * thread while a call runs, so it does not read it. */
    if (!aborted && !revoked)
        flight_put_text(f, "error", comm->last_error);
    /* The peer of this rank's last wait that found nothing to do: in the call in
     * progress, the peer it was waiting for (its slot may show no byte posted). */
    fprintf(f, "wait_peer %d\n", atomic_load_explicit(&comm->wait_peer, memory_order_relaxed));
    fprintf(f, "written_us %lld\ncalls %llu\n",
            (long long)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000, (unsigned long long)head);
    return true;
}

static void flight_file_record(struct flight_file *ff, const struct coll_flight_copy *s,
                               int64_t now,
                               int64_t wall)
{
    FILE *f = ff->f;
    int state = s->state;
    fprintf(f, "call seq=%llu name=%s algo=%s state=%s result=%s count=%llu",
            (unsigned long long)s->seq, s->name ? s->name : "?", s->algo ? s->algo : "?",
            (unsigned)state < 4 ? state_names[state] : "?",
            coll_result_name((collResult_t)s->result), (unsigned long long)s->count);
    fprintf(f, " dtype=%s op=%s root=%d peer=%d start_us=%lld end_us=%lld\n",
            s->dtype >= 0 ? coll_dtype_name((collDataType_t)s->dtype) : "-",
            s->op >= 0 ? coll_op_name((collRedOp_t)s->op) : "-", s->root, s->peer,
            (long long)flight_wall_us(s->start_ns, now, wall),
            (long long)flight_wall_us(s->end_ns, now, wall));
    for (int k = 0; k <= s->npeers; k++) {
        const struct coll_flight_copy_peer *p = &s->peers[k];
        if (k == s->npeers && p->sent == 0 && p->sent_posted == 0 && p->recvd == 0 &&
            p->recvd_posted == 0)
            continue;
        fprintf(f, "peer rank=%d sent=%llu sent_posted=%llu recvd=%llu recvd_posted=%llu\n",
                p->peer, (unsigned long long)p->sent, (unsigned long long)p->sent_posted,
                (unsigned long long)p->recvd, (unsigned long long)p->recvd_posted);
    }
}

static void flight_file_close(struct flight_file *ff, int rank)
{
    fprintf(ff->f, "end\n");
    bool bad = ferror(ff->f) != 0;
    int err = bad ? EIO : 0;
    if (fclose(ff->f) != 0 && !bad) {
        bad = true;
        err = errno;
    }
    if (bad) {
        flight_file_warn(ff, rank, "cannot write", ff->tmp, err);
        unlink(ff->tmp);
    } else if (rename(ff->tmp, ff->path) != 0) {
        flight_file_warn(ff, rank, "cannot rename to", ff->path, errno);
        unlink(ff->tmp);
    } else {
        COLL_INFO(COLL_SUBSYS_COLL, "flight record of rank %d written to %s", rank, ff->path);
    }
}

void coll_flight_dump(struct coll_comm *comm, const char *why)
{
    struct coll_flight *f = comm->flight;
    if (f == NULL || atomic_exchange(&f->dumped, true))
        return;
    uint64_t head = atomic_load_explicit(&f->head, memory_order_acquire);
    uint64_t first = head > COLL_FLIGHT_RECORDS ? head - COLL_FLIGHT_RECORDS : 0;
    COLL_WARN("flight recorder of rank %d (%s): the last %llu of %llu call(s), oldest first",
              comm->rank, why, (unsigned long long)(head - first), (unsigned long long)head);
    struct flight_file ff;
    bool to_file = flight_file_open(comm, why, head, &ff);
    int64_t now = coll_now_ns();
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t wall = (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    for (uint64_t i = first; i < head; i++) {
        const struct flight_rec *r = &f->recs[i % COLL_FLIGHT_RECORDS];
        struct coll_flight_copy s;
        char line[900];
        bool ok = flight_read_retry(r, &s);
        if (ok)
            flight_format(&s, now, line, sizeof(line));
        COLL_WARN("%s", ok ? line : "  (record being rewritten)");
        if (ok && to_file)
            flight_file_record(&ff, &s, now, wall);
    }
    if (to_file)
        flight_file_close(&ff, comm->rank);
}

uint64_t coll_flight_count(const struct coll_comm *comm)
{
    const struct coll_flight *f = comm->flight;
    return f == NULL ? 0 : atomic_load_explicit(&f->head, memory_order_acquire);
}

bool coll_flight_copy(const struct coll_comm *comm, uint64_t i, struct coll_flight_copy *out)
{
    const struct coll_flight *f = comm->flight;
    uint64_t count = coll_flight_count(comm);
    if (f == NULL || i >= count || count - i >= COLL_FLIGHT_RECORDS)
        return false;
    const struct flight_rec *r = &f->recs[i % COLL_FLIGHT_RECORDS];
    if (!flight_read(r, out))
        return false;
    /* Whole, but maybe already of call i + COLL_FLIGHT_RECORDS: the count
     * reached i + COLL_FLIGHT_RECORDS before that call's begin, whose
     * record a reader sees only with the count it had then (release on the
     * record's number, acquire here); so the last COLL_FLIGHT_RECORDS - 1 are
     * read, never the slot being reused. */
    return coll_flight_count(comm) - i < COLL_FLIGHT_RECORDS;
}
