/* Unit test: ring chunk arithmetic and neighbours for n = 1..64 and odd counts. */
#include <stdbool.h>

#include "harness.h"
#include "pattern.h"

static void check_chunks(size_t count, int n)
{
    size_t next_off = 0, minlen = (size_t)-1, maxlen = 0;
    for (int j = 0; j < n; j++) {
        size_t off, len;
        coll_ring_chunk(count, n, j, &off, &len);
        CHECK_MSG(off == next_off, "count %zu n %d part %d starts at %zu, want %zu", count, n, j,
                  off, next_off);
        next_off = off + len;
        if (len < minlen)
            minlen = len;
        if (len > maxlen)
            maxlen = len;
    }
    CHECK_MSG(next_off == count, "count %zu n %d: parts cover %zu", count, n, next_off);
    CHECK_MSG(maxlen - minlen <= 1, "count %zu n %d: unbalanced parts %zu..%zu", count, n, minlen,
              maxlen);
}

static void check_btrees(void);

int main(void)
{
    const size_t counts[] = {0, 1, 2, 3, 7, 63, 64, 65, 1000, 1000003, 1048579};
    for (int n = 1; n <= 64; n++) {
        for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
            check_chunks(counts[i], n);
            check_chunks((size_t)n - 1, n);
            check_chunks((size_t)n * 3 + 1, n);
        }
        int seen_next[64] = {0};
        for (int r = 0; r < n; r++) {
            int prev, next;
            coll_ring_neighbors(r, n, &prev, &next);
            CHECK(prev >= 0 && prev < n && next >= 0 && next < n);
            int p2, n2;
            coll_ring_neighbors(next, n, &p2, &n2);
            CHECK_MSG(p2 == r, "n %d: prev of next(%d) is %d", n, r, p2);
            seen_next[next]++;
        }
        for (int r = 0; r < n; r++)
            CHECK_MSG(seen_next[r] == 1, "n %d: rank %d is next of %d ranks", n, r, seen_next[r]);
    }
    CHECK(coll_slices(0, 10) == 1);
    CHECK(coll_slices(10, 10) == 1);
    CHECK(coll_slices(11, 10) == 2);
    CHECK(coll_slices(5, 0) == 5);
    CHECK(coll_mod(-1, 5) == 4);
    CHECK(coll_mod(-11, 5) == 4);
    CHECK(coll_mod(7, 5) == 2);
    /* Recursive doubling: p ranks in the rounds, 2 more rounds when n is not p. */
    CHECK(coll_pow2_floor(1) == 1 && coll_pow2_floor(2) == 2 && coll_pow2_floor(3) == 2);
    CHECK(coll_pow2_floor(7) == 4 && coll_pow2_floor(8) == 8 && coll_pow2_floor(9) == 8);
    CHECK(coll_rd_rounds(1) == 0 && coll_rd_rounds(2) == 1 && coll_rd_rounds(3) == 3);
    CHECK(coll_rd_rounds(4) == 2 && coll_rd_rounds(6) == 4 && coll_rd_rounds(8) == 3);
    check_btrees();
    return test_result();
}

/* One tree of n ranks: exactly one root (want_root), every other rank has one
 * parent that lists it as a child, children point back, no rank is reached twice,
 * and every rank reaches the root within ceil(log2 n) hops, the deepest in exactly
 * that many.  interior[r] counts the trees in which rank r has children. */
static void check_btree(int n, int mirror, int want_root, int *interior)
{
    int parent[64], child[64][2], nc[64];
    const char *name = mirror ? "mirror" : "btree";
    int log2n = 0;
    while ((1 << log2n) < n)
        log2n++;
    for (int r = 0; r < n; r++) {
        if (mirror)
            coll_btree_mirror(r, n, &parent[r], child[r], &nc[r]);
        else
            coll_btree(r, n, &parent[r], child[r], &nc[r]);
        CHECK_MSG(nc[r] >= 0 && nc[r] <= 2, "%s n %d rank %d: %d children", name, n, r, nc[r]);
        if (nc[r] > 0)
            interior[r]++;
    }
    int edges = 0, is_child[64] = {0};
    for (int r = 0; r < n; r++) {
        if (r == want_root) {
            CHECK_MSG(parent[r] == -1, "%s n %d: root %d has parent %d", name, n, r, parent[r]);
        } else {
            int p = parent[r];
            CHECK_MSG(p >= 0 && p < n && p != r, "%s n %d rank %d: parent %d", name, n, r, p);
            if (p < 0 || p >= n)
                continue;
            int listed = 0;
            for (int j = 0; j < nc[p]; j++)
                listed += child[p][j] == r;
            CHECK_MSG(listed == 1, "%s n %d: parent %d lists rank %d %d times", name, n, p, r,
                      listed);
        }
        for (int j = 0; j < nc[r]; j++) {
            int c = child[r][j];
            CHECK_MSG(c >= 0 && c < n && parent[c] == r, "%s n %d rank %d: child %d", name, n, r,
                      c);
            if (c >= 0 && c < n)
                is_child[c]++;
            edges++;
        }
    }
    CHECK_MSG(edges == n - 1, "%s n %d: %d parent-child relations", name, n, edges);
    int height = 0;
    for (int r = 0; r < n; r++) {
        CHECK_MSG(is_child[r] == (r == want_root ? 0 : 1), "%s n %d: rank %d is a child %d times",
                  name, n, r, is_child[r]);
        /* Walking up reaches the root: connected and free of cycles. */
        int hops = 0, x = r;
        while (x != want_root && x >= 0 && x < n && hops <= n) {
            x = parent[x];
            hops++;
        }
        CHECK_MSG(x == want_root, "%s n %d: rank %d does not reach the root", name, n, r);
        CHECK_MSG(hops <= log2n, "%s n %d: rank %d is %d hops deep, more than %d", name, n, r,
                  hops, log2n);
        height = hops > height ? hops : height;
    }
    /* tree_predict relies on the height being exactly ceil(log2 n). */
    CHECK_MSG(height == log2n, "%s n %d: height %d, want %d", name, n, height, log2n);
}

/* Binary and double binary trees for n = 1..64. */
static void check_btrees(void)
{
    for (int n = 1; n <= 64; n++) {
        int interior[64] = {0};
        check_btree(n, 0, 0, interior);
        check_btree(n, 1, coll_btree_mirror_root(n), interior);
        /* Even n: each rank is interior in exactly one tree.  Odd n >= 3: (n+1)/2
         * interior ranks per tree force one rank, n-1, to be interior in both; the
         * others are interior in exactly one.  n = 1: no rank has children. */
        for (int r = 0; r < n; r++) {
            int want = n == 1 ? 0 : (n % 2 == 1 && r == n - 1) ? 2 : 1;
            CHECK_MSG(interior[r] == want, "n %d: rank %d interior in %d trees, want %d", n, r,
                      interior[r], want);
        }
    }
}
