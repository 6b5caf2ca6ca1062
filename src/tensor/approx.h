/*
** approx.h -- the project's own transcendentals (exp, log, tanh, sigmoid, gelu, expm1, log1p,
** erf, sin, cos, pow) for f32 and f64, built only from + - * /, selects, bit casts and integer
** ops, so they vectorize.  Each function is written once, in approx_body.h, in a small
** dialect-neutral notation (A_F, A_ADD, A_SEL, ...) that this file expands as C, once per
** precision, and src/jit_cpu/approx_jit.c expands as libgccjit builder calls: eager kernels,
** compiled kernels and CUDA kernels (src/jit_cuda embeds this file's text, approx_body.h
** inlined at its includes) run one sequence of operations by construction, so they agree
** bitwise.
*/
#ifndef TC_APPROX_H
#define TC_APPROX_H

/* NVRTC has no libc headers: src/jit_cuda renders this file as CUDA C after a
** prelude that supplies these names (jcuda_prelude in render.c). */
#ifndef __CUDACC_RTC__
#include <math.h>   /* NAN, INFINITY only */
#include <stdint.h>
#include <string.h>
#endif

/*
** Rules every function here follows (see docs/NUMERICS.md for the measured accuracy):
** - straight-line code in a fixed order: no libm, no value-dependent branches or loops
**   (c ? a : b selects only); a fused multiply-add only where written (approx_fma_*), never
**   by contraction (the project builds with -ffp-contract=off);
** - rounding to an integer is the magic-number trick (x + 1.5*2^p) - 1.5*2^p, whose sum
**   also carries the integer in its low mantissa bits, so no float->int conversion is needed
**   (int64 conversions do not vectorize on AVX2, and NaN/huge conversions would be UB);
** - integer work is on uint32_t/uint64_t (wrap-around, logical shifts: no UB, and AVX2 has
**   no 64-bit arithmetic shift);
** - 2^n scaling is done as two multiplications so results may round once into denormals.
** Polynomial coefficients come from tools/approx_fit.py (Remez, minimax relative error).
*/

/* -- Bit casts ------------------------------------------------------------ */

static inline uint32_t approx_bits_f32(float x) { uint32_t u; memcpy(&u, &x, sizeof u); return u; }
static inline float approx_from_bits_f32(uint32_t u) { float x; memcpy(&x, &u, sizeof x); return x; }
static inline uint64_t approx_bits_f64(double x) { uint64_t u; memcpy(&u, &x, sizeof u); return u; }
static inline double approx_from_bits_f64(uint64_t u) { double x; memcpy(&x, &u, sizeof x); return x; }

/* -- Fused multiply-add ------------------------------------------------------ */

/* a*b + c: every polynomial step and range-reduction step below.  Where the build targets
** FMA hardware this is one fused operation with one rounding (a little more accurate, and
** about 30% faster for exp and tanh on AVX2, whose multiply pipes are the bottleneck);
** elsewhere it is a multiply and an add, so such a build still vectorizes instead of
** calling libm's fma per element.  APPROX_FMA tells src/jit_cpu which of the two the eager
** build uses; compiled kernels make the same choice, so results agree bitwise.  An includer
** may define it first: src/jit_cuda's CUDA C defines it as the host build's value. */
#ifndef APPROX_FMA
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
#define APPROX_FMA 1
#else
#define APPROX_FMA 0
#endif
#endif
#if APPROX_FMA
static inline float approx_fma_f32(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
static inline double approx_fma_f64(double a, double b, double c) { return __builtin_fma(a, b, c); }
#else
static inline float approx_fma_f32(float a, float b, float c) { return a * b + c; }
static inline double approx_fma_f64(double a, double b, double c) { return a * b + c; }
#endif

/* -- Shared constants ------------------------------------------------------- */

/* Adding 1.5*2^23 (2^52) rounds |z| < 2^22 (2^51) to an integer n and leaves
** bits(sum) == bits(magic) + n. */
#define APPROX_F32_RND      0x1.8p23f
#define APPROX_F32_RND_BITS 0x4b400000u
#define APPROX_F64_RND      0x1.8p52
#define APPROX_F64_RND_BITS 0x4338000000000000u

#define APPROX_F32_SIGN 0x80000000u
#define APPROX_F64_SIGN 0x8000000000000000u

#define APPROX_F32_LOG2E 0x1.715476p+0f
#define APPROX_F64_LOG2E 0x1.71547652b82fep+0
#define APPROX_F32_LN2   0x1.62e430p-1f
#define APPROX_F64_LN2   0x1.62e42fefa39efp-1
/* ln2 = HI + LO with HI short enough that n*HI is exact (|n| < 2^8 f32, 2^11 f64). */
#define APPROX_F32_LN2_HI 0x1.62e4p-1f
#define APPROX_F32_LN2_LO 0x1.7f7d1cp-20f
#define APPROX_F64_LN2_HI 0x1.62e42fefa38p-1
#define APPROX_F64_LN2_LO 0x1.ef35793c7673p-45

/* e^r = 1 + r + r^2 E(r) for |r| <= ln2/2 (relative error 2^-27.0 f32, 2^-56.2 f64). */
#define APPROX_F32_EXP_E0 0x1.fffffep-2f
#define APPROX_F32_EXP_E1 0x1.5554e0p-3f
#define APPROX_F32_EXP_E2 0x1.5557b6p-5f
#define APPROX_F32_EXP_E3 0x1.1208c6p-7f
#define APPROX_F32_EXP_E4 0x1.6a55e4p-10f
#define APPROX_F64_EXP_E0 0x1.0000000000001p-1
#define APPROX_F64_EXP_E1 0x1.5555555555538p-3
#define APPROX_F64_EXP_E2 0x1.5555555553e3fp-5
#define APPROX_F64_EXP_E3 0x1.111111111db6fp-7
#define APPROX_F64_EXP_E4 0x1.6c16c17843d3ap-10
#define APPROX_F64_EXP_E5 0x1.a01a01452688bp-13
#define APPROX_F64_EXP_E6 0x1.a019b9fe72d8ap-16
#define APPROX_F64_EXP_E7 0x1.71df2023fe18cp-19
#define APPROX_F64_EXP_E8 0x1.289088e5e95e6p-22
#define APPROX_F64_EXP_E9 0x1.ad3bca40a4f2fp-26

/* log(1+f) = 2 atanh(s), s = f/(2+f): 2atanh(s) - 2s = s z G(z), z = s^2 <= 0.0295. */
#define APPROX_F32_LOG_G0 0x1.555556p-1f
#define APPROX_F32_LOG_G1 0x1.9999ecp-2f
#define APPROX_F32_LOG_G2 0x1.245c34p-2f
#define APPROX_F32_LOG_G3 0x1.ddd19ap-3f
#define APPROX_F64_LOG_G0 0x1.5555555555558p-1
#define APPROX_F64_LOG_G1 0x1.99999999952a7p-2
#define APPROX_F64_LOG_G2 0x1.2492492df7074p-2
#define APPROX_F64_LOG_G3 0x1.c71c62defc55cp-3
#define APPROX_F64_LOG_G4 0x1.7462b656802afp-3
#define APPROX_F64_LOG_G5 0x1.39fe2df14938dp-3
#define APPROX_F64_LOG_G6 0x1.2b5a86727152cp-3
/* bits(1.0) - bits(sqrt(1/2)): moves the mantissa split point to sqrt(1/2). */
#define APPROX_F32_SQRTH_BITS 0x3f3504f3u
#define APPROX_F64_SQRTH_BITS 0x3fe6a09e667f3bcdu

/* GELU: z = -2u = x (C1 + C3 x^2), see approx_gelu in approx_body.h. */
#define APPROX_F32_GELU_C1 -0x1.988454p+0f          /* -2 sqrt(2/pi) */
#define APPROX_F32_GELU_C3 -0x1.2444f2p-4f          /* -2 sqrt(2/pi) 0.044715 */
#define APPROX_F64_GELU_C1 -0x1.9884533d43651p+0
#define APPROX_F64_GELU_C3 -0x1.2444f2a4d8b4bp-4

/* erf: |x| < 1: x + x Q(x^2); |x| >= 1: 1 - e^(L(|x|) - x^2), |x| clamped at XMAX (see
** approx_erf in approx_body.h; tools/approx_fit.py erf). */
#define APPROX_F32_ERF_Q0 0x1.06eba8p-3f
#define APPROX_F32_ERF_Q1 -0x1.81273ep-2f
#define APPROX_F32_ERF_Q2 0x1.ce2cf8p-4f
#define APPROX_F32_ERF_Q3 -0x1.b7f90cp-6f
#define APPROX_F32_ERF_Q4 0x1.5405b2p-8f
#define APPROX_F32_ERF_Q5 -0x1.a3f6fep-11f
#define APPROX_F32_ERF_Q6 0x1.496a3p-14f
#define APPROX_F32_ERF_L0 -0x1.72e6e6p-12f
#define APPROX_F32_ERF_L1 -0x1.2085b2p+0f
#define APPROX_F32_ERF_L2 0x1.7274f8p-2f
#define APPROX_F32_ERF_L3 -0x1.a60a82p-4f
#define APPROX_F32_ERF_L4 0x1.654222p-6f
#define APPROX_F32_ERF_L5 -0x1.814cdap-9f
#define APPROX_F32_ERF_L6 0x1.852d48p-13f
#define APPROX_F32_ERF_XMAX 4.0f
#define APPROX_F64_ERF_Q0 0x1.06eba8214db68p-3
#define APPROX_F64_ERF_Q1 -0x1.812746b0379bdp-2
#define APPROX_F64_ERF_Q2 0x1.ce2f21a040d16p-4
#define APPROX_F64_ERF_Q3 -0x1.b82ce311fa94p-6
#define APPROX_F64_ERF_Q4 0x1.565bccf92b34ap-8
#define APPROX_F64_ERF_Q5 -0x1.c02db03dd7cd4p-11
#define APPROX_F64_ERF_Q6 0x1.f9a2baa90db6ap-14
#define APPROX_F64_ERF_Q7 -0x1.f4ca4d700c6bcp-17
#define APPROX_F64_ERF_Q8 0x1.b97fd3e0c1a68p-20
#define APPROX_F64_ERF_Q9 -0x1.5c07271808db3p-23
#define APPROX_F64_ERF_Q10 0x1.d71b1012fd084p-27
#define APPROX_F64_ERF_Q11 -0x1.abae4bb6f5827p-31
#define APPROX_F64_ERF_L0 -0x1.138773a2746adp-21
#define APPROX_F64_ERF_L1 -0x1.20dd1e3144b98p+0
#define APPROX_F64_ERF_L2 0x1.741394c6e6823p-2
#define APPROX_F64_ERF_L3 -0x1.a4ab28fac4582p-4
#define APPROX_F64_ERF_L4 0x1.3719a69451191p-6
#define APPROX_F64_ERF_L5 0x1.b19d22407b04bp-12
#define APPROX_F64_ERF_L6 -0x1.f709851e9083dp-10
#define APPROX_F64_ERF_L7 0x1.954ad932d91f5p-11
#define APPROX_F64_ERF_L8 -0x1.1e5cbca7130c8p-13
#define APPROX_F64_ERF_L9 -0x1.479b71edc60bbp-16
#define APPROX_F64_ERF_L10 0x1.7a11010bc4f3bp-16
#define APPROX_F64_ERF_L11 -0x1.1fdf9c2eed73ap-17
#define APPROX_F64_ERF_L12 0x1.1bdc470e0ae9bp-19
#define APPROX_F64_ERF_L13 -0x1.8cd7af2af2bcbp-22
#define APPROX_F64_ERF_L14 0x1.8a96f3497a876p-25
#define APPROX_F64_ERF_L15 -0x1.0b56ce6df9be1p-28
#define APPROX_F64_ERF_L16 0x1.bc5033617a669p-33
#define APPROX_F64_ERF_L17 -0x1.566172ec5c6dfp-38
#define APPROX_F64_ERF_XMAX 6.0

/* sin r = r + r^3 S(r^2), cos r = 1 - r^2/2 + r^4 C(r^2), |r| <= pi/4 (abs error of S
** 2^-35 / C 2^-38.6 for f32, 2^-66 / 2^-70 for f64). */
#define APPROX_F32_SIN_S0 -0x1.555556p-3f
#define APPROX_F32_SIN_S1 0x1.11110ep-7f
#define APPROX_F32_SIN_S2 -0x1.a013a2p-13f
#define APPROX_F32_SIN_S3 0x1.6dbc30p-19f
#define APPROX_F32_COS_C0 0x1.555556p-5f
#define APPROX_F32_COS_C1 -0x1.6c16c0p-10f
#define APPROX_F32_COS_C2 0x1.a015c0p-16f
#define APPROX_F32_COS_C3 -0x1.25230ep-22f
#define APPROX_F64_SIN_S0 -0x1.5555555555555p-3
#define APPROX_F64_SIN_S1 0x1.1111111111110p-7
#define APPROX_F64_SIN_S2 -0x1.a01a01a019927p-13
#define APPROX_F64_SIN_S3 0x1.71de3a545e87cp-19
#define APPROX_F64_SIN_S4 -0x1.ae64540f30bbfp-26
#define APPROX_F64_SIN_S5 0x1.61217c3312c35p-33
#define APPROX_F64_SIN_S6 -0x1.ab1625bb227b7p-41
#define APPROX_F64_COS_C0 0x1.5555555555555p-5
#define APPROX_F64_COS_C1 -0x1.6c16c16c16c16p-10
#define APPROX_F64_COS_C2 0x1.a01a01a019d03p-16
#define APPROX_F64_COS_C3 -0x1.27e4fb7711eb6p-22
#define APPROX_F64_COS_C4 0x1.1eed8de9fe4d9p-29
#define APPROX_F64_COS_C5 -0x1.9394b7827a414p-37
#define APPROX_F64_COS_C6 0x1.ab76daf2efd33p-45

/* pi/2 split so that k*PIO2_i is exact for k < 2^13 (f32: 11-bit parts, total 2^-78
** error) or k < 2^20 (f64: 33-bit parts, 2^-160), i.e. |x| < 12867 or 1.647e6.  Beyond,
** the products round and the result is sin/cos of a point a few ulp(x) from x; past
** |2x/pi| = 2^22 (2^51) the rounding of k fails and the value is meaningless. */
#define APPROX_F32_2_PI   0x1.45f306p-1f
#define APPROX_F32_PIO2_1 0x1.92p+0f
#define APPROX_F32_PIO2_2 0x1.fb4p-12f
#define APPROX_F32_PIO2_3 0x1.444p-24f
#define APPROX_F32_PIO2_4 0x1.68cp-39f
#define APPROX_F32_PIO2_5 0x1.1a6264p-54f
#define APPROX_F64_2_PI   0x1.45f306dc9c883p-1
#define APPROX_F64_PIO2_1 0x1.921fb544p+0
#define APPROX_F64_PIO2_2 0x1.0b4611a6p-34
#define APPROX_F64_PIO2_3 0x1.3198a2ep-69
#define APPROX_F64_PIO2_4 0x1.b839a252049c1p-104
/* |r| bound for huge |x| where reduction fails: keeps the result finite, in [-1, 1]. */
#define APPROX_F32_SINCOS_RMAX 0.8f
#define APPROX_F64_SINCOS_RMAX 0.8

/* -- The functions, written once -------------------------------------------------- */

/* The C dialect of approx_body.h's notation: a value is a C variable of the precision's
** float (A_F) or unsigned (A_U) type, a DSL function a static inline function named
** approx_<name>_f32 / _f64, an out-parameter a pointer. */
#define A_FN(n, ...)   static inline A_PICK(float, double) A_NAME(n)(__VA_ARGS__)
#define A_NAME(n)      A_PICK(approx_##n##_f32, approx_##n##_f64)
#define A_X(x)         A_PICK(float, double) x
#define A_XU(x)        A_PICK(uint32_t, uint64_t) x
#define A_OUT(x)       A_PICK(float, double) *x
#define A_DECL(x)      A_PICK(float, double) x
#define A_F(n, e)      A_PICK(float, double) n = (e)
#define A_U(n, e)      A_PICK(uint32_t, uint64_t) n = (e)
#define A_SET(n, e)    n = (e)
#define A_RET(e)       return (e)
#define A_CALL(n, ...) A_NAME(n)(__VA_ARGS__)
#define A_K(v)         ((A_PICK(float, double))(v))
#define A_KU(v)        ((A_PICK(uint32_t, uint64_t))(v))
#define A_BITS(x)      A_PICK(approx_bits_f32, approx_bits_f64)(x)
#define A_FLOAT(u)     A_PICK(approx_from_bits_f32, approx_from_bits_f64)(u)
#define A_FMA(a, b, c) A_PICK(approx_fma_f32, approx_fma_f64)(a, b, c)
#define A_NEG(a)       (-(a))
#define A_ADD(a, b)    ((a) + (b))
#define A_SUB(a, b)    ((a) - (b))
#define A_MUL(a, b)    ((a) * (b))
#define A_DIV(a, b)    ((a) / (b))
#define A_AND(a, b)    ((a) & (b))
#define A_OR(a, b)     ((a) | (b))
#define A_SHL(a, n)    ((a) << (n))
#define A_SHR(a, n)    ((a) >> (n))
#define A_LT(a, b)     ((a) < (b))
#define A_GT(a, b)     ((a) > (b))
#define A_GE(a, b)     ((a) >= (b))
#define A_EQ(a, b)     ((a) == (b))
#define A_NE(a, b)     ((a) != (b))
#define A_SEL(c, a, b) ((c) ? (a) : (b))

/* A CUDA kernel's text leaves out a precision none of its instructions
** computes in (APPROX_OMIT_F32, APPROX_OMIT_F64; render.c): NVRTC parses and
** optimizes every function it is given, used or not. */
#ifndef APPROX_OMIT_F32
#define APPROX_BITS 32
#include "approx_body.h"
#undef APPROX_BITS
#endif
#ifndef APPROX_OMIT_F64
#define APPROX_BITS 64
#include "approx_body.h"
#undef APPROX_BITS
#endif

#undef A_FN
#undef A_NAME
#undef A_X
#undef A_XU
#undef A_OUT
#undef A_DECL
#undef A_F
#undef A_U
#undef A_SET
#undef A_RET
#undef A_CALL
#undef A_K
#undef A_KU
#undef A_BITS
#undef A_FLOAT
#undef A_FMA
#undef A_NEG
#undef A_ADD
#undef A_SUB
#undef A_MUL
#undef A_DIV
#undef A_AND
#undef A_OR
#undef A_SHL
#undef A_SHR
#undef A_LT
#undef A_GT
#undef A_GE
#undef A_EQ
#undef A_NE
#undef A_SEL

/* -- Type-generic wrappers ------------------------------------------------------ */

#define APPROX_EXP(x)     _Generic((x), float: approx_exp_f32, double: approx_exp_f64)(x)
#define APPROX_LOG(x)     _Generic((x), float: approx_log_f32, double: approx_log_f64)(x)
#define APPROX_TANH(x)    _Generic((x), float: approx_tanh_f32, double: approx_tanh_f64)(x)
#define APPROX_SIGMOID(x) _Generic((x), float: approx_sigmoid_f32, double: approx_sigmoid_f64)(x)
#define APPROX_GELU(x)    _Generic((x), float: approx_gelu_f32, double: approx_gelu_f64)(x)
#define APPROX_SIN(x)     _Generic((x), float: approx_sin_f32, double: approx_sin_f64)(x)
#define APPROX_COS(x)     _Generic((x), float: approx_cos_f32, double: approx_cos_f64)(x)
#define APPROX_POW(a, b)  _Generic((a), float: approx_pow_f32, double: approx_pow_f64)(a, b)
#define APPROX_EXPM1(x)   _Generic((x), float: approx_expm1_f32, double: approx_expm1_f64)(x)
#define APPROX_LOG1P(x)   _Generic((x), float: approx_log1p_f32, double: approx_log1p_f64)(x)
#define APPROX_ERF(x)     _Generic((x), float: approx_erf_f32, double: approx_erf_f64)(x)

#endif /* TC_APPROX_H */
