/* Logging: COLL_DEBUG level, COLL_DEBUG_SUBSYS mask, COLL_DEBUG_FILE. */
#ifndef COLL_LOG_H
#define COLL_LOG_H

#include <stddef.h>
#include <stdint.h>

#include "config.h" /* COLL_TRACE: read here, wherever log.h is first included */
#ifndef COLL_TRACE
#error "config.h must define COLL_TRACE"
#endif

enum coll_log_level { COLL_LOG_NONE, COLL_LOG_VERSION, COLL_LOG_WARN, COLL_LOG_INFO,
                      COLL_LOG_TRACE };

enum coll_subsys {
    COLL_SUBSYS_INIT = 1u << 0,
    COLL_SUBSYS_BOOT = 1u << 1,
    COLL_SUBSYS_TRANSPORT = 1u << 2,
    COLL_SUBSYS_TCP = 1u << 3,
    COLL_SUBSYS_SHM = 1u << 4,
    COLL_SUBSYS_VERBS = 1u << 5,
    COLL_SUBSYS_CUDA = 1u << 6,
    COLL_SUBSYS_COLL = 1u << 7,
    COLL_SUBSYS_ALGO = 1u << 8,
    COLL_SUBSYS_ALLOC = 1u << 9,
    COLL_SUBSYS_ENV = 1u << 10,
    COLL_SUBSYS_ALL = 0x7ffu
};

extern int coll_log_level_cur;     /* -1 until initialised */
extern uint32_t coll_log_mask_cur;
/* Appends printf output to buf (cap bytes, *len of them used), never past its
 * end: once it is full, later appends do nothing.  For messages built in pieces. */
void coll_buf_printf(char *buf, size_t cap, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

void coll_log_init(void);
/* Sets the rank shown in this thread's log lines (-1: none). */
void coll_log_set_rank(int rank);
void coll_log_write(enum coll_log_level lvl, uint32_t subsys, const char *file, int line,
                    const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* Parses a level name ("WARN") or returns -1. */
int coll_log_parse_level(const char *s);
/* Parses "INIT,TCP" / "^COLL" / "ALL" into a mask.  NCCL's names (NET, BOOTSTRAP,
 * TUNING, ...) are taken as the nearest of ours.  Returns -1 on an unknown name. */
int coll_log_parse_subsys(const char *s, uint32_t *mask_p);
/* Writes mask as our subsystem names, "TCP,VERBS" (or "ALL"), into buf. */
void coll_log_subsys_names(uint32_t mask, char *buf, size_t cap);

static inline int coll_log_on(enum coll_log_level lvl, uint32_t subsys)
{
    if (coll_log_level_cur < 0)
        coll_log_init();
    return coll_log_level_cur >= (int)lvl && (lvl <= COLL_LOG_WARN || (coll_log_mask_cur & subsys));
}

#define COLL_WARN(...)                                                                     \
    do {                                                                                   \
        if (coll_log_on(COLL_LOG_WARN, COLL_SUBSYS_ALL))                                    \
            coll_log_write(COLL_LOG_WARN, COLL_SUBSYS_ALL, __FILE__, __LINE__, __VA_ARGS__); \
    } while (0)
#define COLL_INFO(subsys, ...)                                                          \
    do {                                                                                \
        if (coll_log_on(COLL_LOG_INFO, (subsys)))                                       \
            coll_log_write(COLL_LOG_INFO, (subsys), __FILE__, __LINE__, __VA_ARGS__);   \
    } while (0)
#if COLL_TRACE
#define COLL_TRACE_LOG(subsys, ...)                                                     \
    do {                                                                                \
        if (coll_log_on(COLL_LOG_TRACE, (subsys)))                                      \
            coll_log_write(COLL_LOG_TRACE, (subsys), __FILE__, __LINE__, __VA_ARGS__);  \
    } while (0)
#else
#define COLL_TRACE_LOG(subsys, ...) do { } while (0)
#endif

#endif
