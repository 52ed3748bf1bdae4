/* The receiving side of a ring of slots, shared by shm (slots in a segment the
 * sender fills) and verbs (registered slots the sender writes by RDMA).
 *
 * The sender fills slots in order, slot n % nslots for its n-th fragment, and
 * records how many bytes it put there in len[]; a message of n bytes is
 * ceil(n / slot_bytes) consecutive fragments.  The receiver takes the stream in
 * the same order: a slot may be taken in several parts (a receive cut
 * differently from the send, or a zero-copy reader taking less than a slot),
 * and is handed back once all of it has been taken.  What arrived means and
 * what handing a slot back does are the transport's: shm reads the sender's
 * published counter and stores its own, verbs counts completions and returns
 * credits in batches.  So the ring knows slots, lengths and order, and calls the
 * transport for the two counters.
 *
 * A transport may mark slots it takes itself (verbs: a rendezvous
 * announcement, whose bytes are a descriptor, not data): copies and peeks stop
 * in front of a marked slot and say so, and the transport skips it when done.
 */
#ifndef COLL_SLOT_RING_H
#define COLL_SLOT_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What is in front of the receiver. */
enum coll_slot_look {
    COLL_SLOT_BAD = -1,   /* the next slot's length is out of range: the peer's error */
    COLL_SLOT_NONE = 0,   /* the next slot has not arrived */
    COLL_SLOT_DATA = 1,   /* a fragment of the stream */
    COLL_SLOT_MARKED = 2, /* a slot the transport takes itself */
};

struct coll_slot_ring;
/* Slots the sender has filled since the start (a counter that only grows). */
typedef uint64_t (*coll_slot_arrived_fn)(struct coll_slot_ring *r);
/* The receiver has handed back every slot below r->next. */
typedef void (*coll_slot_freed_fn)(struct coll_slot_ring *r);

struct coll_slot_ring {
    char *slots;                   /* nslots x slot_bytes */
    uint32_t nslots, slot_bytes;
    /* Bytes in each slot, written by the sender: checked at every look, as the
     * sender may be another process that writes what it likes. */
    const uint32_t *len;
    const bool *mark;              /* per slot, or NULL: no slot is marked */
    coll_slot_arrived_fn arrived;
    coll_slot_freed_fn freed;      /* NULL: nothing to do */
    uint64_t next;                 /* slots handed back */
    uint32_t at;                   /* next % nslots, kept as next moves */
    size_t off;                    /* bytes of slot `next` already taken */
    size_t peeked;                 /* bytes lent by the last peek */
};

void coll_slot_ring_init(struct coll_slot_ring *r, char *slots, uint32_t nslots,
                         uint32_t slot_bytes, const uint32_t *len, const bool *mark,
                         coll_slot_arrived_fn arrived, coll_slot_freed_fn freed);

/* Index in len[] and mark[] of the n-th slot, and its memory. */
static inline uint32_t coll_slot_ring_index(const struct coll_slot_ring *r, uint64_t n)
{
    return (uint32_t)(n % r->nslots);
}

static inline char *coll_slot_ring_at(const struct coll_slot_ring *r, uint64_t n)
{
    return r->slots + (size_t)coll_slot_ring_index(r, n) * r->slot_bytes;
}

/* What comes next.  DATA: up to want bytes of it, at *p, *len_p of them; MARKED:
 * the marked slot whole (its start, its len); BAD: the length the sender gave,
 * in *len_p.  Takes nothing. */
enum coll_slot_look coll_slot_ring_look(struct coll_slot_ring *r, size_t want, const char **p,
                                        size_t *len_p);
/* Takes len bytes of what look returned as DATA; a slot taken whole goes back. */
void coll_slot_ring_release(struct coll_slot_ring *r, size_t len);
/* Hands back the next slot whole, untaken (a marked slot, once dealt with). */
void coll_slot_ring_skip(struct coll_slot_ring *r);
/* Copies the stream into buf from *done_p on, until *done_p reaches size
 * (returns DATA) or the ring has nothing to give (returns why: NONE, MARKED or
 * BAD); *done_p says how far it got. */
enum coll_slot_look coll_slot_ring_copy(struct coll_slot_ring *r, char *buf, size_t size,
                                        size_t *done_p);
/* Zero-copy: lends up to want bytes in place (*p; NULL unless DATA) until
 * coll_slot_ring_unpeek hands them back. */
enum coll_slot_look coll_slot_ring_peek(struct coll_slot_ring *r, size_t want, const void **p,
                                        size_t *len_p);
void coll_slot_ring_unpeek(struct coll_slot_ring *r);

#endif
