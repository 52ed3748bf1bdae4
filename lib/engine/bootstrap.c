/* Bootstrap: the unique id, the rendezvous through the root, and the out-of-band
 * ring used for allgather and barrier.
 *
 *   rank k --register(secret, nranks, rank, info)--> root
 *   root   --table of every rank's info (or an error for all)--> every rank
 *   rank r --hello(secret, r)--> rank r+1 on its bootstrap listener (the OOB ring)
 *
 * The root serves one communicator: it waits for nranks registrations, checks that
 * they agree (secret, nranks, distinct ranks) and answers all at once.  Once one
 * rank is refused for a mismatch, every rank that registered or registers later
 * gets the same error, so no rank waits for its own deadline.  The root gives up
 * COLL_TIMEOUT_MS after the first registration and tells the ranks that came
 * which ranks never did. */
#include "bootstrap.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "socket.h"
#include "wire.h"

#define BOOT_MAGIC COLL_BOOT_MAGIC
#define BOOT_MSG_BYTES COLL_BOOT_MSG_BYTES
#define ROOT_MAX_PENDING 256 /* connections read at once by the root */
#define RING_MAX_PENDING 16  /* by a rank's ring listener, which wants one */

struct root_state {
    int lfd;
    int64_t timeout_ms;  /* from the first registration to giving up */
    uint8_t secret[COLL_SECRET_BYTES];
    char addr[COLL_ADDR_STRLEN];
};

/* The checks of what the root and the ring listener read (lib/engine/wire.h), in the
 * shape coll_hellos_next calls. */
static int root_check(const void *buf, size_t got, const void *secret, const char **why_p)
{
    struct coll_boot_register reg;
    return coll_wire_boot_register(buf, got, secret, &reg, why_p);
}

struct ring_check_arg {
    const uint8_t *secret;
    int prev;
};

static int ring_check(const void *buf, size_t got, const void *arg, const char **why_p)
{
    const struct ring_check_arg *a = arg;
    return coll_wire_ring_hello(buf, got, a->secret, a->prev, why_p);
}

static void root_reply_error(int fd, collResult_t status, const char *msg)
{
    struct coll_boot_reply rep = {.magic = BOOT_MAGIC, .status = status};
    snprintf(rep.msg, sizeof(rep.msg), "%s", msg);
    int err;
    (void)coll_socket_send_all(fd, &rep, sizeof(rep), coll_now_ns() + 1000000000LL, &err);
}

/* Sends the error to every registered rank and forgets them.  Rank 0 is answered
 * last: with COLL_COMM_ID the root runs inside rank 0's process, which may exit as
 * soon as it has its answer, and the others' answers must be on their way by then. */
static void root_fail_all(int *fds, int nranks, collResult_t status, const char *msg)
{
    for (int k = nranks - 1; fds != NULL && k >= 0; k--) {
        if (fds[k] >= 0) {
            root_reply_error(fds[k], status, msg);
            close(fds[k]);
            fds[k] = -1;
        }
    }
}

/* Serves one communicator, then returns.  Registrations are read through
 * coll_hellos_next, so strangers (garbage, silence, a flood of connections) are
 * dropped without holding up the ranks; a client that shows the bootstrap's
 * magic but not the secret (a rank of another job) is answered with an error
 * first, so that it fails at once instead of at its deadline. */
static void root_serve(struct root_state *st)
{
    int nranks = -1, nreg = 0;
    int *fds = NULL;                    /* fd per registered rank */
    struct coll_rank_info *table = NULL;
    collResult_t failed = collSuccess;  /* once set, every registration gets fail_msg */
    char fail_msg[BOOT_MSG_BYTES] = "";
    int64_t deadline = INT64_MAX;
    int64_t timeout_ns = st->timeout_ms * 1000000LL;
    struct coll_hellos hellos;
    static const struct coll_boot_reply refusal = {
        .magic = BOOT_MAGIC, .status = collInvalidUsage,
        .msg = "the registration did not show this communicator's secret or named a rank, "
               "nranks or address out of range (an id of another job, or COLL_SECRET differs)"};
    if (coll_hellos_init(&hellos, st->lfd, "bootstrap root", ROOT_MAX_PENDING,
                         sizeof(struct coll_boot_register), root_check, st->secret) != collSuccess)
        return;
    hellos.refusal = &refusal;
    hellos.refusal_bytes = sizeof(refusal);

    for (;;) {
        int64_t now = coll_now_ns();
        if (now >= deadline)
            break;
        struct coll_boot_register reg;
        int fd = coll_hellos_next(st->lfd, &hellos, &reg);
        if (fd < 0) {
            struct pollfd pfds[ROOT_MAX_PENDING + 1];
            pfds[0] = (struct pollfd){.fd = st->lfd, .events = POLLIN};
            for (int i = 0; i < hellos.npend; i++)
                pfds[i + 1] = (struct pollfd){.fd = hellos.pend[i].fd, .events = POLLIN};
            /* Wake at least every 250 ms: clients too slow to show the secret are
             * dropped by age (COLL_HELLO_WAIT_MS). */
            int64_t wait_ms = deadline == INT64_MAX ? 250 : (deadline - now) / 1000000 + 1;
            if (poll(pfds, (nfds_t)hellos.npend + 1, wait_ms > 250 ? 250 : (int)wait_ms) < 0 &&
                errno != EINTR)
                break;
            continue;
        }
        if (deadline == INT64_MAX)
            deadline = coll_now_ns() + timeout_ns;
        if (failed == collSuccess && nranks < 0) {
            /* reg.nranks is within [1, COLL_WIRE_MAX_NRANKS]: root_check. */
            nranks = reg.nranks;
            fds = malloc(sizeof(int) * (size_t)nranks);
            table = calloc((size_t)nranks, sizeof(*table));
            if (fds == NULL || table == NULL) {
                failed = collSystemError;
                snprintf(fail_msg, sizeof(fail_msg), "bootstrap root out of memory");
            } else {
                for (int k = 0; k < nranks; k++)
                    fds[k] = -1;
            }
        }
        if (failed == collSuccess && reg.nranks != nranks) {
            failed = collInvalidUsage;
            snprintf(fail_msg, sizeof(fail_msg),
                     "ranks disagree on nranks: rank %d (pid %d on %.64s) passed %d, "
                     "an earlier rank passed %d", reg.rank, reg.info.pid, reg.info.host,
                     reg.nranks, nranks);
        } else if (failed == collSuccess && (reg.rank < 0 || reg.rank >= nranks)) {
            failed = collInvalidUsage;
            snprintf(fail_msg, sizeof(fail_msg), "rank %d registered, outside [0, %d)",
                     reg.rank, nranks);
        } else if (failed == collSuccess && fds[reg.rank] >= 0) {
            failed = collInvalidUsage;
            snprintf(fail_msg, sizeof(fail_msg),
                     "duplicate rank %d: registered by pid %d on %.64s and by pid %d on "
                     "%.64s", reg.rank, table[reg.rank].pid, table[reg.rank].host,
                     reg.info.pid, reg.info.host);
        }
        if (failed != collSuccess) {
            COLL_WARN("bootstrap root %s: %s", st->addr, fail_msg);
            /* Rank 0 last, as in root_fail_all: its process may run this thread. */
            if (reg.rank != 0) {
                root_reply_error(fd, failed, fail_msg);
                close(fd);
                fd = -1;
            }
            root_fail_all(fds, nranks, failed, fail_msg);
            if (fd >= 0) {
                root_reply_error(fd, failed, fail_msg);
                close(fd);
            }
            continue;
        }
        fds[reg.rank] = fd;
        table[reg.rank] = reg.info;
        table[reg.rank].rank = reg.rank;
        if (++nreg < nranks)
            continue;
        /* Everyone is here: send the table to all and finish. */
        struct coll_boot_reply ok = {.magic = BOOT_MAGIC, .status = collSuccess};
        for (int k = nranks - 1; k >= 0; k--) {
            int err;
            int64_t dl = coll_now_ns() + timeout_ns;
            if (coll_socket_send_all(fds[k], &ok, sizeof(ok), dl, &err) != collSuccess ||
                coll_socket_send_all(fds[k], table, sizeof(*table) * (size_t)nranks, dl,
                                     &err) != collSuccess)
                COLL_WARN("bootstrap root %s could not send the table to rank %d: %s",
                          st->addr, k, strerror(err));
            close(fds[k]);
            fds[k] = -1;
        }
        goto out;
    }
    /* Deadline: tell the ranks that came who is missing. */
    if (failed == collSuccess && nranks > 0) {
        char msg[BOOT_MSG_BYTES];
        int o = snprintf(msg, sizeof(msg), "only %d of %d ranks joined within %lld ms; missing:",
                         nreg, nranks, (long long)(timeout_ns / 1000000));
        for (int k = 0; k < nranks && o < (int)sizeof(msg) - 8; k++)
            if (fds[k] < 0)
                o += snprintf(msg + o, sizeof(msg) - (size_t)o, " %d", k);
        COLL_WARN("bootstrap root %s: %s", st->addr, msg);
        root_fail_all(fds, nranks, collTimeout, msg);
    }
out:
    coll_hellos_fini(&hellos);
    free(fds);
    free(table);
}

static void *root_thread(void *arg)
{
    struct root_state *st = arg;
    root_serve(st);
    close(st->lfd);
    free(st);
    return NULL;
}

/* Starts the root's thread on lfd, a listening socket bound to addr; takes lfd,
 * which it closes on failure. */
static collResult_t root_run(int lfd, const struct sockaddr *addr, const uint8_t *secret,
                             int64_t timeout_ms)
{
    struct root_state *st;
    if (coll_calloc(&st, 1) != collSuccess) {
        close(lfd);
        return collSystemError;
    }
    st->lfd = lfd;
    st->timeout_ms = timeout_ms;
    memcpy(st->secret, secret, COLL_SECRET_BYTES);
    coll_socket_addr_str(addr, st->addr, sizeof(st->addr));
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &attr, root_thread, st);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        COLL_WARN("cannot start the bootstrap root thread: %s", strerror(rc));
        close(st->lfd);
        free(st);
        return collSystemError;
    }
    COLL_INFO(COLL_SUBSYS_BOOT, "bootstrap root listening on %s", st->addr);
    return collSuccess;
}

/* Starts the root listener thread on ss (port 0 = any). */
static collResult_t root_start(union coll_sockaddr *ss, socklen_t *len_p,
                               const uint8_t *secret, int64_t timeout_ms)
{
    int lfd;
    COLL_CHECK(coll_socket_listen(ss, len_p, &lfd));
    return root_run(lfd, &ss->sa, secret, timeout_ms);
}

collResult_t coll_bootstrap_serve_root(int lfd, struct coll_id *id, int64_t timeout_ms)
{
    COLL_CHECK(root_run(lfd, &id->addr.sa, id->secret, timeout_ms));
    id->root_is_rank0 = 0;
    return collSuccess;
}

collResult_t coll_bootstrap_get_unique_id(struct coll_id *id)
{
    return coll_bootstrap_new_id(id, coll_param_int(COLL_PARAM_TIMEOUT_MS));
}

collResult_t coll_bootstrap_new_id(struct coll_id *id, int64_t root_timeout_ms)
{
    memset(id, 0, sizeof(*id));
    id->magic = COLL_ID_MAGIC;
    id->format = COLL_ID_FORMAT;
    if (getrandom(id->secret, sizeof(id->secret), 0) != (ssize_t)sizeof(id->secret)) {
        COLL_WARN("getrandom failed: %s", strerror(errno));
        return collSystemError;
    }
    socklen_t len;
    COLL_CHECK(coll_socket_pick_addr(NULL, &id->addr, &len, NULL, 0));
    COLL_CHECK(root_start(&id->addr, &len, id->secret, root_timeout_ms));
    id->addrlen = len;
    return collSuccess;
}

collResult_t coll_bootstrap_id_from_addr(const char *hostport, const char *secret_hex,
                                         struct coll_id *id)
{
    memset(id, 0, sizeof(*id));
    id->magic = COLL_ID_MAGIC;
    id->format = COLL_ID_FORMAT;
    id->root_is_rank0 = 1;
    char err[160];
    socklen_t len;
    if (coll_socket_parse_hostport(hostport, &id->addr, &len, err, sizeof(err)) != collSuccess) {
        COLL_WARN("bad root address: %s", err);
        return collInvalidArgument;
    }
    id->addrlen = len;
    if (!coll_wire_secret_text(hostport, secret_hex, id->secret, err, sizeof(err))) {
        COLL_WARN("%s", err);
        return collInvalidArgument;
    }
    return collSuccess;
}

/* One try at registering: connect, send the registration, read the answer.
 * *dropped_p is set when the root closed the connection before answering at
 * all, which it does to clients it drops unread (a flood of strangers filled
 * its table): the caller tries again. */
static collResult_t boot_register_once(struct coll_comm *comm, const struct coll_id *id,
                                       const struct coll_rank_info *mine, int64_t deadline,
                                       const char *raddr, bool again, int *fd_p,
                                       bool *dropped_p)
{
    int fd, err;
    *dropped_p = false;
    /* The first try waits for a root that is not up yet; once it has been up, a
     * refused connection means it is gone.  A grow id's root was up before the
     * id existed. */
    collResult_t res = coll_socket_connect((const struct sockaddr *)&id->addr, id->addrlen,
                                           deadline, !again && id->grow_from == 0, &fd);
    if (res != collSuccess && again && errno == ECONNREFUSED) {
        coll_set_error(comm, "bootstrap: the root %s closed this rank's registration unanswered "
                       "and now refuses connections: it is gone (the process serving it "
                       "ended)", raddr);
        return collRemoteError;
    }
    if (res != collSuccess && id->grow_from != 0) {
        coll_set_error(comm, "bootstrap: cannot reach the root of this collCommGrow id at %s: "
                       "%s (it serves one grow: the id was used already, or the process of "
                       "the communicator's rank 0 has ended)", raddr, strerror(errno));
        return res == collTimeout ? collTimeout : collRemoteError;
    }
    if (res != collSuccess) {
        coll_set_error(comm, "bootstrap: cannot reach the root at %s within %lld ms: %s", raddr,
                       (long long)comm->timeout_ms, strerror(errno));
        return res == collTimeout ? collTimeout : collSystemError;
    }
    struct coll_boot_register reg = {.magic = BOOT_MAGIC, .nranks = comm->nranks,
                                     .rank = comm->rank, .info = *mine};
    memcpy(reg.secret, id->secret, COLL_SECRET_BYTES);
    res = coll_socket_send_all(fd, &reg, sizeof(reg), deadline, &err);
    struct coll_boot_reply raw, rep;
    const char *why = "";
    if (res == collSuccess) {
        res = coll_socket_recv_all(fd, &raw, sizeof(raw), deadline, &err);
        if (res == collRemoteError && err == 0 && coll_now_ns() < deadline) {
            /* A clean close before any answer: dropped unread, not refused (a
             * refusal is answered).  Some bytes of an answer and then a close
             * would read as a short answer; recv_all cannot say, so a close is
             * treated as dropped either way: the deadline bounds the retries. */
            *dropped_p = true;
            close(fd);
            return res;
        }
    }
    if (res == collSuccess && coll_wire_boot_reply(&raw, sizeof(raw), &rep, &why) != COLL_WIRE_OK)
        res = collRemoteError;
    if (res != collSuccess) {
        if (res == collTimeout)
            coll_set_error(comm, "bootstrap: timed out after %lld ms waiting for the other "
                           "ranks at the root %s", (long long)comm->timeout_ms, raddr);
        else
            coll_set_error(comm, "bootstrap: the root %s did not answer the registration%s%s%s",
                           raddr, *why ? ": " : "", why, err ? strerror(err) : "");
        close(fd);
        return res;
    }
    if (rep.status != collSuccess) {
        coll_set_error(comm, "bootstrap: the root %s refused rank %d: %s", raddr, comm->rank,
                       rep.msg);
        close(fd);
        return (collResult_t)rep.status;
    }
    *fd_p = fd;
    return collSuccess;
}

/* Registers with the root and receives the table. */
static collResult_t boot_register(struct coll_comm *comm, const struct coll_id *id,
                                  const struct coll_rank_info *mine, int64_t deadline)
{
    char raddr[COLL_ADDR_STRLEN];
    coll_socket_addr_str((const struct sockaddr *)&id->addr, raddr, sizeof(raddr));
    int fd = -1, err;
    bool dropped = true;
    collResult_t res = collSuccess;
    for (int tries = 0; dropped; tries++) {
        if (tries > 0) {
            COLL_INFO(COLL_SUBSYS_BOOT, "bootstrap: the root %s closed the connection unanswered; "
                      "registering again", raddr);
            struct timespec ts = {0, 20 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        res = boot_register_once(comm, id, mine, deadline, raddr, tries > 0, &fd, &dropped);
        if (dropped && coll_now_ns() >= deadline) {
            coll_set_error(comm, "bootstrap: the root %s closed every connection unanswered "
                           "for %lld ms", raddr, (long long)comm->timeout_ms);
            return collRemoteError;
        }
    }
    if (res != collSuccess)
        return res;
    /* nranks is this rank's own argument: the table is sized by it, not by
     * anything the root sent. */
    size_t bytes = sizeof(struct coll_rank_info) * (size_t)comm->nranks;
    char *raw = malloc(bytes);
    struct coll_rank_info *table = malloc(bytes);
    if (raw == NULL || table == NULL) {
        free(raw);
        free(table);
        close(fd);
        coll_set_error(comm, "bootstrap: out of memory for the rank table of %d ranks",
                       comm->nranks);
        return collSystemError;
    }
    res = coll_socket_recv_all(fd, raw, bytes, deadline, &err);
    close(fd);
    const char *why = "";
    if (res == collSuccess &&
        coll_wire_rank_table(raw, bytes, comm->nranks, table, &why) != COLL_WIRE_OK) {
        coll_set_error(comm, "bootstrap: the rank table from the root %s is malformed: %s",
                       raddr, why);
        res = collRemoteError;
    } else if (res != collSuccess) {
        coll_set_error(comm, "bootstrap: lost the root %s while reading the rank table", raddr);
    }
    if (res == collSuccess)
        for (int k = 0; k < comm->nranks; k++)
            comm->peers[k].info = table[k];
    free(raw);
    free(table);
    return res;
}

/* Links the out-of-band ring: connect to the next rank, accept the previous. */
static collResult_t boot_ring_link(struct coll_comm *comm, int64_t deadline)
{
    int next = (comm->rank + 1) % comm->nranks;
    int prev = (comm->rank - 1 + comm->nranks) % comm->nranks;
    const struct coll_rank_info *ni = &comm->peers[next].info;
    int err;
    char a[COLL_ADDR_STRLEN];
    collResult_t res = coll_socket_connect((const struct sockaddr *)&ni->boot_addr,
                                           ni->boot_addrlen, deadline, true, &comm->boot_next_fd);
    if (res != collSuccess) {
        coll_set_error(comm, "bootstrap: cannot connect to rank %d at %s (%.64s): %s", next,
                       coll_socket_addr_str((const struct sockaddr *)&ni->boot_addr, a, sizeof(a)),
                       ni->host, strerror(errno));
        return res;
    }
    struct coll_boot_ring_hello h = {.magic = BOOT_MAGIC, .rank = comm->rank};
    memcpy(h.secret, comm->secret, COLL_SECRET_BYTES);
    COLL_CHECK(coll_socket_send_all(comm->boot_next_fd, &h, sizeof(h), deadline, &err));
    /* The previous rank's hello, read beside any strangers' connections so that
     * none of them holds the listener up. */
    struct ring_check_arg arg = {.secret = comm->secret, .prev = prev};
    struct coll_hellos hellos;
    COLL_CHECK(coll_hellos_init(&hellos, comm->boot_listen_fd, "bootstrap ring listener",
                                RING_MAX_PENDING, sizeof(struct coll_boot_ring_hello), ring_check,
                                &arg));
    res = collSuccess;
    while (comm->boot_prev_fd < 0) {
        struct coll_boot_ring_hello in;
        int fd = coll_hellos_next(comm->boot_listen_fd, &hellos, &in);
        if (fd >= 0) {
            coll_socket_set_nodelay(fd);
            comm->boot_prev_fd = fd;
            break;
        }
        int64_t now = coll_now_ns();
        if (now >= deadline) {
            coll_set_error(comm, "bootstrap: rank %d (%.64s) did not connect within %lld ms",
                           prev, comm->peers[prev].info.host, (long long)comm->timeout_ms);
            res = collTimeout;
            break;
        }
        struct pollfd pfds[RING_MAX_PENDING + 1];
        pfds[0] = (struct pollfd){.fd = comm->boot_listen_fd, .events = POLLIN};
        for (int i = 0; i < hellos.npend; i++)
            pfds[i + 1] = (struct pollfd){.fd = hellos.pend[i].fd, .events = POLLIN};
        int64_t ms = (deadline - now) / 1000000 + 1;
        (void)poll(pfds, (nfds_t)hellos.npend + 1, ms > 100 ? 100 : (int)ms);
    }
    coll_hellos_fini(&hellos);
    /* The listener stays open for the communicator's life: collCommShrink meets
     * the survivors there (lib/core/split.c), and a peer that finds it refusing
     * connections knows this rank is gone (lib/engine/transport.c).  After init
     * the status responder reads it (lib/engine/status.c), handing shrink its
     * joins; shrink drops what is not a join of its own. */
    return res;
}

collResult_t coll_bootstrap_prepare(struct coll_comm *comm, const struct coll_id *id,
                                    struct coll_rank_info *mine)
{
    memcpy(comm->secret, id->secret, COLL_SECRET_BYTES);
    if (id->root_is_rank0 && comm->rank == 0) {
        /* Serve the root on the given address; when that address is not one of
         * this host's (a name behind NAT, a load balancer), on every address. */
        union coll_sockaddr ss = id->addr;
        socklen_t len = id->addrlen;
        collResult_t res = root_start(&ss, &len, id->secret, comm->timeout_ms);
        if (res != collSuccess && errno == EADDRNOTAVAIL) {
            ss = id->addr;
            len = id->addrlen;
            if (ss.sa.sa_family == AF_INET)
                ss.in.sin_addr.s_addr = htonl(INADDR_ANY);
            else
                ss.in6.sin6_addr = in6addr_any;
            res = root_start(&ss, &len, id->secret, comm->timeout_ms);
        }
        if (res != collSuccess) {
            char a[COLL_ADDR_STRLEN];
            coll_set_error(comm, "bootstrap: rank 0 cannot serve the root on %s: %s",
                           coll_socket_addr_str((const struct sockaddr *)&ss, a, sizeof(a)),
                           strerror(errno));
            return res;
        }
    }
    /* The out-of-band listener, on the interface that reaches the root; the data
     * transports follow the same choice. */
    socklen_t len;
    COLL_CHECK(coll_socket_pick_addr((const struct sockaddr *)&id->addr, &mine->boot_addr, &len,
                                     NULL, 0));
    if (mine->boot_addr.sa.sa_family == AF_INET)
        ((struct sockaddr_in *)&mine->boot_addr)->sin_port = 0;
    else
        ((struct sockaddr_in6 *)&mine->boot_addr)->sin6_port = 0;
    COLL_CHECK(coll_socket_listen(&mine->boot_addr, &len, &comm->boot_listen_fd));
    mine->boot_addrlen = len;
    return collSuccess;
}

collResult_t coll_bootstrap_init(struct coll_comm *comm, const struct coll_id *id,
                                 const struct coll_rank_info *mine)
{
    int64_t deadline = coll_now_ns() + comm->timeout_ms * 1000000LL;
    /* The root gives up COLL_TIMEOUT_MS after the first registration and then
     * tells every rank which ranks are missing; a rank waits a second longer than
     * its own timeout for that answer, which is the useful one (and rank 0, which
     * may serve the root, must not exit before the root has sent it). */
    int64_t reg_deadline = deadline + 1000000000LL;
    COLL_CHECK(boot_register(comm, id, mine, reg_deadline));
    if (comm->nranks > 1)
        COLL_CHECK(boot_ring_link(comm, deadline));
    return collSuccess;
}

/* Sends sbuf to the next rank while receiving rbuf from the previous one. */
static collResult_t boot_sendrecv(struct coll_comm *comm, const void *sbuf, void *rbuf, size_t n,
                                  int64_t deadline)
{
    size_t sent = 0, got = 0;
    while (sent < n || got < n) {
        if (sent < n) {
            ssize_t w = send(comm->boot_next_fd, (const char *)sbuf + sent, n - sent,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w > 0)
                sent += (size_t)w;
            else if (w < 0 && errno != EAGAIN && errno != EINTR)
                goto fail;
        }
        if (got < n) {
            ssize_t r = recv(comm->boot_prev_fd, (char *)rbuf + got, n - got, MSG_DONTWAIT);
            if (r > 0)
                got += (size_t)r;
            else if (r == 0 || (errno != EAGAIN && errno != EINTR))
                goto fail;
        }
        if (sent == n && got == n)
            break;
        if (coll_now_ns() >= deadline) {
            coll_set_error(comm, "bootstrap exchange timed out after %lld ms",
                           (long long)comm->timeout_ms);
            return collTimeout;
        }
        struct pollfd p[2] = {{.fd = comm->boot_next_fd, .events = sent < n ? POLLOUT : 0},
                              {.fd = comm->boot_prev_fd, .events = got < n ? POLLIN : 0}};
        (void)poll(p, 2, 100);
    }
    return collSuccess;
fail:
    coll_set_error(comm, "bootstrap exchange with a neighbour failed: %s",
                   errno ? strerror(errno) : "connection closed");
    return collRemoteError;
}

collResult_t coll_bootstrap_allgather(struct coll_comm *comm, void *data, size_t size)
{
    int n = comm->nranks, r = comm->rank;
    int64_t deadline = coll_now_ns() + comm->timeout_ms * 1000000LL;
    char *d = data;
    for (int s = 0; s < n - 1; s++) {
        int sslot = (r - s + n) % n, rslot = (r - s - 1 + n) % n;
        COLL_CHECK(boot_sendrecv(comm, d + (size_t)sslot * size, d + (size_t)rslot * size, size,
                                 deadline));
    }
    return collSuccess;
}

collResult_t coll_bootstrap_barrier(struct coll_comm *comm)
{
    /* A token passed n-1 times around the ring: when it has come back, every rank
     * has arrived. */
    int64_t deadline = coll_now_ns() + comm->timeout_ms * 1000000LL;
    for (int lap = 0; lap < 1 && comm->nranks > 1; lap++) {
        for (int s = 0; s < comm->nranks - 1; s++) {
            char t = 0, u;
            COLL_CHECK(boot_sendrecv(comm, &t, &u, 1, deadline));
        }
    }
    return collSuccess;
}

#define BOOT_FAILURE_NOTICE 'F'
#define BOOT_REVOKE_NOTICE 'R'

/* A notice: 'F', then the rank the failure is blamed on (int32, -1: unknown),
 * or 'R', then the rank that revoked the communicator (collCommRevoke); passed
 * on unchanged, so that every rank can name it. */
struct boot_notice {
    char tag;
    int32_t culprit;
} __attribute__((packed));

void coll_bootstrap_notify_failure(struct coll_comm *comm)
{
    if (!comm->boot_watch)
        return; /* during init the ring carries init's own messages */
    int revoker = atomic_load(&comm->revoked_by);
    struct boot_notice msg = {revoker >= 0 ? BOOT_REVOKE_NOTICE : BOOT_FAILURE_NOTICE,
                              revoker >= 0 ? revoker : atomic_load(&comm->failed_peer)};
    int fds[2] = {comm->boot_prev_fd, comm->boot_next_fd};
    for (int i = 0; i < 2; i++)
        if (fds[i] >= 0)
            (void)send(fds[i], &msg, sizeof(msg), MSG_DONTWAIT | MSG_NOSIGNAL);
}

int coll_bootstrap_notice_fds(struct coll_comm *comm, struct pollfd *pfds)
{
    int fds[2] = {comm->boot_prev_fd, comm->boot_next_fd}, n = 0;
    for (int i = 0; i < 2 && comm->boot_watch; i++)
        if (fds[i] >= 0 && !comm->boot_eof[i])
            pfds[n++] = (struct pollfd){.fd = fds[i], .events = POLLIN};
    return n;
}

collResult_t coll_bootstrap_notice_check(struct coll_comm *comm, const struct pollfd *pfds,
                                         int n)
{
    for (int i = 0; i < n; i++) {
        if (pfds[i].revents == 0)
            continue;
        int side = pfds[i].fd == comm->boot_prev_fd ? 0 : 1;
        struct boot_notice msg = {0, -1};
        ssize_t got = recv(pfds[i].fd, &msg, sizeof(msg), MSG_DONTWAIT);
        if (got >= 1 && (msg.tag == BOOT_FAILURE_NOTICE || msg.tag == BOOT_REVOKE_NOTICE)) {
            if (atomic_load(&comm->async_error) != collSuccess)
                return collRemoteError; /* poisoned already: its first cause stands */
            int nr = comm->nranks;
            int prev = (comm->rank - 1 + nr) % nr, next = (comm->rank + 1) % nr;
            int from = side == 0 ? prev : next;
            int culprit = got == (ssize_t)sizeof(msg) && msg.culprit >= 0 && msg.culprit < nr &&
                                  msg.culprit != comm->rank
                              ? msg.culprit
                              : -1;
            /* A failure blamed on this rank, which is alive: the peer that timed out
             * waited for it while it waited for another, which it blames instead
             * (and passes on). */
            int waited = atomic_load_explicit(&comm->wait_peer, memory_order_relaxed);
            if (msg.tag == BOOT_FAILURE_NOTICE && got == (ssize_t)sizeof(msg) &&
                msg.culprit == comm->rank && waited >= 0 && waited < nr && waited != comm->rank)
                culprit = waited;
            if (msg.tag == BOOT_REVOKE_NOTICE && culprit >= 0) {
                /* Not a failure: nobody is blamed, and the notice goes on as one. */
                coll_set_error(comm, "%s #%llu: the communicator was revoked by rank %d "
                               "(collCommRevoke; passed on by rank %d)", comm->op_name,
                               (unsigned long long)comm->seq, culprit, from);
                int none = -1;
                atomic_compare_exchange_strong(&comm->revoked_by, &none, culprit);
                coll_comm_poison(comm, collRemoteError);
                return collRemoteError;
            }
            if (culprit >= 0)
                coll_set_error(comm, "%s #%llu: the communicator failed elsewhere: rank %d "
                               "(%.64s) failed or was cut off (passed on by rank %d)",
                               comm->op_name, (unsigned long long)comm->seq, culprit,
                               comm->peers[culprit].info.host, from);
            else
                coll_set_error(comm, "%s #%llu: the communicator failed elsewhere (notice "
                               "from rank %d, which failed or heard of a failure)",
                               comm->op_name, (unsigned long long)comm->seq, from);
            coll_comm_blame(comm, culprit);
            coll_comm_poison(comm, collRemoteError);
            return collRemoteError;
        }
        if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
            comm->boot_eof[side] = true; /* gone: watch it no more */
    }
    return collSuccess;
}

int coll_bootstrap_gone_neighbour(const struct coll_comm *comm)
{
    int nr = comm->nranks;
    if (!comm->boot_watch || nr < 2)
        return -1;
    if (comm->boot_eof[0])
        return (comm->rank - 1 + nr) % nr;
    if (comm->boot_eof[1])
        return (comm->rank + 1) % nr;
    return -1;
}

void coll_bootstrap_fini(struct coll_comm *comm)
{
    if (comm->boot_next_fd >= 0)
        close(comm->boot_next_fd);
    if (comm->boot_prev_fd >= 0)
        close(comm->boot_prev_fd);
    if (comm->boot_listen_fd >= 0)
        close(comm->boot_listen_fd);
    comm->boot_next_fd = comm->boot_prev_fd = comm->boot_listen_fd = -1;
}
