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
/* ceil(log2 n) for n >= 1: the hops of a tree or of Bruck's allgather. */
static inline int coll_log2_ceil(int n)
{
    int k = 0;
    while ((1 << k) < n)
        k++;
    return k;
}
/* The largest power of two <= n, for n >= 1. */
static inline int coll_pow2_floor(int n)
{
    int p = 1;
    while (p <= n / 2)
        p *= 2;
    return p;
}
/* Rounds of recursive doubling's allreduce on n ranks (rd.c): log2 p for the
 * largest power of two p <= n, and a fold and an unfold when n is not p. */
static inline int coll_rd_rounds(int n)
{
    int p = coll_pow2_floor(n);
    return coll_log2_ceil(p) + (p < n ? 2 : 0);
}
/* (a mod n) for any sign of a, in [0, n). */
static inline int coll_mod(long a, int n)
{
    long m = a % n;
    return (int)(m < 0 ? m + n : m);
}

/* Binary tree over ranks 0..n-1 rooted at rank 0, for the tree algorithm.  Rank 0
 * has one child, the largest power of two below n; below it ranks form an in-order
 * tree in which a rank whose lowest set bit is b has children rank - b/2 and the
 * nearest rank + b/2, b/4, ... that exists, so odd ranks are the leaves.  Sets
 * *parent_p (-1 at the root), children[0..*nchildren_p), left child first.  The
 * height is at most ceil(log2 n) edges. */
void coll_btree(int rank, int n, int *parent_p, int children[2], int *nchildren_p);
/* The second tree of the double binary tree: coll_btree over relabelled ranks
 * (n-1-rank for even n, rank+1 mod n for odd n), rooted at rank n-1.  For even n
 * every rank has children in exactly one of the two trees; for odd n the
 * interior nodes number (n+1)/2 in each tree, so one rank (n-1) is interior in
 * both and every other rank in exactly one. */
void coll_btree_mirror(int rank, int n, int *parent_p, int children[2], int *nchildren_p);
/* The root of coll_btree_mirror's tree. */
static inline int coll_btree_mirror_root(int n)
{
    return n - 1;
}

#endif
