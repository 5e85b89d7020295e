/* jit.c: `trainc run`. The generated host code and CPU kernels are compiled in memory
 * by libtcc and linked against the runtime already inside this process (trainc is
 * linked with -rdynamic, so rt_* and libm resolve from here): the run starts without
 * a compiler process and without writing to disk. The kernel caches are the
 * exceptions: NVRTC compiles kernels_cuda.cu once for a GPU, and a long CPU run has
 * the C compiler rebuild the CPU kernels in the background (jit_cc.c). */
#include <libtcc.h>
#include <stdlib.h>
#include <string.h>
#include "ir.h"

#ifndef TCC_LIB_PATH
#define TCC_LIB_PATH "/usr/lib/x86_64-linux-gnu/tcc"
#endif

static void tcc_error(void *opaque, const char *msg)
{
    (void)opaque;
    fprintf(stderr, "trainc: jit: %s\n", msg);
}

/* The generated sources include "model.h" and "trainc_rt.h"; hand tcc the model
 * header from memory by inlining it. */
static char *inline_model_h(const Emitted *em, const Buf *src)
{
    const char *inc = "#include \"model.h\"\n";
    char *at = strstr(src->s, inc);
    if (!at)
        die("generated source does not include model.h");
    Buf b = {0};
    buf_printf(&b, "%.*s%s%s", (int)(at - src->s), src->s, em->model_h.s, at + strlen(inc));
    return b.s;
}

int jit_run(Compiled *c, const char *incdir, int argc, char **argv)
{
    TCCState *s = tcc_new();
    if (!s)
        die("tcc_new failed");
    tcc_set_error_func(s, NULL, tcc_error);
    tcc_set_lib_path(s, TCC_LIB_PATH);
    tcc_set_output_type(s, TCC_OUTPUT_MEMORY);
    tcc_add_include_path(s, incdir);
    tcc_define_symbol(s, "TRAINC_JIT", "1");
    char *abs = realpath(c->spec->data_dir, NULL);
    Buf q = {0};   /* a folder named with " or \ is still one string */
    c_string(&q, abs ? abs : c->spec->data_dir);
    tcc_define_symbol(s, "TRAINC_DATA_DIR", q.s);
    free(q.s);
    /* both devices: the runtime picks the GPU when there is one (--device chooses);
     * the CUDA kernels go to NVRTC for that GPU at start, through the disk cache */
    static rt_cuda_image image;
    image.source = c->em.kernels_cu.s;
    /* a model the GPU kernels do not take: --device cuda refused, auto on the CPU */
    image.unsupported = c->prog->cuda_unsupported;
    tcc_define_symbol(s, "TRAINC_DEVICES", "(RT_HAS_CPU | RT_HAS_CUDA)");
    tcc_define_symbol(s, "TRAINC_CUDA_IMAGE", "(&trainc_cuda_image)");
    tcc_add_symbol(s, "trainc_cuda_image", &image);
    char *host = inline_model_h(&c->em, &c->em.host_c);
    char *kern = inline_model_h(&c->em, &c->em.kernels_c);
    if (tcc_compile_string(s, host) != 0 || tcc_compile_string(s, kern) != 0)
        die("libtcc could not compile the generated code (see above)");
    if (tcc_relocate(s, TCC_RELOCATE_AUTO) < 0)
        die("libtcc could not link the generated code (see above)");
    const rt_model *m = tcc_get_symbol(s, "trainc_model");
    if (!m)
        die("generated code has no trainc_model");
    jit_cc_begin(&c->em, kern, incdir, s);
    int rc = rt_main(m, argc, argv);
    jit_cc_end();
    tcc_delete(s);
    free(abs);
    return rc;
}
