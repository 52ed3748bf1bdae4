/* collMemAlloc / collMemFree, and the direct allreduce on such memory.
 *
 * collMemAlloc returns memory backed by a memfd named "libcollective-mem-<id>"
 * (id: unique in this process), mapped shared.  A process registry maps address
 * ranges to (fd, id).  Another process on the host maps the same pages by opening
 * /proc/<pid>/fd/<fd>; it checks the link's name for the id, so a closed and
 * reused fd number is never taken for the buffer it once was.
 *
 * The direct allreduce, when every rank's sendbuff and recvbuff lie in
 * collMemAlloc memory and every rank reaches every other over shared memory:
 *
 *   1. allgather each rank's (pid, fd, id, offset) for sendbuff and recvbuff; a
 *      rank whose buffers are not registered says so and all ranks fall back;
 *   2. each rank maps the peers' buffers (cached per comm) and the ranks agree
 *      that all of them could (an allreduce of a flag);
 *   3. rank r reduces segment r of the n inputs, reading them where the peers
 *      put them, into its recvbuff: its own input first, then r+1, ..., r-1;
 *   4. barrier; rank r copies segment p from rank p's recvbuff, for every p;
 *   5. barrier: nobody returns (and reuses its buffers) while others still read.
 *
 * Each segment is computed once, so all ranks hold the same bytes.  Per rank:
 * S/n x n read and S/n written to reduce, (n-1)/n S read and written to copy,
 * against the slot ring's copies into and out of slots in both halves.  The
 * four small steps (allgather, flag, two barriers) run recursive doubling
 * directly, so the direct path is for large buffers (COLL_SHM_DIRECT_BYTES).
 * When step 1 or 2 finds that some rank cannot take the direct path, every rank
 * skips the next MEM_RETRY_AFTER calls that could take it (a count all ranks keep
 * alike): ordinary buffers do not pay the allgather on every call. */
#include "mem.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "exec.h"
#include "pattern.h"
#include "reduce.h"

#define MEM_NAME "libcollective-mem-"
#define MEM_MAPS_MAX 64          /* peers' buffers mapped per comm */
#define MEM_CHUNK (64 * 1024)    /* bytes reduced from all inputs at a time */
#define MEM_RETRY_AFTER 63       /* eligible calls skipped after a fallback */

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
 * for registrations of regions that are gone (lib/regcache.c). */
static atomic_uint_fast64_t mem_frees;

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
    snprintf(name, sizeof(name), MEM_NAME "%llu", (unsigned long long)m->id);
    const char *step;
    void *base;
    int err = coll_memfd_map(name, bytes, &m->fd, &base, &step);
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

bool coll_mem_region(const void *p, size_t len, char **base_p, size_t *size_p, uint64_t *id_p)
{
    bool found = false;
    const char *c = p;
    pthread_mutex_lock(&mem_lock);
    for (struct mem_region *m = mem_regions; m != NULL && !found; m = m->next) {
        if (c >= m->base && len <= m->size && (size_t)(c - m->base) <= m->size - len) {
            *base_p = m->base;
            *size_p = m->size;
            *id_p = m->id;
            found = true;
        }
    }
    pthread_mutex_unlock(&mem_lock);
    return found;
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

/* Where [p, p+len) lies in a registered region: its fd, id and offset. */
static bool mem_lookup(const void *p, size_t len, int *fd_p, uint64_t *id_p, size_t *off_p)
{
    bool found = false;
    const char *c = p;
    pthread_mutex_lock(&mem_lock);
    for (struct mem_region *m = mem_regions; m != NULL && !found; m = m->next) {
        if (c >= m->base && len <= m->size && (size_t)(c - m->base) <= m->size - len) {
            *fd_p = m->fd;
            *id_p = m->id;
            *off_p = (size_t)(c - m->base);
            found = true;
        }
    }
    pthread_mutex_unlock(&mem_lock);
    return found;
}

/* ---- peers' regions, mapped per comm ------------------------------------------ */

struct coll_mem_map {
    int32_t pid, fd;
    uint64_t id;
    char *base;
    size_t size;
    uint64_t used;               /* last use, for eviction */
};

/* One rank's buffers as the others need them. */
struct mem_desc {
    int32_t ok;                  /* both buffers are registered */
    int32_t pid;
    int32_t fd[2];               /* sendbuff, recvbuff */
    uint64_t id[2];
    uint64_t off[2];
};

/* The element-wise max of every rank's n values (recursive doubling, run directly:
 * these steps belong to the calling collective, not the planner). */
static collResult_t mem_agree_max(struct coll_comm *comm, double *mine, double *all, size_t n)
{
    struct coll_args a = {mine, all, n, collDouble, collMax, 0};
    return coll_algo_rd.run[COLL_FUNC_ALLREDUCE](comm, &a);
}

collResult_t coll_mem_comm_init(struct coll_comm *comm)
{
    comm->mem_direct = false;
    if (comm->nranks == 1)
        return collSuccess;
    /* Every peer over shared memory, and the threshold: agreed (the largest), since
     * each rank sees only its own transports and environment and every rank must
     * take the same path for the same call. */
    int64_t min = coll_param_int(COLL_PARAM_SHM_DIRECT_BYTES);
    double mine[2] = {min < 0 ? 1 : 0, min < 0 ? 0 : (double)min}, all[2];
    for (int p = 0; p < comm->nranks; p++) {
        const struct coll_transport *tp =
            p == comm->rank ? NULL : coll_transport_for_peer(comm, p);
        if (p != comm->rank && (tp == NULL || !(tp->caps & COLL_TP_CAP_SHARED_MEM)))
            mine[0] = 1;
    }
    coll_exec_begin(comm, "init (shared buffers)");
    COLL_CHECK(mem_agree_max(comm, mine, all, 2));
    comm->mem_direct = all[0] == 0;
    comm->mem_direct_bytes = (size_t)all[1];
    return collSuccess;
}

void coll_mem_comm_free(struct coll_comm *comm)
{
    for (int i = 0; i < comm->nmem_maps; i++)
        munmap(comm->mem_maps[i].base, comm->mem_maps[i].size);
    free(comm->mem_maps);
    comm->mem_maps = NULL;
    comm->nmem_maps = 0;
}

/* The peer's region (pid, fd, id) mapped here, at least `need` bytes; NULL when it
 * cannot be (another pid namespace, no permission, or the fd is no longer it). */
static char *mem_map_peer(struct coll_comm *comm, int32_t pid, int32_t fd, uint64_t id,
                          size_t need)
{
    struct coll_mem_map *maps = comm->mem_maps;
    for (int i = 0; i < comm->nmem_maps; i++)
        if (maps[i].pid == pid && maps[i].fd == fd && maps[i].id == id && maps[i].size >= need) {
            maps[i].used = ++comm->mem_use;
            return maps[i].base;
        }
    char path[64], link[PATH_MAX], want[64];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, (int)fd);
    ssize_t k = readlink(path, link, sizeof(link) - 1);
    snprintf(want, sizeof(want), "/memfd:" MEM_NAME "%llu ", (unsigned long long)id);
    if (k <= 0 || (link[k] = '\0', strncmp(link, want, strlen(want)) != 0)) {
        COLL_INFO(COLL_SUBSYS_SHM, "cannot map pid %d's buffer %llu: %s is %s", (int)pid,
                  (unsigned long long)id, path, k <= 0 ? strerror(errno) : link);
        return NULL;
    }
    int mfd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (mfd < 0 || fstat(mfd, &st) != 0 || (size_t)st.st_size < need) {
        COLL_INFO(COLL_SUBSYS_SHM, "cannot map pid %d's buffer %llu: %s", (int)pid,
                  (unsigned long long)id, mfd < 0 ? strerror(errno) : "too small");
        if (mfd >= 0)
            close(mfd);
        return NULL;
    }
    size_t size = (size_t)st.st_size;
    char *base = mmap(NULL, size, PROT_READ, MAP_SHARED | MAP_POPULATE, mfd, 0);
    close(mfd);
    if (base == MAP_FAILED)
        return NULL;
    if (maps == NULL) {
        if (coll_calloc(&comm->mem_maps, MEM_MAPS_MAX) != collSuccess) {
            munmap(base, size);
            return NULL;
        }
        maps = comm->mem_maps;
    }
    int slot = comm->nmem_maps;
    if (slot == MEM_MAPS_MAX) { /* full: the least recently used goes */
        slot = 0;
        for (int i = 1; i < MEM_MAPS_MAX; i++)
            if (maps[i].used < maps[slot].used)
                slot = i;
        munmap(maps[slot].base, maps[slot].size);
    } else {
        comm->nmem_maps++;
    }
    maps[slot] = (struct coll_mem_map){.pid = pid, .fd = fd, .id = id, .base = base,
                                       .size = size, .used = ++comm->mem_use};
    return base;
}

static collResult_t mem_barrier(struct coll_comm *comm)
{
    double x = 0, y;
    return mem_agree_max(comm, &x, &y, 1);
}

/* The peer's sendbuff and recvbuff as this rank sees them. */
struct mem_bufs {
    const char *in, *out;
};

collResult_t coll_mem_allreduce(struct coll_comm *comm, const struct coll_args *a, bool *done_p)
{
    *done_p = false;
    int n = comm->nranks, r = comm->rank;
    size_t esize = coll_dtype_size(a->dtype), bytes = a->count * esize;
    if (!comm->mem_direct || bytes < comm->mem_direct_bytes || bytes == 0)
        return collSuccess;
    if (comm->mem_skip > 0) {
        comm->mem_skip--;
        return collSuccess;
    }

    /* 1. Who has registered buffers. */
    struct mem_desc mine = {.pid = (int32_t)getpid()};
    int fd[2];
    size_t off[2];
    mine.ok = mem_lookup(a->sendbuf, bytes, &fd[0], &mine.id[0], &off[0]) &&
              mem_lookup(a->recvbuf, bytes, &fd[1], &mine.id[1], &off[1]);
    if (mine.ok)
        for (int i = 0; i < 2; i++) {
            mine.fd[i] = fd[i];
            mine.off[i] = off[i];
        }
    /* Not the comm's scratch: recursive doubling uses that for itself. */
    struct mem_desc *all = NULL;
    struct mem_bufs *buf = NULL;
    collResult_t res = coll_calloc(&all, (size_t)n);
    if (res == collSuccess)
        res = coll_calloc(&buf, (size_t)n);
    if (res != collSuccess)
        goto out;
    struct coll_args g = {&mine, all, sizeof(mine), collUint8, collSum, 0};
    if ((res = coll_algo_rd.run[COLL_FUNC_ALLGATHER](comm, &g)) != collSuccess)
        goto out;
    for (int p = 0; p < n; p++)
        if (!all[p].ok) {
            comm->mem_skip = MEM_RETRY_AFTER; /* every rank saw the same table */
            goto out;
        }

    /* 2. Map the peers' buffers; all must succeed. */
    double failed = 0, any_failed;
    for (int p = 0; p < n; p++) {
        if (p == r) {
            buf[p] = (struct mem_bufs){a->sendbuf, a->recvbuf};
            continue;
        }
        char *b0 = mem_map_peer(comm, all[p].pid, all[p].fd[0], all[p].id[0],
                                all[p].off[0] + bytes);
        char *b1 = mem_map_peer(comm, all[p].pid, all[p].fd[1], all[p].id[1],
                                all[p].off[1] + bytes);
        if (b0 == NULL || b1 == NULL)
            failed = 1;
        else
            buf[p] = (struct mem_bufs){b0 + all[p].off[0], b1 + all[p].off[1]};
    }
    if ((res = mem_agree_max(comm, &failed, &any_failed, 1)) != collSuccess)
        goto out;
    if (any_failed != 0) {
        comm->mem_skip = MEM_RETRY_AFTER;
        goto out;
    }

    /* 3. Segment r from every rank's input, own first, chunk by chunk. */
    size_t seg_off, seg_len;
    coll_ring_chunk(a->count, n, r, &seg_off, &seg_len);
    size_t chunk = MEM_CHUNK / esize > 0 ? MEM_CHUNK / esize : 1;
    char *dst = (char *)a->recvbuf;
    for (size_t c0 = 0; c0 < seg_len; c0 += chunk) {
        size_t len = seg_len - c0 < chunk ? seg_len - c0 : chunk;
        size_t at = (seg_off + c0) * esize;
        coll_reduce(a->op, a->dtype, dst + at, buf[r].in + at, buf[(r + 1) % n].in + at, len);
        for (int k = 2; k < n; k++)
            coll_reduce(a->op, a->dtype, dst + at, dst + at, buf[(r + k) % n].in + at, len);
        if (a->op == collAvg)
            coll_reduce_div(a->dtype, dst + at, dst + at, len, n);
    }
    /* collCommGetBytes: what this rank reads from the peers' buffers counts as
     * received once read, what they read from its buffers as sent once the
     * barrier after their reads has passed.  Step 3 read segment r of the n-1
     * peers' inputs; the peers read their segments of this rank's input. */
    coll_comm_count_bytes(comm, 0, (uint64_t)(n - 1) * seg_len * esize);
    /* 4. Everyone's segment is final: copy the others'. */
    if ((res = mem_barrier(comm)) != collSuccess)
        goto out;
    coll_comm_count_bytes(comm, (uint64_t)(a->count - seg_len) * esize, 0);
    for (int p = 0; p < n; p++) {
        size_t po, pl;
        coll_ring_chunk(a->count, n, p, &po, &pl);
        if (p != r && pl > 0)
            memcpy(dst + po * esize, buf[p].out + po * esize, pl * esize);
    }
    /* Step 4 read the peers' final segments; they read segment r of this rank's
     * output, each of the n-1. */
    coll_comm_count_bytes(comm, 0, (uint64_t)(a->count - seg_len) * esize);
    /* 5. Nobody reuses its buffers while another still reads them. */
    res = mem_barrier(comm);
    if (res == collSuccess) {
        coll_comm_count_bytes(comm, (uint64_t)(n - 1) * seg_len * esize, 0);
        *done_p = true;
    }
out:
    free(all);
    free(buf);
    return res;
}
