/* Unit test: ring chunk arithmetic and neighbours for n = 1..64 and odd counts. */
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
    return test_result();
}
