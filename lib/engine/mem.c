/* collMemAlloc / collMemFree: host memory that the peers on this host can map.
 *
 * collMemAlloc returns memory backed by a memfd named "libcollective-mem-<id>"
 * (id: unique in this process), mapped shared.  A process registry maps address
 * ranges to (fd, id).  Another process on the host maps the same pages by opening
 * /proc/<pid>/fd/<fd>; it checks the link's name for the id, so a closed and
 * reused fd number is never taken for the buffer it once was.  The direct
 * allreduce (algorithms/direct.c) is what reads such buffers across processes. */
#include "mem.h"

#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>



/* ---- the registry of this process's collMemAlloc regions --------------------- */

struct mem_region {
    struct mem_region *next;
    char *base;
    size_t size;
    int fd;
    uint64_t id;
};

static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mem_region *mem_regions;
static uint64_t mem_next_id = 1;
/* collMemFree calls so far: a registration cache that saw another count looks
 * for registrations of regions that are gone (lib/engine/regcache.c). */
static atomic_uint_fast64_t mem_frees;

COLL_API collResult_t collMemAlloc(void **ptr, size_t size)
{
    if (ptr == NULL) {
        coll_set_error(NULL, "collMemAlloc: ptr is NULL");
        return collInvalidArgument;
    }
    *ptr = NULL;
    if (size == 0) {
        coll_set_error(NULL, "collMemAlloc: size is 0");
        return collInvalidArgument;
    }
    long page = sysconf(_SC_PAGESIZE);
    size_t pg = page > 0 ? (size_t)page : 4096;
    if (size > (size_t)PTRDIFF_MAX - pg) {
        coll_set_error(NULL, "collMemAlloc: size %zu is too large", size);
        return collInvalidArgument;
    }
    size_t bytes = (size + pg - 1) / pg * pg;
    struct mem_region *m;
    COLL_CHECK(coll_calloc(&m, 1));
    pthread_mutex_lock(&mem_lock);
    m->id = mem_next_id++;
    pthread_mutex_unlock(&mem_lock);
    char name[64];
    snprintf(name, sizeof(name), COLL_MEM_NAME "%llu", (unsigned long long)m->id);
    const char *step;
    void *base;
    int err = coll_memfd_map(name, bytes, -1, &m->fd, &base, &step);
    if (err != 0) {
        coll_set_error(NULL, "collMemAlloc: cannot reserve %zu bytes of shared memory (memfd, "
                       "the same memory as /dev/shm): %s: %s", bytes, step, strerror(err));
        free(m);
        return collSystemError;
    }
    m->base = base;
    m->size = bytes;
    pthread_mutex_lock(&mem_lock);
    m->next = mem_regions;
    mem_regions = m;
    pthread_mutex_unlock(&mem_lock);
    *ptr = m->base;
    return collSuccess;
}

COLL_API collResult_t collMemFree(void *ptr)
{
    if (ptr == NULL)
        return collSuccess;
    pthread_mutex_lock(&mem_lock);
    struct mem_region **pp = &mem_regions;
    while (*pp != NULL && (*pp)->base != ptr)
        pp = &(*pp)->next;
    struct mem_region *m = *pp;
    if (m != NULL)
        *pp = m->next;
    pthread_mutex_unlock(&mem_lock);
    if (m == NULL) {
        coll_set_error(NULL, "collMemFree: ptr %p was not returned by collMemAlloc (or was "
                       "freed already)", ptr);
        return collInvalidArgument;
    }
    /* Counted once the region has left the registry: a cache that reads the new
     * count finds it gone. */
    atomic_fetch_add(&mem_frees, 1);
    munmap(m->base, m->size);
    close(m->fd);
    free(m);
    return collSuccess;
}

/* The region holding [p, p+len), copied out under the lock; false when none. */
static bool mem_find(const void *p, size_t len, struct mem_region *out)
{
    bool found = false;
    const char *c = p;
    pthread_mutex_lock(&mem_lock);
    for (struct mem_region *m = mem_regions; m != NULL && !found; m = m->next) {
        if (c >= m->base && len <= m->size && (size_t)(c - m->base) <= m->size - len) {
            *out = *m;
            found = true;
        }
    }
    pthread_mutex_unlock(&mem_lock);
    return found;
}

bool coll_mem_region(const void *p, size_t len, char **base_p, size_t *size_p, uint64_t *id_p)
{
    struct mem_region m;
    if (!mem_find(p, len, &m))
        return false;
    *base_p = m.base;
    *size_p = m.size;
    *id_p = m.id;
    return true;
}

bool coll_mem_live(uint64_t id)
{
    bool live = false;
    pthread_mutex_lock(&mem_lock);
    for (struct mem_region *m = mem_regions; m != NULL && !live; m = m->next)
        live = m->id == id;
    pthread_mutex_unlock(&mem_lock);
    return live;
}

uint64_t coll_mem_frees(void)
{
    return atomic_load(&mem_frees);
}

bool coll_mem_lookup(const void *p, size_t len, int *fd_p, uint64_t *id_p, size_t *off_p)
{
    struct mem_region m;
    if (!mem_find(p, len, &m))
        return false;
    *fd_p = m.fd;
    *id_p = m.id;
    *off_p = (size_t)((const char *)p - m.base);
    return true;
}

char *coll_mem_map_peer(int32_t pid, int32_t fd, const char *name, size_t need,
                        size_t *size_p)
{
    char path[64], link[PATH_MAX], want[128];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, (int)fd);
    snprintf(want, sizeof(want), "/memfd:%s", name);
    ssize_t k = readlink(path, link, sizeof(link) - 1);
    if (k <= 0 || (link[k] = '\0', strncmp(link, want, strlen(want)) != 0)) {
        COLL_INFO(COLL_SUBSYS_SHM, "cannot map pid %d's %s: %s is %s", (int)pid, name, path,
                  k <= 0 ? strerror(errno) : link);
        return NULL;
    }
    int mfd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (mfd < 0 || fstat(mfd, &st) != 0 || (size_t)st.st_size < need) {
        COLL_INFO(COLL_SUBSYS_SHM, "cannot map pid %d's %s: %s", (int)pid, name,
                  mfd < 0 ? strerror(errno) : "too small");
        if (mfd >= 0)
            close(mfd);
        return NULL;
    }
    size_t size = (size_t)st.st_size;
    char *base = mmap(NULL, size, PROT_READ, MAP_SHARED | MAP_POPULATE, mfd, 0);
    close(mfd);
    if (base == MAP_FAILED)
        return NULL;
    *size_p = size;
    return base;
}
