/* What kind of memory a buffer is: host, or memory of the CUDA driver (device,
 * managed).  Device buffers take another path (lib/core/device.c: staged on
 * CUDA streams), so they must be told apart before anything reads them.  The
 * driver is asked only when the process has it loaded (libcuda.so.1, which the
 * CUDA runtime loads, static or shared): a process that never loaded it has no
 * device memory, and the check then costs one load of a flag. */
#ifndef COLL_MEMTYPE_H
#define COLL_MEMTYPE_H

#include <stddef.h>

enum coll_memtype {
    COLL_MEM_HOST = 0,     /* plain, or registered with CUDA (cudaHostRegister) */
    COLL_MEM_DEVICE = 1,   /* cudaMalloc */
    COLL_MEM_MANAGED = 2,  /* cudaMallocManaged */
};

enum coll_memtype coll_memtype_of(const void *p);
/* "host memory", "CUDA device memory", "CUDA managed memory". */
const char *coll_memtype_name(enum coll_memtype t);

#endif
