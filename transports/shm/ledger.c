/* The host's ledger of slot-ring memory (ledger.h).
 *
 * A file in /dev/shm (COLL_SHM_LEDGER, default libcollective-ledger-<uid>; mode
 * 0600) holds an entry per process that has made segments: its pid, its start
 * time and the bytes of the segments it made and still maps.  A sender about to
 * make a segment locks the file (flock), sums the entries, sizes its ring to
 * what is left of the budget and adds the segment to its own entry; unmapping a
 * segment takes it off again.  A process that died without doing so (killed)
 * leaves an entry behind: when the sum would exceed the budget, entries of
 * processes that are gone (no such pid, or a pid reused by a process that
 * started at another time) are cleared first.  The lock is taken once per
 * segment, so its cost goes with the pairs that talk, not with the calls.
 *
 * Every process of the user on the host shares the one file, whatever its
 * communicators: ranks as threads of one process, processes of one job, and
 * several jobs.  A user's jobs that should not share a budget name their own
 * ledger (COLL_SHM_LEDGER); other users have theirs.  A forked child attaches
 * anew (an flock belongs to the open file, which a child would share).
 */
#include "ledger.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "param.h"

#define LEDGER_MAGIC 0x44454c43u /* "CLED" */
#define LEDGER_VERSION 1u
#define LEDGER_ENTRIES 4096

struct ledger_entry {
    _Atomic int32_t pid;      /* 0: free */
    uint32_t pad;
    uint64_t start;           /* the process's start time (/proc/PID/stat), 0 unknown */
    _Atomic uint64_t bytes;
};

struct ledger_file {
    uint32_t magic, version;
    uint32_t high;            /* entries in use lie below */
    uint32_t pad;
    struct ledger_entry e[LEDGER_ENTRIES];
};

static struct {
    pthread_mutex_t lock;     /* this process's threads, around the flock */
    pid_t pid;                /* the process attached (0: none yet) */
    int fd;
    struct ledger_file *f;
    struct ledger_entry *mine;
    bool failed;              /* could not attach: no ledger in this process */
    time_t strict_at;         /* when ledger_sum last read /proc (seconds) */
} ledger = {.lock = PTHREAD_MUTEX_INITIALIZER, .fd = -1};

/* Field 22 of /proc/PID/stat: when the process started, in clock ticks; 0 when
 * it cannot be read. */
static uint64_t ledger_start_time(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the name may hold spaces */
    unsigned long long start = 0;
    for (int field = 2; p != NULL && *p != '\0'; p++)
        if (*p == ' ' && ++field == 22) {
            if (sscanf(p + 1, "%llu", &start) != 1)
                start = 0;
            break;
        }
    return start;
}

/* Whether the entry's process still runs; with `strict`, also that it is the
 * one that wrote the entry (not a reused pid: a read of /proc/PID/stat). */
static bool ledger_alive(const struct ledger_entry *e, bool strict)
{
    pid_t pid = atomic_load(&e->pid);
    if (pid <= 0 || (kill(pid, 0) != 0 && errno == ESRCH))
        return false;
    return !strict || e->start == 0 || ledger_start_time(pid) == e->start;
}

/* Opens and maps the ledger and takes an entry; under ledger.lock. */
static bool ledger_attach(void)
{
    pid_t me = getpid();
    if (ledger.pid == me)
        return !ledger.failed;
    if (ledger.f != NULL) /* a forked child: the parent's mapping and open file */
        munmap(ledger.f, sizeof(*ledger.f));
    if (ledger.fd >= 0)
        close(ledger.fd);
    ledger.f = NULL;
    ledger.fd = -1;
    ledger.mine = NULL;
    ledger.pid = me;
    ledger.failed = true;
    const char *name = coll_param_str(COLL_PARAM_SHM_LEDGER);
    char path[256];
    if (name != NULL && name[0] != '\0')
        snprintf(path, sizeof(path), "/dev/shm/%s", name);
    else
        snprintf(path, sizeof(path), "/dev/shm/libcollective-ledger-%u", (unsigned)geteuid());
    if (name != NULL && strchr(name, '/') != NULL) {
        COLL_WARN("shm: COLL_SHM_LEDGER=%s is not a plain file name; no host-wide budget", name);
        return false;
    }
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_uid != geteuid() || flock(fd, LOCK_EX) != 0) {
        COLL_WARN("shm: cannot use the ledger of shared memory %s (%s); rings keep to their "
                  "communicator's share only", path,
                  fd < 0 ? strerror(errno) : "not this user's, or it cannot be locked");
        if (fd >= 0)
            close(fd);
        return false;
    }
    struct ledger_file *f = MAP_FAILED;
    if ((fstat(fd, &st) == 0 && (size_t)st.st_size >= sizeof(*f)) ||
        ftruncate(fd, sizeof(*f)) == 0)
        f = mmap(NULL, sizeof(*f), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (f == MAP_FAILED) {
        COLL_WARN("shm: cannot map the ledger of shared memory %s: %s", path, strerror(errno));
        close(fd);
        return false;
    }
    if (f->magic != LEDGER_MAGIC || f->version != LEDGER_VERSION || f->high > LEDGER_ENTRIES) {
        memset(f, 0, sizeof(*f)); /* new, or written by something else */
        f->magic = LEDGER_MAGIC;
        f->version = LEDGER_VERSION;
    }
    struct ledger_entry *mine = NULL;
    for (uint32_t i = 0; i < LEDGER_ENTRIES && mine == NULL; i++) {
        struct ledger_entry *e = &f->e[i];
        if (i < f->high && atomic_load(&e->pid) != 0 && ledger_alive(e, true))
            continue;
        mine = e;
        if (i >= f->high)
            f->high = i + 1;
    }
    if (mine != NULL) {
        atomic_store(&mine->bytes, 0);
        mine->start = ledger_start_time(me);
        atomic_store(&mine->pid, me);
    } else {
        COLL_WARN("shm: the ledger of shared memory %s is full (%d processes); rings keep to "
                  "their communicator's share only", path, LEDGER_ENTRIES);
    }
    flock(fd, LOCK_UN);
    if (mine == NULL) {
        munmap(f, sizeof(*f));
        close(fd);
        return false;
    }
    ledger.fd = fd;
    ledger.f = f;
    ledger.mine = mine;
    ledger.failed = false;
    return true;
}

/* The bytes of the entries; check 1 first clears those whose pid is gone, 2
 * also those whose pid was reused. */
static uint64_t ledger_sum(int check)
{
    uint64_t sum = 0;
    for (uint32_t i = 0; i < ledger.f->high && i < LEDGER_ENTRIES; i++) {
        struct ledger_entry *e = &ledger.f->e[i];
        if (atomic_load(&e->pid) == 0)
            continue;
        if (check > 0 && e != ledger.mine && !ledger_alive(e, check > 1)) {
            atomic_store(&e->bytes, 0);
            atomic_store(&e->pid, 0);
            continue;
        }
        sum += atomic_load(&e->bytes);
    }
    return sum;
}

uint64_t coll_shm_ledger_begin(uint64_t budget, uint64_t want, bool *ok_p)
{
    pthread_mutex_lock(&ledger.lock);
    if (!ledger_attach() || flock(ledger.fd, LOCK_EX) != 0) {
        pthread_mutex_unlock(&ledger.lock);
        *ok_p = false;
        return 0;
    }
    *ok_p = true;
    /* Dead processes' entries are cleared only when they would matter, the
     * cheap look (a signal 0 per entry) before the reads of /proc. */
    uint64_t sum = ledger_sum(0);
    if (sum + want > budget)
        sum = ledger_sum(1);
    /* Reused pids are rare: a host held at its budget looks for them once a
     * second at most, not at every segment. */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    if (sum + want > budget && ts.tv_sec != ledger.strict_at) {
        ledger.strict_at = ts.tv_sec;
        sum = ledger_sum(2);
    }
    return sum;
}

void coll_shm_ledger_end(uint64_t bytes)
{
    atomic_fetch_add(&ledger.mine->bytes, bytes);
    flock(ledger.fd, LOCK_UN);
    pthread_mutex_unlock(&ledger.lock);
}

void coll_shm_ledger_release(uint64_t bytes)
{
    pthread_mutex_lock(&ledger.lock);
    /* A forked child's segments were never in its entry. */
    if (ledger.pid == getpid() && ledger.mine != NULL) {
        uint64_t have = atomic_load(&ledger.mine->bytes);
        atomic_store(&ledger.mine->bytes, have > bytes ? have - bytes : 0);
    }
    pthread_mutex_unlock(&ledger.lock);
}

uint64_t coll_shm_ledger_mine(void)
{
    pthread_mutex_lock(&ledger.lock);
    uint64_t b = ledger.pid == getpid() && ledger.mine != NULL ? atomic_load(&ledger.mine->bytes)
                                                               : 0;
    pthread_mutex_unlock(&ledger.lock);
    return b;
}
