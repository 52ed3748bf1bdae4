/* What the machine measured, kept once per process (machine.h). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "algo.h"
#include "log.h"
#include "machine.h"
#include "param.h"

#define MACHINE_ENTRIES 32
#define MACHINE_FILE_HEADER "# libcollective machine model 1"

struct machine_entry {
    char key[COLL_MACHINE_KEY_MAX];
    size_t n;
    double v[COLL_MACHINE_FIGS_MAX];
};

static struct {
    pthread_mutex_t lock;
    bool file_read;          /* COLL_MODEL_FILE was read */
    int n;
    struct machine_entry e[MACHINE_ENTRIES];
} machine = {.lock = PTHREAD_MUTEX_INITIALIZER};

static struct machine_entry *machine_find(const char *key)
{
    for (int i = 0; i < machine.n; i++)
        if (strcmp(machine.e[i].key, key) == 0)
            return &machine.e[i];
    return NULL;
}

/* Stores an entry (lock held); false when the table is full. */
static bool machine_store(const char *key, const double *v, size_t n)
{
    struct machine_entry *e = machine_find(key);
    if (e == NULL) {
        if (machine.n == MACHINE_ENTRIES)
            return false;
        e = &machine.e[machine.n++];
        snprintf(e->key, sizeof(e->key), "%s", key);
    }
    e->n = n;
    memcpy(e->v, v, n * sizeof(double));
    return true;
}

/* Reads path's entries into the table, those of keys it has not got (lock
 * held).  Returns false, with *why, when the file is there but not one this
 * library wrote; a missing file is no error. */
static bool machine_read(const char *path, const char **why)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        *why = errno == ENOENT ? NULL : strerror(errno);
        return errno == ENOENT;
    }
    char line[1024];
    bool ok = fgets(line, sizeof(line), f) != NULL &&
              strncmp(line, MACHINE_FILE_HEADER, strlen(MACHINE_FILE_HEADER)) == 0;
    *why = ok ? NULL : "its first line is not \"" MACHINE_FILE_HEADER "\"";
    while (ok && fgets(line, sizeof(line), f) != NULL) {
        char key[COLL_MACHINE_KEY_MAX];
        double v[COLL_MACHINE_FIGS_MAX];
        size_t n = 0;
        char *p = line, *end;
        size_t klen = strcspn(p, " \n");
        if (klen == 0 || klen >= sizeof(key)) {
            ok = false;
            *why = "a line without a key, or with one too long";
            break;
        }
        memcpy(key, p, klen);
        key[klen] = '\0';
        p += klen;
        while (*p == ' ') {
            double x = strtod(p, &end);
            if (end == p || n == COLL_MACHINE_FIGS_MAX)
                break;
            v[n++] = x;
            p = end;
        }
        if (n == 0 || (*p != '\n' && *p != '\0')) {
            ok = false;
            *why = "a line whose figures are not numbers";
            break;
        }
        if (machine_find(key) == NULL && !machine_store(key, v, n)) {
            ok = false;
            *why = "more entries than the library keeps";
        }
    }
    fclose(f);
    return ok;
}

static void machine_read_once(void)
{
    if (machine.file_read)
        return;
    machine.file_read = true;
    const char *path = coll_param_str(COLL_PARAM_MODEL_FILE);
    const char *why = NULL;
    if (path == NULL || path[0] == '\0')
        return;
    if (!machine_read(path, &why)) {
        COLL_WARN("COLL_MODEL_FILE=%s: not read (%s); the machine is "
                  "measured and the file written anew", path, why);
        machine.n = 0;
    } else if (machine.n > 0) {
        COLL_INFO(COLL_SUBSYS_ALGO, "machine model: %d entries from COLL_MODEL_FILE=%s",
                  machine.n, path);
    }
}

/* Writes the table to COLL_MODEL_FILE (lock held), with the entries another
 * process wrote there meanwhile, through a file of its own renamed over it. */
static void machine_write(void)
{
    const char *path = coll_param_str(COLL_PARAM_MODEL_FILE);
    if (path == NULL || path[0] == '\0')
        return;
    const char *why;
    (void)machine_read(path, &why);
    char tmp[4096];
    if (snprintf(tmp, sizeof(tmp), "%s.%d.tmp", path, (int)getpid()) >= (int)sizeof(tmp))
        return;
    FILE *f = fopen(tmp, "w");
    if (f == NULL) {
        COLL_WARN("COLL_MODEL_FILE=%s: cannot write %s: %s", path, tmp,
                  strerror(errno));
        return;
    }
    fprintf(f, "%s\n", MACHINE_FILE_HEADER);
    for (int i = 0; i < machine.n; i++) {
        fputs(machine.e[i].key, f);
        for (size_t k = 0; k < machine.e[i].n; k++)
            fprintf(f, " %.17g", machine.e[i].v[k]);
        fputc('\n', f);
    }
    bool ok = fflush(f) == 0 && ferror(f) == 0;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        COLL_WARN("COLL_MODEL_FILE=%s: cannot write it: %s", path,
                  strerror(errno));
        (void)unlink(tmp);
    }
}

bool coll_machine_get(const char *key, double *v, size_t n)
{
    if (coll_param_int(COLL_PARAM_MODEL_REMEASURE) != 0)
        return false;
    pthread_mutex_lock(&machine.lock);
    machine_read_once();
    const struct machine_entry *e = machine_find(key);
    bool found = e != NULL && e->n == n;
    if (found)
        memcpy(v, e->v, n * sizeof(double));
    pthread_mutex_unlock(&machine.lock);
    return found;
}

void coll_machine_put(const char *key, const double *v, size_t n)
{
    if (n == 0 || n > COLL_MACHINE_FIGS_MAX)
        return;
    pthread_mutex_lock(&machine.lock);
    machine_read_once();
    if (machine_store(key, v, n))
        machine_write();
    pthread_mutex_unlock(&machine.lock);
}

collResult_t coll_machine_agree(struct coll_comm *comm, const char *key, double *v, size_t n,
                                bool *have)
{
    double mine[COLL_MACHINE_FIGS_MAX + 1] = {0}, all[COLL_MACHINE_FIGS_MAX + 1];
    *have = false;
    if (n > COLL_MACHINE_FIGS_MAX)
        return collSuccess;
    mine[0] = coll_machine_get(key, &mine[1], n) ? 0.0 : 1.0;
    COLL_CHECK(coll_algo_agree_max(comm, mine, all, n + 1));
    *have = all[0] == 0.0;
    if (*have)
        memcpy(v, &all[1], n * sizeof(double));
    return collSuccess;
}
