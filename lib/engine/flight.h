/* The flight recorder: each communicator keeps its last COLL_FLIGHT_RECORDS
 * operations (name, sequence number, size, algorithm, state, start time and
 * the bytes moved with each peer), so that a timeout or a failure can say what
 * every recent call was doing and which peer stopped.  It is printed at WARN
 * once, when the communicator is poisoned, aborted or revoked, and with
 * COLL_FLIGHT_DIR set also written to a file there, which `collinfo --flight`
 * reads with the other ranks' files (lib/engine/flight.c).
 *
 * The communicator's owner thread is the only writer and takes no lock; a
 * reader in another thread (collCommAbort) sees whole records through a
 * per-record sequence lock, and the byte counters through relaxed atomics. */
#ifndef COLL_FLIGHT_H
#define COLL_FLIGHT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "collective.h"

#define COLL_FLIGHT_RECORDS 32
/* Peers followed one by one per record; the bytes of any further peer are
 * added to one "other peers" slot (an all-to-all of many ranks, the naive root). */
#define COLL_FLIGHT_PEERS 16
/* The format of the files of COLL_FLIGHT_DIR ("COLL-FLIGHT 1" on their first
 * line; tools/flight_report.c reads it). */
#define COLL_FLIGHT_FILE_VERSION 1

struct coll_comm;
struct coll_conn;
struct coll_flight;

enum coll_flight_state { COLL_FLIGHT_ISSUED, COLL_FLIGHT_RUNNING, COLL_FLIGHT_DONE,
                         COLL_FLIGHT_FAILED };

/* What a record says of its call; name and algo are static strings. */
struct coll_flight_desc {
    const char *name;  /* "allreduce", "collSend", "group" */
    const char *algo;  /* "ring", "p2p"; may be set later (coll_flight_algo) */
    size_t count;      /* elements */
    int dtype;         /* collDataType_t, -1 when the call has several */
    int op;            /* collRedOp_t, -1 when none */
    int root;          /* -1 when none */
    int peer;          /* of a single send or receive, -1 when none */
};

/* Allocates comm's recorder (comm->flight), once, at init. */
collResult_t coll_flight_init(struct coll_comm *comm);
void coll_flight_fini(struct coll_comm *comm);

/* Opens the record of the call comm->seq (state issued); the owner thread only. */
void coll_flight_begin(struct coll_comm *comm, const struct coll_flight_desc *d);
/* Names the algorithm of the open record once it is known. */
void coll_flight_algo(struct coll_comm *comm, const char *algo);
/* Closes the open record (done, or failed with res).  A failure that poisoned
 * the comm prints the recorder (coll_flight_dump), once per comm. */
void coll_flight_end(struct coll_comm *comm, collResult_t res);

/* How the open record's call cut its buffer into pieces (collCommGetLastCallInfo):
 * the largest piece's bytes and their number, as the schedule that moves them
 * says (coll_sched.cut_*, told by the engine).  The first one told stands: an
 * algorithm whose parts cut it each their own way (hier) tells 0, 0 first. */
void coll_flight_cut(struct coll_comm *comm, size_t piece_bytes, size_t pieces);
/* The open record's call moved its bytes through memory every peer of the
 * comm shares (ll, direct), not over connections: every peer counts, with its
 * transport. */
void coll_flight_shared(struct coll_comm *comm);

/* A request of n bytes to or from c's peer was posted (the progress engine). */
void coll_flight_posted(struct coll_comm *comm, const struct coll_conn *c, size_t n);
/* n bytes to or from c's peer completed. */
void coll_flight_moved(struct coll_comm *comm, const struct coll_conn *c, size_t n);

/* For a wait that found nothing to do at time now: ms since the open record
 * last moved a byte (since it began when none moved), -1 when none is open. */
int64_t coll_flight_idle(struct coll_comm *comm, int64_t now);

/* Bytes posted and completed with peer by the open record, for messages;
 * false when the record does not follow that peer. */
bool coll_flight_peer_bytes(const struct coll_comm *comm, int peer, uint64_t *sent_p,
                            uint64_t *sent_posted_p, uint64_t *recvd_p,
                            uint64_t *recvd_posted_p);

/* The owner's state of one call's open record: several calls in flight on a
 * progress thread (inflight.h) each keep their own, loaded while worked on. */
struct coll_flight_call {
    void *cur;
    int hint;
    uint64_t moves_seen;
    int64_t last_move_ns;
};
/* Saves comm's open-record state into *save (when not NULL), then loads *load
 * (NULL: no record open). */
void coll_flight_swap(struct coll_comm *comm, struct coll_flight_call *save,
                      const struct coll_flight_call *load);

/* Prints the records at WARN, oldest first, one line each, with why (the
 * failed call's result name, "collCommAbort" or "collCommRevoke"); only the
 * first call per comm prints (a failure is reported once).  With
 * COLL_FLIGHT_DIR set it also writes them to
 * DIR/flight-<comm hash>-<rank>-of-<nranks>-<pid>.txt, with the reason that why
 * gives (aborted, revoked, else failed); a directory that cannot be written
 * costs one WARN.  Safe from any thread while the owner runs a call. */
void coll_flight_dump(struct coll_comm *comm, const char *why);

/* A copy of one record, taken by another thread (lib/engine/status.c). */
struct coll_flight_copy {
    const char *name, *algo;       /* static strings, NULL when not set */
    uint64_t seq, count;
    int dtype, op, root, peer, state, result;
    int64_t start_ns, end_ns;      /* coll_coarse_ns clock; end 0 while it runs */
    uint32_t tp_mask;              /* transports posted on, by index in their table */
    bool shared;                   /* coll_flight_shared */
    bool cut_set;                  /* coll_flight_cut was told; then: */
    uint64_t cut_bytes, cut_pieces;
    int npeers;                    /* entries of peers[] before the "other peers" one */
    struct coll_flight_copy_peer {
        int peer;                  /* -1: the other peers together (peers[npeers]) */
        uint64_t sent, sent_posted, recvd, recvd_posted;
    } peers[COLL_FLIGHT_PEERS + 1];
};
/* Records opened so far: the newest is number count - 1. */
uint64_t coll_flight_count(const struct coll_comm *comm);
/* Copies record i (one of the last COLL_FLIGHT_RECORDS - 1: the oldest slot may
 * be being reused) whole; false when the owner rewrote it meanwhile (try
 * again) or i is no longer kept.  Any thread. */
bool coll_flight_copy(const struct coll_comm *comm, uint64_t i, struct coll_flight_copy *out);

#endif
