/*
 * The table every listener reads its hellos through (coll_hellos_next in
 * lib/base/socket.c), on one loopback listener with a table of 4:
 *
 *   a. ten half-open clients, then a rank's valid hello: the rank gets through
 *      (the oldest silent clients make room) and the table never holds more than 4
 *   b. garbage, another job's secret (answered with the refusal bytes), the right
 *      secret with a rank out of range: each dropped as soon as it is read
 *   c. a client that sends 3 bytes of a hello and then nothing is dropped once
 *      COLL_HELLO_WAIT_MS has passed, not before
 *   d. fields that sized or reached memory unchecked before: a verbs handle's slot
 *      size (the sender's staging ring), a tcp handle's address length, the root's
 *      status, an id's address length
 *   e. the client's side and the wait's descriptors (coll_hello_connect,
 *      coll_hellos_fds, what tcp and verbs connect and poll with): a hello sent
 *      whole reaches the table; a client still sending is among the descriptors
 *      after the listener, within the cap; a listener that is gone fails the
 *      connect at once, with a message naming the peer, and leaves no descriptor
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "internal.h"
#include "tcp_wire.h"
#include "verbs_wire.h"
#include "wire.h"

static const uint8_t secret[COLL_SECRET_BYTES] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
#define PREV 2

static int check_ring(const void *buf, size_t got, const void *arg, const char **why_p)
{
    return coll_wire_ring_hello(buf, got, arg, PREV, why_p);
}

static int client(const union coll_sockaddr *ss, socklen_t len)
{
    int fd = -1;
    if (coll_socket_connect(&ss->sa, len, coll_now_ns() + 2000000000LL, false, &fd) != collSuccess)
        return -1;
    return fd;
}

/* Calls coll_hellos_next for up to ms; returns the first fd it hands out, or -1. */
static int next_within(int lfd, struct coll_hellos *h, void *hello, int ms)
{
    int64_t end = coll_now_ns() + ms * 1000000LL;
    do {
        int fd = coll_hellos_next(lfd, h, hello);
        CHECK(h->npend <= h->cap);
        if (fd >= 0)
            return fd;
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    } while (coll_now_ns() < end);
    return -1;
}

int main(void)
{
    union coll_sockaddr ss = {.in = {.sin_family = AF_INET,
                                     .sin_addr.s_addr = htonl(INADDR_LOOPBACK)}};
    socklen_t len = sizeof(struct sockaddr_in);
    int lfd;
    if (coll_socket_listen(&ss, &len, &lfd) != collSuccess)
        return 1;
    struct coll_hellos h;
    static const char refusal[] = "refused";
    CHECK(coll_hellos_init(&h, lfd, "test listener", 4, sizeof(struct coll_boot_ring_hello),
                           check_ring, secret) == collSuccess);
    h.refusal = refusal;
    h.refusal_bytes = sizeof(refusal);
    struct coll_boot_ring_hello good = {.magic = COLL_BOOT_MAGIC, .rank = PREV}, in;
    memcpy(good.secret, secret, COLL_SECRET_BYTES);
    int err;

    /* a. Silent clients fill the table; a rank still gets through. */
    int silent[10];
    for (int i = 0; i < 10; i++)
        silent[i] = client(&ss, len);
    CHECK(next_within(lfd, &h, &in, 50) < 0);
    CHECK_MSG(h.npend == 4, "npend %d dropped %llu", h.npend, (unsigned long long)h.dropped);
    int rank = client(&ss, len);
    CHECK(rank >= 0);
    CHECK(coll_socket_send_all(rank, &good, sizeof(good), coll_now_ns() + 1000000000LL, &err) ==
          collSuccess);
    int got = next_within(lfd, &h, &in, 2000);
    CHECK(got >= 0);
    CHECK(memcmp(&in, &good, sizeof(in)) == 0);
    CHECK_MSG(h.dropped >= 6, "dropped %llu, want the 6 silent clients beyond the table",
              (unsigned long long)h.dropped);
    if (got >= 0)
        close(got);
    close(rank);
    for (int i = 0; i < 10; i++)
        close(silent[i]);
    CHECK(next_within(lfd, &h, &in, 100) < 0); /* the silent ones' EOF: dropped */
    CHECK(h.npend == 0);

    /* b. Garbage, another secret, a bad rank: dropped when read. */
    struct coll_boot_ring_hello other = good, bad_rank = good;
    other.secret[0] ^= 0xff;
    bad_rank.rank = PREV + 1;
    const void *msgs[3] = {"GET / HTTP/1.0\r\n\r\n--------------", &other, &bad_rank};
    uint64_t before = h.dropped;
    for (int m = 0; m < 3; m++) {
        int fd = client(&ss, len);
        CHECK(fd >= 0);
        CHECK(coll_socket_send_all(fd, msgs[m], sizeof(good), coll_now_ns() + 1000000000LL,
                                   &err) == collSuccess);
        CHECK(next_within(lfd, &h, &in, 200) < 0);
        CHECK_MSG(h.dropped == before + 1 + (uint64_t)m, "message %d not dropped", m);
        char back[sizeof(refusal)] = "";
        collResult_t res =
            coll_socket_recv_all(fd, back, sizeof(back), coll_now_ns() + 500000000LL, &err);
        /* Only a client that showed our magic is told why. */
        if (m == 0)
            CHECK(res == collRemoteError);
        else
            CHECK(res == collSuccess && strcmp(back, refusal) == 0);
        close(fd);
    }

    /* c. Three bytes, then silence: dropped after COLL_HELLO_WAIT_MS, not before. */
    int slow = client(&ss, len);
    CHECK(coll_socket_send_all(slow, &good, 3, coll_now_ns() + 1000000000LL, &err) ==
          collSuccess);
    before = h.dropped;
    CHECK(next_within(lfd, &h, &in, COLL_HELLO_WAIT_MS / 2) < 0);
    CHECK(h.dropped == before && h.npend == 1);
    CHECK(next_within(lfd, &h, &in, COLL_HELLO_WAIT_MS / 2 + 1500) < 0);
    CHECK(h.dropped == before + 1 && h.npend == 0);
    close(slow);

    /* e. The client's side, and the descriptors a wait polls. */
    struct coll_hello_dest to = {.sa = &ss.sa, .len = len, .what = "test",
                                 .reach = "connect to", .rank = 7, .host = "hostx"};
    char msg[256] = "";
    int cfd = -2;
    CHECK(coll_hello_connect(&to, &good, sizeof(good), coll_now_ns() + 2000000000LL, &cfd, msg,
                             sizeof(msg)) == collSuccess);
    CHECK(cfd >= 0);
    got = next_within(lfd, &h, &in, 2000);
    CHECK(got >= 0 && memcmp(&in, &good, sizeof(in)) == 0);
    if (got >= 0)
        close(got);
    if (cfd >= 0)
        close(cfd);
    int part[2] = {client(&ss, len), client(&ss, len)};
    for (int i = 0; i < 2; i++)
        CHECK(coll_socket_send_all(part[i], &good, 3, coll_now_ns() + 1000000000LL, &err) ==
              collSuccess);
    CHECK(next_within(lfd, &h, &in, 100) < 0);
    CHECK_MSG(h.npend == 2, "npend %d", h.npend);
    int fds[4] = {-1, -1, -1, -1};
    CHECK(coll_hellos_fds(lfd, &h, fds, 4) == 3);
    CHECK(fds[0] == lfd && fds[1] == h.pend[0].fd && fds[2] == h.pend[1].fd && fds[3] == -1);
    CHECK(coll_hellos_fds(lfd, &h, fds, 2) == 2); /* the cap: the listener first */
    CHECK(fds[0] == lfd);
    for (int i = 0; i < 2; i++)
        close(part[i]);

    coll_hellos_fini(&h);
    close(lfd);
    /* The listener is gone: refused at once (not retried until the deadline). */
    int64_t t0 = coll_now_ns();
    cfd = -2;
    CHECK(coll_hello_connect(&to, &good, sizeof(good), coll_now_ns() + 5000000000LL, &cfd, msg,
                             sizeof(msg)) == collRemoteError);
    CHECK(cfd == -1);
    CHECK(coll_now_ns() - t0 < 2000000000LL);
    char addr[COLL_ADDR_STRLEN], want[256];
    snprintf(want, sizeof(want), "test: cannot connect to rank 7 at %s (hostx): %s",
             coll_socket_addr_str(&ss.sa, addr, sizeof(addr)), strerror(ECONNREFUSED));
    CHECK_MSG(strcmp(msg, want) == 0, "message '%s', want '%s'", msg, want);

    /* d. Bounds on fields from the rank table, the root and the id. */
    const char *why = NULL;
    struct verbs_handle vh = {.magic = VERBS_MAGIC, .nslots = 16, .slot_bytes = 1u << 30,
                              .addr = ss, .addrlen = len}, vout;
    CHECK(verbs_wire_handle(&vh, sizeof(vh), &vout, &why) == COLL_WIRE_BAD_FIELD);
    vh.slot_bytes = 128 * 1024;
    CHECK(verbs_wire_handle(&vh, sizeof(vh), &vout, &why) == COLL_WIRE_OK);
    struct tcp_handle th = {.magic = TCP_MAGIC, .nsocks = 1, .addr = ss, .addrlen = 200}, tout;
    CHECK(tcp_wire_handle(&th, sizeof(th), &tout, &why) == COLL_WIRE_BAD_FIELD);
    th.addrlen = len;
    CHECK(tcp_wire_handle(&th, sizeof(th), &tout, &why) == COLL_WIRE_OK);
    struct coll_boot_reply rep = {.magic = COLL_BOOT_MAGIC, .status = 1000}, rout;
    memset(rep.msg, 'x', sizeof(rep.msg));
    CHECK(coll_wire_boot_reply(&rep, sizeof(rep), &rout, &why) == COLL_WIRE_OK);
    CHECK(rout.status == collRemoteError && strlen(rout.msg) == sizeof(rout.msg) - 1);
    struct coll_id id = {.magic = COLL_ID_MAGIC, .format = COLL_ID_FORMAT, .addr = ss,
                         .addrlen = sizeof(struct sockaddr_in6)}, iout;
    uint8_t raw[COLL_UNIQUE_ID_BYTES] = {0};
    memcpy(raw, &id, sizeof(id));
    CHECK(coll_wire_id(raw, sizeof(raw), &iout, &why) == COLL_WIRE_BAD_FIELD);
    if (test_failures)
        fprintf(stderr, "%d check(s) failed\n", test_failures);
    return test_failures ? 1 : 0;
}
