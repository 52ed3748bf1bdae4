/*
 * collrun_child: a rank for tests/test_collrun.sh.  It needs no library: it reads its
 * rank from COLL_RANK and performs its arguments in order, each one an action:
 *
 *   out:TEXT      print TEXT and a newline on stdout     err:TEXT   the same on stderr
 *   partial:TEXT  print TEXT on stdout without a newline
 *   lines:K:LEN   print K lines "rank R line I xxx..." (LEN x's) on stdout through stdio's
 *                 full buffering, so that lines reach collrun cut at arbitrary points
 *   env           print every COLL_* variable as NAME=VALUE on stdout
 *   piddir:DIR    create DIR/PID for this process (and later for each grandchild)
 *   wait:N        wait (5 s at most) until N pids are in DIR: a barrier, so that a test
 *                 fails a rank only once every process it counts on exists
 *   fork:S        fork a grandchild that stays in the process group and sleeps S seconds
 *   ignoreterm    ignore SIGTERM from now on (inherited by later grandchildren)
 *   sleep:S       sleep S seconds (fractional)
 *   raise:SIG     raise signal number SIG
 *   exit:C        exit with code C
 *
 * An action written @R:ACTION runs only on rank R.  Example, rank 1 fails at once while
 * the others sleep:  collrun -n 3 collrun_child @1:exit:3 sleep:30
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static const char *child_piddir;

static void child_sleep(double s)
{
    struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void child_write_pid(pid_t pid)
{
    if (child_piddir == NULL)
        return;
    char path[4096];
    snprintf(path, sizeof path, "%s/%ld", child_piddir, (long)pid);
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        fprintf(stderr, "collrun_child: cannot create %s: %s\n", path, strerror(errno));
        exit(99);
    }
    close(fd);
}

static int child_count_pids(void)
{
    int n = 0;
    DIR *d = child_piddir != NULL ? opendir(child_piddir) : NULL;
    if (d == NULL)
        return 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static void child_lines(int rank, long k, long len)
{
    for (long i = 0; i < k; i++) {
        printf("rank %d line %ld ", rank, i);
        for (long j = 0; j < len; j++)
            putchar('x');
        putchar('\n');
    }
}

static void child_run(int rank, const char *act)
{
    if (strncmp(act, "out:", 4) == 0) {
        printf("%s\n", act + 4);
    } else if (strncmp(act, "err:", 4) == 0) {
        fprintf(stderr, "%s\n", act + 4);
    } else if (strncmp(act, "partial:", 8) == 0) {
        printf("%s", act + 8);
    } else if (strncmp(act, "lines:", 6) == 0) {
        char *end;
        long k = strtol(act + 6, &end, 10);
        child_lines(rank, k, *end == ':' ? strtol(end + 1, NULL, 10) : 0);
    } else if (strcmp(act, "env") == 0) {
        for (char **e = environ; *e != NULL; e++) {
            if (strncmp(*e, "COLL_", 5) == 0)
                printf("%s\n", *e);
        }
    } else if (strncmp(act, "piddir:", 7) == 0) {
        child_piddir = act + 7;
        child_write_pid(getpid());
    } else if (strncmp(act, "wait:", 5) == 0) {
        int want = atoi(act + 5);
        for (int i = 0; i < 500 && child_count_pids() < want; i++)
            child_sleep(0.01);
    } else if (strncmp(act, "fork:", 5) == 0) {
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0) {
            perror("collrun_child: fork");
            exit(99);
        }
        if (pid == 0) {
            child_sleep(strtod(act + 5, NULL));
            _exit(0);
        }
        /* The parent records the grandchild, so the file exists before anything else. */
        child_write_pid(pid);
    } else if (strcmp(act, "ignoreterm") == 0) {
        signal(SIGTERM, SIG_IGN);
    } else if (strncmp(act, "sleep:", 6) == 0) {
        fflush(NULL);
        child_sleep(strtod(act + 6, NULL));
    } else if (strncmp(act, "raise:", 6) == 0) {
        fflush(NULL);
        raise(atoi(act + 6));
    } else if (strncmp(act, "exit:", 5) == 0) {
        exit(atoi(act + 5));
    } else {
        fprintf(stderr, "collrun_child: unknown action '%s'\n", act);
        exit(98);
    }
}

int main(int argc, char **argv)
{
    const char *r = getenv("COLL_RANK");
    int rank = r != NULL ? atoi(r) : 0;
    for (int i = 1; i < argc; i++) {
        const char *act = argv[i];
        if (act[0] == '@') {
            char *end;
            long only = strtol(act + 1, &end, 10);
            if (*end != ':') {
                fprintf(stderr, "collrun_child: bad rank filter '%s'\n", act);
                return 98;
            }
            if (only != rank)
                continue;
            act = end + 1;
        }
        child_run(rank, act);
    }
    return 0;
}
