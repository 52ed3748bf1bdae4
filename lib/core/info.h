/* What tools/collinfo and COLL_TOPO_DUMP_FILE report of a communicator (info.c):
 * the transport the library takes to each peer, and this rank's topology
 * summary.  Internal: tools link the static archive, which has these symbols;
 * the public API has no counterpart (docs/topology.md). */
#ifndef COLL_INFO_H
#define COLL_INFO_H

#include <stdint.h>
#include <stdio.h>

#include "topo.h"

struct coll_comm;

/* Transports as one byte per peer, for exchanging a rank's row of the table. */
#define COLL_INFO_TP_SELF 0
#define COLL_INFO_TP_NONE 255 /* no transport reaches the peer */

/* The transport this rank of comm takes to peer (the one connected, else the
 * one the first connection will take), as a code for coll_info_tp_name. */
uint8_t coll_info_tp_code(const struct coll_comm *comm, int peer);
/* "self", "shm", "verbs", "tcp", "cuda_ipc", "none", or "?" for an unknown code. */
const char *coll_info_tp_name(uint8_t code);
/* Fills r from t for this rank, with the interface of its bootstrap address. */
void coll_info_rank(const struct coll_comm *comm, const struct coll_topo *t,
                    struct coll_topo_rank *r);
/* Writes one rank's document: {"rank", "nranks", "summary", "topology", "peers"}.
 * comm NULL: a process with no communicator (rank 0 of 1, no peers). */
void coll_info_write_json(FILE *f, const struct coll_topo *t, const struct coll_topo_rank *r,
                          const struct coll_comm *comm);
/* With COLL_TOPO_DUMP_FILE set, writes this rank's document there (%r: the rank,
 * %h: the host name, %p: the pid, %%: a %).  A failure is logged at WARN and
 * otherwise ignored: the dump is a diagnostic and never fails init. */
void coll_info_dump(const struct coll_comm *comm);

#endif
