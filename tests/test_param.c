/* Unit test: parameter parsing, log level/subsystem parsing, error strings,
 * interface-list matching and the algorithm override grammar. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "algo.h"
#include "harness.h"
#include "log.h"
#include "param.h"
#include "socket.h"

int main(void)
{
    int64_t v;
    CHECK(coll_parse_size("123", &v) == 0 && v == 123);
    CHECK(coll_parse_size("64K", &v) == 0 && v == 65536);
    CHECK(coll_parse_size("1M", &v) == 0 && v == 1048576);
    CHECK(coll_parse_size("2G", &v) == 0 && v == 2147483648LL);
    CHECK(coll_parse_size("8kB", &v) == 0 && v == 8192);
    CHECK(coll_parse_size("-1", &v) == 0 && v == -1);
    CHECK(coll_parse_size("0x10", &v) == 0 && v == 16);
    CHECK(coll_parse_size("", &v) != 0);
    CHECK(coll_parse_size("abc", &v) != 0);
    CHECK(coll_parse_size("12Q", &v) != 0);
    CHECK(coll_parse_size("99999999999G", &v) != 0);

    /* Environment values are read once, at first use. */
    setenv("COLL_TIMEOUT_MS", "1234", 1);
    setenv("COLL_CHUNKSIZE", "not-a-number", 1);
    setenv("COLL_ALGO", "allreduce:ring", 1);
    CHECK(coll_param_int(COLL_PARAM_TIMEOUT_MS) == 1234);
    CHECK(coll_param_is_set(COLL_PARAM_TIMEOUT_MS));
    CHECK(coll_param_int(COLL_PARAM_CHUNKSIZE) == 0); /* malformed: default */
    CHECK(!coll_param_is_set(COLL_PARAM_CHUNKSIZE));
    CHECK(strcmp(coll_param_str(COLL_PARAM_ALGO), "allreduce:ring") == 0);
    int n;
    const struct coll_param_def *t = coll_param_table(&n);
    CHECK(n == COLL_PARAM_COUNT);
    for (int i = 0; i < n; i++) {
        CHECK_MSG(t[i].name != NULL && strncmp(t[i].name, "COLL_", 5) == 0, "row %d", i);
        CHECK_MSG(t[i].help != NULL && strlen(t[i].help) > 10, "row %d has no help", i);
        for (int j = 0; j < i; j++)
            CHECK_MSG(strcmp(t[i].name, t[j].name) != 0, "%s twice", t[i].name);
    }

    CHECK(coll_log_parse_level("WARN") == COLL_LOG_WARN);
    CHECK(coll_log_parse_level("info") == COLL_LOG_INFO);
    CHECK(coll_log_parse_level("LOUD") == -1);
    uint32_t mask;
    CHECK(coll_log_parse_subsys("INIT,TCP", &mask) == 0 &&
          mask == (COLL_SUBSYS_INIT | COLL_SUBSYS_TCP));
    CHECK(coll_log_parse_subsys("^COLL", &mask) == 0 && !(mask & COLL_SUBSYS_COLL) &&
          (mask & COLL_SUBSYS_TCP));
    CHECK(coll_log_parse_subsys("ALL", &mask) == 0 && mask == COLL_SUBSYS_ALL);
    CHECK(coll_log_parse_subsys("INIT,NOPE", &mask) == -1);

    /* Result strings: distinct, non-empty, and something for out-of-range codes. */
    for (int i = 0; i < collNumResults; i++) {
        const char *s = collGetErrorString((collResult_t)i);
        CHECK(s != NULL && s[0] != '\0');
        for (int j = 0; j < i; j++)
            CHECK(strcmp(s, collGetErrorString((collResult_t)j)) != 0);
    }
    CHECK(collGetErrorString((collResult_t)99) != NULL);
    CHECK(collGetErrorString((collResult_t)-1) != NULL);

    /* Interface lists, NCCL's grammar. */
    CHECK(coll_socket_ifname_match("eth", "eth0"));
    CHECK(coll_socket_ifname_match("ib,eth", "eth1"));
    CHECK(!coll_socket_ifname_match("ib", "eth0"));
    CHECK(!coll_socket_ifname_match("^eth", "eth0"));
    CHECK(coll_socket_ifname_match("^docker,lo", "eth0"));
    CHECK(coll_socket_ifname_match("=eth0", "eth0"));
    CHECK(!coll_socket_ifname_match("=eth0", "eth01"));
    CHECK(!coll_socket_ifname_match("^=eth0", "eth0"));
    CHECK(coll_socket_ifname_match("^=eth0", "eth01"));

    /* docs/env.md documents every row of the table. */
    const char *root = getenv("COLL_SOURCE_ROOT");
    if (root != NULL) {
        char path[1024];
        snprintf(path, sizeof(path), "%s/docs/env.md", root);
        FILE *f = fopen(path, "r");
        CHECK_MSG(f != NULL, "cannot open %s", path);
        if (f != NULL) {
            static char doc[1 << 16];
            size_t len = fread(doc, 1, sizeof(doc) - 1, f);
            doc[len] = '\0';
            fclose(f);
            for (int i = 0; i < n; i++)
                CHECK_MSG(strstr(doc, t[i].name) != NULL, "docs/env.md misses %s", t[i].name);
        }
    }

    int version = 0;
    CHECK(collGetVersion(&version) == collSuccess && version == COLL_VERSION_CODE);
    CHECK(collGetVersion(NULL) == collInvalidArgument);
    CHECK(strstr(collGetLastError(NULL), "version") != NULL);
    return test_result();
}
