/* Socket helpers shared by the bootstrap and the TCP transport. */
#ifndef COLL_SOCKET_H
#define COLL_SOCKET_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "collective.h"

#define COLL_ADDR_STRLEN 80

/* An IPv4 or IPv6 address, small enough for the unique id and handles. */
union coll_sockaddr {
    struct sockaddr sa;
    struct sockaddr_in in;
    struct sockaddr_in6 in6;
};

/* "host:port", "[v6addr]:port"; host may be a name.  Returns collInvalidArgument
 * with a message in err when malformed or unresolvable. */
collResult_t coll_socket_parse_hostport(const char *s, union coll_sockaddr *ss,
                                        socklen_t *len_p, char *err, size_t errlen);
/* "1.2.3.4:5678" */
const char *coll_socket_addr_str(const struct sockaddr *sa, char *buf, size_t len);
/* True when name matches the NCCL-style interface list spec: "eth,ib" prefixes,
 * "^docker" excludes, "=eth0" exact. */
bool coll_socket_ifname_match(const char *spec, const char *name);
/* Picks the local address to listen on: COLL_SOCKET_IFNAME if set; else the
 * interface whose subnet holds `toward` (the root's address) when given; else the
 * first up interface that is not loopback or docker, else loopback.  Port 0. */
collResult_t coll_socket_pick_addr(const struct sockaddr *toward, union coll_sockaddr *ss,
                                   socklen_t *len_p, char *ifname, size_t ifnamelen);
/* Non-blocking listening socket bound to ss (port may be 0); the bound address
 * comes back in ss. */
collResult_t coll_socket_listen(union coll_sockaddr *ss, socklen_t *len_p, int *fd_p);
/* Sockets accepted by a transport's listener whose fixed-size hello (the
 * handshake: secret, rank, ...) has not fully arrived yet. */
#define COLL_HELLO_MAX_BYTES 256
struct coll_hello_wait {
    int fd;
    size_t got;
    unsigned char buf[COLL_HELLO_MAX_BYTES];
};
struct coll_hellos {
    struct coll_hello_wait *pend; /* cap entries, owned by the caller */
    int npend, cap;
    size_t bytes;                 /* the hello's size, at most COLL_HELLO_MAX_BYTES */
};

/* Accepts lfd's new connections into h (beyond cap they are closed), reads what
 * has come of their hellos, and returns the fd of one whose hello is whole
 * (copied into hello; *whole true) or that closed or failed first (*whole false),
 * or -1 when none is ready now.  The caller owns the returned fd; loop until -1. */
int coll_hellos_next(int lfd, struct coll_hellos *h, void *hello, bool *whole);

/* Connects, retrying until deadline_ns (monotonic) while the address is
 * unreachable and, with retry_refused, while it refuses (a listener that may not
 * be up yet, as at bootstrap).  Without retry_refused a refusal is
 * collRemoteError at once: a peer's listener that was up is gone.  Non-blocking
 * fd with TCP_NODELAY on success. */
collResult_t coll_socket_connect(const struct sockaddr *sa, socklen_t len, int64_t deadline_ns,
                                 bool retry_refused, int *fd_p);
/* Sends / receives exactly n bytes before deadline_ns.  Returns collTimeout,
 * collRemoteError (peer closed, reset) or collSystemError; *err_p gets errno
 * (0 for a clean close or timeout). */
collResult_t coll_socket_send_all(int fd, const void *buf, size_t n, int64_t deadline_ns,
                                  int *err_p);
collResult_t coll_socket_recv_all(int fd, void *buf, size_t n, int64_t deadline_ns, int *err_p);
/* Accepts one connection (non-blocking fd) before deadline_ns. */
collResult_t coll_socket_accept(int lfd, int64_t deadline_ns, int *fd_p);
/* From now on the calling thread's waits above (connect, send_all, recv_all,
 * accept) also end, with collRemoteError and errno ECANCELED, once *flag is true
 * (a communicator's abort flag); NULL: no flag.  Waits poll in slices of at
 * most 100 ms, so an abort is seen within one slice. */
void coll_socket_set_cancel(const atomic_bool *flag);
void coll_socket_set_nodelay(int fd);
void coll_socket_set_nonblock(int fd);
bool coll_socket_is_loopback(const struct sockaddr *sa);

#endif
