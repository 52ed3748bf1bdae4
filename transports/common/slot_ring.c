/* The receiving side of a ring of slots (slot_ring.h). */
#include "common/slot_ring.h"

#include <string.h>

void coll_slot_ring_init(struct coll_slot_ring *r, char *slots, uint32_t nslots,
                         uint32_t slot_bytes, const uint32_t *len, const bool *mark,
                         coll_slot_arrived_fn arrived, coll_slot_freed_fn freed)
{
    *r = (struct coll_slot_ring){.slots = slots, .nslots = nslots, .slot_bytes = slot_bytes,
                                 .len = len, .mark = mark, .arrived = arrived, .freed = freed};
}

enum coll_slot_look coll_slot_ring_look(struct coll_slot_ring *r, size_t want, const char **p,
                                        size_t *len_p)
{
    *p = NULL;
    *len_p = 0;
    if (r->arrived(r) == r->next)
        return COLL_SLOT_NONE;
    uint32_t s = coll_slot_ring_index(r, r->next);
    size_t k = r->len[s];
    if (r->mark != NULL && r->mark[s]) {
        *p = coll_slot_ring_at(r, r->next);
        *len_p = k;
        return COLL_SLOT_MARKED;
    }
    /* A slot holds at least one byte: the sender fills none for an empty
     * message.  len[] is read once here, so the bounds handed out are the ones
     * checked, whatever the sender writes meanwhile. */
    if (k > r->slot_bytes || k <= r->off) {
        *len_p = k;
        return COLL_SLOT_BAD;
    }
    k -= r->off;
    *len_p = k < want ? k : want;
    *p = coll_slot_ring_at(r, r->next) + r->off;
    return COLL_SLOT_DATA;
}

/* The slot `next` goes back. */
static void slot_ring_advance(struct coll_slot_ring *r)
{
    r->off = 0;
    r->next++;
    if (r->freed != NULL)
        r->freed(r);
}

void coll_slot_ring_release(struct coll_slot_ring *r, size_t len)
{
    r->off += len;
    if (r->off < r->len[coll_slot_ring_index(r, r->next)])
        return;
    slot_ring_advance(r);
}

void coll_slot_ring_skip(struct coll_slot_ring *r)
{
    slot_ring_advance(r);
}

enum coll_slot_look coll_slot_ring_copy(struct coll_slot_ring *r, char *buf, size_t size,
                                        size_t *done_p)
{
    while (*done_p < size) {
        const char *src;
        size_t k;
        enum coll_slot_look got = coll_slot_ring_look(r, size - *done_p, &src, &k);
        if (got != COLL_SLOT_DATA)
            return got;
        memcpy(buf + *done_p, src, k);
        *done_p += k;
        coll_slot_ring_release(r, k);
    }
    return COLL_SLOT_DATA;
}

enum coll_slot_look coll_slot_ring_peek(struct coll_slot_ring *r, size_t want, const void **p,
                                        size_t *len_p)
{
    const char *src;
    enum coll_slot_look got = coll_slot_ring_look(r, want, &src, len_p);
    *p = got == COLL_SLOT_DATA ? src : NULL;
    r->peeked = got == COLL_SLOT_DATA ? *len_p : 0;
    return got;
}

void coll_slot_ring_unpeek(struct coll_slot_ring *r)
{
    /* Nothing lent (the peek found nothing): the slot in front may not have
     * arrived, and its stale length must not hand it back. */
    if (r->peeked == 0)
        return;
    coll_slot_ring_release(r, r->peeked);
    r->peeked = 0;
}
