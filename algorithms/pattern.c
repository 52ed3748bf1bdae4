/* Rank and chunk arithmetic.  Kept free of I/O so the unit tests cover every n. */
#include "pattern.h"

void coll_ring_chunk(size_t count, int nparts, int j, size_t *off_p, size_t *len_p)
{
    size_t n = (size_t)nparts, uj = (size_t)j;
    size_t base = count / n, rem = count % n;
    *off_p = base * uj + (uj < rem ? uj : rem);
    *len_p = base + (uj < rem ? 1 : 0);
}

void coll_ring_neighbors(int rank, int n, int *prev_p, int *next_p)
{
    *prev_p = coll_mod((long)rank - 1, n);
    *next_p = coll_mod((long)rank + 1, n);
}

size_t coll_slices(size_t count, size_t slice_elems)
{
    if (slice_elems == 0)
        slice_elems = 1;
    size_t k = (count + slice_elems - 1) / slice_elems;
    return k ? k : 1;
}
