/* Pure rank and chunk arithmetic shared by the algorithms: no I/O, unit-tested. */
#ifndef COLL_PATTERN_H
#define COLL_PATTERN_H

#include <stddef.h>

/* Splits count elements into nparts balanced parts: part j starts at *off_p and
 * has *len_p elements; the first count % nparts parts have one more element. */
void coll_ring_chunk(size_t count, int nparts, int j, size_t *off_p, size_t *len_p);
/* Neighbours of rank in a ring of n. */
void coll_ring_neighbors(int rank, int n, int *prev_p, int *next_p);
/* Number of slices of at most slice_elems elements that cover count elements (>= 1). */
size_t coll_slices(size_t count, size_t slice_elems);
/* (a mod n) for any sign of a, in [0, n). */
static inline int coll_mod(long a, int n)
{
    long m = a % n;
    return (int)(m < 0 ? m + n : m);
}

#endif
