/* Unit test: the registration cache (lib/engine/regcache.c) against a transport that
 * only counts its registrations: lookups of collMemAlloc and user-registered
 * memory, none for other memory, LRU eviction by entries and by bytes sparing
 * the call in progress, invalidation by collMemFree (memory allocated again at
 * the same address is registered anew, never served the old handle) and by
 * user removal, failures remembered, everything released at the end. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "regcache.h"

#define FAKE_MAX 64

/* The fake transport's registrations: live ones have len != 0. */
static struct fake_reg {
    char *buf;
    size_t len;
} fake[FAKE_MAX];
static int fake_regs, fake_deregs, fake_live;
static bool fake_fail;

static collResult_t fake_reg(void *ctx, void *buf, size_t len, enum coll_memtype mt,
                             void **mh_p)
{
    (void)ctx;
    if (fake_fail || mt != COLL_MEM_HOST)
        return collSystemError;
    for (int i = 0; i < FAKE_MAX; i++)
        if (fake[i].len == 0) {
            fake[i] = (struct fake_reg){buf, len};
            fake_regs++;
            fake_live++;
            *mh_p = &fake[i];
            return collSuccess;
        }
    return collSystemError;
}

static void fake_dereg(void *ctx, void *mh)
{
    (void)ctx;
    struct fake_reg *r = mh;
    REQUIRE(r >= fake && r < fake + FAKE_MAX && r->len != 0);
    r->len = 0;
    fake_deregs++;
    fake_live--;
}

static const struct coll_transport fake_tp = {
    .name = "fake", .caps = COLL_TP_CAP_HOST_MEM | COLL_TP_CAP_NEEDS_REG,
    .reg = fake_reg, .dereg = fake_dereg};
static const struct coll_transport plain_tp = {.name = "plain", .caps = COLL_TP_CAP_HOST_MEM};
static int ctx_a, ctx_b; /* two transport contexts: their addresses tell them apart */

static void test_lookup(void)
{
    struct coll_regcache *rc;
    REQUIRE(coll_regcache_new(8, (size_t)1 << 30, &rc) == collSuccess);
    char *m;
    REQUIRE(collMemAlloc((void **)&m, 3 * 4096) == collSuccess);
    struct fake_reg *h = coll_regcache_get(rc, &fake_tp, &ctx_a, m + 100, 5000, 1);
    CHECK(h != NULL && fake_regs == 1);
    /* The whole region is registered: other offsets hit the same entry. */
    CHECK(h != NULL && h->buf == m && h->len == 3 * 4096);
    CHECK(coll_regcache_get(rc, &fake_tp, &ctx_a, m, 3 * 4096, 1) == h);
    CHECK(coll_regcache_get(rc, &fake_tp, &ctx_a, m + 3 * 4096 - 1, 1, 2) == h);
    CHECK(fake_regs == 1);
    /* Past the region's end: not inside one region, no handle. */
    CHECK(coll_regcache_get(rc, &fake_tp, &ctx_a, m + 4096, 3 * 4096, 2) == NULL);
    /* Another context of the transport registers on its own. */
    struct fake_reg *hb = coll_regcache_get(rc, &fake_tp, &ctx_b, m, 10, 2);
    CHECK(hb != NULL && hb != h && fake_regs == 2);
    /* A transport that needs no registration never gets a handle. */
    CHECK(coll_regcache_get(rc, &plain_tp, &ctx_a, m, 10, 2) == NULL);
    /* Ordinary memory is not known: no handle, nothing registered. */
    char *plain = malloc(1 << 20);
    REQUIRE(plain != NULL);
    CHECK(coll_regcache_get(rc, &fake_tp, &ctx_a, plain, 1 << 20, 2) == NULL);
    CHECK(coll_regcache_get(rc, &fake_tp, &ctx_a, m, 0, 2) == NULL);
    struct coll_regcache_stats st;
    coll_regcache_stats(rc, &st);
    CHECK(st.hits == 2 && st.misses == 2 && st.unknown == 2 && st.entries == 2);
    CHECK(st.bytes == 2 * 3 * 4096);
    free(plain);
    coll_regcache_free(rc);
    CHECK(fake_live == 0 && fake_deregs == 2);
    CHECK(collMemFree(m) == collSuccess);
}

static void test_lru(void)
{
    fake_regs = fake_deregs = 0;
    struct coll_regcache *rc;
    REQUIRE(coll_regcache_new(3, (size_t)1 << 30, &rc) == collSuccess);
    char *m[5];
    for (int i = 0; i < 5; i++)
        REQUIRE(collMemAlloc((void **)&m[i], 4096) == collSuccess);
    void *h[5];
    for (int i = 0; i < 3; i++)
        h[i] = coll_regcache_get(rc, &fake_tp, &ctx_a, m[i], 64, (uint64_t)i + 1);
    /* m[0] used again: m[1] is now the least recently used. */
    CHECK(coll_regcache_get(rc, &fake_tp, &ctx_a, m[0], 64, 4) == h[0]);
    h[3] = coll_regcache_get(rc, &fake_tp, &ctx_a, m[3], 64, 5);
    CHECK(h[3] != NULL && fake_regs == 4 && fake_deregs == 1);
    CHECK(((struct fake_reg *)h[1])->len == 0); /* m[1] went */
    CHECK(coll_regcache_get(rc, &fake_tp, &ctx_a, m[2], 64, 6) == h[2]);
    CHECK(coll_regcache_get(rc, &fake_tp, &ctx_a, m[0], 64, 6) == h[0]);
    /* One call (op 7) using more than the bound: none of its entries goes while
     * it runs; the next call trims back to the bound. */
    void *a = coll_regcache_get(rc, &fake_tp, &ctx_a, m[1], 64, 7);
    void *b = coll_regcache_get(rc, &fake_tp, &ctx_a, m[4], 64, 7);
    void *c = coll_regcache_get(rc, &fake_tp, &ctx_a, m[3], 64, 7);
    void *d = coll_regcache_get(rc, &fake_tp, &ctx_a, m[2], 64, 7);
    struct coll_regcache_stats st;
    coll_regcache_stats(rc, &st);
    CHECK(a != NULL && b != NULL && c != NULL && d != NULL);
    CHECK(st.entries == 4 && fake_live == 4); /* m[0] (op 6) went, op 7's stay */
    CHECK(coll_regcache_get(rc, &fake_tp, &ctx_a, m[1], 64, 7) == a);
    CHECK(coll_regcache_get(rc, &fake_tp, &ctx_a, m[4], 64, 8) == b);
    coll_regcache_stats(rc, &st);
    CHECK(st.entries == 4); /* hits add nothing to trim */
    void *e = coll_regcache_get(rc, &fake_tp, &ctx_a, m[0], 64, 8);
    coll_regcache_stats(rc, &st);
    CHECK(e != NULL && st.entries == 3 && fake_live == 3);
    coll_regcache_free(rc);
    CHECK(fake_live == 0);

    /* The byte bound: two regions of 8 KiB in a 12 KiB cache. */
    REQUIRE(coll_regcache_new(16, 3 * 4096, &rc) == collSuccess);
    char *big[2];
    for (int i = 0; i < 2; i++)
        REQUIRE(collMemAlloc((void **)&big[i], 2 * 4096) == collSuccess);
    void *g0 = coll_regcache_get(rc, &fake_tp, &ctx_a, big[0], 64, 1);
    void *g1 = coll_regcache_get(rc, &fake_tp, &ctx_a, big[1], 64, 2);
    coll_regcache_stats(rc, &st);
    CHECK(g0 != NULL && g1 != NULL && ((struct fake_reg *)g0)->len == 0);
    CHECK(st.entries == 1 && st.bytes == 2 * 4096 && st.evictions == 1);
    /* A region larger than the whole bound is not registered. */
    char *huge;
    REQUIRE(collMemAlloc((void **)&huge, 4 * 4096) == collSuccess);
    CHECK(coll_regcache_get(rc, &fake_tp, &ctx_a, huge, 64, 3) == NULL);
    coll_regcache_free(rc);
    CHECK(fake_live == 0);
    for (int i = 0; i < 5; i++)
        CHECK(collMemFree(m[i]) == collSuccess);
    CHECK(collMemFree(big[0]) == collSuccess && collMemFree(big[1]) == collSuccess);
    CHECK(collMemFree(huge) == collSuccess);
}

static void test_invalidate(void)
{
    fake_regs = fake_deregs = 0;
    struct coll_regcache *rc;
    REQUIRE(coll_regcache_new(8, (size_t)1 << 30, &rc) == collSuccess);
    char *m, *keep;
    REQUIRE(collMemAlloc((void **)&keep, 4096) == collSuccess);
    REQUIRE(collMemAlloc((void **)&m, 16 * 4096) == collSuccess);
    void *hk = coll_regcache_get(rc, &fake_tp, &ctx_a, keep, 64, 1);
    struct fake_reg *h = coll_regcache_get(rc, &fake_tp, &ctx_a, m, 64, 1);
    REQUIRE(h != NULL && hk != NULL);
    char *old = m;
    CHECK(collMemFree(m) == collSuccess);
    /* Allocated again: the same address in practice (mmap reuses the hole).
     * Either way the new memory gets a registration of its own, and the freed
     * region's is released at the next lookup. */
    REQUIRE(collMemAlloc((void **)&m, 16 * 4096) == collSuccess);
    if (m != old)
        fprintf(stderr, "note: collMemAlloc did not reuse the address (%p, then %p)\n",
                (void *)old, (void *)m);
    struct fake_reg *h2 = coll_regcache_get(rc, &fake_tp, &ctx_a, m, 64, 2);
    CHECK(h2 != NULL && fake_regs == 3);
    /* The old registration went first (the fake may hand out its slot again). */
    CHECK(h2 != NULL && h2->buf == m && h2->len == 16 * 4096);
    CHECK(fake_deregs == 1 && fake_live == 2);
    CHECK(coll_regcache_get(rc, &fake_tp, &ctx_a, keep, 64, 2) == hk);
    struct coll_regcache_stats st;
    coll_regcache_stats(rc, &st);
    CHECK(st.invalidations == 1 && st.entries == 2);
    /* Freed under a call that still uses it (another thread's mistake): kept
     * for that call, released at the next one. */
    CHECK(collMemFree(m) == collSuccess);
    CHECK(coll_regcache_get(rc, &fake_tp, &ctx_a, keep, 64, 2) == hk);
    CHECK(fake_live == 2);
    CHECK(coll_regcache_get(rc, &fake_tp, &ctx_a, keep, 64, 3) == hk);
    CHECK(fake_live == 1);

    /* User registrations: a range of ordinary memory, known until removed. */
    char *u = malloc(10000);
    REQUIRE(u != NULL);
    void *uh;
    REQUIRE(coll_regcache_user_add(rc, u, 10000, &uh) == collSuccess);
    struct fake_reg *hu = coll_regcache_get(rc, &fake_tp, &ctx_a, u + 5000, 5000, 4);
    CHECK(hu != NULL && hu->buf == u && hu->len == 10000);
    CHECK(coll_regcache_get(rc, &fake_tp, &ctx_a, u + 5000, 5001, 4) == NULL);
    CHECK(coll_regcache_user_remove(rc, uh) == collSuccess);
    CHECK(hu->len == 0 && fake_live == 1);
    CHECK(coll_regcache_user_remove(rc, uh) == collInvalidArgument);
    CHECK(coll_regcache_user_remove(rc, &st) == collInvalidArgument);
    CHECK(coll_regcache_get(rc, &fake_tp, &ctx_a, u, 64, 5) == NULL); /* unknown again */
    free(u);

    /* A registration that fails is asked for once per region, not per lookup. */
    char *f;
    REQUIRE(collMemAlloc((void **)&f, 4096) == collSuccess);
    fake_fail = true;
    int before = fake_regs;
    CHECK(coll_regcache_get(rc, &fake_tp, &ctx_a, f, 64, 6) == NULL);
    fake_fail = false;
    CHECK(coll_regcache_get(rc, &fake_tp, &ctx_a, f, 64, 6) == NULL);
    CHECK(fake_regs == before);
    /* User registrations left at the end are released with the cache. */
    REQUIRE(coll_regcache_user_add(rc, f, 4096, &uh) == collSuccess);
    CHECK(coll_regcache_get(rc, &fake_tp, &ctx_a, f, 64, 7) != NULL);
    coll_regcache_free(rc);
    CHECK(fake_live == 0);
    CHECK(collMemFree(f) == collSuccess && collMemFree(keep) == collSuccess);
}

int main(void)
{
    test_lookup();
    test_lru();
    test_invalidate();
    return test_result();
}
