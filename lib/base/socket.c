/* Socket helpers: address parsing and choice, connect with retries, and whole
 * transfers with deadlines for the bootstrap.  The data path (transports/tcp)
 * drives its own non-blocking I/O. */
#include "socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "alloc.h"
#include "check.h"
#include "param.h"
#include "topo.h"
#include "wire_check.h"

void coll_socket_set_nodelay(int fd)
{
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void coll_socket_set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        (void)fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

const char *coll_socket_addr_str(const struct sockaddr *sa, char *buf, size_t len)
{
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
        port = ntohs(in->sin_port);
        snprintf(buf, len, "%s:%d", host, port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
        port = ntohs(in6->sin6_port);
        snprintf(buf, len, "[%s]:%d", host, port);
    } else {
        snprintf(buf, len, "(family %d)", sa->sa_family);
    }
    return buf;
}

bool coll_socket_is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
        return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
        return IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
    }
    return false;
}

collResult_t coll_socket_parse_hostport(const char *s, union coll_sockaddr *ss,
                                        socklen_t *len_p, char *err, size_t errlen)
{
    char host[256];
    uint16_t port;
    if (!coll_wire_split_hostport(s, host, sizeof(host), &port, err, errlen))
        return collInvalidArgument;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    const char *fam = coll_param_str(COLL_PARAM_SOCKET_FAMILY);
    if (fam != NULL)
        hints.ai_family = strcmp(fam, "AF_INET6") == 0 ? AF_INET6 : AF_INET;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0 || res == NULL) {
        snprintf(err, errlen, "cannot resolve host '%s': %s", host, gai_strerror(rc));
        return collInvalidArgument;
    }
    memset(ss, 0, sizeof(*ss));
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len_p = res->ai_addrlen;
    freeaddrinfo(res);
    if (ss->sa.sa_family == AF_INET)
        ((struct sockaddr_in *)ss)->sin_port = htons(port);
    else
        ((struct sockaddr_in6 *)ss)->sin6_port = htons(port);
    return collSuccess;
}

bool coll_socket_ifname_match(const char *spec, const char *name)
{
    bool exclude = false, exact = false;
    if (*spec == '^') {
        exclude = true;
        spec++;
    }
    if (*spec == '=') {
        exact = true;
        spec++;
    }
    bool hit = false;
    const char *p = spec;
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len > 0) {
            if (exact)
                hit = strlen(name) == len && strncmp(name, p, len) == 0;
            else
                hit = strncmp(name, p, len) == 0;
            if (hit)
                break;
        }
        if (!comma)
            break;
        p = comma + 1;
    }
    return exclude ? !hit : hit;
}

/* True when a and b are in the same subnet given netmask m (same family). */
static bool sock_same_subnet(const struct sockaddr *a, const struct sockaddr *b,
                             const struct sockaddr *m)
{
    if (a->sa_family != b->sa_family || m == NULL)
        return false;
    if (a->sa_family == AF_INET) {
        uint32_t x = ((const struct sockaddr_in *)(const void *)a)->sin_addr.s_addr;
        uint32_t y = ((const struct sockaddr_in *)(const void *)b)->sin_addr.s_addr;
        uint32_t k = ((const struct sockaddr_in *)(const void *)m)->sin_addr.s_addr;
        return (x & k) == (y & k);
    }
    const uint8_t *x = ((const struct sockaddr_in6 *)(const void *)a)->sin6_addr.s6_addr;
    const uint8_t *y = ((const struct sockaddr_in6 *)(const void *)b)->sin6_addr.s6_addr;
    const uint8_t *k = ((const struct sockaddr_in6 *)(const void *)m)->sin6_addr.s6_addr;
    for (int i = 0; i < 16; i++)
        if ((x[i] & k[i]) != (y[i] & k[i]))
            return false;
    return true;
}

/* How well interface address i suits (higher is better), -1: not usable. */
static int sock_if_score(const struct ifaddrs *i, const char *spec, int want_family,
                         const struct sockaddr *toward)
{
    if (i->ifa_addr == NULL || !(i->ifa_flags & IFF_UP))
        return -1;
    int f = i->ifa_addr->sa_family;
    if (f != AF_INET && f != AF_INET6)
        return -1;
    if (want_family && f != want_family)
        return -1;
    if (f == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)i->ifa_addr;
        if (IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr))
            return -1; /* would need a scope id on every peer */
    }
    bool lo = (i->ifa_flags & IFF_LOOPBACK) != 0;
    int score;
    if (spec != NULL) {
        if (!coll_socket_ifname_match(spec, i->ifa_name))
            return -1;
        score = 10;
    } else if (toward != NULL && (sock_same_subnet(i->ifa_addr, toward, i->ifa_netmask) ||
                                  (lo && coll_socket_is_loopback(toward)))) {
        score = 30; /* the interface that reaches the root */
    } else if (lo || strncmp(i->ifa_name, "docker", 6) == 0) {
        score = 1;
    } else {
        score = 20;
    }
    if (f == AF_INET)
        score += 1; /* prefer IPv4 on the same interface */
    return score;
}

#define SOCK_MAX_TIES 16

/* Among the interfaces that tie for the best score (several NICs that all reach
 * the root, or all that COLL_SOCKET_IFNAME names), the one nearest this thread's
 * cores (its NUMA node), from the topology; the first when it cannot tell. */
static const char *sock_nearest(const char *const *names, int n)
{
    if (n < 2)
        return names[0];
    struct coll_topo *t = NULL;
    if (coll_topo_load(NULL, &t) != collSuccess)
        return names[0];
    int k = coll_topo_nearest_netdev(t, names, n);
    if (k > 0)
        COLL_INFO(COLL_SUBSYS_BOOT, "interface %s: the nearest to this rank's cores (NUMA node "
                  "%d) of %d that reach alike", names[k], t->bind_numa, n);
    coll_topo_free(t);
    return names[k >= 0 ? k : 0];
}

collResult_t coll_socket_pick_addr(const struct sockaddr *toward, union coll_sockaddr *ss,
                                   socklen_t *len_p, char *ifname, size_t ifnamelen)
{
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) != 0) {
        COLL_WARN("getifaddrs failed: %s", strerror(errno));
        return collSystemError;
    }
    const char *spec = coll_param_str(COLL_PARAM_SOCKET_IFNAME);
    const char *fam = coll_param_str(COLL_PARAM_SOCKET_FAMILY);
    int want_family = fam == NULL ? 0 : strcmp(fam, "AF_INET6") == 0 ? AF_INET6 : AF_INET;
    int best_score = -1;
    for (const struct ifaddrs *i = ifs; i != NULL; i = i->ifa_next) {
        int score = sock_if_score(i, spec, want_family, toward);
        best_score = score > best_score ? score : best_score;
    }
    /* The interfaces that tie, each once, in the system's order. */
    const char *ties[SOCK_MAX_TIES];
    int nties = 0;
    for (const struct ifaddrs *i = ifs; i != NULL && best_score >= 0; i = i->ifa_next) {
        if (sock_if_score(i, spec, want_family, toward) != best_score)
            continue;
        int k = 0;
        while (k < nties && strcmp(ties[k], i->ifa_name) != 0)
            k++;
        if (k == nties && nties < SOCK_MAX_TIES)
            ties[nties++] = i->ifa_name;
    }
    const struct ifaddrs *best = NULL;
    if (nties > 0) {
        const char *name = sock_nearest(ties, nties);
        for (const struct ifaddrs *i = ifs; i != NULL && best == NULL; i = i->ifa_next)
            if (strcmp(i->ifa_name, name) == 0 &&
                sock_if_score(i, spec, want_family, toward) == best_score)
                best = i;
    }
    if (best == NULL) {
        freeifaddrs(ifs);
        COLL_WARN("no usable network interface%s%s", spec ? " matches COLL_SOCKET_IFNAME=" : "",
                  spec ? spec : "");
        return collSystemError;
    }
    memset(ss, 0, sizeof(*ss));
    if (best->ifa_addr->sa_family == AF_INET) {
        memcpy(ss, best->ifa_addr, sizeof(struct sockaddr_in));
        *len_p = sizeof(struct sockaddr_in);
    } else {
        memcpy(ss, best->ifa_addr, sizeof(struct sockaddr_in6));
        *len_p = sizeof(struct sockaddr_in6);
    }
    if (ifname)
        snprintf(ifname, ifnamelen, "%s", best->ifa_name);
    freeifaddrs(ifs);
    return collSuccess;
}

collResult_t coll_socket_listen(union coll_sockaddr *ss, socklen_t *len_p, int *fd_p)
{
    int fd = socket(ss->sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        COLL_WARN("socket failed: %s", strerror(errno));
        return collSystemError;
    }
    int one = 1;
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    char a[COLL_ADDR_STRLEN];
    if (bind(fd, (struct sockaddr *)ss, *len_p) != 0) {
        COLL_WARN("bind to %s failed: %s", coll_socket_addr_str((struct sockaddr *)ss, a, sizeof(a)),
                  strerror(errno));
        close(fd);
        return collSystemError;
    }
    if (listen(fd, 4096) != 0) {
        COLL_WARN("listen failed: %s", strerror(errno));
        close(fd);
        return collSystemError;
    }
    socklen_t len = sizeof(*ss);
    getsockname(fd, (struct sockaddr *)ss, &len);
    *len_p = len;
    *fd_p = fd;
    return collSuccess;
}

static _Thread_local const atomic_bool *tls_cancel;

void coll_socket_set_cancel(const atomic_bool *flag)
{
    tls_cancel = flag;
}

static bool sock_cancelled(void)
{
    if (tls_cancel == NULL || !atomic_load(tls_cancel))
        return false;
    errno = ECANCELED;
    return true;
}

static int sock_poll_ms(int64_t deadline_ns)
{
    int64_t left = deadline_ns - coll_now_ns();
    if (left <= 0)
        return 0;
    int64_t ms = (left + 999999) / 1000000;
    return ms > 100 ? 100 : (int)ms;
}

collResult_t coll_socket_connect(const struct sockaddr *sa, socklen_t len, int64_t deadline_ns,
                                 bool retry_refused, int *fd_p)
{
    int last_err = 0;
    char a[COLL_ADDR_STRLEN];
    for (;;) {
        int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) {
            COLL_WARN("socket failed: %s", strerror(errno));
            return collSystemError;
        }
        int rc = connect(fd, sa, len);
        if (rc != 0 && errno == EINPROGRESS) {
            while (coll_now_ns() < deadline_ns) {
                if (sock_cancelled()) {
                    close(fd);
                    return collRemoteError;
                }
                struct pollfd p = {.fd = fd, .events = POLLOUT};
                int pr = poll(&p, 1, sock_poll_ms(deadline_ns));
                if (pr > 0)
                    break;
                if (pr < 0 && errno != EINTR)
                    break;
            }
            int soerr = 0;
            socklen_t sl = sizeof(soerr);
            if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0)
                soerr = errno;
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            if (soerr == 0 && poll(&p, 1, 0) <= 0)
                soerr = ETIMEDOUT;
            rc = soerr == 0 ? 0 : -1;
            errno = soerr;
        }
        if (rc == 0) {
            coll_socket_set_nodelay(fd);
            *fd_p = fd;
            return collSuccess;
        }
        last_err = errno;
        close(fd);
        bool retry = (last_err == ECONNREFUSED && retry_refused) || last_err == ETIMEDOUT ||
                     last_err == EAGAIN || last_err == ENETUNREACH || last_err == EHOSTUNREACH ||
                     last_err == EINTR;
        if (!retry || coll_now_ns() >= deadline_ns)
            break;
        if (sock_cancelled())
            return collRemoteError;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    COLL_INFO(COLL_SUBSYS_BOOT, "connect to %s failed: %s",
              coll_socket_addr_str(sa, a, sizeof(a)), strerror(last_err));
    errno = last_err;
    if (last_err == ECONNREFUSED && !retry_refused)
        return collRemoteError;
    return (last_err == ECONNREFUSED || last_err == ETIMEDOUT) ? collTimeout : collSystemError;
}

collResult_t coll_hellos_init(struct coll_hellos *h, int lfd, const char *what, int cap,
                              size_t bytes, coll_hello_check_fn check, const void *check_arg)
{
    *h = (struct coll_hellos){.cap = cap, .bytes = bytes, .check = check,
                              .check_arg = check_arg};
    COLL_CHECK(coll_calloc(&h->pend, (size_t)cap));
    if (coll_calloc(&h->bufs, (size_t)cap * bytes) != collSuccess) {
        free(h->pend);
        h->pend = NULL;
        return collSystemError;
    }
    for (int i = 0; i < cap; i++)
        h->pend[i].buf = h->bufs + (size_t)i * bytes;
    union coll_sockaddr ss;
    socklen_t sl = sizeof(ss);
    char a[COLL_ADDR_STRLEN] = "?";
    if (getsockname(lfd, &ss.sa, &sl) == 0)
        coll_socket_addr_str(&ss.sa, a, sizeof(a));
    snprintf(h->name, sizeof(h->name), "%s %s", what, a);
    return collSuccess;
}

void coll_hellos_fini(struct coll_hellos *h)
{
    for (int i = 0; i < h->npend; i++)
        close(h->pend[i].fd);
    if (h->dropped > 1)
        COLL_INFO(COLL_SUBSYS_BOOT, "%s dropped %llu connections in all", h->name,
                  (unsigned long long)h->dropped);
    free(h->pend);
    free(h->bufs);
    h->pend = NULL;
    h->bufs = NULL;
    h->npend = 0;
}

void coll_hellos_dropped(struct coll_hellos *h, const char *why)
{
    if (h->dropped++ == 0)
        COLL_WARN("%s dropped a connection: %s (later drops on this listener are counted, "
                  "not logged)", h->name, why);
}

int coll_hellos_fds(int lfd, const struct coll_hellos *h, int *fds, int cap)
{
    int n = 0;
    if (n < cap)
        fds[n++] = lfd;
    for (int i = 0; i < h->npend && n < cap; i++)
        fds[n++] = h->pend[i].fd;
    return n;
}

bool coll_hellos_adopt(struct coll_hellos *h, int fd)
{
    if (h->npend == h->cap)
        return false;
    struct coll_hello_wait *p = &h->pend[h->npend++];
    p->fd = fd;
    p->got = 0;
    p->since_ns = coll_now_ns();
    p->shown = false;
    return true;
}

collResult_t coll_hello_connect(const struct coll_hello_dest *to, const void *hello,
                                size_t bytes, int64_t deadline_ns, int *fd_p, char *err,
                                size_t errlen)
{
    char a[COLL_ADDR_STRLEN];
    int fd;
    *fd_p = -1;
    coll_socket_addr_str(to->sa, a, sizeof(a));
    collResult_t res = coll_socket_connect(to->sa, to->len, deadline_ns, false, &fd);
    if (res != collSuccess) {
        snprintf(err, errlen, "%s: cannot %s rank %d at %s (%.64s): %s", to->what, to->reach,
                 to->rank, a, to->host, strerror(errno));
        return res;
    }
    int e;
    res = coll_socket_send_all(fd, hello, bytes, deadline_ns, &e);
    if (res != collSuccess) {
        snprintf(err, errlen, "%s: handshake with rank %d at %s failed: %s", to->what, to->rank,
                 a, strerror(e));
        close(fd);
        return res;
    }
    *fd_p = fd;
    return collSuccess;
}

/* Closes pending entry i, counting the drop. */
static void hellos_drop(struct coll_hellos *h, int i, const char *why)
{
    close(h->pend[i].fd);
    coll_hellos_dropped(h, why);
    unsigned char *buf = h->pend[i].buf;
    h->pend[i] = h->pend[--h->npend];
    h->pend[h->npend].buf = buf; /* the freed buffer goes with the freed slot */
}

_Static_assert(COLL_HELLO_WAIT_MS == 5000, "the message of hellos_drop says 5 s");

int coll_hellos_next(int lfd, struct coll_hellos *h, void *hello)
{
    int64_t now = coll_now_ns();
    /* A burst at most a few tables long per call, so that a flood cannot keep
     * the caller here: the rest waits in the kernel's backlog. */
    for (int n = 0; lfd >= 0 && n < 4 * h->cap; n++) {
        if (h->npend == h->cap) {
            struct pollfd lp = {.fd = lfd, .events = POLLIN};
            if (poll(&lp, 1, 0) != 1)
                break; /* nobody waits to be accepted: no room needed */
            /* Full: the oldest client that has not shown the secret and has
             * nothing waiting to be read makes room (a rank's hello comes with
             * its connect, so it is never the one).  Without such a client the
             * rest stays in the backlog until the pass below has read the table. */
            int old = -1;
            char b;
            for (int i = 0; i < h->npend; i++)
                if (!h->pend[i].shown &&
                    (old < 0 || h->pend[i].since_ns < h->pend[old].since_ns) &&
                    recv(h->pend[i].fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) < 0 &&
                    (errno == EAGAIN || errno == EWOULDBLOCK))
                    old = i;
            if (old < 0)
                break;
            hellos_drop(h, old, "the table of waiting clients was full (a flood of connections)");
        }
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0)
            break; /* EAGAIN, or EMFILE: what is pending still gets read */
        struct coll_hello_wait *p = &h->pend[h->npend];
        p->fd = fd;
        p->got = 0;
        p->since_ns = now;
        p->shown = false;
        h->npend++;
    }
    for (int i = h->npend - 1; i >= 0; i--) {
        struct coll_hello_wait *p = &h->pend[i];
        ssize_t r = recv(p->fd, p->buf + p->got, h->bytes - p->got, MSG_DONTWAIT);
        if (r > 0)
            p->got += (size_t)r;
        const char *why = NULL;
        int v = COLL_WIRE_MORE;
        if (p->got > 0)
            v = h->check(p->buf, p->got, h->check_arg, &why);
        if (v == COLL_WIRE_BAD_MAGIC) {
            hellos_drop(h, i, "it is not a libcollective handshake (wrong magic)");
            continue;
        }
        if ((v == COLL_WIRE_BAD_SECRET || v == COLL_WIRE_BAD_FIELD) && h->refusal != NULL)
            (void)send(p->fd, h->refusal, h->refusal_bytes, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (v == COLL_WIRE_BAD_SECRET) {
            hellos_drop(h, i, "it did not show the communicator's secret");
            continue;
        }
        if (v != COLL_WIRE_OK && v != COLL_WIRE_MORE) {
            hellos_drop(h, i, why ? why : "a field of its handshake is out of range");
            continue;
        }
        if (v == COLL_WIRE_MORE && p->got >= sizeof(uint32_t) + COLL_SECRET_BYTES)
            p->shown = true;
        if (v == COLL_WIRE_OK && p->got == h->bytes) {
            int fd = p->fd;
            memcpy(hello, p->buf, h->bytes);
            unsigned char *buf = p->buf;
            *p = h->pend[--h->npend];
            h->pend[h->npend].buf = buf;
            return fd;
        }
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            hellos_drop(h, i, "it closed before its handshake was whole");
            continue;
        }
        if (now - p->since_ns > COLL_HELLO_WAIT_MS * 1000000LL)
            hellos_drop(h, i, "its handshake was not whole within 5 s (a half-open or slow "
                              "client)");
    }
    return -1;
}

collResult_t coll_socket_send_all(int fd, const void *buf, size_t n, int64_t deadline_ns,
                                  int *err_p)
{
    const char *p = buf;
    *err_p = 0;
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            *err_p = errno;
            return (errno == EPIPE || errno == ECONNRESET) ? collRemoteError : collSystemError;
        }
        if (coll_now_ns() >= deadline_ns)
            return collTimeout;
        if (sock_cancelled()) {
            *err_p = ECANCELED;
            return collRemoteError;
        }
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        (void)poll(&pf, 1, sock_poll_ms(deadline_ns));
    }
    return collSuccess;
}

collResult_t coll_socket_recv_all(int fd, void *buf, size_t n, int64_t deadline_ns, int *err_p)
{
    char *p = buf;
    *err_p = 0;
    while (n > 0) {
        ssize_t r = recv(fd, p, n, MSG_DONTWAIT);
        if (r > 0) {
            p += r;
            n -= (size_t)r;
            continue;
        }
        if (r == 0)
            return collRemoteError;
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            *err_p = errno;
            return errno == ECONNRESET ? collRemoteError : collSystemError;
        }
        if (coll_now_ns() >= deadline_ns)
            return collTimeout;
        if (sock_cancelled()) {
            *err_p = ECANCELED;
            return collRemoteError;
        }
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        (void)poll(&pf, 1, sock_poll_ms(deadline_ns));
    }
    return collSuccess;
}

collResult_t coll_socket_accept(int lfd, int64_t deadline_ns, int *fd_p)
{
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd >= 0) {
            coll_socket_set_nodelay(fd);
            *fd_p = fd;
            return collSuccess;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
            COLL_WARN("accept failed: %s", strerror(errno));
            return collSystemError;
        }
        if (coll_now_ns() >= deadline_ns)
            return collTimeout;
        if (sock_cancelled())
            return collRemoteError;
        struct pollfd pf = {.fd = lfd, .events = POLLIN};
        (void)poll(&pf, 1, sock_poll_ms(deadline_ns));
    }
}
