/* Bootstrap: unique id, rendezvous through the root, out-of-band allgather/barrier. */
#ifndef COLL_BOOTSTRAP_H
#define COLL_BOOTSTRAP_H

#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>

#include "collective.h"
#include "socket.h"
#include "transport.h"

#define COLL_ID_MAGIC 0x4c4c4f43u /* "COLL" little-endian */
#define COLL_ID_FORMAT 1u

/* The layout of collUniqueId.internal.  Tests flip the secret to check refusal. */
struct coll_id {
    uint32_t magic;
    uint32_t format;
    uint8_t secret[COLL_SECRET_BYTES];
    uint32_t root_is_rank0; /* 1: no listener was started; rank 0 serves the root */
    uint32_t addrlen;
    union coll_sockaddr addr; /* the root's address */
    /* An id from collCommGetUniqueId, for collCommGrow: the size of the
     * communicator it grows (its ranks keep 0..grow_from-1), and a fingerprint
     * of that communicator (its secret hashed), so that its ranks refuse the id
     * of another one.  0 and 0 in an id from collGetUniqueId. */
    uint32_t grow_from;
    uint64_t grow_of;
};
_Static_assert(sizeof(struct coll_id) <= COLL_UNIQUE_ID_BYTES, "id must fit collUniqueId");

struct coll_comm;

collResult_t coll_bootstrap_get_unique_id(struct coll_id *id);
/* An id whose root gives up root_timeout_ms after the first registration
 * (coll_bootstrap_get_unique_id: COLL_TIMEOUT_MS). */
collResult_t coll_bootstrap_new_id(struct coll_id *id, int64_t root_timeout_ms);
/* Id from COLL_COMM_ID (or MASTER_ADDR:MASTER_PORT) and COLL_SECRET. */
collResult_t coll_bootstrap_id_from_addr(const char *hostport, const char *secret_hex,
                                         struct coll_id *id);
/* Serves the root of id, built from the address lfd listens on (bound and
 * listening, as coll_socket_listen leaves it), in a thread of this process as
 * coll_bootstrap_new_id does: for a root whose address had to be known, and
 * published, before it served (collCommInitFromEnv under torchrun publishes a
 * port the kernel chose through torchrun's store).  Takes lfd, closed on
 * failure; on success id->root_is_rank0 is 0 (rank 0 only registers with it),
 * and the root gives up timeout_ms after the first registration. */
collResult_t coll_bootstrap_serve_root(int lfd, struct coll_id *id, int64_t timeout_ms);
/* Starts the root when this is rank 0 of an id built from an address, and this
 * rank's out-of-band listener; fills mine->boot_addr (whose interface the data
 * transports also use). */
collResult_t coll_bootstrap_prepare(struct coll_comm *comm, const struct coll_id *id,
                                    struct coll_rank_info *mine);
/* Joins the communicator: registers with the root, receives every rank's info
 * into comm->peers, and links the bootstrap ring.  comm->rank/nranks set. */
collResult_t coll_bootstrap_init(struct coll_comm *comm, const struct coll_id *id,
                                 const struct coll_rank_info *mine);
/* Out-of-band allgather of `size` bytes per rank (data holds nranks slots; this
 * rank's slot is filled in). */
collResult_t coll_bootstrap_allgather(struct coll_comm *comm, void *data, size_t size);
collResult_t coll_bootstrap_barrier(struct coll_comm *comm);
void coll_bootstrap_fini(struct coll_comm *comm);

/*
 * Failure notices.  After init the out-of-band ring carries nothing but these: a
 * rank whose communicator is poisoned writes one byte to both ring neighbours
 * (coll_bootstrap_notify_failure), and a rank that finds one while it waits
 * poisons its own, which passes the notice on.  So a failure reaches every rank
 * even where no data connection leads from the failed rank, as when a peer is
 * waiting for a connection the failed rank will never make (connections are
 * made on first use).  A clean destroy writes nothing, and a neighbour's EOF
 * alone is no failure: a rank may leave while its last bytes are still read.
 */
struct pollfd;
void coll_bootstrap_notify_failure(struct coll_comm *comm);
/* Appends to pfds the ring descriptors still worth watching; returns how many
 * (at most 2). */
int coll_bootstrap_notice_fds(struct coll_comm *comm, struct pollfd *pfds);
/* After poll(): a notice among pfds (from coll_bootstrap_notice_fds) poisons comm
 * and returns collRemoteError, described for collGetLastError. */
collResult_t coll_bootstrap_notice_check(struct coll_comm *comm, const struct pollfd *pfds,
                                         int n);
/* A bootstrap neighbour whose ring connection was seen closed (by
 * coll_bootstrap_notice_check), or -1. */
int coll_bootstrap_gone_neighbour(const struct coll_comm *comm);

#endif
