/* Shared memory the size of a request, reserved up front (alloc.h): the shm
 * transport's segments and collMemAlloc's regions. */
#include "alloc.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

int coll_memfd_map(const char *name, size_t bytes, int *fd_p, void **base_p,
                   const char **step_p)
{
    *step_p = "memfd_create";
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0)
        return errno;
    *step_p = "reserve";
    int err = posix_fallocate(fd, 0, (off_t)bytes);
    if (err == 0) {
        *step_p = "mmap";
        void *base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (base != MAP_FAILED) {
            *fd_p = fd;
            *base_p = base;
            return 0;
        }
        err = errno;
    }
    close(fd);
    return err;
}
