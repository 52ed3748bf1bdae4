/* The reader of the flight records of COLL_FLIGHT_DIR (flight_read.h gives the
 * format): every value is checked, so that a malformed or hostile file is refused
 * with its line and never read past its bounds. */
#include "flight_read.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#define FR_VERSION 1
#define FR_MAX_LINE 65536     /* longer lines are refused */
#define FR_MAX_CALLS 4096     /* call lines per file (the recorder writes 32) */
#define FR_MAX_PEERS 4096     /* peer lines per call (the recorder writes 17 at most) */

struct fr_parse {
    const char *path;
    int line;
    char msg[256];
};

__attribute__((format(printf, 2, 3))) static bool fr_fail(struct fr_parse *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->msg, sizeof(p->msg), fmt, ap);
    va_end(ap);
    return false;
}

static bool fr_ull(const char *s, unsigned long long *v_p)
{
    if (!isdigit((unsigned char)s[0]))
        return false;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return false;
    *v_p = v;
    return true;
}

static bool fr_ll(const char *s, long long lo, long long hi, long long *v_p)
{
    const char *d = s[0] == '-' ? s + 1 : s;
    if (!isdigit((unsigned char)d[0]))
        return false;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < lo || v > hi)
        return false;
    *v_p = v;
    return true;
}

static bool fr_copy(struct fr_parse *p, const char *key, const char *v, char *dst, size_t cap)
{
    size_t n = strlen(v);
    if (n == 0 || n >= cap)
        return fr_fail(p, "%s=%s: %s (at most %zu characters)", key, v,
                       n == 0 ? "empty" : "too long", cap - 1);
    memcpy(dst, v, n + 1);
    return true;
}

static bool fr_is_state(const char *s)
{
    return strcmp(s, "issued") == 0 || strcmp(s, "running") == 0 || strcmp(s, "done") == 0 ||
           strcmp(s, "failed") == 0;
}

/* A "call k=v ..." line (v: after "call "), parsed into c. */
static bool fr_parse_call(struct fr_parse *p, char *v, struct fr_call *c)
{
    memset(c, 0, sizeof(*c));
    c->root = c->peer = -1;
    snprintf(c->algo, sizeof(c->algo), "?");
    snprintf(c->result, sizeof(c->result), "?");
    snprintf(c->dtype, sizeof(c->dtype), "-");
    snprintf(c->op, sizeof(c->op), "-");
    bool seq = false, name = false, state = false;
    char *save = NULL;
    for (char *t = strtok_r(v, " ", &save); t != NULL; t = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(t, '=');
        if (eq == NULL)
            return fr_fail(p, "call: \"%.40s\" is not key=value", t);
        *eq = '\0';
        const char *k = t, *x = eq + 1;
        bool ok = true;
        if (strcmp(k, "seq") == 0)
            ok = seq = fr_ull(x, &c->seq);
        else if (strcmp(k, "count") == 0)
            ok = fr_ull(x, &c->count);
        else if (strcmp(k, "name") == 0)
            ok = name = fr_copy(p, k, x, c->name, sizeof(c->name));
        else if (strcmp(k, "algo") == 0)
            ok = fr_copy(p, k, x, c->algo, sizeof(c->algo));
        else if (strcmp(k, "state") == 0)
            ok = state = fr_copy(p, k, x, c->state, sizeof(c->state)) && fr_is_state(x);
        else if (strcmp(k, "result") == 0)
            ok = fr_copy(p, k, x, c->result, sizeof(c->result));
        else if (strcmp(k, "dtype") == 0)
            ok = fr_copy(p, k, x, c->dtype, sizeof(c->dtype));
        else if (strcmp(k, "op") == 0)
            ok = fr_copy(p, k, x, c->op, sizeof(c->op));
        else if (strcmp(k, "root") == 0)
            ok = fr_ll(x, -1, FR_MAX_RANKS, &c->root);
        else if (strcmp(k, "peer") == 0)
            ok = fr_ll(x, -1, FR_MAX_RANKS, &c->peer);
        else if (strcmp(k, "start_us") == 0)
            ok = fr_ll(x, 0, INT64_MAX, &c->start_us);
        else if (strcmp(k, "end_us") == 0)
            ok = fr_ll(x, 0, INT64_MAX, &c->end_us);
        if (!ok)
            return p->msg[0] ? false : fr_fail(p, "call: bad %s=%.40s", k, x);
    }
    if (!seq || !name || !state)
        return fr_fail(p, "call: seq, name and state are required");
    return true;
}

static bool fr_parse_peer(struct fr_parse *p, char *v, struct fr_peer *q)
{
    memset(q, 0, sizeof(*q));
    long long rank = 0;
    int seen = 0;
    char *save = NULL;
    for (char *t = strtok_r(v, " ", &save); t != NULL; t = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(t, '=');
        if (eq == NULL)
            return fr_fail(p, "peer: \"%.40s\" is not key=value", t);
        *eq = '\0';
        const char *k = t, *x = eq + 1;
        bool ok = true;
        if (strcmp(k, "rank") == 0)
            ok = fr_ll(x, -1, FR_MAX_RANKS - 1, &rank), seen |= 1;
        else if (strcmp(k, "sent") == 0)
            ok = fr_ull(x, &q->sent), seen |= 2;
        else if (strcmp(k, "sent_posted") == 0)
            ok = fr_ull(x, &q->sent_posted), seen |= 4;
        else if (strcmp(k, "recvd") == 0)
            ok = fr_ull(x, &q->recvd), seen |= 8;
        else if (strcmp(k, "recvd_posted") == 0)
            ok = fr_ull(x, &q->recvd_posted), seen |= 16;
        if (!ok)
            return fr_fail(p, "peer: bad %s=%.40s", k, x);
    }
    if (seen != 31)
        return fr_fail(p, "peer: rank, sent, sent_posted, recvd and recvd_posted are required");
    q->rank = (int)rank;
    return true;
}

static void fr_file_free(struct fr_file *f)
{
    if (f == NULL)
        return;
    for (int i = 0; i < f->ncalls; i++)
        free(f->calls[i].peers);
    free(f->calls);
    free(f->path);
    free(f->name);
    free(f->host);
    free(f->error);
    free(f);
}

static bool fr_strdup(struct fr_parse *p, char **dst, const char *v)
{
    free(*dst);
    *dst = strdup(v);
    return *dst != NULL || fr_fail(p, "out of memory");
}

/* One line of a file after its first: applies it to f. */
static bool fr_parse_line(struct fr_parse *p, char *line, struct fr_file *f, unsigned *seen)
{
    char *v = strchr(line, ' ');
    if (v != NULL)
        *v++ = '\0';
    else
        v = line + strlen(line);
    const char *k = line;
    long long x;
    if (strcmp(k, "comm") == 0) {
        if (strlen(v) != 16 || strspn(v, "0123456789abcdefABCDEF") != 16)
            return fr_fail(p, "comm: \"%.40s\" is not 16 hex digits", v);
        for (int i = 0; i < 16; i++)
            f->comm[i] = (char)tolower((unsigned char)v[i]);
        f->comm[16] = '\0';
        *seen |= 1;
    } else if (strcmp(k, "rank") == 0) {
        if (!fr_ll(v, 0, FR_MAX_RANKS - 1, &x))
            return fr_fail(p, "rank: \"%.40s\" is not a rank", v);
        f->rank = (int)x;
        *seen |= 2;
    } else if (strcmp(k, "nranks") == 0) {
        if (!fr_ll(v, 1, FR_MAX_RANKS, &x))
            return fr_fail(p, "nranks: \"%.40s\" is not 1 to %d", v, FR_MAX_RANKS);
        f->nranks = (int)x;
        *seen |= 4;
    } else if (strcmp(k, "reason") == 0) {
        if (strcmp(v, "failed") != 0 && strcmp(v, "aborted") != 0 && strcmp(v, "revoked") != 0)
            return fr_fail(p, "reason: \"%.40s\" is not failed, aborted or revoked", v);
        snprintf(f->reason, sizeof(f->reason), "%s", v);
        *seen |= 8;
    } else if (strcmp(k, "why") == 0) {
        return fr_copy(p, k, v, f->why, sizeof(f->why));
    } else if (strcmp(k, "name") == 0) {
        return fr_strdup(p, &f->name, v);
    } else if (strcmp(k, "host") == 0) {
        return fr_strdup(p, &f->host, v);
    } else if (strcmp(k, "error") == 0) {
        return fr_strdup(p, &f->error, v);
    } else if (strcmp(k, "pid") == 0) {
        if (!fr_ll(v, 0, INT64_MAX, &f->pid))
            return fr_fail(p, "pid: \"%.40s\" is not a number", v);
    } else if (strcmp(k, "wait_peer") == 0) {
        if (!fr_ll(v, -1, FR_MAX_RANKS - 1, &f->wait_peer))
            return fr_fail(p, "wait_peer: \"%.40s\" is not a rank or -1", v);
    } else if (strcmp(k, "written_us") == 0) {
        if (!fr_ll(v, 0, INT64_MAX, &f->written_us))
            return fr_fail(p, "written_us: \"%.40s\" is not a number", v);
    } else if (strcmp(k, "calls") == 0) {
        if (!fr_ull(v, &f->calls_total))
            return fr_fail(p, "calls: \"%.40s\" is not a number", v);
    } else if (strcmp(k, "call") == 0) {
        if (f->ncalls == FR_MAX_CALLS)
            return fr_fail(p, "more than %d calls", FR_MAX_CALLS);
        struct fr_call *c = realloc(f->calls, (size_t)(f->ncalls + 1) * sizeof(*c));
        if (c == NULL)
            return fr_fail(p, "out of memory");
        f->calls = c;
        if (!fr_parse_call(p, v, &c[f->ncalls]))
            return false;
        f->ncalls++;
    } else if (strcmp(k, "peer") == 0) {
        if (f->ncalls == 0)
            return fr_fail(p, "a peer line before any call line");
        struct fr_call *c = &f->calls[f->ncalls - 1];
        if (c->npeers == FR_MAX_PEERS)
            return fr_fail(p, "more than %d peers in one call", FR_MAX_PEERS);
        struct fr_peer *q = realloc(c->peers, (size_t)(c->npeers + 1) * sizeof(*q));
        if (q == NULL)
            return fr_fail(p, "out of memory");
        c->peers = q;
        if (!fr_parse_peer(p, v, &q[c->npeers]))
            return false;
        c->npeers++;
    } else if (strcmp(k, "end") == 0) {
        *seen |= 16;
    }
    return true; /* an unknown key: a later version's */
}

/* Reads the file at path into *f_p; false with p->msg (and p->line) set. */
static bool fr_read_file(struct fr_parse *p, const char *path, struct fr_file **f_p)
{
    FILE *in = fopen(path, "re");
    if (in == NULL)
        return fr_fail(p, "cannot open: %s", strerror(errno));
    struct fr_file *f = calloc(1, sizeof(*f));
    char *line = NULL;
    size_t cap = 0;
    bool ok = f != NULL && (f->path = strdup(path)) != NULL;
    if (!ok)
        fr_fail(p, "out of memory");
    else
        f->wait_peer = -1;
    unsigned seen = 0;
    ssize_t n;
    while (ok && (n = getline(&line, &cap, in)) >= 0) {
        p->line++;
        if (n > FR_MAX_LINE) {
            ok = fr_fail(p, "line longer than %d bytes", FR_MAX_LINE);
            break;
        }
        if ((size_t)n != strlen(line)) {
            ok = fr_fail(p, "a NUL byte in the line (not a flight record?)");
            break;
        }
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = '\0';
        if (p->line == 1) {
            long long v;
            if (strncmp(line, "COLL-FLIGHT ", 12) != 0 || !fr_ll(line + 12, 0, 1 << 30, &v)) {
                ok = fr_fail(p, "not a flight record: the first line is not \"COLL-FLIGHT %d\"",
                             FR_VERSION);
            } else if (v != FR_VERSION) {
                ok = fr_fail(p, "format version %lld; this collinfo reads version %d", v,
                             FR_VERSION);
            }
            continue;
        }
        if (seen & 16) {
            if (line[0] != '\0')
                ok = fr_fail(p, "text after the end line");
            continue;
        }
        if (line[0] != '\0')
            ok = fr_parse_line(p, line, f, &seen);
    }
    if (ok && ferror(in))
        ok = fr_fail(p, "read error: %s", strerror(errno));
    if (ok && p->line == 0)
        ok = fr_fail(p, "empty file");
    if (ok && !(seen & 16))
        ok = fr_fail(p, "no end line: the file is cut short");
    if (ok && (seen & 15) != 15) {
        p->line = 0;
        ok = fr_fail(p, "comm, rank, nranks and reason are required");
    }
    if (ok && f->rank >= f->nranks) {
        p->line = 0;
        ok = fr_fail(p, "rank %d of %d ranks", f->rank, f->nranks);
    }
    free(line);
    fclose(in);
    if (!ok) {
        fr_file_free(f);
        return false;
    }
    *f_p = f;
    return true;
}

static void fr_error(struct fr_records *st, const char *path, int line, const char *msg)
{
    if (line > 0)
        fprintf(st->err, "collinfo: %s:%d: %s\n", path, line, msg);
    else
        fprintf(st->err, "collinfo: %s: %s\n", path, msg);
    if (st->nerrors == st->cap_errors) {
        int cap = st->cap_errors ? 2 * st->cap_errors : 8;
        struct fr_error *e = realloc(st->errors, (size_t)cap * sizeof(*e));
        if (e == NULL)
            return;
        st->errors = e;
        st->cap_errors = cap;
    }
    struct fr_error *e = &st->errors[st->nerrors];
    e->path = strdup(path);
    if (e->path == NULL)
        return;
    e->line = line;
    snprintf(e->msg, sizeof(e->msg), "%s", msg);
    st->nerrors++;
}

static int fr_name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool fr_is_record_name(const char *n)
{
    size_t len = strlen(n);
    return strncmp(n, "flight-", 7) == 0 && len > 11 && strcmp(n + len - 4, ".txt") == 0;
}

bool coll_fr_read_dir(struct fr_records *st)
{
    DIR *d = opendir(st->dir);
    if (d == NULL) {
        fprintf(st->err, "collinfo: cannot open the directory %s: %s\n", st->dir,
                strerror(errno));
        return false;
    }
    char **names = NULL;
    int n = 0, cap = 0;
    struct dirent *e;
    bool ok = true;
    while ((e = readdir(d)) != NULL) {
        if (!fr_is_record_name(e->d_name))
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **nn = realloc(names, (size_t)cap * sizeof(*nn));
            if (nn == NULL) {
                ok = false;
                break;
            }
            names = nn;
        }
        if ((names[n] = strdup(e->d_name)) == NULL) {
            ok = false;
            break;
        }
        n++;
    }
    closedir(d);
    if (!ok)
        fprintf(st->err, "collinfo: out of memory listing %s\n", st->dir);
    if (n > 0)
        qsort(names, (size_t)n, sizeof(*names), fr_name_cmp);
    st->files = n > 0 ? calloc((size_t)n, sizeof(*st->files)) : NULL;
    for (int i = 0; i < n; i++) {
        char path[4096];
        int len = snprintf(path, sizeof(path), "%s/%s", st->dir, names[i]);
        struct fr_parse p = {.path = path};
        struct fr_file *f = NULL;
        if (len < 0 || (size_t)len >= sizeof(path))
            fr_error(st, names[i], 0, "path too long");
        else if (st->files == NULL)
            fr_error(st, path, 0, "out of memory");
        else if (!fr_read_file(&p, path, &f))
            fr_error(st, path, p.line, p.msg);
        else
            st->files[st->nfiles++] = f;
        free(names[i]);
    }
    free(names);
    return ok;
}

void coll_fr_records_free(struct fr_records *rs)
{
    for (int i = 0; i < rs->nfiles; i++)
        fr_file_free(rs->files[i]);
    free(rs->files);
    for (int i = 0; i < rs->nerrors; i++)
        free(rs->errors[i].path);
    free(rs->errors);
    rs->files = NULL;
    rs->errors = NULL;
    rs->nfiles = rs->nerrors = rs->cap_errors = 0;
}
