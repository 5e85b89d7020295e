/* emu_kernels.cc: the kernels of templates/cuda/ compiled for the CPU (emu.h), and
 * emu_kernel(), which finds one by name for emu_launch (emu_fibers.cc, compiled once,
 * runs it). kernels.inc (the templates and the instances, with extern "C" dropped so
 * that the kernels do not clash with the runtime's CPU functions of the same names) and
 * kernels_list.inc (one K(name) per kernel) are written by tests/gpu_emu.sh (and by the
 * fake NVRTC: tests/fake_gpu/fake_nvrtc.c). */
#include "emu.h"
namespace emu {
#include "kernels.inc"
}
#undef int64_t
#undef uint64_t
#include <utility>

namespace {

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

extern "C" emu_kernel_fn emu_kernel(const char *name)
{
    for (const Entry &t : table)
        if (!strcmp(t.name, name))
            return t.call;
    return nullptr;
}

/* the activations' storage the kernels were compiled for: trainc_rt.h's RT_PREC_BF16
 * (1), RT_PREC_FP16 (2), or 0 (fp32) */
extern "C" int emu_act16(void)
{
#if defined(RT_ACT_BF16)
    return 1;
#elif defined(RT_ACT_F16)
    return 2;
#else
    return 0;
#endif
}
