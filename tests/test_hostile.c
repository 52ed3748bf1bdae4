/*
 * Hostile clients at every listening port of a job: the ranks keep running an
 * allreduce loop with checked results while a rogue thread in each rank's
 * process connects to every TCP port that process listens on (found through
 * /proc/self/fd and /proc/net/tcp, so no listener is missed) and sends:
 *
 *   - garbage of random lengths, and a client sending one byte every 100 ms
 *   - the bootstrap's, TCP's and verbs' magic with a wrong secret
 *   - the right secret (COLL_SECRET, from collrun) with fields out of range
 *   - connections that send nothing and stay open (half-open)
 *   - a flood of 300 connections held open at once
 *
 * Bootstrap time too: rank 0's rogue starts on the root (COLL_COMM_ID) before
 * init, while ranks 1 and 2 join 2 s late, so the root reads strangers while
 * ranks register; init must still succeed.  When every rogue is done, each rank
 * sends to its previous rank (a connection made now, so the transport's listener
 * accepts past whatever the rogue left) and the loop runs on for 2.5 s, in which
 * the listeners are read (coll_transport_sweep).  Afterwards each rank reads its
 * own log (COLL_DEBUG_FILE): exactly one line per listener about dropped
 * clients, among them the root's on rank 0 and the tcp listener's.
 *
 *   collrun -n 3 test_hostile             (COLL_TRANSPORTS=tcp for the TCP entry)
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "launch.h"
#include "wire.h"

#define ROGUE_MAX_PORTS 16
#define FLOOD 300
#define HALF_OPEN 10
#define SLOW 3
#define COUNT 4099 /* odd, so that ring chunks are uneven */
/* The transports' magics (transports/tcp/tcp_wire.h, transports/verbs/verbs_wire.h). */
#define TCP_MAGIC_WORD 0x50435443u
#define VERBS_MAGIC_WORD 0x42565243u

struct rogue {
    int rank;
    uint16_t root_port;       /* rank 0: the root's port, attacked before init */
    uint8_t secret[COLL_SECRET_BYTES];
    atomic_bool init_done;    /* main: the communicator is up */
    atomic_bool done;         /* rogue: every listener after init was attacked */
    atomic_bool release;      /* main: close the half-open connections now */
    uint16_t attacked[ROGUE_MAX_PORTS];
    int nattacked;
    int half_open[ROGUE_MAX_PORTS * HALF_OPEN];
    int nhalf;
    unsigned seed;
    int connects;             /* connections the rogue made */
};

static double now_s(void)
{
    return launch_now();
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* The TCP ports this process listens on: socket inodes of /proc/self/fd matched
 * against the LISTEN rows (state 0A) of /proc/net/tcp. */
static int own_listen_ports(uint16_t *ports, int max)
{
    unsigned long inodes[1024];
    int ninodes = 0, n = 0;
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL && ninodes < 1024) {
        char path[300], link[64];
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        ssize_t l = readlink(path, link, sizeof(link) - 1);
        if (l <= 0)
            continue;
        link[l] = '\0';
        unsigned long ino;
        if (sscanf(link, "socket:[%lu]", &ino) == 1)
            inodes[ninodes++] = ino;
    }
    if (d)
        closedir(d);
    FILE *f = fopen("/proc/net/tcp", "r");
    char line[512];
    while (f && fgets(line, sizeof(line), f) && n < max) {
        unsigned addr, port, st;
        unsigned long ino;
        if (sscanf(line, " %*d: %x:%x %*x:%*x %x %*x:%*x %*x:%*x %*x %*u %*u %lu", &addr, &port,
                   &st, &ino) != 4 || st != 0x0A)
            continue;
        for (int i = 0; i < ninodes; i++)
            if (inodes[i] == ino)
                ports[n++] = (uint16_t)port;
    }
    if (f)
        fclose(f);
    return n;
}

/* A non-blocking connection to 127.0.0.1:port, or -1 when it is not made
 * within 300 ms (refused, or a backlog full of strangers). */
static int rogue_connect(struct rogue *r, uint16_t port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 && errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int err = 0;
    socklen_t el = sizeof(err);
    if (poll(&p, 1, 300) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err) {
        close(fd);
        return -1;
    }
    r->connects++;
    return fd;
}

static void rogue_random(struct rogue *r, uint8_t *buf, size_t n)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = (uint8_t)rand_r(&r->seed);
}

/* Sends what the socket takes now: the rogue never waits on a listener. */
static void rogue_send(int fd, const void *buf, size_t n)
{
    (void)send(fd, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL);
}

/* A message of n bytes that starts {magic, secret}, the rest random; the secret
 * right (fields then out of range: -1 everywhere a rank or count goes) or not. */
static void rogue_magic(struct rogue *r, uint16_t port, uint32_t magic, bool right_secret,
                        size_t n)
{
    uint8_t buf[1024];
    rogue_random(r, buf, sizeof(buf));
    memcpy(buf, &magic, 4);
    if (right_secret) {
        memcpy(buf + 4, r->secret, COLL_SECRET_BYTES);
        memset(buf + 4 + COLL_SECRET_BYTES, 0xff, 12); /* nranks/rank/nsocks = -1 */
    }
    int fd = rogue_connect(r, port);
    if (fd >= 0) {
        rogue_send(fd, buf, n < sizeof(buf) ? n : sizeof(buf));
        sleep_ms(20);
        close(fd);
    }
}

/* Every kind of stranger, at one port.  Half-open connections stay open in
 * r->half_open until the main thread releases them. */
static void rogue_attack(struct rogue *r, uint16_t port)
{
    uint8_t buf[4096];
    /* Garbage of random lengths. */
    for (int i = 0; i < 4; i++) {
        int fd = rogue_connect(r, port);
        if (fd < 0)
            continue;
        size_t n = 1 + (size_t)rand_r(&r->seed) % sizeof(buf);
        rogue_random(r, buf, n);
        rogue_send(fd, buf, n);
        close(fd);
    }
    /* Our magics, with a wrong secret and with the right one and bad fields. */
    const uint32_t magics[] = {COLL_BOOT_MAGIC, TCP_MAGIC_WORD, VERBS_MAGIC_WORD};
    for (int m = 0; m < 3; m++) {
        rogue_magic(r, port, magics[m], false, 1000);
        rogue_magic(r, port, magics[m], true, 1000);
    }
    /* Half-open: connect, send nothing, stay. */
    for (int i = 0; i < HALF_OPEN && r->nhalf < ROGUE_MAX_PORTS * HALF_OPEN; i++) {
        int fd = rogue_connect(r, port);
        if (fd >= 0)
            r->half_open[r->nhalf++] = fd;
    }
    /* Slow clients, one byte each per 100 ms, while a flood is held open. */
    int slow[SLOW], nslow = 0;
    for (int i = 0; i < SLOW; i++)
        if ((slow[nslow] = rogue_connect(r, port)) >= 0)
            nslow++;
    int *flood = malloc(sizeof(int) * FLOOD);
    int nflood = 0;
    for (int i = 0; flood && i < FLOOD; i++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        if (fd < 0)
            break;
        (void)connect(fd, (struct sockaddr *)&sa, sizeof(sa)); /* in progress or done */
        flood[nflood++] = fd;
    }
    for (int tick = 0; tick < 15; tick++) {
        for (int i = 0; i < nslow; i++) {
            uint8_t b = (uint8_t)rand_r(&r->seed);
            rogue_send(slow[i], &b, 1);
        }
        sleep_ms(100);
    }
    for (int i = 0; i < nflood; i++)
        close(flood[i]);
    free(flood);
    for (int i = 0; i < nslow; i++)
        close(slow[i]);
}

static bool rogue_seen(struct rogue *r, uint16_t port)
{
    for (int i = 0; i < r->nattacked; i++)
        if (r->attacked[i] == port)
            return true;
    return false;
}

static void *rogue_main(void *arg)
{
    struct rogue *r = arg;
    /* Rank 0 hosts the root: strangers reach it while the others register. */
    if (r->rank == 0 && r->root_port != 0) {
        double until = now_s() + 10;
        int fd = -1;
        while (fd < 0 && now_s() < until) {
            fd = rogue_connect(r, r->root_port); /* refused until rank 0 starts it */
            if (fd < 0)
                sleep_ms(10);
        }
        if (fd >= 0) {
            close(fd);
            rogue_attack(r, r->root_port);
            r->attacked[r->nattacked++] = r->root_port;
        }
    }
    /* Every other listener this process opens during init, then, once init is
     * done, every listener left open (attacked again: the transports'). */
    while (!atomic_load(&r->init_done)) {
        uint16_t ports[ROGUE_MAX_PORTS];
        int n = own_listen_ports(ports, ROGUE_MAX_PORTS);
        for (int i = 0; i < n && r->nattacked < ROGUE_MAX_PORTS; i++) {
            if (!rogue_seen(r, ports[i])) {
                r->attacked[r->nattacked++] = ports[i];
                rogue_attack(r, ports[i]);
            }
        }
        sleep_ms(5);
    }
    uint16_t ports[ROGUE_MAX_PORTS];
    int n = own_listen_ports(ports, ROGUE_MAX_PORTS);
    for (int i = 0; i < n; i++)
        rogue_attack(r, ports[i]);
    atomic_store(&r->done, true);
    while (!atomic_load(&r->release))
        sleep_ms(10);
    for (int i = 0; i < r->nhalf; i++)
        close(r->half_open[i]);
    return NULL;
}

/* One checked allreduce: element i of rank k is k + i % 97, the sum is known. */
static void check_allreduce(struct launch_rank *lr, float *buf, int iter)
{
    int n = lr->nranks;
    for (int i = 0; i < COUNT; i++)
        buf[i] = (float)(lr->rank + (i + iter) % 97);
    collResult_t res = collAllReduce(buf, buf, COUNT, collFloat, collSum, lr->comm, NULL);
    if (res != collSuccess)
        launch_fatal(lr, "allreduce %d failed: %s (%s)", iter, collGetErrorString(res),
                     collGetLastError(lr->comm));
    int bad = 0;
    for (int i = 0; i < COUNT; i++)
        bad += buf[i] != (float)(n * (n - 1) / 2 + n * ((i + iter) % 97));
    LR_CHECK(lr, bad == 0, "allreduce %d: %d of %d elements wrong", iter, bad, COUNT);
}

/* Rank r sends to r-1 and receives from r+1: a connection the loop has not
 * made, so each rank's listener accepts past whatever the rogue left there. */
static void reverse_exchange(struct launch_rank *lr)
{
    int n = lr->nranks, prev = (lr->rank + n - 1) % n, next = (lr->rank + 1) % n;
    int out[64], in[64];
    for (int i = 0; i < 64; i++)
        out[i] = lr->rank * 1000 + i;
    collResult_t res = collGroupStart();
    if (res == collSuccess)
        res = collSend(out, 64, collInt32, prev, lr->comm, NULL);
    if (res == collSuccess)
        res = collRecv(in, 64, collInt32, next, lr->comm, NULL);
    collResult_t end = collGroupEnd();
    if (res != collSuccess || end != collSuccess)
        launch_fatal(lr, "send/recv failed: %s (%s)",
                     collGetErrorString(res != collSuccess ? res : end),
                     collGetLastError(lr->comm));
    int bad = 0;
    for (int i = 0; i < 64; i++)
        bad += in[i] != next * 1000 + i;
    LR_CHECK(lr, bad == 0, "send/recv from rank %d: %d of 64 wrong", next, bad);
}

/* Counts, per listener, the log lines about dropped clients and checks one
 * each; *root_p and *tcp_p get how many name the root and a tcp listener. */
static void check_log(struct launch_rank *lr, const char *path, int *root_p, int *tcp_p)
{
    FILE *f = fopen(path, "r");
    char line[1024], names[32][128];
    int counts[32] = {0}, nnames = 0;
    *root_p = *tcp_p = 0;
    LR_CHECK(lr, f != NULL, "cannot read the log %s", path);
    while (f && fgets(line, sizeof(line), f)) {
        char *end = strstr(line, " dropped a connection: ");
        char *start = strstr(line, "COLL WARN ");
        if (end == NULL || start == NULL || start > end)
            continue;
        /* "COLL WARN file.c:123 <listener> dropped a connection: ..." */
        start = strchr(start + strlen("COLL WARN "), ' ');
        if (start == NULL || start > end)
            continue;
        start++;
        char name[128];
        snprintf(name, sizeof(name), "%.*s", (int)(end - start), start);
        int k;
        for (k = 0; k < nnames && strcmp(names[k], name) != 0; k++)
            ;
        if (k == nnames && nnames < 32)
            snprintf(names[nnames++], sizeof(names[0]), "%s", name);
        if (k < 32)
            counts[k]++;
        *root_p += strncmp(name, "bootstrap root ", 15) == 0;
        *tcp_p += strncmp(name, "tcp listener ", 13) == 0;
    }
    if (f)
        fclose(f);
    for (int k = 0; k < nnames; k++) {
        LR_CHECK(lr, counts[k] == 1, "%d log lines about dropped clients of %s, want 1",
                 counts[k], names[k]);
        printf("rank %d: logged once: %s\n", lr->rank, names[k]);
    }
}

int main(int argc, char **argv)
{
    const char *rank_s = getenv("COLL_RANK"), *id = getenv("COLL_COMM_ID");
    if (rank_s == NULL || id == NULL) {
        fprintf(stderr, "%s runs under collrun (collrun -n 3 %s)\n", argv[0], argv[0]);
        return 77;
    }
    /* The log goes to a file of this process, read back at the end; set before
     * the library reads its parameters. */
    char logpath[256];
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(logpath, sizeof(logpath), "%s/coll-hostile.%d.log", tmp, (int)getpid());
    setenv("COLL_DEBUG_FILE", logpath, 1);
    setenv("COLL_DEBUG", "WARN", 1);

    struct rogue *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return 1;
    r->rank = atoi(rank_s);
    r->seed = 12345u + (unsigned)r->rank;
    char host[256], err[160];
    uint16_t port = 0;
    if (coll_wire_split_hostport(id, host, sizeof(host), &port, err, sizeof(err)))
        r->root_port = port;
    coll_wire_secret_text(id, getenv("COLL_SECRET"), r->secret, err, sizeof(err));
    atomic_init(&r->init_done, false);
    atomic_init(&r->done, false);
    atomic_init(&r->release, false);
    pthread_t t;
    if (pthread_create(&t, NULL, rogue_main, r) != 0)
        return 1;
    /* Ranks 1 and 2 join late: the root waits on them, reading strangers. */
    if (r->rank != 0)
        sleep_ms(2000);

    struct launch_rank lr = {.rank = r->rank, .nranks = -1};
    collResult_t res = collCommInitFromEnv(&lr.comm);
    if (res != collSuccess)
        launch_fatal(&lr, "init failed beside the strangers: %s (%s)", collGetErrorString(res),
                     collGetLastError(NULL));
    collCommCount(lr.comm, &lr.nranks);
    collCommUserRank(lr.comm, &lr.rank);
    atomic_store(&r->init_done, true);

    float *buf = malloc(sizeof(float) * COUNT);
    if (buf == NULL)
        launch_fatal(&lr, "out of memory");
    double t0 = now_s(), t_after = 0;
    int iter = 0;
    bool exchanged = false;
    /* Until every rank's rogue is done (at most 60 s); then the reverse exchange,
     * and 2.5 s more of the loop: the listeners are read once a second from the
     * start of an operation (coll_transport_sweep), so what the rogue left is
     * read and dropped while the loop runs. */
    for (;;) {
        check_allreduce(&lr, buf, iter++);
        int mine = !exchanged ? atomic_load(&r->done) : now_s() - t_after > 2.5, all = 0;
        res = collAllReduce(&mine, &all, 1, collInt32, collMin, lr.comm, NULL);
        if (res != collSuccess)
            launch_fatal(&lr, "allreduce of the flags failed: %s", collGetLastError(lr.comm));
        if (all == 1 && exchanged)
            break;
        if (all == 1) {
            reverse_exchange(&lr);
            exchanged = true;
            t_after = now_s();
        }
        if (!exchanged && now_s() - t0 > 60)
            launch_fatal(&lr, "the rogues did not finish within 60 s");
    }
    atomic_store(&r->release, true);
    pthread_join(t, NULL);
    printf("rank %d: %d checked allreduces, %d rogue connections, %.1f s\n", lr.rank, iter,
           r->connects, now_s() - t0);
    LR_CHECK(&lr, r->connects > 0, "the rogue never connected");
    res = collCommDestroy(lr.comm);
    LR_CHECK(&lr, res == collSuccess, "destroy: %s", collGetErrorString(res));

    int root_lines, tcp_lines;
    check_log(&lr, logpath, &root_lines, &tcp_lines);
    if (lr.rank == 0)
        LR_CHECK(&lr, root_lines == 1, "no log line for the root's dropped clients");
    /* The tcp transport listens whichever transport the peers take. */
    LR_CHECK(&lr, tcp_lines == 1, "no log line for the tcp listener's dropped clients");
    if (lr.failures == 0)
        unlink(logpath);
    else
        fprintf(stderr, "rank %d: log kept in %s\n", lr.rank, logpath);
    free(buf);
    free(r);
    return lr.failures ? 1 : 0;
}
