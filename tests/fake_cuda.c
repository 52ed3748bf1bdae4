/* A stand-in for the CUDA driver (libcuda.so.1) for tests/test_memtype.c: its
 * cuPointerGetAttribute calls the memory in one range device memory and in
 * another managed memory; anything else is unknown to it, as malloc'ed memory is
 * to the real driver.  Only the two attributes the library asks for. */
#include <stdint.h>

void fake_cuda_set(uintptr_t dev_lo, uintptr_t dev_hi, uintptr_t man_lo, uintptr_t man_hi);
int cuPointerGetAttribute(void *data, int attribute, uintptr_t ptr);

static uintptr_t dlo, dhi, mlo, mhi;

__attribute__((visibility("default"))) void fake_cuda_set(uintptr_t dev_lo, uintptr_t dev_hi,
                                                           uintptr_t man_lo, uintptr_t man_hi)
{
    dlo = dev_lo, dhi = dev_hi, mlo = man_lo, mhi = man_hi;
}

__attribute__((visibility("default"))) int cuPointerGetAttribute(void *data, int attribute,
                                                                  uintptr_t ptr)
{
    int dev = ptr >= dlo && ptr < dhi, man = ptr >= mlo && ptr < mhi;
    if (!dev && !man)
        return 1; /* CUDA_ERROR_INVALID_VALUE */
    if (attribute == 8) { /* CU_POINTER_ATTRIBUTE_IS_MANAGED */
        *(unsigned int *)data = (unsigned int)man;
        return 0;
    }
    if (attribute == 2) { /* CU_POINTER_ATTRIBUTE_MEMORY_TYPE: CU_MEMORYTYPE_DEVICE */
        *(unsigned int *)data = 2;
        return 0;
    }
    return 1;
}
