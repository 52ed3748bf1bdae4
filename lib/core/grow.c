/* A larger communicator from an existing one: collCommGetUniqueId and
 * collCommGrow.
 *
 *   rank 0 of comm:  id = collCommGetUniqueId(comm)   (a root, as collGetUniqueId)
 *                    hands id to the new processes (files, a launcher, a socket)
 *   ranks of comm:   collCommGrow(comm, N, rank 0: &id / others: NULL, -1, ...)
 *                      rank 0's id reaches the others by a broadcast on comm;
 *                      each then initializes rank r of N from it
 *   new processes:   collCommGrow(NULL, N, &id, r, ...)  r in [size(comm), N)
 *
 * Everything after the broadcast is an ordinary init: the root checks that all
 * N ranks agree on N and that no rank registers twice, fails every caller at
 * once when they do not, and gives up the communicator's timeout after the
 * first registration, naming the ranks that never came.
 *
 * The id carries the size of the communicator it grows and a fingerprint of it
 * (its secret hashed), so that a new rank refuses a rank number taken by an
 * existing one and comm's ranks refuse the id of another communicator.  Rank 0
 * remembers the last id it made and whether a grow used it: each id works once
 * (its root has gone after the grow anyway, so a new process given a used id
 * fails to reach it, within the timeout). */
#include <stdlib.h>
#include <string.h>

#include "bootstrap.h"
#include "internal.h"
#include "wire.h"

/* The fingerprint of comm in its grow ids: never 0 (0 marks a plain id). */
static uint64_t grow_fingerprint(const struct coll_comm *comm)
{
    uint64_t h = 1469598103934665603ULL;
    for (int i = 0; i < COLL_SECRET_BYTES; i++)
        h = (h ^ comm->secret[i]) * 1099511628211ULL;
    h ^= (uint64_t)(uint32_t)comm->nranks << 32;
    return h | 1;
}

COLL_API collResult_t collCommGetUniqueId(collComm_t comm, collUniqueId *uniqueId)
{
    if (comm == NULL || uniqueId == NULL) {
        coll_set_error(comm, "collCommGetUniqueId: %s is NULL", comm ? "uniqueId" : "comm");
        return collInvalidArgument;
    }
    COLL_CHECK(coll_comm_check_usable(comm, "collCommGetUniqueId"));
    if (comm->rank != 0) {
        coll_set_error(comm, "collCommGetUniqueId: called on rank %d; only rank 0 of the "
                       "communicator makes the id of a grow", comm->rank);
        return collInvalidUsage;
    }
    struct coll_id id;
    COLL_CHECK(coll_bootstrap_new_id(&id, comm->timeout_ms));
    id.grow_from = (uint32_t)comm->nranks;
    id.grow_of = grow_fingerprint(comm);
    memcpy(comm->grow_secret, id.secret, COLL_SECRET_BYTES);
    comm->grow_id_state = 1;
    memset(uniqueId, 0, sizeof(*uniqueId));
    memcpy(uniqueId->internal, &id, sizeof(id));
    return collSuccess;
}

/* Reads a grow id; on a bad one sets the error (naming fn's argument) and
 * returns collInvalidArgument. */
static collResult_t grow_parse_id(struct coll_comm *comm, const collUniqueId *uid,
                                  struct coll_id *id)
{
    const char *why = "";
    if (coll_wire_id(uid->internal, sizeof(uid->internal), id, &why) != COLL_WIRE_OK) {
        coll_set_error(comm, "collCommGrow: uniqueId is malformed: %s", why);
        return collInvalidArgument;
    }
    if (id->grow_from == 0) {
        coll_set_error(comm, "collCommGrow: uniqueId was made by collGetUniqueId, not by "
                       "collCommGetUniqueId on rank 0 of the communicator to grow");
        return collInvalidArgument;
    }
    return collSuccess;
}

/* What rank 0 broadcasts to the other ranks of comm: its verdict on the id and,
 * when good, the id. */
struct grow_offer {
    int32_t status; /* collResult_t */
    int32_t nranks; /* rank 0's nRanks, for the message of a rank that differs */
    struct coll_id id;
    char why[COLL_ERRMSG_BYTES]; /* rank 0's error when it refused */
};

/* Rank 0's checks of its id: made by this communicator, last, not used yet. */
static collResult_t grow_check_own_id(struct coll_comm *comm, const collUniqueId *uid,
                                      struct coll_id *id)
{
    if (uid == NULL) {
        coll_set_error(comm, "collCommGrow: uniqueId is NULL on rank 0 (rank 0 passes the id "
                       "from its collCommGetUniqueId)");
        return collInvalidArgument;
    }
    COLL_CHECK(grow_parse_id(comm, uid, id));
    if (id->grow_of != grow_fingerprint(comm) || id->grow_from != (uint32_t)comm->nranks) {
        coll_set_error(comm, "collCommGrow: uniqueId was made by collCommGetUniqueId on "
                       "another communicator (of %u ranks)", id->grow_from);
        return collInvalidArgument;
    }
    if (comm->grow_id_state == 0 ||
        memcmp(id->secret, comm->grow_secret, COLL_SECRET_BYTES) != 0) {
        coll_set_error(comm, "collCommGrow: uniqueId is not the id of this communicator's "
                       "latest collCommGetUniqueId (each id works once)");
        return collInvalidArgument;
    }
    if (comm->grow_id_state == 2) {
        coll_set_error(comm, "collCommGrow: uniqueId was used by an earlier collCommGrow (each "
                       "id works once: call collCommGetUniqueId again)");
        return collInvalidUsage;
    }
    return collSuccess;
}

/* Broadcasts rank 0's offer over comm's data path, blocking whatever comm's
 * configuration (a stream of its own, synchronized). */
static collResult_t grow_broadcast(struct coll_comm *comm, struct grow_offer *offer)
{
    collStream_t st;
    COLL_CHECK(collStreamCreate(&st));
    collResult_t res = collBroadcast(offer, offer, sizeof(*offer), collUint8, 0, comm, st);
    collResult_t sync = collStreamSynchronize(st);
    (void)collStreamDestroy(st);
    return res != collSuccess ? res : sync;
}

/* A rank of comm: rank 0's id by broadcast, then init keeping the rank. */
static collResult_t grow_existing(struct coll_comm *comm, int nranks, const collUniqueId *uid,
                                  collComm_t *newcomm, const collConfig_t *config)
{
    struct grow_offer offer;
    memset(&offer, 0, sizeof(offer));
    if (comm->rank == 0) {
        offer.status = grow_check_own_id(comm, uid, &offer.id);
        offer.nranks = nranks;
        if (offer.status != collSuccess)
            snprintf(offer.why, sizeof(offer.why), "%s", comm->last_error);
    }
    COLL_CHECK(grow_broadcast(comm, &offer));
    if (offer.status != collSuccess) {
        offer.why[sizeof(offer.why) - 1] = '\0';
        if (comm->rank == 0)
            coll_set_error(comm, "%s", offer.why);
        else
            coll_set_error(comm, "collCommGrow: rank 0 refused the grow: %s",
                           offer.why + (strncmp(offer.why, "collCommGrow: ", 14) ? 0 : 14));
        return (collResult_t)offer.status;
    }
    /* Each rank checks the id as it arrived, as if it came from anywhere. */
    struct coll_id id;
    const char *why = "";
    if (coll_wire_id(&offer.id, sizeof(offer.id), &id, &why) != COLL_WIRE_OK ||
        id.grow_of != grow_fingerprint(comm)) {
        coll_set_error(comm, "collCommGrow: the id broadcast by rank 0 is malformed%s%s",
                       *why ? ": " : "", why);
        return collRemoteError;
    }
    if (comm->rank == 0)
        comm->grow_id_state = 2;
    collConfig_t cfg;
    coll_config_inherit(comm, config, &cfg);
    COLL_INFO(COLL_SUBSYS_INIT, "grow: rank %d of %d -> rank %d of %d%s", comm->rank,
              comm->nranks, comm->rank, nranks,
              offer.nranks != nranks ? " (rank 0 passed another nRanks: the root refuses)" : "");
    collResult_t res = coll_comm_create(newcomm, nranks, &id, comm->rank, &cfg);
    if (res != collSuccess && res != collInProgress)
        coll_set_error(comm, "collCommGrow: %s", collGetLastError(NULL));
    return res;
}

COLL_API collResult_t collCommGrow(collComm_t comm, int nRanks, const collUniqueId *uniqueId,
                                   int rank, collComm_t *newcomm, collConfig_t *config)
{
    if (newcomm == NULL) {
        coll_set_error(comm, "collCommGrow: newcomm is NULL");
        return collInvalidArgument;
    }
    COLL_CHECK(coll_config_check("collCommGrow", config));
    if (nRanks < 1 || nRanks > COLL_WIRE_MAX_NRANKS) {
        coll_set_error(comm, "collCommGrow: nRanks %d is outside [1, %d]", nRanks,
                       COLL_WIRE_MAX_NRANKS);
        return collInvalidArgument;
    }
    if (comm == NULL) {
        /* A new process. */
        if (uniqueId == NULL) {
            coll_set_error(NULL, "collCommGrow: uniqueId is NULL with comm NULL (a new rank "
                           "passes the id made by collCommGetUniqueId)");
            return collInvalidArgument;
        }
        struct coll_id id;
        COLL_CHECK(grow_parse_id(NULL, uniqueId, &id));
        int from = (int)id.grow_from;
        if (nRanks <= from) {
            coll_set_error(NULL, "collCommGrow: nRanks %d does not exceed %d, the size of the "
                           "communicator uniqueId grows", nRanks, from);
            return collInvalidArgument;
        }
        if (rank < from || rank >= nRanks) {
            coll_set_error(NULL, "collCommGrow: rank %d of a new process is outside [%d, %d): "
                           "the communicator's ranks keep 0..%d", rank, from, nRanks, from - 1);
            return collInvalidArgument;
        }
        COLL_INFO(COLL_SUBSYS_INIT, "grow: new rank %d of %d", rank, nRanks);
        return coll_comm_create(newcomm, nRanks, &id, rank, config);
    }
    if (rank != -1) {
        coll_set_error(comm, "collCommGrow: rank %d on rank %d of the communicator: its ranks "
                       "keep their rank and pass -1", rank, comm->rank);
        return collInvalidArgument;
    }
    if (nRanks <= comm->nranks) {
        coll_set_error(comm, "collCommGrow: nRanks %d does not exceed the communicator's %d "
                       "ranks", nRanks, comm->nranks);
        return collInvalidArgument;
    }
    COLL_CHECK(coll_comm_check_usable(comm, "collCommGrow"));
    /* Counted busy, so that collCommAbort from another thread waits for it. */
    atomic_fetch_add(&comm->busy, 1);
    collResult_t res = grow_existing(comm, nRanks, uniqueId, newcomm, config);
    atomic_fetch_sub(&comm->busy, 1);
    return res;
}
