/*
 * reduce_bench: single-thread bandwidth of the float32 sum kernel, next to memcpy.
 *
 *   inplace  coll_reduce(collSum, collFloat32, a, a, b, n)   a += b, the ring's reduce step
 *   oop      coll_reduce(collSum, collFloat32, c, a, b, n)   c = a + b
 *   memcpy   memcpy(c, a, size)
 *
 * "size" is the bytes of one array.  Bandwidth counts bytes read plus bytes written per
 * second, GB = 1e9 bytes: 3 x size for the reductions, 2 x size for memcpy (the write-allocate
 * reads of the destination are not counted).  Each run repeats the kernel until it has
 * written at least -B bytes; the table shows the best of -r runs, so that a busy neighbour
 * on a small machine lowers the median but rarely the best.
 *
 * usage: reduce_bench [-b min] [-e max] [-r runs] [-B bytes_per_run] [-c cpu]
 *        sizes take K, M, G suffixes (binary); defaults 64K 256M 7 1G, no pinning.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "reduce.h"

enum bench_kernel { BENCH_INPLACE, BENCH_OOP, BENCH_MEMCPY, BENCH_NKERNELS };

static const char *const bench_kernel_names[BENCH_NKERNELS] = { "a+=b", "c=a+b", "memcpy" };

static double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static size_t bench_parse_size(const char *s)
{
    char *end = NULL;
    double v = strtod(s, &end);
    switch (end ? *end : '\0') {
    case 'k': case 'K': v *= 1024.0; break;
    case 'm': case 'M': v *= 1024.0 * 1024.0; break;
    case 'g': case 'G': v *= 1024.0 * 1024.0 * 1024.0; break;
    default: break;
    }
    return (size_t)v;
}

static void *bench_alloc(size_t bytes)
{
    void *p = NULL;
    if (posix_memalign(&p, 4096, bytes) != 0) {
        fprintf(stderr, "reduce_bench: cannot allocate %zu bytes\n", bytes);
        exit(1);
    }
    return p;
}

static void bench_run_once(enum bench_kernel k, float *a, const float *b, float *c, size_t n)
{
    switch (k) {
    case BENCH_INPLACE:
        coll_reduce(collSum, collFloat32, a, a, b, n);
        break;
    case BENCH_OOP:
        coll_reduce(collSum, collFloat32, c, a, b, n);
        break;
    default:
        memcpy(c, a, n * sizeof(float));
        break;
    }
    /* Keeps the compiler from merging or dropping repetitions. */
    __asm__ __volatile__("" ::: "memory");
}

/* Best read+write GB/s over `runs` runs of at least `per_run` bytes written each. */
static double bench_kernel(enum bench_kernel k, float *a, const float *b, float *c, size_t size,
                           int runs, size_t per_run)
{
    size_t n = size / sizeof(float);
    size_t reps = per_run / size ? per_run / size : 1;
    double traffic = (k == BENCH_MEMCPY ? 2.0 : 3.0) * (double)size * (double)reps;
    double best = 0.0;

    bench_run_once(k, a, b, c, n); /* warm the caches and the page tables */
    for (int r = 0; r < runs; r++) {
        double t0 = bench_now();
        for (size_t i = 0; i < reps; i++)
            bench_run_once(k, a, b, c, n);
        double gbps = traffic / (bench_now() - t0) / 1e9;
        if (gbps > best)
            best = gbps;
    }
    return best;
}

int main(int argc, char **argv)
{
    size_t min_size = 64u << 10, max_size = 256u << 20, per_run = 1u << 30;
    int runs = 7, cpu = -1, opt;

    while ((opt = getopt(argc, argv, "b:e:r:B:c:")) != -1) {
        switch (opt) {
        case 'b': min_size = bench_parse_size(optarg); break;
        case 'e': max_size = bench_parse_size(optarg); break;
        case 'r': runs = atoi(optarg); break;
        case 'B': per_run = bench_parse_size(optarg); break;
        case 'c': cpu = atoi(optarg); break;
        default:
            fprintf(stderr, "usage: %s [-b min] [-e max] [-r runs] [-B bytes_per_run] [-c cpu]\n",
                    argv[0]);
            return 2;
        }
    }
    if (min_size < 64 || max_size < min_size || runs < 1) {
        fprintf(stderr, "reduce_bench: need 64 <= min <= max and runs >= 1\n");
        return 2;
    }
    if (cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        if (sched_setaffinity(0, sizeof(set), &set) != 0)
            fprintf(stderr, "reduce_bench: cpu %d: %s\n", cpu, strerror(errno));
    }

    printf("# reduce_bench: float32 sum, best of %d runs of >= %zu bytes written, cpu %d\n", runs,
           per_run, cpu);
    printf("# GB/s = (bytes read + written) / s: 3 x size for the sums, 2 x size for memcpy\n");
    printf("# %10s %10s %10s %10s %12s %12s\n", "size(B)", bench_kernel_names[BENCH_INPLACE],
           bench_kernel_names[BENCH_OOP], bench_kernel_names[BENCH_MEMCPY], "a+=b/memcpy",
           "c=a+b/memcpy");
    for (size_t size = min_size; size <= max_size; size *= 2) {
        size_t n = size / sizeof(float);
        float *a = bench_alloc(size), *b = bench_alloc(size), *c = bench_alloc(size);
        double gbps[BENCH_NKERNELS];

        /* Small values that stay finite however many times a += b runs. */
        for (size_t i = 0; i < n; i++) {
            a[i] = 1.0f;
            b[i] = 1e-7f * (float)(i & 7);
            c[i] = 0.0f;
        }
        for (int k = 0; k < BENCH_NKERNELS; k++)
            gbps[k] = bench_kernel((enum bench_kernel)k, a, b, c, size, runs, per_run);
        printf("  %10zu %10.1f %10.1f %10.1f %12.2f %12.2f\n", size, gbps[BENCH_INPLACE],
               gbps[BENCH_OOP], gbps[BENCH_MEMCPY], gbps[BENCH_INPLACE] / gbps[BENCH_MEMCPY],
               gbps[BENCH_OOP] / gbps[BENCH_MEMCPY]);
        fflush(stdout);
        free(a);
        free(b);
        free(c);
    }
    return 0;
}
