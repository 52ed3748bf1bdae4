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

void coll_btree(int rank, int n, int *parent_p, int children[2], int *nchildren_p)
{
    int nc = 0;
    if (rank == 0) {
        /* The root's only child is the top of the in-order tree over 1..n-1. */
        int top = 1;
        while (top * 2 <= n - 1)
            top *= 2;
        *parent_p = -1;
        if (n > 1)
            children[nc++] = top;
        *nchildren_p = nc;
        return;
    }
    int low = rank & -rank;
    /* The parent sits one level up, on whichever side keeps the bits above 2*low:
     * clear bit low, set bit 2*low.  Past the end of the ranks the subtree hangs
     * from the rank on the left instead (the top's "left" is rank 0). */
    int up = (rank - low) | (low * 2);
    *parent_p = up < n ? up : rank - low;
    if (low > 1) {
        children[nc++] = rank - low / 2;
        /* The right subtree may be cut short by n: its nearest existing node. */
        for (int c = low / 2; c >= 1; c /= 2) {
            if (rank + c < n) {
                children[nc++] = rank + c;
                break;
            }
        }
    }
    *nchildren_p = nc;
}

/* Relabelling of coll_btree_mirror and its inverse. */
static int pattern_mirror(int rank, int n, int inverse)
{
    if (n % 2 == 0)
        return n - 1 - rank;
    return coll_mod((long)rank + (inverse ? -1 : 1), n);
}

void coll_btree_mirror(int rank, int n, int *parent_p, int children[2], int *nchildren_p)
{
    int parent;
    coll_btree(pattern_mirror(rank, n, 0), n, &parent, children, nchildren_p);
    *parent_p = parent < 0 ? -1 : pattern_mirror(parent, n, 1);
    for (int j = 0; j < *nchildren_p; j++)
        children[j] = pattern_mirror(children[j], n, 1);
}
