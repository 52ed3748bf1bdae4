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

/* Monotonic clock in ns: the clock of every deadline. */
int64_t coll_now_ns(void);
/* CLOCK_MONOTONIC at the kernel's tick resolution, for rate limits. */
int64_t coll_coarse_ns(void);

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
/*
 * Connections accepted by a listener whose fixed-size hello (the handshake:
 * magic, secret, rank, ...) has not fully arrived yet.  Every listener of the
 * library reads its hellos through this, so that no client can hold it up: all
 * are read together without blocking, a client that has not shown the secret
 * within COLL_HELLO_WAIT_MS is dropped, and when the table is full the oldest
 * such client with nothing waiting to be read makes room for the next one (one
 * that showed the secret is kept; with no such client the next waits in the
 * kernel's backlog).  A flood of connections thus costs at most `cap`
 * descriptors and never shuts out a rank.  The first connection dropped is logged at WARN with its cause;
 * later ones are only counted (a flood must not flood the log), and the count
 * is logged at INFO when the listener closes.
 */
#define COLL_HELLO_WAIT_MS 5000
struct coll_hello_wait {
    int fd;
    size_t got;
    int64_t since_ns; /* accepted at (monotonic) */
    bool shown;       /* the check passed the bytes so far: the secret was shown */
    unsigned char *buf;
};
/* Checks the got bytes of a hello that have come: returns an enum
 * coll_wire_verdict (lib/wire.h), and for a refusal its cause in *why_p. */
typedef int (*coll_hello_check_fn)(const void *buf, size_t got, const void *arg,
                                   const char **why_p);
struct coll_hellos {
    struct coll_hello_wait *pend; /* cap entries */
    unsigned char *bufs;          /* cap x bytes */
    int npend, cap;
    size_t bytes;                 /* the hello's size */
    coll_hello_check_fn check;
    const void *check_arg;
    char name[COLL_ADDR_STRLEN + 32]; /* "tcp listener 1.2.3.4:5", for the log */
    /* Optional: sent (without waiting) to a client refused after it showed the
     * right magic, so that a rank of another job learns why at once. */
    const void *refusal;
    size_t refusal_bytes;
    uint64_t dropped;             /* connections dropped so far */
};

/* Sets up h for a listener named `what` on lfd (its address completes the name). */
collResult_t coll_hellos_init(struct coll_hellos *h, int lfd, const char *what, int cap,
                              size_t bytes, coll_hello_check_fn check, const void *check_arg);
/* Closes the connections still pending and frees h's tables. */
void coll_hellos_fini(struct coll_hellos *h);
/* Accepts lfd's new connections into h, reads what has come of their hellos, and
 * returns the fd of one whose hello is whole and passed the check (copied into
 * hello), or -1 when none is ready now.  The caller owns the returned fd; loop
 * until -1.  Connections refused, closed or too slow are dropped and counted. */
int coll_hellos_next(int lfd, struct coll_hellos *h, void *hello);
/* Counts (and, the first time, logs) a connection the caller refused after its
 * hello passed the check (a duplicate, an inconsistent handshake). */
void coll_hellos_dropped(struct coll_hellos *h, const char *why);
/* The descriptors a wait on the listener polls: lfd, then those of the
 * clients whose hellos are still coming (so that the rest of a hello wakes the
 * wait), as many as cap holds.  Returns the count. */
int coll_hellos_fds(int lfd, const struct coll_hellos *h, int *fds, int cap);
/* Adds a connection accepted elsewhere whose hello has not been read (a
 * responder that shares the listener hands over connections it recognised by
 * their magic with MSG_PEEK); from now on coll_hellos_next reads it as its own,
 * its age counted from now.  False when the table is full: fd stays the
 * caller's.  coll_hellos_next(-1, h, ...) reads only such connections. */
bool coll_hellos_adopt(struct coll_hellos *h, int fd);

/* Whom coll_hello_connect connects to, and how its messages name it. */
struct coll_hello_dest {
    const struct sockaddr *sa;
    socklen_t len;
    const char *what;  /* the transport: "tcp" */
    const char *reach; /* what connecting is: "connect to", "reach the side channel of" */
    int rank;          /* the peer */
    const char *host;  /* the peer's host name */
};
/* The client's side of a hello: connects to a listener that was up before its
 * address was published (a refusal fails at once: the peer is gone) and sends
 * the hello's bytes, both before deadline_ns.  On success *fd_p is the
 * connected socket (non-blocking, TCP_NODELAY).  On failure nothing is left
 * open, *fd_p is -1 and err gets the cause for the user:
 * "WHAT: cannot REACH rank R at ADDR (HOST): ..." or
 * "WHAT: handshake with rank R at ADDR failed: ...". */
collResult_t coll_hello_connect(const struct coll_hello_dest *to, const void *hello,
                                size_t bytes, int64_t deadline_ns, int *fd_p, char *err,
                                size_t errlen);

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
