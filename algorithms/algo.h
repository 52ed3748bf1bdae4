/* The algorithm interface: a collective becomes a schedule of sends, receives and
 * reductions over connections.  Algorithms never touch sockets; they use exec.h. */
#ifndef COLL_ALGO_H
#define COLL_ALGO_H

#include <stdbool.h>

#include "engine.h"
#include "internal.h"

struct coll_args {
    const void *sendbuf;
    void *recvbuf;
    size_t count;          /* elements: per rank for allgather/reduce_scatter blocks */
    collDataType_t dtype;
    collRedOp_t op;
    int root;
};

struct coll_frame;

struct coll_algo {
    const char *name;
    bool (*can_run)(const struct coll_comm *comm, enum coll_func f, const struct coll_args *a);
    /* A call, as a program the engine owns (prog.h): built into frame f, whose
     * program then runs alone or beside other calls in flight.  The
     * algorithms whose calls still drive the engine themselves have run
     * instead (they run alone). */
    collResult_t (*build[COLL_FUNC_COUNT])(struct coll_frame *f, const struct coll_args *a);
    collResult_t (*run[COLL_FUNC_COUNT])(struct coll_comm *comm, const struct coll_args *a);
    /* Predicted time in microseconds of the call under model m (steps x alpha +
     * bytes on the busiest link / beta + reduction); NULL: no prediction. */
    double (*predict)(const struct coll_comm *comm, enum coll_func f, const struct coll_args *a,
                      const struct coll_model *m);
    /* Optional: the algorithm declines its calls for now, every rank alike
     * (the direct allreduce after buffers some rank could not map); count:
     * this call is one of those it declines.  The call then runs the
     * planner's next choice. */
    bool (*skips)(struct coll_comm *comm, bool count);
    /* Optional: the user's settings demand this algorithm for a call it can run
     * (the planner then takes it whatever the predictions say). */
    bool (*forced)(const struct coll_comm *comm, enum coll_func f, const struct coll_args *a);
    /* Optional: per-communicator state, set up once the transports and the
     * planner's model are (collective: every rank calls it), and released. */
    collResult_t (*comm_init)(struct coll_comm *comm);
    void (*comm_fini)(struct coll_comm *comm);
    /* Its calls share state of the comm beyond their connections (the direct
     * allreduce's segments, ll's slots): on a stream such a call runs alone,
     * once every earlier one is over. */
    bool exclusive;
    /* Its calls take about a microsecond (ll): on a stream they run at once,
     * alone, since there is nothing to overlap. */
    bool quick;
};

/* Whether al runs collective f (as a program or by itself). */
static inline bool coll_algo_has(const struct coll_algo *al, enum coll_func f)
{
    return al->build[f] != NULL || al->run[f] != NULL;
}
/* Runs call f of al to its end (alone). */
collResult_t coll_algo_run(const struct coll_algo *al, enum coll_func f, struct coll_comm *comm,
                           const struct coll_args *a);
/* Builds call f of al as a program to run beside others (*p_p: the engine
 * frees it when it ends); al->build[f] must be set. */
collResult_t coll_algo_build(const struct coll_algo *al, enum coll_func f, struct coll_comm *comm,
                             const struct coll_args *a, struct coll_prog **p_p);

/* The table (algorithms/table.c): every algorithm, in the order of COLL_ALGO's
 * bits and of the planner's ties. */
#define COLL_NALGOS 7
extern const struct coll_algo *const coll_algo_table[COLL_NALGOS];

/* The table's algorithm of that name (any case; len bytes of name); NULL when
 * none.  The planner's probes and an algorithm's own small steps (an agreement,
 * a barrier) name the algorithm they need instead of asking the planner, whose
 * choices they must not move. */
const struct coll_algo *coll_algo_find(const char *name);
/* The element-wise max of every rank's n doubles (into all): the agreements
 * algorithms make at init and per call. */
collResult_t coll_algo_agree_max(struct coll_comm *comm, double *mine, double *all, size_t n);
/* Every rank's `bytes` bytes, in rank order (into all): what ranks tell each
 * other at init and per call. */
collResult_t coll_algo_agree_gather(struct coll_comm *comm, const void *mine, void *all,
                                    size_t bytes);
const struct coll_algo *coll_algo_find_n(const char *name, size_t len);

/* What an algorithm's run returns when, all ranks agreeing, it declines a call
 * it chose to take (the direct allreduce finding buffers some rank cannot map):
 * the core then runs the planner's choice without it (coll_algo_select_other).
 * Never returned to a user. */
#define COLL_ALGO_DECLINED ((collResult_t)-1)
/* Every algorithm's comm_init, in table order; comm_fini for all. */
collResult_t coll_algo_comm_init(struct coll_comm *comm);
void coll_algo_comm_fini(struct coll_comm *comm);

const char *coll_func_name(enum coll_func f);
/* A schedule as the planner sees it.  Bytes are sent + received. */
struct coll_cost {
    double rounds;        /* rounds of messages in sequence (the critical path) */
    double msgs;          /* messages of all ranks */
    double busiest_msgs;  /* messages sent + received by the busiest rank */
    double rank_bytes;    /* bytes of the busiest rank */
    double total_bytes;   /* bytes of all ranks */
    double reduce_bytes;  /* bytes reduced on the critical path */
};

/* Predicted microseconds of schedule c on nranks ranks. */
static inline double coll_model_cost(const struct coll_model *m, int nranks,
                                     const struct coll_cost *c)
{
    double host_share = (double)m->local_ranks / nranks; /* of the messages and bytes */
    double t_rank = c->rank_bytes / (m->core_gbs * 1e3);
    double t_host = c->total_bytes * host_share / (m->host_gbs * 1e3);
    return c->rounds * m->lat_us + c->busiest_msgs * m->msg_us +
           c->msgs * host_share * m->wake_us / m->cores + (t_rank > t_host ? t_rank : t_host) +
           c->reduce_bytes / (m->reduce_gbs * 1e3);
}

/* Sets comm->model: COLL_LINK_LATENCY_NS / COLL_LINK_BW_MBS, else measured with a
 * few ring collectives, and agreed by all ranks (so all plan alike). */
collResult_t coll_plan_init(struct coll_comm *comm);
/* Picks the algorithm for one call: among those COLL_ALGO allows that can run it,
 * one the user's settings force, else the one with the lowest predicted time; the
 * table's first without predictions. */
collResult_t coll_algo_select(struct coll_comm *comm, enum coll_func f, const struct coll_args *a,
                              const struct coll_algo **algo_p);
/* The same choice with `not` left out (an algorithm that found it cannot run the
 * call after all: every rank must find so alike); the comm's kept choice is not
 * touched. */
collResult_t coll_algo_select_other(struct coll_comm *comm, enum coll_func f,
                                    const struct coll_args *a, const struct coll_algo *not,
                                    const struct coll_algo **algo_p);
/* Whether a quick algorithm can run the call.  COLL_ALGO is not looked at:
 * the answer only keeps a stream's call out of the set of calls in flight, and
 * any thread may ask (can_run reads what the comm set up at init). */
bool coll_algo_quick(const struct coll_comm *comm, enum coll_func f, const struct coll_args *a);
/* Validates COLL_ALGO at init; collInvalidArgument naming the bad part. */
collResult_t coll_algo_check_env(struct coll_comm *comm);

#endif
