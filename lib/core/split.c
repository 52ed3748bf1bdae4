/* New communicators from an existing one: collCommSplit and collCommShrink.
 *
 * Split is collective over a healthy communicator: two allgathers on it (every
 * rank's color and key, then the unique id each group's new rank 0 made), then
 * each group initializes its own communicator from that id.
 *
 * Shrink is called by the survivors only, so it cannot use the old
 * communicator's collectives, and those may have failed anyway.  It uses the
 * one thing every rank still has: its bootstrap listener, whose address every
 * other rank learned at init.  After init only the status responder accepts
 * on it besides, and it hands joins over (below).
 *
 *   member s  --join(secret, epoch, s, exclusion hash)-->  coordinator c
 *             <--ack-------------------------------------   (at once)
 *             <--reply(status, new size, s's new rank, new id)--  once all joined
 *
 * The coordinator is the lowest surviving rank.  Without COLL_SHRINK_DETECT the
 * survivors are exactly the ranks not excluded; every one must join, and their
 * exclusion lists must agree.  With COLL_SHRINK_DETECT a rank that does not
 * answer is excluded too: a member tries the ranks below it in order, and the
 * first that acknowledges its join is the coordinator (every rank below that one
 * refused the connection or was silent for the timeout); the coordinator counts
 * as survivors the ranks that join before its deadline, skipping at once those
 * whose listener refuses connections (the process is gone).  The epoch (shrinks
 * of this communicator so far) keeps apart the joins of successive shrinks.
 * Between shrinks the status responder (lib/engine/status.c) accepts on the
 * listener; it sets joins aside unread and hands them over when a shrink
 * begins (coll_status_pause). */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap.h"
#include "internal.h"
#include "socket.h"
#include "status.h"
#include "stream.h"
#include "wire.h"

/* ---------------------------------------------------------------- split --- */

/* Allgathers size bytes per rank over comm's data path, blocking whatever
 * comm's configuration (a stream of its own, synchronized). */
static collResult_t split_allgather(struct coll_comm *comm, const void *mine, void *all,
                                    size_t size)
{
    collStream_t st;
    COLL_CHECK(collStreamCreate(&st));
    collResult_t res = collAllGather(mine, all, size, collUint8, comm, st);
    collResult_t sync = collStreamSynchronize(st);
    (void)collStreamDestroy(st);
    return res != collSuccess ? res : sync;
}

struct split_entry {
    int32_t color;
    int32_t key;
};

COLL_API collResult_t collCommSplit(collComm_t comm, int color, int key, collComm_t *newcomm,
                                    collConfig_t *config)
{
    if (comm == NULL || newcomm == NULL) {
        coll_set_error(comm, "collCommSplit: %s is NULL", comm ? "newcomm" : "comm");
        return collInvalidArgument;
    }
    if (color < 0 && color != COLL_SPLIT_NOCOLOR) {
        coll_set_error(comm, "collCommSplit: color %d is negative and not COLL_SPLIT_NOCOLOR",
                       color);
        return collInvalidArgument;
    }
    COLL_CHECK(coll_config_check("collCommSplit", config));
    COLL_CHECK(coll_comm_check_usable(comm, "collCommSplit"));
    /* Counted busy, so that collCommAbort from another thread waits for it. */
    atomic_fetch_add(&comm->busy, 1);
    int n = comm->nranks;
    struct split_entry me = {color, key}, *all = NULL;
    struct coll_id *ids = NULL;
    collResult_t res;
    if ((res = coll_calloc(&all, (size_t)n)) != collSuccess ||
        (res = coll_calloc(&ids, (size_t)n)) != collSuccess)
        goto out;
    if ((res = split_allgather(comm, &me, all, sizeof(me))) != collSuccess)
        goto out;
    /* The group: ranks of this color ordered by (key, old rank). */
    int newrank = 0, size = 0, leader = -1;
    for (int r = 0; r < n && color != COLL_SPLIT_NOCOLOR; r++) {
        if (all[r].color != color)
            continue;
        size++;
        if (all[r].key < key || (all[r].key == key && r < comm->rank))
            newrank++;
        if (leader < 0 || all[r].key < all[leader].key)
            leader = r; /* ties keep the lower old rank */
    }
    struct coll_id id = {0};
    if (color != COLL_SPLIT_NOCOLOR && leader == comm->rank &&
        coll_bootstrap_get_unique_id(&id) != collSuccess)
        memset(&id, 0, sizeof(id)); /* the members see a bad id and fail */
    if ((res = split_allgather(comm, &id, ids, sizeof(id))) != collSuccess)
        goto out;
    if (color == COLL_SPLIT_NOCOLOR) {
        *newcomm = NULL;
        goto out;
    }
    id = ids[leader];
    if (id.magic != COLL_ID_MAGIC) {
        coll_set_error(comm, "collCommSplit: rank %d, the new rank 0 of color %d, could not "
                       "start the new communicator's root", leader, color);
        res = collSystemError;
        goto out;
    }
    collConfig_t cfg;
    coll_config_inherit(comm, config, &cfg);
    COLL_INFO(COLL_SUBSYS_INIT, "split: color %d key %d: rank %d of %d in the new communicator",
              color, key, newrank, size);
    res = coll_comm_create(newcomm, size, &id, newrank, &cfg);
    if (res != collSuccess && res != collInProgress)
        coll_set_error(comm, "collCommSplit: %s", collGetLastError(NULL));
out:
    free(all);
    free(ids);
    atomic_fetch_sub(&comm->busy, 1);
    return res;
}

/* --------------------------------------------------------------- shrink --- */

struct shrink {
    struct coll_comm *comm;
    int flags;
    bool *excluded;       /* per old rank: in the list (or found dead) */
    uint64_t excl_hash;
    int64_t timeout_ns;
    int suspect;          /* COLL_SHRINK_DETECT: the rank the failure was blamed on, -1 */
    int64_t grace_ns;     /* how long a suspect is waited for */
    /* Connections to this rank's listener that the status responder had set
     * aside unread (joins that came before this shrink): the coordinator reads
     * them with the others; a member closes them. */
    int *handed;          /* COLL_STATUS_HANDOFF_MAX(nranks) */
    int nhanded;
};

/* A suspect is waited for a third of the timeout, at least 1 s and at most 10 s:
 * the survivors hear of a failure within milliseconds of each other, so a live
 * suspect is in its shrink well within it. */
static int64_t shrink_grace_ns(int64_t timeout_ns)
{
    int64_t g = timeout_ns / 3;
    return g < 1000000000LL ? 1000000000LL : g > 10000000000LL ? 10000000000LL : g;
}

static uint64_t shrink_hash(const bool *excluded, int n)
{
    uint64_t h = 1469598103934665603ULL;
    for (int r = 0; r < n; r++)
        h = (h ^ (excluded[r] ? (uint64_t)r + 1 : 0)) * 1099511628211ULL;
    return h;
}

static void shrink_reply_init(const struct shrink *sh, struct coll_shrink_reply *rep, int status)
{
    memset(rep, 0, sizeof(*rep));
    rep->magic = COLL_SHRINK_MAGIC;
    memcpy(rep->secret, sh->comm->secret, COLL_SECRET_BYTES);
    rep->epoch = sh->comm->shrinks;
    rep->status = status;
}

/* A reply on fd that is valid for this shrink, or an error (the connection went
 * away, timed out, or showed no secret). */
static collResult_t shrink_read_reply(const struct shrink *sh, int fd, int64_t deadline,
                                      struct coll_shrink_reply *rep)
{
    int err;
    struct coll_shrink_reply raw;
    collResult_t res = coll_socket_recv_all(fd, &raw, sizeof(raw), deadline, &err);
    if (res != collSuccess)
        return res;
    const char *why = "";
    if (coll_wire_shrink_reply(&raw, sizeof(raw), sh->comm->secret, sh->comm->shrinks,
                               sh->comm->nranks, rep, &why) != COLL_WIRE_OK) {
        COLL_WARN("shrink: dropped an answer: %s", why);
        return collRemoteError;
    }
    return collSuccess;
}

/* Connects to rank r's bootstrap listener; collRemoteError when it refuses (the
 * process is gone). */
static collResult_t shrink_connect(const struct shrink *sh, int r, int64_t deadline, int *fd_p)
{
    const struct coll_rank_info *pi = &sh->comm->peers[r].info;
    return coll_socket_connect((const struct sockaddr *)&pi->boot_addr, pi->boot_addrlen,
                               deadline, false, fd_p);
}

/* As a member: joins coordinator c.  *answered: c acknowledged (it is the
 * coordinator); then the result is in *rep. */
static collResult_t shrink_join(const struct shrink *sh, int c, struct coll_shrink_reply *rep,
                                bool *answered)
{
    struct coll_comm *comm = sh->comm;
    *answered = false;
    int fd, err;
    int64_t deadline = coll_now_ns() + (c == sh->suspect ? sh->grace_ns : sh->timeout_ns);
    collResult_t res = shrink_connect(sh, c, deadline, &fd);
    if (res != collSuccess)
        return res;
    struct coll_shrink_join j = {.magic = COLL_SHRINK_MAGIC, .epoch = comm->shrinks, .rank = comm->rank,
                            .flags = (uint32_t)sh->flags, .excl_hash = sh->excl_hash,
                            .suspect = sh->suspect};
    memcpy(j.secret, comm->secret, COLL_SECRET_BYTES);
    res = coll_socket_send_all(fd, &j, sizeof(j), deadline, &err);
    if (res == collSuccess)
        res = shrink_read_reply(sh, fd, deadline, rep);
    if (res == collSuccess && rep->status == collInProgress) {
        *answered = true;
        /* The coordinator waits up to its timeout for the other members after
         * its own probing, which takes as long as this rank's. */
        res = shrink_read_reply(sh, fd, coll_now_ns() + 3 * sh->timeout_ns, rep);
    }
    close(fd);
    return res;
}

struct shrink_check_arg {
    const uint8_t *secret;
    uint32_t epoch;
    int nranks;
};

/* coll_hellos' check of a join as its bytes come. */
static int shrink_check(const void *buf, size_t got, const void *arg, const char **why_p)
{
    const struct shrink_check_arg *a = arg;
    struct coll_shrink_join j;
    return coll_wire_shrink_join(buf, got, a->secret, a->epoch, a->nranks, &j, why_p);
}

/* Whether every rank still expected (want, not joined) is blamed by a survivor. */
static bool shrink_only_blamed_missing(const bool *want, const int *joined, const bool *blamed,
                                       int n)
{
    for (int r = 0; r < n; r++)
        if (want[r] && joined[r] < 0 && !blamed[r])
            return false;
    return true;
}

/* As the coordinator: collects the joins of the other survivors, then sends
 * each its new rank and the new id.  want[r]: rank r is expected to join.  The
 * joins are read through coll_hellos, as the bootstrap's listeners are, with room
 * for every rank at once: strangers, floods and slow clients are dropped there. */
static collResult_t shrink_coordinate(struct shrink *sh, bool *want, struct coll_id *id,
                                      int *nranks_p)
{
    struct coll_comm *comm = sh->comm;
    int n = comm->nranks, missing = 0;
    int *joined = NULL;
    struct pollfd *p = NULL;
    struct coll_hellos hellos;
    struct shrink_check_arg arg = {.secret = comm->secret, .epoch = comm->shrinks,
                                   .nranks = n};
    bool *blamed = NULL; /* the coordinator's suspect and every member's */
    collResult_t res = coll_calloc(&joined, (size_t)n);
    if (res == collSuccess)
        res = coll_calloc(&p, (size_t)n + 1);
    if (res == collSuccess)
        res = coll_calloc(&blamed, (size_t)n);
    if (res == collSuccess)
        res = coll_hellos_init(&hellos, comm->boot_listen_fd, "shrink: bootstrap listener",
                               COLL_STATUS_HANDOFF_MAX(n), sizeof(struct coll_shrink_join),
                               shrink_check, &arg);
    if (res != collSuccess) {
        free(joined);
        free(p);
        free(blamed);
        return res;
    }
    for (int i = 0; i < sh->nhanded; i++)
        if (!coll_hellos_adopt(&hellos, sh->handed[i]))
            close(sh->handed[i]);
    sh->nhanded = 0;
    for (int r = 0; r < n; r++) {
        joined[r] = -1;
        missing += want[r];
    }
    int64_t start = coll_now_ns(), deadline = start + sh->timeout_ns;
    if (sh->suspect >= 0)
        blamed[sh->suspect] = true;
    while (missing > 0 && coll_now_ns() < deadline && !atomic_load(&comm->aborting)) {
        /* Only blamed ranks missing, and their grace over: they are not coming.
         * Blame is each rank's guess (one waiting on a live rank that waits on
         * the stopped one blames the live one), so every member's counts. */
        if ((sh->flags & COLL_SHRINK_DETECT) && coll_now_ns() >= start + sh->grace_ns &&
            shrink_only_blamed_missing(want, joined, blamed, n))
            break;
        struct coll_shrink_join raw, j;
        int fd = coll_hellos_next(comm->boot_listen_fd, &hellos, &raw);
        if (fd < 0) {
            p[0] = (struct pollfd){.fd = comm->boot_listen_fd, .events = POLLIN};
            for (int i = 0; i < hellos.npend; i++)
                p[i + 1] = (struct pollfd){.fd = hellos.pend[i].fd, .events = POLLIN};
            (void)poll(p, (nfds_t)hellos.npend + 1, 100);
            continue;
        }
        const char *why = "";
        (void)coll_wire_shrink_join(&raw, sizeof(raw), comm->secret, comm->shrinks, n, &j, &why);
        if (!want[j.rank] || joined[j.rank] >= 0) {
            coll_hellos_dropped(&hellos, "a rank that is not expected, or twice");
            close(fd);
            continue;
        }
        int64_t now = coll_now_ns();
        struct coll_shrink_reply rep;
        int err;
        if (j.excl_hash != sh->excl_hash || j.flags != (uint32_t)sh->flags) {
            shrink_reply_init(sh, &rep, collInvalidUsage);
            snprintf(rep.msg, sizeof(rep.msg), "rank %d passed another excludeRanksList or "
                     "shrinkFlags than rank %d", j.rank, comm->rank);
            (void)coll_socket_send_all(fd, &rep, sizeof(rep), now + 1000000000LL, &err);
            close(fd);
            coll_set_error(comm, "collCommShrink: %s", rep.msg);
            res = collInvalidUsage;
            goto out;
        }
        shrink_reply_init(sh, &rep, collInProgress);
        if (coll_socket_send_all(fd, &rep, sizeof(rep), now + 1000000000LL, &err) !=
            collSuccess) {
            close(fd);
            continue;
        }
        joined[j.rank] = fd;
        missing--;
        if (j.suspect >= 0)
            blamed[j.suspect] = true;
    }
    if (atomic_load(&comm->aborting)) {
        coll_set_error(comm, "collCommShrink: aborted");
        res = collRemoteError;
        goto out;
    }
    if (missing > 0 && !(sh->flags & COLL_SHRINK_DETECT)) {
        char msg[COLL_ERRMSG_BYTES / 2];
        size_t len = 0;
        coll_buf_printf(msg, sizeof(msg), &len, "ranks that did not join within %lld ms:",
                        (long long)(sh->timeout_ns / 1000000));
        for (int r = 0; r < n; r++)
            if (want[r] && joined[r] < 0)
                coll_buf_printf(msg, sizeof(msg), &len, " %d", r);
        coll_set_error(comm, "collCommShrink: %s (exclude them, or pass COLL_SHRINK_DETECT)",
                       msg);
        res = collTimeout;
        goto out;
    }
    /* Members: this rank and those that joined, in their old order. */
    int size = 1;
    for (int r = 0; r < n; r++) {
        if (want[r] && joined[r] < 0) {
            COLL_WARN("shrink: rank %d (%.64s)%s did not join within %lld ms: excluded", r,
                      comm->peers[r].info.host, blamed[r] ? ", blamed for the failure," : "",
                      (long long)((blamed[r] ? sh->grace_ns : sh->timeout_ns) / 1000000));
            want[r] = false;
            sh->excluded[r] = true;
        }
        size += joined[r] >= 0;
    }
    res = coll_bootstrap_get_unique_id(id);
    int newrank = 1; /* the coordinator is the lowest survivor: new rank 0 */
    for (int r = 0; r < n; r++) {
        if (joined[r] < 0)
            continue;
        struct coll_shrink_reply rep;
        shrink_reply_init(sh, &rep, res);
        if (res == collSuccess) {
            rep.nranks = size;
            rep.rank = newrank++;
            rep.id = *id;
        } else {
            snprintf(rep.msg, sizeof(rep.msg), "rank %d could not start the new root", comm->rank);
        }
        int err;
        if (coll_socket_send_all(joined[r], &rep, sizeof(rep), coll_now_ns() + sh->timeout_ns,
                                 &err) != collSuccess)
            COLL_WARN("shrink: could not answer rank %d: %s", r, strerror(err));
    }
    if (res != collSuccess)
        coll_set_error(comm, "collCommShrink: cannot start the new communicator's root");
    *nranks_p = size;
out:
    coll_hellos_fini(&hellos);
    for (int r = 0; r < n; r++)
        if (joined[r] >= 0)
            close(joined[r]);
    free(joined);
    free(p);
    free(blamed);
    return res;
}

static collResult_t shrink_run(struct shrink *sh, collComm_t *newcomm, const collConfig_t *cfg)
{
    struct coll_comm *comm = sh->comm;
    int n = comm->nranks, me = comm->rank;
    bool detect = sh->flags & COLL_SHRINK_DETECT;
    struct coll_shrink_reply rep;
    collResult_t res = collSuccess;
    if (detect) {
        /* The rank a failure was blamed on (silent for a peer's whole timeout,
         * here or on the rank whose notice reached this one) is waited for only
         * SHRINK_GRACE: waiting a whole timeout again for a stopped rank would
         * make two.  Blame is a guess (a rank waiting on a live one that waits on
         * the stopped one blames the live one), so a live suspect, in its shrink
         * by then like every survivor, still joins. */
        int culprit = atomic_load(&comm->failed_peer);
        if (culprit >= 0 && culprit != me && !sh->excluded[culprit])
            sh->suspect = culprit;
    }
    /* Find the coordinator: the lowest survivor. */
    for (int r = 0; r < me; r++) {
        if (sh->excluded[r])
            continue;
        bool answered;
        res = shrink_join(sh, r, &rep, &answered);
        if (answered || !detect) {
            if (res == collSuccess && rep.status != collSuccess) {
                coll_set_error(comm, "collCommShrink: refused by rank %d: %s", r, rep.msg);
                return (collResult_t)rep.status;
            }
            if (res != collSuccess) {
                coll_set_error(comm, "collCommShrink: rank %d (%.64s), the lowest survivor, %s",
                               r, comm->peers[r].info.host,
                               answered ? "did not send the new communicator"
                                        : "did not answer (exclude it, or pass "
                                          "COLL_SHRINK_DETECT)");
                return res;
            }
            COLL_INFO(COLL_SUBSYS_INIT, "shrink: rank %d of %d in the new communicator "
                      "(coordinator: old rank %d)", rep.rank, rep.nranks, r);
            return coll_comm_create(newcomm, rep.nranks, &rep.id, rep.rank, cfg);
        }
        if (atomic_load(&comm->aborting))
            return collRemoteError;
        COLL_WARN("shrink: rank %d (%.64s) does not answer: excluded", r,
                  comm->peers[r].info.host);
        sh->excluded[r] = true;
    }
    /* This rank is the coordinator. */
    bool *want;
    COLL_CHECK(coll_calloc(&want, (size_t)n));
    for (int r = me + 1; r < n; r++) {
        want[r] = !sh->excluded[r];
        if (!want[r] || !detect)
            continue;
        /* A rank whose listener refuses is gone: do not wait for it. */
        int fd;
        if (shrink_connect(sh, r, coll_now_ns() + 2000000000LL, &fd) == collSuccess) {
            close(fd);
        } else {
            COLL_WARN("shrink: rank %d (%.64s) is gone: excluded", r, comm->peers[r].info.host);
            want[r] = false;
            sh->excluded[r] = true;
        }
    }
    struct coll_id id;
    int size = 0;
    res = shrink_coordinate(sh, want, &id, &size);
    free(want);
    if (res != collSuccess)
        return res;
    COLL_INFO(COLL_SUBSYS_INIT, "shrink: rank 0 of %d in the new communicator", size);
    return coll_comm_create(newcomm, size, &id, 0, cfg);
}

COLL_API collResult_t collCommShrink(collComm_t comm, int *excludeRanksList,
                                     int excludeRanksCount, collComm_t *newcomm,
                                     collConfig_t *config, int shrinkFlags)
{
    if (comm == NULL || newcomm == NULL) {
        coll_set_error(comm, "collCommShrink: %s is NULL", comm ? "newcomm" : "comm");
        return collInvalidArgument;
    }
    int n = comm->nranks;
    if (excludeRanksCount < 0 || excludeRanksCount >= n) {
        coll_set_error(comm, "collCommShrink: excludeRanksCount %d is outside [0, %d)",
                       excludeRanksCount, n);
        return collInvalidArgument;
    }
    if (excludeRanksCount > 0 && excludeRanksList == NULL) {
        coll_set_error(comm, "collCommShrink: excludeRanksList is NULL with excludeRanksCount "
                       "%d", excludeRanksCount);
        return collInvalidArgument;
    }
    if (shrinkFlags & ~(COLL_SHRINK_ABORT | COLL_SHRINK_DETECT)) {
        coll_set_error(comm, "collCommShrink: shrinkFlags 0x%x has unknown bits", shrinkFlags);
        return collInvalidArgument;
    }
    COLL_CHECK(coll_config_check("collCommShrink", config));
    if (atomic_load(&comm->init_running) || atomic_load(&comm->finalized))
        return coll_comm_check_usable(comm, "collCommShrink");
    struct shrink sh = {.comm = comm, .flags = shrinkFlags,
                        .timeout_ns = comm->timeout_ms * 1000000LL, .suspect = -1};
    sh.grace_ns = shrink_grace_ns(sh.timeout_ns);
    COLL_CHECK(coll_calloc(&sh.excluded, (size_t)n));
    collResult_t res = collSuccess;
    for (int i = 0; i < excludeRanksCount; i++) {
        int r = excludeRanksList[i];
        if (r < 0 || r >= n || sh.excluded[r]) {
            coll_set_error(comm, "collCommShrink: excludeRanksList[%d] = %d is %s", i, r,
                           r < 0 || r >= n ? "not a rank of the communicator" : "repeated");
            res = collInvalidArgument;
            goto out;
        }
        sh.excluded[r] = true;
    }
    if (sh.excluded[comm->rank]) {
        coll_set_error(comm, "collCommShrink: this rank (%d) is in excludeRanksList: only the "
                       "ranks that remain call it", comm->rank);
        res = collInvalidArgument;
        goto out;
    }
    sh.excl_hash = shrink_hash(sh.excluded, n);
    if ((shrinkFlags & COLL_SHRINK_ABORT) || atomic_load(&comm->revoked_by) >= 0) {
        /* Calls still queued on comm fail now instead of waiting for peers that
         * may be gone; comm stays allocated until destroyed.  A revoked comm is
         * shrunk so whatever the flags. */
        if (atomic_load(&comm->async_error) == collSuccess)
            coll_set_error(comm, "collCommShrink: the communicator was abandoned for a "
                           "shrunk one");
        coll_comm_poison(comm, collRemoteError);
        coll_stream_comm_stop(comm);
    } else {
        COLL_CHECK_GOTO(coll_comm_check_usable(comm, "collCommShrink"), res, out);
    }
    collConfig_t cfg;
    coll_config_inherit(comm, config, &cfg);
    /* The waits here end on an abort of comm from another thread too. */
    coll_socket_set_cancel(&comm->aborting);
    coll_comm_enter(comm);
    res = coll_calloc(&sh.handed, (size_t)COLL_STATUS_HANDOFF_MAX(n));
    if (res == collSuccess) {
        sh.nhanded = coll_status_pause(comm, sh.handed, COLL_STATUS_HANDOFF_MAX(n));
        res = shrink_run(&sh, newcomm, &cfg);
    }
    for (int i = 0; i < sh.nhanded; i++)
        close(sh.handed[i]);
    coll_status_resume(comm);
    coll_comm_leave(comm);
    coll_socket_set_cancel(NULL);
    comm->shrinks++;
    if (res != collSuccess && res != collInProgress && comm->last_error[0] == '\0')
        coll_set_error(comm, "collCommShrink: %s", collGetLastError(NULL));
out:
    free(sh.handed);
    free(sh.excluded);
    return res;
}
