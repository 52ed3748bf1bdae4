/* Shared memory the size of a request, reserved up front (alloc.h): the shm
 * transport's segments and collMemAlloc's regions. */
#include "alloc.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

/* <numaif.h>'s MPOL_PREFERRED, without libnuma. */
#define MEMFD_MPOL_PREFERRED 1

int coll_memfd_map(const char *name, size_t bytes, int numa, int *fd_p, void **base_p,
                   const char **step_p)
{
    *step_p = "memfd_create";
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0)
        return errno;
    int err = 0;
    *step_p = "reserve"; /* sizing the file is part of it (RLIMIT_FSIZE) */
    if (ftruncate(fd, (off_t)bytes) != 0) {
        err = errno;
        close(fd);
        return err;
    }
    *step_p = "mmap";
    void *base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        err = errno;
        close(fd);
        return err;
    }
    /* The policy of a shared mapping is the file's: the pages the reservation
     * makes come from that node while it has room.  A kernel without NUMA
     * refuses it, and the pages go where the kernel puts them. */
    if (numa >= 0 && numa < 64) {
        unsigned long mask = 1UL << numa;
        (void)syscall(SYS_mbind, base, bytes, MEMFD_MPOL_PREFERRED, &mask,
                      (unsigned long)(sizeof(mask) * 8), 0UL);
    }
    *step_p = "reserve";
    err = posix_fallocate(fd, 0, (off_t)bytes);
    if (err != 0) {
        munmap(base, bytes);
        close(fd);
        return err;
    }
    *fd_p = fd;
    *base_p = base;
    return 0;
}
