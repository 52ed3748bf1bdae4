/* The device reduction kernels (lib/base/reduce_cuda.cu) against the host's
 * (lib/base/reduce.c), bit for bit: every type x sum, prod, max, min, out of place
 * and in place, and the division that ends collAvg (divisors 3 and 200), on
 * 1M+3 elements of finite, non-zero random inputs (so no NaN, whose payload the
 * host does not fix either, and no pair of zeros of opposite sign, whose max
 * may be either).  Exits 77 without a usable GPU. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "reduce.h"
#include "reduce_cuda.h"

#define N ((1u << 20) + 3)

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* n random elements of type t: integers any bits, floats finite and not zero. */
static void fill(collDataType_t t, void *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t r = next();
        double v = ((double)(r % 2000001) - 1000000.0) / 1000.0;
        if (v == 0)
            v = 0.5;
        switch (t) {
        case collFloat16: ((uint16_t *)p)[i] = coll_float_to_half((float)(v / 100)); break;
        case collBfloat16: ((uint16_t *)p)[i] = coll_float_to_bf16((float)v); break;
        case collFloat32: ((float *)p)[i] = (float)v; break;
        case collFloat64: ((double *)p)[i] = v * 1.0000001; break;
        default: memcpy((char *)p + i * coll_dtype_size(t), &r, coll_dtype_size(t)); break;
        }
    }
}


int main(void)
{
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0) {
        printf("SKIP: no usable GPU (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "none");
        return 77;
    }
    size_t most = N * sizeof(double);
    char *ha = malloc(most), *hb = malloc(most), *href = malloc(most), *hout = malloc(most);
    void *da, *db, *dd;
    CUDA_OK(cudaMalloc(&da, most));
    CUDA_OK(cudaMalloc(&db, most));
    CUDA_OK(cudaMalloc(&dd, most));
    int failures = 0, checks = 0;
    for (int t = 0; t < collNumTypes; t++) {
        size_t bytes = N * coll_dtype_size((collDataType_t)t);
        fill((collDataType_t)t, ha, N);
        fill((collDataType_t)t, hb, N);
        CUDA_OK(cudaMemcpy(da, ha, bytes, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(db, hb, bytes, cudaMemcpyHostToDevice));
        for (int op = 0; op < 4; op++) {
            for (int in_place = 0; in_place < 2; in_place++) {
                coll_reduce((collRedOp_t)op, (collDataType_t)t, href, ha, hb, N);
                if (in_place)
                    CUDA_OK(cudaMemcpy(dd, da, bytes, cudaMemcpyDeviceToDevice));
                int r = coll_cuda_reduce((collRedOp_t)op, (collDataType_t)t, dd,
                                         in_place ? dd : da, db, N, NULL);
                CUDA_OK((cudaError_t)r);
                CUDA_OK(cudaDeviceSynchronize());
                CUDA_OK(cudaMemcpy(hout, dd, bytes, cudaMemcpyDeviceToHost));
                checks++;
                if (memcmp(hout, href, bytes) != 0) {
                    size_t es = coll_dtype_size((collDataType_t)t), i = 0;
                    while (memcmp(hout + i * es, href + i * es, es) == 0)
                        i++;
                    printf("FAIL %s %s%s: element %zu differs\n", coll_dtype_name(t),
                           coll_op_name(op), in_place ? " in place" : "", i);
                    failures++;
                }
            }
        }
        for (int k = 0; k < 2; k++) {
            int div = k ? 200 : 3;
            coll_reduce_div((collDataType_t)t, href, ha, N, div);
            CUDA_OK((cudaError_t)coll_cuda_reduce_div((collDataType_t)t, dd, da, N, div, NULL));
            CUDA_OK(cudaDeviceSynchronize());
            CUDA_OK(cudaMemcpy(hout, dd, bytes, cudaMemcpyDeviceToHost));
            checks++;
            if (memcmp(hout, href, bytes) != 0) {
                printf("FAIL %s / %d differs\n", coll_dtype_name(t), div);
                failures++;
            }
        }
    }
    printf("cuda reduce: %d checks, %d failure(s)\n", checks, failures);
    cudaFree(da);
    cudaFree(db);
    cudaFree(dd);
    free(ha), free(hb), free(href), free(hout);
    return failures ? 1 : 0;
}
