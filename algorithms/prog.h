/* A call as a program of one stage, built by an algorithm's ordinary code.
 *
 * The algorithm sets the call up as it would to run it, but its state lives in
 * the frame (coll_frame_alloc) and its last step hands the stage over
 * (coll_frame_stage, coll_frame_pipes) instead of running it.  The frame is a
 * program (engine.h): run alone (coll_frame_run, the frame on the caller's
 * stack) or beside other calls in flight (coll_algo_build, the frame on the
 * heap, freed when the program ends).  An algorithm with several stages
 * (recursive doubling's rounds) writes its program's next() itself. */
#ifndef COLL_PROG_H
#define COLL_PROG_H

#include <stdbool.h>
#include <stddef.h>

#include "algo.h"
#include "engine.h"
#include "pipe.h"

#define COLL_FRAME_BYTES 8192 /* the algorithms' contexts, in the frame itself */
#define COLL_FRAME_OWNED 4    /* more, from the heap, freed with the frame */

struct coll_frame {
    struct coll_prog prog;
    struct coll_args a;          /* the call's arguments, which the contexts point at */
    struct coll_sched *stage;    /* the stage handed over; NULL: none */
    struct coll_sched sched;     /* where coll_frame_stage copies it */
    bool heap;                   /* the frame itself is freed when the program ends */
    struct coll_pipes_stage pipes;
    void *state;                 /* a program that writes its own next(): its state */
    /* Optional: the local work once the stage is done (ll's fold), with state. */
    collResult_t (*after)(struct coll_frame *f);
    struct coll_frame *sub;      /* a program of calls in turn: the one running (its frame) */
    bool sub_on;
    void *owned[COLL_FRAME_OWNED];
    int nowned;
    size_t used;
    _Alignas(64) unsigned char mem[COLL_FRAME_BYTES];
};

/* A frame for a call of comm with arguments a (copied into f->a). */
void coll_frame_init(struct coll_frame *f, struct coll_comm *comm, const struct coll_args *a);
/* Zeroed memory for the program's state, alive as long as the frame. */
collResult_t coll_frame_alloc(struct coll_frame *f, size_t bytes, void **p_p);
/* Hands stage s over (copied; what it points at must live in the frame). */
void coll_frame_stage(struct coll_frame *f, const struct coll_sched *s);
/* Hands over stage s that lives as long as the program (ll's, the comm's). */
static inline void coll_frame_stage_at(struct coll_frame *f, struct coll_sched *s)
{
    f->stage = s;
}
/* Memory for the program's state, as coll_frame_alloc, not cleared. */
collResult_t coll_frame_take(struct coll_frame *f, size_t bytes, void **p_p);
/* Hands pipes ps[0..n) over as the stage (copied: coll_pipes_stage). */
void coll_frame_pipes(struct coll_frame *f, const struct coll_pipe *ps, int n);
/* A program of several calls one after another (hier's): each is built in turn
 * into f's sub frame (coll_frame_sub gives it, made on first use), and its
 * stages run as f's (coll_frame_sub_next sets f->prog.sched to the next; false
 * in *more_p once the sub call is over). */
collResult_t coll_frame_sub(struct coll_frame *f, struct coll_frame **sub_p);
collResult_t coll_frame_sub_next(struct coll_frame *f, bool *more_p);
/* Builds with build(f, &f->a) and runs the program alone. */
collResult_t coll_frame_run(struct coll_frame *f,
                            collResult_t (*build)(struct coll_frame *, const struct coll_args *));

#endif
