/* fake_gpu.h: what the three libraries of the fake GPU (tests/fake_gpu.sh) share.
 *
 *   libcuda.so.1       fake_cuda.c: the driver API the runtime uses; device memory is
 *                      host memory, streams are queues run on the CPU, kernels run in
 *                      tests/gpu/emu/'s fiber emulator
 *   libnvrtc.so.13     fake_nvrtc.c: "compiles" kernels_cuda.cu for the CPU with g++
 *                      and the emulator; the "cubin" is a header + that shared object
 *                      (at a trainer's start, or in trainc build run with it on the
 *                      library path: the trainer then starts without compiling)
 *   libcublasLt.so.13  fake_cublaslt.c: cublasLtMatmul with cblas_sgemm, queued on the
 *                      stream through the driver's hooks below
 *   libnccl.so.2       fake_nccl.c: ncclAllReduce among the processes of one machine
 *                      through shared memory, polled on the stream (hooks below)
 */
#ifndef FAKE_GPU_H
#define FAKE_GPU_H

#include <stddef.h>
#include <stdint.h>

/* The fake "cubin": this magic, the size of the shared object as a little-endian
 * uint64, then the shared object. */
#define FAKE_CUBIN_MAGIC "TRAINC-FAKECUBIN"
#define FAKE_CUBIN_MAGIC_LEN 16

/* Exported by a kernel module (written by fake_nvrtc.c, built with
 * tests/gpu/emu/emu_kernels.cc): */
typedef int (*fake_kernels_fn)(void);                 /* trainc_fake_kernels: how many */
typedef const char *(*fake_kernel_name_fn)(int k);    /* trainc_fake_kernel_name */
/* trainc_fake_pack: copies kernel k's arguments (cuLaunchKernel's kernelParams) into buf
 * (cap bytes), out[i] pointing at each; pointer arguments must be NULL or satisfy
 * is_dev. Returns the argument count, -1 when buf is too small, -2 when argument *bad
 * is a pointer to something that is not device memory. */
typedef int (*fake_pack_fn)(int k, void *const *args, char *buf, size_t cap, void **out,
                            int (*is_dev)(const void *), int *bad);
/* trainc_fake_arch: the architecture it was compiled for ("sm_89", "sm_90a"); modules
 * cached before it was recorded lack it */
typedef const char *(*fake_arch_fn)(void);
/* emu_launch (emu_kernels.cc): runs kernel `name` with smem bytes of dynamic shared
 * memory; -1 when there is none. */
typedef int (*fake_launch_fn)(const char *name, unsigned gx, unsigned gy, unsigned gz,
                              unsigned bx, unsigned by, unsigned smem, void **args);

/* Driver hooks for the fake cuBLASLt (dlsym on libcuda.so.1): queue fn(arg) on a stream
 * (CUstream as void *; 0 on success, else a CUresult), and check that [p, p + bytes)
 * lies in one device allocation (1 or 0). */
typedef int (*fake_enqueue_host_fn)(void *stream, void (*fn)(void *), void *arg);
typedef int (*fake_is_dev_range_fn)(const void *p, size_t bytes);
/* For the fake NCCL: queue poll(arg) on a stream, run until it returns 1 (a stream waits
 * there, cuStreamQuery says CUDA_ERROR_NOT_READY); the device of this process's context
 * (-1 if none). */
typedef int (*fake_enqueue_poll_fn)(void *stream, int (*poll)(void *), void *arg);
typedef int (*fake_device_fn)(void);

#endif
