/* Logging.  Level and subsystem mask come from COLL_DEBUG / COLL_DEBUG_SUBSYS, read
 * once.  Each line is formatted into one buffer and written with one write() so
 * lines of concurrent threads and processes never interleave. */
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "config.h"
#include "param.h"

int coll_log_level_cur = -1;
uint32_t coll_log_mask_cur = COLL_SUBSYS_ALL;

static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static int log_fd = STDERR_FILENO;
static char log_host[64];
static _Thread_local int log_rank = -1;

static const char *const level_names[] = {"NONE", "VERSION", "WARN", "INFO", "TRACE"};

static const struct {
    const char *name;
    uint32_t bit;
} subsys_names[] = {
    {"INIT", COLL_SUBSYS_INIT},   {"BOOT", COLL_SUBSYS_BOOT},   {"TRANSPORT", COLL_SUBSYS_TRANSPORT},
    {"TCP", COLL_SUBSYS_TCP},     {"SHM", COLL_SUBSYS_SHM},     {"VERBS", COLL_SUBSYS_VERBS},
    {"CUDA", COLL_SUBSYS_CUDA},   {"COLL", COLL_SUBSYS_COLL},   {"ALGO", COLL_SUBSYS_ALGO},
    {"ALLOC", COLL_SUBSYS_ALLOC}, {"ENV", COLL_SUBSYS_ENV},     {"ALL", COLL_SUBSYS_ALL},
};

/* NCCL's subsystem names that are not ours, each taken as the nearest of ours, so
 * that NCCL_DEBUG_SUBSYS (and COLL_DEBUG_SUBSYS) accept them.  INIT, COLL, SHM, ENV,
 * ALLOC and ALL are the same in both.  docs/env.md has the same table. */
static const struct {
    const char *name;
    uint32_t bits;
} subsys_aliases[] = {
    {"P2P", COLL_SUBSYS_TRANSPORT | COLL_SUBSYS_SHM}, /* how the peers of a host connect */
    {"NET", COLL_SUBSYS_TCP | COLL_SUBSYS_VERBS},
    {"GRAPH", COLL_SUBSYS_INIT},                      /* the topology is read at init */
    {"TUNING", COLL_SUBSYS_ALGO},
    {"CALL", COLL_SUBSYS_COLL},
    {"PROXY", COLL_SUBSYS_TRANSPORT},
    {"NVLS", COLL_SUBSYS_CUDA},
    {"BOOTSTRAP", COLL_SUBSYS_BOOT},
    {"REG", COLL_SUBSYS_ALLOC | COLL_SUBSYS_VERBS},   /* only verbs registers memory */
    {"PROFILE", COLL_SUBSYS_INIT},
    {"RAS", COLL_SUBSYS_BOOT | COLL_SUBSYS_COLL},     /* status queries, flight records */
};

int coll_log_parse_level(const char *s)
{
    for (int i = 0; i < (int)(sizeof(level_names) / sizeof(level_names[0])); i++)
        if (strcasecmp(s, level_names[i]) == 0)
            return i;
    return -1;
}

int coll_log_parse_subsys(const char *s, uint32_t *mask_p)
{
    int negate = 0;
    uint32_t mask = 0;
    if (*s == '^') {
        negate = 1;
        s++;
    }
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", s);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        uint32_t bits = 0;
        for (size_t i = 0; i < sizeof(subsys_names) / sizeof(subsys_names[0]) && !bits; i++)
            if (strcasecmp(tok, subsys_names[i].name) == 0)
                bits = subsys_names[i].bit;
        for (size_t i = 0; i < sizeof(subsys_aliases) / sizeof(subsys_aliases[0]) && !bits; i++)
            if (strcasecmp(tok, subsys_aliases[i].name) == 0)
                bits = subsys_aliases[i].bits;
        if (bits == 0)
            return -1;
        mask |= bits;
    }
    *mask_p = negate ? (COLL_SUBSYS_ALL & ~mask) : mask;
    return 0;
}

void coll_log_subsys_names(uint32_t mask, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = '\0';
    if ((mask & COLL_SUBSYS_ALL) == COLL_SUBSYS_ALL) {
        coll_buf_printf(buf, cap, &len, "ALL");
        return;
    }
    for (size_t i = 0; i < sizeof(subsys_names) / sizeof(subsys_names[0]); i++)
        if (subsys_names[i].bit != COLL_SUBSYS_ALL && (mask & subsys_names[i].bit))
            coll_buf_printf(buf, cap, &len, "%s%s", len ? "," : "", subsys_names[i].name);
}

/* Expands %h (host) and %p (pid) in a COLL_DEBUG_FILE pattern. */
static void log_expand_path(const char *pat, char *out, size_t cap)
{
    size_t o = 0;
    for (const char *p = pat; *p && o + 1 < cap; p++) {
        if (p[0] == '%' && (p[1] == 'h' || p[1] == 'p')) {
            int w = p[1] == 'h' ? snprintf(out + o, cap - o, "%s", log_host)
                                : snprintf(out + o, cap - o, "%d", (int)getpid());
            if (w > 0)
                o += (size_t)w < cap - o ? (size_t)w : cap - o - 1;
            p++;
        } else {
            out[o++] = *p;
        }
    }
    out[o] = '\0';
}

static void log_setup(void)
{
    int saved = errno;
    gethostname(log_host, sizeof(log_host) - 1);
    char *dot = strchr(log_host, '.');
    if (dot)
        *dot = '\0';
    const char *lvl = coll_param_str(COLL_PARAM_DEBUG);
    int level = coll_log_parse_level(lvl);
    if (level < 0) {
        fprintf(stderr, "COLL WARN unknown COLL_DEBUG=%s; using WARN\n", lvl);
        level = COLL_LOG_WARN;
    }
    uint32_t mask;
    const char *sub = coll_param_str(COLL_PARAM_DEBUG_SUBSYS);
    if (coll_log_parse_subsys(sub, &mask) != 0) {
        fprintf(stderr, "COLL WARN unknown name in COLL_DEBUG_SUBSYS=%s; using ALL\n", sub);
        mask = COLL_SUBSYS_ALL;
    }
    coll_log_mask_cur = mask;
    const char *file = coll_param_str(COLL_PARAM_DEBUG_FILE);
    if (file != NULL) {
        char path[512];
        log_expand_path(file, path, sizeof(path));
        int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd >= 0)
            log_fd = fd;
        else
            fprintf(stderr, "COLL WARN cannot open %s %s: %s\n",
                    coll_param_source(COLL_PARAM_DEBUG_FILE), path, strerror(errno));
    }
    __atomic_store_n(&coll_log_level_cur, level, __ATOMIC_RELEASE);
    if (level == COLL_LOG_VERSION || level >= COLL_LOG_INFO)
        coll_log_write(COLL_LOG_VERSION, COLL_SUBSYS_INIT, __FILE__, __LINE__,
                       "libcollective version %s", COLL_VERSION_STRING);
    /* What the NCCL_* variables did, now that INFO lines can be written. */
    coll_param_log_nccl();
    errno = saved;
}

void coll_log_init(void)
{
    pthread_once(&log_once, log_setup);
}

void coll_log_set_rank(int rank)
{
    log_rank = rank;
}

void coll_log_write(enum coll_log_level lvl, uint32_t subsys, const char *file, int line,
                    const char *fmt, ...)
{
    int saved = errno;
    char buf[1024];
    const char *sub = "";
    if (lvl != COLL_LOG_WARN) {
        for (size_t i = 0; i < sizeof(subsys_names) / sizeof(subsys_names[0]); i++)
            if (subsys_names[i].bit == subsys) {
                sub = subsys_names[i].name;
                break;
            }
    }
    int n = snprintf(buf, sizeof(buf), "%s:%d:%ld ", log_host, (int)getpid(),
                     (long)syscall(SYS_gettid));
    if (log_rank >= 0)
        n += snprintf(buf + n, sizeof(buf) - (size_t)n, "[%d] ", log_rank);
    if (lvl == COLL_LOG_WARN) {
        const char *base = strrchr(file, '/');
        n += snprintf(buf + n, sizeof(buf) - (size_t)n, "COLL WARN %s:%d ", base ? base + 1 : file,
                      line);
    } else {
        n += snprintf(buf + n, sizeof(buf) - (size_t)n, "COLL %s %s%s", level_names[lvl], sub,
                      sub[0] ? " " : "");
    }
    va_list ap;
    va_start(ap, fmt);
    if (n < (int)sizeof(buf))
        n += vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof(buf) - 1)
        n = (int)sizeof(buf) - 2;
    buf[n++] = '\n';
    ssize_t w = write(log_fd, buf, (size_t)n);
    (void)w;
    errno = saved;
}

void coll_buf_printf(char *buf, size_t cap, size_t *len, const char *fmt, ...)
{
    if (*len >= cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + *len, cap - *len, fmt, ap);
    va_end(ap);
    if (k > 0)
        *len = *len + (size_t)k < cap ? *len + (size_t)k : cap;
}
