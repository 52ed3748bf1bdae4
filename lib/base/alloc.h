/* Allocation helpers that log size and site on failure. */
#ifndef COLL_ALLOC_H
#define COLL_ALLOC_H

#include <stdlib.h>
#include <string.h>

#include "collective.h"
#include "log.h"

#define coll_calloc(ptr_p, n)                                                                  \
    (*(ptr_p) = NULL, coll_calloc_at((void **)(ptr_p), (n), sizeof(**(ptr_p)), __FILE__, __LINE__))

static inline collResult_t coll_calloc_at(void **ptr_p, size_t n, size_t size, const char *file,
                                          int line)
{
    void *p = calloc(n ? n : 1, size);
    if (p == NULL) {
        COLL_WARN("out of memory allocating %zu x %zu bytes at %s:%d", n, size, file, line);
        return collSystemError;
    }
    *ptr_p = p;
    return collSuccess;
}

/* One zeroed object on cache lines of its own (64-byte aligned, its size
 * rounded up), for structures whose fields are laid out by line: *ptr_p is
 * freed with free(). */
#define coll_calloc_lines(ptr_p)                                                               \
    (*(ptr_p) = NULL, coll_calloc_lines_at((void **)(ptr_p), sizeof(**(ptr_p)), __FILE__,      \
                                           __LINE__))

static inline collResult_t coll_calloc_lines_at(void **ptr_p, size_t size, const char *file,
                                                int line)
{
    size_t bytes = (size + 63) & ~(size_t)63;
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes) != 0) {
        COLL_WARN("out of memory allocating %zu bytes on cache lines at %s:%d", bytes, file,
                  line);
        return collSystemError;
    }
    memset(p, 0, bytes);
    *ptr_p = p;
    return collSuccess;
}

/* Shared memory (lib/base/memfd.c): a memfd called name of `bytes`, mapped shared,
 * read-write, its pages reserved now (a full tmpfs is an error here, not a SIGBUS
 * later), on NUMA node `numa` where it has room (-1: wherever the kernel puts
 * them).  Returns 0, or the errno of the step that failed, named in *step_p:
 * "memfd_create", "reserve" (sizing the file, then its pages) or "mmap". */
int coll_memfd_map(const char *name, size_t bytes, int numa, int *fd_p, void **base_p,
                   const char **step_p);

#endif
