/* CUDA_OK(call): a CUDA runtime call that must succeed in a GPU test; on failure
 * prints where and why and exits 1. */
#ifndef COLL_TEST_CUDA_CHECK_H
#define COLL_TEST_CUDA_CHECK_H

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CUDA_OK(x)                                                                       \
    do {                                                                                 \
        cudaError_t e_ = (x);                                                            \
        if (e_ != cudaSuccess) {                                                         \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,                   \
                    cudaGetErrorString(e_));                                             \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

#endif
