/* What tools/collinfo and COLL_TOPO_DUMP_FILE report of a communicator: the
 * transport to each peer as the library chooses it (coll_transport_for_peer: the
 * connected one, else the first of the table whose can_connect agrees), and this
 * rank's topology (lib/base/topo.c).  docs/topology.md. */
#include "info.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

static const char *const tp_names[] = {"self", "shm", "verbs", "tcp", "cuda_ipc"};
#define NTP_NAMES (sizeof(tp_names) / sizeof(tp_names[0]))

uint8_t coll_info_tp_code(const struct coll_comm *comm, int peer)
{
    if (peer == comm->rank)
        return COLL_INFO_TP_SELF;
    const char *name = coll_transport_peer_name(comm, peer);
    if (name == NULL)
        return COLL_INFO_TP_NONE;
    for (uint8_t i = 1; i < NTP_NAMES; i++)
        if (strcmp(tp_names[i], name) == 0)
            return i;
    return COLL_INFO_TP_NONE - 1; /* a transport this table does not name */
}

const char *coll_info_tp_name(uint8_t code)
{
    if (code < NTP_NAMES)
        return tp_names[code];
    return code == COLL_INFO_TP_NONE ? "none" : "?";
}

/* The interface holding this rank's bootstrap address, which the data
 * transports listen on too; "" when none does. */
static void info_boot_ifname(const struct coll_comm *comm, const struct coll_topo *t, char *name,
                             size_t len)
{
    const struct coll_rank_info *me = &comm->peers[comm->rank].info;
    char text[INET6_ADDRSTRLEN] = "";
    int f = me->boot_addr.sa.sa_family;
    if (f == AF_INET)
        inet_ntop(f, &me->boot_addr.in.sin_addr, text, sizeof(text));
    else if (f == AF_INET6)
        inet_ntop(f, &me->boot_addr.in6.sin6_addr, text, sizeof(text));
    name[0] = '\0';
    for (int i = 0; text[0] && i < t->nnetdevs; i++)
        for (int a = 0; a < t->netdevs[i].naddrs; a++)
            if (strcmp(t->netdevs[i].addrs[a].text, text) == 0) {
                snprintf(name, len, "%s", t->netdevs[i].name);
                return;
            }
}

void coll_info_rank(const struct coll_comm *comm, const struct coll_topo *t,
                    struct coll_topo_rank *r)
{
    char name[IF_NAMESIZE];
    info_boot_ifname(comm, t, name, sizeof(name));
    coll_topo_rank_fill(t, name[0] ? name : NULL, r);
}

void coll_info_write_json(FILE *f, const struct coll_topo *t, const struct coll_topo_rank *r,
                          const struct coll_comm *comm)
{
    fprintf(f, "{\"rank\": %d, \"nranks\": %d,\n\"summary\": ", comm ? comm->rank : 0,
            comm ? comm->nranks : 1);
    coll_topo_rank_write_json(r, f);
    fprintf(f, ",\n\"topology\": ");
    coll_topo_write_json(t, f);
    fprintf(f, ",\n\"peers\": [");
    for (int p = 0, k = 0; comm != NULL && p < comm->nranks; p++) {
        if (p == comm->rank)
            continue;
        fprintf(f, "%s\n {\"rank\": %d, \"host\": ", k++ ? "," : "", p);
        coll_topo_json_str(f, comm->peers[p].info.host);
        fprintf(f, ", \"pid\": %d, \"transport\": \"%s\"}", (int)comm->peers[p].info.pid,
                coll_info_tp_name(coll_info_tp_code(comm, p)));
    }
    fprintf(f, "]}\n");
}

/* pattern with %r, %h, %p and %% expanded into path; false when it does not fit. */
static bool info_expand(const char *pattern, const struct coll_comm *comm, char *path, size_t len)
{
    size_t off = 0;
    path[0] = '\0';
    for (const char *p = pattern; *p; p++) {
        char piece[96] = {*p, '\0'};
        if (p[0] == '%' && p[1] != '\0' && strchr("rhp%", p[1]) != NULL) {
            p++;
            if (*p == 'r')
                snprintf(piece, sizeof(piece), "%d", comm->rank);
            else if (*p == 'h')
                snprintf(piece, sizeof(piece), "%s", comm->peers[comm->rank].info.host);
            else if (*p == 'p')
                snprintf(piece, sizeof(piece), "%d", (int)getpid());
        }
        size_t k = strlen(piece);
        if (off + k + 1 > len)
            return false;
        memcpy(path + off, piece, k + 1);
        off += k;
    }
    path[off] = '\0';
    return true;
}

void coll_info_dump(const struct coll_comm *comm)
{
    const char *pattern = coll_param_str(COLL_PARAM_TOPO_DUMP_FILE);
    if (pattern == NULL)
        return;
    char path[4096];
    if (!info_expand(pattern, comm, path, sizeof(path))) {
        COLL_WARN("COLL_TOPO_DUMP_FILE=%.64s...: the path is too long; no dump", pattern);
        return;
    }
    struct coll_topo *t;
    if (coll_topo_load(NULL, &t) != collSuccess) {
        COLL_WARN("COLL_TOPO_DUMP_FILE: the topology cannot be read (see above); no dump");
        return;
    }
    struct coll_topo_rank r;
    coll_info_rank(comm, t, &r);
    /* Written aside and renamed, so that a reader never sees half a file and two
     * communicators of one process writing the same path leave one whole. */
    char tmp[4096 + 64];
    snprintf(tmp, sizeof(tmp), "%s.%d.%lx.tmp", path, (int)getpid(), (unsigned long)pthread_self());
    FILE *f = fopen(tmp, "we");
    if (f == NULL) {
        COLL_WARN("COLL_TOPO_DUMP_FILE: cannot open %s: %s", tmp, strerror(errno));
        coll_topo_free(t);
        return;
    }
    coll_info_write_json(f, t, &r, comm);
    bool bad = ferror(f) != 0;
    if (fclose(f) != 0 || bad) {
        COLL_WARN("COLL_TOPO_DUMP_FILE: cannot write %s: %s", tmp, strerror(errno ? errno : EIO));
        unlink(tmp);
    } else if (rename(tmp, path) != 0) {
        COLL_WARN("COLL_TOPO_DUMP_FILE: cannot rename %s to %s: %s", tmp, path, strerror(errno));
        unlink(tmp);
    } else {
        COLL_INFO(COLL_SUBSYS_INIT, "topology of rank %d written to %s", comm->rank, path);
    }
    coll_topo_free(t);
}
