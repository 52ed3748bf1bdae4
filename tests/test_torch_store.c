/*
 * The client of torchrun's store (lib/engine/torch_store.c) and its wire format
 * (torch_store_wire.c): every query's bytes in both dialects as PyTorch's TCPStore
 * reads them, the probe and how its answers are told apart, the parsers of the
 * answers (partial, whole, refused), and the client against small fake stores in a
 * thread: a torch 1.13 one, a torch 2.x one that closes a connection whose first
 * query is not VALIDATE, one that never answers and one that closes at once.
 * Every wait must end by its deadline with a message that names the store.  The
 * client against the real servers (1.13's, 2.x's classic and libuv ones) is
 * tests/test_torchrun.sh.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "harness.h"
#include "launch.h"
#include "torch_store.h"

/* ---- the bytes -------------------------------------------------------------------- */

static void le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* cmd, u64 len, key */
static size_t expect_keyed(uint8_t *p, uint8_t cmd, bool count, const char *key)
{
    size_t o = 0, k = strlen(key);
    p[o++] = cmd;
    if (count) {
        le64(p + o, 1);
        o += 8;
    }
    le64(p + o, k);
    o += 8;
    memcpy(p + o, key, k);
    return o + k;
}

static void test_encode(void)
{
    static const struct {
        enum coll_tstore_dialect d;
        uint8_t set, get, check, wait;
    } cmds[] = {{COLL_TSTORE_LEGACY, 0, 2, 4, 5}, {COLL_TSTORE_VALIDATED, 1, 3, 5, 6}};
    const char *key = "/libcollective/run/attempt_0/root_0", *val = "10.0.0.1:4242";
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
        uint8_t got[COLL_TSTORE_MAX_QUERY], want[COLL_TSTORE_MAX_QUERY];
        size_t n = coll_tstore_encode(cmds[i].d, COLL_TSTORE_SET, key, val, strlen(val), 0, got,
                                      sizeof(got));
        size_t w = expect_keyed(want, cmds[i].set, false, key);
        le64(want + w, strlen(val));
        memcpy(want + w + 8, val, strlen(val));
        w += 8 + strlen(val);
        CHECK(n == w && memcmp(got, want, w) == 0);
        n = coll_tstore_encode(cmds[i].d, COLL_TSTORE_GET, key, NULL, 0, 0, got, sizeof(got));
        w = expect_keyed(want, cmds[i].get, false, key);
        CHECK(n == w && memcmp(got, want, w) == 0);
        n = coll_tstore_encode(cmds[i].d, COLL_TSTORE_CHECK, key, NULL, 0, 0, got, sizeof(got));
        w = expect_keyed(want, cmds[i].check, true, key);
        CHECK(n == w && memcmp(got, want, w) == 0);
        n = coll_tstore_encode(cmds[i].d, COLL_TSTORE_WAIT, key, NULL, 0, 0, got, sizeof(got));
        w = expect_keyed(want, cmds[i].wait, true, key);
        CHECK(n == w && memcmp(got, want, w) == 0);
        /* Short of room by one byte, and an empty or overlong key: refused. */
        CHECK(coll_tstore_encode(cmds[i].d, COLL_TSTORE_WAIT, key, NULL, 0, 0, got, w - 1) == 0);
        CHECK(coll_tstore_encode(cmds[i].d, COLL_TSTORE_GET, "", NULL, 0, 0, got, sizeof(got)) ==
              0);
        char longkey[COLL_TSTORE_MAX_KEY + 2];
        memset(longkey, 'k', sizeof(longkey) - 1);
        longkey[sizeof(longkey) - 1] = '\0';
        CHECK(coll_tstore_encode(cmds[i].d, COLL_TSTORE_GET, longkey, NULL, 0, 0, got,
                                 sizeof(got)) == 0);
        CHECK(coll_tstore_encode(cmds[i].d, COLL_TSTORE_SET, key, val, COLL_TSTORE_MAX_VALUE + 1,
                                 0, got, sizeof(got)) == 0);
    }
    /* The handshake exists only in the validated dialect: VALIDATE 0 + magic, PING 13 + nonce. */
    uint8_t b[16];
    static const uint8_t validate[] = {0, 0xce, 0xf7, 0x85, 0x3c};
    static const uint8_t ping[] = {13, 0x44, 0x33, 0x22, 0x11};
    CHECK(coll_tstore_encode(COLL_TSTORE_VALIDATED, COLL_TSTORE_VALIDATE, NULL, NULL, 0, 0, b,
                             sizeof(b)) == sizeof(validate) &&
          memcmp(b, validate, sizeof(validate)) == 0);
    CHECK(coll_tstore_encode(COLL_TSTORE_VALIDATED, COLL_TSTORE_PING, NULL, NULL, 0, 0x11223344,
                             b, sizeof(b)) == sizeof(ping) &&
          memcmp(b, ping, sizeof(ping)) == 0);
    CHECK(coll_tstore_encode(COLL_TSTORE_LEGACY, COLL_TSTORE_VALIDATE, NULL, NULL, 0, 0, b,
                             sizeof(b)) == 0);
    CHECK(coll_tstore_encode(COLL_TSTORE_LEGACY, COLL_TSTORE_PING, NULL, NULL, 0, 1, b,
                             sizeof(b)) == 0);
    CHECK(coll_tstore_encode(COLL_TSTORE_UNKNOWN, COLL_TSTORE_GET, "/k", NULL, 0, 0, b,
                             sizeof(b)) == 0);
}

static void test_probe(void)
{
    /* A = 5, u64 0; B = 5, u64 1, key; A. */
    uint8_t got[128], want[128];
    size_t o = 0;
    want[o++] = 5;
    le64(want + o, 0);
    o += 8;
    o += expect_keyed(want + o, 5, true, COLL_TSTORE_PROBE_KEY);
    want[o++] = 5;
    le64(want + o, 0);
    o += 8;
    size_t n = coll_tstore_probe(got, sizeof(got));
    CHECK(n == o && memcmp(got, want, o) == 0);
    CHECK(coll_tstore_probe(got, o - 1) == 0);
    CHECK(coll_tstore_probe_nudge(got, sizeof(got)) == 9 && memcmp(got, want, 9) == 0);

    enum coll_tstore_dialect d = COLL_TSTORE_UNKNOWN;
    const char *why = NULL;
    static const uint8_t legacy[] = {0, 0}, libuv[] = {0, 1}, odd[] = {0, 2}, nonzero[] = {3};
    CHECK(coll_tstore_probe_answer(legacy, 0, false, &d, &why) == COLL_WIRE_MORE);
    CHECK(coll_tstore_probe_answer(legacy, 1, false, &d, &why) == COLL_WIRE_MORE);
    CHECK(coll_tstore_probe_answer(legacy, 2, false, &d, &why) == COLL_WIRE_OK &&
          d == COLL_TSTORE_LEGACY);
    CHECK(coll_tstore_probe_answer(libuv, 2, false, &d, &why) == COLL_WIRE_OK &&
          d == COLL_TSTORE_VALIDATED);
    /* Closed before any answer: torch 2.x's classic server. */
    d = COLL_TSTORE_UNKNOWN;
    CHECK(coll_tstore_probe_answer(legacy, 0, true, &d, &why) == COLL_WIRE_OK &&
          d == COLL_TSTORE_VALIDATED);
    why = NULL;
    CHECK(coll_tstore_probe_answer(legacy, 1, true, &d, &why) == COLL_WIRE_BAD_FIELD && why);
    why = NULL;
    CHECK(coll_tstore_probe_answer(odd, 2, false, &d, &why) == COLL_WIRE_BAD_FIELD && why);
    why = NULL;
    CHECK(coll_tstore_probe_answer(nonzero, 1, false, &d, &why) == COLL_WIRE_BAD_FIELD && why);
}

static void test_answers(void)
{
    const char *why = NULL;
    static const uint8_t nonce[] = {0x44, 0x33, 0x22, 0x11, 0};
    CHECK(coll_tstore_ping_answer(nonce, 3, 0x11223344, &why) == COLL_WIRE_MORE);
    CHECK(coll_tstore_ping_answer(nonce, 4, 0x11223344, &why) == COLL_WIRE_OK);
    CHECK(coll_tstore_ping_answer(nonce, 4, 0x11223345, &why) == COLL_WIRE_BAD_FIELD);
    CHECK(coll_tstore_ping_answer(nonce, 5, 0x11223344, &why) == COLL_WIRE_BAD_FIELD);

    static const uint8_t zero = 0, one = 1, two = 2;
    bool set = false;
    CHECK(coll_tstore_check_answer(&zero, 0, &set, &why) == COLL_WIRE_MORE);
    CHECK(coll_tstore_check_answer(&zero, 1, &set, &why) == COLL_WIRE_OK && set);
    CHECK(coll_tstore_check_answer(&one, 1, &set, &why) == COLL_WIRE_OK && !set);
    CHECK(coll_tstore_check_answer(&two, 1, &set, &why) == COLL_WIRE_BAD_FIELD);
    CHECK(coll_tstore_wait_answer(&zero, 1, &why) == COLL_WIRE_OK);
    CHECK(coll_tstore_wait_answer(&one, 1, &why) == COLL_WIRE_BAD_FIELD);

    uint8_t get[8 + 16];
    le64(get, 5);
    memcpy(get + 8, "a:123", 5);
    size_t len = 99;
    CHECK(coll_tstore_get_answer(get, 7, 64, &len, &why) == COLL_WIRE_MORE);
    CHECK(coll_tstore_get_answer(get, 8, 64, &len, &why) == COLL_WIRE_MORE && len == 5);
    CHECK(coll_tstore_get_answer(get, 12, 64, &len, &why) == COLL_WIRE_MORE);
    CHECK(coll_tstore_get_answer(get, 13, 64, &len, &why) == COLL_WIRE_OK && len == 5);
    CHECK(coll_tstore_get_answer(get, 14, 64, &len, &why) == COLL_WIRE_BAD_FIELD);
    CHECK(coll_tstore_get_answer(get, 13, 4, &len, &why) == COLL_WIRE_BAD_FIELD);
    le64(get, UINT64_MAX); /* a length that would wrap 8 + len */
    CHECK(coll_tstore_get_answer(get, 16, 64, &len, &why) == COLL_WIRE_BAD_FIELD);
    le64(get, 0);
    CHECK(coll_tstore_get_answer(get, 8, 64, &len, &why) == COLL_WIRE_OK && len == 0);

    char text[16];
    CHECK(coll_tstore_value_text("10.0.0.1:80", 11, text, sizeof(text), &why) &&
          strcmp(text, "10.0.0.1:80") == 0);
    CHECK(!coll_tstore_value_text("", 0, text, sizeof(text), &why));
    CHECK(!coll_tstore_value_text("a b:1", 5, text, sizeof(text), &why));
    CHECK(!coll_tstore_value_text("a\0b:1", 5, text, sizeof(text), &why));
    CHECK(!coll_tstore_value_text("0123456789abcdef", 16, text, sizeof(text), &why));
}

/* ---- fake stores ------------------------------------------------------------------- */

enum fake_mode { FAKE_STORE, FAKE_SILENT, FAKE_CLOSE };

struct fake {
    enum fake_mode mode;
    enum coll_tstore_dialect dialect; /* FAKE_STORE: torch 1.13's, or 2.x's classic server */
    int lfd, port;
    atomic_bool stop;
    pthread_t thread;
    int nkeys;
    char keys[8][COLL_TSTORE_MAX_KEY + 1];
    char vals[8][COLL_TSTORE_MAX_VALUE];
    size_t vlens[8];
};

/* Reads n bytes, polling so that the test can stop the fake; false on EOF or stop. */
static bool fake_read(struct fake *f, int fd, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        if (atomic_load(&f->stop))
            return false;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0)
            continue;
        ssize_t r = recv(fd, (char *)buf + got, n - got, 0);
        if (r <= 0)
            return false;
        got += (size_t)r;
    }
    return true;
}

static bool fake_u64(struct fake *f, int fd, uint64_t *v)
{
    uint8_t b[8];
    if (!fake_read(f, fd, b, 8))
        return false;
    *v = 0;
    for (int i = 7; i >= 0; i--)
        *v = (*v << 8) | b[i];
    return true;
}

static bool fake_string(struct fake *f, int fd, char *s, size_t cap, size_t *len_p)
{
    uint64_t len;
    if (!fake_u64(f, fd, &len) || len >= cap || !fake_read(f, fd, s, (size_t)len))
        return false;
    s[len] = '\0';
    *len_p = (size_t)len;
    return true;
}

static int fake_find(const struct fake *f, const char *key)
{
    for (int i = 0; i < f->nkeys; i++)
        if (strcmp(f->keys[i], key) == 0)
            return i;
    return -1;
}

/* Reads count keys; true when every one is set. */
static bool fake_keys(struct fake *f, int fd, bool *all_p)
{
    uint64_t count;
    if (!fake_u64(f, fd, &count) || count > 8)
        return false;
    *all_p = true;
    for (uint64_t i = 0; i < count; i++) {
        char key[COLL_TSTORE_MAX_KEY + 1];
        size_t len;
        if (!fake_string(f, fd, key, sizeof(key), &len))
            return false;
        *all_p = *all_p && fake_find(f, key) >= 0;
    }
    return true;
}

/* One connection, served to its end as the server of f->dialect would. */
static void fake_serve(struct fake *f, int fd)
{
    bool legacy = f->dialect == COLL_TSTORE_LEGACY, first = true;
    uint8_t cmd;
    while (fake_read(f, fd, &cmd, 1)) {
        if (!legacy && first) {
            uint8_t magic[4];
            if (cmd != 0 || !fake_read(f, fd, magic, 4))
                return; /* the classic 2.x server closes a client that does not validate */
            first = false;
            continue;
        }
        int op = legacy ? (cmd == 0 ? 0 : cmd == 2 ? 1 : cmd == 4 ? 2 : cmd == 5 ? 3 : -1)
                        : (cmd == 1 ? 0 : cmd == 3 ? 1 : cmd == 5 ? 2 : cmd == 6 ? 3
                           : cmd == 13 ? 4 : -1);
        char key[COLL_TSTORE_MAX_KEY + 1];
        size_t klen;
        bool all;
        uint8_t out[8 + COLL_TSTORE_MAX_VALUE];
        if (op == 0) { /* SET */
            char val[COLL_TSTORE_MAX_VALUE + 1];
            size_t vlen;
            if (!fake_string(f, fd, key, sizeof(key), &klen) ||
                !fake_string(f, fd, val, sizeof(val), &vlen))
                return;
            int i = fake_find(f, key);
            if (i < 0 && f->nkeys < 8)
                i = f->nkeys++;
            if (i >= 0) {
                snprintf(f->keys[i], sizeof(f->keys[i]), "%s", key);
                memcpy(f->vals[i], val, vlen);
                f->vlens[i] = vlen;
            }
        } else if (op == 1) { /* GET: the real servers fail a missing key too */
            int i;
            if (!fake_string(f, fd, key, sizeof(key), &klen) || (i = fake_find(f, key)) < 0)
                return;
            le64(out, f->vlens[i]);
            memcpy(out + 8, f->vals[i], f->vlens[i]);
            (void)!send(fd, out, 8 + f->vlens[i], MSG_NOSIGNAL);
        } else if (op == 2 || op == 3) { /* CHECK, WAIT (which waits for ever here) */
            if (!fake_keys(f, fd, &all))
                return;
            out[0] = all ? 0 : 1;
            if (op == 2 || all)
                (void)!send(fd, out, 1, MSG_NOSIGNAL);
        } else if (op == 4) { /* PING */
            if (!fake_read(f, fd, out, 4))
                return;
            (void)!send(fd, out, 4, MSG_NOSIGNAL);
        } else {
            return;
        }
    }
}

static void *fake_main(void *arg)
{
    struct fake *f = arg;
    while (!atomic_load(&f->stop)) {
        struct pollfd p = {.fd = f->lfd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0)
            continue;
        int fd = accept(f->lfd, NULL, NULL);
        if (fd < 0)
            continue;
        if (f->mode == FAKE_STORE) {
            fake_serve(f, fd);
        } else if (f->mode == FAKE_SILENT) {
            uint8_t sink[256];
            while (fake_read(f, fd, sink, 1))
                ;
        }
        close(fd);
    }
    return NULL;
}

static void fake_start(struct fake *f, enum fake_mode mode, enum coll_tstore_dialect d)
{
    memset(f, 0, sizeof(*f));
    f->mode = mode;
    f->dialect = d;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(f->lfd >= 0 && bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
            listen(f->lfd, 8) == 0 && getsockname(f->lfd, (struct sockaddr *)&sa, &len) == 0);
    f->port = ntohs(sa.sin_port);
    atomic_init(&f->stop, false);
    REQUIRE(pthread_create(&f->thread, NULL, fake_main, f) == 0);
}

static void fake_stop(struct fake *f)
{
    atomic_store(&f->stop, true);
    pthread_join(f->thread, NULL);
    close(f->lfd);
}

static double ms_since(int64_t t0)
{
    return (double)(coll_now_ns() - t0) / 1e6;
}

/* ---- the client against them -------------------------------------------------------- */

static void test_client_store(enum coll_tstore_dialect d)
{
    struct fake f;
    fake_start(&f, FAKE_STORE, d);
    char hp[64], err[512];
    snprintf(hp, sizeof(hp), "127.0.0.1:%d", f.port);
    const char *key = "libcollective/job/attempt_0/root_0", *val = "127.0.0.1:40000";
    struct coll_torch_store s;
    int64_t deadline = coll_now_ns() + 10 * 1000000000LL;
    CHECK_MSG(coll_torch_store_connect(&s, hp, deadline, err, sizeof(err)) == collSuccess, "%s",
              err);
    CHECK(s.dialect == d);
    CHECK_MSG(coll_torch_store_set(&s, key, val, strlen(val), deadline, err, sizeof(err)) ==
                  collSuccess,
              "%s", err);
    coll_torch_store_close(&s);
    /* The fake serves one connection at a time: a new client reads what the first set. */
    CHECK_MSG(coll_torch_store_connect(&s, hp, deadline, err, sizeof(err)) == collSuccess, "%s",
              err);
    char got[64] = "";
    size_t len = 0;
    CHECK_MSG(coll_torch_store_get(&s, key, got, sizeof(got), &len, deadline, err,
                                   sizeof(err)) == collSuccess,
              "%s", err);
    CHECK(len == strlen(val) && memcmp(got, val, len) == 0);
    /* A key nobody sets: the wait ends by its deadline, naming the store and the key. */
    int64_t t0 = coll_now_ns();
    collResult_t r = coll_torch_store_get(&s, "libcollective/job/attempt_0/root_9", got,
                                          sizeof(got), &len, t0 + 300 * 1000000LL, err,
                                          sizeof(err));
    CHECK_MSG(r == collTimeout && strstr(err, hp) && strstr(err, "root_9") &&
                  strstr(err, "still unset"),
              "%s: %s", collGetErrorString(r), err);
    CHECK_MSG(ms_since(t0) < 3000, "waited %.0f ms for a 300 ms deadline", ms_since(t0));
    coll_torch_store_close(&s);
    fake_stop(&f);
    printf("torch_store: %s fake store: set, get, a wait past its deadline: ok\n",
           d == COLL_TSTORE_LEGACY ? "torch 1.13" : "torch 2.x");
}

static void test_client_failures(void)
{
    char hp[64], err[512];
    struct coll_torch_store s;
    /* A listener that never answers: the probe ends by the deadline. */
    struct fake f;
    fake_start(&f, FAKE_SILENT, COLL_TSTORE_UNKNOWN);
    snprintf(hp, sizeof(hp), "127.0.0.1:%d", f.port);
    int64_t t0 = coll_now_ns();
    collResult_t r = coll_torch_store_connect(&s, hp, t0 + 300 * 1000000LL, err, sizeof(err));
    CHECK_MSG(r == collTimeout && strstr(err, "torchrun's store at 127.0.0.1:") &&
                  strstr(err, "probe"),
              "%s: %s", collGetErrorString(r), err);
    CHECK_MSG(ms_since(t0) < 3000, "silent store: %.0f ms for a 300 ms deadline", ms_since(t0));
    CHECK(s.fd == -1);
    fake_stop(&f);

    /* A listener that closes every connection at once: taken for torch 2.x by the
     * probe, then the handshake fails. */
    fake_start(&f, FAKE_CLOSE, COLL_TSTORE_UNKNOWN);
    snprintf(hp, sizeof(hp), "127.0.0.1:%d", f.port);
    r = coll_torch_store_connect(&s, hp, coll_now_ns() + 5 * 1000000000LL, err, sizeof(err));
    CHECK_MSG(r == collRemoteError && strstr(err, "handshake") && strstr(err, hp), "%s: %s",
              collGetErrorString(r), err);
    fake_stop(&f);

    /* Nothing listens: refusals are retried until the deadline, as torch's client does. */
    int port = launch_free_port();
    REQUIRE(port > 0);
    snprintf(hp, sizeof(hp), "127.0.0.1:%d", port);
    t0 = coll_now_ns();
    r = coll_torch_store_connect(&s, hp, t0 + 300 * 1000000LL, err, sizeof(err));
    CHECK_MSG(r == collTimeout && strstr(err, "cannot connect") && strstr(err, hp), "%s: %s",
              collGetErrorString(r), err);
    CHECK_MSG(ms_since(t0) < 3000, "refused: %.0f ms for a 300 ms deadline", ms_since(t0));

    /* A malformed address fails at once. */
    r = coll_torch_store_connect(&s, "127.0.0.1", coll_now_ns() + 1000000000LL, err,
                                 sizeof(err));
    CHECK_MSG(r == collInvalidArgument && strstr(err, "bad address"), "%s: %s",
              collGetErrorString(r), err);
    coll_torch_store_close(&s);
    printf("torch_store: silent, closing, absent and malformed stores: ok\n");
}

int main(void)
{
    test_encode();
    test_probe();
    test_answers();
    printf("torch_store: queries, probe and answers: ok\n");
    test_client_store(COLL_TSTORE_LEGACY);
    test_client_store(COLL_TSTORE_VALIDATED);
    test_client_failures();
    return test_result();
}
