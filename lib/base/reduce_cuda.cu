// The reduction kernels on a CUDA device (reduce_cuda.h).  One grid-stride
// kernel per (type, op); the element operations are written out here as the host
// kernels define them (reduce.c), conversions included, rather than taken from
// CUDA's intrinsics, whose NaN handling differs.
#include <cuda_runtime.h>
#include <stdint.h>

#include "reduce_cuda.h"

namespace {

__device__ __forceinline__ float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f)
        return __uint_as_float(sign | 0x7f800000u | (mant ? 0x00400000u | mant << 13 : 0));
    if (exp == 0) {
        float f = (float)mant * 0x1p-24f;
        return sign ? -f : f;
    }
    return __uint_as_float(sign | (exp + 112) << 23 | mant << 13);
}

__device__ __forceinline__ uint16_t float_to_half(float f)
{
    uint32_t u = __float_as_uint(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u | (abs & 0x7fffffu) >> 13);
    if (abs >= 0x38800000u) {
        uint32_t r = abs - (112u << 23);
        r = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
        return (uint16_t)(sign | (r < 0x7c00u ? r : 0x7c00u));
    }
    if (abs <= 0x33000000u)
        return sign;
    uint32_t exp = abs >> 23;
    uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - exp;
    uint32_t r = mant >> shift;
    uint32_t rest = mant & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rest > half || (rest == half && (r & 1u)))
        r++;
    return (uint16_t)(sign | r);
}

__device__ __forceinline__ float bf16_to_float(uint16_t b)
{
    return __uint_as_float((uint32_t)b << 16);
}

__device__ __forceinline__ uint16_t float_to_bf16(float f)
{
    uint32_t u = __float_as_uint(f);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t quiet = (u >> 16) | 0x40u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
}

enum { OP_SUM, OP_PROD, OP_MAX, OP_MIN };

// Integers: sum and product in the unsigned type (wrap around), max and min in
// the declared one.
template <typename T, typename U> struct IntType {
    typedef T S;
    template <int Op> __device__ static __forceinline__ T apply(T x, T y)
    {
        if (Op == OP_SUM)
            return (T)((U)x + (U)y);
        if (Op == OP_PROD)
            return (T)((U)x * (U)y);
        if (Op == OP_MAX)
            return x > y ? x : y;
        return x < y ? x : y;
    }
    // Truncating division, in a type wide enough for the divisor (int8 by 200).
    __device__ static __forceinline__ T div(T x, int d)
    {
        if ((T)-1 < (T)0)
            return (T)((int64_t)x / (int64_t)d);
        return (T)((uint64_t)x / (uint64_t)d);
    }
};

template <typename F> __device__ __forceinline__ F fapply_max(F x, F y)
{
    return x > y || isnan(x) ? x : y;
}

template <typename F> __device__ __forceinline__ F fapply_min(F x, F y)
{
    return x < y || isnan(x) ? x : y;
}

template <typename F, int Op> __device__ __forceinline__ F fapply(F x, F y)
{
    if (Op == OP_SUM)
        return __fadd_rn(x, y);
    if (Op == OP_PROD)
        return __fmul_rn(x, y);
    if (Op == OP_MAX)
        return fapply_max(x, y);
    return fapply_min(x, y);
}

template <> __device__ __forceinline__ double fapply<double, OP_SUM>(double x, double y)
{
    return __dadd_rn(x, y);
}

template <> __device__ __forceinline__ double fapply<double, OP_PROD>(double x, double y)
{
    return __dmul_rn(x, y);
}

template <typename F> struct FloatType {
    typedef F S;
    template <int Op> __device__ static __forceinline__ F apply(F x, F y)
    {
        return fapply<F, Op>(x, y);
    }
    __device__ static __forceinline__ F div(F x, int d) { return x / (F)d; }
};

struct HalfType {
    typedef uint16_t S;
    template <int Op> __device__ static __forceinline__ uint16_t apply(uint16_t x, uint16_t y)
    {
        return float_to_half(fapply<float, Op>(half_to_float(x), half_to_float(y)));
    }
    __device__ static __forceinline__ uint16_t div(uint16_t x, int d)
    {
        return float_to_half(__fdiv_rn(half_to_float(x), (float)d));
    }
};

struct Bf16Type {
    typedef uint16_t S;
    template <int Op> __device__ static __forceinline__ uint16_t apply(uint16_t x, uint16_t y)
    {
        return float_to_bf16(fapply<float, Op>(bf16_to_float(x), bf16_to_float(y)));
    }
    __device__ static __forceinline__ uint16_t div(uint16_t x, int d)
    {
        return float_to_bf16(__fdiv_rn(bf16_to_float(x), (float)d));
    }
};

template <typename Ty, int Op>
__global__ void reduce_kernel(typename Ty::S *dst, const typename Ty::S *a,
                              const typename Ty::S *b, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = Ty::template apply<Op>(a[i], b[i]);
}

template <typename Ty>
__global__ void div_kernel(typename Ty::S *dst, const typename Ty::S *src, size_t n, int d)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = Ty::div(src[i], d);
}

const unsigned kThreads = 256;

unsigned blocks_for(size_t n)
{
    size_t b = (n + kThreads - 1) / kThreads;
    return (unsigned)(b < 4096 ? (b ? b : 1) : 4096);
}

template <typename Ty>
int launch(int op, void *dst, const void *a, const void *b, size_t n, cudaStream_t s)
{
    typedef typename Ty::S S;
    S *d = (S *)dst;
    const S *x = (const S *)a, *y = (const S *)b;
    switch (op) {
    case collSum:
    case collAvg:
        reduce_kernel<Ty, OP_SUM><<<blocks_for(n), kThreads, 0, s>>>(d, x, y, n);
        break;
    case collProd:
        reduce_kernel<Ty, OP_PROD><<<blocks_for(n), kThreads, 0, s>>>(d, x, y, n);
        break;
    case collMax:
        reduce_kernel<Ty, OP_MAX><<<blocks_for(n), kThreads, 0, s>>>(d, x, y, n);
        break;
    case collMin:
        reduce_kernel<Ty, OP_MIN><<<blocks_for(n), kThreads, 0, s>>>(d, x, y, n);
        break;
    default:
        return (int)cudaErrorInvalidValue;
    }
    return (int)cudaGetLastError();
}

template <typename Ty>
int launch_div(void *dst, const void *src, size_t n, int d, cudaStream_t s)
{
    typedef typename Ty::S S;
    div_kernel<Ty><<<blocks_for(n), kThreads, 0, s>>>((S *)dst, (const S *)src, n, d);
    return (int)cudaGetLastError();
}

} // namespace

extern "C" int coll_cuda_reduce(collRedOp_t op, collDataType_t t, void *dst, const void *a,
                                const void *b, size_t n, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    if (n == 0)
        return 0;
    switch (t) {
    case collInt8: return launch<IntType<int8_t, uint8_t>>(op, dst, a, b, n, s);
    case collUint8: return launch<IntType<uint8_t, uint8_t>>(op, dst, a, b, n, s);
    case collInt32: return launch<IntType<int32_t, uint32_t>>(op, dst, a, b, n, s);
    case collUint32: return launch<IntType<uint32_t, uint32_t>>(op, dst, a, b, n, s);
    case collInt64: return launch<IntType<int64_t, uint64_t>>(op, dst, a, b, n, s);
    case collUint64: return launch<IntType<uint64_t, uint64_t>>(op, dst, a, b, n, s);
    case collFloat16: return launch<HalfType>(op, dst, a, b, n, s);
    case collFloat32: return launch<FloatType<float>>(op, dst, a, b, n, s);
    case collFloat64: return launch<FloatType<double>>(op, dst, a, b, n, s);
    case collBfloat16: return launch<Bf16Type>(op, dst, a, b, n, s);
    default: return (int)cudaErrorInvalidValue;
    }
}

extern "C" int coll_cuda_reduce_div(collDataType_t t, void *dst, const void *src, size_t n,
                                    int divisor, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    if (n == 0)
        return 0;
    switch (t) {
    case collInt8: return launch_div<IntType<int8_t, uint8_t>>(dst, src, n, divisor, s);
    case collUint8: return launch_div<IntType<uint8_t, uint8_t>>(dst, src, n, divisor, s);
    case collInt32: return launch_div<IntType<int32_t, uint32_t>>(dst, src, n, divisor, s);
    case collUint32: return launch_div<IntType<uint32_t, uint32_t>>(dst, src, n, divisor, s);
    case collInt64: return launch_div<IntType<int64_t, uint64_t>>(dst, src, n, divisor, s);
    case collUint64: return launch_div<IntType<uint64_t, uint64_t>>(dst, src, n, divisor, s);
    case collFloat16: return launch_div<HalfType>(dst, src, n, divisor, s);
    case collFloat32: return launch_div<FloatType<float>>(dst, src, n, divisor, s);
    case collFloat64: return launch_div<FloatType<double>>(dst, src, n, divisor, s);
    case collBfloat16: return launch_div<Bf16Type>(dst, src, n, divisor, s);
    default: return (int)cudaErrorInvalidValue;
    }
}
