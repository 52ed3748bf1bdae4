/*
 * collinfo --flight DIR: the desync analysis of the flight records that the ranks of
 * a job wrote to COLL_FLIGHT_DIR (lib/engine/flight.c writes them when a call fails
 * or the communicator is aborted or revoked), in the manner of PyTorch's flight
 * recorder tool.
 *
 *   1. Read every DIR/flight-*.txt (flight_read.c).  A file that does not
 *      parse is named, with its line, on stderr and left out.
 *   2. Group the files by communicator (the "comm" hash that all its ranks share)
 *      and place each by its rank; the ranks of 0..nranks-1 without a file are
 *      missing: they died, were killed or stopped, or never failed.
 *   3. Per rank: the last call completed and the first call not completed (the
 *      call in progress) give its position, in this order:
 *          completed #56, not started #57  <  in #57  <  completed #57
 *   4. The position most ranks hold is the majority's; ranks before it are
 *      behind, ranks past it ahead.
 *   5. Calls with one sequence number that differ from rank to rank in name,
 *      count, datatype, op or root are mismatches (point-to-point calls differ
 *      by nature and are left out).
 *   6. With the majority in a call, each rank waits for the peer its last wait was
 *      for (wait_peer) and for every peer of a receive posted and not complete.
 *      The likely cause is the peer of a wait that is not in the call (or wrote no
 *      record), else of the wait that received the fewest bytes: in a ring every
 *      rank ends up waiting for the one before it, but the first wait has received
 *      nothing.
 *
 * The records are read by flight_read.c, whose header gives their format.
 */
#include "flight_report.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "flight_read.h"
#include "log.h" /* coll_buf_printf */

#define FR_MAX_MISMATCHES 8   /* mismatching sequence numbers told per communicator */
#define FR_MAX_RANK_LINES 64  /* above this many files, no line per rank in the text */

/* The files of one communicator. */
struct fr_group {
    char comm[17];
    int nranks;
    struct fr_file **byrank;   /* nranks entries, NULL: no file */
    int nfiles, dups;
};

struct fr_state {
    struct fr_records rs;
    struct fr_group *groups;
    int ngroups;
};

/* --- analysis --- */

static void fr_place(struct fr_file *f)
{
    f->any_done = false;
    f->last_done = 0;
    f->cur = NULL;
    for (int i = 0; i < f->ncalls; i++) {
        const struct fr_call *c = &f->calls[i];
        if (strcmp(c->state, "done") == 0) {
            if (!f->any_done || c->seq > f->last_done)
                f->last_done = c->seq;
            f->any_done = true;
        } else if (f->cur == NULL || c->seq < f->cur->seq) {
            f->cur = c;
        }
    }
    /* completed #s-1 (not in #s): 2s; in #s: 2s+1; completed #s: 2s+2; nothing: 0. */
    f->key = f->cur != NULL ? 2 * f->cur->seq + 1 : f->any_done ? 2 * (f->last_done + 1) : 0;
}

static bool fr_group_files(struct fr_state *st)
{
    st->groups = st->rs.nfiles > 0 ? calloc((size_t)st->rs.nfiles, sizeof(*st->groups)) : NULL;
    if (st->rs.nfiles > 0 && st->groups == NULL)
        return false;
    for (int i = 0; i < st->rs.nfiles; i++) {
        struct fr_file *f = st->rs.files[i];
        fr_place(f);
        struct fr_group *g = NULL;
        for (int k = 0; k < st->ngroups && g == NULL; k++)
            if (strcmp(st->groups[k].comm, f->comm) == 0 && st->groups[k].nranks == f->nranks)
                g = &st->groups[k];
        if (g == NULL) {
            g = &st->groups[st->ngroups];
            g->byrank = calloc((size_t)f->nranks, sizeof(*g->byrank));
            if (g->byrank == NULL)
                return false;
            st->ngroups++;
            memcpy(g->comm, f->comm, sizeof(g->comm));
            g->nranks = f->nranks;
        }
        struct fr_file **slot = &g->byrank[f->rank];
        if (*slot != NULL) {
            /* The same rank twice: the later record stands. */
            g->dups++;
            if ((*slot)->written_us > f->written_us)
                continue;
        } else {
            g->nfiles++;
        }
        *slot = f;
    }
    return true;
}

/* Appends "rank 2" or "ranks 0,1,3-7" to buf. */
static void fr_put_ranks(char *buf, size_t cap, size_t *len, const int *r, int n)
{
    size_t l = *len;
    l += (size_t)snprintf(buf + l, l < cap ? cap - l : 0, n == 1 ? "rank " : "ranks ");
    for (int i = 0; i < n && l < cap; i++) {
        int j = i;
        while (j + 1 < n && r[j + 1] == r[j] + 1)
            j++;
        if (j > i + 1)
            l += (size_t)snprintf(buf + l, cap - l, "%s%d-%d", i ? "," : "", r[i], r[j]);
        else if (j == i + 1)
            l += (size_t)snprintf(buf + l, cap - l, "%s%d,%d", i ? "," : "", r[i], r[j]);
        else
            l += (size_t)snprintf(buf + l, cap - l, "%s%d", i ? "," : "", r[i]);
        i = j;
    }
    *len = l < cap ? l : cap - 1;
}

/* "allreduce 4096 x float32 sum root 0" */
static void fr_put_call(char *buf, size_t cap, size_t *len, const struct fr_call *c)
{
    coll_buf_printf(buf, cap, len, "%s", c->name);
    if (strcmp(c->dtype, "-") != 0)
        coll_buf_printf(buf, cap, len, " %llu x %s", c->count, c->dtype);
    else
        coll_buf_printf(buf, cap, len, " of %llu message(s)", c->count);
    if (strcmp(c->op, "-") != 0)
        coll_buf_printf(buf, cap, len, " %s", c->op);
    if (c->root >= 0)
        coll_buf_printf(buf, cap, len, " root %lld", c->root);
    if (c->peer >= 0)
        coll_buf_printf(buf, cap, len, " peer %lld", c->peer);
}

/* Where a rank (or ranks, plural) is: "is in allreduce #57 (failed)",
 * "completed #56 and has not started #57"; mixed: the ranks are in calls of
 * different names, which it does not name. */
static void fr_put_where(char *buf, size_t cap, size_t *len, const struct fr_file *f,
                         bool plural, const char *state, bool mixed)
{
    if (f->cur != NULL && mixed)
        coll_buf_printf(buf, cap, len, "are in #%llu (%s), not all in the same call", f->cur->seq,
               state != NULL ? state : f->cur->state);
    else if (f->cur != NULL)
        coll_buf_printf(buf, cap, len, "%s in %s #%llu (%s)", plural ? "are" : "is", f->cur->name,
               f->cur->seq, state != NULL ? state : f->cur->state);
    else if (f->any_done)
        coll_buf_printf(buf, cap, len, "completed #%llu and %s not started #%llu", f->last_done,
               plural ? "have" : "has", f->last_done + 1);
    else
        coll_buf_printf(buf, cap, len, "%s completed no call", plural ? "have" : "has");
}

/* A wait of rank `rank` for bytes from `from` in the majority's call. */
struct fr_wait {
    int rank, from;
    bool away;                  /* from wrote no record or is not in the call */
    bool last;                  /* from is the peer of rank's last wait (wait_peer) */
    unsigned long long got, posted;
};

/* The analysis of one communicator. */
struct fr_verdict {
    int *present, npresent;     /* ranks with a record, by rank */
    int *missing, nmissing;
    int *order;                 /* present ranks by position, then rank */
    unsigned long long key;     /* the majority's position */
    const struct fr_file *rep;  /* a rank of the majority */
    int *maj, nmaj;             /* the majority's ranks */
    const char *maj_state;      /* their state when they agree, else "states differ" */
    bool maj_mixed;             /* in calls of one number but different names */
    int *behind, nbehind, *ahead, nahead;
    struct fr_wait *waits;
    int nwaits;
    int cause;                  /* the rank the first wait is for, -1: none */
    int *suspects, nsuspects;
    char **lines;               /* the verdict, sentence by sentence */
    int nlines;
    /* Mismatches: entries (seq, rank, call) sorted by seq. */
    struct fr_mm {
        unsigned long long seq;
        int rank;
        const struct fr_call *c;
    } *mm;
    int nmm;
};

static const struct fr_group *fr_sort_group; /* for the comparisons below */

static int fr_order_cmp(const void *a, const void *b)
{
    const struct fr_file *x = fr_sort_group->byrank[*(const int *)a];
    const struct fr_file *y = fr_sort_group->byrank[*(const int *)b];
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return x->rank - y->rank;
}

static int fr_int_cmp(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

static int fr_mm_cmp(const void *a, const void *b)
{
    const struct fr_mm *x = a, *y = b;
    if (x->seq != y->seq)
        return x->seq < y->seq ? -1 : 1;
    return x->rank - y->rank;
}

static int fr_wait_cmp(const void *a, const void *b)
{
    const struct fr_wait *x = a, *y = b;
    if (x->away != y->away)
        return x->away ? -1 : 1;
    if (x->got != y->got)
        return x->got < y->got ? -1 : 1;
    if (x->last != y->last)
        return x->last ? -1 : 1;
    return x->rank - y->rank;
}

/* Whether calls of one sequence number should agree on every rank: not for
 * point-to-point calls, whose peers and counts differ by nature. */
static bool fr_comparable(const struct fr_call *c)
{
    return c->peer < 0 && strcmp(c->dtype, "-") != 0 && strcmp(c->algo, "p2p") != 0 &&
           strcmp(c->name, "group") != 0;
}

static bool fr_same_call(const struct fr_call *a, const struct fr_call *b)
{
    return strcmp(a->name, b->name) == 0 && a->count == b->count &&
           strcmp(a->dtype, b->dtype) == 0 && strcmp(a->op, b->op) == 0 && a->root == b->root;
}

static void fr_line(struct fr_verdict *v, const char *s)
{
    char **l = realloc(v->lines, (size_t)(v->nlines + 1) * sizeof(*l));
    if (l == NULL)
        return;
    v->lines = l;
    if ((l[v->nlines] = strdup(s)) != NULL)
        v->nlines++;
}

static void fr_suspect(struct fr_verdict *v, int r)
{
    for (int i = 0; i < v->nsuspects; i++)
        if (v->suspects[i] == r)
            return;
    v->suspects[v->nsuspects++] = r;
}

static const struct fr_peer *fr_peer_of(const struct fr_call *c, int rank)
{
    for (int i = 0; c != NULL && i < c->npeers; i++)
        if (c->peers[i].rank == rank)
            return &c->peers[i];
    return NULL;
}

/* Mismatches: every sequence number that several ranks recorded, with calls that
 * differ; one sentence each (at most FR_MAX_MISMATCHES). */
static void fr_mismatches(const struct fr_group *g, struct fr_verdict *v)
{
    int n = 0;
    for (int i = 0; i < v->npresent; i++)
        n += g->byrank[v->present[i]]->ncalls;
    v->mm = n > 0 ? calloc((size_t)n, sizeof(*v->mm)) : NULL;
    if (v->mm == NULL)
        return;
    for (int i = 0; i < v->npresent; i++) {
        const struct fr_file *f = g->byrank[v->present[i]];
        for (int k = 0; k < f->ncalls; k++)
            if (fr_comparable(&f->calls[k]))
                v->mm[v->nmm++] = (struct fr_mm){f->calls[k].seq, f->rank, &f->calls[k]};
    }
    qsort(v->mm, (size_t)v->nmm, sizeof(*v->mm), fr_mm_cmp);
    int told = 0;
    /* A file may hold several calls of one number: one entry each. */
    int *ranks = malloc((size_t)(v->nmm > 0 ? v->nmm : 1) * sizeof(int));
    bool *done = malloc((size_t)(v->nmm > 0 ? v->nmm : 1));
    if (ranks == NULL || done == NULL)
        goto out;
    for (int a = 0; a < v->nmm;) {
        int b = a;
        bool differ = false;
        while (b < v->nmm && v->mm[b].seq == v->mm[a].seq) {
            differ |= !fr_same_call(v->mm[a].c, v->mm[b].c);
            b++;
        }
        if (differ && told++ < FR_MAX_MISMATCHES) {
            char s[2048];
            size_t len = 0;
            coll_buf_printf(s, sizeof(s), &len, "mismatch in #%llu:", v->mm[a].seq);
            memset(done + a, 0, (size_t)(b - a));
            for (int i = a; i < b; i++) {
                if (done[i])
                    continue;
                int nr = 0;
                for (int j = i; j < b; j++)
                    if (!done[j] && fr_same_call(v->mm[i].c, v->mm[j].c)) {
                        done[j] = true;
                        ranks[nr++] = v->mm[j].rank;
                    }
                coll_buf_printf(s, sizeof(s), &len, "%s ", i == a ? "" : ";");
                fr_put_ranks(s, sizeof(s), &len, ranks, nr);
                coll_buf_printf(s, sizeof(s), &len, " called ");
                fr_put_call(s, sizeof(s), &len, v->mm[i].c);
            }
            fr_line(v, s);
        }
        a = b;
    }
out:
    free(ranks);
    free(done);
}

static bool fr_analyse(const struct fr_group *g, struct fr_verdict *v)
{
    memset(v, 0, sizeof(*v));
    v->cause = -1;
    int n = g->nranks;
    size_t sz = (size_t)n * sizeof(int);
    v->present = malloc(sz);
    v->missing = malloc(sz);
    v->order = malloc(sz);
    v->maj = malloc(sz);
    v->behind = malloc(sz);
    v->ahead = malloc(sz);
    v->suspects = malloc(sz);
    if (!v->present || !v->missing || !v->order || !v->maj || !v->behind || !v->ahead ||
        !v->suspects)
        return false;
    for (int r = 0; r < n; r++) {
        if (g->byrank[r] != NULL)
            v->present[v->npresent++] = r;
        else
            v->missing[v->nmissing++] = r;
    }
    char s[4096];
    size_t len = 0;
    if (v->nmissing > 0) {
        fr_put_ranks(s, sizeof(s), &len, v->missing, v->nmissing);
        coll_buf_printf(s, sizeof(s), &len, " wrote no record: %s died, %s killed or stopped, or %s "
               "communicator neither failed nor was aborted",
               v->nmissing == 1 ? "it" : "they", v->nmissing == 1 ? "was" : "were",
               v->nmissing == 1 ? "its" : "their");
        fr_line(v, s);
        for (int i = 0; i < v->nmissing; i++)
            fr_suspect(v, v->missing[i]);
    }
    /* The positions, and the one most ranks hold: on a tie, a call in progress
     * (where failing ranks stop), then the later one. */
    memcpy(v->order, v->present, (size_t)v->npresent * sizeof(int));
    fr_sort_group = g;
    qsort(v->order, (size_t)v->npresent, sizeof(int), fr_order_cmp);
    int best = -1, best_n = 0;
    for (int a = 0; a < v->npresent;) {
        unsigned long long k = g->byrank[v->order[a]]->key;
        int b = a;
        while (b < v->npresent && g->byrank[v->order[b]]->key == k)
            b++;
        unsigned long long bk = best >= 0 ? g->byrank[v->order[best]]->key : 0;
        if (best < 0 || b - a > best_n ||
            (b - a == best_n && ((k & 1) > (bk & 1) || ((k & 1) == (bk & 1) && k > bk)))) {
            best = a;
            best_n = b - a;
        }
        a = b;
    }
    v->rep = g->byrank[v->order[best]];
    v->key = v->rep->key;
    for (int i = 0; i < v->npresent; i++) {
        const struct fr_file *f = g->byrank[v->order[i]];
        if (f->key == v->key)
            v->maj[v->nmaj++] = f->rank;
    }
    v->maj_state = v->rep->cur != NULL ? v->rep->cur->state : NULL;
    for (int i = 0; i < v->nmaj && v->rep->cur != NULL; i++) {
        const struct fr_call *c = g->byrank[v->maj[i]]->cur;
        if (strcmp(c->state, v->rep->cur->state) != 0)
            v->maj_state = "states differ";
        if (strcmp(c->name, v->rep->cur->name) != 0)
            v->maj_mixed = true;
    }
    /* The majority, as "ranks 0,1,3 are in allreduce #57 (failed)". */
    char maj[2048];
    size_t mlen = 0;
    fr_put_ranks(maj, sizeof(maj), &mlen, v->maj, v->nmaj);
    coll_buf_printf(maj, sizeof(maj), &mlen, " ");
    fr_put_where(maj, sizeof(maj), &mlen, v->rep, v->nmaj > 1, v->maj_state, v->maj_mixed);
    /* Behind and ahead, position by position, the farthest behind first. */
    for (int a = 0; a < v->npresent;) {
        const struct fr_file *f = g->byrank[v->order[a]];
        int b = a;
        while (b < v->npresent && g->byrank[v->order[b]]->key == f->key)
            b++;
        if (f->key != v->key) {
            bool behind = f->key < v->key;
            int *set = behind ? v->behind + v->nbehind : v->ahead + v->nahead;
            for (int i = a; i < b; i++)
                set[i - a] = v->order[i];
            if (behind)
                v->nbehind += b - a;
            else
                v->nahead += b - a;
            len = 0;
            fr_put_ranks(s, sizeof(s), &len, set, b - a);
            coll_buf_printf(s, sizeof(s), &len, " %s %s: %s, ", b - a == 1 ? "is" : "are",
                   behind ? "behind" : "ahead", maj);
            fr_put_ranks(s, sizeof(s), &len, set, b - a);
            coll_buf_printf(s, sizeof(s), &len, " ");
            fr_put_where(s, sizeof(s), &len, f, b - a > 1, NULL, false);
            fr_line(v, s);
        }
        a = b;
    }
    qsort(v->behind, (size_t)v->nbehind, sizeof(int), fr_int_cmp);
    qsort(v->ahead, (size_t)v->nahead, sizeof(int), fr_int_cmp);
    for (int i = 0; i < v->nbehind; i++)
        fr_suspect(v, v->behind[i]);
    if (v->nbehind == 0 && v->nahead == 0) {
        len = 0;
        if (v->nmissing == 0) {
            coll_buf_printf(s, sizeof(s), &len, n == 1 ? "the rank " : "all ranks ");
            fr_put_where(s, sizeof(s), &len, v->rep, n > 1, v->maj_state, v->maj_mixed);
        } else {
            coll_buf_printf(s, sizeof(s), &len, "the rank%s with a record, %s", v->nmaj == 1 ? "" : "s",
                   maj);
        }
        fr_line(v, s);
    }
    fr_mismatches(g, v);
    /* Whom the majority's ranks wait for, in their call. */
    if (v->rep->cur != NULL) {
        unsigned long long seq = v->rep->cur->seq;
        int cap = 0;
        for (int i = 0; i < v->nmaj; i++)
            cap += g->byrank[v->maj[i]]->cur->npeers;
        v->waits = cap > 0 ? calloc((size_t)cap, sizeof(*v->waits)) : NULL;
        for (int i = 0; i < v->nmaj && v->waits != NULL; i++) {
            const struct fr_file *f = g->byrank[v->maj[i]];
            const struct fr_call *c = f->cur;
            for (int k = 0; k < c->npeers && c->seq == seq; k++) {
                const struct fr_peer *q = &c->peers[k];
                bool last = q->rank >= 0 && q->rank == f->wait_peer;
                if (q->rank < 0 || q->rank >= n || (!last && q->recvd >= q->recvd_posted))
                    continue;
                const struct fr_file *src = g->byrank[q->rank];
                bool away = src == NULL || src->cur == NULL || src->cur->seq != seq;
                v->waits[v->nwaits++] = (struct fr_wait){v->maj[i], q->rank, away, last,
                                                         q->recvd, q->recvd_posted};
            }
        }
        if (v->nwaits > 0) {
            qsort(v->waits, (size_t)v->nwaits, sizeof(*v->waits), fr_wait_cmp);
            const struct fr_wait *w = &v->waits[0];
            v->cause = w->from;
            len = 0;
            coll_buf_printf(s, sizeof(s), &len, "rank %d waits for rank %d: received %llu of %llu B "
                   "posted from it", w->rank, w->from, w->got, w->posted);
            const struct fr_file *src = w->from < n ? g->byrank[w->from] : NULL;
            const struct fr_peer *back = src != NULL && src->cur != NULL &&
                                                 src->cur->seq == seq
                                             ? fr_peer_of(src->cur, w->rank)
                                             : NULL;
            if (src == NULL)
                coll_buf_printf(s, sizeof(s), &len, "; rank %d wrote no record", w->from);
            else if (src->cur == NULL || src->cur->seq != seq)
                coll_buf_printf(s, sizeof(s), &len, "; rank %d is not in #%llu", w->from, seq);
            else if (back == NULL || back->sent_posted == 0)
                coll_buf_printf(s, sizeof(s), &len, "; rank %d posted nothing to send to rank %d",
                       w->from, w->rank);
            else
                coll_buf_printf(s, sizeof(s), &len, "; rank %d sent %llu of %llu B posted to it",
                       w->from, back->sent, back->sent_posted);
            coll_buf_printf(s, sizeof(s), &len, " (likely cause: rank %d)", w->from);
            fr_line(v, s);
            fr_suspect(v, w->from);
        }
    }
    return true;
}

static void fr_verdict_free(struct fr_verdict *v)
{
    free(v->present);
    free(v->missing);
    free(v->order);
    free(v->maj);
    free(v->behind);
    free(v->ahead);
    free(v->suspects);
    free(v->waits);
    free(v->mm);
    for (int i = 0; i < v->nlines; i++)
        free(v->lines[i]);
    free(v->lines);
}

/* --- output --- */

static void fr_text_rank(FILE *out, const struct fr_file *f)
{
    char s[1024];
    size_t len = 0;
    coll_buf_printf(s, sizeof(s), &len, "  rank %d (%s, pid %lld): %s", f->rank, f->host ? f->host : "?",
           f->pid, f->reason);
    if (f->why[0] != '\0' && strcmp(f->reason, "failed") == 0)
        coll_buf_printf(s, sizeof(s), &len, " (%s)", f->why);
    if (f->any_done)
        coll_buf_printf(s, sizeof(s), &len, "; completed #%llu", f->last_done);
    else
        coll_buf_printf(s, sizeof(s), &len, "; completed none");
    if (f->cur != NULL) {
        coll_buf_printf(s, sizeof(s), &len, "; in #%llu ", f->cur->seq);
        fr_put_call(s, sizeof(s), &len, f->cur);
        coll_buf_printf(s, sizeof(s), &len, " via %s (%s)", f->cur->algo, f->cur->state);
    } else {
        coll_buf_printf(s, sizeof(s), &len, "; no call in progress");
    }
    fprintf(out, "%s\n", s);
    if (f->error != NULL && f->error[0] != '\0')
        fprintf(out, "    error: %s\n", f->error);
}

static void fr_text(const struct fr_state *st, FILE *out)
{
    fprintf(out, "flight records in %s: %d file%s, %d communicator%s\n", st->rs.dir, st->rs.nfiles,
            st->rs.nfiles == 1 ? "" : "s", st->ngroups, st->ngroups == 1 ? "" : "s");
    for (int gi = 0; gi < st->ngroups; gi++) {
        const struct fr_group *g = &st->groups[gi];
        struct fr_verdict v;
        bool ok = fr_analyse(g, &v);
        char s[4096];
        size_t len = 0;
        const struct fr_file *any = NULL;
        for (int r = 0; r < g->nranks && any == NULL; r++)
            any = g->byrank[r];
        coll_buf_printf(s, sizeof(s), &len, "\ncommunicator %s", g->comm);
        if (any != NULL && any->name != NULL)
            coll_buf_printf(s, sizeof(s), &len, " \"%s\"", any->name);
        coll_buf_printf(s, sizeof(s), &len, ", %d rank%s: ", g->nranks, g->nranks == 1 ? "" : "s");
        if (ok) {
            coll_buf_printf(s, sizeof(s), &len, "records of ");
            fr_put_ranks(s, sizeof(s), &len, v.present, v.npresent);
            if (v.nmissing > 0) {
                coll_buf_printf(s, sizeof(s), &len, "; missing: ");
                fr_put_ranks(s, sizeof(s), &len, v.missing, v.nmissing);
            }
        }
        fprintf(out, "%s\n", s);
        if (!ok) {
            fprintf(out, "  (out of memory)\n");
            fr_verdict_free(&v);
            continue;
        }
        if (g->dups > 0)
            fprintf(out, "  %d file%s for a rank that had one already: the latest stands\n",
                    g->dups, g->dups == 1 ? "" : "s");
        if (g->nfiles <= FR_MAX_RANK_LINES) {
            for (int r = 0; r < g->nranks; r++)
                if (g->byrank[r] != NULL)
                    fr_text_rank(out, g->byrank[r]);
        } else {
            fprintf(out, "  (%d ranks: no line per rank; --json has them)\n", g->nfiles);
        }
        if (v.nwaits > 0) {
            len = 0;
            coll_buf_printf(s, sizeof(s), &len, "  waits in #%llu:", v.rep->cur->seq);
            for (int i = 0; i < v.nwaits && i < 16; i++)
                coll_buf_printf(s, sizeof(s), &len, "%s rank %d for rank %d (%llu/%llu B)",
                       i ? "," : "", v.waits[i].rank, v.waits[i].from, v.waits[i].got,
                       v.waits[i].posted);
            if (v.nwaits > 16)
                coll_buf_printf(s, sizeof(s), &len, ", and %d more", v.nwaits - 16);
            fprintf(out, "%s\n", s);
        }
        fprintf(out, "  verdict:\n");
        for (int i = 0; i < v.nlines; i++)
            fprintf(out, "    %s\n", v.lines[i]);
        if (v.nsuspects > 0) {
            len = 0;
            coll_buf_printf(s, sizeof(s), &len, "  suspects: ");
            fr_put_ranks(s, sizeof(s), &len, v.suspects, v.nsuspects);
            fprintf(out, "%s\n", s);
        } else {
            fprintf(out, "  suspects: none found\n");
        }
        fr_verdict_free(&v);
    }
}

static void fr_json_str(FILE *out, const char *s)
{
    fputc('"', out);
    for (; s != NULL && *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c < 0x20 || c >= 0x7f) /* bytes beyond ASCII may not be UTF-8 */
            fprintf(out, "\\u%04x", c);
        else
            fputc(c, out);
    }
    fputc('"', out);
}

static void fr_json_ints(FILE *out, const int *r, int n)
{
    fputc('[', out);
    for (int i = 0; i < n; i++)
        fprintf(out, "%s%d", i ? ", " : "", r[i]);
    fputc(']', out);
}

static void fr_json_call(FILE *out, const struct fr_call *c, bool peers)
{
    fprintf(out, "{\"seq\": %llu, \"name\": ", c->seq);
    fr_json_str(out, c->name);
    fprintf(out, ", \"algo\": ");
    fr_json_str(out, c->algo);
    fprintf(out, ", \"state\": ");
    fr_json_str(out, c->state);
    fprintf(out, ", \"result\": ");
    fr_json_str(out, c->result);
    fprintf(out, ", \"count\": %llu, \"dtype\": ", c->count);
    fr_json_str(out, c->dtype);
    fprintf(out, ", \"op\": ");
    fr_json_str(out, c->op);
    fprintf(out, ", \"root\": %lld, \"peer\": %lld, \"start_us\": %lld, \"end_us\": %lld", c->root,
            c->peer, c->start_us, c->end_us);
    if (peers) {
        fprintf(out, ", \"peers\": [");
        for (int i = 0; i < c->npeers; i++) {
            const struct fr_peer *q = &c->peers[i];
            fprintf(out, "%s{\"rank\": %d, \"sent\": %llu, \"sent_posted\": %llu, \"recvd\": "
                         "%llu, \"recvd_posted\": %llu}",
                    i ? ", " : "", q->rank, q->sent, q->sent_posted, q->recvd, q->recvd_posted);
        }
        fputc(']', out);
    }
    fputc('}', out);
}

static void fr_json(const struct fr_state *st, FILE *out)
{
    fprintf(out, "{\"dir\": ");
    fr_json_str(out, st->rs.dir);
    fprintf(out, ", \"files\": %d,\n\"errors\": [", st->rs.nfiles);
    for (int i = 0; i < st->rs.nerrors; i++) {
        fprintf(out, "%s\n {\"file\": ", i ? "," : "");
        fr_json_str(out, st->rs.errors[i].path);
        fprintf(out, ", \"line\": %d, \"message\": ", st->rs.errors[i].line);
        fr_json_str(out, st->rs.errors[i].msg);
        fputc('}', out);
    }
    fprintf(out, "],\n\"communicators\": [");
    for (int gi = 0; gi < st->ngroups; gi++) {
        const struct fr_group *g = &st->groups[gi];
        struct fr_verdict v;
        bool ok = fr_analyse(g, &v);
        const struct fr_file *any = NULL;
        for (int r = 0; r < g->nranks && any == NULL; r++)
            any = g->byrank[r];
        fprintf(out, "%s\n {\"comm\": \"%s\", \"name\": ", gi ? "," : "", g->comm);
        if (any != NULL && any->name != NULL)
            fr_json_str(out, any->name);
        else
            fprintf(out, "null");
        fprintf(out, ", \"nranks\": %d, \"duplicates\": %d", g->nranks, g->dups);
        if (!ok) {
            fprintf(out, ", \"error\": \"out of memory\"}");
            fr_verdict_free(&v);
            continue;
        }
        fprintf(out, ",\n  \"ranks_with_records\": ");
        fr_json_ints(out, v.present, v.npresent);
        fprintf(out, ", \"missing\": ");
        fr_json_ints(out, v.missing, v.nmissing);
        fprintf(out, ",\n  \"ranks\": [");
        for (int i = 0; i < v.npresent; i++) {
            const struct fr_file *f = g->byrank[v.present[i]];
            fprintf(out, "%s\n   {\"rank\": %d, \"file\": ", i ? "," : "", f->rank);
            fr_json_str(out, f->path);
            fprintf(out, ", \"host\": ");
            fr_json_str(out, f->host);
            fprintf(out, ", \"pid\": %lld, \"reason\": ", f->pid);
            fr_json_str(out, f->reason);
            fprintf(out, ", \"why\": ");
            fr_json_str(out, f->why);
            fprintf(out, ", \"error\": ");
            if (f->error != NULL)
                fr_json_str(out, f->error);
            else
                fprintf(out, "null");
            fprintf(out, ", \"wait_peer\": %lld, \"written_us\": %lld, \"calls\": %llu, "
                         "\"last_completed\": ",
                    f->wait_peer, f->written_us, f->calls_total);
            if (f->any_done)
                fprintf(out, "%llu", f->last_done);
            else
                fprintf(out, "null");
            fprintf(out, ",\n    \"in_progress\": ");
            if (f->cur != NULL)
                fr_json_call(out, f->cur, true);
            else
                fprintf(out, "null");
            fprintf(out, ",\n    \"records\": [");
            for (int k = 0; k < f->ncalls; k++) {
                fprintf(out, "%s\n     ", k ? "," : "");
                fr_json_call(out, &f->calls[k], true);
            }
            fprintf(out, "]}");
        }
        fprintf(out, "],\n  \"majority\": {\"ranks\": ");
        fr_json_ints(out, v.maj, v.nmaj);
        if (v.rep->cur != NULL) {
            fprintf(out, ", \"in_call\": true, \"seq\": %llu, \"name\": ", v.rep->cur->seq);
            fr_json_str(out, v.rep->cur->name);
            fprintf(out, ", \"state\": ");
            fr_json_str(out, v.maj_state);
        } else {
            fprintf(out, ", \"in_call\": false, \"last_completed\": ");
            if (v.rep->any_done)
                fprintf(out, "%llu", v.rep->last_done);
            else
                fprintf(out, "null");
        }
        fprintf(out, "},\n  \"behind\": ");
        fr_json_ints(out, v.behind, v.nbehind);
        fprintf(out, ", \"ahead\": ");
        fr_json_ints(out, v.ahead, v.nahead);
        fprintf(out, ",\n  \"mismatches\": [");
        int told = 0;
        for (int a = 0; a < v.nmm;) {
            int b = a;
            bool differ = false;
            while (b < v.nmm && v.mm[b].seq == v.mm[a].seq) {
                differ |= !fr_same_call(v.mm[a].c, v.mm[b].c);
                b++;
            }
            if (differ) {
                fprintf(out, "%s\n   {\"seq\": %llu, \"calls\": [", told++ ? "," : "",
                        v.mm[a].seq);
                for (int i = a; i < b; i++) {
                    fprintf(out, "%s{\"rank\": %d, \"call\": ", i > a ? ", " : "", v.mm[i].rank);
                    fr_json_call(out, v.mm[i].c, false);
                    fputc('}', out);
                }
                fprintf(out, "]}");
            }
            a = b;
        }
        fprintf(out, "],\n  \"waits\": [");
        for (int i = 0; i < v.nwaits; i++)
            fprintf(out, "%s{\"rank\": %d, \"from\": %d, \"last_wait\": %s, \"recvd\": %llu, "
                         "\"recvd_posted\": %llu}",
                    i ? ", " : "", v.waits[i].rank, v.waits[i].from,
                    v.waits[i].last ? "true" : "false", v.waits[i].got, v.waits[i].posted);
        fprintf(out, "], \"likely_cause\": ");
        if (v.cause >= 0)
            fprintf(out, "%d", v.cause);
        else
            fprintf(out, "null");
        fprintf(out, ",\n  \"suspects\": ");
        fr_json_ints(out, v.suspects, v.nsuspects);
        fprintf(out, ",\n  \"verdict\": [");
        for (int i = 0; i < v.nlines; i++) {
            fprintf(out, "%s\n   ", i ? "," : "");
            fr_json_str(out, v.lines[i]);
        }
        fprintf(out, "]}");
        fr_verdict_free(&v);
    }
    fprintf(out, "]}\n");
}

int coll_flight_report(const char *dir, bool json, FILE *out, FILE *err)
{
    struct fr_state st = {.rs = {.dir = dir, .err = err}};
    int rc = 1;
    if (!coll_fr_read_dir(&st.rs))
        goto out;
    if (!fr_group_files(&st)) {
        fprintf(err, "collinfo: out of memory grouping the records of %s\n", dir);
        goto out;
    }
    if (st.rs.nfiles == 0 && st.rs.nerrors == 0)
        fprintf(err, "collinfo: no flight records (flight-*.txt) in %s\n", dir);
    if (json)
        fr_json(&st, out);
    else if (st.rs.nfiles > 0)
        fr_text(&st, out);
    rc = st.rs.nfiles > 0 && st.rs.nerrors == 0 ? 0 : 1;
    if (fflush(out) != 0)
        rc = 1;
out:
    for (int i = 0; i < st.ngroups; i++)
        free(st.groups[i].byrank);
    free(st.groups);
    coll_fr_records_free(&st.rs);
    return rc;
}
