/*
 * What a machine's CUDA stack gives, and checks of what libcollective's CUDA support will
 * rely on, in one program with no dependency on the library.
 *
 * Every result is one line:
 *   PROBE <name>: <value>              a fact (versions, attributes, bandwidths)
 *   CHECK <name>: PASS|FAIL <detail>   a behaviour the library needs
 *
 *   1. versions and device attributes (unified addressing, mapped host memory, managed
 *      memory, POSIX fd export, GPUDirect RDMA, virtual memory management);
 *   2. cudaPointerGetAttributes on each kind of pointer a caller may hand the API, which is
 *      how the library will tell device buffers from host ones;
 *   3. elementwise sums of float32, float16 and bfloat16 on the GPU, bit for bit against a
 *      host reference that rounds to nearest even like the library's CPU kernels;
 *   4. ordering across streams with an event;
 *   5. sharing device memory with a second process, through cudaIpc handles and through
 *      cuMem allocations exported as POSIX file descriptors;
 *   6. H2D, D2H and D2D copy bandwidths;
 *   7. a second process's context creation next to this one's.
 *
 * The second process is this program run again (--ipc-child, --vmm-child): CUDA cannot be
 * used in a child forked after CUDA was initialised, so it is spawned with exec.
 *
 * Exit: 0 every CHECK passed, 1 some failed, 77 no usable CUDA device.  An alarm bounds the
 * run so that a hung driver call ends it instead of the harness's timeout.
 *
 * Build: nvcc -O2 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
 *             -Xcompiler -Wall probe.cu -o probe -lcuda
 */
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define WATCHDOG_S 120
#define SHARE_BYTES ((size_t)64 << 20) /* the buffer shared with the child, and copied */
#define REDUCE_N ((size_t)1 << 20)     /* elements per reduction check */
#define THREADS 256
#define BLOCKS 1024                    /* grid-stride loops cover any length */

/* The parent fills the shared buffer with one pattern, the child checks it and writes the
 * other, and the parent checks that. */
#define SEED_PARENT 0x9e3779b9u
#define SEED_CHILD 0x7f4a7c15u

/* Child exit codes. */
#define CHILD_OK 0
#define CHILD_MISMATCH 1
#define CHILD_API_ERROR 2
#define CHILD_WATCHDOG 3

static int failed_checks;
static volatile sig_atomic_t child_pid; /* killed by the watchdog if it is still running */
static volatile sig_atomic_t is_child;

/* ---- reporting ---- */

static void check(const char *name, bool pass, const char *fmt, ...)
{
    va_list ap;
    printf("CHECK %s: %s ", name, pass ? "PASS" : "FAIL");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    if (!pass)
        failed_checks++;
}

static void rt_error(char *buf, size_t size, const char *what, cudaError_t e)
{
    snprintf(buf, size, "%s: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

static void drv_error(char *buf, size_t size, const char *what, CUresult r)
{
    const char *name = NULL, *text = NULL;
    if (cuGetErrorName(r, &name) != CUDA_SUCCESS)
        name = NULL;
    if (cuGetErrorString(r, &text) != CUDA_SUCCESS)
        text = NULL;
    snprintf(buf, size, "%s: %s (%s) [CUresult %d]", what, name ? name : "?", text ? text : "?",
             (int)r);
}

/* Inside a function with `char err[ERR_LEN]` and a label `out`: on failure, describe the call
 * in err and jump to the cleanup.  Variables are declared before the first of these, since a
 * goto may not cross an initialisation in C++. */
#define ERR_LEN 512
#define RT(call)                                                                               \
    do {                                                                                       \
        cudaError_t rt_ = (call);                                                              \
        if (rt_ != cudaSuccess) {                                                              \
            rt_error(err, sizeof(err), #call, rt_);                                            \
            goto out;                                                                          \
        }                                                                                      \
    } while (0)
#define DRV(call)                                                                              \
    do {                                                                                       \
        CUresult drv_ = (call);                                                                \
        if (drv_ != CUDA_SUCCESS) {                                                            \
            drv_error(err, sizeof(err), #call, drv_);                                          \
            goto out;                                                                          \
        }                                                                                      \
    } while (0)
/* A kernel launch reports its configuration errors through cudaGetLastError. */
#define LAUNCHED(kernel)                                                                       \
    do {                                                                                       \
        cudaError_t rt_ = cudaGetLastError();                                                  \
        if (rt_ != cudaSuccess) {                                                              \
            rt_error(err, sizeof(err), "launch of " kernel, rt_);                              \
            goto out;                                                                          \
        }                                                                                      \
    } while (0)

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* The watchdog: a driver call that never returns ends the run with a FAIL line, and takes a
 * running child with it.  Only async-signal-safe calls here. */
static void on_alarm(int sig)
{
    static const char parent_msg[] =
        "CHECK watchdog: FAIL the alarm fired: a CUDA call or the child hung\n";
    static const char child_msg[] = "PROBE child_error: the child's alarm fired: a CUDA call hung\n";
    const char *msg = is_child ? child_msg : parent_msg;
    size_t len = is_child ? sizeof(child_msg) - 1 : sizeof(parent_msg) - 1;
    (void)sig;
    if (child_pid > 0)
        kill((pid_t)child_pid, SIGKILL);
    if (write(STDOUT_FILENO, msg, len) < 0) {
        /* nowhere left to say it; the exit status still does */
    }
    _exit(is_child ? CHILD_WATCHDOG : 1);
}

/* ---- kernels ---- */

__host__ __device__ static inline uint32_t pattern(size_t i, uint32_t seed)
{
    uint32_t x = (uint32_t)i * 2654435761u ^ seed;
    return x ^ (x >> 15);
}

__global__ void fill_pattern(uint32_t *p, size_t n, uint32_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = pattern(i, seed);
}

__global__ void count_mismatches(const uint32_t *p, size_t n, uint32_t seed,
                                 unsigned long long *bad)
{
    unsigned long long mine = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        mine += p[i] != pattern(i, seed);
    if (mine)
        atomicAdd(bad, mine);
}

/* The reductions: widen to float, add once, round back to nearest even.  One add per
 * element, so there is nothing for the compiler to contract into an FMA. */
__global__ void add_f32(const float *a, const float *b, float *c, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        c[i] = a[i] + b[i];
}

__global__ void add_f16(const __half *a, const __half *b, __half *c, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        c[i] = __float2half_rn(__half2float(a[i]) + __half2float(b[i]));
}

__global__ void add_bf16(const __nv_bfloat16 *a, const __nv_bfloat16 *b, __nv_bfloat16 *c,
                         size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        c[i] = __float2bfloat16_rn(__bfloat162float(a[i]) + __bfloat162float(b[i]));
}

/* Keeps a stream busy for about `cycles` SM clocks, so that work queued behind it on
 * another stream would run first if nothing ordered the two. */
__global__ void spin(long long cycles)
{
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

__global__ void fill_affine(uint32_t *x, size_t n, uint32_t mul, uint32_t add)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = (uint32_t)i * mul + add;
}

__global__ void scale(const uint32_t *x, uint32_t *y, size_t n, uint32_t k)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = x[i] * k;
}

/* ---- helpers on the device ---- */

/* Counts the words of p (bytes long) that differ from pattern(seed). */
static cudaError_t verify_pattern(const void *p, size_t bytes, uint32_t seed,
                                  unsigned long long *bad)
{
    unsigned long long *d_bad = NULL;
    cudaError_t e = cudaMalloc(&d_bad, sizeof(*d_bad));
    if (e != cudaSuccess)
        return e;
    if ((e = cudaMemset(d_bad, 0, sizeof(*d_bad))) == cudaSuccess) {
        count_mismatches<<<BLOCKS, THREADS>>>((const uint32_t *)p, bytes / 4, seed, d_bad);
        if ((e = cudaGetLastError()) == cudaSuccess)
            e = cudaMemcpy(bad, d_bad, sizeof(*bad), cudaMemcpyDeviceToHost);
    }
    cudaFree(d_bad);
    return e;
}

static cudaError_t write_pattern(void *p, size_t bytes, uint32_t seed)
{
    fill_pattern<<<BLOCKS, THREADS>>>((uint32_t *)p, bytes / 4, seed);
    cudaError_t e = cudaGetLastError();
    return e != cudaSuccess ? e : cudaDeviceSynchronize();
}

/* Bandwidth of cudaMemcpyAsync from src to dst, in GB/s (1e9 bytes a second): one warm-up,
 * then the best of five, timed with events on a stream of its own. */
static cudaError_t copy_gbps(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                             double *gbps)
{
    cudaStream_t s = NULL;
    cudaEvent_t t0 = NULL, t1 = NULL;
    float ms, best = 0;
    cudaError_t e;

    if ((e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaEventCreate(&t0)) != cudaSuccess || (e = cudaEventCreate(&t1)) != cudaSuccess)
        goto out;
    if ((e = cudaMemcpyAsync(dst, src, bytes, kind, s)) != cudaSuccess ||
        (e = cudaStreamSynchronize(s)) != cudaSuccess)
        goto out;
    for (int rep = 0; rep < 5; rep++) {
        if ((e = cudaEventRecord(t0, s)) != cudaSuccess ||
            (e = cudaMemcpyAsync(dst, src, bytes, kind, s)) != cudaSuccess ||
            (e = cudaEventRecord(t1, s)) != cudaSuccess ||
            (e = cudaEventSynchronize(t1)) != cudaSuccess ||
            (e = cudaEventElapsedTime(&ms, t0, t1)) != cudaSuccess)
            goto out;
        if (rep == 0 || ms < best)
            best = ms;
    }
    *gbps = best > 0 ? bytes / (best * 1e6) : 0;
out:
    if (t1)
        cudaEventDestroy(t1);
    if (t0)
        cudaEventDestroy(t0);
    if (s)
        cudaStreamDestroy(s);
    return e;
}

/* Time to create this process's context on device 0: cudaFree(0) forces it. */
static cudaError_t create_context(double *ms)
{
    double t0 = now_ms();
    cudaError_t e = cudaSetDevice(0);
    if (e == cudaSuccess)
        e = cudaFree(0);
    *ms = now_ms() - t0;
    return e;
}

/* ---- 1. versions and attributes ---- */

static void probe_rt_attr(const char *name, cudaDeviceAttr attr)
{
    int v = 0;
    cudaError_t e = cudaDeviceGetAttribute(&v, attr, 0);
    if (e == cudaSuccess)
        printf("PROBE %s: %d\n", name, v);
    else
        printf("PROBE %s: unknown (%s)\n", name, cudaGetErrorName(e));
    cudaGetLastError();
}

static void probe_drv_attr(const char *name, CUdevice_attribute attr)
{
    CUdevice dev;
    int v = 0;
    char err[ERR_LEN];
    CUresult r = cuDeviceGet(&dev, 0);
    if (r == CUDA_SUCCESS)
        r = cuDeviceGetAttribute(&v, attr, dev);
    if (r == CUDA_SUCCESS) {
        printf("PROBE %s: %d\n", name, v);
    } else {
        drv_error(err, sizeof(err), "cuDeviceGetAttribute", r);
        printf("PROBE %s: unknown (%s)\n", name, err);
    }
}

static void probe_device(void)
{
    cudaDeviceProp prop;
    char bus[32];
    size_t free_b = 0, total_b = 0;

    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
        printf("PROBE name: %s\n", prop.name);
        printf("PROBE compute_capability: %d.%d\n", prop.major, prop.minor);
        printf("PROBE sm_count: %d\n", prop.multiProcessorCount);
        printf("PROBE total_memory_MiB: %zu\n", prop.totalGlobalMem >> 20);
    } else {
        printf("PROBE name: unknown (%s)\n", cudaGetErrorName(cudaGetLastError()));
    }
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
        printf("PROBE free_memory_MiB: %zu of %zu\n", free_b >> 20, total_b >> 20);
    if (cudaDeviceGetPCIBusId(bus, sizeof(bus), 0) == cudaSuccess)
        printf("PROBE pci_bus_id: %s\n", bus);
    cudaGetLastError();

    probe_rt_attr("unified_addressing", cudaDevAttrUnifiedAddressing);
    probe_rt_attr("can_map_host_memory", cudaDevAttrCanMapHostMemory);
    probe_rt_attr("concurrent_managed_access", cudaDevAttrConcurrentManagedAccess);
    probe_rt_attr("pageable_memory_access", cudaDevAttrPageableMemoryAccess);
    probe_rt_attr("host_register_supported", cudaDevAttrHostRegisterSupported);
    probe_rt_attr("memory_pools_supported", cudaDevAttrMemoryPoolsSupported);
#if CUDART_VERSION >= 12000
    probe_rt_attr("ipc_event_supported", cudaDevAttrIpcEventSupport);
#endif
    probe_rt_attr("compute_mode", cudaDevAttrComputeMode);
    probe_drv_attr("handle_type_posix_fd_supported",
                   CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED);
#if CUDA_VERSION >= 11030
    probe_drv_attr("gpu_direct_rdma_supported", CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED);
#else
    printf("PROBE gpu_direct_rdma_supported: attribute not in this toolkit\n");
#endif
#if CUDA_VERSION >= 11070
    probe_drv_attr("dma_buf_supported", CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED);
#endif
    probe_drv_attr("virtual_memory_management_supported",
                   CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED);
}

/* ---- 2. what cudaPointerGetAttributes says about each kind of pointer ---- */

static const char *memory_type_name(int t)
{
    switch (t) {
    case cudaMemoryTypeUnregistered:
        return "unregistered";
    case cudaMemoryTypeHost:
        return "host";
    case cudaMemoryTypeDevice:
        return "device";
    case cudaMemoryTypeManaged:
        return "managed";
    default:
        return "?";
    }
}

/* Prints the call's return, the type and the pointers it gives, and the error that
 * cudaGetLastError then clears (a failed query must not poison the next call). */
static void probe_pointer(const char *what, const void *p)
{
    cudaPointerAttributes a;
    cudaError_t e, last;

    memset(&a, 0, sizeof(a));
    a.type = (cudaMemoryType)-1;
    e = cudaPointerGetAttributes(&a, p);
    last = cudaGetLastError();
    printf("PROBE ptrattr_%s: ret=%s type=%d(%s) device=%d devicePointer=%s hostPointer=%s "
           "last_error=%s\n",
           what, cudaGetErrorName(e), (int)a.type, memory_type_name((int)a.type), a.device,
           a.devicePointer == p ? "same" : a.devicePointer ? "other" : "null",
           a.hostPointer == p ? "same" : a.hostPointer ? "other" : "null",
           cudaGetErrorName(last));
}

static void probe_pointers(void)
{
    const size_t bytes = 1 << 20;
    void *dev = NULL, *managed = NULL, *pinned = NULL, *stale = NULL;
    char *registered = (char *)malloc(bytes), *plain = (char *)malloc(bytes);
    char stack[64];
    cudaError_t e;

    if ((e = cudaMalloc(&dev, bytes)) == cudaSuccess) {
        probe_pointer("cudaMalloc", dev);
        probe_pointer("cudaMalloc_interior", (char *)dev + 4096);
    } else {
        printf("PROBE ptrattr_cudaMalloc: cudaMalloc failed (%s)\n", cudaGetErrorName(e));
        dev = NULL;
    }
    if ((e = cudaMallocManaged(&managed, bytes, cudaMemAttachGlobal)) == cudaSuccess) {
        probe_pointer("cudaMallocManaged", managed);
    } else {
        printf("PROBE ptrattr_cudaMallocManaged: cudaMallocManaged failed (%s)\n",
               cudaGetErrorName(e));
        managed = NULL;
    }
    if ((e = cudaHostAlloc(&pinned, bytes, cudaHostAllocDefault)) == cudaSuccess) {
        probe_pointer("cudaHostAlloc", pinned);
    } else {
        printf("PROBE ptrattr_cudaHostAlloc: cudaHostAlloc failed (%s)\n", cudaGetErrorName(e));
        pinned = NULL;
    }
    if ((e = cudaHostRegister(registered, bytes, cudaHostRegisterDefault)) == cudaSuccess) {
        probe_pointer("cudaHostRegister", registered);
        probe_pointer("cudaHostRegister_interior", registered + 4096);
        cudaHostUnregister(registered);
    } else {
        printf("PROBE ptrattr_cudaHostRegister: cudaHostRegister failed (%s)\n",
               cudaGetErrorName(e));
    }
    cudaGetLastError();
    probe_pointer("malloc", plain);
    probe_pointer("stack", stack);
    probe_pointer("null", NULL);
    if (cudaMalloc(&stale, bytes) == cudaSuccess && cudaFree(stale) == cudaSuccess)
        probe_pointer("freed_cudaMalloc", stale);
    cudaGetLastError();

    if (dev)
        cudaFree(dev);
    if (managed)
        cudaFree(managed);
    if (pinned)
        cudaFreeHost(pinned);
    free(registered);
    free(plain);
    cudaGetLastError();
}

/* ---- 3. reductions, bit for bit against the host ---- */

static uint32_t float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static float bits_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* float16 to float32 is exact: mantissa times a power of two. */
static float host_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    float f;

    if (exp == 0x1f) /* infinity, or NaN with its payload and the quiet bit */
        return bits_float(sign | 0x7f800000u | (mant ? 0x400000u | mant << 13 : 0));
    f = exp ? ldexpf((float)(mant | 0x400u), (int)exp - 25) : ldexpf((float)mant, -24);
    return sign ? -f : f;
}

/* float32 to float16, rounding to nearest with ties to even, subnormals kept. */
static uint16_t host_float_to_half(float f)
{
    uint32_t u = float_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t exp = (u >> 23) & 0xffu, mant = u & 0x7fffffu;
    int e = (int)exp - 127;
    uint32_t h, rest, full, shift, halfway;

    if (exp == 0xff) /* infinity; NaN stays NaN, quietened */
        return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u | mant >> 13 : 0));
    if (e > 15) /* beyond the largest finite float16 before any rounding */
        return (uint16_t)(sign | 0x7c00u);
    if (e >= -14) {
        /* A normal float16: 10 of the 23 mantissa bits stay, the 13 others round.  A carry
         * out of the mantissa moves into the exponent, up to infinity, as it should. */
        h = (uint32_t)(e + 15) << 10 | mant >> 13;
        rest = mant & 0x1fffu;
        if (rest > 0x1000u || (rest == 0x1000u && (h & 1)))
            h++;
        return (uint16_t)(sign | h);
    }
    if (exp == 0) /* float32 subnormals are far below half of 2^-24 */
        return sign;
    /* A float16 subnormal counts units of 2^-24: the value is full * 2^(e-23), which is
     * full >> shift units.  Rounding 0x3ff up gives 0x400, the smallest normal. */
    full = mant | 0x800000u;
    shift = (uint32_t)(-e - 1);
    if (shift > 24) /* under half a unit */
        return sign;
    h = full >> shift;
    rest = full & ((1u << shift) - 1);
    halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (h & 1)))
        h++;
    return (uint16_t)(sign | h);
}

static float host_bf16_to_float(uint16_t b)
{
    return bits_float((uint32_t)b << 16);
}

/* bfloat16 is the top half of a float32: round the low half to nearest even by an add whose
 * carry moves up into the exponent (and past the largest finite value, to infinity). */
static uint16_t host_float_to_bf16(float f)
{
    uint32_t u = float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

static uint64_t rng_next(void)
{
    /* xorshift64*: plenty for test data. */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}

enum elem { ELEM_F32, ELEM_F16, ELEM_BF16 };

struct elem_kind {
    const char *name;
    size_t size;
    uint32_t exp_mask;  /* all ones: infinity or NaN */
    uint32_t near_mask; /* bits flipped to make a neighbour: sign, low exponent bit, mantissa */
    uint32_t max_finite, min_subnormal;
};

/* In the order of enum elem. */
static const struct elem_kind elem_kinds[] = {
    { "float32", 4, 0x7f800000u, 0x80ffffffu, 0x7f7fffffu, 1 },
    { "float16", 2, 0x7c00u, 0x87ffu, 0x7bffu, 1 },
    { "bfloat16", 2, 0x7f80u, 0x80ffu, 0x7f7fu, 1 },
};

static uint32_t random_finite(const struct elem_kind *k, uint32_t base, bool near)
{
    uint32_t mask = k->size == 4 ? 0xffffffffu : 0xffffu, v;
    do {
        v = (uint32_t)(rng_next() >> 16);
        v = near ? base ^ (v & k->near_mask) : v & mask;
    } while ((v & k->exp_mask) == k->exp_mask);
    return v;
}

static uint32_t load(const void *p, size_t i, size_t size)
{
    return size == 4 ? ((const uint32_t *)p)[i] : ((const uint16_t *)p)[i];
}

static void store(void *p, size_t i, size_t size, uint32_t v)
{
    if (size == 4)
        ((uint32_t *)p)[i] = v;
    else
        ((uint16_t *)p)[i] = (uint16_t)v;
}

static uint32_t host_add(enum elem t, uint32_t a, uint32_t b)
{
    switch (t) {
    case ELEM_F32:
        return float_bits(bits_float(a) + bits_float(b));
    case ELEM_F16:
        return host_float_to_half(host_half_to_float((uint16_t)a) +
                                  host_half_to_float((uint16_t)b));
    default:
        return host_float_to_bf16(host_bf16_to_float((uint16_t)a) +
                                  host_bf16_to_float((uint16_t)b));
    }
}

/* c = a + b on the device, n elements of type t, through device buffers. */
static cudaError_t device_add(enum elem t, const void *a, const void *b, void *c, size_t n)
{
    size_t bytes = n * elem_kinds[t].size;
    void *da = NULL, *db = NULL, *dc = NULL;
    cudaError_t e;

    if ((e = cudaMalloc(&da, bytes)) != cudaSuccess || (e = cudaMalloc(&db, bytes)) != cudaSuccess ||
        (e = cudaMalloc(&dc, bytes)) != cudaSuccess ||
        (e = cudaMemcpy(da, a, bytes, cudaMemcpyHostToDevice)) != cudaSuccess ||
        (e = cudaMemcpy(db, b, bytes, cudaMemcpyHostToDevice)) != cudaSuccess ||
        (e = cudaMemset(dc, 0xff, bytes)) != cudaSuccess)
        goto out;
    switch (t) {
    case ELEM_F32:
        add_f32<<<BLOCKS, THREADS>>>((const float *)da, (const float *)db, (float *)dc, n);
        break;
    case ELEM_F16:
        add_f16<<<BLOCKS, THREADS>>>((const __half *)da, (const __half *)db, (__half *)dc, n);
        break;
    case ELEM_BF16:
        add_bf16<<<BLOCKS, THREADS>>>((const __nv_bfloat16 *)da, (const __nv_bfloat16 *)db,
                                      (__nv_bfloat16 *)dc, n);
        break;
    }
    if ((e = cudaGetLastError()) == cudaSuccess)
        e = cudaMemcpy(c, dc, bytes, cudaMemcpyDeviceToHost);
out:
    cudaFree(da);
    cudaFree(db);
    cudaFree(dc);
    return e;
}

/* One type: REDUCE_N pairs, half of them random finite values of any magnitude, half
 * neighbours (close magnitudes, either sign) where the sum rounds or cancels, and the
 * edges first: overflow to infinity, the smallest subnormals, signed zeros. */
static void check_reduction(enum elem t)
{
    const struct elem_kind *k = &elem_kinds[t];
    const uint32_t sign = k->size == 4 ? 0x80000000u : 0x8000u;
    const uint32_t edges[][2] = {
        { k->max_finite, k->max_finite },
        { k->max_finite, sign | k->max_finite },
        { k->min_subnormal, k->min_subnormal },
        { sign | k->min_subnormal, k->min_subnormal },
        { 0, sign },
        { sign, sign },
    };
    const size_t n_edges = sizeof(edges) / sizeof(edges[0]);
    void *a = malloc(REDUCE_N * k->size), *b = malloc(REDUCE_N * k->size);
    void *c = malloc(REDUCE_N * k->size);
    size_t i, mismatches = 0, first = 0;
    char name[32], err[ERR_LEN];
    cudaError_t e;

    snprintf(name, sizeof(name), "reduce_sum_%s", k->name);
    if (!a || !b || !c) {
        check(name, false, "out of host memory");
        goto done;
    }
    for (i = 0; i < REDUCE_N; i++) {
        uint32_t x, y;
        if (i < n_edges) {
            x = edges[i][0];
            y = edges[i][1];
        } else {
            x = random_finite(k, 0, false);
            y = random_finite(k, x, i & 1);
        }
        store(a, i, k->size, x);
        store(b, i, k->size, y);
    }
    if ((e = device_add(t, a, b, c, REDUCE_N)) != cudaSuccess) {
        rt_error(err, sizeof(err), "device_add", e);
        check(name, false, "%s", err);
        goto done;
    }
    for (i = 0; i < REDUCE_N; i++) {
        if (load(c, i, k->size) != host_add(t, load(a, i, k->size), load(b, i, k->size))) {
            if (!mismatches)
                first = i;
            mismatches++;
        }
    }
    if (mismatches)
        check(name, false,
              "%zu of %zu elements differ; first at %zu: a=0x%x b=0x%x gpu=0x%x host=0x%x",
              mismatches, REDUCE_N, first, load(a, first, k->size), load(b, first, k->size),
              load(c, first, k->size),
              host_add(t, load(a, first, k->size), load(b, first, k->size)));
    else
        check(name, true, "%zu elements bitwise identical to the host's round-to-nearest-even",
              REDUCE_N);
done:
    free(a);
    free(b);
    free(c);
}

/* NaN in, what comes out: not checked (the library's host kernels keep the payload and set
 * the quiet bit; the device may give a canonical NaN), but worth knowing. */
static void probe_nan_sums(void)
{
    static const uint32_t f32[][2] = { { 0x7f800001u, 0x3f800000u }, { 0xffc12345u, 0x3f800000u },
                                       { 0x7f800000u, 0xff800000u } };
    static const uint16_t f16[][2] = { { 0x7c01u, 0x3c00u }, { 0xfe55u, 0x3c00u },
                                       { 0x7c00u, 0xfc00u } };
    static const uint16_t bf16[][2] = { { 0x7f81u, 0x3f80u }, { 0xffc5u, 0x3f80u },
                                        { 0x7f80u, 0xff80u } };
    const size_t n = 3;
    uint32_t a32[3], b32[3], c32[3];
    uint16_t a16[3], b16[3], c16[3];
    size_t i;

    for (i = 0; i < n; i++) {
        a32[i] = f32[i][0];
        b32[i] = f32[i][1];
    }
    if (device_add(ELEM_F32, a32, b32, c32, n) == cudaSuccess)
        for (i = 0; i < n; i++)
            printf("PROBE nan_sum_float32: 0x%08x + 0x%08x = gpu 0x%08x host 0x%08x\n", a32[i],
                   b32[i], c32[i], host_add(ELEM_F32, a32[i], b32[i]));
    for (int t = ELEM_F16; t <= ELEM_BF16; t++) {
        for (i = 0; i < n; i++) {
            a16[i] = t == ELEM_F16 ? f16[i][0] : bf16[i][0];
            b16[i] = t == ELEM_F16 ? f16[i][1] : bf16[i][1];
        }
        if (device_add((enum elem)t, a16, b16, c16, n) != cudaSuccess)
            continue;
        for (i = 0; i < n; i++)
            printf("PROBE nan_sum_%s: 0x%04x + 0x%04x = gpu 0x%04x host 0x%04x\n",
                   elem_kinds[t].name, a16[i], b16[i], c16[i],
                   host_add((enum elem)t, a16[i], b16[i]));
    }
    cudaGetLastError();
}

/* ---- 4. ordering across streams ---- */

/* Stream 1 spins, then writes x; stream 2 waits on an event recorded after the write, then
 * scales x into y and copies y to the host.  Without the wait, stream 2 would read the
 * 0xff fill while stream 1 is still spinning. */
static void check_stream_order(void)
{
    const size_t n = 1 << 20, bytes = n * sizeof(uint32_t);
    uint32_t *x = NULL, *y = NULL, *host = NULL;
    cudaStream_t s1 = NULL, s2 = NULL;
    cudaEvent_t written = NULL;
    size_t i, bad = 0, first = 0;
    cudaError_t q;
    char err[ERR_LEN] = "";
    bool ok = false;

    RT(cudaMalloc(&x, bytes));
    RT(cudaMalloc(&y, bytes));
    RT(cudaHostAlloc(&host, bytes, cudaHostAllocDefault));
    RT(cudaMemset(x, 0xff, bytes));
    RT(cudaMemset(y, 0xff, bytes));
    RT(cudaDeviceSynchronize());
    RT(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    RT(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    RT(cudaEventCreateWithFlags(&written, cudaEventDisableTiming));

    spin<<<1, 1, 0, s1>>>(20 * 1000 * 1000); /* about 10 ms */
    LAUNCHED("spin");
    fill_affine<<<BLOCKS, THREADS, 0, s1>>>(x, n, 3, 1);
    LAUNCHED("fill_affine");
    RT(cudaEventRecord(written, s1));
    RT(cudaStreamWaitEvent(s2, written, 0));
    scale<<<BLOCKS, THREADS, 0, s2>>>(x, y, n, 2);
    LAUNCHED("scale");
    RT(cudaMemcpyAsync(host, y, bytes, cudaMemcpyDeviceToHost, s2));
    RT(cudaStreamSynchronize(s2));
    /* Stream 2 finished after the event, so stream 1 has finished too. */
    q = cudaStreamQuery(s1);
    for (i = 0; i < n; i++) {
        if (host[i] != ((uint32_t)i * 3 + 1) * 2 && !bad++)
            first = i;
    }
    if (bad)
        snprintf(err, sizeof(err), "%zu of %zu values wrong; first y[%zu] = 0x%x", bad, n,
                 first, host[first]);
    else if (q != cudaSuccess)
        rt_error(err, sizeof(err), "cudaStreamQuery(s1) after s2 finished", q);
    else
        ok = true;
out:
    check("stream_event_order", ok, "%s",
          ok ? "kernel on s1, event, cudaStreamWaitEvent on s2, kernel and copy on s2" : err);
    if (written)
        cudaEventDestroy(written);
    if (s1)
        cudaStreamDestroy(s1);
    if (s2)
        cudaStreamDestroy(s2);
    cudaFree(x);
    cudaFree(y);
    cudaFreeHost(host);
    cudaGetLastError();
}

/* ---- 6. bandwidths ---- */

static void probe_bandwidths(void)
{
    void *host = NULL, *d1 = NULL, *d2 = NULL;
    double gbps;
    cudaError_t e;
    char err[ERR_LEN] = "";

    RT(cudaHostAlloc(&host, SHARE_BYTES, cudaHostAllocDefault));
    RT(cudaMalloc(&d1, SHARE_BYTES));
    RT(cudaMalloc(&d2, SHARE_BYTES));
    memset(host, 1, SHARE_BYTES);
    RT(cudaMemset(d1, 2, SHARE_BYTES));
    if ((e = copy_gbps(d1, host, SHARE_BYTES, cudaMemcpyHostToDevice, &gbps)) == cudaSuccess)
        printf("PROBE h2d_pinned_GBps: %.1f\n", gbps);
    else
        printf("PROBE h2d_pinned_GBps: failed (%s)\n", cudaGetErrorName(e));
    if ((e = copy_gbps(host, d1, SHARE_BYTES, cudaMemcpyDeviceToHost, &gbps)) == cudaSuccess)
        printf("PROBE d2h_pinned_GBps: %.1f\n", gbps);
    else
        printf("PROBE d2h_pinned_GBps: failed (%s)\n", cudaGetErrorName(e));
    if ((e = copy_gbps(d2, d1, SHARE_BYTES, cudaMemcpyDeviceToDevice, &gbps)) == cudaSuccess)
        printf("PROBE d2d_GBps: %.1f (bytes copied per second; each is read and written)\n",
               gbps);
    else
        printf("PROBE d2d_GBps: failed (%s)\n", cudaGetErrorName(e));
out:
    if (err[0])
        printf("PROBE bandwidth: not measured (%s)\n", err);
    cudaFreeHost(host);
    cudaFree(d1);
    cudaFree(d2);
    cudaGetLastError();
}

/* ---- 5 and 7. a second process ---- */

/* Runs this program again with argv, waits for it, and says in err how it ended if not
 * with status 0. */
static bool run_child(const char *self, char *const argv[], char *err, size_t size)
{
    pid_t pid;
    int status, rc;

    fflush(stdout);
    fflush(stderr);
    rc = posix_spawn(&pid, self, NULL, NULL, argv, environ);
    if (rc != 0) {
        snprintf(err, size, "posix_spawn %s: %s", self, strerror(rc));
        return false;
    }
    child_pid = pid;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            snprintf(err, size, "waitpid: %s", strerror(errno));
            child_pid = 0;
            return false;
        }
    }
    child_pid = 0;
    if (WIFEXITED(status) && WEXITSTATUS(status) == CHILD_OK)
        return true;
    if (WIFEXITED(status))
        snprintf(err, size, "the child exited with %d (%s; its child_error line says why)",
                 WEXITSTATUS(status),
                 WEXITSTATUS(status) == CHILD_MISMATCH    ? "it saw the wrong pattern"
                 : WEXITSTATUS(status) == CHILD_WATCHDOG  ? "it hung"
                 : WEXITSTATUS(status) == CHILD_API_ERROR ? "a CUDA call failed"
                                                          : "unexpected status");
    else if (WIFSIGNALED(status))
        snprintf(err, size, "the child died of signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else
        snprintf(err, size, "the child ended with wait status 0x%x", status);
    return false;
}

static void to_hex(char *out, const void *p, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[b[i] >> 4];
        out[2 * i + 1] = digits[b[i] & 15];
    }
    out[2 * n] = '\0';
}

static bool from_hex(void *p, size_t n, const char *hex)
{
    unsigned char *b = (unsigned char *)p;
    if (strlen(hex) != 2 * n)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1)
            return false;
        b[i] = (unsigned char)v;
    }
    return true;
}

/* The child's side of both sharing checks, once the peer's memory is mapped at peer: check
 * the parent's pattern, time a copy out of it into memory of the child's own, and write
 * the child's pattern for the parent to check. */
static int child_use_peer(const char *tag, void *peer, size_t bytes)
{
    void *mine = NULL;
    unsigned long long bad = 0;
    double gbps = 0;
    char err[ERR_LEN] = "";
    int rc = CHILD_API_ERROR;

    RT(verify_pattern(peer, bytes, SEED_PARENT, &bad));
    if (bad) {
        snprintf(err, sizeof(err), "%llu of %zu words of the parent's pattern differ", bad,
                 bytes / 4);
        rc = CHILD_MISMATCH;
        goto out;
    }
    /* This process's own allocation and kernels, while the parent's context is alive. */
    RT(cudaMalloc(&mine, bytes));
    RT(copy_gbps(mine, peer, bytes, cudaMemcpyDeviceToDevice, &gbps));
    printf("PROBE %s_copy_GBps: %.1f (64 MiB from the peer's memory into the child's own)\n",
           tag, gbps);
    RT(verify_pattern(mine, bytes, SEED_PARENT, &bad));
    if (bad) {
        snprintf(err, sizeof(err), "the copy from the peer's memory has %llu wrong words", bad);
        rc = CHILD_MISMATCH;
        goto out;
    }
    RT(write_pattern(peer, bytes, SEED_CHILD));
    rc = CHILD_OK;
out:
    if (rc != CHILD_OK)
        printf("PROBE child_error: %s: %s\n", tag, err);
    cudaFree(mine);
    return rc;
}

static int ipc_child(const char *hex)
{
    cudaIpcMemHandle_t handle;
    void *peer = NULL;
    double ms;
    char err[ERR_LEN] = "";
    int rc = CHILD_API_ERROR;

    RT(create_context(&ms));
    printf("PROBE ipc_child_context_ms: %.1f (a second process's context, the first alive)\n",
           ms);
    if (!from_hex(&handle, sizeof(handle), hex)) {
        snprintf(err, sizeof(err), "the handle argument is not %zu bytes of hex",
                 sizeof(handle));
        goto out;
    }
    RT(cudaIpcOpenMemHandle(&peer, handle, cudaIpcMemLazyEnablePeerAccess));
    rc = child_use_peer("ipc", peer, SHARE_BYTES);
    RT(cudaIpcCloseMemHandle(peer));
    peer = NULL;
out:
    if (err[0])
        printf("PROBE child_error: ipc: %s\n", err);
    return err[0] ? CHILD_API_ERROR : rc;
}

/* Parent: cudaMalloc, pattern, cudaIpcGetMemHandle, the child opens it by the handle's
 * bytes in hex on its command line, checks and rewrites the buffer; the parent checks the
 * rewrite. */
static void check_ipc_legacy(const char *self)
{
    void *buf = NULL;
    cudaIpcMemHandle_t handle;
    char hex[2 * sizeof(cudaIpcMemHandle_t) + 1];
    char arg0[] = "probe", flag[] = "--ipc-child";
    char *argv[] = { arg0, flag, hex, NULL };
    unsigned long long bad = 0;
    char err[ERR_LEN] = "";
    bool ok = false;

    RT(cudaMalloc(&buf, SHARE_BYTES));
    RT(write_pattern(buf, SHARE_BYTES, SEED_PARENT));
    RT(cudaIpcGetMemHandle(&handle, buf));
    to_hex(hex, &handle, sizeof(handle));
    if (!run_child(self, argv, err, sizeof(err)))
        goto out;
    RT(verify_pattern(buf, SHARE_BYTES, SEED_CHILD, &bad));
    if (bad)
        snprintf(err, sizeof(err), "%llu of %zu words of the child's pattern differ", bad,
                 SHARE_BYTES / 4);
    else
        ok = true;
out:
    check("cuda_ipc_mem_handle", ok, "%s",
          ok ? "64 MiB cudaMalloc shared by cudaIpcGetMemHandle: the child read the parent's "
               "pattern and the parent read the child's"
             : err);
    cudaFree(buf);
    cudaGetLastError();
}

static void vmm_prop(CUmemAllocationProp *prop)
{
    memset(prop, 0, sizeof(*prop));
    prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop->location.id = 0;
    prop->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
}

/* Reserves an address range for the allocation and maps it read-write for device 0. */
static CUresult vmm_map(CUmemGenericAllocationHandle mh, size_t size, size_t align,
                        CUdeviceptr *va)
{
    CUmemAccessDesc access;
    CUresult r = cuMemAddressReserve(va, size, align, 0, 0);
    if (r != CUDA_SUCCESS)
        return r;
    if ((r = cuMemMap(*va, size, 0, mh, 0)) != CUDA_SUCCESS) {
        cuMemAddressFree(*va, size);
        return r;
    }
    memset(&access, 0, sizeof(access));
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = 0;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if ((r = cuMemSetAccess(*va, size, &access, 1)) != CUDA_SUCCESS) {
        cuMemUnmap(*va, size);
        cuMemAddressFree(*va, size);
    }
    return r;
}

static int vmm_child(int fd, size_t size)
{
    CUmemGenericAllocationHandle mh = 0;
    CUmemAllocationProp prop;
    CUdeviceptr va = 0;
    size_t gran = 0;
    double ms;
    char err[ERR_LEN] = "";
    int rc = CHILD_API_ERROR;

    RT(create_context(&ms));
    printf("PROBE vmm_child_context_ms: %.1f\n", ms);
    DRV(cuMemImportFromShareableHandle(&mh, (void *)(uintptr_t)fd,
                                       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    DRV(cuMemGetAllocationPropertiesFromHandle(&prop, mh));
    DRV(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    DRV(vmm_map(mh, size, gran, &va));
    rc = child_use_peer("vmm", (void *)va, SHARE_BYTES);
    cuMemUnmap(va, size);
    cuMemAddressFree(va, size);
out:
    if (err[0])
        printf("PROBE child_error: vmm: %s\n", err);
    if (mh)
        cuMemRelease(mh);
    close(fd);
    return err[0] ? CHILD_API_ERROR : rc;
}

/* Parent: cuMemCreate with a POSIX fd handle type, map, pattern, export to an fd that the
 * child inherits across exec (the fd number goes on its command line); the child imports,
 * maps, checks and rewrites; the parent checks the rewrite. */
static void check_ipc_vmm(const char *self)
{
    CUmemAllocationProp prop;
    CUmemGenericAllocationHandle mh = 0;
    CUdeviceptr va = 0;
    size_t gran = 0, size = 0;
    int fd = -1, flags;
    char fd_arg[16], size_arg[32];
    char arg0[] = "probe", flag[] = "--vmm-child";
    char *argv[] = { arg0, flag, fd_arg, size_arg, NULL };
    unsigned long long bad = 0;
    char err[ERR_LEN] = "";
    bool ok = false, mapped = false;

    vmm_prop(&prop);
    DRV(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    printf("PROBE vmm_granularity: %zu\n", gran);
    size = (SHARE_BYTES + gran - 1) / gran * gran;
    DRV(cuMemCreate(&mh, size, &prop, 0));
    DRV(vmm_map(mh, size, gran, &va));
    mapped = true;
    probe_pointer("cuMemMap", (void *)va);
    RT(write_pattern((void *)va, SHARE_BYTES, SEED_PARENT));
    DRV(cuMemExportToShareableHandle(&fd, mh, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    /* The driver may set close-on-exec; the child needs this fd across exec. */
    if ((flags = fcntl(fd, F_GETFD)) < 0 || fcntl(fd, F_SETFD, flags & ~FD_CLOEXEC) < 0) {
        snprintf(err, sizeof(err), "fcntl on the exported fd: %s", strerror(errno));
        goto out;
    }
    snprintf(fd_arg, sizeof(fd_arg), "%d", fd);
    snprintf(size_arg, sizeof(size_arg), "%zu", size);
    if (!run_child(self, argv, err, sizeof(err)))
        goto out;
    RT(verify_pattern((void *)va, SHARE_BYTES, SEED_CHILD, &bad));
    if (bad)
        snprintf(err, sizeof(err), "%llu of %zu words of the child's pattern differ", bad,
                 SHARE_BYTES / 4);
    else
        ok = true;
out:
    check("cumem_posix_fd", ok, "%s",
          ok ? "64 MiB cuMemCreate exported as a POSIX fd: the child imported and mapped it, "
               "read the parent's pattern, and the parent read the child's"
             : err);
    if (fd >= 0)
        close(fd);
    if (mapped) {
        cuMemUnmap(va, size);
        cuMemAddressFree(va, size);
    }
    if (mh)
        cuMemRelease(mh);
    cudaGetLastError();
}

/* ---- main ---- */

int main(int argc, char **argv)
{
    char self[4096];
    ssize_t len;
    int driver = 0, runtime = 0, count = 0;
    double ms;
    cudaError_t e;

    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGALRM, on_alarm);
    alarm(WATCHDOG_S);

    if (argc == 3 && strcmp(argv[1], "--ipc-child") == 0) {
        is_child = 1;
        return ipc_child(argv[2]);
    }
    if (argc == 4 && strcmp(argv[1], "--vmm-child") == 0) {
        is_child = 1;
        return vmm_child(atoi(argv[2]), (size_t)strtoull(argv[3], NULL, 10));
    }
    if (argc != 1) {
        fprintf(stderr, "usage: %s   (the other forms are its own children)\n", argv[0]);
        return 2;
    }

    /* The path to run again for the children: argv[0] may not name a file. */
    len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (len > 0)
        self[len] = '\0';
    else
        snprintf(self, sizeof(self), "%s", argv[0]);

    e = cudaDriverGetVersion(&driver);
    printf("PROBE driver_version: %d (%d.%d)%s\n", driver, driver / 1000, driver % 1000 / 10,
           e != cudaSuccess ? " cudaDriverGetVersion failed" : driver ? "" : " (no driver)");
    cudaRuntimeGetVersion(&runtime);
    printf("PROBE runtime_version: %d (%d.%d), built against %d\n", runtime, runtime / 1000,
           runtime % 1000 / 10, CUDART_VERSION);
    e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        printf("PROBE device_count: 0 (cudaGetDeviceCount: %s: %s)\n", cudaGetErrorName(e),
               cudaGetErrorString(e));
        printf("PROBE result: no usable CUDA device; nothing checked\n");
        return 77;
    }
    printf("PROBE device_count: %d%s\n", count, count > 1 ? " (device 0 is used)" : "");
    if (count == 0) {
        printf("PROBE result: no CUDA device; nothing checked\n");
        return 77;
    }
    e = create_context(&ms);
    if (e != cudaSuccess) {
        char err[ERR_LEN];
        rt_error(err, sizeof(err), "cudaSetDevice(0); cudaFree(0)", e);
        check("context", false, "%s", err);
        return 1;
    }
    printf("PROBE context_create_ms: %.1f\n", ms);

    probe_device();
    probe_pointers();
    check_reduction(ELEM_F32);
    check_reduction(ELEM_F16);
    check_reduction(ELEM_BF16);
    probe_nan_sums();
    check_stream_order();
    probe_bandwidths();
    check_ipc_legacy(self);
    check_ipc_vmm(self);

    printf("PROBE checks_failed: %d\n", failed_checks);
    return failed_checks ? 1 : 0;
}
