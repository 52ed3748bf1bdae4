/* The client of status queries (job_status.h): asks every rank at once, then
 * prints a line per rank and a verdict.
 *
 *   for each rank, at once (in batches of JOB_BATCH descriptors):
 *     connect to its bootstrap listener, send a request (STAT, secret, ask RANK),
 *     read one fixed-size answer, checked (coll_wire_status_reply): magic,
 *     secret, version, ranks in range
 *   a rank that has not answered within wait_ms is "no answer": a stopped
 *   process (SIGSTOP, a debugger) cannot, while its kernel still accepts the
 *   connection; a refused connection means the process is gone.
 *
 * The verdict follows, from every rank that waits in a call, the chain of "waits
 * for rank P" to its end: a rank that does not answer, or that answers but is
 * in no call while the others wait in theirs.  The rank most chains end at is
 * the one the others wait for.  A chain that ends at a rank in no call counts
 * only when its ranks have waited JOB_STUCK_MS or more, so that a healthy job,
 * caught between two calls, names nobody.
 */
#include "job_status.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "flight.h"
#include "log.h"
#include "reduce.h"

#define JOB_BATCH 256      /* ranks asked at once: descriptors held */
#define JOB_STUCK_MS 1000  /* a call waiting this long counts towards a verdict */

int coll_job_status_table(const char *prog, const char *hostport, const uint8_t *secret,
                          int wait_ms, struct coll_job_rank **ranks_p, int *n_p)
{
    union coll_sockaddr ss;
    socklen_t len;
    char err[160];
    if (coll_socket_parse_hostport(hostport, &ss, &len, err, sizeof(err)) != collSuccess) {
        fprintf(stderr, "%s: --status %s: %s\n", prog, hostport, err);
        return 1;
    }
    int64_t deadline = coll_now_ns() + (int64_t)wait_ms * 1000000;
    int fd, e = 0;
    collResult_t res = coll_socket_connect(&ss.sa, len, deadline, false, &fd);
    if (res != collSuccess) {
        fprintf(stderr, "%s: cannot reach %s: %s\n", prog, hostport,
                errno == ECONNREFUSED ? "nothing listens there (connection refused)"
                                      : strerror(errno));
        return 1;
    }
    struct coll_status_req req = {.magic = COLL_STATUS_MAGIC, .version = COLL_STATUS_VERSION,
                                  .ask = COLL_STATUS_ASK_TABLE};
    memcpy(req.secret, secret, COLL_SECRET_BYTES);
    struct coll_status_table head;
    res = coll_socket_send_all(fd, &req, sizeof(req), deadline, &e);
    if (res == collSuccess)
        res = coll_socket_recv_all(fd, &head, sizeof(head), deadline, &e);
    if (res != collSuccess) {
        close(fd);
        if (res == collTimeout)
            fprintf(stderr, "%s: %s did not answer within %d ms (a stopped rank? ask another "
                    "rank's listener)\n", prog, hostport, wait_ms);
        else
            fprintf(stderr, "%s: %s closed the connection without answering: COLL_SECRET is "
                    "not this job's secret, or it is not the bootstrap listener of a rank "
                    "whose communicator is up%s%s\n", prog, hostport, e ? ": " : "",
                    e ? strerror(e) : "");
        return 1;
    }
    const char *why = "";
    if (coll_wire_status_table(&head, sizeof(head), secret, &head, &why) != COLL_WIRE_OK) {
        close(fd);
        fprintf(stderr, "%s: %s sent a bad answer: %s\n", prog, hostport, why);
        return 1;
    }
    size_t bytes = (size_t)head.nranks * sizeof(struct coll_status_addr);
    struct coll_status_addr *addrs = malloc(bytes);
    struct coll_job_rank *ranks = calloc((size_t)head.nranks, sizeof(*ranks));
    if (addrs == NULL || ranks == NULL) {
        close(fd);
        free(addrs);
        free(ranks);
        fprintf(stderr, "%s: out of memory for a table of %d ranks\n", prog, head.nranks);
        return 1;
    }
    res = coll_socket_recv_all(fd, addrs, bytes, deadline, &e);
    close(fd);
    if (res == collSuccess &&
        coll_wire_status_addrs(addrs, bytes, head.nranks, addrs, &why) != COLL_WIRE_OK)
        res = collRemoteError;
    else if (res != collSuccess)
        why = "the table was cut short";
    if (res != collSuccess) {
        fprintf(stderr, "%s: %s sent a bad table: %s\n", prog, hostport, why);
        free(addrs);
        free(ranks);
        return 1;
    }
    for (int k = 0; k < head.nranks; k++) {
        ranks[k] = (struct coll_job_rank){.rank = k, .pid = addrs[k].pid,
                                          .addr = addrs[k].addr,
                                          .addrlen = (socklen_t)addrs[k].addrlen};
        snprintf(ranks[k].host, sizeof(ranks[k].host), "%s", addrs[k].host);
    }
    free(addrs);
    *ranks_p = ranks;
    *n_p = head.nranks;
    return 0;
}

int coll_job_status_file(const char *prog, const char *path, struct coll_job_rank **ranks_p,
                         int *n_p)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        fprintf(stderr, "%s: cannot read %s: %s\n", prog, path, strerror(errno));
        return 1;
    }
    unsigned version = 0;
    int n = 0, line = 2;
    struct coll_job_rank *ranks = NULL;
    const char *bad = NULL;
    if (fscanf(f, "coll-status %u nranks %d", &version, &n) != 2 ||
        version != COLL_STATUS_VERSION || n < 1 || n > COLL_WIRE_MAX_NRANKS) {
        bad = "not a status file of this version";
        line = 1;
    } else if ((ranks = calloc((size_t)n, sizeof(*ranks))) == NULL) {
        bad = "out of memory";
    }
    for (int k = 0; bad == NULL && k < n; k++) {
        char addr[COLL_ADDR_STRLEN + 1], err[160];
        int r, pid;
        struct coll_job_rank *q = &ranks[k];
        line++;
        if (fscanf(f, " rank %d %80s %d %63s", &r, addr, &pid, q->host) != 4 || r != k)
            bad = "expected: rank K ADDRESS PID HOST";
        else if (coll_socket_parse_hostport(addr, &q->addr, &q->addrlen, err, sizeof(err)) !=
                 collSuccess)
            bad = "a bad address";
        q->rank = k;
        q->pid = pid;
    }
    fclose(f);
    if (bad != NULL) {
        fprintf(stderr, "%s: %s:%d: %s\n", prog, path, line, bad);
        free(ranks);
        return 1;
    }
    *ranks_p = ranks;
    *n_p = n;
    return 0;
}

/* One batch of coll_job_status_ask. */
static void job_ask_batch(const struct coll_job_rank *ranks, int n, const uint8_t *secret,
                          int64_t deadline, struct coll_job_answer *answers)
{
    int fds[JOB_BATCH];
    size_t got[JOB_BATCH];
    bool sent[JOB_BATCH];
    struct pollfd pfds[JOB_BATCH];
    int pending = 0;
    struct coll_status_req req = {.magic = COLL_STATUS_MAGIC, .version = COLL_STATUS_VERSION,
                                  .ask = COLL_STATUS_ASK_RANK};
    memcpy(req.secret, secret, COLL_SECRET_BYTES);
    for (int k = 0; k < n; k++) {
        answers[k] = (struct coll_job_answer){.how = COLL_JOB_NO_ANSWER};
        got[k] = 0;
        sent[k] = false;
        fds[k] = socket(ranks[k].addr.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fds[k] < 0 || (connect(fds[k], &ranks[k].addr.sa, ranks[k].addrlen) != 0 &&
                           errno != EINPROGRESS)) {
            int e = errno;
            answers[k].how = e == ECONNREFUSED ? COLL_JOB_REFUSED : COLL_JOB_FAILED;
            answers[k].err = e;
            if (fds[k] >= 0)
                close(fds[k]);
            fds[k] = -1;
            continue;
        }
        pending++;
    }
    while (pending > 0) {
        int64_t now = coll_now_ns();
        if (now >= deadline)
            break;
        for (int k = 0; k < n; k++)
            pfds[k] = (struct pollfd){.fd = fds[k], .events = sent[k] ? POLLIN : POLLOUT};
        int ms = (int)((deadline - now) / 1000000) + 1;
        if (poll(pfds, (nfds_t)n, ms > 100 ? 100 : ms) <= 0)
            continue;
        for (int k = 0; k < n; k++) {
            struct coll_job_answer *a = &answers[k];
            if (fds[k] < 0 || pfds[k].revents == 0)
                continue;
            bool done = false;
            if (!sent[k]) {
                int soerr = 0;
                socklen_t sl = sizeof(soerr);
                if (getsockopt(fds[k], SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0)
                    soerr = errno;
                if (soerr == 0 && send(fds[k], &req, sizeof(req), MSG_NOSIGNAL | MSG_DONTWAIT) !=
                                      (ssize_t)sizeof(req))
                    soerr = errno ? errno : EIO;
                if (soerr != 0) {
                    a->how = soerr == ECONNREFUSED ? COLL_JOB_REFUSED : COLL_JOB_FAILED;
                    a->err = soerr;
                    done = true;
                }
                sent[k] = true;
            } else {
                ssize_t r = recv(fds[k], (char *)&a->rep + got[k], sizeof(a->rep) - got[k],
                                 MSG_DONTWAIT);
                if (r > 0)
                    got[k] += (size_t)r;
                if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
                               errno != EINTR)) {
                    a->how = got[k] == 0 ? COLL_JOB_CLOSED : COLL_JOB_BAD;
                    a->why = "the answer was cut short";
                    done = true;
                } else if (got[k] == sizeof(a->rep)) {
                    const char *why = "";
                    bool ok = coll_wire_status_reply(&a->rep, sizeof(a->rep), secret,
                                                     ranks[k].rank, &a->rep,
                                                     &why) == COLL_WIRE_OK;
                    a->how = ok ? COLL_JOB_ANSWERED : COLL_JOB_BAD;
                    a->why = ok ? NULL : why;
                    done = true;
                }
            }
            if (done) {
                close(fds[k]);
                fds[k] = -1;
                pending--;
            }
        }
    }
    for (int k = 0; k < n; k++)
        if (fds[k] >= 0)
            close(fds[k]);
}

void coll_job_status_ask(const struct coll_job_rank *ranks, int n, const uint8_t *secret,
                         int wait_ms, struct coll_job_answer *answers)
{
    for (int k = 0; k < n; k += JOB_BATCH) {
        int64_t deadline = coll_now_ns() + (int64_t)wait_ms * 1000000;
        job_ask_batch(ranks + k, n - k < JOB_BATCH ? n - k : JOB_BATCH, secret, deadline,
                      answers + k);
    }
}

/* ---- the report ---- */

static bool job_in_call(const struct coll_job_answer *a)
{
    return a->how == COLL_JOB_ANSWERED && a->rep.open > 0;
}

/* The peer a rank in a call waits for, or -1. */
static int job_waits_for(const struct coll_job_answer *a)
{
    return job_in_call(a) ? a->rep.wait_peer : -1;
}

static const char *job_state(const struct coll_job_answer *a)
{
    switch (a->how) {
    case COLL_JOB_ANSWERED:
        if (a->rep.revoked_by >= 0)
            return "revoked";
        if (a->rep.error != collSuccess)
            return "failed";
        if (a->rep.flags & COLL_STATUS_F_ABORTING)
            return "aborting";
        return a->rep.open > 0 ? "in call" : "idle";
    case COLL_JOB_NO_ANSWER:
        return "no answer";
    case COLL_JOB_REFUSED:
        return "gone";
    case COLL_JOB_CLOSED:
        return "refused";
    case COLL_JOB_BAD:
        return "bad answer";
    case COLL_JOB_FAILED:
        break;
    }
    return "unreachable";
}

/* Why a rank gave no answer, in words. */
static void job_why(const struct coll_job_answer *a, int wait_ms, char *buf, size_t cap)
{
    switch (a->how) {
    case COLL_JOB_NO_ANSWER:
        snprintf(buf, cap, "no answer within %d ms (stopped?)", wait_ms);
        break;
    case COLL_JOB_REFUSED:
        snprintf(buf, cap, "its listener refuses connections: the process is gone");
        break;
    case COLL_JOB_CLOSED:
        snprintf(buf, cap, "closed the connection unanswered: not this job's secret");
        break;
    case COLL_JOB_BAD:
        snprintf(buf, cap, "a bad answer: %s", a->why ? a->why : "?");
        break;
    case COLL_JOB_FAILED:
        snprintf(buf, cap, "cannot connect: %s", strerror(a->err));
        break;
    case COLL_JOB_ANSWERED:
        snprintf(buf, cap, "answered");
        break;
    }
}

static void job_call_str(const struct coll_status_call *c, char *buf, size_t cap)
{
    size_t len = 0;
    coll_buf_printf(buf, cap, &len, "#%llu %s", (unsigned long long)c->seq, c->name);
    if (c->dtype >= 0)
        coll_buf_printf(buf, cap, &len, " %llu x %s", (unsigned long long)c->count,
                        coll_dtype_name((collDataType_t)c->dtype));
    if (c->op >= 0)
        coll_buf_printf(buf, cap, &len, " %s", coll_op_name((collRedOp_t)c->op));
    if (c->root >= 0)
        coll_buf_printf(buf, cap, &len, " root %d", c->root);
    if (c->peer >= 0)
        coll_buf_printf(buf, cap, &len, " peer %d", c->peer);
}

static void job_ms_str(int64_t ms, char *buf, size_t cap)
{
    if (ms < 1000)
        snprintf(buf, cap, "%lld ms", (long long)ms);
    else
        snprintf(buf, cap, "%.1f s", (double)ms / 1000.0);
}

static void job_bytes_str(uint64_t b, char *buf, size_t cap)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    double v = (double)b;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, cap, "%llu B", (unsigned long long)b);
    else
        snprintf(buf, cap, "%.*f %s", v < 10 ? 1 : 0, v, units[u]);
}

/* "rank 3 (sent 4 KiB/4 KiB, recv 0 B/4 KiB)": the peer waited for and what
 * moved with it. */
static void job_wait_str(const struct coll_job_answer *a, char *buf, size_t cap)
{
    int p = job_waits_for(a);
    if (p < 0) {
        snprintf(buf, cap, "-");
        return;
    }
    size_t len = 0;
    coll_buf_printf(buf, cap, &len, "rank %d", p);
    for (int k = 0; k < a->rep.npeers; k++) {
        const struct coll_status_peer *q = &a->rep.peers[k];
        if (q->peer != p)
            continue;
        char s[4][24];
        job_bytes_str(q->sent, s[0], sizeof(s[0]));
        job_bytes_str(q->sent_posted, s[1], sizeof(s[1]));
        job_bytes_str(q->recvd, s[2], sizeof(s[2]));
        job_bytes_str(q->recvd_posted, s[3], sizeof(s[3]));
        coll_buf_printf(buf, cap, &len, " (sent %s/%s, recv %s/%s)", s[0], s[1], s[2], s[3]);
    }
}

struct job_verdict {
    int culprit;      /* -1: none */
    int waiters;      /* ranks whose chain ends at it */
    int64_t waited_ms; /* the longest of their waits */
    char text[1024];
};

/* Follows the chain of waits from rank k; returns the rank it ends at, or -1
 * (a cycle, a rank in a call that waits for nobody yet). */
static int job_chain_end(const struct coll_job_answer *a, int n, int k, int64_t stuck_ms)
{
    int x = job_waits_for(&a[k]);
    for (int steps = 0; x >= 0 && x < n && steps <= n; steps++) {
        if (a[x].how != COLL_JOB_ANSWERED)
            return x;
        if (!job_in_call(&a[x]))
            return a[k].rep.cur.age_ms >= stuck_ms ? x : -1;
        x = job_waits_for(&a[x]);
    }
    return -1;
}

static void job_rank_list(const int *list, int n, char *buf, size_t cap, size_t *len)
{
    for (int i = 0; i < n; i++)
        coll_buf_printf(buf, cap, len, "%s%d", i == 0 ? "" : i == n - 1 ? " and " : ", ",
                        list[i]);
}

static void job_verdict(const struct coll_job_rank *ranks, const struct coll_job_answer *a, int n,
                        int wait_ms, struct job_verdict *v)
{
    int *ends = calloc((size_t)n, sizeof(int)), *list = calloc((size_t)n, sizeof(int));
    v->culprit = -1;
    v->waiters = 0;
    v->waited_ms = 0;
    size_t len = 0;
    if (ends == NULL || list == NULL) {
        snprintf(v->text, sizeof(v->text), "out of memory");
        free(ends);
        free(list);
        return;
    }
    for (int k = 0; k < n; k++) {
        int e = job_chain_end(a, n, k, JOB_STUCK_MS);
        if (e >= 0)
            ends[e]++;
    }
    for (int k = 0; k < n; k++)
        if (ends[k] > 0 && (v->culprit < 0 || ends[k] > ends[v->culprit]))
            v->culprit = k;
    int nsilent = 0, nfailed = 0, blamed = -1;
    for (int k = 0; k < n; k++) {
        nsilent += a[k].how != COLL_JOB_ANSWERED;
        if (a[k].how == COLL_JOB_ANSWERED && (a[k].rep.error != 0 || a[k].rep.revoked_by >= 0)) {
            nfailed++;
            if (blamed < 0)
                blamed = a[k].rep.failed_peer;
        }
    }
    char why[160];
    if (v->culprit >= 0) {
        int c = v->culprit, nl = 0;
        const struct coll_status_call *call = NULL;
        for (int k = 0; k < n; k++) {
            if (k != c && job_chain_end(a, n, k, JOB_STUCK_MS) == c) {
                list[nl++] = k;
                if (a[k].rep.cur.age_ms > v->waited_ms) {
                    v->waited_ms = a[k].rep.cur.age_ms;
                    call = &a[k].rep.cur;
                }
            }
        }
        v->waiters = nl;
        char waited[32];
        job_ms_str(v->waited_ms, waited, sizeof(waited));
        coll_buf_printf(v->text, sizeof(v->text), &len, "rank %d (%s:%d) is the one the others "
                        "wait for: rank%s ", c, ranks[c].host, ranks[c].pid, nl > 1 ? "s" : "");
        job_rank_list(list, nl, v->text, sizeof(v->text), &len);
        coll_buf_printf(v->text, sizeof(v->text), &len, " wait%s for it",
                        nl > 1 ? "" : "s");
        if (call != NULL)
            coll_buf_printf(v->text, sizeof(v->text), &len, " in %s #%llu (up to %s)",
                            call->name, (unsigned long long)call->seq, waited);
        if (a[c].how != COLL_JOB_ANSWERED) {
            job_why(&a[c], wait_ms, why, sizeof(why));
            coll_buf_printf(v->text, sizeof(v->text), &len, "; it gave %s", why);
        } else if (a[c].rep.last.state >= 0) {
            coll_buf_printf(v->text, sizeof(v->text), &len,
                            "; it is in no call (last done: %s #%llu)", a[c].rep.last.name,
                            (unsigned long long)a[c].rep.last.seq);
        } else {
            coll_buf_printf(v->text, sizeof(v->text), &len, "; it is in no call yet");
        }
    } else if (nsilent > 0) {
        int nl = 0;
        for (int k = 0; k < n; k++)
            if (a[k].how != COLL_JOB_ANSWERED)
                list[nl++] = k;
        coll_buf_printf(v->text, sizeof(v->text), &len, "rank%s ", nl > 1 ? "s" : "");
        job_rank_list(list, nl, v->text, sizeof(v->text), &len);
        coll_buf_printf(v->text, sizeof(v->text), &len, " did not answer (see above); no "
                        "rank that answered waits for %s", nl > 1 ? "them" : "it");
        if (nl == 1)
            v->culprit = list[0];
    } else if (nfailed > 0) {
        coll_buf_printf(v->text, sizeof(v->text), &len, "the communicator failed on %d of %d "
                        "ranks", nfailed, n);
        if (blamed >= 0)
            coll_buf_printf(v->text, sizeof(v->text), &len, "; the failure is blamed on rank %d",
                            blamed);
    } else {
        int nl = 0;
        for (int k = 0; k < n; k++)
            if (job_in_call(&a[k]) && a[k].rep.cur.age_ms >= JOB_STUCK_MS)
                list[nl++] = k;
        if (nl == 0) {
            coll_buf_printf(v->text, sizeof(v->text), &len, "all %d ranks answered; none has "
                            "waited %d ms in a call", n, JOB_STUCK_MS);
        } else {
            coll_buf_printf(v->text, sizeof(v->text), &len, "rank%s ", nl > 1 ? "s" : "");
            job_rank_list(list, nl, v->text, sizeof(v->text), &len);
            coll_buf_printf(v->text, sizeof(v->text), &len, " %s been in a call for %d ms or "
                            "more, but no rank stands out (they wait for each other, or "
                            "still move bytes)", nl > 1 ? "have" : "has", JOB_STUCK_MS);
        }
    }
    free(ends);
    free(list);
}

static void job_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static void job_json_rank_or_null(FILE *f, const char *key, int r)
{
    if (r >= 0)
        fprintf(f, ", \"%s\": %d", key, r);
    else
        fprintf(f, ", \"%s\": null", key);
}

static const char *const job_call_states[] = {"issued", "running", "done", "failed"};

static void job_json_call(FILE *f, const struct coll_status_call *c)
{
    fprintf(f, "{\"seq\": %llu, \"name\": ", (unsigned long long)c->seq);
    job_json_str(f, c->name);
    fprintf(f, ", \"algo\": ");
    job_json_str(f, c->algo);
    fprintf(f, ", \"count\": %llu, \"dtype\": ", (unsigned long long)c->count);
    if (c->dtype >= 0)
        job_json_str(f, coll_dtype_name((collDataType_t)c->dtype));
    else
        fprintf(f, "null");
    fprintf(f, ", \"op\": ");
    if (c->op >= 0)
        job_json_str(f, coll_op_name((collRedOp_t)c->op));
    else
        fprintf(f, "null");
    job_json_rank_or_null(f, "root", c->root);
    job_json_rank_or_null(f, "peer", c->peer);
    fprintf(f, ", \"state\": \"%s\"", c->state >= 0 ? job_call_states[c->state] : "none");
    if (c->took_ms < 0) {
        fprintf(f, ", \"running_ms\": %lld", (long long)c->age_ms);
    } else {
        fprintf(f, ", \"took_ms\": %lld, \"ended_ms_ago\": %lld, \"result\": ",
                (long long)c->took_ms, (long long)c->age_ms);
        job_json_str(f, coll_result_name((collResult_t)c->result));
    }
}

static void job_json(FILE *f, const struct coll_job_rank *ranks, const struct coll_job_answer *a,
                     int n, int wait_ms, const struct job_verdict *v, const char *title)
{
    fprintf(f, "{\"title\": ");
    job_json_str(f, title ? title : "");
    fprintf(f, ", \"nranks\": %d, \"wait_ms\": %d, \"ranks\": [", n, wait_ms);
    for (int k = 0; k < n; k++) {
        const struct coll_status_reply *r = &a[k].rep;
        char addr[COLL_ADDR_STRLEN], why[160];
        coll_socket_addr_str(&ranks[k].addr.sa, addr, sizeof(addr));
        fprintf(f, "%s\n  {\"rank\": %d, \"host\": ", k ? "," : "", k);
        job_json_str(f, ranks[k].host);
        fprintf(f, ", \"pid\": %d, \"addr\": ", ranks[k].pid);
        job_json_str(f, addr);
        fprintf(f, ", \"state\": \"%s\", \"answered\": %s", job_state(&a[k]),
                a[k].how == COLL_JOB_ANSWERED ? "true" : "false");
        if (a[k].how != COLL_JOB_ANSWERED) {
            job_why(&a[k], wait_ms, why, sizeof(why));
            fprintf(f, ", \"why\": ");
            job_json_str(f, why);
            fprintf(f, "}");
            continue;
        }
        fprintf(f, ", \"comm_name\": ");
        job_json_str(f, r->comm_name);
        fprintf(f, ", \"error\": ");
        if (r->error != 0)
            job_json_str(f, coll_result_name((collResult_t)r->error));
        else
            fprintf(f, "null");
        job_json_rank_or_null(f, "revoked_by", r->revoked_by);
        job_json_rank_or_null(f, "failed_peer", r->failed_peer);
        fprintf(f, ", \"aborting\": %s, \"finalized\": %s, \"calls\": %llu, \"open\": %d",
                r->flags & COLL_STATUS_F_ABORTING ? "true" : "false",
                r->flags & COLL_STATUS_F_FINALIZED ? "true" : "false",
                (unsigned long long)r->calls, r->open);
        fprintf(f, ", \"call\": ");
        if (r->open > 0) {
            job_json_call(f, &r->cur);
            job_json_rank_or_null(f, "waits_for", r->wait_peer);
            fprintf(f, ", \"peers\": [");
            for (int p = 0; p < r->npeers; p++) {
                const struct coll_status_peer *q = &r->peers[p];
                fprintf(f, "%s{\"peer\": ", p ? ", " : "");
                if (q->peer >= 0)
                    fprintf(f, "%d", q->peer);
                else
                    fprintf(f, "\"other\"");
                fprintf(f, ", \"sent\": %llu, \"sent_posted\": %llu, \"recvd\": %llu, "
                        "\"recvd_posted\": %llu}", (unsigned long long)q->sent,
                        (unsigned long long)q->sent_posted, (unsigned long long)q->recvd,
                        (unsigned long long)q->recvd_posted);
            }
            fprintf(f, "]}");
        } else {
            fprintf(f, "null");
        }
        fprintf(f, ", \"last_done\": ");
        if (r->last.state >= 0) {
            job_json_call(f, &r->last);
            fprintf(f, "}");
        } else {
            fprintf(f, "null");
        }
        fprintf(f, "}");
    }
    fprintf(f, "\n], \"verdict\": {\"rank\": ");
    if (v->culprit >= 0)
        fprintf(f, "%d", v->culprit);
    else
        fprintf(f, "null");
    fprintf(f, ", \"waiters\": %d, \"text\": ", v->waiters);
    job_json_str(f, v->text);
    fprintf(f, "}}\n");
}

/* The text report: a header, a line per rank with aligned columns, the verdict. */
static void job_text(FILE *f, const struct coll_job_rank *ranks, const struct coll_job_answer *a,
                     int n, int wait_ms, const struct job_verdict *v, const char *title)
{
    enum { C_RANK, C_WHO, C_STATE, C_CALL, C_FOR, C_WAITS, C_LAST, NCOLS };
    static const char *const heads[NCOLS] = {"rank", "host:pid", "state", "call", "running",
                                             "waits for", "last done"};
    char(*cells)[NCOLS][160] = calloc((size_t)n, sizeof(*cells));
    if (cells == NULL) {
        fprintf(f, "out of memory\n");
        return;
    }
    int width[NCOLS];
    for (int c = 0; c < NCOLS; c++)
        width[c] = (int)strlen(heads[c]);
    for (int k = 0; k < n; k++) {
        const struct coll_status_reply *r = &a[k].rep;
        char(*row)[160] = cells[k];
        snprintf(row[C_RANK], 160, "%d", k);
        snprintf(row[C_WHO], 160, "%s:%d", ranks[k].host, ranks[k].pid);
        snprintf(row[C_STATE], 160, "%s", job_state(&a[k]));
        for (int c = C_CALL; c < NCOLS; c++)
            snprintf(row[c], 160, "-");
        if (a[k].how != COLL_JOB_ANSWERED) {
            job_why(&a[k], wait_ms, row[C_CALL], 160);
        } else {
            size_t len = strlen(row[C_STATE]);
            if (r->revoked_by >= 0)
                coll_buf_printf(row[C_STATE], 160, &len, " by rank %d", r->revoked_by);
            else if (r->error != 0)
                coll_buf_printf(row[C_STATE], 160, &len, " (%s)",
                                coll_result_name((collResult_t)r->error));
            if (r->revoked_by < 0 && r->failed_peer >= 0)
                coll_buf_printf(row[C_STATE], 160, &len, ", blames rank %d", r->failed_peer);
            if (r->open > 0) {
                job_call_str(&r->cur, row[C_CALL], 160);
                if (r->open > 1) {
                    size_t clen = strlen(row[C_CALL]);
                    coll_buf_printf(row[C_CALL], 160, &clen, " (+%d)", r->open - 1);
                }
                job_ms_str(r->cur.age_ms, row[C_FOR], 160);
                job_wait_str(&a[k], row[C_WAITS], 160);
            }
            if (r->last.state >= 0) {
                size_t llen = 0;
                coll_buf_printf(row[C_LAST], 160, &llen, "#%llu %s",
                                (unsigned long long)r->last.seq, r->last.name);
                if (r->last.state == COLL_FLIGHT_FAILED)
                    coll_buf_printf(row[C_LAST], 160, &llen, " (%s)",
                                    coll_result_name((collResult_t)r->last.result));
            }
        }
        for (int c = 0; c < NCOLS; c++)
            if ((int)strlen(row[c]) > width[c])
                width[c] = (int)strlen(row[c]);
    }
    if (title != NULL && title[0] != '\0')
        fprintf(f, "%s\n", title);
    for (int c = 0; c < NCOLS; c++)
        fprintf(f, "%-*s%s", c + 1 < NCOLS ? width[c] : 0, heads[c], c + 1 < NCOLS ? "  " : "\n");
    for (int k = 0; k < n; k++) {
        /* A rank that did not answer: its cause spans the columns after its state. */
        int last = a[k].how == COLL_JOB_ANSWERED ? NCOLS : C_CALL + 1;
        for (int c = 0; c < last; c++)
            fprintf(f, "%-*s%s", c + 1 < last ? width[c] : 0, cells[k][c],
                    c + 1 < last ? "  " : "\n");
    }
    fprintf(f, "verdict: %s\n", v->text);
    free(cells);
}

int coll_job_status_report(const char *prog, const struct coll_job_rank *ranks, int n,
                           const uint8_t *secret, int wait_ms, bool json, const char *title,
                           FILE *out)
{
    struct coll_job_answer *a = calloc((size_t)n, sizeof(*a));
    if (a == NULL) {
        fprintf(stderr, "%s: out of memory for %d ranks\n", prog, n);
        return 1;
    }
    coll_job_status_ask(ranks, n, secret, wait_ms, a);
    int answered = 0, closed = 0;
    for (int k = 0; k < n; k++) {
        answered += a[k].how == COLL_JOB_ANSWERED;
        closed += a[k].how == COLL_JOB_CLOSED;
    }
    if (answered == 0) {
        /* Nothing learned: only why. */
        if (closed == n)
            fprintf(stderr, "%s: every rank closed the connection without answering: the "
                    "secret is not this job's (COLL_SECRET)\n", prog);
        else
            fprintf(stderr, "%s: none of the %d ranks answered within %d ms\n", prog, n,
                    wait_ms);
        free(a);
        return 1;
    }
    struct job_verdict v;
    job_verdict(ranks, a, n, wait_ms, &v);
    if (json)
        job_json(out, ranks, a, n, wait_ms, &v, title);
    else
        job_text(out, ranks, a, n, wait_ms, &v, title);
    free(a);
    return 0;
}
