/*
 * The single-copy question of the shared-memory transport: moving a buffer from one
 * process into another's, side by side in one run, three ways:
 *
 *   ring   the transport's path: the owner copies into a shared ring of slots
 *          (16 x 256 KiB) and the reader copies out of it; two copies, pipelined
 *   cma    process_vm_readv: the reader copies straight out of the owner's private
 *          buffer (what Open MPI's shared-memory path does for large messages)
 *   mapped the owner's buffer is shared memory the reader maps (what collMemAlloc
 *          would give): one plain memcpy by the reader
 *
 * Both processes run at once on their own cores (a copy each, or the reader alone
 * for cma and mapped); the time is the reader's, best of the repetitions.
 *
 *   shm_copy_bench [-r REPS] [SIZE ...]     (sizes accept K and M; default 64K..64M)
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SLOT (256 * 1024)
#define NSLOTS 16

struct shared {
    _Alignas(64) _Atomic uint64_t head;
    _Alignas(64) _Atomic uint64_t tail;
    _Alignas(64) _Atomic int phase;   /* the reader's request: a method and a size */
    _Alignas(64) _Atomic int ack;
    size_t size;
    int method;
    char *owner_buf;                   /* the owner's private buffer, for cma */
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    if (*end == 'K' || *end == 'k')
        v *= 1024;
    else if (*end == 'M' || *end == 'm')
        v *= 1024 * 1024;
    return (size_t)v;
}

/* The owner: waits for a request, then feeds the ring (method 0) or just waits
 * for the reader (cma, mapped: the data is already where the reader looks). */
static void owner(struct shared *sh, char *slots, char *priv)
{
    for (int seen = 0;;) {
        int ph;
        while ((ph = atomic_load(&sh->phase)) == seen)
            ;
        if (ph < 0)
            return;
        seen = ph;
        if (sh->method == 0) {
            uint64_t h = atomic_load(&sh->head);
            for (size_t off = 0; off < sh->size; off += SLOT, h++) {
                while (h - atomic_load_explicit(&sh->tail, memory_order_acquire) >= NSLOTS)
                    ;
                size_t k = sh->size - off < SLOT ? sh->size - off : SLOT;
                memcpy(slots + (h % NSLOTS) * SLOT, priv + off, k);
                atomic_store_explicit(&sh->head, h + 1, memory_order_release);
            }
        }
        atomic_store(&sh->ack, ph);
    }
}

/* The reader: one transfer of sh->size bytes by sh->method into dst. */
static int reader_once(struct shared *sh, char *slots, char *mapped, char *dst, pid_t pid)
{
    if (sh->method == 0) {
        uint64_t t = atomic_load(&sh->tail);
        for (size_t off = 0; off < sh->size; off += SLOT, t++) {
            while (atomic_load_explicit(&sh->head, memory_order_acquire) == t)
                ;
            size_t k = sh->size - off < SLOT ? sh->size - off : SLOT;
            memcpy(dst + off, slots + (t % NSLOTS) * SLOT, k);
            atomic_store_explicit(&sh->tail, t + 1, memory_order_release);
        }
    } else if (sh->method == 1) {
        for (size_t off = 0; off < sh->size;) {
            size_t k = sh->size - off < (4u << 20) ? sh->size - off : (4u << 20);
            struct iovec l = {dst + off, k}, r = {sh->owner_buf + off, k};
            ssize_t got = process_vm_readv(pid, &l, 1, &r, 1, 0);
            if (got <= 0) {
                perror("process_vm_readv");
                return -1;
            }
            off += (size_t)got;
        }
    } else {
        memcpy(dst, mapped, sh->size);
    }
    return 0;
}

int main(int argc, char **argv)
{
    int reps = 9;
    size_t sizes[32];
    int nsizes = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-r") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (nsizes < 32)
            sizes[nsizes++] = parse_size(argv[i]);
    }
    if (nsizes == 0)
        for (size_t s = 64 << 10; s <= (64u << 20); s *= 4)
            sizes[nsizes++] = s;
    size_t max = 0;
    for (int i = 0; i < nsizes; i++)
        max = sizes[i] > max ? sizes[i] : max;

    struct shared *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
                             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    char *slots = mmap(NULL, (size_t)NSLOTS * SLOT, PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    char *mapped = mmap(NULL, max, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    char *priv = malloc(max), *dst = malloc(max);
    if (sh == MAP_FAILED || slots == MAP_FAILED || mapped == MAP_FAILED || !priv || !dst) {
        perror("allocation");
        return 1;
    }
    memset(priv, 1, max);
    memset(mapped, 1, max);
    memset(dst, 0, max);
    memset(slots, 0, (size_t)NSLOTS * SLOT);
    sh->owner_buf = priv; /* the same address in the child after fork */
    pid_t pid = fork();
    if (pid == 0) {
        owner(sh, slots, priv);
        _exit(0);
    }
    static const char *names[] = {"ring (2 copies)", "cma (process_vm_readv)",
                                  "mapped (memcpy)"};
    printf("| size | %s | %s | %s |\n|---:|---:|---:|---:|\n", names[0], names[1], names[2]);
    int ph = 0, rc = 0;
    for (int i = 0; i < nsizes && rc == 0; i++) {
        double best[3] = {1e30, 1e30, 1e30};
        for (int rep = 0; rep < reps && rc == 0; rep++) {
            for (int m = 0; m < 3 && rc == 0; m++) {
                sh->size = sizes[i];
                sh->method = m;
                double t0 = now();
                atomic_store(&sh->phase, ++ph);
                rc = reader_once(sh, slots, mapped, dst, pid);
                while (atomic_load(&sh->ack) != ph)
                    ;
                double t = now() - t0;
                best[m] = t < best[m] ? t : best[m];
            }
        }
        printf("| %zu |", sizes[i]);
        for (int m = 0; m < 3; m++)
            printf(" %.2f GB/s |", (double)sizes[i] / best[m] / 1e9);
        printf("\n");
    }
    atomic_store(&sh->phase, -1);
    waitpid(pid, NULL, 0);
    return rc ? 1 : 0;
}
