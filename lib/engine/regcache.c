/* The registration cache (see regcache.h for what is cached and why), and
 * collCommRegister / collCommDeregister.
 *
 * Entries sit on one list, most recently used first; a lookup walks it (the
 * bounds keep it short: 64 entries by default) and moves the entry it finds to
 * the front.  Eviction takes from the back, skipping the entries of the call in
 * progress.
 *
 *   lookup(tp, buf, len)
 *     collMemFree ran since last time?  drop entries of regions that are gone
 *     region = the user registration holding [buf, buf+len), else the
 *              collMemAlloc region holding it, else none -> NULL
 *     entry (tp, ctx, region) on the list?  front, return its handle
 *     else tp->reg(whole region) -> new entry at the front, evict past bounds
 */
#include "regcache.h"

#include <string.h>

#include "inflight.h"
#include "internal.h"
#include "mem.h"

enum reg_kind { REG_MEM, REG_USER };

struct reg_entry {
    struct reg_entry *prev, *next;
    const struct coll_transport *tp;
    void *ctx;
    enum reg_kind kind;
    uint64_t id;     /* the collMemAlloc region's or the user registration's */
    char *base;
    size_t len;
    void *mh;        /* NULL: registering failed, the call goes unregistered */
    uint64_t op;     /* the last call that used it */
};

/* One collCommRegister range; its address is the user's handle. */
struct reg_user {
    struct reg_user *next;
    char *base;
    size_t len;
    uint64_t id;
};

struct coll_regcache {
    struct reg_entry *head, *tail;
    size_t max_entries, max_bytes;
    uint64_t mem_frees;          /* coll_mem_frees() when last looked at */
    struct reg_user *users;
    uint64_t next_user_id;
    struct coll_regcache_stats st;
    uint64_t spare_from;         /* coll_regcache_spare_from */
};

collResult_t coll_regcache_new(size_t max_entries, size_t max_bytes,
                               struct coll_regcache **rc_p)
{
    struct coll_regcache *rc;
    COLL_CHECK(coll_calloc(&rc, 1));
    rc->max_entries = max_entries;
    rc->max_bytes = max_bytes;
    rc->mem_frees = coll_mem_frees();
    rc->next_user_id = 1;
    *rc_p = rc;
    return collSuccess;
}

static void reg_unlink(struct coll_regcache *rc, struct reg_entry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        rc->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        rc->tail = e->prev;
    e->prev = e->next = NULL;
}

static void reg_push_front(struct coll_regcache *rc, struct reg_entry *e)
{
    e->prev = NULL;
    e->next = rc->head;
    if (rc->head)
        rc->head->prev = e;
    rc->head = e;
    if (rc->tail == NULL)
        rc->tail = e;
}

/* Deregisters and frees e. */
static void reg_drop(struct coll_regcache *rc, struct reg_entry *e)
{
    reg_unlink(rc, e);
    if (e->mh != NULL) {
        e->tp->dereg(e->ctx, e->mh);
        rc->st.deregs++;
        rc->st.bytes -= e->len;
    }
    rc->st.entries--;
    free(e);
}

void coll_regcache_free(struct coll_regcache *rc)
{
    if (rc == NULL)
        return;
    while (rc->head)
        reg_drop(rc, rc->head);
    while (rc->users) {
        struct reg_user *u = rc->users;
        rc->users = u->next;
        free(u);
    }
    free(rc);
}

/* Whether e is used by op or by a call still in flight beside it. */
static bool reg_spared(const struct coll_regcache *rc, const struct reg_entry *e, uint64_t op)
{
    return e->op == op || (rc->spare_from != 0 && e->op >= rc->spare_from);
}

void coll_regcache_spare_from(struct coll_regcache *rc, uint64_t op)
{
    rc->spare_from = op;
}

/* Drops the entries of collMemAlloc regions that were freed, except those the
 * call in progress uses (it cannot have freed them: another thread did, under
 * it); those go at the next look. */
static void reg_sweep_freed(struct coll_regcache *rc, uint64_t op)
{
    uint64_t frees = coll_mem_frees();
    if (frees == rc->mem_frees)
        return;
    bool kept = false;
    for (struct reg_entry *e = rc->head, *next; e != NULL; e = next) {
        next = e->next;
        if (e->kind != REG_MEM || coll_mem_live(e->id))
            continue;
        if (reg_spared(rc, e, op)) {
            kept = true;
            continue;
        }
        reg_drop(rc, e);
        rc->st.invalidations++;
    }
    if (!kept)
        rc->mem_frees = frees;
}

/* Evicts from the back past the bounds, sparing the entries of op. */
static void reg_evict(struct coll_regcache *rc, uint64_t op)
{
    for (struct reg_entry *e = rc->tail, *prev; e != NULL; e = prev) {
        prev = e->prev;
        if (rc->st.entries <= rc->max_entries && rc->st.bytes <= rc->max_bytes)
            return;
        if (reg_spared(rc, e, op))
            continue;
        reg_drop(rc, e);
        rc->st.evictions++;
    }
}

void *coll_regcache_get(struct coll_regcache *rc, const struct coll_transport *tp, void *ctx,
                        const void *buf, size_t len, uint64_t op)
{
    if (rc == NULL || tp->reg == NULL || !(tp->caps & COLL_TP_CAP_NEEDS_REG) || len == 0)
        return NULL;
    reg_sweep_freed(rc, op);
    enum reg_kind kind = REG_USER;
    uint64_t id = 0;
    char *base = NULL;
    size_t size = 0;
    const char *p = buf;
    for (const struct reg_user *u = rc->users; u != NULL; u = u->next)
        if (p >= u->base && len <= u->len && (size_t)(p - u->base) <= u->len - len) {
            base = u->base;
            size = u->len;
            id = u->id;
            break;
        }
    if (base == NULL) {
        kind = REG_MEM;
        if (!coll_mem_region(buf, len, &base, &size, &id)) {
            rc->st.unknown++;
            return NULL;
        }
    }
    for (struct reg_entry *e = rc->head; e != NULL; e = e->next)
        if (e->tp == tp && e->ctx == ctx && e->kind == kind && e->id == id) {
            reg_unlink(rc, e);
            reg_push_front(rc, e);
            e->op = op;
            rc->st.hits++;
            return e->mh;
        }
    rc->st.misses++;
    if (size > rc->max_bytes || rc->max_entries == 0)
        return NULL; /* would evict everything else and still not fit */
    struct reg_entry *e;
    if (coll_calloc(&e, 1) != collSuccess)
        return NULL;
    *e = (struct reg_entry){.tp = tp, .ctx = ctx, .kind = kind, .id = id, .base = base,
                            .len = size, .op = op};
    if (tp->reg(ctx, base, size, COLL_MEM_HOST, &e->mh) != collSuccess)
        e->mh = NULL;
    if (e->mh != NULL) {
        rc->st.regs++;
        rc->st.bytes += size;
    }
    rc->st.entries++;
    reg_push_front(rc, e);
    reg_evict(rc, op);
    return e->mh;
}

collResult_t coll_regcache_user_add(struct coll_regcache *rc, void *buf, size_t len,
                                    void **handle_p)
{
    struct reg_user *u;
    COLL_CHECK(coll_calloc(&u, 1));
    *u = (struct reg_user){.next = rc->users, .base = buf, .len = len,
                           .id = rc->next_user_id++};
    rc->users = u;
    *handle_p = u;
    return collSuccess;
}

collResult_t coll_regcache_user_remove(struct coll_regcache *rc, void *handle)
{
    /* Found by address among this cache's own: a stranger's pointer is never
     * read through. */
    struct reg_user **pp = &rc->users;
    while (*pp != NULL && (void *)*pp != handle)
        pp = &(*pp)->next;
    struct reg_user *u = *pp;
    if (u == NULL)
        return collInvalidArgument;
    *pp = u->next;
    for (struct reg_entry *e = rc->head, *next; e != NULL; e = next) {
        next = e->next;
        if (e->kind == REG_USER && e->id == u->id) {
            reg_drop(rc, e);
            rc->st.invalidations++;
        }
    }
    free(u);
    return collSuccess;
}

void coll_regcache_stats(const struct coll_regcache *rc, struct coll_regcache_stats *s)
{
    *s = rc->st;
}

collResult_t coll_comm_regcache(struct coll_comm *comm, struct coll_regcache **rc_p)
{
    if (comm->regcache == NULL) {
        int64_t n = coll_param_int(COLL_PARAM_REG_CACHE_ENTRIES);
        int64_t b = coll_param_int(COLL_PARAM_REG_CACHE_BYTES);
        COLL_CHECK(coll_regcache_new(n > 0 ? (size_t)n : 0, b > 0 ? (size_t)b : 0,
                                     &comm->regcache));
    }
    *rc_p = comm->regcache;
    return collSuccess;
}

void *coll_reg_handle(struct coll_comm *comm, const struct coll_conn *c, const void *buf,
                      size_t len)
{
    const struct coll_transport *tp = c->tp;
    if (tp->reg == NULL || buf == NULL || len == 0)
        return NULL;
    void *ctx = NULL;
    for (int i = 0; i < comm->ntps; i++)
        if (comm->tps[i].tp == tp)
            ctx = comm->tps[i].ctx;
    struct coll_regcache *rc;
    if (ctx == NULL || coll_comm_regcache(comm, &rc) != collSuccess)
        return NULL;
    coll_regcache_spare_from(rc, coll_inflight_oldest_seq(comm));
    return coll_regcache_get(rc, tp, ctx, buf, len, comm->seq);
}
