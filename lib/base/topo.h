/* The host's topology as this process sees it (topo.c): packages, NUMA nodes, cores
 * and PUs (hardware threads), the process's CPU binding, network interfaces, RDMA
 * devices and NVIDIA GPUs, and a fixed-size per-rank summary (struct coll_topo_rank)
 * that ranks can exchange as bytes.
 *
 * Two sources give the CPU and memory side: hwloc (when the build has it,
 * COLL_HAVE_HWLOC) and sysfs (/sys/devices/system/{cpu,node}, /proc/meminfo).  Both
 * give the same answers: cores and packages are numbered the same way from either.
 * The devices (interfaces, RDMA, GPUs) and their NUMA nodes are read from sysfs in
 * both cases, as hwloc itself reads them there; the interfaces' flags and addresses
 * come from getifaddrs (this process's network namespace).  docs/topology.md.
 *
 * The base layer: no communicator.  Nothing here is thread-safe on one struct
 * coll_topo; separate ones may be loaded and read in separate threads. */
#ifndef COLL_TOPO_H
#define COLL_TOPO_H

#include <net/if.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "collective.h"

/* CPUs (by the kernel's number) that a set can hold; higher ones are ignored. */
#define COLL_TOPO_MAX_CPUS 4096

struct coll_cpuset {
    uint64_t bits[COLL_TOPO_MAX_CPUS / 64];
};

void coll_cpuset_zero(struct coll_cpuset *s);
void coll_cpuset_set(struct coll_cpuset *s, int cpu);
bool coll_cpuset_isset(const struct coll_cpuset *s, int cpu);
int coll_cpuset_count(const struct coll_cpuset *s);
/* The lowest CPU of s, -1 when s is empty. */
int coll_cpuset_first(const struct coll_cpuset *s);
/* The CPU after cpu in s, -1 when none: for (c = first(s); c >= 0; c = next(s, c)). */
int coll_cpuset_next(const struct coll_cpuset *s, int cpu);
bool coll_cpuset_intersects(const struct coll_cpuset *a, const struct coll_cpuset *b);
/* Parses the kernel's list format, "0-3,8,10-11" (an empty string is the empty
 * set).  Returns 0, or -1 when malformed or past COLL_TOPO_MAX_CPUS. */
int coll_cpuset_parse(const char *list, struct coll_cpuset *s_p);
/* Writes s in the same format ("" for the empty set).  When it does not fit in
 * len bytes, the text ends with "..." instead. */
void coll_cpuset_format(const struct coll_cpuset *s, char *buf, size_t len);

struct coll_topo_package {
    int id;        /* physical_package_id */
    int ncores, npus;
};

struct coll_topo_numa {
    int id;                   /* the kernel's node number */
    struct coll_cpuset cpus;  /* its online CPUs (empty for a memory-only node) */
    uint64_t mem_bytes;       /* MemTotal of the node; 0 when unknown */
};

/* Cores are numbered 0..ncores-1 in the order of their lowest PU. */
struct coll_topo_core {
    int package;              /* index into packages */
    int first_pu;             /* its lowest PU */
    int npus;
};

struct coll_topo_pu {
    int os;                   /* the kernel's CPU number */
    int core;                 /* index into cores */
    int package;              /* index into packages */
    int numa;                 /* its NUMA node's id, -1 when none holds it */
};

struct coll_topo_addr {
    int family;               /* AF_INET or AF_INET6 */
    int prefix;               /* prefix length of the netmask */
    char text[48];            /* "10.0.0.1", "fe80::1" */
};

/* Where a device sits: the PCI function nearest to it and that function's NUMA
 * node.  numa is -1 for a virtual device (lo, veth, a bridge) and for a PCI
 * device whose firmware gives no node on a host with several; on a host with one
 * NUMA node a PCI device is on that node. */
struct coll_topo_netdev {
    char name[IF_NAMESIZE];
    int ifindex;
    bool up;                  /* IFF_UP: configured up */
    bool running;             /* IFF_RUNNING: the link has a carrier */
    bool loopback;
    int64_t speed_mbps;       /* from sysfs; -1 when unknown (virtual, no link) */
    int numa;
    char pci[16];             /* "0000:00:03.0", "" when virtual */
    int naddrs;
    struct coll_topo_addr *addrs;
};

struct coll_topo_rdma_port {
    int num;
    char state[24];           /* "ACTIVE", "DOWN" (the text after "4: ") */
    char link_layer[16];      /* "InfiniBand", "Ethernet" */
    char rate[48];            /* "100 Gb/sec (4X EDR)", "" when unknown */
    char netdev[IF_NAMESIZE]; /* the interface of its first GID, "" when none */
};

struct coll_topo_rdma {
    char name[64];            /* "mlx5_0", "rxe0" */
    int numa;                 /* as for a netdev */
    char pci[16];
    char netdev[IF_NAMESIZE]; /* the interface it sits on, "" when unknown */
    int nports;
    struct coll_topo_rdma_port *ports;
};

/* An NVIDIA display or 3D controller (PCI class 0x0300 or 0x0302, vendor 0x10de). */
struct coll_topo_gpu {
    char pci[16];
    uint32_t vendor, device, pci_class; /* pci_class: the 24-bit class code, 0x030200 */
    int numa;
};

struct coll_topo {
    const char *source;       /* "hwloc" or "sysfs": where the CPUs and NUMA nodes came from */
    char sysfs_root[256];
    char host[64];            /* gethostname */
    uint64_t netns;           /* inode of /proc/self/ns/net, 0 when unknown */
    uint64_t boot;            /* hash of /proc/sys/kernel/random/boot_id, 0 when unknown */
    int npackages, nnuma, ncores, npus;
    struct coll_topo_package *packages; /* by id */
    struct coll_topo_numa *numa;        /* by id */
    struct coll_topo_core *cores;
    struct coll_topo_pu *pus;           /* by os number */
    /* The binding (sched_getaffinity of the calling thread, or coll_topo_set_binding)
     * and what follows from it: */
    struct coll_cpuset binding;
    int bound_pus, bound_cores;
    int first_pu, first_core;           /* -1 when no known PU is bound */
    int bind_numa;            /* the one NUMA node holding every bound PU; -1 otherwise */
    int nbind_numa;           /* NUMA nodes holding at least one bound PU */
    int nnetdevs, nrdma, ngpus;
    struct coll_topo_netdev *netdevs;   /* by ifindex */
    struct coll_topo_rdma *rdma;        /* by name */
    struct coll_topo_gpu *gpus;         /* by PCI address */
};

struct coll_topo_opts {
    /* The sysfs tree to read, for tests; NULL: COLL_TOPO_SYSFS_ROOT, else "/sys".
     * Any root other than "/sys" takes the sysfs source and lists the interfaces
     * found under it (class/net), with no addresses. */
    const char *sysfs_root;
    /* 1: hwloc (collInvalidUsage when the build lacks it); 0: sysfs; -1: hwloc when
     * built in, unless COLL_TOPO_HWLOC=0. */
    int hwloc;
};

/* Loads the topology.  opts may be NULL (the defaults).  A missing optional file
 * (a speed, a NUMA node of a device) leaves its field unknown; what cannot be
 * done without (the list of online CPUs, memory) fails with collSystemError,
 * logged at WARN naming the file.  When hwloc fails to load, sysfs is used and
 * the failure logged at WARN.  The caller frees *topo_p with coll_topo_free. */
collResult_t coll_topo_load(const struct coll_topo_opts *opts, struct coll_topo **topo_p);
/* Frees t; NULL is accepted. */
void coll_topo_free(struct coll_topo *t);
/* Replaces the binding of t (normally the calling thread's at load time) and
 * recomputes what follows from it: for tests, and for another thread's binding. */
void coll_topo_set_binding(struct coll_topo *t, const struct coll_cpuset *cpus);
/* The interface called name, or NULL. */
const struct coll_topo_netdev *coll_topo_find_netdev(const struct coll_topo *t, const char *name);
/* Whether the binding holds a PU of NUMA node `numa`. */
bool coll_topo_binding_covers(const struct coll_topo *t, int numa);
/* Among the interface names candidates[0..n), the index of the first whose
 * device's NUMA node holds the whole binding (t->bind_numa), else of the first
 * whose node holds part of it, else 0; -1 when n < 1.  A name t does not know
 * counts as a virtual device.  coll_socket_pick_addr breaks ties between
 * interfaces with it. */
int coll_topo_nearest_netdev(const struct coll_topo *t, const char *const *candidates, int n);
/* How far the RDMA device called name is from the binding: 0 on the NUMA node
 * that holds the whole binding, 1 on a node that holds part of it, 2 elsewhere
 * or unknown (the verbs transport tries devices nearest first). */
int coll_topo_rdma_distance(const struct coll_topo *t, const char *name);
/* The NUMA node that holds every CPU the calling thread may run on, or -1 (none
 * alone, or unknown), from sysfs alone (COLL_TOPO_SYSFS_ROOT): cheap enough for
 * every communicator's init, where it goes in the rank's record so that a
 * shared-memory segment can be placed on its receiver's node. */
int coll_topo_bound_numa(void);

/* Writes the topology as one JSON object (no trailing newline). */
void coll_topo_write_json(const struct coll_topo *t, FILE *f);
/* Writes it as indented text for people. */
void coll_topo_print(const struct coll_topo *t, FILE *f);
/* Writes s as a JSON string, quotes included, escaping what JSON requires. */
void coll_topo_json_str(FILE *f, const char *s);

/*
 * The per-rank summary: a fixed layout of fixed-size fields with no pointers and no
 * padding, so that ranks exchange it as bytes (collAllGather on collUint8 in
 * tools/collinfo.c; the engine may carry it in its records later).  All ranks of a
 * job are assumed to share the byte order.
 */
#define COLL_TOPO_RANK_MAGIC 0x4f504f54u /* "TOPO" little-endian */
#define COLL_TOPO_RANK_VERSION 1u
struct coll_topo_rank {
    uint32_t magic;
    uint32_t version;
    int32_t pid;
    int32_t numa;             /* t->bind_numa */
    int32_t bound_pus, bound_cores;
    int32_t first_pu, first_core;
    int32_t packages, numa_nodes, cores, pus; /* the host's */
    int32_t netdev_numa;      /* NUMA node of netdev's device, -1 virtual or unknown */
    int32_t rdma_devices, gpus;
    int32_t hwloc;            /* 1: the CPU side came from hwloc */
    uint64_t numa_mask;       /* bit i: the binding holds a PU of node i (nodes 0-63) */
    uint64_t netns;
    uint64_t boot;
    char host[64];
    char cpus[64];            /* the binding as a list, "0-3,8" ("..." when cut) */
    char netdev[IF_NAMESIZE]; /* the interface this rank uses (or would) for TCP */
};
_Static_assert(sizeof(struct coll_topo_rank) == 232, "struct coll_topo_rank has no padding");

/* Fills r from t.  ifname: the interface the rank uses; NULL picks it as the
 * bootstrap would with no root given (COLL_SOCKET_IFNAME, else the first that is up
 * and not loopback, else loopback). */
void coll_topo_rank_fill(const struct coll_topo *t, const char *ifname,
                         struct coll_topo_rank *r);
/* Whether bytes received from a peer are a summary of this layout. */
bool coll_topo_rank_valid(const struct coll_topo_rank *r);
/* Writes r as one JSON object (no trailing newline). */
void coll_topo_rank_write_json(const struct coll_topo_rank *r, FILE *f);

#endif
