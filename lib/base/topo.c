/* The host's topology (topo.h, docs/topology.md).
 *
 * Loading runs in three steps:
 *   1. The CPU side: the online PUs with their package and core, and the NUMA nodes
 *      with their CPUs and memory, from hwloc or from sysfs (topo_cpu_hwloc,
 *      topo_cpu_sysfs).  Each source gives only raw records (a PU's kernel number,
 *      package id and the lowest PU of its core; a node's id, CPUs and memory);
 *      topo_build numbers packages, cores and PUs from them the same way for both,
 *      so the two sources give identical answers.
 *   2. The binding: sched_getaffinity of the calling thread, and the cores and NUMA
 *      nodes it covers (topo_bind).
 *   3. The devices, from sysfs in both cases: network interfaces (with getifaddrs
 *      for flags and addresses under the real /sys), RDMA devices
 *      (class/infiniband) and NVIDIA GPUs (bus/pci/devices).  A device's NUMA node
 *      is that of the nearest PCI function above it (topo_locality).
 *
 *   sysfs root R (/sys, or a test's tree)
 *     R/devices/system/cpu/online, cpuN/topology/{physical_package_id,core_cpus_list}
 *     R/devices/system/node/nodeN/{cpulist,meminfo}   (absent: one node 0)
 *     R/class/net/IF/{ifindex,flags,carrier,speed,device}
 *     R/class/infiniband/DEV/{device,parent,ports/N/{state,link_layer,rate,gid_attrs/ndevs/0}}
 *     R/bus/pci/devices/ADDR/{vendor,device,class,numa_node}
 *
 * A missing optional file leaves its field unknown; only the list of online CPUs is
 * required.  Nothing here keeps state between calls. */
#include "topo.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "check.h"
#include "config.h"
#include "log.h"
#include "param.h"
#include "socket.h"

#if COLL_HAVE_HWLOC
#include <hwloc.h>
#endif

/* ---- CPU sets ---- */

void coll_cpuset_zero(struct coll_cpuset *s)
{
    memset(s, 0, sizeof(*s));
}

void coll_cpuset_set(struct coll_cpuset *s, int cpu)
{
    if (cpu >= 0 && cpu < COLL_TOPO_MAX_CPUS)
        s->bits[cpu / 64] |= 1ull << (cpu % 64);
}

bool coll_cpuset_isset(const struct coll_cpuset *s, int cpu)
{
    return cpu >= 0 && cpu < COLL_TOPO_MAX_CPUS && (s->bits[cpu / 64] >> (cpu % 64)) & 1u;
}

int coll_cpuset_count(const struct coll_cpuset *s)
{
    int n = 0;
    for (size_t i = 0; i < COLL_TOPO_MAX_CPUS / 64; i++)
        n += __builtin_popcountll(s->bits[i]);
    return n;
}

int coll_cpuset_next(const struct coll_cpuset *s, int cpu)
{
    for (int c = cpu + 1; c < COLL_TOPO_MAX_CPUS; c++) {
        uint64_t w = s->bits[c / 64] >> (c % 64);
        if (w == 0) {
            c = (c / 64) * 64 + 63; /* the rest of this word is empty */
            continue;
        }
        return c + __builtin_ctzll(w);
    }
    return -1;
}

int coll_cpuset_first(const struct coll_cpuset *s)
{
    return coll_cpuset_next(s, -1);
}

bool coll_cpuset_intersects(const struct coll_cpuset *a, const struct coll_cpuset *b)
{
    for (size_t i = 0; i < COLL_TOPO_MAX_CPUS / 64; i++)
        if (a->bits[i] & b->bits[i])
            return true;
    return false;
}

int coll_cpuset_parse(const char *list, struct coll_cpuset *s_p)
{
    struct coll_cpuset s;
    coll_cpuset_zero(&s);
    const char *p = list;
    while (isspace((unsigned char)*p))
        p++;
    while (*p != '\0' && *p != '\n') {
        char *end;
        if (!isdigit((unsigned char)*p))
            return -1;
        long lo = strtol(p, &end, 10), hi = lo;
        p = end;
        if (*p == '-') {
            if (!isdigit((unsigned char)p[1]))
                return -1;
            hi = strtol(p + 1, &end, 10);
            p = end;
        }
        if (lo > hi || hi >= COLL_TOPO_MAX_CPUS)
            return -1;
        for (long c = lo; c <= hi; c++)
            coll_cpuset_set(&s, (int)c);
        if (*p == ',')
            p++;
        else if (*p != '\0' && *p != '\n')
            return -1;
    }
    *s_p = s;
    return 0;
}

void coll_cpuset_format(const struct coll_cpuset *s, char *buf, size_t len)
{
    size_t off = 0;
    if (len == 0)
        return;
    buf[0] = '\0';
    for (int c = coll_cpuset_first(s); c >= 0;) {
        int hi = c;
        while (coll_cpuset_isset(s, hi + 1))
            hi++;
        char piece[32];
        int k = hi > c ? snprintf(piece, sizeof(piece), "%s%d-%d", off ? "," : "", c, hi)
                       : snprintf(piece, sizeof(piece), "%s%d", off ? "," : "", c);
        if (off + (size_t)k + 1 > len) {
            /* Cut: end with "..." where it fits. */
            size_t at = len >= 4 ? (off < len - 4 ? off : len - 4) : 0;
            snprintf(buf + at, len - at, "%s", "...");
            return;
        }
        memcpy(buf + off, piece, (size_t)k + 1);
        off += (size_t)k;
        c = coll_cpuset_next(s, hi);
    }
}

/* ---- small file readers ---- */

/* Reads the first line of path into buf without its newline; 0, or errno. */
static int read_line(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return errno;
    int err = 0;
    if (fgets(buf, (int)len, f) == NULL)
        err = ferror(f) ? (errno ? errno : EIO) : ENODATA;
    fclose(f);
    if (err == 0)
        buf[strcspn(buf, "\n")] = '\0';
    return err;
}

/* Reads a number (decimal, or hex with 0x) from path; 0, or errno (EINVAL when
 * the text is not a number). */
static int read_ll(const char *path, long long *v_p)
{
    char buf[64];
    int err = read_line(path, buf, sizeof(buf));
    if (err)
        return err;
    char *end;
    errno = 0;
    long long v = strtoll(buf, &end, 0);
    if (errno || end == buf)
        return EINVAL;
    *v_p = v;
    return 0;
}

/* path = a/b; false (and a WARN) when it does not fit. */
__attribute__((format(printf, 3, 4)))
static bool mkpath(char *path, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(path, len, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= len) {
        COLL_WARN("topology: path too long: %.64s...", path);
        return false;
    }
    return true;
}

/* Appends one zeroed element to *arr (of *n, room for *cap); its address in *elt_p. */
static collResult_t grow(void **arr, int *n, int *cap, size_t elt, void **elt_p)
{
    if (*n == *cap) {
        int ncap = *cap ? *cap * 2 : 8;
        void *p = realloc(*arr, (size_t)ncap * elt);
        if (p == NULL) {
            COLL_WARN("topology: out of memory for %d x %zu bytes", ncap, elt);
            return collSystemError;
        }
        *arr = p;
        *cap = ncap;
    }
    char *e = (char *)*arr + (size_t)*n * elt;
    memset(e, 0, elt);
    (*n)++;
    *elt_p = e;
    return collSuccess;
}

/* Entries of a directory other than . and .., sorted; *names_p NULL and 0 when
 * it does not exist.  Free with free_names. */
static int list_dir(const char *path, char ***names_p)
{
    *names_p = NULL;
    DIR *d = opendir(path);
    if (d == NULL)
        return 0;
    char **names = NULL;
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char *copy = strdup(e->d_name);
        void *slot;
        if (copy == NULL || grow((void **)&names, &n, &cap, sizeof(char *), &slot) != collSuccess) {
            free(copy);
            break; /* a shorter list; the caller sees what fitted */
        }
        *(char **)slot = copy;
    }
    closedir(d);
    for (int i = 1; i < n; i++) /* insertion sort: directories here are small */
        for (int j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            char *tmp = names[j];
            names[j] = names[j - 1];
            names[j - 1] = tmp;
        }
    *names_p = names;
    return n;
}

static void free_names(char **names, int n)
{
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* "nodeN" / "cpuN" -> N, or -1. */
static int numbered(const char *name, const char *prefix)
{
    size_t k = strlen(prefix);
    if (strncmp(name, prefix, k) != 0 || !isdigit((unsigned char)name[k]))
        return -1;
    char *end;
    long v = strtol(name + k, &end, 10);
    return *end == '\0' && v < INT_MAX ? (int)v : -1;
}

/* ---- step 1: the CPU side ---- */

struct raw_pu {
    int os, pkg_id, core_key; /* core_key: the lowest PU of its core */
};

struct loader {
    struct coll_topo *t;
    char root_real[PATH_MAX]; /* realpath of the sysfs root */
    bool real_sys;            /* the root is /sys: getifaddrs describes the interfaces */
    struct raw_pu *raw;
    int nraw, craw;
    int cnuma;
};

static collResult_t add_numa(struct loader *L, int id, const struct coll_cpuset *cpus,
                             uint64_t mem)
{
    struct coll_topo_numa *n;
    COLL_CHECK(grow((void **)&L->t->numa, &L->t->nnuma, &L->cnuma, sizeof(*n), (void **)&n));
    n->id = id;
    n->cpus = *cpus;
    n->mem_bytes = mem;
    return collSuccess;
}

static collResult_t add_pu(struct loader *L, int os, int pkg_id, int core_key)
{
    struct raw_pu *p;
    COLL_CHECK(grow((void **)&L->raw, &L->nraw, &L->craw, sizeof(*p), (void **)&p));
    p->os = os;
    p->pkg_id = pkg_id;
    p->core_key = core_key;
    return collSuccess;
}

/* MemTotal in bytes of a node's meminfo ("Node 0 MemTotal: 123 kB") or of
 * /proc/meminfo ("MemTotal: 123 kB"); 0 when unknown. */
static uint64_t read_memtotal(const char *path)
{
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        char *m = strstr(line, "MemTotal:");
        if (m != NULL && sscanf(m, "MemTotal: %llu", &kb) == 1)
            break;
    }
    fclose(f);
    return (uint64_t)kb * 1024u;
}

static collResult_t topo_cpu_sysfs(struct loader *L)
{
    const char *R = L->t->sysfs_root;
    char path[PATH_MAX], buf[4096];
    struct coll_cpuset online;
    if (!mkpath(path, sizeof(path), "%s/devices/system/cpu/online", R))
        return collSystemError;
    int err = read_line(path, buf, sizeof(buf));
    if (err || coll_cpuset_parse(buf, &online) != 0) {
        COLL_WARN("topology: cannot read the online CPUs from %s: %s", path,
                  err ? strerror(err) : "malformed list");
        return collSystemError;
    }
    for (int c = coll_cpuset_first(&online); c >= 0; c = coll_cpuset_next(&online, c)) {
        long long pkg = 0;
        if (!mkpath(path, sizeof(path), "%s/devices/system/cpu/cpu%d/topology/physical_package_id",
                    R, c))
            return collSystemError;
        if (read_ll(path, &pkg) != 0 || pkg < 0 || pkg > INT_MAX)
            pkg = 0;
        /* The core is the set of its hardware threads (core_cpus_list, formerly
         * thread_siblings_list), named by its lowest online one. */
        int key = c;
        struct coll_cpuset sib;
        static const char *const sibling_files[] = {"core_cpus_list", "thread_siblings_list"};
        for (size_t k = 0; k < 2; k++) {
            if (!mkpath(path, sizeof(path), "%s/devices/system/cpu/cpu%d/topology/%s", R, c,
                        sibling_files[k]))
                return collSystemError;
            if (read_line(path, buf, sizeof(buf)) == 0 && coll_cpuset_parse(buf, &sib) == 0) {
                for (int s = coll_cpuset_first(&sib); s >= 0; s = coll_cpuset_next(&sib, s))
                    if (coll_cpuset_isset(&online, s)) {
                        key = s < key ? s : key;
                        break;
                    }
                break;
            }
        }
        COLL_CHECK(add_pu(L, c, (int)pkg, key));
    }

    if (!mkpath(path, sizeof(path), "%s/devices/system/node", R))
        return collSystemError;
    char **names;
    int n = list_dir(path, &names);
    collResult_t res = collSuccess;
    for (int i = 0; i < n && res == collSuccess; i++) {
        int id = numbered(names[i], "node");
        if (id < 0)
            continue;
        struct coll_cpuset cpus;
        coll_cpuset_zero(&cpus);
        if (!mkpath(path, sizeof(path), "%s/devices/system/node/%s/cpulist", R, names[i])) {
            res = collSystemError;
            break;
        }
        if (read_line(path, buf, sizeof(buf)) == 0 && coll_cpuset_parse(buf, &cpus) == 0) {
            for (size_t w = 0; w < COLL_TOPO_MAX_CPUS / 64; w++)
                cpus.bits[w] &= online.bits[w];
        } else {
            COLL_INFO(COLL_SUBSYS_INIT, "topology: no CPU list in %s; node %d has none", path, id);
        }
        if (!mkpath(path, sizeof(path), "%s/devices/system/node/%s/meminfo", R, names[i])) {
            res = collSystemError;
            break;
        }
        res = add_numa(L, id, &cpus, read_memtotal(path));
    }
    free_names(names, n);
    if (res != collSuccess)
        return res;
    if (L->t->nnuma == 0) /* a kernel without NUMA: one node holds everything */
        COLL_CHECK(add_numa(L, 0, &online, L->real_sys ? read_memtotal("/proc/meminfo") : 0));
    return collSuccess;
}

#if COLL_HAVE_HWLOC
static collResult_t topo_cpu_hwloc(struct loader *L)
{
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) != 0) {
        COLL_WARN("topology: hwloc_topology_init failed: %s", strerror(errno));
        return collSystemError;
    }
    /* The whole machine, as sysfs shows it, not only what a cgroup allows: the
     * binding says what this process may use. */
    collResult_t res = collSuccess;
    if (hwloc_topology_set_flags(topo, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED) != 0 ||
        hwloc_topology_load(topo) != 0) {
        COLL_WARN("topology: hwloc cannot load the topology: %s", strerror(errno));
        hwloc_topology_destroy(topo);
        return collSystemError;
    }
    int npu = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
    for (int i = 0; i < npu && res == collSuccess; i++) {
        hwloc_obj_t pu = hwloc_get_obj_by_type(topo, HWLOC_OBJ_PU, (unsigned)i);
        hwloc_obj_t core = hwloc_get_ancestor_obj_by_type(topo, HWLOC_OBJ_CORE, pu);
        hwloc_obj_t pkg = hwloc_get_ancestor_obj_by_type(topo, HWLOC_OBJ_PACKAGE, pu);
        int os = (int)pu->os_index;
        int key = core != NULL ? hwloc_bitmap_first(core->cpuset) : os;
        int pkg_id = pkg != NULL && pkg->os_index != HWLOC_UNKNOWN_INDEX ? (int)pkg->os_index : 0;
        res = add_pu(L, os, pkg_id, key < 0 ? os : key);
    }
    /* hwloc gives a NUMA node the CPUs of the object it hangs from, so a node
     * without CPUs of its own (high-bandwidth or far memory) shares its
     * neighbour's.  The kernel lists each CPU under one node: the node whose
     * set is the smallest among those holding the CPU (lowest id on a tie). */
    int nn = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
    for (int i = 0; i < nn && res == collSuccess; i++) {
        hwloc_obj_t node = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, (unsigned)i);
        struct coll_cpuset cpus;
        coll_cpuset_zero(&cpus);
        for (int r = 0; r < L->nraw; r++) {
            int c = L->raw[r].os;
            if (!hwloc_bitmap_isset(node->cpuset, (unsigned)c))
                continue;
            int w = hwloc_bitmap_weight(node->cpuset);
            bool best = true;
            for (int j = 0; j < nn && best; j++) {
                hwloc_obj_t o = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, (unsigned)j);
                if (o == node || !hwloc_bitmap_isset(o->cpuset, (unsigned)c))
                    continue;
                int ow = hwloc_bitmap_weight(o->cpuset);
                if (ow < w || (ow == w && o->os_index < node->os_index))
                    best = false;
            }
            if (best)
                coll_cpuset_set(&cpus, c);
        }
        res = add_numa(L, (int)node->os_index, &cpus, node->attr->numanode.local_memory);
    }
    hwloc_topology_destroy(topo);
    return res;
}
#endif

static int cmp_raw(const void *a, const void *b)
{
    const struct raw_pu *x = a, *y = b;
    return (x->os > y->os) - (x->os < y->os);
}

static int cmp_numa(const void *a, const void *b)
{
    const struct coll_topo_numa *x = a, *y = b;
    return (x->id > y->id) - (x->id < y->id);
}

static int cmp_int(const void *a, const void *b)
{
    const int *x = a, *y = b;
    return (*x > *y) - (*x < *y);
}

/* Packages, cores and PUs from the raw records, the same whatever their source. */
static collResult_t topo_build(struct loader *L)
{
    struct coll_topo *t = L->t;
    int n = L->nraw;
    if (n == 0) {
        COLL_WARN("topology: no online CPU found");
        return collSystemError;
    }
    qsort(L->raw, (size_t)n, sizeof(*L->raw), cmp_raw);
    qsort(t->numa, (size_t)t->nnuma, sizeof(*t->numa), cmp_numa);
    int *keys;
    COLL_CHECK(coll_calloc(&keys, (size_t)n * 2));
    int *pkgs = keys + n;
    for (int i = 0; i < n; i++) {
        keys[i] = L->raw[i].core_key;
        pkgs[i] = L->raw[i].pkg_id;
    }
    qsort(keys, (size_t)n, sizeof(int), cmp_int);
    qsort(pkgs, (size_t)n, sizeof(int), cmp_int);
    int nk = 0, np = 0;
    for (int i = 0; i < n; i++) {
        if (i == 0 || keys[i] != keys[i - 1])
            keys[nk++] = keys[i];
        if (i == 0 || pkgs[i] != pkgs[i - 1])
            pkgs[np++] = pkgs[i];
    }
    collResult_t res;
    COLL_CHECK_GOTO(coll_calloc(&t->pus, (size_t)n), res, out);
    COLL_CHECK_GOTO(coll_calloc(&t->cores, (size_t)nk), res, out);
    COLL_CHECK_GOTO(coll_calloc(&t->packages, (size_t)np), res, out);
    t->npus = n;
    t->ncores = nk;
    t->npackages = np;
    for (int p = 0; p < np; p++)
        t->packages[p].id = pkgs[p];
    for (int i = 0; i < n; i++) {
        const struct raw_pu *r = &L->raw[i];
        struct coll_topo_pu *pu = &t->pus[i];
        pu->os = r->os;
        pu->core = (int)((int *)bsearch(&r->core_key, keys, (size_t)nk, sizeof(int), cmp_int) -
                         keys);
        pu->package = (int)((int *)bsearch(&r->pkg_id, pkgs, (size_t)np, sizeof(int), cmp_int) -
                            pkgs);
        pu->numa = -1;
        for (int k = 0; k < t->nnuma; k++)
            if (coll_cpuset_isset(&t->numa[k].cpus, r->os)) {
                pu->numa = t->numa[k].id;
                break;
            }
        struct coll_topo_core *core = &t->cores[pu->core];
        if (core->npus++ == 0) {
            core->first_pu = r->os;
            core->package = pu->package;
            t->packages[pu->package].ncores++;
        }
        t->packages[pu->package].npus++;
    }
    res = collSuccess;
out:
    free(keys);
    return res;
}

/* ---- step 2: the binding ---- */

void coll_topo_set_binding(struct coll_topo *t, const struct coll_cpuset *cpus)
{
    t->binding = *cpus;
    t->bound_pus = t->bound_cores = 0;
    t->first_pu = t->first_core = -1;
    t->bind_numa = -1;
    t->nbind_numa = 0;
    struct coll_cpuset cores; /* by core index: there are no more cores than PUs */
    coll_cpuset_zero(&cores);
    for (int i = 0; i < t->npus; i++) { /* by os number; a core's PUs may be apart */
        const struct coll_topo_pu *pu = &t->pus[i];
        if (!coll_cpuset_isset(cpus, pu->os))
            continue;
        t->bound_pus++;
        if (t->first_pu < 0)
            t->first_pu = pu->os;
        coll_cpuset_set(&cores, pu->core);
    }
    t->bound_cores = coll_cpuset_count(&cores);
    t->first_core = coll_cpuset_first(&cores);
    for (int k = 0; k < t->nnuma; k++)
        if (coll_cpuset_intersects(&t->numa[k].cpus, cpus)) {
            t->nbind_numa++;
            t->bind_numa = t->numa[k].id;
        }
    if (t->nbind_numa != 1)
        t->bind_numa = -1;
}

bool coll_topo_binding_covers(const struct coll_topo *t, int numa)
{
    for (int k = 0; k < t->nnuma; k++)
        if (t->numa[k].id == numa)
            return coll_cpuset_intersects(&t->numa[k].cpus, &t->binding);
    return false;
}

static collResult_t topo_bind(struct coll_topo *t)
{
    size_t size = CPU_ALLOC_SIZE(COLL_TOPO_MAX_CPUS);
    cpu_set_t *set = CPU_ALLOC(COLL_TOPO_MAX_CPUS);
    if (set == NULL) {
        COLL_WARN("topology: out of memory for a CPU set");
        return collSystemError;
    }
    struct coll_cpuset cpus;
    coll_cpuset_zero(&cpus);
    if (sched_getaffinity(0, size, set) != 0) {
        COLL_WARN("topology: sched_getaffinity failed: %s", strerror(errno));
        CPU_FREE(set);
        return collSystemError;
    }
    for (int c = 0; c < COLL_TOPO_MAX_CPUS; c++)
        if (CPU_ISSET_S((size_t)c, size, set))
            coll_cpuset_set(&cpus, c);
    CPU_FREE(set);
    coll_topo_set_binding(t, &cpus);
    return collSuccess;
}

/* ---- step 3: devices ---- */

/* "0000:00:03.0", "10000:00:02.0" */
static bool is_pci_addr(const char *s)
{
    size_t i = 0;
    while (isxdigit((unsigned char)s[i]))
        i++;
    if (i < 4 || s[i] != ':')
        return false;
    const char *r = s + i + 1;
    return isxdigit((unsigned char)r[0]) && isxdigit((unsigned char)r[1]) && r[2] == ':' &&
           isxdigit((unsigned char)r[3]) && isxdigit((unsigned char)r[4]) && r[5] == '.' &&
           isdigit((unsigned char)r[6]) && r[7] == '\0';
}

/* The device at devpath (a link into R/devices, or a directory there): the
 * nearest PCI function at or above it, and the NUMA node of the nearest
 * directory that gives one.  No link, or a device under devices/virtual: -1, "". */
static void topo_locality(const struct loader *L, const char *devpath, int *numa_p, char *pci,
                          size_t pcilen)
{
    *numa_p = -1;
    pci[0] = '\0';
    char real[PATH_MAX], path[PATH_MAX];
    if (realpath(devpath, real) == NULL)
        return;
    size_t rl = strlen(L->root_real);
    if (strncmp(real, L->root_real, rl) != 0)
        return;
    bool have_numa = false;
    for (;;) {
        char *slash = strrchr(real, '/');
        if (slash == NULL || (size_t)(slash - real) < rl)
            break;
        if (strcmp(real + rl, "/devices") == 0 || strncmp(real + rl, "/devices/virtual", 16) == 0)
            break;
        if (pci[0] == '\0' && is_pci_addr(slash + 1))
            snprintf(pci, pcilen, "%s", slash + 1);
        long long v;
        if (!have_numa && snprintf(path, sizeof(path), "%s/numa_node", real) < (int)sizeof(path) &&
            read_ll(path, &v) == 0) {
            *numa_p = v >= 0 && v < INT_MAX ? (int)v : -1;
            have_numa = true;
        }
        if (have_numa && pci[0] != '\0')
            break;
        *slash = '\0';
    }
    if (*numa_p < 0 && pci[0] != '\0' && L->t->nnuma == 1)
        *numa_p = L->t->numa[0].id; /* one node: every device is near it */
}

static collResult_t netdev_get(struct loader *L, const char *name, struct coll_topo_netdev **d_p,
                               int *cap)
{
    struct coll_topo *t = L->t;
    for (int i = 0; i < t->nnetdevs; i++)
        if (strcmp(t->netdevs[i].name, name) == 0) {
            *d_p = &t->netdevs[i];
            return collSuccess;
        }
    struct coll_topo_netdev *d;
    COLL_CHECK(grow((void **)&t->netdevs, &t->nnetdevs, cap, sizeof(*d), (void **)&d));
    snprintf(d->name, sizeof(d->name), "%s", name);
    d->speed_mbps = -1;
    d->numa = -1;
    d->ifindex = 0;
    *d_p = d;
    return collSuccess;
}

static int mask_prefix(const struct sockaddr *mask)
{
    int bits = 0;
    const unsigned char *b;
    size_t n;
    if (mask == NULL)
        return 0;
    if (mask->sa_family == AF_INET) {
        b = (const unsigned char *)&((const struct sockaddr_in *)(const void *)mask)->sin_addr;
        n = 4;
    } else if (mask->sa_family == AF_INET6) {
        b = (const unsigned char *)&((const struct sockaddr_in6 *)(const void *)mask)->sin6_addr;
        n = 16;
    } else {
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        bits += __builtin_popcount(b[i]);
    return bits;
}

static collResult_t netdev_add_addr(struct coll_topo_netdev *d, const struct ifaddrs *ifa)
{
    int f = ifa->ifa_addr->sa_family;
    const void *a = f == AF_INET
                        ? (const void *)&((const struct sockaddr_in *)(const void *)ifa->ifa_addr)->sin_addr
                        : (const void *)&((const struct sockaddr_in6 *)(const void *)ifa->ifa_addr)->sin6_addr;
    /* An interface has few addresses: the array grows by one. */
    struct coll_topo_addr *p = realloc(d->addrs, (size_t)(d->naddrs + 1) * sizeof(*p));
    if (p == NULL) {
        COLL_WARN("topology: out of memory for the addresses of %s", d->name);
        return collSystemError;
    }
    d->addrs = p;
    struct coll_topo_addr *ad = &p[d->naddrs++];
    memset(ad, 0, sizeof(*ad));
    ad->family = f;
    ad->prefix = mask_prefix(ifa->ifa_netmask);
    if (inet_ntop(f, a, ad->text, sizeof(ad->text)) == NULL)
        snprintf(ad->text, sizeof(ad->text), "?");
    return collSuccess;
}

static int cmp_netdev(const void *a, const void *b)
{
    const struct coll_topo_netdev *x = a, *y = b;
    if (x->ifindex != y->ifindex)
        return (x->ifindex > y->ifindex) - (x->ifindex < y->ifindex);
    return strcmp(x->name, y->name);
}

static collResult_t topo_netdevs(struct loader *L)
{
    struct coll_topo *t = L->t;
    const char *R = t->sysfs_root;
    char path[PATH_MAX];
    int cap = 0;
    collResult_t res = collSuccess;
    if (L->real_sys) {
        /* This process's namespace: getifaddrs lists every interface (AF_PACKET)
         * with its flags, and each address. */
        struct ifaddrs *ifs = NULL;
        if (getifaddrs(&ifs) != 0) {
            COLL_WARN("topology: getifaddrs failed: %s", strerror(errno));
            return collSystemError;
        }
        for (const struct ifaddrs *i = ifs; i != NULL && res == collSuccess; i = i->ifa_next) {
            struct coll_topo_netdev *d;
            res = netdev_get(L, i->ifa_name, &d, &cap);
            if (res != collSuccess)
                break;
            d->up = (i->ifa_flags & IFF_UP) != 0;
            d->running = (i->ifa_flags & IFF_RUNNING) != 0;
            d->loopback = (i->ifa_flags & IFF_LOOPBACK) != 0;
            if (i->ifa_addr != NULL &&
                (i->ifa_addr->sa_family == AF_INET || i->ifa_addr->sa_family == AF_INET6))
                res = netdev_add_addr(d, i);
        }
        freeifaddrs(ifs);
        if (res != collSuccess)
            return res;
        for (int i = 0; i < t->nnetdevs; i++)
            t->netdevs[i].ifindex = (int)if_nametoindex(t->netdevs[i].name);
    } else {
        if (!mkpath(path, sizeof(path), "%s/class/net", R))
            return collSystemError;
        char **names;
        int n = list_dir(path, &names);
        for (int i = 0; i < n && res == collSuccess; i++) {
            struct coll_topo_netdev *d;
            long long v;
            res = netdev_get(L, names[i], &d, &cap);
            if (res != collSuccess)
                break;
            if (mkpath(path, sizeof(path), "%s/class/net/%s/ifindex", R, names[i]) &&
                read_ll(path, &v) == 0)
                d->ifindex = (int)v;
            if (mkpath(path, sizeof(path), "%s/class/net/%s/flags", R, names[i]) &&
                read_ll(path, &v) == 0) {
                d->up = (v & IFF_UP) != 0;
                d->loopback = (v & IFF_LOOPBACK) != 0;
            }
            if (mkpath(path, sizeof(path), "%s/class/net/%s/carrier", R, names[i]) &&
                read_ll(path, &v) == 0)
                d->running = d->up && v == 1;
        }
        free_names(names, n);
        if (res != collSuccess)
            return res;
    }
    for (int i = 0; i < t->nnetdevs; i++) {
        struct coll_topo_netdev *d = &t->netdevs[i];
        long long v;
        /* speed reads EINVAL without a link, -1 on virtio */
        if (mkpath(path, sizeof(path), "%s/class/net/%s/speed", R, d->name) &&
            read_ll(path, &v) == 0 && v > 0)
            d->speed_mbps = v;
        if (mkpath(path, sizeof(path), "%s/class/net/%s/device", R, d->name))
            topo_locality(L, path, &d->numa, d->pci, sizeof(d->pci));
    }
    if (t->nnetdevs > 1)
        qsort(t->netdevs, (size_t)t->nnetdevs, sizeof(*t->netdevs), cmp_netdev);
    return collSuccess;
}

/* "4: ACTIVE" -> "ACTIVE" */
static void after_colon(char *s)
{
    char *c = strchr(s, ':');
    if (c != NULL) {
        c++;
        while (*c == ' ')
            c++;
        memmove(s, c, strlen(c) + 1);
    }
}

static int cmp_port(const void *a, const void *b)
{
    const struct coll_topo_rdma_port *x = a, *y = b;
    return (x->num > y->num) - (x->num < y->num);
}

static collResult_t topo_rdma_one(struct loader *L, struct coll_topo_rdma *r)
{
    const char *R = L->t->sysfs_root;
    char path[PATH_MAX];
    if (!mkpath(path, sizeof(path), "%s/class/infiniband/%s/device", R, r->name))
        return collSystemError;
    topo_locality(L, path, &r->numa, r->pci, sizeof(r->pci));
    if (!mkpath(path, sizeof(path), "%s/class/infiniband/%s/ports", R, r->name))
        return collSystemError;
    char **ports;
    int np = list_dir(path, &ports), cap = 0;
    collResult_t res = collSuccess;
    for (int i = 0; i < np && res == collSuccess; i++) {
        int num = numbered(ports[i], "");
        if (num < 0)
            continue;
        struct coll_topo_rdma_port *p;
        res = grow((void **)&r->ports, &r->nports, &cap, sizeof(*p), (void **)&p);
        if (res != collSuccess)
            break;
        p->num = num;
        const char *base = path;
        char f[PATH_MAX];
        if (mkpath(f, sizeof(f), "%s/%s/state", base, ports[i]) &&
            read_line(f, p->state, sizeof(p->state)) == 0)
            after_colon(p->state);
        if (mkpath(f, sizeof(f), "%s/%s/link_layer", base, ports[i]))
            (void)read_line(f, p->link_layer, sizeof(p->link_layer));
        if (mkpath(f, sizeof(f), "%s/%s/rate", base, ports[i]))
            (void)read_line(f, p->rate, sizeof(p->rate));
        if (mkpath(f, sizeof(f), "%s/%s/gid_attrs/ndevs/0", base, ports[i]))
            (void)read_line(f, p->netdev, sizeof(p->netdev)); /* EINVAL: no netdev */
        if (p->netdev[0] != '\0' && r->netdev[0] == '\0')
            snprintf(r->netdev, sizeof(r->netdev), "%s", p->netdev);
    }
    free_names(ports, np);
    if (res != collSuccess)
        return res;
    if (r->nports > 1)
        qsort(r->ports, (size_t)r->nports, sizeof(*r->ports), cmp_port);
    /* Soft-RoCE names its interface in parent; a NIC's PCI function lists its own. */
    if (r->netdev[0] == '\0' && mkpath(path, sizeof(path), "%s/class/infiniband/%s/parent", R,
                                       r->name))
        (void)read_line(path, r->netdev, sizeof(r->netdev));
    if (r->netdev[0] == '\0' &&
        mkpath(path, sizeof(path), "%s/class/infiniband/%s/device/net", R, r->name)) {
        char **nets;
        int nn = list_dir(path, &nets);
        if (nn > 0)
            snprintf(r->netdev, sizeof(r->netdev), "%s", nets[0]);
        free_names(nets, nn);
    }
    if (r->pci[0] == '\0' && r->netdev[0] != '\0') { /* a virtual device: its netdev's place */
        const struct coll_topo_netdev *d = coll_topo_find_netdev(L->t, r->netdev);
        if (d != NULL)
            r->numa = d->numa;
    }
    return collSuccess;
}

static collResult_t topo_rdma(struct loader *L)
{
    struct coll_topo *t = L->t;
    char path[PATH_MAX];
    if (!mkpath(path, sizeof(path), "%s/class/infiniband", t->sysfs_root))
        return collSystemError;
    char **names;
    int n = list_dir(path, &names), cap = 0;
    collResult_t res = collSuccess;
    for (int i = 0; i < n && res == collSuccess; i++) {
        struct coll_topo_rdma *r;
        res = grow((void **)&t->rdma, &t->nrdma, &cap, sizeof(*r), (void **)&r);
        if (res != collSuccess)
            break;
        snprintf(r->name, sizeof(r->name), "%s", names[i]);
        r->numa = -1;
        res = topo_rdma_one(L, r);
    }
    free_names(names, n);
    return res;
}

static collResult_t topo_gpus(struct loader *L)
{
    struct coll_topo *t = L->t;
    char path[PATH_MAX];
    if (!mkpath(path, sizeof(path), "%s/bus/pci/devices", t->sysfs_root))
        return collSystemError;
    char **names;
    int n = list_dir(path, &names), cap = 0;
    collResult_t res = collSuccess;
    for (int i = 0; i < n && res == collSuccess; i++) {
        long long vendor, cls, dev = 0;
        if (!mkpath(path, sizeof(path), "%s/bus/pci/devices/%s/vendor", t->sysfs_root, names[i]) ||
            read_ll(path, &vendor) != 0 || vendor != 0x10de)
            continue;
        if (!mkpath(path, sizeof(path), "%s/bus/pci/devices/%s/class", t->sysfs_root, names[i]) ||
            read_ll(path, &cls) != 0 || ((cls >> 8) != 0x0300 && (cls >> 8) != 0x0302))
            continue;
        if (mkpath(path, sizeof(path), "%s/bus/pci/devices/%s/device", t->sysfs_root, names[i]))
            (void)read_ll(path, &dev);
        struct coll_topo_gpu *g;
        res = grow((void **)&t->gpus, &t->ngpus, &cap, sizeof(*g), (void **)&g);
        if (res != collSuccess)
            break;
        g->vendor = (uint32_t)vendor;
        g->pci_class = (uint32_t)cls;
        g->device = (uint32_t)dev;
        if (mkpath(path, sizeof(path), "%s/bus/pci/devices/%s", t->sysfs_root, names[i]))
            topo_locality(L, path, &g->numa, g->pci, sizeof(g->pci));
        if (g->pci[0] == '\0')
            snprintf(g->pci, sizeof(g->pci), "%.15s", names[i]);
    }
    free_names(names, n);
    return res;
}

/* ---- loading ---- */

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ULL;
    return h;
}

collResult_t coll_topo_load(const struct coll_topo_opts *opts, struct coll_topo **topo_p)
{
    struct coll_topo_opts o = {.sysfs_root = NULL, .hwloc = -1};
    if (opts != NULL)
        o = *opts;
    if (o.sysfs_root == NULL)
        o.sysfs_root = coll_param_str(COLL_PARAM_TOPO_SYSFS_ROOT);
    bool real_sys = strcmp(o.sysfs_root, "/sys") == 0;
    if (o.hwloc < 0)
        o.hwloc = COLL_HAVE_HWLOC && real_sys && coll_param_int(COLL_PARAM_TOPO_HWLOC) != 0;
    if (o.hwloc && !COLL_HAVE_HWLOC) {
        COLL_WARN("topology: hwloc was asked for but this build has none (-Dhwloc)");
        return collInvalidUsage;
    }
    if (o.hwloc && !real_sys) {
        COLL_WARN("topology: hwloc reads /sys only, not %s", o.sysfs_root);
        return collInvalidUsage;
    }

    struct loader L;
    memset(&L, 0, sizeof(L));
    L.real_sys = real_sys;
    COLL_CHECK(coll_calloc(&L.t, 1));
    struct coll_topo *t = L.t;
    collResult_t res;
    if (strlen(o.sysfs_root) >= sizeof(t->sysfs_root) ||
        realpath(o.sysfs_root, L.root_real) == NULL) {
        COLL_WARN("topology: cannot use %s as the sysfs root: %s", o.sysfs_root,
                  strlen(o.sysfs_root) >= sizeof(t->sysfs_root) ? "path too long" : strerror(errno));
        res = collSystemError;
        goto fail;
    }
    snprintf(t->sysfs_root, sizeof(t->sysfs_root), "%s", o.sysfs_root);

    if (gethostname(t->host, sizeof(t->host) - 1) != 0)
        snprintf(t->host, sizeof(t->host), "unknown");
    struct stat st;
    t->netns = stat("/proc/self/ns/net", &st) == 0 ? (uint64_t)st.st_ino : 0;
    char boot[64];
    t->boot = read_line("/proc/sys/kernel/random/boot_id", boot, sizeof(boot)) == 0 ? fnv1a(boot) : 0;

    t->source = "sysfs";
#if COLL_HAVE_HWLOC
    if (o.hwloc) {
        res = topo_cpu_hwloc(&L);
        if (res == collSuccess) {
            t->source = "hwloc";
        } else {
            COLL_WARN("topology: hwloc failed; reading sysfs instead");
            L.nraw = 0;
            t->nnuma = 0;
        }
    }
#endif
    if (strcmp(t->source, "sysfs") == 0)
        COLL_CHECK_GOTO(topo_cpu_sysfs(&L), res, fail);
    COLL_CHECK_GOTO(topo_build(&L), res, fail);
    COLL_CHECK_GOTO(topo_bind(t), res, fail);
    COLL_CHECK_GOTO(topo_netdevs(&L), res, fail);
    COLL_CHECK_GOTO(topo_rdma(&L), res, fail);
    COLL_CHECK_GOTO(topo_gpus(&L), res, fail);
    free(L.raw);
    COLL_INFO(COLL_SUBSYS_INIT,
              "topology from %s: %d packages, %d NUMA nodes, %d cores, %d PUs, %d interfaces, "
              "%d RDMA devices, %d GPUs",
              t->source, t->npackages, t->nnuma, t->ncores, t->npus, t->nnetdevs, t->nrdma,
              t->ngpus);
    *topo_p = t;
    return collSuccess;
fail:
    free(L.raw);
    coll_topo_free(t);
    return res;
}

void coll_topo_free(struct coll_topo *t)
{
    if (t == NULL)
        return;
    for (int i = 0; i < t->nnetdevs; i++)
        free(t->netdevs[i].addrs);
    for (int i = 0; i < t->nrdma; i++)
        free(t->rdma[i].ports);
    free(t->netdevs);
    free(t->rdma);
    free(t->gpus);
    free(t->packages);
    free(t->numa);
    free(t->cores);
    free(t->pus);
    free(t);
}

const struct coll_topo_netdev *coll_topo_find_netdev(const struct coll_topo *t, const char *name)
{
    for (int i = 0; name != NULL && i < t->nnetdevs; i++)
        if (strcmp(t->netdevs[i].name, name) == 0)
            return &t->netdevs[i];
    return NULL;
}

int coll_topo_nearest_netdev(const struct coll_topo *t, const char *const *candidates, int n)
{
    if (n < 1)
        return -1;
    int part = -1;
    for (int i = 0; i < n; i++) {
        const struct coll_topo_netdev *d = coll_topo_find_netdev(t, candidates[i]);
        if (d == NULL || d->numa < 0)
            continue;
        if (t->bind_numa >= 0 && d->numa == t->bind_numa)
            return i;
        if (part < 0 && coll_topo_binding_covers(t, d->numa))
            part = i;
    }
    return part >= 0 ? part : 0;
}

int coll_topo_rdma_distance(const struct coll_topo *t, const char *name)
{
    for (int i = 0; name != NULL && i < t->nrdma; i++) {
        if (strcmp(t->rdma[i].name, name) != 0)
            continue;
        int numa = t->rdma[i].numa;
        if (numa < 0)
            return 2;
        if (t->bind_numa >= 0 && numa == t->bind_numa)
            return 0;
        return coll_topo_binding_covers(t, numa) ? 1 : 2;
    }
    return 2;
}

int coll_topo_bound_numa(void)
{
    size_t size = CPU_ALLOC_SIZE(COLL_TOPO_MAX_CPUS);
    cpu_set_t *set = CPU_ALLOC(COLL_TOPO_MAX_CPUS);
    if (set == NULL)
        return -1;
    struct coll_cpuset bound;
    coll_cpuset_zero(&bound);
    if (sched_getaffinity(0, size, set) == 0)
        for (int c = 0; c < COLL_TOPO_MAX_CPUS; c++)
            if (CPU_ISSET_S((size_t)c, size, set))
                coll_cpuset_set(&bound, c);
    CPU_FREE(set);
    const char *R = coll_param_str(COLL_PARAM_TOPO_SYSFS_ROOT);
    char path[512], buf[4096];
    if (R == NULL || R[0] == '\0')
        R = "/sys";
    if (!mkpath(path, sizeof(path), "%s/devices/system/node", R))
        return -1;
    char **names;
    int n = list_dir(path, &names), node = -1, hits = 0;
    if (n < 0)
        return -1;
    for (int i = 0; i < n; i++) {
        int id = numbered(names[i], "node");
        struct coll_cpuset cpus;
        if (id < 0 ||
            !mkpath(path, sizeof(path), "%s/devices/system/node/%s/cpulist", R, names[i]) ||
            read_line(path, buf, sizeof(buf)) != 0 || coll_cpuset_parse(buf, &cpus) != 0 ||
            !coll_cpuset_intersects(&cpus, &bound))
            continue;
        hits++;
        node = id;
    }
    free_names(names, n);
    return hits == 1 ? node : -1;
}

