/* emu_fibers.cc: the emulator's machine (emu.h), compiled once for every set of kernels:
 * a fiber per CUDA thread and the scheduler that runs a launch block by block, the warp
 * exchange, barriers, cp.async, the Hopper instructions (emu_sm90.inc), and emu_launch(),
 * which runs a kernel that emu_kernel() (emu_kernels.cc) finds by name with
 * cuLaunchKernel-style arguments. */
#include "emu.h"
#undef int64_t
#undef uint64_t
#include <ucontext.h>
#include <vector>

dim3 threadIdx, blockIdx, blockDim, gridDim;

/* The context switch. On x86-64 a few instructions (callee-saved registers, the SSE
 * and x87 control words, the stack pointer): ucontext's swapcontext makes two system
 * calls per switch (the signal mask), which made whole training runs through the fake
 * GPU (tests/fake_gpu.sh) several times slower. Elsewhere, ucontext. */
#if defined(__x86_64__)
#define EMU_FAST_SWITCH 1
extern "C" __attribute__((visibility("hidden"))) void emu_switch(void **save_sp, void *load_sp);
asm(R"(
    .text
    .globl emu_switch
    .hidden emu_switch
    .type emu_switch, @function
emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_switch, .-emu_switch
)");
#endif

namespace {

const int MAXT = 1024;
const size_t STACK = 192 << 10;

/* How far below its stack's end fiber i's stack starts: a different 64 bytes for each
 * of 1024 threads within the stack's last 64 KiB. Stacks the same distance apart would
 * put every thread's top frames in the same cache sets, evicting each other at every
 * switch (about 4% of an emulated training step). */
size_t stack_skew(int i) { return (size_t)(33 * i % MAXT) * 64; }

struct Fiber {
#if EMU_FAST_SWITCH
    void *sp;
#else
    ucontext_t ctx;
#endif
    bool done;
    dim3 tid;
};
Fiber fib[MAXT];
char *stacks;
#if EMU_FAST_SWITCH
void *sched_sp;
#else
ucontext_t sched;
#endif
int nthreads, cur;
unsigned long block_gen, spins;
unsigned long progress;          /* bumped whenever a thread's wait may have ended */
bool spun[MAXT];                 /* the fiber's last yield was a spin-wait's (emu_spin) */
int block_arrived;
bool at_barrier[MAXT];          /* waiting in __syncthreads for barrier wait_gen[i] */
unsigned long wait_gen[MAXT];
unsigned long warp_gen[MAXT / 32];
int warp_arrived[MAXT / 32];
emu_post posts[2][MAXT];         /* emu_exchange's two buffers */
void (*g_call)(void **);
void **g_args;

/* cp.async copies in flight, per thread: made at the wait_group that covers them */
struct Copy {
    void *dst;
    const void *src;
    unsigned bytes, src_bytes;
    unsigned long group;
};
std::vector<Copy> in_flight[MAXT];
unsigned long committed[MAXT];

bool greedy();

/* The fiber after `i` in the default schedule's round (the next not done, wrapping
 * around), or -1 when every fiber is done. */
int next_alive(int i)
{
    for (int j = i + 1; j < nthreads; j++)
        if (!fib[j].done)
            return j;
    for (int j = 0; j <= i; j++)
        if (!fib[j].done)
            return j;
    return -1;
}

/* Leave fiber `cur` for the next in the default schedule's round, directly: one switch
 * instead of two through the scheduler, the same order as run_block's loop. When none
 * is left, back to the scheduler. */
#if EMU_FAST_SWITCH
void switch_to_next()
{
    const int i = cur, j = next_alive(i);
    if (j == i)
        return;
    if (j < 0) {
        emu_switch(&fib[i].sp, sched_sp);
        return;
    }
    cur = j;
    threadIdx = fib[j].tid;
    emu_switch(&fib[i].sp, fib[j].sp);
}

/* Leave fiber `cur`: under the default schedule for the next fiber of the round, under
 * the greedy one back to the scheduler. */
void leave()
{
    if (!greedy())
        switch_to_next();
    else
        emu_switch(&fib[cur].sp, sched_sp);
}
#endif

void yield()
{
    if (++spins > 100ul * (unsigned long)nthreads + 1000) {
        fprintf(stderr, "emu: deadlock: threads wait at a barrier that cannot complete\n");
        abort();
    }
#if EMU_FAST_SWITCH
    leave();
#else
    swapcontext(&fib[cur].ctx, &sched);
#endif
}

/* something another thread may wait for happened */
void note_progress()
{
    spins = 0;
    progress++;
}

void entry()
{
    g_call(g_args);
    fib[cur].done = true;
    note_progress();
#if EMU_FAST_SWITCH
    leave();   /* never resumed */
    __builtin_unreachable();
#endif
}

/* Thread i ready to start entry() on its stack. */
void fiber_init(int i)
{
    char *stack = stacks + (size_t)i * STACK;
#if EMU_FAST_SWITCH
    /* what emu_switch pops: control words, r15 .. rbp, then entry() as the return
     * address, at an rsp such that entry() starts as if called (rsp + 8 aligned) */
    void **sp = (void **)(stack + STACK - 64 - stack_skew(i));
    unsigned ctl[2];
    asm volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(ctl[0]), "=m"(ctl[1]));
    *--sp = nullptr;                        /* entry()'s "return address": never used */
    *--sp = (void *)entry;
    for (int r = 0; r < 6; r++)
        *--sp = nullptr;
    --sp;
    memcpy(sp, ctl, 8);
    fib[i].sp = sp;
#else
    getcontext(&fib[i].ctx);
    fib[i].ctx.uc_stack.ss_sp = stack;
    fib[i].ctx.uc_stack.ss_size = STACK - stack_skew(i);
    fib[i].ctx.uc_link = &sched;
    makecontext(&fib[i].ctx, entry, 0);
#endif
}

} // namespace

unsigned emu_lane_id() { return (unsigned)cur & 31; }

void emu_cp_async(void *dst, const void *src, unsigned bytes, unsigned src_bytes)
{
    if ((bytes != 4 && bytes != 8 && bytes != 16) || src_bytes > bytes ||
        (uintptr_t)dst % bytes || (src_bytes && (uintptr_t)src % bytes)) {
        fprintf(stderr, "emu: cp.async of %u bytes (%u from the source) from %p to %p: size "
                "4, 8 or 16 and addresses aligned to it\n", bytes, src_bytes, src, dst);
        abort();
    }
    memset(dst, 0xff, bytes);   /* undefined until the wait: NaN to whoever reads it early */
    in_flight[cur].push_back(Copy{dst, src, bytes, src_bytes, committed[cur]});
}

void emu_cp_async_commit() { committed[cur]++; }

void emu_cp_async_wait(int n)
{
    std::vector<Copy> &f = in_flight[cur];
    unsigned long upto = committed[cur] > (unsigned long)n ? committed[cur] - (unsigned long)n : 0;
    size_t keep = 0;
    for (size_t i = 0; i < f.size(); i++) {
        const Copy &c = f[i];
        if (c.group < upto) {
            memcpy(c.dst, c.src, c.src_bytes);
            memset((char *)c.dst + c.src_bytes, 0, c.bytes - c.src_bytes);
        } else {
            f[keep++] = c;
        }
    }
    f.resize(keep);
}

void emu_syncthreads()
{
    unsigned long g = block_gen;
    if (++block_arrived == nthreads) {
        block_arrived = 0;
        block_gen++;
        note_progress();
        return;
    }
    at_barrier[cur] = true;
    wait_gen[cur] = g;
    while (block_gen == g)
        yield();
    at_barrier[cur] = false;
}

namespace {

/* Resume fiber i until it yields. */
void run_fiber(int i)
{
    cur = i;
    threadIdx = fib[i].tid;
#if EMU_FAST_SWITCH
    emu_switch(&sched_sp, fib[i].sp);
#else
    swapcontext(&sched, &fib[i].ctx);
#endif
}

/* EMU_SCHEDULE=greedy: warp by warp, each run until all its threads wait at a
 * __syncthreads (or are done) before the next warp starts, so warp 0 runs from one
 * barrier to the next before the others begin that stretch: a missing barrier between
 * one warp's writes (a cp.async's too) and another's reads of the same shared memory
 * shows. A thread in a spin-wait (an mbarrier, a named barrier: emu_spin) counts as
 * waiting unless something happened meanwhile. The default runs every thread in turn,
 * switching at each warp exchange (from one fiber straight to the next: yield). */
bool greedy()
{
    static int g = -1;
    if (g < 0) {
        const char *v = getenv("EMU_SCHEDULE");
        g = v && !strcmp(v, "greedy");
    }
    return g;
}

void run_block(const char *name)
{
    if (!greedy()) {
        for (bool alive = true; alive;) {
            alive = false;
            for (int i = 0; i < nthreads; i++)
                if (!fib[i].done) {
                    alive = true;
                    run_fiber(i);
                }
        }
        return;
    }
    for (;;) {
        bool any = false, left = false;
        for (int w = 0; w * 32 < nthreads; w++)
            for (bool ran = true; ran;) {
                ran = false;
                for (int i = w * 32; i < nthreads && i < w * 32 + 32; i++)
                    if (!fib[i].done && !(at_barrier[i] && wait_gen[i] == block_gen)) {
                        const unsigned long before = progress;
                        spun[i] = false;
                        run_fiber(i);
                        if (!spun[i] || progress != before)
                            ran = any = true;
                    }
            }
        for (int i = 0; i < nthreads; i++)
            left |= !fib[i].done;
        if (!left)
            return;
        if (!any) {
            fprintf(stderr, "emu: %s: deadlock: every thread waits at a barrier\n", name);
            abort();
        }
    }
}

} // namespace

void emu_syncwarp()
{
    int w = cur >> 5, n = nthreads - w * 32 < 32 ? nthreads - w * 32 : 32;
    unsigned long g = warp_gen[w];
    if (++warp_arrived[w] == n) {
        warp_arrived[w] = 0;
        warp_gen[w]++;
        note_progress();
        return;
    }
    while (warp_gen[w] == g)
        yield();
}

const emu_post *emu_exchange(const void *v, size_t n)
{
    emu_post *warp = posts[warp_gen[cur >> 5] & 1] + (cur & ~31);
    if (n > sizeof warp->b) {
        fprintf(stderr, "emu: a warp exchange of %zu bytes (at most %zu)\n", n, sizeof warp->b);
        abort();
    }
    memcpy(warp[cur & 31].b, v, n);
    emu_syncwarp();
    return warp;
}

#include "emu_sm90.inc"

void emu_spin()
{
    spun[cur] = true;
    yield();
}

/* EMU_COUNT=PREFIX[,PREFIX...]: at exit, for each prefix, how many launches of kernels
 * whose names start with it ran (a test's proof that a kernel it means to check was the
 * one launched); one line each, "emu: N launches of PREFIX*" */
enum { EMU_COUNT_MAX = 8 };
static unsigned long counted[EMU_COUNT_MAX];
static char count_prefix[EMU_COUNT_MAX][96];
static int count_n = -1;
static void count_report()
{
    for (int i = 0; i < count_n; i++)
        fprintf(stderr, "emu: %lu launches of %s*\n", counted[i], count_prefix[i]);
}
static void count_launch(const char *name)
{
    if (count_n < 0) {   /* the first launch: read the list, report at exit */
        count_n = 0;
        const char *s = getenv("EMU_COUNT");
        while (s && *s && count_n < EMU_COUNT_MAX) {
            size_t n = strcspn(s, ",");
            snprintf(count_prefix[count_n++], sizeof count_prefix[0], "%.*s", (int)n, s);
            s += n + (s[n] == ',');
        }
        if (count_n)
            atexit(count_report);
    }
    for (int i = 0; i < count_n; i++)
        if (!strncmp(name, count_prefix[i], strlen(count_prefix[i])))
            counted[i]++;
}

/* smem: the launch's bytes of dynamic shared memory (sm90.cuh's kernels use it) */
extern "C" int emu_launch(const char *name, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                          unsigned by, unsigned smem, void **args)
{
    const emu_kernel_fn call = emu_kernel(name);
    if (!call)
        return -1;
    if (bx * by > (unsigned)MAXT || (bx * by) % 32) {
        fprintf(stderr, "emu: %s: block %ux%u is not a multiple of 32 up to 1024\n", name, bx, by);
        abort();
    }
    if (!stacks)
        stacks = (char *)malloc((size_t)MAXT * STACK);
    sm90_launch(smem);
    count_launch(name);
    g_call = call;
    g_args = args;
    nthreads = (int)(bx * by);
    blockDim = {bx, by, 1};
    gridDim = {gx, gy, gz};
    for (unsigned z = 0; z < gz; z++)
        for (unsigned y = 0; y < gy; y++)
            for (unsigned x = 0; x < gx; x++) {
                blockIdx = {x, y, z};
                block_arrived = 0;
                for (int w = 0; w < MAXT / 32; w++)
                    warp_arrived[w] = 0;
                for (int i = 0; i < nthreads; i++) {
                    fiber_init(i);
                    fib[i].done = false;
                    fib[i].tid = {(unsigned)i % bx, (unsigned)i / bx, 0};
                    in_flight[i].clear();
                    committed[i] = 0;
                    at_barrier[i] = false;
                }
                sm90_reset();
                spins = 0;
                run_block(name);
                sm90_block_end(name);
                for (int i = 0; i < nthreads; i++)
                    if (!in_flight[i].empty()) {
                        fprintf(stderr, "emu: %s: thread %d ends with %zu cp.async copies never "
                                "waited for\n", name, i, in_flight[i].size());
                        abort();
                    }
            }
    return 0;
}
