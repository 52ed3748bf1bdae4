/*
 * The join protocol of dp_trainer --elastic (join.h).
 */
#include "join.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define JOIN_HELLO_MAGIC 0x4e494f4a50445254ull /* "TRDPJOIN" */
#define JOIN_OFFER_MAGIC 0x5245464f50445254ull /* "TRDPOFER" */
#define JOIN_REFUSE_MAGIC 0x5355464552504454ull /* "TDPREFUS": another job's token */

struct join_hello {
    uint64_t magic;
    uint64_t token;
};

struct join_offer_msg {
    uint64_t magic;
    int32_t nranks;
    int32_t rank;
    collUniqueId id;
};

static double join_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

uint64_t join_token(void)
{
    const char *s = getenv("COLL_SECRET");
    if (s == NULL || *s == '\0')
        s = getenv("COLL_COMM_ID");
    uint64_t h = 1469598103934665603ull;
    for (const char *p = s ? s : ""; *p; p++)
        h = (h ^ (uint8_t)*p) * 1099511628211ull;
    return h;
}

/* "host:port" (or "[v6]:port") to an address list; NULL with a message on error. */
static struct addrinfo *join_resolve(const char *hostport, bool passive, char *err,
                                     size_t errlen)
{
    char host[256];
    const char *colon = strrchr(hostport, ':');
    if (colon == NULL || colon == hostport || colon[1] == '\0' ||
        (size_t)(colon - hostport) >= sizeof(host)) {
        snprintf(err, errlen, "'%s' is not HOST:PORT", hostport);
        return NULL;
    }
    const char *h = hostport;
    size_t hl = (size_t)(colon - hostport);
    if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    memcpy(host, h, hl);
    host[hl] = '\0';
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = passive ? AI_PASSIVE : 0};
    struct addrinfo *ai = NULL;
    int rc = getaddrinfo(host, colon + 1, &hints, &ai);
    if (rc != 0) {
        snprintf(err, errlen, "'%s': %s", hostport, gai_strerror(rc));
        return NULL;
    }
    return ai;
}

int join_listen(struct join_listener *jl, const char *hostport, char *err, size_t errlen)
{
    memset(jl, 0, sizeof(*jl));
    jl->fd = -1;
    jl->token = join_token();
    struct addrinfo *ai = join_resolve(hostport, true, err, errlen);
    if (ai == NULL)
        return -1;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, JOIN_MAX_PENDING) != 0 ||
        fcntl(fd, F_SETFL, O_NONBLOCK) != 0) {
        snprintf(err, errlen, "cannot listen on %s: %s", hostport, strerror(errno));
        if (fd >= 0)
            close(fd);
        freeaddrinfo(ai);
        return -1;
    }
    freeaddrinfo(ai);
    jl->fd = fd;
    return 0;
}

/* Reads exactly n bytes from fd within timeout_s; 0 on success. */
static int join_read(int fd, void *buf, size_t n, double timeout_s)
{
    double end = join_now() + timeout_s;
    size_t got = 0;
    while (got < n) {
        int ms = (int)((end - join_now()) * 1000);
        if (ms <= 0)
            return -1;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int rc = poll(&p, 1, ms);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc <= 0)
            return -1;
        ssize_t r = recv(fd, (char *)buf + got, n - got, 0);
        if (r <= 0) {
            if (r < 0 && (errno == EINTR || errno == EAGAIN))
                continue;
            return -1;
        }
        got += (size_t)r;
    }
    return 0;
}

static int join_write(int fd, const void *buf, size_t n)
{
    size_t put = 0;
    while (put < n) {
        ssize_t w = send(fd, (const char *)buf + put, n - put, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        put += (size_t)w;
    }
    return 0;
}

int join_poll(struct join_listener *jl)
{
    if (jl->fd < 0)
        return 0;
    for (;;) {
        int c = accept4(jl->fd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0)
            break; /* EAGAIN: none waiting */
        struct join_hello h;
        /* A new process sends its hello as it connects. */
        bool hello = join_read(c, &h, sizeof(h), 1.0) == 0 && h.magic == JOIN_HELLO_MAGIC;
        if (!hello || h.token != jl->token || jl->npending == JOIN_MAX_PENDING) {
            if (hello) { /* tell it, so that it stops trying */
                struct join_offer_msg m = {.magic = JOIN_REFUSE_MAGIC};
                (void)join_write(c, &m, sizeof(m));
            }
            if (jl->dropped++ == 0)
                fprintf(stderr, "dp_trainer: join listener: refused a connection: %s (later "
                        "ones are counted)\n", !hello ? "no hello of a new process"
                        : h.token != jl->token ? "a process of another job (its COLL_SECRET "
                        "differs)" : "too many new processes waiting");
            close(c);
            continue;
        }
        jl->pending[jl->npending++] = c;
    }
    /* Forget the processes that went away while they waited. */
    int kept = 0;
    for (int i = 0; i < jl->npending; i++) {
        char b;
        ssize_t r = recv(jl->pending[i], &b, 1, MSG_PEEK | MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
            close(jl->pending[i]);
        else
            jl->pending[kept++] = jl->pending[i];
    }
    jl->npending = kept;
    return jl->npending;
}

int join_offer(struct join_listener *jl, int k, const collUniqueId *id, int nranks,
               int first_rank)
{
    int sent = 0;
    if (k > jl->npending)
        k = jl->npending;
    for (int i = 0; i < k; i++) {
        struct join_offer_msg m = {.magic = JOIN_OFFER_MAGIC, .nranks = nranks,
                                   .rank = first_rank + i, .id = *id};
        if (join_write(jl->pending[i], &m, sizeof(m)) == 0)
            sent++;
        close(jl->pending[i]);
    }
    memmove(jl->pending, jl->pending + k, (size_t)(jl->npending - k) * sizeof(int));
    jl->npending -= k;
    return sent;
}

void join_close(struct join_listener *jl)
{
    for (int i = 0; i < jl->npending; i++)
        close(jl->pending[i]);
    jl->npending = 0;
    if (jl->fd >= 0)
        close(jl->fd);
    jl->fd = -1;
}

int join_request(const char *hostport, uint64_t token, double timeout_s, collUniqueId *id,
                 int *nranks, int *rank, char *err, size_t errlen)
{
    double end = join_now() + timeout_s;
    struct addrinfo *ai = join_resolve(hostport, false, err, errlen);
    if (ai == NULL)
        return -1;
    const char *why = "no answer";
    while (join_now() < end) {
        int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            why = strerror(errno);
            break;
        }
        struct join_hello h = {.magic = JOIN_HELLO_MAGIC, .token = token};
        struct join_offer_msg m;
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
            why = errno == ECONNREFUSED ? "nothing listens there (yet)" : strerror(errno);
        } else if (join_write(fd, &h, sizeof(h)) != 0) {
            why = "the listener closed the connection";
        } else if (join_read(fd, &m, sizeof(m), end - join_now()) != 0) {
            why = "the listener closed the connection before an offer (not this job, or its "
                  "rank 0 failed)";
        } else if (m.magic == JOIN_REFUSE_MAGIC) {
            close(fd);
            freeaddrinfo(ai);
            snprintf(err, errlen, "%s refused this process: it belongs to another job (its "
                     "COLL_SECRET, or COLL_COMM_ID without one, differs)", hostport);
            return -1;
        } else if (m.magic != JOIN_OFFER_MAGIC || m.nranks < 1 || m.rank < 0 ||
                   m.rank >= m.nranks) {
            why = "the listener's answer is not an offer";
        } else {
            close(fd);
            freeaddrinfo(ai);
            *id = m.id;
            *nranks = m.nranks;
            *rank = m.rank;
            return 0;
        }
        close(fd);
        struct timespec ts = {0, 200 * 1000000};
        nanosleep(&ts, NULL);
    }
    freeaddrinfo(ai);
    snprintf(err, errlen, "no offer from %s within %.0f s: %s", hostport, timeout_s, why);
    return -1;
}
