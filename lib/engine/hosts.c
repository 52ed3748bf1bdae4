/* Which ranks share a host (struct coll_hosts in internal.h).
 *
 * A host is a set of ranks with the same host_hash (host name and boot id, and
 * the network namespace: the ranks that can share memory).  Hosts are numbered
 * in the order of their lowest rank, and a host's ranks by rank.  `order` lists
 * the ranks host by host: the flat ring follows it, so that a ring crosses the
 * network once per host whatever the numbering (ranks numbered round-robin
 * across hosts would otherwise cross it at every hop), and the hierarchical
 * algorithms (algorithms/hier.c) take their groups from it.  Every rank holds
 * every rank's record, so every rank computes the same tables. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

void coll_hosts_fini(struct coll_comm *comm)
{
    free(comm->hosts.host);
    memset(&comm->hosts, 0, sizeof(comm->hosts));
}

collResult_t coll_hosts_init(struct coll_comm *comm)
{
    struct coll_hosts *h = &comm->hosts;
    int n = comm->nranks;
    int *mem;
    /* host, index, pos and order: n each; start: n + 1 (at most n hosts);
     * hash_of: the first rank of each host, to compare hashes with. */
    COLL_CHECK(coll_calloc(&mem, (size_t)6 * n + 1));
    h->host = mem;
    h->index = mem + n;
    h->pos = mem + 2 * n;
    h->order = mem + 3 * n;
    h->start = mem + 4 * n;
    int *first = mem + 5 * n + 1; /* host -> its lowest rank */
    int *count = h->pos;          /* host -> ranks so far; pos is filled last */
    h->n = 0;
    h->min_cores = comm->peers[0].info.cores;
    for (int k = 0; k < n; k++) {
        int c = comm->peers[k].info.cores;
        h->min_cores = c < h->min_cores ? c : h->min_cores;
        uint64_t hash = comm->peers[k].info.host_hash;
        int j = 0;
        while (j < h->n && comm->peers[first[j]].info.host_hash != hash)
            j++;
        if (j == h->n) {
            first[h->n] = k;
            count[h->n++] = 0;
        }
        h->host[k] = j;
        h->index[k] = count[j]++;
    }
    if (h->min_cores < 1)
        h->min_cores = 1;
    h->start[0] = 0;
    h->min_local = n;
    h->max_local = 0;
    for (int j = 0; j < h->n; j++) {
        h->start[j + 1] = h->start[j] + count[j];
        h->min_local = count[j] < h->min_local ? count[j] : h->min_local;
        h->max_local = count[j] > h->max_local ? count[j] : h->max_local;
    }
    for (int k = 0; k < n; k++)
        h->order[h->start[h->host[k]] + h->index[k]] = k;
    for (int p = 0; p < n; p++)
        h->pos[h->order[p]] = p;
    return collSuccess;
}
