/* dl.c: a library of the CUDA toolkit loaded at run time (NVRTC, cuBLASLt, NCCL), for
 * the reasons nvrtc.c gives: a trainer built for CPU and GPU starts on a machine
 * without them, and a bundle finds its copies through its $ORIGIN run path. (The
 * driver, device_cuda.c, goes through cuGetProcAddress instead.) */
#include <dlfcn.h>
#include <stdio.h>
#include "rt_cuda.h"

int rt_dl_load(const char *what, const char *const *names, const char *const *syms,
               void **const *fns, int n, char *why, size_t wn)
{
    void *h = NULL;
    char first[256] = "";   /* dlerror() of the first name: the one a user should install */
    for (int i = 0; names[i] && !h; i++)
        if (!(h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL)) && i == 0)
            snprintf(first, sizeof first, "%s", dlerror());
    if (!h) {
        snprintf(why, wn, "%s (%s) is not installed: %s", what, names[0], first);
        return -1;
    }
    /* POSIX's way to store dlsym's result into a function pointer */
    for (int i = 0; i < n; i++)
        if (!(*fns[i] = dlsym(h, syms[i]))) {
            snprintf(why, wn, "%s lacks %s (too old?)", what, syms[i]);
            return -1;
        }
    return 0;
}
