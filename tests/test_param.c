/* Unit test: parameter parsing, log level/subsystem parsing, error strings,
 * interface-list matching and the algorithm override grammar. */
#include <ctype.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "algo.h"
#include "harness.h"
#include "log.h"
#include "param.h"
#include "socket.h"

/* The NCCL_* names in the first column of the table under `heading`, in
 * docs/env.md's section "NCCL's variables", with the COLL_* name of the second
 * column ("" where none).  Returns how many. */
static int doc_nccl_rows(const char *doc, const char *heading, char names[][64], char colls[][64],
                         int max)
{
    const char *sec = strstr(doc, "\n## NCCL's variables\n");
    const char *p = sec ? strstr(sec, heading) : NULL;
    CHECK_MSG(p != NULL, "docs/env.md has no '%s' under '## NCCL's variables'", heading);
    if (p == NULL)
        return 0;
    int n = 0;
    for (p = strchr(p, '\n'); p != NULL && p[1] != '\0' && strncmp(p + 1, "#", 1) != 0;
         p = strchr(p + 1, '\n')) {
        const char *line = p + 1;
        if (strncmp(line, "| `NCCL_", 8) != 0)
            continue;
        const char *c2 = strchr(line + 1, '|');
        const char *c3 = c2 ? strchr(c2 + 1, '|') : NULL;
        if (c3 == NULL)
            continue;
        static const char var_chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_";
        char coll[64] = "";
        const char *q = strstr(c2, "`COLL_");
        if (q != NULL && q < c3)
            snprintf(coll, sizeof(coll), "%.*s", (int)strspn(q + 1, var_chars), q + 1);
        for (q = strstr(line, "`NCCL_"); q != NULL && q < c2 && n < max;
             q = strstr(q + 1, "`NCCL_")) {
            snprintf(names[n], 64, "%.*s", (int)strspn(q + 1, var_chars), q + 1);
            snprintf(colls[n], 64, "%s", coll);
            n++;
        }
    }
    return n;
}

static int name_at(const char *name, char names[][64], int n)
{
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0)
            return i;
    return -1;
}

/* The reverse: every COLL_* name docs/env.md mentions is a parameter of the
 * table, or one of the variables collrun sets for its ranks that the library
 * does not read. */
static void check_doc_coll(const char *doc, const struct coll_param_def *t, int n)
{
    static const char *const launcher[] = {"COLL_LOCAL_RANK", "COLL_LOCAL_SIZE", "COLL_JOIN"};
    for (const char *p = strstr(doc, "COLL_"); p != NULL; p = strstr(p + 1, "COLL_")) {
        if (p > doc && (isalnum((unsigned char)p[-1]) || p[-1] == '_'))
            continue;
        size_t len = 5;
        while (isupper((unsigned char)p[len]) || isdigit((unsigned char)p[len]) || p[len] == '_')
            len++;
        if (len == 5 || p[len - 1] == '_')
            continue; /* "COLL_" or "COLL_*" in prose */
        bool known = false;
        for (int i = 0; i < n && !known; i++)
            known = strlen(t[i].name) == len && strncmp(t[i].name, p, len) == 0;
        for (size_t i = 0; i < sizeof(launcher) / sizeof(launcher[0]) && !known; i++)
            known = strlen(launcher[i]) == len && strncmp(launcher[i], p, len) == 0;
        CHECK_MSG(known, "docs/env.md names %.*s, which is neither a parameter nor a variable "
                  "collrun sets", (int)len, p);
    }
}

/* docs/env.md's tables of NCCL's variables against the code's, both ways: every
 * name the code reads is in the doc's mapping table, beside the COLL_ variable
 * it sets, and every name there is read by the code; likewise for the variables
 * with no meaning here. */
static void check_doc_nccl(const char *doc, const struct coll_param_def *t)
{
    static char names[256][64], colls[256][64];
    int n = doc_nccl_rows(doc, "### Read in place of a COLL_ variable", names, colls, 256);
    CHECK(n > 0);
    int ncode = 0;
    enum coll_param_id id;
    for (const char *v; (v = coll_param_nccl_var(ncode, &id)) != NULL; ncode++) {
        int k = name_at(v, names, n);
        CHECK_MSG(k >= 0, "docs/env.md's NCCL table misses %s", v);
        if (k >= 0)
            CHECK_MSG(strcmp(colls[k], t[id].name) == 0, "docs/env.md gives %s for %s, the code %s",
                      colls[k], v, t[id].name);
    }
    for (int k = 0; k < n; k++) {
        bool found = false;
        for (int i = 0; (coll_param_nccl_var(i, &id)) != NULL && !found; i++)
            found = strcmp(coll_param_nccl_var(i, &id), names[k]) == 0;
        CHECK_MSG(found, "docs/env.md's NCCL table lists %s, which the code does not read",
                  names[k]);
    }
    CHECK_MSG(n == ncode, "docs/env.md's NCCL table has %d names, the code %d", n, ncode);

    n = doc_nccl_rows(doc, "### With no meaning here", names, colls, 256);
    int nunused = 0;
    const char *why;
    for (const char *v; (v = coll_param_nccl_unused(nunused, &why)) != NULL; nunused++) {
        CHECK_MSG(name_at(v, names, n) >= 0, "docs/env.md's list of NCCL variables with no "
                  "meaning here misses %s", v);
        for (int i = 0; coll_param_nccl_var(i, &id) != NULL; i++)
            CHECK_MSG(strcmp(coll_param_nccl_var(i, &id), v) != 0, "%s both read and unused", v);
    }
    for (int k = 0; k < n; k++) {
        bool found = false;
        for (int i = 0; coll_param_nccl_unused(i, &why) != NULL && !found; i++)
            found = strcmp(coll_param_nccl_unused(i, &why), names[k]) == 0;
        CHECK_MSG(found, "docs/env.md lists %s as meaningless here; the code does not", names[k]);
    }
    CHECK_MSG(n == nunused, "docs/env.md lists %d meaningless NCCL variables, the code %d", n,
              nunused);
}

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
    /* NCCL's subsystem names, as the nearest of ours */
    CHECK(coll_log_parse_subsys("BOOTSTRAP,NET", &mask) == 0 &&
          mask == (COLL_SUBSYS_BOOT | COLL_SUBSYS_TCP | COLL_SUBSYS_VERBS));
    CHECK(coll_log_parse_subsys("^tuning", &mask) == 0 &&
          mask == (COLL_SUBSYS_ALL & ~(uint32_t)COLL_SUBSYS_ALGO));
    static const char *const nccl_subsys[] = {"INIT", "COLL", "P2P", "SHM", "NET", "GRAPH",
                                              "TUNING", "ENV", "ALLOC", "CALL", "PROXY", "NVLS",
                                              "BOOTSTRAP", "REG", "PROFILE", "RAS", "ALL"};
    for (size_t i = 0; i < sizeof(nccl_subsys) / sizeof(nccl_subsys[0]); i++)
        CHECK_MSG(coll_log_parse_subsys(nccl_subsys[i], &mask) == 0 && mask != 0,
                  "NCCL's subsystem %s", nccl_subsys[i]);
    char names[128];
    coll_log_subsys_names(COLL_SUBSYS_TCP | COLL_SUBSYS_VERBS, names, sizeof(names));
    CHECK(strcmp(names, "TCP,VERBS") == 0);
    coll_log_subsys_names(COLL_SUBSYS_ALL, names, sizeof(names));
    CHECK(strcmp(names, "ALL") == 0);

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
            static char doc[1 << 17];
            size_t len = fread(doc, 1, sizeof(doc) - 1, f);
            doc[len] = '\0';
            fclose(f);
            CHECK_MSG(len < sizeof(doc) - 1, "docs/env.md is larger than the test reads");
            for (int i = 0; i < n; i++)
                CHECK_MSG(strstr(doc, t[i].name) != NULL, "docs/env.md misses %s", t[i].name);
            check_doc_coll(doc, t, n);
            check_doc_nccl(doc, t);
        }
    }

    int version = 0;
    CHECK(collGetVersion(&version) == collSuccess && version == COLL_VERSION_CODE);
    CHECK(collGetVersion(NULL) == collInvalidArgument);
    CHECK(strstr(collGetLastError(NULL), "version") != NULL);
    return test_result();
}
