/* emu_kernels.cc: the kernels of templates/cuda/ compiled for the CPU (emu.h), a
 * fiber scheduler that runs a launch block by block, and emu_launch(), which finds a
 * kernel by name and calls it with cuLaunchKernel-style arguments. kernels.inc (the
 * templates and the instances, with extern "C" dropped so that the kernels do not
 * clash with the runtime's CPU functions of the same names) and kernels_list.inc (one
 * K(name) per kernel) are written by tests/gpu_emu.sh. */
#include "emu.h"
namespace emu {
#include "kernels.inc"
}
#undef int64_t
#undef uint64_t
#include <ucontext.h>
#include <utility>

dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace {

const int MAXT = 1024;
const size_t STACK = 128 << 10;

struct Fiber {
    ucontext_t ctx;
    bool done;
    dim3 tid;
};
Fiber fib[MAXT];
char *stacks;
ucontext_t sched;
int nthreads, cur;
unsigned long block_gen, spins;
int block_arrived;
unsigned long warp_gen[MAXT / 32];
int warp_arrived[MAXT / 32];
unsigned long long slots[MAXT];
void (*g_call)(void **);
void **g_args;

void yield()
{
    if (++spins > 100ul * (unsigned long)nthreads + 1000) {
        fprintf(stderr, "emu: deadlock: threads wait at a barrier that cannot complete\n");
        abort();
    }
    swapcontext(&fib[cur].ctx, &sched);
}

void entry()
{
    g_call(g_args);
    fib[cur].done = true;
    spins = 0;
}

template <typename... A, size_t... I>
void invoke_impl(void (*f)(A...), void **args, std::index_sequence<I...>)
{
    f(*(A *)args[I]...);
}
template <typename... A> void invoke(void (*f)(A...), void **args)
{
    invoke_impl(f, args, std::index_sequence_for<A...>{});
}

struct Entry {
    const char *name;
    void (*call)(void **);
};
#define K(name) {#name, [](void **a) { invoke(emu::name, a); }},
const Entry table[] = {
#include "kernels_list.inc"
};

} // namespace

unsigned emu_lane_id() { return (unsigned)cur & 31; }
void *emu_slot() { return &slots[cur]; }
void *emu_slot_of(unsigned lane) { return &slots[(cur & ~31) + (int)lane]; }

void emu_syncthreads()
{
    unsigned long g = block_gen;
    if (++block_arrived == nthreads) {
        block_arrived = 0;
        block_gen++;
        spins = 0;
        return;
    }
    while (block_gen == g)
        yield();
}

void emu_syncwarp()
{
    int w = cur >> 5, n = nthreads - w * 32 < 32 ? nthreads - w * 32 : 32;
    unsigned long g = warp_gen[w];
    if (++warp_arrived[w] == n) {
        warp_arrived[w] = 0;
        warp_gen[w]++;
        spins = 0;
        return;
    }
    while (warp_gen[w] == g)
        yield();
}

extern "C" int emu_launch(const char *name, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                          unsigned by, void **args)
{
    const Entry *k = nullptr;
    for (const Entry &t : table)
        if (!strcmp(t.name, name))
            k = &t;
    if (!k)
        return -1;
    if (bx * by > (unsigned)MAXT || (bx * by) % 32) {
        fprintf(stderr, "emu: %s: block %ux%u is not a multiple of 32 up to 1024\n", name, bx, by);
        abort();
    }
    if (!stacks)
        stacks = (char *)malloc((size_t)MAXT * STACK);
    g_call = k->call;
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
                    getcontext(&fib[i].ctx);
                    fib[i].ctx.uc_stack.ss_sp = stacks + (size_t)i * STACK;
                    fib[i].ctx.uc_stack.ss_size = STACK;
                    fib[i].ctx.uc_link = &sched;
                    makecontext(&fib[i].ctx, entry, 0);
                    fib[i].done = false;
                    fib[i].tid = {(unsigned)i % bx, (unsigned)i / bx, 0};
                }
                spins = 0;
                for (bool alive = true; alive;) {
                    alive = false;
                    for (int i = 0; i < nthreads; i++)
                        if (!fib[i].done) {
                            alive = true;
                            cur = i;
                            threadIdx = fib[i].tid;
                            swapcontext(&sched, &fib[i].ctx);
                        }
                }
            }
    return 0;
}
