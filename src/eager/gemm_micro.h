/*
** gemm_micro.h -- the x86 micro-kernels of gemm.c, a template: gemm.c
** includes it once per (dtype, ISA) with the MK_* macros below defined, and
** gets four functions, each compiled for that ISA by a target attribute
** (chosen at run time, so one build serves AVX2 and AVX-512 machines).
**
** A micro-kernel computes an H x NR tile of C from a packed slice of A
** (H rows x kc) and a packed micro-panel of B (kc x NR, NR contiguous per
** step): every element is the chain s = fma(a[i][p], b[p][j], s), p in
** order, starting from +0 (first) or from C's value, so any blocking of k
** and any ISA give the same bits (gemm.h). NR = NV vectors; the H x NV
** accumulators live in registers (14 x 2 zmm of 32, or 6 x 2 ymm of 16).
**
** Defined by the includer: GEMM_T, MK_SFX (name suffix), MK_TARGET (target
** attribute string), MK_VL (lanes), MK_MR, MK_NR, MK_V (vector type) and
** the operations MK_LOADU, MK_LOAD (aligned), MK_STORE (aligned), MK_STOREU,
** MK_SET1, MK_ZERO, MK_FMA(a, b, c) = a * b + c rounded once; GEMM_KCP (the
** row stride of a row-panel A slice) and GEMM_PD (B prefetch distance).
*/

#define MK(name) CAT(CAT(name, _), MK_SFX)
#define MK_NV (MK_NR / MK_VL)
#define MK_ATTR __attribute__((target(MK_TARGET)))

_Static_assert(MK_NR % MK_VL == 0, "NR is whole vectors");

/* The kernel for H rows (a constant once inlined). A's element (i, p) is
** at a[i * ars + p * acs]: a row panel (ars = KCP, acs = 1) or a column
** panel (ars = 1, acs = MR). With bsrc, the B micro-panel is read from
** op(B) itself (rows ldb apart) and packed into bout on the way, so the
** first pass over a panel overlaps its load from memory with arithmetic;
** else it is read packed from b (64-byte aligned). */
static inline __attribute__((always_inline)) MK_ATTR void
MK(body)(const int H, const int64_t ars, const int64_t acs, int64_t kc,
         const GEMM_T *restrict a, const GEMM_T *restrict b,
         GEMM_T *restrict c, int64_t ldc, bool first,
         const GEMM_T *restrict bsrc, int64_t ldb, GEMM_T *restrict bout)
{
  MK_V acc[MK_MR][MK_NV];
#pragma GCC unroll 16
  for (int i = 0; i < H; i++)
#pragma GCC unroll 4
    for (int v = 0; v < MK_NV; v++)
      acc[i][v] = first ? MK_ZERO() : MK_LOADU(c + i * ldc + v * MK_VL);

#if MK_MR < 8                   /* 6 x 16 ymm: less loop overhead, +1-2% */
#pragma GCC unroll 4
#endif
  for (int64_t p = 0; p < kc; p++) {
    MK_V bv[MK_NV];
    if (bsrc) {
#pragma GCC unroll 4
      for (int v = 0; v < MK_NV; v++) {
        bv[v] = MK_LOADU(bsrc + v * MK_VL);
        MK_STORE(bout + v * MK_VL, bv[v]);
      }
      const char *ahead = (const char *)(bsrc + GEMM_PD * ldb);
#pragma GCC unroll 4
      for (int l = 0; l < (int)(MK_NR * sizeof(GEMM_T)); l += 64)
        __builtin_prefetch(ahead + l, 0, 3);
      bsrc += ldb;
      bout += MK_NR;
    } else {
#pragma GCC unroll 4
      for (int v = 0; v < MK_NV; v++)
        bv[v] = MK_LOAD(b + v * MK_VL);
      b += MK_NR;
    }
#pragma GCC unroll 16
    for (int i = 0; i < H; i++) {
      MK_V ai = MK_SET1(a[i * ars]);
#pragma GCC unroll 4
      for (int v = 0; v < MK_NV; v++)
        acc[i][v] = MK_FMA(ai, bv[v], acc[i][v]);
    }
    a += acs;
  }

#pragma GCC unroll 16
  for (int i = 0; i < H; i++)
#pragma GCC unroll 4
    for (int v = 0; v < MK_NV; v++)
      MK_STOREU(c + i * ldc + v * MK_VL, acc[i][v]);
}

/* The heights a tile can have: MR, then halves down to 1 (gemm.c splits
** a short panel into these), each its own unrolled copy. */
#define MK_CASES(ARS, ACS, BSRC, LDB, BOUT)                                  \
  switch (h) {                                                               \
  case MK_MR:                                                                \
    MK(body)(MK_MR, ARS, ACS, kc, a, b, c, ldc, first, BSRC, LDB, BOUT);     \
    break;                                                                   \
  MK_CASE_8(ARS, ACS, BSRC, LDB, BOUT)                                       \
  case 4:                                                                    \
    MK(body)(4, ARS, ACS, kc, a, b, c, ldc, first, BSRC, LDB, BOUT);         \
    break;                                                                   \
  case 2:                                                                    \
    MK(body)(2, ARS, ACS, kc, a, b, c, ldc, first, BSRC, LDB, BOUT);         \
    break;                                                                   \
  default:                                                                   \
    MK(body)(1, ARS, ACS, kc, a, b, c, ldc, first, BSRC, LDB, BOUT);         \
    break;                                                                   \
  }
#if MK_MR > 8
#define MK_CASE_8(ARS, ACS, BSRC, LDB, BOUT)                                 \
  case 8:                                                                    \
    MK(body)(8, ARS, ACS, kc, a, b, c, ldc, first, BSRC, LDB, BOUT);         \
    break;
#else
#define MK_CASE_8(ARS, ACS, BSRC, LDB, BOUT)
#endif

/* Row-panel A (not transposed), packed B; h is one of the heights. */
static MK_ATTR void MK(micro_rp)(int h, int64_t kc, const GEMM_T *a,
                                 const GEMM_T *b, GEMM_T *c, int64_t ldc,
                                 bool first)
{
  MK_CASES(GEMM_KCP, 1, NULL, 0, NULL)
}

/* Column-panel A (transposed), packed B. */
static MK_ATTR void MK(micro_cp)(int h, int64_t kc, const GEMM_T *a,
                                 const GEMM_T *b, GEMM_T *c, int64_t ldc,
                                 bool first)
{
  MK_CASES(1, MK_MR, NULL, 0, NULL)
}

/* Full-height tiles that also pack their B micro-panel from op(B). */
static MK_ATTR void MK(micro_rp_pack)(int64_t kc, const GEMM_T *a, GEMM_T *c,
                                      int64_t ldc, bool first,
                                      const GEMM_T *bsrc, int64_t ldb,
                                      GEMM_T *bout)
{
  MK(body)(MK_MR, GEMM_KCP, 1, kc, a, NULL, c, ldc, first, bsrc, ldb, bout);
}

static MK_ATTR void MK(micro_cp_pack)(int64_t kc, const GEMM_T *a, GEMM_T *c,
                                      int64_t ldc, bool first,
                                      const GEMM_T *bsrc, int64_t ldb,
                                      GEMM_T *bout)
{
  MK(body)(MK_MR, 1, MK_MR, kc, a, NULL, c, ldc, first, bsrc, ldb, bout);
}

#undef MK_CASES
#undef MK_CASE_8
#undef MK
#undef MK_NV
#undef MK_ATTR
#undef MK_SFX
#undef MK_TARGET
#undef MK_VL
#undef MK_MR
#undef MK_NR
#undef MK_V
#undef MK_LOADU
#undef MK_LOAD
#undef MK_STORE
#undef MK_STOREU
#undef MK_SET1
#undef MK_ZERO
#undef MK_FMA
