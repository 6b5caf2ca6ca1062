/*
** half.h -- the 16-bit storage dtypes (TC_F16, TC_BF16): conversions between
** their bits and f32, round to nearest even. Values are computed in f32 and
** rounded when stored (docs/NUMERICS.md), so these four functions are the
** whole of their arithmetic. The JIT builds the same integer steps
** (jit_cpu/emit.c, half_*); a conversion is exactly defined by IEEE 754, so
** any correct sequence gives the same bits, and tests/api/test_half.c checks
** these against the compiler's own _Float16 and a double-precision reference.
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

/* f32 -> f16 bits. |x| >= 65520 rounds to infinity; NaN becomes the quiet
** NaN 0x7e00 (sign kept); below 2^-14 the result is subnormal, rounded by
** one float addition that lines the f16 ulp up with the f32 ulp
** (F. Giesen's float_to_half_fast3_rtne). */
static inline uint16_t half_f16_from_f32(float x)
{
  uint32_t u = half_bits_of(x);
  uint32_t sign = u & 0x80000000u, a = u ^ sign;
  uint32_t big = a > 0x7f800000u ? 0x7e00u : 0x7c00u;   /* NaN : inf */
  /* subnormal: 2^-1 (f32 exponent 126) aligns bit 0 with f16's 2^-24 */
  uint32_t sub = half_bits_of(half_float_of(a) + half_float_of(126u << 23))
                 - (126u << 23);
  /* normal: rebias the exponent, round the 13 dropped bits to even */
  uint32_t nrm = (a + ((uint32_t)(15 - 127) << 23) + 0xfffu
                  + ((a >> 13) & 1u)) >> 13;
  uint32_t h = a >= (143u << 23) ? big : a < (113u << 23) ? sub : nrm;
  return (uint16_t)(h | sign >> 16);
}

/* f16 bits -> f32, exact. Subnormals are renormalized by one float
** subtraction; exponent 31 maps to f32's infinity/NaN exponent. */
static inline float half_f32_from_f16(uint16_t h)
{
  uint32_t o = (uint32_t)(h & 0x7fffu) << 13;
  uint32_t e = o & (0x7c00u << 13);
  o += (uint32_t)(127 - 15) << 23;
  uint32_t inf = o + ((uint32_t)(128 - 16) << 23);
  uint32_t sub = half_bits_of(half_float_of(o + (1u << 23))
                              - half_float_of(113u << 23));
  o = e == (0x7c00u << 13) ? inf : e == 0 ? sub : o;
  return half_float_of(o | (uint32_t)(h & 0x8000u) << 16);
}

/* f32 -> bf16 bits: the top half, rounded to even; NaN stays a quiet NaN. */
static inline uint16_t half_bf16_from_f32(float x)
{
  uint32_t u = half_bits_of(x);
  uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  uint32_t q = (u >> 16) | 0x40u;
  return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? q : r);
}

static inline float half_f32_from_bf16(uint16_t h)
{
  return half_float_of((uint32_t)h << 16);
}

#endif
