/* A client of PyTorch's TCPStore (lib/engine/torch_store.h): the probe that learns
 * the server's dialect, the handshake, set and a get that waits, each by a
 * deadline.  The bytes are made and read by torch_store_wire.c. */
#include "torch_store.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "log.h"

/* While the probe's answer is slow, it is sent a nudge after 10 ms, then after
 * twice as long each time, at most every 200 ms: the libuv server answers only
 * once a read after its first one brings bytes. */
#define TSTORE_NUDGE_FIRST_NS (10 * 1000000LL)
#define TSTORE_NUDGE_MAX_NS (200 * 1000000LL)

static collResult_t tstore_fail(const struct coll_torch_store *s, collResult_t res, char *err,
                                size_t errlen, const char *what, const char *why)
{
    snprintf(err, errlen, "%s: %s: %s", s->where, what, why);
    return res;
}

/* The cause of a failed send or receive, for the message. */
static const char *tstore_io_why(collResult_t res, int e)
{
    if (res == collTimeout)
        return "no answer by the deadline";
    if (res == collRemoteError && (e == 0 || e == ECONNRESET || e == EPIPE))
        return "the store closed the connection";
    return strerror(e);
}

static collResult_t tstore_dial(const struct coll_torch_store *s, const struct sockaddr *sa,
                                socklen_t len, int64_t deadline_ns, int *fd_p, char *err,
                                size_t errlen)
{
    collResult_t res = coll_socket_connect(sa, len, deadline_ns, true, fd_p);
    if (res != collSuccess) {
        char why[160];
        snprintf(why, sizeof(why), "%s%s", strerror(errno),
                 res == collTimeout ? ", until the deadline" : "");
        return tstore_fail(s, res, err, errlen, "cannot connect", why);
    }
    return collSuccess;
}

/* Sends the probe on a connection of its own and reads its answer until it tells
 * the dialect (torch_store_wire.h). */
static collResult_t tstore_probe(const struct coll_torch_store *s, const struct sockaddr *sa,
                                 socklen_t len, int64_t deadline_ns,
                                 enum coll_tstore_dialect *d_p, char *err, size_t errlen)
{
    int fd;
    COLL_CHECK(tstore_dial(s, sa, len, deadline_ns, &fd, err, errlen));
    uint8_t q[128], nudge[16];
    size_t qn = coll_tstore_probe(q, sizeof(q)), nn = coll_tstore_probe_nudge(nudge, sizeof(nudge));
    int e;
    collResult_t res = coll_socket_send_all(fd, q, qn, deadline_ns, &e);
    bool closed = res == collRemoteError;
    if (res != collSuccess && !closed) {
        close(fd);
        return tstore_fail(s, res, err, errlen, "the probe of its protocol",
                           tstore_io_why(res, e));
    }
    uint8_t ans[2];
    size_t got = 0, nudges = 0;
    int64_t step = TSTORE_NUDGE_FIRST_NS, next = coll_now_ns() + step;
    for (;;) {
        const char *why = NULL;
        enum coll_wire_verdict v = coll_tstore_probe_answer(ans, got, closed, d_p, &why);
        if (v == COLL_WIRE_OK)
            break;
        if (v != COLL_WIRE_MORE) {
            close(fd);
            return tstore_fail(s, collRemoteError, err, errlen, "the probe of its protocol",
                               why);
        }
        int64_t now = coll_now_ns();
        if (now >= deadline_ns) {
            close(fd);
            return tstore_fail(s, collTimeout, err, errlen, "the probe of its protocol",
                               "no answer by the deadline (is a TCPStore listening there?)");
        }
        if (now >= next) {
            /* Whole queries only: a legacy server would block on the rest of one. */
            res = coll_socket_send_all(fd, nudge, nn, deadline_ns, &e);
            if (res == collSuccess)
                nudges++;
            else if (res == collRemoteError)
                closed = true;
            step = step * 2 > TSTORE_NUDGE_MAX_NS ? TSTORE_NUDGE_MAX_NS : step * 2;
            next = now + step;
            continue;
        }
        int64_t until = next < deadline_ns ? next : deadline_ns;
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int pr = poll(&pf, 1, (int)((until - now + 999999) / 1000000));
        if (pr < 0 && errno != EINTR) {
            e = errno;
            close(fd);
            return tstore_fail(s, collSystemError, err, errlen, "poll", strerror(e));
        }
        if (pr <= 0)
            continue;
        /* Two bytes tell the dialects apart: no more is read. */
        ssize_t r = recv(fd, ans + got, sizeof(ans) - got, MSG_DONTWAIT);
        if (r > 0)
            got += (size_t)r;
        else if (r == 0 || errno == ECONNRESET)
            closed = true;
        else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            e = errno;
            close(fd);
            return tstore_fail(s, collSystemError, err, errlen, "the probe of its protocol",
                               strerror(e));
        }
    }
    /* The rest of the answers (one per A and nudge, and B's on a 2.x server) are read
     * before the close, so that the server does not write to a closed connection
     * (torch 2.x logs a warning for that); they come at once, and are not waited
     * for longer than a second. */
    size_t rest = (*d_p == COLL_TSTORE_LEGACY ? 2 : 3) + nudges;
    if (!closed && rest > got) {
        uint8_t sink[64];
        int64_t until = coll_now_ns() + 1000000000LL;
        rest -= got;
        while (rest > 0) {
            size_t n = rest < sizeof(sink) ? rest : sizeof(sink);
            if (coll_socket_recv_all(fd, sink, n, until < deadline_ns ? until : deadline_ns,
                                     &e) != collSuccess)
                break;
            rest -= n;
        }
    }
    close(fd);
    return collSuccess;
}

collResult_t coll_torch_store_connect(struct coll_torch_store *s, const char *hostport,
                                      int64_t deadline_ns, char *err, size_t errlen)
{
    *s = (struct coll_torch_store){.fd = -1};
    snprintf(s->where, sizeof(s->where), "torchrun's store at %s", hostport);
    union coll_sockaddr sa;
    socklen_t len;
    char why[160];
    if (coll_socket_parse_hostport(hostport, &sa, &len, why, sizeof(why)) != collSuccess)
        return tstore_fail(s, collInvalidArgument, err, errlen, "bad address", why);
    enum coll_tstore_dialect d = COLL_TSTORE_UNKNOWN;
    COLL_CHECK(tstore_probe(s, &sa.sa, len, deadline_ns, &d, err, errlen));
    int fd;
    COLL_CHECK(tstore_dial(s, &sa.sa, len, deadline_ns, &fd, err, errlen));
    if (d == COLL_TSTORE_VALIDATED) {
        /* VALIDATE and a PING in one send: the libuv server must find the whole
         * VALIDATE in its first read, and the PING's echo says it was taken. */
        uint8_t q[32];
        uint32_t nonce = (uint32_t)getpid() ^ (uint32_t)coll_now_ns();
        size_t n = coll_tstore_encode(d, COLL_TSTORE_VALIDATE, NULL, NULL, 0, 0, q, sizeof(q));
        n += coll_tstore_encode(d, COLL_TSTORE_PING, NULL, NULL, 0, nonce, q + n, sizeof(q) - n);
        uint8_t ans[4];
        int e;
        collResult_t res = coll_socket_send_all(fd, q, n, deadline_ns, &e);
        if (res == collSuccess)
            res = coll_socket_recv_all(fd, ans, sizeof(ans), deadline_ns, &e);
        const char *bad = NULL;
        if (res == collSuccess &&
            coll_tstore_ping_answer(ans, sizeof(ans), nonce, &bad) != COLL_WIRE_OK)
            res = collRemoteError;
        if (res != collSuccess) {
            close(fd);
            return tstore_fail(s, res, err, errlen, "the handshake (validate, ping)",
                               bad ? bad : tstore_io_why(res, e));
        }
    }
    s->fd = fd;
    s->dialect = d;
    COLL_INFO(COLL_SUBSYS_BOOT, "%s: connected, %s dialect", s->where,
              d == COLL_TSTORE_LEGACY ? "torch 1.x" : "torch 2.x (validated)");
    return collSuccess;
}

/* The key as torch's client puts it on the wire: "/" in front. */
static collResult_t tstore_wire_key(const struct coll_torch_store *s, const char *key,
                                    char *wkey, size_t cap, char *err, size_t errlen)
{
    int n = snprintf(wkey, cap, "/%s", key);
    if (n < 2 || (size_t)n >= cap || (size_t)n > COLL_TSTORE_MAX_KEY)
        return tstore_fail(s, collInvalidArgument, err, errlen, "key", "empty or too long");
    return collSuccess;
}

/* Sends one query and reads an answer of exactly n bytes (0: none). */
static collResult_t tstore_ask(struct coll_torch_store *s, enum coll_tstore_op op,
                               const char *wkey, const void *value, size_t vlen, void *ans,
                               size_t n, int64_t deadline_ns, const char *what, char *err,
                               size_t errlen)
{
    uint8_t q[COLL_TSTORE_MAX_QUERY];
    size_t qn = coll_tstore_encode(s->dialect, op, wkey, value, vlen, 0, q, sizeof(q));
    if (qn == 0)
        return tstore_fail(s, collInvalidArgument, err, errlen, what, "the query does not fit");
    int e;
    collResult_t res = coll_socket_send_all(s->fd, q, qn, deadline_ns, &e);
    if (res == collSuccess && n > 0)
        res = coll_socket_recv_all(s->fd, ans, n, deadline_ns, &e);
    if (res != collSuccess)
        return tstore_fail(s, res, err, errlen, what, tstore_io_why(res, e));
    return collSuccess;
}

collResult_t coll_torch_store_set(struct coll_torch_store *s, const char *key,
                                  const void *value, size_t vlen, int64_t deadline_ns, char *err,
                                  size_t errlen)
{
    char wkey[COLL_TSTORE_MAX_KEY + 2];
    char what[COLL_TSTORE_MAX_KEY + 32];
    COLL_CHECK(tstore_wire_key(s, key, wkey, sizeof(wkey), err, errlen));
    snprintf(what, sizeof(what), "setting key %s", key);
    if (vlen > COLL_TSTORE_MAX_VALUE)
        return tstore_fail(s, collInvalidArgument, err, errlen, what, "the value is too long");
    COLL_CHECK(tstore_ask(s, COLL_TSTORE_SET, wkey, value, vlen, NULL, 0, deadline_ns, what, err,
                          errlen));
    /* SET has no answer: a CHECK of the key says that the store took it. */
    uint8_t ans[1];
    COLL_CHECK(tstore_ask(s, COLL_TSTORE_CHECK, wkey, NULL, 0, ans, sizeof(ans), deadline_ns,
                          what, err, errlen));
    bool set = false;
    const char *why = NULL;
    if (coll_tstore_check_answer(ans, sizeof(ans), &set, &why) != COLL_WIRE_OK)
        return tstore_fail(s, collRemoteError, err, errlen, what, why);
    if (!set)
        return tstore_fail(s, collRemoteError, err, errlen, what,
                           "the store does not hold the key just set");
    return collSuccess;
}

collResult_t coll_torch_store_get(struct coll_torch_store *s, const char *key, void *value,
                                  size_t cap, size_t *len_p, int64_t deadline_ns, char *err,
                                  size_t errlen)
{
    char wkey[COLL_TSTORE_MAX_KEY + 2];
    char what[COLL_TSTORE_MAX_KEY + 32];
    COLL_CHECK(tstore_wire_key(s, key, wkey, sizeof(wkey), err, errlen));
    snprintf(what, sizeof(what), "waiting for key %s", key);
    uint8_t ans[8 + COLL_TSTORE_MAX_VALUE];
    const char *why = NULL;
    collResult_t res = tstore_ask(s, COLL_TSTORE_WAIT, wkey, NULL, 0, ans, 1, deadline_ns, what,
                                  err, errlen);
    if (res == collTimeout)
        return tstore_fail(s, res, err, errlen, what, "still unset at the deadline");
    COLL_CHECK(res);
    if (coll_tstore_wait_answer(ans, 1, &why) != COLL_WIRE_OK)
        return tstore_fail(s, collRemoteError, err, errlen, what, why);
    snprintf(what, sizeof(what), "reading key %s", key);
    if (cap > COLL_TSTORE_MAX_VALUE)
        cap = COLL_TSTORE_MAX_VALUE;
    COLL_CHECK(tstore_ask(s, COLL_TSTORE_GET, wkey, NULL, 0, ans, 8, deadline_ns, what, err,
                          errlen));
    size_t len = 0;
    enum coll_wire_verdict v = coll_tstore_get_answer(ans, 8, cap, &len, &why);
    if (v == COLL_WIRE_MORE) {
        /* The length has come, within cap: read the value. */
        int e;
        res = coll_socket_recv_all(s->fd, ans + 8, len, deadline_ns, &e);
        if (res != collSuccess)
            return tstore_fail(s, res, err, errlen, what, tstore_io_why(res, e));
        v = coll_tstore_get_answer(ans, 8 + len, cap, &len, &why);
    }
    if (v != COLL_WIRE_OK)
        return tstore_fail(s, collRemoteError, err, errlen, what, why);
    memcpy(value, ans + 8, len);
    *len_p = len;
    return collSuccess;
}

void coll_torch_store_close(struct coll_torch_store *s)
{
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
}
