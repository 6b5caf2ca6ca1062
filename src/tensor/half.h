/*
** half.h -- the 16-bit storage dtypes (TC_F16, TC_BF16): conversions between
** their bits and f32, round to nearest even. Values are computed in f32 and
** rounded when stored (docs/NUMERICS.md), so these four conversions are the
** whole of their arithmetic. Each is written once, as a body expanded both
** as C here and as libgccjit calls by jit_cpu/emit.c; tests/api/test_half.c
** checks them against the compiler's own _Float16 and a double-precision
** reference.
** Branch-free (selects), so loops over them vectorize.
*/
#ifndef TC_HALF_H
#define TC_HALF_H

/* NVRTC has no libc headers: src/jit_cuda renders this file as CUDA C after
** a prelude that declares what it uses (as for approx.h). */
#ifndef __CUDACC_RTC__
#include <stdint.h>
#include <string.h>
#endif

static inline uint32_t half_bits_of(float x)
{
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

static inline float half_float_of(uint32_t u)
{
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* -- The conversions, written once ------------------------------------------
** Each body below is expanded twice: as C by the functions at the end of
** this file (dialect HC), and as libgccjit builder calls by jit_cpu/emit.c
** (dialect HJ), so eager and compiled code run one sequence by
** construction. A body spells every operation D##_OP for its dialect D and
** declares each value with D##_U (a uint32_t) or D##_F (a float); ADD and
** SUB take the type of their operands, BITS and FLOAT are bit casts, SEL
** is a select of two computed values. */

/* f32 x -> f16 bits (in a u32) out. |x| >= 65520 rounds to infinity; NaN
** becomes the quiet NaN 0x7e00 (sign kept); below 2^-14 the result is
** subnormal, rounded by one float addition that lines the f16 ulp up with
** the f32 ulp (F. Giesen's float_to_half_fast3_rtne); normal results
** rebias the exponent and round the 13 dropped bits to even. */
#define HALF_F16_FROM_F32(D, x, out)                                         \
  D##_U(u_, D##_BITS(x));                                                    \
  D##_U(sign_, D##_AND(u_, D##_K(0x80000000u)));                             \
  D##_U(a_, D##_XOR(u_, sign_));                                             \
  D##_U(big_, D##_SEL(D##_GT(a_, D##_K(0x7f800000u)), D##_K(0x7e00u),        \
                      D##_K(0x7c00u)));              /* NaN : inf */          \
  D##_F(sum_, D##_ADD(D##_FLOAT(a_), D##_FLOAT(D##_K(126u << 23))));         \
  D##_U(sub_, D##_SUB(D##_BITS(sum_), D##_K(126u << 23)));                   \
  D##_U(nrm_, D##_SHR(D##_ADD(D##_ADD(a_, D##_K(0xc8000fffu)),               \
                              D##_AND(D##_SHR(a_, 13), D##_K(1u))), 13));    \
  D##_U(h_, D##_SEL(D##_GE(a_, D##_K(143u << 23)), big_,                     \
                    D##_SEL(D##_LT(a_, D##_K(113u << 23)), sub_, nrm_)));    \
  D##_U(out, D##_OR(h_, D##_SHR(sign_, 16)))
/* 0xc8000fff is ((15 - 127) << 23) + 0xfff, modulo 2^32. */

/* f16 bits h (in a u32) -> f32 out, exact. Subnormals are renormalized by
** one float subtraction; exponent 31 maps to f32's infinity/NaN exponent. */
#define HALF_F32_FROM_F16(D, h, out)                                         \
  D##_U(o_, D##_ADD(D##_SHL(D##_AND(h, D##_K(0x7fffu)), 13),                 \
                    D##_K((127u - 15u) << 23)));                             \
  D##_U(e_, D##_AND(D##_SHL(h, 13), D##_K(0x7c00u << 13)));                  \
  D##_U(inf_, D##_ADD(o_, D##_K((128u - 16u) << 23)));                       \
  D##_F(dif_, D##_SUB(D##_FLOAT(D##_ADD(o_, D##_K(1u << 23))),               \
                      D##_FLOAT(D##_K(113u << 23))));                        \
  D##_U(r_, D##_SEL(D##_EQ(e_, D##_K(0x7c00u << 13)), inf_,                  \
                    D##_SEL(D##_EQ(e_, D##_K(0u)), D##_BITS(dif_), o_)));    \
  D##_F(out, D##_FLOAT(D##_OR(r_, D##_SHL(D##_AND(h, D##_K(0x8000u)), 16))))

/* f32 x -> bf16 bits (in a u32) out: the top half, rounded to even; NaN
** stays a quiet NaN. */
#define HALF_BF16_FROM_F32(D, x, out)                                        \
  D##_U(b_, D##_BITS(x));                                                    \
  D##_U(rnd_, D##_SHR(D##_ADD(D##_ADD(b_, D##_K(0x7fffu)),                   \
                              D##_AND(D##_SHR(b_, 16), D##_K(1u))), 16));    \
  D##_U(qn_, D##_OR(D##_SHR(b_, 16), D##_K(0x40u)));                         \
  D##_U(out, D##_SEL(D##_GT(D##_AND(b_, D##_K(0x7fffffffu)),                 \
                            D##_K(0x7f800000u)), qn_, rnd_))

/* bf16 bits h (in a u32) -> f32 out, exact. */
#define HALF_F32_FROM_BF16(D, h, out) D##_F(out, D##_FLOAT(D##_SHL(h, 16)))

/* -- The C dialect ------------------------------------------------------------ */

#define HC_U(name, e)   uint32_t name = (e)
#define HC_F(name, e)   float name = (e)
#define HC_K(v)         ((uint32_t)(v))
#define HC_BITS(x)      half_bits_of(x)
#define HC_FLOAT(u)     half_float_of(u)
#define HC_ADD(a, b)    ((a) + (b))
#define HC_SUB(a, b)    ((a) - (b))
#define HC_AND(a, b)    ((a) & (b))
#define HC_OR(a, b)     ((a) | (b))
#define HC_XOR(a, b)    ((a) ^ (b))
#define HC_SHL(a, n)    ((a) << (n))
#define HC_SHR(a, n)    ((a) >> (n))
#define HC_GT(a, b)     ((a) > (b))
#define HC_GE(a, b)     ((a) >= (b))
#define HC_LT(a, b)     ((a) < (b))
#define HC_EQ(a, b)     ((a) == (b))
#define HC_SEL(c, a, b) ((c) ? (a) : (b))

static inline uint16_t half_f16_from_f32(float x)
{
  HALF_F16_FROM_F32(HC, x, r);
  return (uint16_t)r;
}

static inline float half_f32_from_f16(uint16_t h)
{
  HALF_F32_FROM_F16(HC, (uint32_t)h, r);
  return r;
}

static inline uint16_t half_bf16_from_f32(float x)
{
  HALF_BF16_FROM_F32(HC, x, r);
  return (uint16_t)r;
}

static inline float half_f32_from_bf16(uint16_t h)
{
  HALF_F32_FROM_BF16(HC, (uint32_t)h, r);
  return r;
}

#endif
