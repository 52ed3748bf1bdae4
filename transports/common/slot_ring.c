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

/* What slot `next` holds, given that it has arrived: DATA (*p, *len_p: the
 * bytes of it not yet taken), MARKED (*p, *len_p: the slot whole) or BAD
 * (*len_p: the length the sender gave). */
static inline enum coll_slot_look slot_ring_front(const struct coll_slot_ring *r,
                                                  const char **p, size_t *len_p)
{
    size_t k = r->len[r->at];
    const char *slot = r->slots + (size_t)r->at * r->slot_bytes;
    if (r->mark != NULL && r->mark[r->at]) {
        *p = slot;
        *len_p = k;
        return COLL_SLOT_MARKED;
    }
    /* A slot holds at least one byte: the sender fills none for an empty
     * message.  len[] is read once here, so the bounds handed out are the ones
     * checked, whatever the sender writes meanwhile. */
    if (k > r->slot_bytes || k <= r->off) {
        *p = NULL;
        *len_p = k;
        return COLL_SLOT_BAD;
    }
    *p = slot + r->off;
    *len_p = k - r->off;
    return COLL_SLOT_DATA;
}

enum coll_slot_look coll_slot_ring_look(struct coll_slot_ring *r, size_t want, const char **p,
                                        size_t *len_p)
{
    *p = NULL;
    *len_p = 0;
    if (r->arrived(r) == r->next)
        return COLL_SLOT_NONE;
    enum coll_slot_look got = slot_ring_front(r, p, len_p);
    if (got == COLL_SLOT_DATA && *len_p > want)
        *len_p = want;
    return got;
}

/* The slot `next` goes back. */
static void slot_ring_advance(struct coll_slot_ring *r)
{
    r->off = 0;
    r->next++;
    r->at = r->at + 1 == r->nslots ? 0 : r->at + 1;
    if (r->freed != NULL)
        r->freed(r);
}

/* Takes len bytes of slot `next`, whose length the caller read as k. */
static inline void slot_ring_take(struct coll_slot_ring *r, size_t len, size_t k)
{
    r->off += len;
    if (r->off >= k)
        slot_ring_advance(r);
}

void coll_slot_ring_release(struct coll_slot_ring *r, size_t len)
{
    slot_ring_take(r, len, r->len[r->at]);
}

void coll_slot_ring_skip(struct coll_slot_ring *r)
{
    slot_ring_advance(r);
}

enum coll_slot_look coll_slot_ring_copy(struct coll_slot_ring *r, char *buf, size_t size,
                                        size_t *done_p)
{
    size_t done = *done_p;
    /* The sender's counter is read again only once the slots it showed are
     * all taken. */
    uint64_t arrived = r->next;
    enum coll_slot_look got = COLL_SLOT_DATA;
    while (done < size) {
        if (arrived == r->next && (arrived = r->arrived(r)) == r->next) {
            got = COLL_SLOT_NONE;
            break;
        }
        const char *src;
        size_t k;
        got = slot_ring_front(r, &src, &k);
        if (got != COLL_SLOT_DATA)
            break;
        size_t len = k < size - done ? k : size - done;
        memcpy(buf + done, src, len);
        done += len;
        slot_ring_take(r, len, r->off + k);
    }
    *done_p = done;
    return got;
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
