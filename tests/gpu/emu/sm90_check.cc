/* sm90_check.cc: the emulator's Hopper twins (emu_sm90.inc) against plain products, for
 * tests/emu_sm90.sh. It launches sm90_check_kernels.cuh's kernels through emu_launch:
 *   - wgmma SS (K-major A and B) and RS (A fragments from registers, MN-major B over two
 *     64-column tiles) after TMA loads with the 128-byte swizzle, in bf16 and in f16: the
 *     same fp32 sums, in the same k order, as a loop on the host (bit for bit);
 *   - a 3D TMA box that reaches past the tensor's rows: those land as zeros;
 *   - the mistakes the emulator must show: an accumulator read before its wait and a
 *     tile read before its mbarrier phase read NaN; a misaligned swizzled TMA destination,
 *     a misaligned descriptor and a wgmma without wgmma.fence stop the run (SIGABRT, in a
 *     child process). */
#include <csignal>
#include <initializer_list>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/wait.h>
#include <unistd.h>
#include "emu_tmap.h"

extern "C" int emu_launch(const char *name, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                          unsigned by, unsigned smem, void **args);

static const unsigned SMEM = 40960 + 64 + 1024;   /* SM90C_SMEM */
static int fails;

static float to_float(unsigned short h, bool f16)
{
    if (!f16) {
        unsigned u = (unsigned)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    _Float16 x;
    memcpy(&x, &h, 2);
    return (float)x;
}

static unsigned short from_float(float v, bool f16)
{
    if (f16) {
        _Float16 x = (_Float16)v;
        unsigned short h;
        memcpy(&h, &x, 2);
        return h;
    }
    unsigned u;
    memcpy(&u, &v, 4);
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* a 2D map of rows x cols 16-bit values (row-major), box bc x br, 128-byte swizzle */
static void map2d(void *m, const void *p, uint64_t rows, uint64_t cols, uint32_t br, uint32_t bc, bool f16)
{
    const uint64_t dim[2] = {cols, rows}, stride[1] = {cols * 2};
    const uint32_t box[2] = {bc, br}, es[2] = {1, 1};
    const char *why = emu_tmap_encode(m, f16 ? 6 : 9, 2, p, dim, stride, box, es, 0, 3, 0);
    if (why) {
        fprintf(stderr, "emu_tmap_encode: %s\n", why);
        exit(1);
    }
}

static void check(bool ok, const char *what)
{
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    fails += !ok;
}

static void mma(bool f16)
{
    static unsigned short A[64 * 64], Bk[128 * 64], V[64 * 128];
    static float ss[64 * 128], rs[64 * 128];
    srand(f16 ? 2 : 1);
    for (auto *t : {A, Bk, V})
        for (int i = 0; i < (t == A ? 64 * 64 : 128 * 64); i++)
            t[i] = from_float((float)(rand() % 2001 - 1000) / 250.0f, f16);
    alignas(64) unsigned char ma[128], mb[128], mv[128];
    map2d(ma, A, 64, 64, 64, 64, f16);
    map2d(mb, Bk, 128, 64, 128, 64, f16);
    map2d(mv, V, 64, 128, 64, 64, f16);
    const unsigned short *ag = A;
    float *pss = ss, *prs = rs;
    int f = f16;
    void *args[] = {ma, mb, mv, &ag, &pss, &prs, &f};
    emu_launch("sm90_check_mma", 1, 1, 1, 128, 1, SMEM, args);
    int bad_ss = 0, bad_rs = 0;
    for (int i = 0; i < 64; i++)
        for (int j = 0; j < 128; j++) {
            float s = 0.0f, r = 0.0f;
            for (int k = 0; k < 64; k++) {
                s += to_float(A[i * 64 + k], f16) * to_float(Bk[j * 64 + k], f16);
                r += to_float(A[i * 64 + k], f16) * to_float(V[k * 128 + j], f16);
            }
            bad_ss += memcmp(&s, &ss[i * 128 + j], 4) != 0;
            bad_rs += memcmp(&r, &rs[i * 128 + j], 4) != 0;
        }
    char what[160];
    snprintf(what, sizeof what, "%s: TMA (128B swizzle) + wgmma m64n128k16 SS (K-major): %d of 8192 differ",
             f16 ? "f16" : "bf16", bad_ss);
    check(bad_ss == 0, what);
    snprintf(what, sizeof what, "%s: wgmma m64n128k16 RS (MN-major B, two 64-column tiles): %d of 8192 differ",
             f16 ? "f16" : "bf16", bad_rs);
    check(bad_rs == 0, what);
}

static void box()
{
    const int B = 2, T = 50;
    static unsigned short X[2 * 50 * 64], out[64 * 64];
    for (int i = 0; i < B * T * 64; i++)
        X[i] = (unsigned short)(i % 65000 + 1);
    alignas(64) unsigned char m[128];
    const uint64_t dim[3] = {64, (uint64_t)T, (uint64_t)B}, stride[2] = {128, (uint64_t)T * 128};
    const uint32_t bx[3] = {64, 64, 1}, es[3] = {1, 1, 1};
    if (const char *why = emu_tmap_encode(m, 9, 3, X, dim, stride, bx, es, 0, 3, 0)) {
        fprintf(stderr, "emu_tmap_encode: %s\n", why);
        exit(1);
    }
    unsigned short *po = out;
    int row0 = 10, b = 1;
    void *args[] = {m, &po, &row0, &b};
    emu_launch("sm90_check_box", 1, 1, 1, 128, 1, SMEM, args);
    int bad = 0;
    for (int r = 0; r < 64; r++)
        for (int c = 0; c < 64; c++) {
            const int t = row0 + r;
            const unsigned short want = t < T ? X[(b * T + t) * 64 + c] : 0;
            bad += out[r * 64 + c] != want;
        }
    check(bad == 0, "3D TMA box past the tensor's rows: in-bounds rows copied, the rest zeros");
}

/* sm90_check_bad in mode `mode`; returns 1 if the child aborted, else 2 + how many of
 * the 128 values it wrote are NaN */
static int bad(int mode)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        freopen("/dev/null", "w", stderr);
        static unsigned short A[64 * 64], Bk[128 * 64];
        static float out[128];
        alignas(64) unsigned char ma[128], mb[128];
        map2d(ma, A, 64, 64, 64, 64, false);
        map2d(mb, Bk, 128, 64, 128, 64, false);
        float *po = out;
        void *args[] = {ma, mb, &po, &mode};
        emu_launch("sm90_check_bad", 1, 1, 1, 128, 1, SMEM, args);
        int nan = 0;
        for (float v : out)
            nan += v != v;
        _exit(nan > 100 ? 100 : nan);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    if (WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT)
        return 1;
    return WIFEXITED(st) ? 2 + WEXITSTATUS(st) : 0;
}

int main()
{
    mma(false);
    mma(true);
    box();
    check(bad(0) == 2, "control: the same kernel without a mistake runs, no NaN");
    check(bad(1) == 2 + 100, "an accumulator read before wgmma.wait_group reads NaN");
    check(bad(2) == 2 + 1, "a TMA tile read before its mbarrier phase completed reads NaN");
    check(bad(3) == 1, "a 128B-swizzled TMA destination not 1024-aligned stops the run");
    check(bad(4) == 1, "a descriptor starting inside a 1024-byte group stops the run");
    check(bad(5) == 1, "a wgmma without wgmma.fence stops the run");
    return fails ? 1 : 0;
}
