/* A call as a program of one stage (prog.h). */
#include "prog.h"

#include <stdlib.h>
#include <string.h>

static collResult_t frame_next(struct coll_prog *p)
{
    struct coll_frame *f = (struct coll_frame *)p;
    int pc = p->pc++;
    p->sched = pc == 0 ? f->stage : NULL;
    if (pc == 1 && f->after != NULL)
        return f->after(f);
    return collSuccess;
}

static void frame_fini(struct coll_prog *p)
{
    struct coll_frame *f = (struct coll_frame *)p;
    if (f->sub_on) {
        f->sub_on = false;
        f->sub->prog.fini(&f->sub->prog);
    }
    for (int i = 0; i < f->nowned; i++)
        free(f->owned[i]);
    f->nowned = 0;
    if (f->heap)
        free(f);
}

void coll_frame_init(struct coll_frame *f, struct coll_comm *comm, const struct coll_args *a)
{
    f->prog = (struct coll_prog){.comm = comm, .next = frame_next, .fini = frame_fini};
    f->a = *a;
    f->stage = NULL;
    f->heap = false;
    f->nowned = 0;
    f->used = 0;
    f->state = NULL;
    f->after = NULL;
    f->sub = NULL;
    f->sub_on = false;
}

collResult_t coll_frame_take(struct coll_frame *f, size_t bytes, void **p_p)
{
    size_t at = (f->used + 63) & ~(size_t)63;
    if (at + bytes <= COLL_FRAME_BYTES) {
        *p_p = f->mem + at;
        f->used = at + bytes;
        return collSuccess;
    }
    return coll_frame_alloc(f, bytes, p_p);
}

collResult_t coll_frame_alloc(struct coll_frame *f, size_t bytes, void **p_p)
{
    size_t at = (f->used + 63) & ~(size_t)63;
    if (at + bytes <= COLL_FRAME_BYTES) {
        *p_p = f->mem + at;
        f->used = at + bytes;
        memset(*p_p, 0, bytes);
        return collSuccess;
    }
    if (f->nowned == COLL_FRAME_OWNED) {
        coll_set_error(f->prog.comm, "%s: a call's state needs more than %d allocations",
                       f->prog.comm->op_name, COLL_FRAME_OWNED);
        return collInternalError;
    }
    void *p = calloc(1, bytes);
    if (p == NULL) {
        coll_set_error(f->prog.comm, "%s: out of memory for %zu bytes of a call's state",
                       f->prog.comm->op_name, bytes);
        return collSystemError;
    }
    f->owned[f->nowned++] = p;
    *p_p = p;
    return collSuccess;
}

void coll_frame_stage(struct coll_frame *f, const struct coll_sched *s)
{
    f->sched = *s;
    f->stage = &f->sched;
}

void coll_frame_pipes(struct coll_frame *f, const struct coll_pipe *ps, int n)
{
    coll_pipes_stage(ps, n, &f->pipes, &f->sched);
    f->stage = &f->sched;
}

collResult_t coll_frame_sub(struct coll_frame *f, struct coll_frame **sub_p)
{
    if (f->sub == NULL)
        COLL_CHECK(coll_frame_alloc(f, sizeof(*f->sub), (void **)&f->sub));
    coll_frame_init(f->sub, f->prog.comm, &f->a);
    f->sub_on = true;
    *sub_p = f->sub;
    return collSuccess;
}

collResult_t coll_frame_sub_next(struct coll_frame *f, bool *more_p)
{
    struct coll_prog *p = &f->sub->prog;
    collResult_t res = p->next(p);
    f->prog.sched = res == collSuccess ? p->sched : NULL;
    *more_p = f->prog.sched != NULL;
    if (!*more_p) {
        f->sub_on = false;
        p->fini(p);
    }
    return res;
}

collResult_t coll_frame_run(struct coll_frame *f,
                            collResult_t (*build)(struct coll_frame *, const struct coll_args *))
{
    collResult_t res = build(f, &f->a);
    if (res != collSuccess) {
        f->prog.fini(&f->prog);
        return res;
    }
    return coll_prog_run(&f->prog);
}

collResult_t coll_algo_run(const struct coll_algo *al, enum coll_func f, struct coll_comm *comm,
                           const struct coll_args *a)
{
    if (al->build[f] == NULL)
        return al->run[f](comm, a);
    struct coll_frame fr;
    coll_frame_init(&fr, comm, a);
    return coll_frame_run(&fr, al->build[f]);
}

collResult_t coll_algo_build(const struct coll_algo *al, enum coll_func f, struct coll_comm *comm,
                             const struct coll_args *a, struct coll_prog **p_p)
{
    if (al->build[f] == NULL) {
        coll_set_error(comm, "%s: algorithm %s runs no programs", comm->op_name, al->name);
        return collInternalError;
    }
    struct coll_frame *fr = malloc(sizeof(*fr));
    if (fr == NULL) {
        coll_set_error(comm, "%s: out of memory for a call in flight", comm->op_name);
        return collSystemError;
    }
    coll_frame_init(fr, comm, a);
    fr->heap = true;
    collResult_t res = al->build[f](fr, &fr->a);
    if (res != collSuccess) {
        fr->prog.fini(&fr->prog);
        return res;
    }
    *p_p = &fr->prog;
    return collSuccess;
}
