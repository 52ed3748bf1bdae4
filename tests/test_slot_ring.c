/*
 * The receiving side of a ring of slots (transports/common/slot_ring.c, what shm
 * and verbs receive through), driven by a sender written here: 4 slots of 16
 * bytes, the sender's counter and the slots handed back checked at each step.
 *
 *   a. a message of 40 bytes (slots of 16, 16, 8) copied into receives of 7, 20
 *      and 13 bytes: slots taken in parts, each handed back once wholly read
 *      and only then, the stream intact across the ring's end (messages 2-5)
 *   b. nothing arrived: copy, peek and look give NONE and take nothing; an
 *      unpeek after an empty peek hands back no slot (its length is stale)
 *   c. zero-copy: peeks of at most want bytes, in place, unpeek hands them back
 *   d. a marked slot stops copies and peeks in front of it; skip hands it back
 *   e. a length the sender wrote beyond the slot, or 0, is BAD and takes nothing
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "common/slot_ring.h"
#include "harness.h"

#define NSLOTS 4
#define SLOT 16

static char slots[NSLOTS * SLOT];
static uint32_t len[NSLOTS];
static bool mark[NSLOTS];
static uint64_t sent;  /* slots the sender has filled */
static int freed;      /* calls of the freed callback */
static uint64_t stream; /* bytes the sender has produced: byte i is (i * 7) & 0xff */

static uint64_t arrived(struct coll_slot_ring *r)
{
    (void)r;
    return sent;
}

static void on_freed(struct coll_slot_ring *r)
{
    (void)r;
    freed++;
}

/* Sends a message of n bytes, all of it fitting in the free slots. */
static void send_msg(const struct coll_slot_ring *r, size_t n)
{
    while (n > 0) {
        CHECK(sent - r->next < NSLOTS);
        size_t k = n < SLOT ? n : SLOT;
        uint32_t s = (uint32_t)(sent % NSLOTS);
        for (size_t i = 0; i < k; i++)
            slots[s * SLOT + i] = (char)((stream + i) * 7);
        stream += k;
        len[s] = (uint32_t)k;
        mark[s] = false;
        sent++;
        n -= k;
    }
}

static bool stream_at(const char *buf, size_t n, uint64_t from)
{
    for (size_t i = 0; i < n; i++)
        if (buf[i] != (char)((from + i) * 7))
            return false;
    return true;
}

int main(void)
{
    struct coll_slot_ring r;
    coll_slot_ring_init(&r, slots, NSLOTS, SLOT, len, mark, arrived, on_freed);
    char buf[64];
    uint64_t taken = 0; /* stream bytes the receiver has taken */
    const void *p;
    const char *cp;
    size_t n;

    /* a. Receives cut differently from the send, and the ring's end. */
    for (int m = 0; m < 5; m++) {
        send_msg(&r, 40);
        static const size_t cuts[3] = {7, 20, 13};
        for (int c = 0; c < 3; c++) {
            size_t done = 0;
            memset(buf, 0, sizeof(buf));
            CHECK(coll_slot_ring_copy(&r, buf, cuts[c], &done) == COLL_SLOT_DATA);
            CHECK(done == cuts[c]);
            CHECK_MSG(stream_at(buf, done, taken), "message %d, receive %d", m, c);
            taken += done;
        }
        CHECK_MSG(r.next == sent && r.off == 0 && freed == (int)sent, "message %d: next %llu "
                  "off %zu freed %d sent %llu", m, (unsigned long long)r.next, r.off, freed,
                  (unsigned long long)sent);
    }
    /* Part of a slot taken: the slot stays the receiver's. */
    send_msg(&r, 10);
    size_t done = 0;
    CHECK(coll_slot_ring_copy(&r, buf, 4, &done) == COLL_SLOT_DATA && done == 4);
    CHECK(r.next == sent - 1 && r.off == 4 && freed == (int)sent - 1);
    /* A receive longer than what came: copies what there is, then NONE. */
    CHECK(coll_slot_ring_copy(&r, buf, 30, &done) == COLL_SLOT_NONE && done == 10);
    CHECK(stream_at(buf + 4, 6, taken + 4));
    taken += 10;
    CHECK(r.next == sent && r.off == 0 && freed == (int)sent);

    /* b. Nothing arrived. */
    done = 0;
    CHECK(coll_slot_ring_copy(&r, buf, 8, &done) == COLL_SLOT_NONE && done == 0);
    CHECK(coll_slot_ring_look(&r, 8, &cp, &n) == COLL_SLOT_NONE && cp == NULL);
    CHECK(coll_slot_ring_peek(&r, 8, &p, &n) == COLL_SLOT_NONE && p == NULL);
    uint64_t before = r.next;
    coll_slot_ring_unpeek(&r); /* len[] of the slot in front is stale (its last use) */
    CHECK(r.next == before && r.off == 0 && freed == (int)sent);

    /* c. Zero-copy: peeks in place, of at most want bytes. */
    send_msg(&r, 20); /* slots of 16 and 4 */
    CHECK(coll_slot_ring_peek(&r, 10, &p, &n) == COLL_SLOT_DATA && n == 10);
    CHECK(p == coll_slot_ring_at(&r, r.next) && stream_at(p, n, taken));
    CHECK(r.off == 0); /* lent, not yet taken */
    coll_slot_ring_unpeek(&r);
    CHECK(r.off == 10);
    taken += 10;
    CHECK(coll_slot_ring_peek(&r, 100, &p, &n) == COLL_SLOT_DATA && n == 6);
    CHECK(stream_at(p, n, taken));
    before = r.next;
    coll_slot_ring_unpeek(&r);
    CHECK(r.next == before + 1 && r.off == 0);
    taken += 6;
    CHECK(coll_slot_ring_peek(&r, 100, &p, &n) == COLL_SLOT_DATA && n == 4);
    coll_slot_ring_unpeek(&r);
    coll_slot_ring_unpeek(&r); /* twice: the second lends nothing back */
    taken += 4;
    CHECK(r.next == sent && freed == (int)sent);

    /* d. A marked slot between two fragments. */
    send_msg(&r, 5);
    uint32_t s = (uint32_t)(sent % NSLOTS);
    memcpy(slots + s * SLOT, "MARK", 4);
    len[s] = 4;
    mark[s] = true;
    sent++;
    send_msg(&r, 3);
    done = 0;
    CHECK(coll_slot_ring_copy(&r, buf, 8, &done) == COLL_SLOT_MARKED && done == 5);
    CHECK(stream_at(buf, 5, taken));
    taken += 5;
    CHECK(coll_slot_ring_peek(&r, 8, &p, &n) == COLL_SLOT_MARKED && p == NULL);
    CHECK(coll_slot_ring_look(&r, 0, &cp, &n) == COLL_SLOT_MARKED && n == 4 &&
          memcmp(cp, "MARK", 4) == 0);
    before = r.next;
    int freed_before = freed;
    coll_slot_ring_skip(&r);
    CHECK(r.next == before + 1 && freed == freed_before + 1);
    CHECK(coll_slot_ring_copy(&r, buf, 8, &done) == COLL_SLOT_DATA && done == 8);
    CHECK(stream_at(buf + 5, 3, taken));
    taken += 3;

    /* e. Lengths out of range: BAD, nothing taken. */
    static const uint32_t bad[2] = {SLOT + 1, 0};
    for (int i = 0; i < 2; i++) {
        s = (uint32_t)(sent % NSLOTS);
        len[s] = bad[i];
        mark[s] = false;
        sent++;
        done = 0;
        before = r.next;
        CHECK(coll_slot_ring_copy(&r, buf, 8, &done) == COLL_SLOT_BAD && done == 0);
        CHECK(coll_slot_ring_peek(&r, 8, &p, &n) == COLL_SLOT_BAD && p == NULL && n == bad[i]);
        CHECK(r.next == before && r.off == 0);
        coll_slot_ring_skip(&r); /* the test moves on; a transport fails the connection */
    }
    if (test_failures)
        fprintf(stderr, "%d check(s) failed\n", test_failures);
    return test_failures ? 1 : 0;
}
