/* The topology written out (topo.h): as JSON for collinfo --json and
 * COLL_TOPO_DUMP_FILE, as text for collinfo, and the per-rank summary that
 * ranks exchange.  Loading is topo.c's. */
#include "topo.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "socket.h"

/* ---- output ---- */

void coll_topo_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static void json_cpus(FILE *f, const struct coll_cpuset *s)
{
    char buf[1024];
    coll_cpuset_format(s, buf, sizeof(buf));
    coll_topo_json_str(f, buf);
}

void coll_topo_write_json(const struct coll_topo *t, FILE *f)
{
    fprintf(f, "{\"source\": \"%s\", \"host\": ", t->source);
    coll_topo_json_str(f, t->host);
    fprintf(f, ", \"netns\": %llu, \"sysfs_root\": ", (unsigned long long)t->netns);
    coll_topo_json_str(f, t->sysfs_root);
    fprintf(f, ",\n \"packages\": [");
    for (int i = 0; i < t->npackages; i++)
        fprintf(f, "%s{\"id\": %d, \"cores\": %d, \"pus\": %d}", i ? ", " : "", t->packages[i].id,
                t->packages[i].ncores, t->packages[i].npus);
    fprintf(f, "],\n \"numa_nodes\": [");
    for (int i = 0; i < t->nnuma; i++) {
        fprintf(f, "%s{\"id\": %d, \"cpus\": ", i ? ", " : "", t->numa[i].id);
        json_cpus(f, &t->numa[i].cpus);
        fprintf(f, ", \"memory_bytes\": %llu}", (unsigned long long)t->numa[i].mem_bytes);
    }
    fprintf(f, "],\n \"cores\": %d, \"pus\": %d,\n \"binding\": {\"cpus\": ", t->ncores, t->npus);
    json_cpus(f, &t->binding);
    fprintf(f, ", \"pus\": %d, \"cores\": %d, \"first_pu\": %d, \"first_core\": %d, \"numa\": %d, "
               "\"numa_nodes\": [",
            t->bound_pus, t->bound_cores, t->first_pu, t->first_core, t->bind_numa);
    for (int i = 0, k = 0; i < t->nnuma; i++)
        if (coll_cpuset_intersects(&t->numa[i].cpus, &t->binding))
            fprintf(f, "%s%d", k++ ? ", " : "", t->numa[i].id);
    fprintf(f, "]},\n \"netdevs\": [");
    for (int i = 0; i < t->nnetdevs; i++) {
        const struct coll_topo_netdev *d = &t->netdevs[i];
        fprintf(f, "%s\n  {\"name\": ", i ? "," : "");
        coll_topo_json_str(f, d->name);
        fprintf(f, ", \"ifindex\": %d, \"up\": %s, \"running\": %s, \"loopback\": %s, "
                   "\"speed_mbps\": ",
                d->ifindex, d->up ? "true" : "false", d->running ? "true" : "false",
                d->loopback ? "true" : "false");
        if (d->speed_mbps >= 0)
            fprintf(f, "%lld", (long long)d->speed_mbps);
        else
            fprintf(f, "null");
        fprintf(f, ", \"numa\": %d, \"pci\": ", d->numa);
        coll_topo_json_str(f, d->pci);
        fprintf(f, ", \"addresses\": [");
        for (int a = 0; a < d->naddrs; a++)
            fprintf(f, "%s\"%s/%d\"", a ? ", " : "", d->addrs[a].text, d->addrs[a].prefix);
        fprintf(f, "]}");
    }
    fprintf(f, "],\n \"rdma\": [");
    for (int i = 0; i < t->nrdma; i++) {
        const struct coll_topo_rdma *r = &t->rdma[i];
        fprintf(f, "%s\n  {\"name\": ", i ? "," : "");
        coll_topo_json_str(f, r->name);
        fprintf(f, ", \"numa\": %d, \"pci\": ", r->numa);
        coll_topo_json_str(f, r->pci);
        fprintf(f, ", \"netdev\": ");
        coll_topo_json_str(f, r->netdev);
        fprintf(f, ", \"ports\": [");
        for (int p = 0; p < r->nports; p++) {
            const struct coll_topo_rdma_port *pt = &r->ports[p];
            fprintf(f, "%s{\"port\": %d, \"state\": ", p ? ", " : "", pt->num);
            coll_topo_json_str(f, pt->state);
            fprintf(f, ", \"link_layer\": ");
            coll_topo_json_str(f, pt->link_layer);
            fprintf(f, ", \"rate\": ");
            coll_topo_json_str(f, pt->rate);
            fprintf(f, ", \"netdev\": ");
            coll_topo_json_str(f, pt->netdev);
            fprintf(f, "}");
        }
        fprintf(f, "]}");
    }
    fprintf(f, "],\n \"gpus\": [");
    for (int i = 0; i < t->ngpus; i++) {
        const struct coll_topo_gpu *g = &t->gpus[i];
        fprintf(f, "%s\n  {\"pci\": ", i ? "," : "");
        coll_topo_json_str(f, g->pci);
        fprintf(f, ", \"vendor\": \"0x%04x\", \"device\": \"0x%04x\", \"class\": \"0x%06x\", "
                   "\"numa\": %d}",
                g->vendor, g->device, g->pci_class, g->numa);
    }
    fprintf(f, "]}");
}

static void print_bytes(FILE *f, uint64_t b)
{
    if (b == 0)
        fprintf(f, "memory unknown");
    else if (b >= (1ull << 30))
        fprintf(f, "%.1f GiB", (double)b / (double)(1ull << 30));
    else
        fprintf(f, "%.1f MiB", (double)b / (double)(1ull << 20));
}

void coll_topo_print(const struct coll_topo *t, FILE *f)
{
    char buf[1024];
    fprintf(f, "host %s (topology from %s, network namespace %llu)\n", t->host, t->source,
            (unsigned long long)t->netns);
    fprintf(f, "  %d package%s, %d NUMA node%s, %d core%s, %d PU%s\n", t->npackages,
            t->npackages == 1 ? "" : "s", t->nnuma, t->nnuma == 1 ? "" : "s", t->ncores,
            t->ncores == 1 ? "" : "s", t->npus, t->npus == 1 ? "" : "s");
    for (int i = 0; i < t->npackages; i++)
        fprintf(f, "  package %d: %d cores, %d PUs\n", t->packages[i].id, t->packages[i].ncores,
                t->packages[i].npus);
    for (int i = 0; i < t->nnuma; i++) {
        coll_cpuset_format(&t->numa[i].cpus, buf, sizeof(buf));
        fprintf(f, "  NUMA node %d: cpus %s, ", t->numa[i].id, buf[0] ? buf : "none");
        print_bytes(f, t->numa[i].mem_bytes);
        fputc('\n', f);
    }
    coll_cpuset_format(&t->binding, buf, sizeof(buf));
    fprintf(f, "  binding: cpus %s (%d PU%s on %d core%s), ", buf, t->bound_pus,
            t->bound_pus == 1 ? "" : "s", t->bound_cores, t->bound_cores == 1 ? "" : "s");
    if (t->bind_numa >= 0)
        fprintf(f, "NUMA node %d\n", t->bind_numa);
    else
        fprintf(f, "%d NUMA nodes\n", t->nbind_numa);
    fprintf(f, "  network interfaces:%s\n", t->nnetdevs ? "" : " none");
    for (int i = 0; i < t->nnetdevs; i++) {
        const struct coll_topo_netdev *d = &t->netdevs[i];
        fprintf(f, "    %-10s %-4s", d->name, d->up ? (d->running ? "up" : "no-carrier") : "down");
        if (d->speed_mbps >= 0)
            fprintf(f, " %lld Mb/s", (long long)d->speed_mbps);
        if (d->pci[0])
            fprintf(f, " pci %s NUMA %d", d->pci, d->numa);
        else
            fprintf(f, " virtual");
        for (int a = 0; a < d->naddrs; a++)
            fprintf(f, " %s/%d", d->addrs[a].text, d->addrs[a].prefix);
        fputc('\n', f);
    }
    fprintf(f, "  RDMA devices:%s\n", t->nrdma ? "" : " none");
    for (int i = 0; i < t->nrdma; i++) {
        const struct coll_topo_rdma *r = &t->rdma[i];
        fprintf(f, "    %s on %s, %s%s NUMA %d\n", r->name, r->netdev[0] ? r->netdev : "no interface",
                r->pci[0] ? "pci " : "virtual", r->pci, r->numa);
        for (int p = 0; p < r->nports; p++)
            fprintf(f, "      port %d: %s, %s%s%s\n", r->ports[p].num, r->ports[p].state,
                    r->ports[p].link_layer, r->ports[p].rate[0] ? ", " : "", r->ports[p].rate);
    }
    fprintf(f, "  NVIDIA GPUs:%s\n", t->ngpus ? "" : " none");
    for (int i = 0; i < t->ngpus; i++)
        fprintf(f, "    %s device 0x%04x class 0x%06x NUMA %d\n", t->gpus[i].pci,
                t->gpus[i].device, t->gpus[i].pci_class, t->gpus[i].numa);
}

/* ---- the per-rank summary ---- */

void coll_topo_rank_fill(const struct coll_topo *t, const char *ifname, struct coll_topo_rank *r)
{
    memset(r, 0, sizeof(*r));
    r->magic = COLL_TOPO_RANK_MAGIC;
    r->version = COLL_TOPO_RANK_VERSION;
    r->pid = (int32_t)getpid();
    r->numa = t->bind_numa;
    r->bound_pus = t->bound_pus;
    r->bound_cores = t->bound_cores;
    r->first_pu = t->first_pu;
    r->first_core = t->first_core;
    r->packages = t->npackages;
    r->numa_nodes = t->nnuma;
    r->cores = t->ncores;
    r->pus = t->npus;
    r->rdma_devices = t->nrdma;
    r->gpus = t->ngpus;
    r->hwloc = strcmp(t->source, "hwloc") == 0;
    for (int i = 0; i < t->nnuma; i++)
        if (t->numa[i].id < 64 && coll_cpuset_intersects(&t->numa[i].cpus, &t->binding))
            r->numa_mask |= 1ull << t->numa[i].id;
    r->netns = t->netns;
    r->boot = t->boot;
    snprintf(r->host, sizeof(r->host), "%s", t->host);
    coll_cpuset_format(&t->binding, r->cpus, sizeof(r->cpus));
    char name[IF_NAMESIZE] = "";
    if (ifname != NULL) {
        snprintf(name, sizeof(name), "%s", ifname);
    } else {
        union coll_sockaddr ss;
        socklen_t len;
        if (coll_socket_pick_addr(NULL, &ss, &len, name, sizeof(name)) != collSuccess)
            name[0] = '\0';
    }
    memcpy(r->netdev, name, sizeof(r->netdev));
    const struct coll_topo_netdev *d = coll_topo_find_netdev(t, name);
    r->netdev_numa = d != NULL ? d->numa : -1;
}

bool coll_topo_rank_valid(const struct coll_topo_rank *r)
{
    return r->magic == COLL_TOPO_RANK_MAGIC && r->version == COLL_TOPO_RANK_VERSION &&
           memchr(r->host, '\0', sizeof(r->host)) != NULL &&
           memchr(r->cpus, '\0', sizeof(r->cpus)) != NULL &&
           memchr(r->netdev, '\0', sizeof(r->netdev)) != NULL;
}

void coll_topo_rank_write_json(const struct coll_topo_rank *r, FILE *f)
{
    fprintf(f, "{\"host\": ");
    coll_topo_json_str(f, r->host);
    fprintf(f, ", \"pid\": %d, \"cpus\": ", (int)r->pid);
    coll_topo_json_str(f, r->cpus);
    fprintf(f, ", \"pus\": %d, \"cores\": %d, \"first_pu\": %d, \"first_core\": %d, "
               "\"numa\": %d, \"numa_mask\": %llu, \"netdev\": ",
            (int)r->bound_pus, (int)r->bound_cores, (int)r->first_pu, (int)r->first_core,
            (int)r->numa, (unsigned long long)r->numa_mask);
    coll_topo_json_str(f, r->netdev);
    fprintf(f, ", \"netdev_numa\": %d, \"netns\": %llu, \"boot\": \"%016llx\", "
               "\"host_packages\": %d, \"host_numa_nodes\": %d, \"host_cores\": %d, "
               "\"host_pus\": %d, \"rdma_devices\": %d, \"gpus\": %d, \"source\": \"%s\"}",
            (int)r->netdev_numa, (unsigned long long)r->netns, (unsigned long long)r->boot,
            (int)r->packages, (int)r->numa_nodes, (int)r->cores, (int)r->pus,
            (int)r->rdma_devices, (int)r->gpus, r->hwloc ? "hwloc" : "sysfs");
}
