/* The communicator's registration cache: which user buffers are registered with
 * which transport, so that a transport that moves bytes in place from and into
 * registered memory (COLL_TP_CAP_NEEDS_REG: verbs, by RDMA) is handed a handle
 * (mh) with each large send or receive instead of staging the bytes through
 * its own registered slots.
 *
 * What is cached: only memory whose lifetime the library sees.
 *   - collMemAlloc regions (lib/engine/mem.c).  An entry is keyed by the region's id,
 *     which is never reused, so memory freed and allocated again at the same
 *     address never matches an old entry; collMemFree bumps a counter that makes
 *     each cache drop (deregister) the entries of freed regions at its next use.
 *   - buffers the user registered with collCommRegister, until
 *     collCommDeregister (which deregisters their entries at once).  As with
 *     ncclCommRegister, the buffer must stay allocated until then.
 * Any other buffer gets no handle (NULL): the transport stages it as before.
 * Caching ordinary malloc memory by address is not safe: glibc's free() returns
 * large chunks with an internal munmap that an interposed munmap never sees, so
 * a later malloc may map new pages at the same address while a registration
 * still pins the old ones, and an RDMA read would send their stale bytes.
 *
 * A registration covers the whole region (one entry serves every offset in it)
 * and is made with the transport's context on first use.  Entries form an LRU
 * list bounded by COLL_REG_CACHE_ENTRIES and COLL_REG_CACHE_BYTES; an entry used
 * by the call in progress is never evicted (its requests may be pending), so
 * the bounds may be passed within one call and are restored at the next.  A
 * registration that fails is remembered as an entry without a handle, so the
 * call does not retry it per message.  Everything left is deregistered when the
 * communicator is destroyed, before its transports are closed.
 *
 * One thread at a time per communicator, like every other part of it. */
#ifndef COLL_REGCACHE_H
#define COLL_REGCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transport.h"

struct coll_comm;
struct coll_regcache;

struct coll_regcache_stats {
    uint64_t hits, misses;  /* lookups of known memory that found / made an entry */
    uint64_t unknown;       /* lookups of memory the library does not know: no handle */
    uint64_t regs, deregs;  /* transport registrations made and released */
    uint64_t evictions;     /* entries dropped for the bounds */
    uint64_t invalidations; /* entries dropped because their memory went away */
    size_t entries, bytes;  /* entries held now, and the bytes they register */
};

/* An empty cache of at most max_entries entries registering max_bytes at most. */
collResult_t coll_regcache_new(size_t max_entries, size_t max_bytes,
                               struct coll_regcache **rc_p);
/* Deregisters every entry and frees the cache and its user registrations; NULL
 * is a no-op. */
void coll_regcache_free(struct coll_regcache *rc);
/* The handle of tp (context ctx) for [buf, buf+len), registering its region on
 * first use; NULL when tp needs no registration, the memory is not known (see
 * above) or registering it failed.  op identifies the call in progress (the
 * comm's seq): entries it used are not evicted until another op. */
void *coll_regcache_get(struct coll_regcache *rc, const struct coll_transport *tp, void *ctx,
                        const void *buf, size_t len, uint64_t op);
/* Spares, besides op's, the entries of every call from op on (0: none): the
 * calls in flight at once on a progress thread (inflight.h). */
void coll_regcache_spare_from(struct coll_regcache *rc, uint64_t op);
/* collCommRegister / collCommDeregister on the cache: *handle_p names the range
 * for remove.  remove returns collInvalidArgument for a handle it did not give. */
collResult_t coll_regcache_user_add(struct coll_regcache *rc, void *buf, size_t len,
                                    void **handle_p);
collResult_t coll_regcache_user_remove(struct coll_regcache *rc, void *handle);
void coll_regcache_stats(const struct coll_regcache *rc, struct coll_regcache_stats *s);

/* For the algorithms: the handle for [buf, buf+len) on connection c, from comm's
 * cache (made on first use); NULL when there is none. */
void *coll_reg_handle(struct coll_comm *comm, const struct coll_conn *c, const void *buf,
                      size_t len);
/* The comm's cache, made on first use with the bounds of the parameters. */
collResult_t coll_comm_regcache(struct coll_comm *comm, struct coll_regcache **rc_p);

#endif
