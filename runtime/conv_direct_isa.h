/* conv_direct_isa.h: the direct convolution's inner kernels (conv_direct.c), written once
 * for one instruction set and included once per set, with these defined:
 *
 *   ISA        the names' suffix (avx512, avx2)
 *   TARGET     the functions' target attribute
 *   VEC, VL    the vector type and its floats (a block's 16 channels are 16 / VL vectors,
 *              its lane groups)
 *   RUN        the most outputs of a row a run (an even number)
 *   BLOCKS     blocks of 16 channels a run (acc's rows: BLOCKS * 16 / VL lane groups)
 *   DW_NC      input channels a weight-gradient call (dw_taps' 9 * DW_NC accumulators)
 *   DX2        1: the set has dx2_outputs (the input gradient of 3x3 stride-2 convolutions)
 *   V_ZERO(), V_LOAD(p), V_STORE(p, v), V_SET1(x), V_FMA(a, b, c) (a b + c, one rounding),
 *   V_ADD(a, b)
 *
 * Lane group g of a run covers channels 16 (g / G) + VL (g % G) .. + VL of its blocks (G =
 * 16 / VL): its weights start at gofs(g) in the packed [block][in][k][k][16] layout, its
 * outputs at tile_at(g, i) in the tile [block][n][16]. Every output is one lane's sum in
 * the order (input channel, ki, kj) whatever the set: both sets give the same bits.
 * It defines F(direct_isa), the set's entry in conv_direct.c's table, and undefines the
 * parameters above, so that the next set can define its own. */

#define G (16 / VL)                      /* lane groups a block */
#define NG (BLOCKS * G)                  /* the most lane groups a run */
#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)
#define F(name) CAT(name, ISA)

/* lane group g's first weight (blocks ws floats apart) and first output in the tile */
#define gofs(g, ws) (((g) / G) * (ws) + ((g) % G) * VL)
#define tile_at(g, i, n) ((((g) / G) * (n) + (i)) * DIRECT_CO + ((g) % G) * VL)

/* A run's accumulators: ng lane groups by n outputs, zeroed, and stored into the tile (ng
 * and n constants where these are inlined) */
TARGET __attribute__((always_inline)) static inline void
F(acc_zero)(VEC (*acc)[RUN], int n, int ng)
{
    for (int g = 0; g < ng; g++)
        for (int i = 0; i < n; i++)
            acc[g][i] = V_ZERO();
}

TARGET __attribute__((always_inline)) static inline void
F(acc_store)(VEC (*acc)[RUN], int n, int ng, float *tile)
{
    for (int g = 0; g < ng; g++)
        for (int i = 0; i < n; i++)
            V_STORE(tile + tile_at(g, i, n), acc[g][i]);
}

/* A 3x3 kernel row's three weight vectors of each lane group */
TARGET __attribute__((always_inline)) static inline void
F(row_weights)(VEC (*w)[3], const float *wv, int64_t ws, int ng)
{
    for (int g = 0; g < ng; g++)
        for (int kj = 0; kj < 3; kj++)
            w[g][kj] = V_LOAD(wv + gofs(g, ws) + kj * DIRECT_CO);
}

/* One broadcast value v at position pos of a kernel row, multiplied into the outputs it
 * reaches: output i = (pos - kj) / s by tap kj, where that divides and is in the run
 * (everything but v constant where it is inlined) */
TARGET __attribute__((always_inline)) static inline void
F(reach)(VEC v, VEC (*w)[3], int pos, int s, int n, int ng, VEC (*acc)[RUN])
{
    for (int kj = 0; kj < 3; kj++) {
        int d = pos - kj;
        if (d < 0 || d % s || d / s >= n)
            continue;
        for (int g = 0; g < ng; g++)
            acc[g][d / s] = V_FMA(v, w[g][kj], acc[g][d / s]);
    }
}

/* n outputs of row oh from ow0, ng lane groups (weights wb: [block][Cin][k][k][16], blocks
 * ws floats apart), into the tile; n, ng and the stride s constants where it is inlined */
TARGET __attribute__((always_inline)) static inline void
F(run_outputs)(const direct_job *j, const float *xp, const float *wb, int64_t ws, int64_t oh,
               int64_t ow0, int n, int ng, int s, float *tile)
{
    int64_t PH = j->H + 2 * j->pad, PW = j->W + 2 * j->pad, k = j->k;
    VEC acc[NG][RUN];
    F(acc_zero)(acc, n, ng);
    for (int64_t ci = 0; ci < j->Cin; ci++)
        for (int64_t ki = 0; ki < k; ki++) {
            const float *r = xp + (ci * PH + oh * s + ki) * PW + ow0 * s;
            const float *wv = wb + (ci * k + ki) * k * DIRECT_CO;
            for (int64_t kj = 0; kj < k; kj++) {
                VEC w[NG];
                for (int g = 0; g < ng; g++)
                    w[g] = V_LOAD(wv + gofs(g, ws) + kj * DIRECT_CO);
                for (int i = 0; i < n; i++) {
                    VEC v = V_SET1(r[i * s + kj]);
                    for (int g = 0; g < ng; g++)
                        acc[g][i] = V_FMA(v, w[g], acc[g][i]);
                }
            }
        }
    F(acc_store)(acc, n, ng, tile);
}

/* run_outputs for 3x3 kernels: for each input channel and kernel row, each lane group's
 * three weight vectors loaded once and each input value of the row broadcast once, then
 * multiplied into every output it reaches. An output's products still arrive in the
 * order (input channel, ki, kj), so its bits are run_outputs'. */
TARGET __attribute__((always_inline)) static inline void
F(run3_outputs)(const direct_job *j, const float *xp, const float *wb, int64_t ws, int64_t oh,
                int64_t ow0, int n, int ng, int s, float *tile)
{
    int64_t PH = j->H + 2 * j->pad, PW = j->W + 2 * j->pad;
    VEC acc[NG][RUN], w[NG][3];
    F(acc_zero)(acc, n, ng);
    for (int64_t ci = 0; ci < j->Cin; ci++)
        for (int64_t ki = 0; ki < 3; ki++) {
            const float *r = xp + (ci * PH + oh * s + ki) * PW + ow0 * s;
            F(row_weights)(w, wb + (ci * 3 + ki) * 3 * DIRECT_CO, ws, ng);
#pragma GCC unroll 24
            for (int x = 0; x < (n - 1) * s + 3; x++)
                F(reach)(V_SET1(r[x]), w, x, s, n, ng, acc);
        }
    F(acc_store)(acc, n, ng, tile);
}

/* run_N (and dx2_N below): a run of N outputs over nb blocks (nb * G lane groups: where a
 * set's BLOCKS is 1, always NG), the kernel's shape and stride made constants */
#define RUN_N(n)                                                                             \
    TARGET static void F(run_##n)(const direct_job *j, const float *xp, const float *wb,     \
                                  int64_t ws, int64_t oh, int64_t ow0, int nb, float *tile)  \
    {                                                                                        \
        int full = BLOCKS == 1 || nb == BLOCKS;                                              \
        if (j->k == 3 && j->s == 2 && full)                                                  \
            F(run3_outputs)(j, xp, wb, ws, oh, ow0, n, NG, 2, tile);                         \
        else if (j->k == 3 && j->s == 2)                                                     \
            F(run3_outputs)(j, xp, wb, ws, oh, ow0, n, G, 2, tile);                          \
        else if (j->k == 3 && full)                                                          \
            F(run3_outputs)(j, xp, wb, ws, oh, ow0, n, NG, 1, tile);                         \
        else if (j->k == 3)                                                                  \
            F(run3_outputs)(j, xp, wb, ws, oh, ow0, n, G, 1, tile);                          \
        else if (j->s == 2 && full)                                                          \
            F(run_outputs)(j, xp, wb, ws, oh, ow0, n, NG, 2, tile);                          \
        else if (j->s == 2)                                                                  \
            F(run_outputs)(j, xp, wb, ws, oh, ow0, n, G, 2, tile);                           \
        else if (full)                                                                       \
            F(run_outputs)(j, xp, wb, ws, oh, ow0, n, NG, 1, tile);                          \
        else                                                                                 \
            F(run_outputs)(j, xp, wb, ws, oh, ow0, n, G, 1, tile);                           \
    }

RUN_N(1) RUN_N(2) RUN_N(3) RUN_N(4)
#if RUN == 8
RUN_N(5) RUN_N(6) RUN_N(7) RUN_N(8)
#endif
#undef RUN_N

#if DX2
/* The input gradient of a 3x3 convolution of stride 2 and padding 1, without the zeros
 * a stride-1 product over dY dilated by 2 would multiply: output (h, w) of dx takes the
 * taps ki = 1 (h even) or ki = 0 and 2 (h odd), and likewise kj, from dY's row
 * (h + 1 - ki) / 2 and column (w + 1 - kj) / 2. xp is dY padded by 1 (rows and columns
 * -1 and OH, OW read as zeros); the weights are packed flipped (tap (2 - ki, 2 - kj)).
 * A run of n outputs starts at an even w0, so which kj reaches which output is known
 * when the run is compiled: dY's value at column w0 / 2 + t - 1 goes to output
 * i = 2 t - 3 + kj, which is reach's 2 t - 1 - m for the packed tap m = 2 - kj. */
TARGET __attribute__((always_inline)) static inline void
F(dx2_outputs)(const direct_job *j, const float *xp, const float *wb, int64_t ws, int64_t h,
               int64_t w0, int n, int ng, float *tile)
{
    int64_t PH = j->H + 2, PW = j->W + 2;
    VEC acc[NG][RUN], w[NG][3];
    F(acc_zero)(acc, n, ng);
    for (int64_t co = 0; co < j->Cin; co++)
        for (int64_t ki = h % 2 ? 0 : 1; ki < 3; ki += 2) {
            const float *r = xp + (co * PH + (h + 1 - ki) / 2 + 1) * PW + w0 / 2;
            /* w[m]: the packed tap (2 - ki, m), kj = 2 - m */
            F(row_weights)(w, wb + (co * 9 + (2 - ki) * 3) * DIRECT_CO, ws, ng);
#pragma GCC unroll 8
            for (int t = 1; t <= (n + 2) / 2; t++)
                F(reach)(V_SET1(r[t]), w, 2 * t - 1, 1, n, ng, acc);
        }
    F(acc_store)(acc, n, ng, tile);
}

#define DX2_N(n)                                                                             \
    TARGET static void F(dx2_##n)(const direct_job *j, const float *xp, const float *wb,     \
                                  int64_t ws, int64_t oh, int64_t ow0, int nb, float *tile)  \
    {                                                                                        \
        if (BLOCKS == 1 || nb == BLOCKS)                                                     \
            F(dx2_outputs)(j, xp, wb, ws, oh, ow0, n, NG, tile);                             \
        else                                                                                 \
            F(dx2_outputs)(j, xp, wb, ws, oh, ow0, n, G, tile);                              \
    }
DX2_N(1) DX2_N(2) DX2_N(3) DX2_N(4)
#if RUN == 8
DX2_N(5) DX2_N(6) DX2_N(7) DX2_N(8)
#endif
#undef DX2_N
#endif

/* part [Cin*9][16] += one image's sums for lane group lo (0, VL, ...) of channels ci0 ..
 * ci0 + nc (dyi: [OH*OW][16]); nc and the stride s constants where it is inlined */
TARGET __attribute__((always_inline)) static inline void
F(dw_taps)(const direct_job *j, const float *xp, const float *dyi, int64_t ci0, int nc, int s,
           int lo, float *part)
{
    int64_t PH = j->H + 2 * j->pad, PW = j->W + 2 * j->pad;
    VEC acc[DW_NC][9];
    for (int c = 0; c < nc; c++)
        for (int t = 0; t < 9; t++)
            acc[c][t] = V_ZERO();
    for (int64_t oh = 0; oh < j->OH; oh++) {
        const float *r[DW_NC][3];
        for (int c = 0; c < nc; c++)
            for (int ki = 0; ki < 3; ki++)
                r[c][ki] = xp + ((ci0 + c) * PH + oh * s + ki) * PW;
        for (int64_t ow = 0; ow < j->OW; ow++) {
            VEC v = V_LOAD(dyi + (oh * j->OW + ow) * DIRECT_CO + lo);
            for (int c = 0; c < nc; c++)
                for (int ki = 0; ki < 3; ki++)
                    for (int kj = 0; kj < 3; kj++)
                        acc[c][ki * 3 + kj] =
                            V_FMA(v, V_SET1(r[c][ki][ow * s + kj]), acc[c][ki * 3 + kj]);
        }
    }
    for (int c = 0; c < nc; c++)
        for (int t = 0; t < 9; t++) {
            float *p = part + ((ci0 + c) * 9 + t) * DIRECT_CO + lo;
            V_STORE(p, V_ADD(V_LOAD(p), acc[c][t]));
        }
}

/* channels ci0 and ci0 + 1 where both are (else ci0 alone), DW_NC at a time, each lane
 * group in turn */
TARGET static void F(dw_channels)(const direct_job *j, const float *xp, const float *dyi,
                                  int64_t ci0, float *part)
{
    int64_t end = j->Cin - ci0 >= 2 ? ci0 + 2 : ci0 + 1;
    for (int64_t c = ci0; c < end; c += DW_NC)
        for (int lo = 0; lo < DIRECT_CO; lo += VL) {
            if (j->s == 2 && end - c >= DW_NC)
                F(dw_taps)(j, xp, dyi, c, DW_NC, 2, lo, part);
            else if (j->s == 2)
                F(dw_taps)(j, xp, dyi, c, 1, 2, lo, part);
            else if (end - c >= DW_NC)
                F(dw_taps)(j, xp, dyi, c, DW_NC, 1, lo, part);
            else
                F(dw_taps)(j, xp, dyi, c, 1, 1, lo, part);
        }
}

static const direct_isa F(direct_isa) = {
    .runs = {NULL, F(run_1), F(run_2), F(run_3), F(run_4),
#if RUN == 8
             F(run_5), F(run_6), F(run_7), F(run_8)
#endif
    },
#if DX2
    .dx2_runs = {NULL, F(dx2_1), F(dx2_2), F(dx2_3), F(dx2_4),
#if RUN == 8
                 F(dx2_5), F(dx2_6), F(dx2_7), F(dx2_8)
#endif
    },
#endif
    .dw_channels = F(dw_channels),
    .run = RUN,
    .blocks = BLOCKS,
};

#undef G
#undef NG
#undef gofs
#undef tile_at
#undef F
#undef CAT
#undef CAT_
#undef ISA
#undef TARGET
#undef VEC
#undef VL
#undef RUN
#undef BLOCKS
#undef DW_NC
#undef DX2
#undef V_ZERO
#undef V_LOAD
#undef V_STORE
#undef V_SET1
#undef V_FMA
#undef V_ADD
