/* Writes the seed corpus of each fuzz target from valid messages (and a few
 * near misses), so that the fuzzer starts past the magic and the secret:
 *
 *   fuzz_seeds DIR     creates DIR/boot_root, DIR/boot_rank, DIR/hello, DIR/id, DIR/shrink,
 *                      DIR/status, DIR/torch_store */
#include <errno.h>
#include <sys/stat.h>

#include "fuzz.h"

static const char *seed_dir;
static int seed_failed;

/* Writes one seed: a selector byte then the message. */
static void seed(const char *target, const char *name, uint8_t sel, const void *msg, size_t len)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", seed_dir, target);
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        perror(path);
        seed_failed = 1;
        return;
    }
    snprintf(path, sizeof(path), "%s/%s/%s", seed_dir, target, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(&sel, 1, 1, f) != 1 || (len && fwrite(msg, len, 1, f) != 1)) {
        perror(path);
        seed_failed = 1;
    }
    if (f)
        fclose(f);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    seed_dir = argv[1];
    /* The root and the ring listener: whole registrations (as one read and in
     * steps of 1 and 7 bytes), a ring hello, another job's secret. */
    struct coll_boot_register reg = fuzz_register(2);
    seed("boot_root", "register-whole", 63, &reg, sizeof(reg));
    seed("boot_root", "register-bytewise", 0, &reg, sizeof(reg));
    seed("boot_root", "register-step7", 6, &reg, sizeof(reg));
    struct coll_boot_ring_hello rh = fuzz_ring_hello(1);
    seed("boot_root", "ring-hello-from-1", 1, &rh, sizeof(rh));
    reg.secret[3] ^= 1;
    seed("boot_root", "register-other-secret", 63, &reg, sizeof(reg));

    /* A rank reading the root: the answer and a table of 4, and a refusal. */
    struct {
        struct coll_boot_reply rep;
        struct coll_rank_info table[FUZZ_NRANKS];
    } ok = {.rep = {.magic = COLL_BOOT_MAGIC, .status = collSuccess}};
    for (int k = 0; k < FUZZ_NRANKS; k++)
        ok.table[k] = fuzz_rank_info(k);
    seed("boot_rank", "reply-table-4", FUZZ_NRANKS - 1, &ok, sizeof(ok));
    struct coll_boot_reply no = {.magic = COLL_BOOT_MAGIC, .status = collInvalidUsage};
    snprintf(no.msg, sizeof(no.msg), "duplicate rank 1");
    seed("boot_rank", "reply-refused", 0, &no, sizeof(no));

    /* Hellos and handles of both transports. */
    struct tcp_hello th = fuzz_tcp_hello(3, 1, 2);
    seed("hello", "tcp-hello", 0, &th, sizeof(th));
    struct verbs_hello vh = fuzz_verbs_hello(1);
    seed("hello", "verbs-hello", 1, &vh, sizeof(vh));
    struct coll_rank_info info = fuzz_rank_info(0);
    seed("hello", "tcp-handle", 2, info.tp_handle[0], sizeof(struct tcp_handle));
    struct verbs_handle vhd = fuzz_verbs_handle();
    seed("hello", "verbs-handle", 3, &vhd, sizeof(vhd));
    struct verbs_rts rts = {.magic = VERBS_RTS_MAGIC, .rkey = 0x1234, .addr = 0x7f0000001000,
                            .len = 1 << 20};
    seed("hello", "verbs-rts", 4, &rts, sizeof(rts));

    /* Ids: binary as collGetUniqueId makes it, and COLL_COMM_ID text. */
    struct coll_id id = fuzz_id();
    seed("id", "id-binary", 0, &id, sizeof(id));
    static const char v4[] = "127.0.0.1:29500\0" "00112233445566778899aabbccddeeff";
    seed("id", "text-v4-secret", 1, v4, sizeof(v4) - 1);
    static const char v6[] = "[::1]:29500";
    seed("id", "text-v6", 1, v6, sizeof(v6) - 1);
    static const char name[] = "node-17.cluster:1234\0" "abCD";
    seed("id", "text-name-short-secret", 1, name, sizeof(name) - 1);
    /* Shrink: a join from rank 2 of 4, an acknowledgement, an answer. */
    struct coll_shrink_join sj = {.magic = COLL_SHRINK_MAGIC, .epoch = 3, .rank = 2,
                                  .flags = 0x11, .excl_hash = 12345};
    memcpy(sj.secret, fuzz_secret, COLL_SECRET_BYTES);
    seed("shrink", "join", 3 << 1, &sj, sizeof(sj));
    struct coll_shrink_reply sr = {.magic = COLL_SHRINK_MAGIC, .epoch = 3,
                                   .status = collInProgress};
    memcpy(sr.secret, fuzz_secret, COLL_SECRET_BYTES);
    seed("shrink", "ack", 1 | (3 << 1), &sr, sizeof(sr));
    sr.status = collSuccess;
    sr.nranks = 3;
    sr.rank = 2;
    sr.id = fuzz_id();
    seed("shrink", "answer", 1 | (3 << 1), &sr, sizeof(sr));
    /* Status queries: a request, rank 2's answer in a job of 4 (selector: which in
     * bits 0-1, nranks - 1 in 2-4, the rank asked + 1 in 5-7), a table of 4. */
    struct coll_status_req sq = {.magic = COLL_STATUS_MAGIC, .version = COLL_STATUS_VERSION,
                                 .ask = COLL_STATUS_ASK_RANK};
    memcpy(sq.secret, fuzz_secret, COLL_SECRET_BYTES);
    seed("status", "request", 0, &sq, sizeof(sq));
    struct coll_status_reply st = {.magic = COLL_STATUS_MAGIC, .version = COLL_STATUS_VERSION,
                                   .rank = 2, .nranks = 4, .pid = 77, .revoked_by = -1,
                                   .failed_peer = -1, .wait_peer = 1, .open = 1, .npeers = 1,
                                   .calls = 9};
    memcpy(st.secret, fuzz_secret, COLL_SECRET_BYTES);
    st.cur = (struct coll_status_call){.seq = 9, .count = 1024, .age_ms = 1500, .took_ms = -1,
                                       .dtype = 7, .op = 0, .root = -1, .peer = -1,
                                       .state = 1, .name = "allreduce", .algo = "ring"};
    st.last = st.cur;
    st.last.seq = 8;
    st.last.state = 2;
    st.peers[0] = (struct coll_status_peer){.peer = 1, .sent = 4096, .sent_posted = 4096,
                                            .recvd_posted = 4096};
    snprintf(st.host, sizeof(st.host), "node-2");
    seed("status", "answer", 1 | (3 << 2) | (3 << 5), &st, sizeof(st));
    struct {
        struct coll_status_table head;
        struct coll_status_addr addr[FUZZ_NRANKS];
    } tab;
    memset(&tab, 0, sizeof(tab));
    tab.head = (struct coll_status_table){.magic = COLL_STATUS_MAGIC,
                                          .version = COLL_STATUS_VERSION,
                                          .nranks = FUZZ_NRANKS, .rank = 0};
    memcpy(tab.head.secret, fuzz_secret, COLL_SECRET_BYTES);
    for (int k = 0; k < FUZZ_NRANKS; k++) {
        tab.addr[k].rank = k;
        tab.addr[k].pid = 100 + k;
        fuzz_addr(&tab.addr[k].addr, &tab.addr[k].addrlen, 40000 + k);
        snprintf(tab.addr[k].host, sizeof(tab.addr[k].host), "node-%d", k);
    }
    seed("status", "table", 2 | ((FUZZ_NRANKS - 1) << 2), &tab, sizeof(tab));
    /* torchrun's store: the probe's answers (torch 1.13's, the libuv server's),
     * a GET's answer holding an address (cap 64), a PING's echo (nonce
     * 0x11223300 | 5) and a SET query's key and value. */
    static const uint8_t probe_legacy[] = {0, 0}, probe_libuv[] = {0, 1, 0, 0};
    seed("torch_store", "probe-legacy", 0, probe_legacy, sizeof(probe_legacy));
    seed("torch_store", "probe-libuv", 0, probe_libuv, sizeof(probe_libuv));
    static const uint8_t get[] = {15, 0, 0, 0, 0, 0, 0, 0, '1', '0', '.', '0', '.', '0', '.',
                                  '1', '7', ':', '4', '3', '1', '2', '3'};
    seed("torch_store", "get-address", 1 | (2 << 3), get, sizeof(get));
    static const uint8_t ping[] = {0x05, 0x33, 0x22, 0x11};
    seed("torch_store", "ping", 3 | (5 << 3), ping, sizeof(ping));
    static const char set[] = "/libcollective/none/attempt_0/root_0\0" "127.0.0.1:40000";
    seed("torch_store", "set-query", 4 | 8 | 0x80, set, sizeof(set) - 1);
    return seed_failed;
}
