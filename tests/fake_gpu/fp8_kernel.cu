/* fp8_kernel.cu: a kernel on cuda_fp8.h's types, for tests/fake_fp8.sh: real NVRTC
 * compiles it (given the toolkit's include folder) for sm_89 and sm_90, and the fake
 * NVRTC for the emulator, where fp8_lt_check runs it through the fake driver. Per
 * element of x: the E4M3 and E5M2 constructors' codes, __nv_cvt_float_to_fp8 with
 * __NV_NOSAT in each format, and the E4M3 value widened back. */
#include <cuda_fp8.h>

extern "C" __global__ void fp8_convert(const float *x, unsigned char *e4m3, unsigned char *e5m2,
                                       unsigned char *nosat4, unsigned char *nosat5, float *back, int n)
{
    int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) {
        const __nv_fp8_e4m3 a(x[i]);
        const __nv_fp8_e5m2 b(x[i]);
        e4m3[i] = a.__x;
        e5m2[i] = b.__x;
        nosat4[i] = __nv_cvt_float_to_fp8(x[i], __NV_NOSAT, __NV_E4M3);
        nosat5[i] = __nv_cvt_float_to_fp8(x[i], __NV_NOSAT, __NV_E5M2);
        back[i] = static_cast<float>(a);
    }
}
