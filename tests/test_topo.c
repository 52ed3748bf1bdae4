/* The topology (lib/base/topo.c) from a fake sysfs tree made in a temporary directory,
 * field by field, and the real machine read both ways (hwloc and sysfs), which must
 * agree.
 *
 * The fake host:
 *
 *   package 0                      package 1
 *   NUMA node 0 (1 MiB)            NUMA node 1 (2 MiB)
 *   core 0: cpus 0,1 (two threads) core 1: cpu 2    core 2: cpu 3
 *
 *   lo    ifindex 1, up, loopback, virtual
 *   eth0  ifindex 2, up with carrier, 10000 Mb/s, PCI 0000:00:01.0 on node 0
 *   eth1  ifindex 3, down, speed unknown, a virtio device under PCI 0000:00:02.0 on node 1
 *   mlx5_0 on PCI 0000:00:01.0 (eth0's): port 1 ACTIVE Ethernet over eth0, port 2 DOWN
 *   an NVIDIA 3D controller 0000:3b:00.0 on node 1; an NVIDIA audio function and a
 *   Mellanox NIC, which are no GPUs
 *
 * Then, as root, the TCP interface a rank picks when several reach alike: in a
 * network namespace of its own, veth interfaces named eth1 and then eth0 (so eth1
 * comes first in the system's list) with addresses in one subnet; the fake tree
 * puts eth0 on node 0, where this process's CPUs are: coll_socket_pick_addr must
 * take eth0, with COLL_SOCKET_IFNAME unset and with "eth" (matching both).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <ftw.h>
#include <sched.h>
#include <sys/wait.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "alloc.h"
#include "config.h"
#include "harness.h"
#include "socket.h"
#include "topo.h"

static char root[256]; /* short, so that every path below fits */

/* Writes text to root/rel, making the directories on the way. */
__attribute__((format(printf, 2, 3)))
static void put(const char *rel, const char *fmt, ...)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", root, rel);
    for (char *p = path + strlen(root) + 1; (p = strchr(p, '/')) != NULL; p++) {
        *p = '\0';
        REQUIRE(mkdir(path, 0755) == 0 || errno == EEXIST);
        *p = '/';
    }
    FILE *f = fopen(path, "w");
    REQUIRE(f != NULL);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    REQUIRE(fclose(f) == 0);
}

/* root/rel -> root/target (an absolute link into the tree, as realpath sees it). */
static void link_to(const char *rel, const char *target)
{
    char path[PATH_MAX], dest[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", root, rel);
    snprintf(dest, sizeof(dest), "%s/%s", root, target);
    for (char *p = path + strlen(root) + 1; (p = strchr(p, '/')) != NULL; p++) {
        *p = '\0';
        REQUIRE(mkdir(path, 0755) == 0 || errno == EEXIST);
        *p = '/';
    }
    REQUIRE(symlink(dest, path) == 0);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void make_tree(void)
{
    put("devices/system/cpu/online", "0-3\n");
    static const int pkg[4] = {0, 0, 1, 1};
    static const char *const sib[4] = {"0-1", "0-1", "2", "3"};
    for (int c = 0; c < 4; c++) {
        char rel[128];
        snprintf(rel, sizeof(rel), "devices/system/cpu/cpu%d/topology/physical_package_id", c);
        put(rel, "%d\n", pkg[c]);
        snprintf(rel, sizeof(rel), "devices/system/cpu/cpu%d/topology/core_cpus_list", c);
        put(rel, "%s\n", sib[c]);
    }
    put("devices/system/node/node0/cpulist", "0-1\n");
    put("devices/system/node/node0/meminfo", "Node 0 MemTotal:        1024 kB\n"
                                             "Node 0 MemFree:          512 kB\n");
    put("devices/system/node/node1/cpulist", "2-3\n");
    put("devices/system/node/node1/meminfo", "Node 1 MemTotal:        2048 kB\n");
    put("devices/system/node/online", "0-1\n"); /* not a node directory */

    put("devices/pci0000:00/0000:00:01.0/numa_node", "0\n");
    put("devices/pci0000:00/0000:00:01.0/vendor", "0x15b3\n");
    put("devices/pci0000:00/0000:00:01.0/class", "0x020000\n");
    put("devices/pci0000:00/0000:00:01.0/net/eth0/ifindex", "2\n");
    put("devices/pci0000:00/0000:00:02.0/numa_node", "1\n");
    put("devices/pci0000:00/0000:00:02.0/virtio3/features", "0\n");
    put("class/net/lo/ifindex", "1\n");
    put("class/net/lo/flags", "0x9\n");
    put("class/net/lo/carrier", "1\n");
    put("class/net/lo/speed", "garbage\n"); /* unreadable as a number: unknown */
    put("class/net/eth0/ifindex", "2\n");
    put("class/net/eth0/flags", "0x1003\n");
    put("class/net/eth0/carrier", "1\n");
    put("class/net/eth0/speed", "10000\n");
    link_to("class/net/eth0/device", "devices/pci0000:00/0000:00:01.0");
    put("class/net/eth1/ifindex", "3\n");
    put("class/net/eth1/flags", "0x1002\n");
    put("class/net/eth1/speed", "-1\n");
    link_to("class/net/eth1/device", "devices/pci0000:00/0000:00:02.0/virtio3");

    link_to("class/infiniband/mlx5_0/device", "devices/pci0000:00/0000:00:01.0");
    put("class/infiniband/mlx5_0/ports/1/state", "4: ACTIVE\n");
    put("class/infiniband/mlx5_0/ports/1/link_layer", "Ethernet\n");
    put("class/infiniband/mlx5_0/ports/1/rate", "100 Gb/sec (4X EDR)\n");
    put("class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/0", "eth0\n");
    put("class/infiniband/mlx5_0/ports/2/state", "1: DOWN\n");
    put("class/infiniband/mlx5_0/ports/2/link_layer", "InfiniBand\n");

    put("devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/vendor", "0x10de\n");
    put("devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/device", "0x2330\n");
    put("devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/class", "0x030200\n");
    put("devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/numa_node", "1\n");
    put("devices/pci0000:3a/0000:3a:00.0/0000:3b:00.1/vendor", "0x10de\n");
    put("devices/pci0000:3a/0000:3a:00.0/0000:3b:00.1/class", "0x040300\n");
    link_to("bus/pci/devices/0000:3b:00.0", "devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0");
    link_to("bus/pci/devices/0000:3b:00.1", "devices/pci0000:3a/0000:3a:00.0/0000:3b:00.1");
    link_to("bus/pci/devices/0000:00:01.0", "devices/pci0000:00/0000:00:01.0");
}

static void set_binding(struct coll_topo *t, const char *list)
{
    struct coll_cpuset s;
    REQUIRE(coll_cpuset_parse(list, &s) == 0);
    coll_topo_set_binding(t, &s);
}

static void test_cpuset(void)
{
    struct coll_cpuset s;
    char buf[64];
    CHECK(coll_cpuset_parse("0-3,8,10-11\n", &s) == 0);
    CHECK(coll_cpuset_count(&s) == 7);
    CHECK(coll_cpuset_first(&s) == 0);
    CHECK(coll_cpuset_next(&s, 3) == 8);
    CHECK(coll_cpuset_next(&s, 11) == -1);
    coll_cpuset_format(&s, buf, sizeof(buf));
    CHECK_MSG(strcmp(buf, "0-3,8,10-11") == 0, "got %s", buf);
    CHECK(coll_cpuset_parse("", &s) == 0 && coll_cpuset_count(&s) == 0);
    coll_cpuset_format(&s, buf, sizeof(buf));
    CHECK(buf[0] == '\0');
    CHECK(coll_cpuset_parse("4095", &s) == 0 && coll_cpuset_first(&s) == 4095);
    CHECK(coll_cpuset_parse("4096", &s) == -1);
    CHECK(coll_cpuset_parse("3-1", &s) == -1);
    CHECK(coll_cpuset_parse("1,,2", &s) == -1);
    CHECK(coll_cpuset_parse("a", &s) == -1);
    CHECK(coll_cpuset_parse("1-", &s) == -1);
    /* 0,2,4,...: too long for 10 bytes, cut with "..." */
    coll_cpuset_zero(&s);
    for (int c = 0; c < 40; c += 2)
        coll_cpuset_set(&s, c);
    coll_cpuset_format(&s, buf, 10);
    CHECK_MSG(strlen(buf) < 10 && strstr(buf, "...") != NULL, "got %s", buf);
}

static void test_fake(void)
{
    struct coll_topo_opts o = {.sysfs_root = root, .hwloc = 0};
    struct coll_topo *t;
    CHECK_RES(coll_topo_load(&o, &t), collSuccess, NULL);
    if (t == NULL)
        return;
    CHECK(strcmp(t->source, "sysfs") == 0);
    CHECK(t->npackages == 2 && t->nnuma == 2 && t->ncores == 3 && t->npus == 4);
    CHECK(t->packages[0].id == 0 && t->packages[0].ncores == 1 && t->packages[0].npus == 2);
    CHECK(t->packages[1].id == 1 && t->packages[1].ncores == 2 && t->packages[1].npus == 2);
    CHECK(t->numa[0].id == 0 && t->numa[0].mem_bytes == 1024 * 1024);
    CHECK(t->numa[1].id == 1 && t->numa[1].mem_bytes == 2048 * 1024);
    char buf[64];
    coll_cpuset_format(&t->numa[0].cpus, buf, sizeof(buf));
    CHECK_MSG(strcmp(buf, "0-1") == 0, "node 0 cpus %s", buf);
    coll_cpuset_format(&t->numa[1].cpus, buf, sizeof(buf));
    CHECK_MSG(strcmp(buf, "2-3") == 0, "node 1 cpus %s", buf);
    static const int core[4] = {0, 0, 1, 2}, package[4] = {0, 0, 1, 1}, numa[4] = {0, 0, 1, 1};
    for (int i = 0; i < 4; i++)
        CHECK_MSG(t->pus[i].os == i && t->pus[i].core == core[i] &&
                      t->pus[i].package == package[i] && t->pus[i].numa == numa[i],
                  "pu %d: os %d core %d package %d numa %d", i, t->pus[i].os, t->pus[i].core,
                  t->pus[i].package, t->pus[i].numa);
    CHECK(t->cores[0].first_pu == 0 && t->cores[0].npus == 2 && t->cores[0].package == 0);
    CHECK(t->cores[1].first_pu == 2 && t->cores[1].npus == 1 && t->cores[1].package == 1);
    CHECK(t->cores[2].first_pu == 3 && t->cores[2].npus == 1 && t->cores[2].package == 1);

    /* Bindings. */
    set_binding(t, "0-1");
    CHECK(t->bound_pus == 2 && t->bound_cores == 1 && t->first_pu == 0 && t->first_core == 0);
    CHECK(t->bind_numa == 0 && t->nbind_numa == 1);
    set_binding(t, "3");
    CHECK(t->bound_pus == 1 && t->bound_cores == 1 && t->first_pu == 3 && t->first_core == 2);
    CHECK(t->bind_numa == 1);
    set_binding(t, "1-2");
    CHECK(t->bound_pus == 2 && t->bound_cores == 2 && t->first_core == 0);
    CHECK(t->bind_numa == -1 && t->nbind_numa == 2);
    CHECK(coll_topo_binding_covers(t, 0) && coll_topo_binding_covers(t, 1));
    CHECK(!coll_topo_binding_covers(t, 7));
    set_binding(t, "9"); /* not a CPU of this host */
    CHECK(t->bound_pus == 0 && t->first_pu == -1 && t->first_core == -1 && t->bind_numa == -1);

    /* Interfaces, by ifindex. */
    REQUIRE(t->nnetdevs == 3);
    const struct coll_topo_netdev *lo = &t->netdevs[0], *e0 = &t->netdevs[1], *e1 = &t->netdevs[2];
    CHECK(strcmp(lo->name, "lo") == 0 && lo->ifindex == 1 && lo->up && lo->running &&
          lo->loopback && lo->speed_mbps == -1 && lo->numa == -1 && lo->pci[0] == '\0');
    CHECK(strcmp(e0->name, "eth0") == 0 && e0->ifindex == 2 && e0->up && e0->running &&
          !e0->loopback && e0->speed_mbps == 10000 && e0->numa == 0 &&
          strcmp(e0->pci, "0000:00:01.0") == 0);
    CHECK(strcmp(e1->name, "eth1") == 0 && e1->ifindex == 3 && !e1->up && !e1->running &&
          e1->speed_mbps == -1 && e1->numa == 1 && strcmp(e1->pci, "0000:00:02.0") == 0);
    for (int i = 0; i < 3; i++)
        CHECK(t->netdevs[i].naddrs == 0); /* a fake tree has no addresses */
    CHECK(coll_topo_find_netdev(t, "eth1") == e1 && coll_topo_find_netdev(t, "eth9") == NULL);

    /* RDMA. */
    REQUIRE(t->nrdma == 1);
    const struct coll_topo_rdma *r = &t->rdma[0];
    CHECK(strcmp(r->name, "mlx5_0") == 0 && r->numa == 0 && strcmp(r->pci, "0000:00:01.0") == 0 &&
          strcmp(r->netdev, "eth0") == 0);
    REQUIRE(r->nports == 2);
    CHECK(r->ports[0].num == 1 && strcmp(r->ports[0].state, "ACTIVE") == 0 &&
          strcmp(r->ports[0].link_layer, "Ethernet") == 0 &&
          strcmp(r->ports[0].rate, "100 Gb/sec (4X EDR)") == 0 &&
          strcmp(r->ports[0].netdev, "eth0") == 0);
    CHECK(r->ports[1].num == 2 && strcmp(r->ports[1].state, "DOWN") == 0 &&
          strcmp(r->ports[1].link_layer, "InfiniBand") == 0 && r->ports[1].rate[0] == '\0' &&
          r->ports[1].netdev[0] == '\0');

    /* GPUs: the 3D controller only. */
    REQUIRE(t->ngpus == 1);
    CHECK(strcmp(t->gpus[0].pci, "0000:3b:00.0") == 0 && t->gpus[0].vendor == 0x10de &&
          t->gpus[0].device == 0x2330 && t->gpus[0].pci_class == 0x030200 &&
          t->gpus[0].numa == 1);

    /* The nearest interface. */
    const char *const both[] = {"eth0", "eth1"};
    const char *const lo_eth1[] = {"lo", "eth1"};
    const char *const unknown[] = {"nosuch", "eth0"};
    set_binding(t, "2-3");
    CHECK(coll_topo_nearest_netdev(t, both, 2) == 1);
    set_binding(t, "0");
    CHECK(coll_topo_nearest_netdev(t, both, 2) == 0);
    CHECK(coll_topo_nearest_netdev(t, lo_eth1, 2) == 0); /* no match: the first */
    CHECK(coll_topo_nearest_netdev(t, unknown, 2) == 1);
    set_binding(t, "1-2"); /* both nodes: the first candidate on either */
    CHECK(coll_topo_nearest_netdev(t, lo_eth1, 2) == 1);
    CHECK(coll_topo_nearest_netdev(t, both, 2) == 0);
    set_binding(t, "3");
    const char *const same[] = {"eth1", "eth1"};
    CHECK(coll_topo_nearest_netdev(t, same, 2) == 0); /* tie: the first */
    CHECK(coll_topo_nearest_netdev(t, both, 0) == -1);
    /* The nearest RDMA device: mlx5_0 sits on node 0. */
    CHECK(coll_topo_rdma_distance(t, "mlx5_0") == 2); /* bound to 3: node 1 */
    CHECK(coll_topo_rdma_distance(t, "nosuch") == 2);
    set_binding(t, "0");
    CHECK(coll_topo_rdma_distance(t, "mlx5_0") == 0);
    set_binding(t, "1-2");
    CHECK(coll_topo_rdma_distance(t, "mlx5_0") == 1);

    /* The summary. */
    struct coll_topo_rank s;
    set_binding(t, "2-3");
    coll_topo_rank_fill(t, "eth1", &s);
    CHECK(coll_topo_rank_valid(&s));
    CHECK(s.pid == (int32_t)getpid() && s.numa == 1 && s.bound_pus == 2 && s.bound_cores == 2 &&
          s.first_pu == 2 && s.first_core == 1 && s.packages == 2 && s.numa_nodes == 2 &&
          s.cores == 3 && s.pus == 4 && s.netdev_numa == 1 && s.rdma_devices == 1 &&
          s.gpus == 1 && s.hwloc == 0 && s.numa_mask == 2);
    CHECK(strcmp(s.cpus, "2-3") == 0 && strcmp(s.netdev, "eth1") == 0 &&
          strcmp(s.host, t->host) == 0 && s.netns == t->netns);
    s.magic ^= 1;
    CHECK(!coll_topo_rank_valid(&s));

    /* The JSON is valid. */
    char path[512];
    snprintf(path, sizeof(path), "%s/topo.json", root);
    FILE *f = fopen(path, "w");
    REQUIRE(f != NULL);
    fprintf(f, "{\"topology\": ");
    coll_topo_write_json(t, f);
    fprintf(f, ", \"summary\": ");
    coll_topo_rank_fill(t, "eth1", &s);
    coll_topo_rank_write_json(&s, f);
    fprintf(f, "}\n");
    REQUIRE(fclose(f) == 0);
    if (access("/usr/bin/python3", X_OK) == 0) {
        char cmd[1024];
        snprintf(cmd, sizeof(cmd),
                 "/usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); "
                 "t=d[\"topology\"]; assert t[\"gpus\"][0][\"class\"]==\"0x030200\"; "
                 "assert t[\"netdevs\"][2][\"speed_mbps\"] is None; "
                 "assert t[\"rdma\"][0][\"ports\"][0][\"state\"]==\"ACTIVE\"; "
                 "assert d[\"summary\"][\"numa\"]==1' '%s'",
                 path);
        CHECK_MSG(system(cmd) == 0, "invalid JSON in %s", path);
    }
    coll_topo_free(t);
}

/* Files missing, malformed or in the way: clear failures, no crash. */
static void test_broken(void)
{
    struct coll_topo *t = NULL;
    char path[PATH_MAX];
    struct coll_topo_opts o = {.sysfs_root = "/nonexistent/sysfs", .hwloc = 0};
    CHECK_RES(coll_topo_load(&o, &t), collSystemError, NULL);
    o.sysfs_root = root;
    o.hwloc = 1; /* hwloc cannot read another root */
    CHECK_RES(coll_topo_load(&o, &t), collInvalidUsage, NULL);
    o.hwloc = 0;

    /* Without the NUMA directory: one node 0 with every CPU, memory unknown. */
    snprintf(path, sizeof(path), "%s/devices/system/node", root);
    char moved[PATH_MAX];
    snprintf(moved, sizeof(moved), "%s/node.off", root);
    REQUIRE(rename(path, moved) == 0);
    put("devices/pci0000:00/0000:00:02.0/numa_node", "-1\n");
    CHECK_RES(coll_topo_load(&o, &t), collSuccess, NULL);
    if (t != NULL) {
        CHECK(t->nnuma == 1 && t->numa[0].id == 0 && t->numa[0].mem_bytes == 0 &&
              coll_cpuset_count(&t->numa[0].cpus) == 4);
        /* One node: a PCI device whose node is unknown is on it. */
        CHECK(t->netdevs[1].numa == 0 && t->netdevs[2].numa == 0);
        CHECK(t->netdevs[0].numa == -1); /* lo stays virtual */
        coll_topo_free(t);
    }
    REQUIRE(rename(moved, path) == 0);
    put("devices/pci0000:00/0000:00:02.0/numa_node", "1\n");

    /* A malformed online list fails, naming the file. */
    put("devices/system/cpu/online", "0-x\n");
    t = NULL;
    CHECK_RES(coll_topo_load(&o, &t), collSystemError, NULL);
    CHECK(t == NULL);
    snprintf(path, sizeof(path), "%s/devices/system/cpu/online", root);
    REQUIRE(unlink(path) == 0);
    CHECK_RES(coll_topo_load(&o, &t), collSystemError, NULL);
    put("devices/system/cpu/online", "0-3\n");

    /* Topology files missing: every CPU its own core on package 0. */
    for (int c = 0; c < 4; c++) {
        snprintf(path, sizeof(path), "%s/devices/system/cpu/cpu%d/topology/core_cpus_list", root, c);
        REQUIRE(unlink(path) == 0);
        snprintf(path, sizeof(path), "%s/devices/system/cpu/cpu%d/topology/physical_package_id",
                 root, c);
        REQUIRE(unlink(path) == 0);
    }
    CHECK_RES(coll_topo_load(&o, &t), collSuccess, NULL);
    if (t != NULL) {
        CHECK(t->npackages == 1 && t->ncores == 4 && t->npus == 4 && t->nnuma == 2);
        coll_topo_free(t);
    }
}

/* The real machine: hwloc and sysfs give the same answers. */
static void test_real(void)
{
    struct coll_topo_opts o = {.sysfs_root = "/sys", .hwloc = 0};
    struct coll_topo *s = NULL, *h = NULL;
    CHECK_RES(coll_topo_load(&o, &s), collSuccess, NULL);
    if (s == NULL)
        return;
    CHECK(strcmp(s->source, "sysfs") == 0);
    CHECK(s->npus >= 1 && s->ncores >= 1 && s->nnuma >= 1 && s->npackages >= 1);
    CHECK(s->bound_pus >= 1 && s->first_pu >= 0);
    const struct coll_topo_netdev *lo = coll_topo_find_netdev(s, "lo");
    if (lo != NULL) {
        bool v4 = false;
        for (int a = 0; a < lo->naddrs; a++)
            v4 |= strcmp(lo->addrs[a].text, "127.0.0.1") == 0 && lo->addrs[a].prefix == 8;
        CHECK(lo->loopback && lo->up && lo->numa == -1 && v4);
    }
    /* COLL_TOPO_HWLOC=0 (a parameter, read once per process) is checked by
     * test_collinfo.sh, which starts collinfo with it. */

    o.hwloc = 1;
#if COLL_HAVE_HWLOC
    CHECK_RES(coll_topo_load(&o, &h), collSuccess, NULL);
#else
    CHECK_RES(coll_topo_load(&o, &h), collInvalidUsage, NULL);
#endif
    printf("sysfs: %d packages, %d NUMA nodes, %d cores, %d PUs; node 0 %llu bytes\n",
           s->npackages, s->nnuma, s->ncores, s->npus, (unsigned long long)s->numa[0].mem_bytes);
    if (h == NULL) {
        printf("hwloc: not built in; the comparison is skipped\n");
        coll_topo_free(s);
        return;
    }
    printf("hwloc: %d packages, %d NUMA nodes, %d cores, %d PUs; node 0 %llu bytes\n",
           h->npackages, h->nnuma, h->ncores, h->npus, (unsigned long long)h->numa[0].mem_bytes);
    CHECK(strcmp(h->source, "hwloc") == 0);
    CHECK(h->npackages == s->npackages && h->nnuma == s->nnuma && h->ncores == s->ncores &&
          h->npus == s->npus);
    for (int i = 0; i < s->npackages && i < h->npackages; i++)
        CHECK(h->packages[i].id == s->packages[i].id &&
              h->packages[i].ncores == s->packages[i].ncores &&
              h->packages[i].npus == s->packages[i].npus);
    for (int i = 0; i < s->nnuma && i < h->nnuma; i++)
        CHECK_MSG(h->numa[i].id == s->numa[i].id &&
                      memcmp(&h->numa[i].cpus, &s->numa[i].cpus, sizeof(s->numa[i].cpus)) == 0,
                  "NUMA node %d differs", s->numa[i].id);
    for (int i = 0; i < s->npus && i < h->npus; i++)
        CHECK_MSG(h->pus[i].os == s->pus[i].os && h->pus[i].core == s->pus[i].core &&
                      h->pus[i].package == s->pus[i].package && h->pus[i].numa == s->pus[i].numa,
                  "PU %d differs", s->pus[i].os);
    CHECK(h->bound_pus == s->bound_pus && h->bound_cores == s->bound_cores &&
          h->first_core == s->first_core && h->bind_numa == s->bind_numa);
    CHECK(h->nnetdevs == s->nnetdevs && h->nrdma == s->nrdma && h->ngpus == s->ngpus);
    coll_topo_free(h);
    coll_topo_free(s);
}

/* In the re-executed child (COLL_TOPO_SYSFS_ROOT: the fake tree): which
 * interface the pick takes, toward nothing and toward an address of the subnet. */
static int pick_child(void)
{
    char name[64] = "";
    union coll_sockaddr ss;
    socklen_t len;
    REQUIRE(coll_socket_pick_addr(NULL, &ss, &len, name, sizeof(name)) == collSuccess);
    CHECK_MSG(strcmp(name, "eth0") == 0, "picked %s, want eth0 (node 0, this process's)", name);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(1)};
    inet_pton(AF_INET, "10.250.0.9", &to.sin_addr);
    REQUIRE(coll_socket_pick_addr((const struct sockaddr *)&to, &ss, &len, name, sizeof(name)) ==
            collSuccess);
    CHECK_MSG(strcmp(name, "eth0") == 0, "toward the subnet: picked %s, want eth0", name);
    /* This process's CPUs (0-1, or part) are all on the fake node 0. */
    CHECK(coll_topo_bound_numa() == 0);
    return test_result();
}

static void test_pick_nearest(const char *self)
{
    if (geteuid() != 0) {
        printf("pick: skipped (needs root for a network namespace)\n");
        return;
    }
    for (int k = 0; k < 2; k++) {
        pid_t pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            if (unshare(CLONE_NEWNET) != 0)
                _exit(77);
            const char *cmd =
                "ip link add eth1 type veth peer name p1 && ip link add eth0 type veth peer "
                "name p0 && ip addr add 10.250.0.2/24 dev eth1 && ip addr add 10.250.0.1/24 "
                "dev eth0 && for d in eth1 p1 eth0 p0; do ip link set $d up || exit 1; done";
            if (system(cmd) != 0)
                _exit(77);
            setenv("COLL_TOPO_SYSFS_ROOT", root, 1);
            setenv("COLL_TOPO_HWLOC", "0", 1);
            if (k == 1)
                setenv("COLL_SOCKET_IFNAME", "eth", 1);
            else
                unsetenv("COLL_SOCKET_IFNAME");
            execl(self, self, "--pick-child", (char *)NULL);
            _exit(127);
        }
        int st = 0;
        REQUIRE(waitpid(pid, &st, 0) == pid);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 77) {
            printf("pick: skipped (no network namespace or veth here)\n");
            return;
        }
        CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "pick child %d: status 0x%x", k, st);
    }
}

/* A shared-memory segment placed on a node carries that node as the file's
 * preferred policy; unplaced, none. */
static void test_memfd_numa(void)
{
    int fd;
    void *base;
    const char *step;
    size_t bytes = 1 << 20;
    REQUIRE(coll_memfd_map("test-topo", bytes, 0, &fd, &base, &step) == 0);
    int mode = -1;
    unsigned long mask = 0;
    long rc = syscall(SYS_get_mempolicy, &mode, &mask, 64UL, base, 2UL /* MPOL_F_ADDR */);
    if (rc != 0 && errno == ENOSYS) {
        printf("memfd numa: skipped (no NUMA in this kernel)\n");
    } else {
        CHECK_MSG(rc == 0 && mode == 1 /* MPOL_PREFERRED */ && mask == 1,
                  "placed on node 0: get_mempolicy %ld, mode %d, mask %#lx", rc, mode, mask);
    }
    munmap(base, bytes);
    close(fd);
    REQUIRE(coll_memfd_map("test-topo", bytes, -1, &fd, &base, &step) == 0);
    mode = -1;
    if (syscall(SYS_get_mempolicy, &mode, &mask, 64UL, base, 2UL) == 0)
        CHECK_MSG(mode == 0 /* MPOL_DEFAULT */, "unplaced: mode %d", mode);
    munmap(base, bytes);
    close(fd);
    /* The real machine: a single node holds every CPU there is. */
    int nodes = 0;
    char path[128];
    for (int k = 0; k < 64; k++) {
        snprintf(path, sizeof(path), "/sys/devices/system/node/node%d", k);
        nodes += access(path, F_OK) == 0;
    }
    if (nodes == 1)
        CHECK(coll_topo_bound_numa() == 0);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--pick-child") == 0)
        return pick_child();
    const char *tmp = getenv("TMPDIR");
    snprintf(root, sizeof(root), "%s/test_topo.XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    REQUIRE(mkdtemp(root) != NULL);
    test_cpuset();
    make_tree();
    test_fake();
    test_broken();
    test_real();
    test_pick_nearest("/proc/self/exe");
    test_memfd_numa();
    nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return test_result();
}
