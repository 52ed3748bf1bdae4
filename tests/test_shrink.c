/*
 * Shrink after a failure: 4 ranks run checked allreduces; rank 2 dies (SIGKILL)
 * or stops (SIGSTOP) in the middle.  The survivors see the failure, shrink the
 * communicator without rank 2, then run 30 checked allreduces on the new one
 * and destroy both.
 *
 *   test_shrink [--transport shm|tcp] [--mode list|detect|stop|revoke] [-n N]
 *               [--late-coordinator MS] [-v]
 *
 *   list    rank 2 is killed; the survivors pass excludeRanksList = {2} and
 *           COLL_SHRINK_ABORT
 *   detect  rank 2 is killed; the survivors pass an empty list and
 *           COLL_SHRINK_ABORT | COLL_SHRINK_DETECT: the library finds it gone
 *   stop    rank 2 is stopped; as detect.  The survivors' calls fail at the timeout,
 *           which blames rank 2, and the shrink leaves the blamed rank out at once:
 *           running again takes about one timeout (under 1.6 of it), not two
 *   revoke  rank 2 is stopped; 500 ms into the call it hangs, rank 0 calls
 *           collCommRevoke from another thread (COLL_TIMEOUT_MS is 10 s here).
 *           Rank 0's call returns within 1 s of the revoke, the others' within
 *           2 s of their call's start, each saying who revoked; the survivors
 *           shrink with excludeRanksList = {2} and no flag (a revoked communicator
 *           needs none); afterwards a call on the old one fails at once and a
 *           second revoke is a no-op
 *
 * -n N runs N ranks instead of 4 (3 to 256): with more than 64, the coordinator
 * takes more joins at once than it once had room for.  --late-coordinator MS has
 * rank 0 wait MS milliseconds before its shrink, so that every other survivor's
 * join reaches its listener while the status responder still reads it (the
 * joins are set aside and handed over, none dropped).
 *
 * The ranks are forked here (as in test_kill.c) with COLL_COMM_ID on a free port
 * and COLL_TIMEOUT_MS=3000 (10000 above 16 ranks).  Each survivor prints the time from the failing call's
 * start to the new communicator's first good allreduce.  The parent checks that
 * rank 2 was ended by its signal, that every survivor exited with 0, that no
 * rank is left, and that nothing of the library is left in /dev/shm (each
 * survivor also checks it maps no segment after destroying both communicators).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "launch.h"

#define VICTIM 2
#define MAX_RANKS 256
#define COUNT 4096

static const char *mode = "list";
static double timeout_s = 3; /* COLL_TIMEOUT_MS */
static int nranks_all = 4; /* -n */
static bool verbose;
static int late_coordinator_ms; /* --late-coordinator */

static double now_s(void)
{
    return launch_now();
}

static bool contains(const char *s, const char *part)
{
    return s != NULL && strstr(s, part) != NULL;
}

/* revoke mode: rank 0's thread that revokes the communicator 500 ms in. */
struct revoker {
    collComm_t comm;
    double at;
    collResult_t res;
};

static void *revoke_main(void *arg)
{
    struct revoker *rv = arg;
    struct timespec ts = {0, 500 * 1000000};
    nanosleep(&ts, NULL);
    rv->at = now_s();
    rv->res = collCommRevoke(rv->comm, 0);
    return NULL;
}

/* Checked allreduce: element k of rank r is (r + 1) * (k % 31) + seed. */
static collResult_t checked_allreduce(collComm_t c, int rank, int nranks, const int *old_of,
                                      int seed, int *wrong)
{
    static float in[COUNT], out[COUNT];
    for (int k = 0; k < COUNT; k++)
        in[k] = (float)((old_of[rank] + 1) * (k % 31) + seed);
    collResult_t r = collAllReduce(in, out, COUNT, collFloat, collSum, c, NULL);
    if (r != collSuccess)
        return r;
    float ranks_sum = 0;
    for (int q = 0; q < nranks; q++)
        ranks_sum += (float)(old_of[q] + 1);
    *wrong = 0;
    for (int k = 0; k < COUNT; k++)
        *wrong += out[k] != ranks_sum * (float)(k % 31) + (float)(seed * nranks);
    return collSuccess;
}

static int rank_main(int rank)
{
    collComm_t comm;
    collResult_t r = collCommInitFromEnv(&comm);
    if (r != collSuccess) {
        fprintf(stderr, "[rank %d] init failed: %s\n", rank, collGetLastError(NULL));
        return 10;
    }
    static int old_of[MAX_RANKS], new_old_of[MAX_RANKS];
    for (int q = 0; q < nranks_all; q++) {
        old_of[q] = q;
        new_old_of[q] = q < VICTIM ? q : q + 1; /* the survivors, in order */
    }
    double t_fail = 0;
    bool revoke = strcmp(mode, "revoke") == 0;
    struct revoker rv = {.comm = comm};
    pthread_t rt;
    bool revoking = false;
    for (int it = 0; it < 200; it++) {
        if (rank == VICTIM && it == 5)
            raise(strcmp(mode, "stop") == 0 || revoke ? SIGSTOP : SIGKILL);
        if (revoke && rank == 0 && it == 5) {
            if (pthread_create(&rt, NULL, revoke_main, &rv) != 0) {
                fprintf(stderr, "[rank 0] cannot start the revoking thread\n");
                return 18;
            }
            revoking = true;
        }
        int wrong = 0;
        double t0 = now_s();
        r = checked_allreduce(comm, rank, nranks_all, old_of, it, &wrong);
        if (r != collSuccess) {
            t_fail = t0;
            break;
        }
        if (wrong != 0) {
            fprintf(stderr, "[rank %d] allreduce %d: %d wrong elements\n", rank, it, wrong);
            return 11;
        }
    }
    if (t_fail == 0) {
        fprintf(stderr, "[rank %d] no allreduce failed after rank %d's end\n", rank, VICTIM);
        return 12;
    }
    double t_err = now_s();
    if (verbose)
        fprintf(stderr, "[rank %d] failure after %.3f s: %s\n", rank, t_err - t_fail,
                collGetLastError(comm));
    if (revoking) {
        pthread_join(rt, NULL);
        if (rv.res != collSuccess || t_err - rv.at > 1.0 ||
            !contains(collGetLastError(comm), "revoked by this rank")) {
            fprintf(stderr, "[rank 0] revoke: %s; the call ended %.3f s after it: %s\n",
                    collGetErrorString(rv.res), t_err - rv.at, collGetLastError(comm));
            return 19;
        }
    } else if (revoke && (t_err - t_fail > 2.0 ||
                          !contains(collGetLastError(comm), "revoked by rank 0"))) {
        fprintf(stderr, "[rank %d] after rank 0's revoke the call ended %.3f s after it began: "
                "%s\n", rank, t_err - t_fail, collGetLastError(comm));
        return 19;
    }

    if (rank == 0 && late_coordinator_ms > 0) {
        struct timespec ts = {late_coordinator_ms / 1000,
                              (late_coordinator_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    collComm_t shrunk = NULL;
    int victim = VICTIM;
    bool list = strcmp(mode, "list") == 0 || revoke;
    int flags = revoke ? COLL_SHRINK_DEFAULT
                       : COLL_SHRINK_ABORT | (list ? 0 : COLL_SHRINK_DETECT);
    r = collCommShrink(comm, list ? &victim : NULL, list ? 1 : 0, &shrunk, NULL, flags);
    if (r != collSuccess) {
        fprintf(stderr, "[rank %d] shrink failed: %s: %s\n", rank, collGetErrorString(r),
                collGetLastError(comm));
        return 13;
    }
    int n = -1, me = -1;
    collCommCount(shrunk, &n);
    collCommUserRank(shrunk, &me);
    int want_me = rank < VICTIM ? rank : rank - 1;
    if (n != nranks_all - 1 || me != want_me) {
        fprintf(stderr, "[rank %d] shrunk to rank %d of %d, want %d of %d\n", rank, me, n,
                want_me, nranks_all - 1);
        return 14;
    }
    for (int it = 0; it < 30; it++) {
        int wrong = 0;
        r = checked_allreduce(shrunk, me, n, new_old_of, 1000 + it, &wrong);
        if (r != collSuccess || wrong != 0) {
            fprintf(stderr, "[rank %d] shrunk allreduce %d: %s, %d wrong\n", rank, it,
                    collGetErrorString(r), wrong);
            return 15;
        }
        if (it == 0) {
            double again = now_s() - t_fail;
            printf("rank %d: error after %.3f s, running again %.3f s after the failing call "
                   "began (%s)\n", rank, t_err - t_fail, again, mode);
            if (strcmp(mode, "stop") == 0 && again > 1.6 * timeout_s) {
                fprintf(stderr, "[rank %d] running again took %.3f s: more than 1.6 timeouts "
                        "(%.0f s)\n", rank, again, timeout_s);
                return 20;
            }
        }
    }
    if (revoke) {
        float x = 1;
        double t0 = now_s();
        r = collAllReduce(&x, &x, 1, collFloat, collSum, comm, NULL);
        if (r != collRemoteError || now_s() - t0 > 0.5 || collCommRevoke(comm, 0) != collSuccess) {
            fprintf(stderr, "[rank %d] the revoked communicator: a call gave %s in %.3f s, or a "
                    "second revoke failed\n", rank, collGetErrorString(r), now_s() - t0);
            return 21;
        }
    }
    fflush(stdout);
    if (collCommDestroy(shrunk) != collSuccess || collCommDestroy(comm) != collSuccess) {
        fprintf(stderr, "[rank %d] destroy failed\n", rank);
        return 16;
    }
    if (launch_maps_shm_segment()) {
        fprintf(stderr, "[rank %d] a shared-memory segment is still mapped after destroy\n",
                rank);
        return 17;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *transport = "shm";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--transport") == 0 && i + 1 < argc)
            transport = argv[++i];
        else if (strcmp(argv[i], "--mode") == 0 && i + 1 < argc)
            mode = argv[++i];
        else if (strcmp(argv[i], "-n") == 0 && i + 1 < argc)
            nranks_all = atoi(argv[++i]);
        else if (strcmp(argv[i], "--late-coordinator") == 0 && i + 1 < argc)
            late_coordinator_ms = atoi(argv[++i]);
        else if (strcmp(argv[i], "-v") == 0)
            verbose = true;
        else {
            fprintf(stderr, "usage: test_shrink [--transport shm|tcp] "
                    "[--mode list|detect|stop|revoke] [-n N] [--late-coordinator MS] [-v]\n");
            return 2;
        }
    }
    if (strcmp(mode, "list") != 0 && strcmp(mode, "detect") != 0 && strcmp(mode, "stop") != 0 &&
        strcmp(mode, "revoke") != 0) {
        fprintf(stderr, "--mode must be list, detect, stop or revoke, not '%s'\n", mode);
        return 2;
    }
    if (nranks_all < 3 || nranks_all > MAX_RANKS) {
        fprintf(stderr, "-n must be 3 to 256, not %d\n", nranks_all);
        return 2;
    }
    int port = launch_free_port();
    if (port < 0) {
        perror("free port");
        return 1;
    }
    char id[64];
    snprintf(id, sizeof(id), "127.0.0.1:%d", port);
    setenv("COLL_COMM_ID", id, 1);
    char nr[16];
    snprintf(nr, sizeof(nr), "%d", nranks_all);
    setenv("COLL_NRANKS", nr, 1);
    if (nranks_all > 16 || strcmp(mode, "revoke") == 0)
        timeout_s = 10;
    char tmo[16];
    snprintf(tmo, sizeof(tmo), "%d", (int)(timeout_s * 1000));
    setenv("COLL_TIMEOUT_MS", tmo, 1);
    setenv("COLL_TRANSPORTS", transport, 1);
    fflush(NULL);
    static pid_t pids[MAX_RANKS];
    for (int r = 0; r < nranks_all; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            char s[16];
            snprintf(s, sizeof(s), "%d", r);
            setenv("COLL_RANK", s, 1);
            _exit(rank_main(r));
        }
    }
    int failures = 0;
    for (int r = 0; r < nranks_all; r++) {
        if (r == VICTIM)
            continue;
        int st;
        waitpid(pids[r], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "rank %d ended with %s %d\n", r,
                    WIFEXITED(st) ? "exit" : "signal", WIFEXITED(st) ? WEXITSTATUS(st)
                                                                        : WTERMSIG(st));
            failures++;
        }
    }
    int st;
    if (strcmp(mode, "stop") == 0 || strcmp(mode, "revoke") == 0)
        kill(pids[VICTIM], SIGKILL);
    waitpid(pids[VICTIM], &st, 0);
    if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL) {
        fprintf(stderr, "rank %d did not end by SIGKILL\n", VICTIM);
        failures++;
    }
    if (waitpid(-1, &st, WNOHANG) != -1 || errno != ECHILD) {
        fprintf(stderr, "a rank is left\n");
        failures++;
    }
    failures += launch_dev_shm_leftovers();
    printf("%s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
