/*
 * Gradient buckets on a stream, as DDP issues them: each round issues K
 * allreduces (float sum) of S bytes on K distinct buffers, back to back on one
 * stream, then synchronizes once.  Consecutive calls may overlap
 * (COLL_STREAM_OVERLAP, lib/core/stream.c); perf/bucket_overlap.sh runs this
 * with overlap on and off, side by side, for the ratio.
 *
 *   collrun -n 4 bucket_bench [-k BUCKETS] [-s BYTES] [-r ROUNDS] [-w WARMUP]
 *
 * Prints, from rank 0, one line: buckets, bytes, rounds, the median and best
 * time of a round in microseconds, and the bus bandwidth of the median round
 * (2(n-1)/n x K x S / time, as allreduce_perf counts it).  Every round's
 * results are checked on every rank; a wrong element fails the run.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "collective.h"

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    if (*end == 'K' || *end == 'k')
        v *= 1024;
    else if (*end == 'M' || *end == 'm')
        v *= 1024 * 1024;
    else if (*end == 'G' || *end == 'g')
        v *= 1024.0 * 1024 * 1024;
    return (size_t)v;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#define TRY(call)                                                                          \
    do {                                                                                   \
        collResult_t r_ = (call);                                                          \
        if (r_ != collSuccess) {                                                           \
            fprintf(stderr, "bucket_bench: %s: %s (%s)\n", #call, collGetErrorString(r_),  \
                    collGetLastError(comm));                                               \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

int main(int argc, char **argv)
{
    int k = 8, rounds = 20, warmup = 3, opt;
    size_t bytes = 1 << 20;
    while ((opt = getopt(argc, argv, "k:s:r:w:")) != -1) {
        switch (opt) {
        case 'k': k = atoi(optarg); break;
        case 's': bytes = parse_size(optarg); break;
        case 'r': rounds = atoi(optarg); break;
        case 'w': warmup = atoi(optarg); break;
        default:
            fprintf(stderr, "usage: %s [-k BUCKETS] [-s BYTES] [-r ROUNDS] [-w WARMUP]\n",
                    argv[0]);
            return 2;
        }
    }
    if (k < 1 || rounds < 1 || warmup < 0 || bytes < sizeof(float)) {
        fprintf(stderr, "bucket_bench: -k, -r must be >= 1, -w >= 0, -s >= 4 bytes\n");
        return 2;
    }
    collComm_t comm = NULL;
    TRY(collCommInitFromEnv(&comm));
    int n, me;
    TRY(collCommCount(comm, &n));
    TRY(collCommUserRank(comm, &me));
    size_t count = bytes / sizeof(float);
    float **buf = calloc((size_t)k, sizeof(*buf));
    double *t = calloc((size_t)rounds, sizeof(double));
    if (buf == NULL || t == NULL)
        return 1;
    for (int b = 0; b < k; b++)
        if ((buf[b] = calloc(count, sizeof(float))) == NULL)
            return 1;
    collStream_t s;
    TRY(collStreamCreate(&s));
    for (int it = -warmup; it < rounds; it++) {
        for (int b = 0; b < k; b++)
            for (size_t j = 0; j < count; j += 1024)
                buf[b][j] = (float)(me + b);
        TRY(collAllReduce(buf[0], buf[0], 1, collFloat, collSum, comm, NULL)); /* line up */
        double t0 = now_us();
        for (int b = 0; b < k; b++)
            TRY(collAllReduce(buf[b], buf[b], count, collFloat, collSum, comm, s));
        TRY(collStreamSynchronize(s));
        double dt = now_us() - t0;
        if (it >= 0)
            t[it] = dt;
        for (int b = 0; b < k; b++) {
            float want = (float)(n * (n - 1) / 2 + n * b);
            for (size_t j = 1024; j < count; j += 1024)
                if (buf[b][j] != want) {
                    fprintf(stderr, "bucket_bench: rank %d bucket %d element %zu: %g, want %g\n",
                            me, b, j, (double)buf[b][j], (double)want);
                    return 1;
                }
        }
    }
    qsort(t, (size_t)rounds, sizeof(double), cmp_double);
    double med = t[rounds / 2];
    if (me == 0)
        printf("buckets %d bytes %zu ranks %d rounds %d median_us %.1f best_us %.1f "
               "busbw_GBs %.3f\n", k, bytes, n, rounds, med, t[0],
               2.0 * (n - 1) / n * (double)k * (double)bytes / med / 1e3);
    TRY(collStreamDestroy(s));
    TRY(collCommDestroy(comm));
    for (int b = 0; b < k; b++)
        free(buf[b]);
    free(buf);
    free(t);
    return 0;
}
