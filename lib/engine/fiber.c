/* Call fibers (fiber.h): fibers on the communicator's progress thread, one per
 * call in flight, switched only where the engine waits.
 *
 * Every switch goes through the progress thread's own context: a fiber that
 * yields returns to coll_fiber_resume, and the stream layer resumes the next.
 * On x86-64 a switch is a few instructions (the callee-saved registers and the
 * floating-point control words, below); elsewhere it is swapcontext, which
 * also saves the signal mask with a system call each time.  The sanitizers
 * are told of each switch (they would otherwise take the fiber's stack for a
 * corrupted one), and valgrind of each stack. */
#include "fiber.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include "engine.h"
#include "exec.h"
#include "flight.h"

#if defined(__SANITIZE_ADDRESS__)
#define FIBER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FIBER_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define FIBER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FIBER_TSAN 1
#endif
#endif
#ifdef FIBER_ASAN
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef FIBER_TSAN
#include <sanitizer/tsan_interface.h>
#endif
/* COLL_FIBER_UCONTEXT: swapcontext on x86-64 too (to test that path). */
#if defined(__x86_64__) && !defined(COLL_FIBER_UCONTEXT)
#define FIBER_ASM 1
/* Pushes the callee-saved registers and the SSE and x87 control words, stores
 * the stack pointer in *from, and pops the same from `to`: a stack saved by an
 * earlier switch, or a new one made by fiber_make, whose return address is
 * coll_fiber_tramp. */
void coll_fiber_switch(void **from, void *to);
/* A new fiber's first code: calls r13(r12). */
extern char coll_fiber_tramp[];
__asm__(".text\n"
        ".p2align 4\n"
        ".globl coll_fiber_switch\n"
        ".hidden coll_fiber_switch\n"
        ".type coll_fiber_switch,@function\n"
        "coll_fiber_switch:\n"
        "    pushq %rbp\n"
        "    pushq %rbx\n"
        "    pushq %r12\n"
        "    pushq %r13\n"
        "    pushq %r14\n"
        "    pushq %r15\n"
        "    subq $8, %rsp\n"
        "    stmxcsr (%rsp)\n"
        "    fnstcw 4(%rsp)\n"
        "    movq %rsp, (%rdi)\n"
        "    movq %rsi, %rsp\n"
        "    ldmxcsr (%rsp)\n"
        "    fldcw 4(%rsp)\n"
        "    addq $8, %rsp\n"
        "    popq %r15\n"
        "    popq %r14\n"
        "    popq %r13\n"
        "    popq %r12\n"
        "    popq %rbx\n"
        "    popq %rbp\n"
        "    ret\n"
        ".size coll_fiber_switch,.-coll_fiber_switch\n"
        ".p2align 4\n"
        ".globl coll_fiber_tramp\n"
        ".hidden coll_fiber_tramp\n"
        ".type coll_fiber_tramp,@function\n"
        "coll_fiber_tramp:\n"
        "    movq %r12, %rdi\n"
        "    callq *%r13\n"
        "    ud2\n"
        ".size coll_fiber_tramp,.-coll_fiber_tramp\n");
#endif
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define FIBER_VALGRIND 1
#endif
#endif

/* A fiber's stack: algorithms keep small frames, but the engine's loop holds
 * its slot tables on the stack and a sanitizer build grows every frame.  The
 * pages are touched only as used. */
#define FIBER_STACK_BYTES (1u << 20)

/* What a call keeps on the comm, swapped with its fiber. */
struct fiber_call {
    uint64_t seq;
    int64_t deadline_ns, op_start_ns;
    const char *op_name;
    struct coll_flight_call flight;
};

struct coll_fiber {
    struct coll_fibers *g;
    int slot;
    bool used, started, ended;
    void (*fn)(void *);
    void *arg;
#ifdef FIBER_ASM
    void *sp;                 /* saved by coll_fiber_switch */
#else
    ucontext_t ctx;
#endif
    char *stack;              /* mapped on first use, kept for the slot's next call */
    unsigned vg_id;
    void *scratch;            /* the slot's scratch (slot 0: the comm's own) */
    size_t scratch_bytes;
    struct fiber_call call;
    /* What the others read while this one is suspended. */
    const struct coll_sched *last; /* its last schedule, running */
    bool released;            /* its last schedule is over: holds nothing */
    bool exclusive;           /* coll_fiber_exclusive: holds everything to the end */
    bool in_idle;             /* suspended in coll_fiber_idle with reqs below */
    bool denied;              /* a lane found its connection held since the last wait */
    bool parked;              /* waits for nothing but a release (park_epoch: as of when) */
    uint64_t park_epoch, yield_epoch;
    struct coll_req *const *reqs;
    int nreqs, steps;
#ifdef FIBER_ASAN
    void *fake_stack;
#endif
#ifdef FIBER_TSAN
    void *tsan;
#endif
};

struct coll_fibers {
    struct coll_comm *comm;
    int max;
    struct coll_fiber slot[COLL_FIBERS_MAX];
    struct coll_fiber *live[COLL_FIBERS_MAX]; /* not freed, oldest first */
    int nlive;
    struct coll_fiber *cur;   /* running, NULL on the progress thread's own stack */
#ifdef FIBER_ASM
    void *home_sp;            /* the progress thread's stack while a fiber runs */
#else
    ucontext_t home;          /* the progress thread's context while a fiber runs */
#endif
    int quiet;                /* idle waits in a row that moved nothing */
    int nparked;              /* fibers parked: not resumed until the epoch moves */
    uint64_t epoch;           /* releases so far: a held connection may be free now */
    int64_t moved_ns;         /* when a call last moved something */
    uint64_t seq_hi;          /* the latest sequence number any call took */
    atomic_bool arrived;      /* coll_fibers_arrived since the last look */
    struct coll_req **uni;    /* the union of the idle calls' requests */
    size_t uni_cap;
#ifdef FIBER_ASAN
    const void *home_bottom;
    size_t home_size;
    void *home_fake;
#endif
#ifdef FIBER_TSAN
    void *home_tsan;
#endif
};

collResult_t coll_fibers_init(struct coll_comm *comm, int max)
{
    if (comm->fibers != NULL)
        return collSuccess;
    struct coll_fibers *g;
    COLL_CHECK(coll_calloc(&g, 1));
    g->comm = comm;
    g->max = max < 1 ? 1 : max > COLL_FIBERS_MAX ? COLL_FIBERS_MAX : max;
    for (int i = 0; i < COLL_FIBERS_MAX; i++) {
        g->slot[i].g = g;
        g->slot[i].slot = i;
    }
    atomic_init(&g->arrived, false);
    comm->fibers = g;
    return collSuccess;
}

void coll_fibers_fini(struct coll_comm *comm)
{
    struct coll_fibers *g = comm->fibers;
    if (g == NULL)
        return;
    for (int i = 0; i < COLL_FIBERS_MAX; i++) {
        struct coll_fiber *f = &g->slot[i];
        if (f->stack != NULL) {
#ifdef FIBER_VALGRIND
            VALGRIND_STACK_DEREGISTER(f->vg_id);
#endif
            size_t page = (size_t)sysconf(_SC_PAGESIZE);
            munmap(f->stack - page, FIBER_STACK_BYTES + page); /* the guard with it */
        }
        if (i > 0)
            free(f->scratch); /* slot 0's is the comm's, freed with it */
    }
    free(g->uni);
    free(g);
    comm->fibers = NULL;
}

int coll_fibers_count(const struct coll_comm *comm)
{
    return comm->fibers != NULL ? comm->fibers->nlive : 0;
}

bool coll_fiber_inside(const struct coll_comm *comm)
{
    return comm->fibers != NULL && comm->fibers->cur != NULL;
}

void coll_fibers_arrived(struct coll_comm *comm)
{
    /* A fiber made (the group published before it) is seen first. */
    if (atomic_load_explicit(&comm->fibers_running_any, memory_order_acquire) == 0)
        return;
    struct coll_fibers *g = comm->fibers;
    atomic_store(&g->arrived, true);
    coll_engine_wake(comm);
}

/* --- switching --- */

static void fiber_load(struct coll_fiber *f)
{
    struct coll_comm *comm = f->g->comm;
    comm->seq = f->call.seq;
    comm->deadline_ns = f->call.deadline_ns;
    comm->op_start_ns = f->call.op_start_ns;
    comm->op_name = f->call.op_name;
    comm->scratch = f->scratch;
    comm->scratch_bytes = f->scratch_bytes;
    coll_flight_swap(comm, NULL, &f->call.flight);
}

static void fiber_save(struct coll_fiber *f)
{
    struct coll_fibers *g = f->g;
    struct coll_comm *comm = g->comm;
    f->call.seq = comm->seq;
    if (comm->seq > g->seq_hi)
        g->seq_hi = comm->seq;
    f->call.deadline_ns = comm->deadline_ns;
    f->call.op_start_ns = comm->op_start_ns;
    f->call.op_name = comm->op_name;
    f->scratch = comm->scratch;
    f->scratch_bytes = comm->scratch_bytes;
    coll_flight_swap(comm, &f->call.flight, NULL);
    /* Between fibers the comm shows slot 0's scratch and the latest sequence
     * number, as a call run without fibers would leave them. */
    comm->seq = g->seq_hi;
    if (f->slot != 0) {
        comm->scratch = g->slot[0].scratch;
        comm->scratch_bytes = g->slot[0].scratch_bytes;
    }
}

/* From the fiber back to the progress thread's context. */
static void fiber_to_home(struct coll_fiber *f, bool ending)
{
    struct coll_fibers *g = f->g;
    fiber_save(f);
    g->cur = NULL;
#ifdef FIBER_TSAN
    __tsan_switch_to_fiber(g->home_tsan, 0);
#endif
#ifdef FIBER_ASAN
    __sanitizer_start_switch_fiber(ending ? NULL : &f->fake_stack, g->home_bottom, g->home_size);
#endif
    (void)ending;
#ifdef FIBER_ASM
    coll_fiber_switch(&f->sp, g->home_sp);
#else
    swapcontext(&f->ctx, &g->home);
#endif
#ifdef FIBER_ASAN
    __sanitizer_finish_switch_fiber(f->fake_stack, &g->home_bottom, &g->home_size);
#endif
}

static void fiber_run(struct coll_fiber *f)
{
#ifdef FIBER_ASAN
    __sanitizer_finish_switch_fiber(NULL, &f->g->home_bottom, &f->g->home_size);
#endif
    f->fn(f->arg);
    f->ended = true;
    f->released = true;
    f->last = NULL;
    f->g->epoch++;
    f->g->comm->fibers_running--;
    atomic_fetch_sub_explicit(&f->g->comm->fibers_running_any, 1, memory_order_release);
    fiber_to_home(f, true);
    abort(); /* an ended fiber is never resumed */
}

#ifndef FIBER_ASM
static __thread struct coll_fiber *fiber_starting;

static void fiber_entry(void)
{
    fiber_run(fiber_starting);
}
#endif

/* f's context, to start at fiber_entry on its stack.  Apart, so that the
 * caller's variables are not thought clobbered by getcontext's second return
 * (there is none: the context is remade before it is used). */
static __attribute__((noinline)) int fiber_make(struct coll_fiber *f)
{
#ifdef FIBER_ASM
    /* What coll_fiber_switch pops: the control words, r15..r12 (r13: the
     * function, r12: its argument), rbx, rbp, and the return address; the
     * trampoline then starts on a 16-byte aligned stack, as a call expects. */
    uint64_t *sp = (uint64_t *)(void *)(f->stack + FIBER_STACK_BYTES - 80);
    memset(sp, 0, 80);
    sp[0] = 0x1F80 | ((uint64_t)0x037F << 32); /* MXCSR, x87 control word: defaults */
    sp[3] = (uint64_t)(uintptr_t)fiber_run;    /* r13 */
    sp[4] = (uint64_t)(uintptr_t)f;            /* r12 */
    sp[7] = (uint64_t)(uintptr_t)coll_fiber_tramp;
    f->sp = sp;
    return 0;
#else
    if (getcontext(&f->ctx) != 0)
        return -1;
    f->ctx.uc_stack.ss_sp = f->stack;
    f->ctx.uc_stack.ss_size = FIBER_STACK_BYTES;
    f->ctx.uc_link = NULL;
    makecontext(&f->ctx, fiber_entry, 0);
    return 0;
#endif
}

struct coll_fiber *coll_fiber_new(struct coll_comm *comm, void (*fn)(void *), void *arg)
{
    struct coll_fibers *g = comm->fibers;
    if (g == NULL || g->nlive >= g->max)
        return NULL;
    struct coll_fiber *f = NULL;
    for (int i = 0; i < g->max && f == NULL; i++)
        if (!g->slot[i].used)
            f = &g->slot[i];
    if (f == NULL)
        return NULL;
    if (f->stack == NULL) {
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        void *p = mmap(NULL, FIBER_STACK_BYTES + page, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
        if (p == MAP_FAILED) {
            coll_set_error(comm, "cannot map a %u KiB stack for a call in flight: %s",
                           FIBER_STACK_BYTES >> 10, strerror(errno));
            return NULL;
        }
        (void)mprotect(p, page, PROT_NONE); /* a guard below the stack */
        f->stack = (char *)p + page;
#ifdef FIBER_VALGRIND
        f->vg_id = VALGRIND_STACK_REGISTER(f->stack, f->stack + FIBER_STACK_BYTES);
#endif
    }
    if (fiber_make(f) != 0) {
        coll_set_error(comm, "getcontext failed: %s", strerror(errno));
        return NULL;
    }
    if (f->slot == 0) {
        f->scratch = comm->scratch;
        f->scratch_bytes = comm->scratch_bytes;
    }
    f->used = true;
    f->started = f->ended = f->released = f->in_idle = f->exclusive = false;
    f->last = NULL;
    f->fn = fn;
    f->arg = arg;
    if (g->nlive == 0)
        g->seq_hi = comm->seq;
    f->call = (struct fiber_call){.seq = g->seq_hi, .op_name = comm->op_name};
    g->live[g->nlive++] = f;
    comm->fibers_running++;
    atomic_fetch_add_explicit(&comm->fibers_running_any, 1, memory_order_release);
#ifdef FIBER_TSAN
    f->tsan = __tsan_create_fiber(0);
#endif
    return f;
}

bool coll_fiber_resume(struct coll_fiber *f)
{
    struct coll_fibers *g = f->g;
    if (f->ended)
        return true;
    if (f->parked) {
        if (f->park_epoch == g->epoch)
            return false; /* nothing it waits for was released */
        f->parked = false;
        g->nparked--;
    }
    fiber_load(f);
    g->cur = f;
    if (!f->started) {
        f->started = true;
#ifndef FIBER_ASM
        fiber_starting = f;
#endif
    }
#ifdef FIBER_TSAN
    g->home_tsan = __tsan_get_current_fiber();
    __tsan_switch_to_fiber(f->tsan, 0);
#endif
#ifdef FIBER_ASAN
    __sanitizer_start_switch_fiber(&g->home_fake, f->stack, FIBER_STACK_BYTES);
#endif
#ifdef FIBER_ASM
    coll_fiber_switch(&g->home_sp, f->sp);
#else
    swapcontext(&g->home, &f->ctx);
#endif
#ifdef FIBER_ASAN
    __sanitizer_finish_switch_fiber(g->home_fake, NULL, NULL);
#endif
    return f->ended;
}

void coll_fiber_free(struct coll_fiber *f)
{
    struct coll_fibers *g = f->g;
    int k = 0;
    while (k < g->nlive && g->live[k] != f)
        k++;
    if (k == g->nlive)
        return;
    memmove(&g->live[k], &g->live[k + 1], (size_t)(g->nlive - k - 1) * sizeof(g->live[0]));
    g->nlive--;
#ifdef FIBER_TSAN
    __tsan_destroy_fiber(f->tsan);
    f->tsan = NULL;
#endif
    if (f->slot == 0) {
        /* Slot 0's scratch is the comm's: it stays the comm's. */
        g->comm->scratch = f->scratch;
        g->comm->scratch_bytes = f->scratch_bytes;
    }
    f->used = false;
    if (g->nlive == 0)
        g->comm->seq = g->seq_hi;
}

/* Suspends the running fiber until the progress thread resumes it. */
static void fiber_yield(struct coll_fibers *g)
{
    struct coll_fiber *f = g->cur;
    fiber_to_home(f, false);
    /* Resumed: coll_fiber_resume loaded the call's state. */
}

/* Suspends the running fiber, showing the others what it waits for (reqs,
 * steps: for their union), until it is resumed. */
static void fiber_wait(struct coll_fibers *g, struct coll_req *const *reqs, int nreqs,
                       int steps)
{
    struct coll_fiber *f = g->cur;
    f->reqs = reqs;
    f->nreqs = nreqs;
    f->steps = steps;
    f->in_idle = true;
    f->yield_epoch = g->epoch;
    fiber_yield(g);
    f->in_idle = false;
}

/* --- what the engine asks --- */

enum coll_fiber_wait coll_fiber_idle(struct coll_comm *comm, bool fresh, int64_t now,
                                     struct coll_req *const **reqs_p, int *nreqs_p,
                                     int *steps_p, int64_t *since_p)
{
    struct coll_fibers *g = comm->fibers;
    if (g == NULL || g->cur == NULL)
        return COLL_FIBER_ALONE;
    /* Parked calls wait for this one's releases only: alone, it blocks as usual. */
    bool arrived = atomic_exchange(&g->arrived, false);
    if (comm->fibers_running - g->nparked <= 1 && !arrived)
        return COLL_FIBER_ALONE;
    struct coll_fiber *f = g->cur;
    if (fresh) {
        g->quiet = 0;
        g->moved_ns = now;
    }
    bool denied = f->denied;
    f->denied = false;
    if (arrived || ++g->quiet <= comm->fibers_running - g->nparked) {
        /* A call that waits only for an earlier one's connections is not run
         * again until one is released. */
        if (denied && *nreqs_p == 0 && *steps_p == 0) {
            f->parked = true;
            f->park_epoch = g->epoch;
            g->nparked++;
        }
        fiber_wait(g, *reqs_p, *nreqs_p, *steps_p);
        return f->yield_epoch != g->epoch ? COLL_FIBER_RESCAN : COLL_FIBER_YIELDED;
    }
    /* Every call found nothing since the last block: this one blocks for all. */
    g->quiet = 0;
    size_t want = (size_t)*nreqs_p;
    for (int i = 0; i < g->nlive; i++)
        if (g->live[i] != f && g->live[i]->in_idle)
            want += (size_t)g->live[i]->nreqs;
    if (want > g->uni_cap) {
        struct coll_req **u = realloc(g->uni, want * sizeof(*u));
        if (u == NULL)
            return COLL_FIBER_ALONE; /* the others are seen at the next tick */
        g->uni = u;
        g->uni_cap = want;
    }
    size_t n = 0;
    int steps = *steps_p;
    for (int i = 0; i < *nreqs_p; i++)
        g->uni[n++] = (*reqs_p)[i];
    for (int i = 0; i < g->nlive; i++) {
        struct coll_fiber *o = g->live[i];
        if (o == f || !o->in_idle)
            continue;
        for (int k = 0; k < o->nreqs; k++)
            g->uni[n++] = o->reqs[k];
        steps += o->steps;
    }
    *reqs_p = g->uni;
    *nreqs_p = (int)n;
    *steps_p = steps;
    *since_p = g->moved_ns;
    return COLL_FIBER_UNION;
}

bool coll_fiber_pause(struct coll_comm *comm)
{
    struct coll_fibers *g = comm->fibers;
    if (g == NULL || g->cur == NULL || comm->fibers_running - g->nparked <= 1)
        return false;
    g->quiet++;
    fiber_wait(g, NULL, 0, 0);
    return true;
}

/* Whether lane l of an earlier call still holds its connection for a lane that
 * posts (queued behind l's requests) or, peeking, takes bytes in place (only
 * once l's are all done: a transport lends nothing while receives are queued). */
static bool lane_holds(const struct coll_lane *l, bool peek)
{
    if (l->total == 0 || l->conn == NULL)
        return false;
    return l->lending || peek ? l->done < l->total : l->posted < l->total;
}

static bool fiber_conn_free(const struct coll_fibers *g, const struct coll_conn *c, bool peek)
{
    for (int i = 0; i < g->nlive && g->live[i] != g->cur; i++) {
        const struct coll_fiber *o = g->live[i];
        if (o->ended || o->released)
            continue;
        if (o->last == NULL)
            return false;
        for (int k = 0; k < o->last->nlanes; k++)
            if (o->last->lanes[k].conn == c && lane_holds(&o->last->lanes[k], peek))
                return false;
    }
    return true;
}

bool coll_fiber_conn_free(const struct coll_comm *comm, const struct coll_conn *c, bool peek)
{
    struct coll_fibers *g = comm->fibers;
    if (g == NULL || g->cur == NULL)
        return true;
    if (fiber_conn_free(g, c, peek))
        return true;
    g->cur->denied = true;
    return false;
}

void coll_fiber_released(struct coll_comm *comm)
{
    struct coll_fibers *g = comm->fibers;
    if (g != NULL && g->cur != NULL && g->cur->last != NULL)
        g->epoch++;
}

bool coll_fiber_behind(const struct coll_comm *comm)
{
    const struct coll_fibers *g = comm->fibers;
    if (g == NULL || g->cur == NULL)
        return false;
    for (int i = 0; i < g->nlive && g->live[i] != g->cur; i++)
        if (!g->live[i]->ended && !g->live[i]->released)
            return true;
    return false;
}

void coll_fiber_last(struct coll_comm *comm, const struct coll_sched *s)
{
    struct coll_fibers *g = comm->fibers;
    if (g == NULL || g->cur == NULL || g->cur->exclusive)
        return;
    g->cur->last = s;
    if (s == NULL)
        g->cur->released = true;
    g->epoch++;
}

void coll_fiber_exclusive(struct coll_comm *comm)
{
    struct coll_fibers *g = comm->fibers;
    if (g == NULL || g->cur == NULL)
        return;
    g->cur->exclusive = true;
    for (;;) {
        bool older = false;
        for (int i = 0; i < g->nlive && g->live[i] != g->cur; i++)
            older |= !g->live[i]->ended;
        if (!older || !coll_fiber_pause(comm))
            return;
    }
}

uint64_t coll_fiber_oldest_seq(const struct coll_comm *comm)
{
    const struct coll_fibers *g = comm->fibers;
    if (g == NULL || g->cur == NULL)
        return comm->seq;
    for (int i = 0; i < g->nlive; i++)
        if (g->live[i] == g->cur)
            return comm->seq;
        else if (!g->live[i]->ended && g->live[i]->started)
            return g->live[i]->call.seq;
    return comm->seq;
}
