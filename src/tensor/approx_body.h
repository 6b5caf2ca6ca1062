/*
** approx_body.h -- the transcendentals of approx.h, written once.  No include guard: it is
** included once per precision (APPROX_BITS 32 or 64) by each dialect: as C by approx.h
** (eager kernels; src/jit_cuda's CUDA C, which embeds approx.h with this file inlined) and
** as libgccjit builder calls by src/jit_cpu/approx_jit.c.  So eager, compiled and CUDA code
** run one sequence of operations, in one order, with one set of constants, by construction.
**
** The notation (each includer defines the dialect, this file the precision):
**   A_FN(name, A_X(x), A_XU(u), A_OUT(o))  a function of floats x, unsigneds u and a float
**                          out-parameter o (a pointer in both dialects: written `*o = v`,
**                          passed `&v` after A_DECL(v)); called as A_CALL(name, args...);
**                          C names it approx_<name>_f32 / _f64
**   A_F(v, e), A_U(v, e)   declares the float / unsigned (uint32_t or uint64_t) value v;
**                          A_SET(v, e) gives the float v a new value; A_RET(e) returns e
**   A_K(c), A_KU(c)        a float / unsigned constant; A_C(NAME) is APPROX_F32_NAME or
**                          APPROX_F64_NAME (approx.h) as a float, A_CU(NAME) as an unsigned
**   A_PICK(a32, a64)       the precision's choice of two C tokens (clamps, shifts, biases);
**                          where the sequences differ (polynomial lengths), an #if picks lines
**   A_ADD SUB MUL DIV NEG  arithmetic in the operands' type; AND OR SHL SHR on unsigneds
**   A_FMA(a, b, c)         approx_fma_*: fused where APPROX_FMA, else a*b + c
**   A_LT GT GE EQ NE, A_SEL(c, a, b)  comparisons, and a select of two computed values
**   A_BITS(x), A_FLOAT(u)  bit casts
** approx.h's rules hold for every line: straight-line code, selects only, a multiply-add only
** where A_FMA is written, magic-number rounding, integer work on unsigneds.
*/

#if APPROX_BITS == 32
#define A_PICK(a32, a64) a32
#else
#define A_PICK(a32, a64) a64
#endif
#define A_N(n) A_PICK(APPROX_F32_##n, APPROX_F64_##n)
/* y, or for a NaN x that NaN quieted (x + x keeps its sign and payload).
** Where a NaN would otherwise travel through a function's integer steps
** (exponent bits made from it), which of two NaN operands an instruction
** returns depends on operand order, that is on the compiler: this makes
** the result one defined value in every dialect. */
#define A_NAN_IN(x, y) A_SEL(A_NE(x, x), A_ADD(x, x), y)
#define A_C(n) A_K(A_N(n))
#define A_CU(n) A_KU(A_N(n))

/* -- Building blocks ---------------------------------------------------------- */

/* e^r - 1 = r + r^2 E(r) for |r| <= ln2/2 (a little beyond is fine), E by Horner's rule. */
A_FN(expm1_poly, A_X(r))
{
#if APPROX_BITS == 32
  A_F(p, A_C(EXP_E4));
#else
  A_F(p, A_C(EXP_E9));
  A_SET(p, A_FMA(p, r, A_C(EXP_E8)));
  A_SET(p, A_FMA(p, r, A_C(EXP_E7)));
  A_SET(p, A_FMA(p, r, A_C(EXP_E6)));
  A_SET(p, A_FMA(p, r, A_C(EXP_E5)));
  A_SET(p, A_FMA(p, r, A_C(EXP_E4)));
#endif
  A_SET(p, A_FMA(p, r, A_C(EXP_E3)));
  A_SET(p, A_FMA(p, r, A_C(EXP_E2)));
  A_SET(p, A_FMA(p, r, A_C(EXP_E1)));
  A_SET(p, A_FMA(p, r, A_C(EXP_E0)));
  A_F(r2, A_MUL(r, r));
  A_RET(A_FMA(r2, p, r));
}

A_FN(exp_poly, A_X(r)) { A_RET(A_ADD(A_CALL(expm1_poly, r), A_K(1.0))); }

/* x = n ln2 + r: n = round(x / ln2) by the magic number, r = x - n ln2 in two steps
** (Cody-Waite; n * LN2_HI is exact).  Returns r; *t gets the magic sum, whose low bits
** are n.  |x| must stay below 2^22 ln2 (2^51 ln2 for f64), as every caller's clamp keeps it. */
A_FN(ln2_reduce, A_X(x), A_OUT(t))
{
  A_F(tt, A_FMA(x, A_C(LOG2E), A_C(RND)));
  A_F(nf, A_SUB(tt, A_C(RND)));
  A_F(r, A_FMA(A_NEG(nf), A_C(LN2_HI), x));   /* exact */
  *t = tt;
  A_RET(A_FMA(A_NEG(nf), A_C(LN2_LO), r));
}

/* 2^n from the magic sum t of ln2_reduce, for a normal 2^n (-126 <= n <= 127; f64
** -1022 <= n <= 1023): n plus the bias, placed in the exponent field. */
A_FN(pow2n, A_X(t))
{
  A_RET(A_FLOAT(A_SHL(A_SUB(A_BITS(t), A_KU(A_N(RND_BITS) - A_PICK(127u, 1023u))),
                      A_PICK(23, 52))));
}

/* p * 2^n, n given as two's complement bits, -152 <= n <= 254 (f64 -1078 <= n <= 2046).
** n = n1 + n2 with n1 = floor(n/2): both factors are normal, p*2^n1 is exact, so a denormal
** result rounds once.  (nb + 256) >> 1 is a logical shift of a positive number. */
A_FN(scale, A_X(p), A_XU(nb))
{
  A_U(h, A_SHR(A_ADD(nb, A_KU(A_PICK(256u, 2048u))), 1));          /* n1 + 128 (1024) */
  A_U(e1, A_SHL(A_SUB(h, A_KU(1u)), A_PICK(23, 52)));              /* bits(2^n1) */
  A_U(e2, A_SHL(A_SUB(A_ADD(nb, A_KU(A_PICK(255u, 2047u))), h),    /* bits(2^n2) */
                A_PICK(23, 52)));
  A_F(y, A_MUL(p, A_FLOAT(e1)));
  A_RET(A_MUL(y, A_FLOAT(e2)));
}

/* -- exp ----------------------------------------------------------------------- */

/* e^x = 2^n e^r, n = round(x/ln2), r = x - n ln2 (Cody-Waite, n*LN2_HI exact).
** The clamps keep n in the scalable range; past them the result is inf or 0 anyway,
** and NaN passes through them (comparisons with NaN are false).  Both clamps test x, not
** each other's result: GCC then emits one compare and blend each (chained, it merges
** them into nine instructions).  e^89 (e^710) overflows; e^-104 < 2^-150 (e^-746 <
** 2^-1075) rounds to 0. */
A_FN(exp, A_X(x))
{
  A_F(xc, A_SEL(A_GT(x, A_K(A_PICK(89.0, 710.0))), A_K(A_PICK(89.0, 710.0)), x));
  A_SET(xc, A_SEL(A_LT(x, A_K(A_PICK(-104.0, -746.0))), A_K(A_PICK(-104.0, -746.0)), xc));
  A_DECL(t);
  A_F(r, A_CALL(ln2_reduce, xc, &t));
  A_U(nb, A_SUB(A_BITS(t), A_CU(RND_BITS)));
  A_F(p, A_CALL(exp_poly, r));
  A_RET(A_NAN_IN(x, A_CALL(scale, p, nb)));
}

/* -- log ----------------------------------------------------------------------- */

/* x = 2^k m, m in [sqrt(1/2), sqrt(2)); returns k as a float and f = m - 1 (exact).
** Denormals are first scaled by 2^24 (2^54) so their exponent field is meaningful. */
A_FN(log_reduce, A_X(x), A_OUT(f))
{
  A_F(xs, A_SEL(A_LT(x, A_K(A_PICK(0x1p-126, 0x1p-1022))),
                A_MUL(x, A_K(A_PICK(0x1p24, 0x1p54))), x));
  A_U(kadj, A_SEL(A_LT(x, A_K(A_PICK(0x1p-126, 0x1p-1022))),
                  A_KU(A_PICK(24u, 54u)), A_KU(0u)));
  A_U(ix, A_ADD(A_BITS(xs), A_KU(A_PICK(0x3f800000u, 0x3ff0000000000000u)
                                 - A_N(SQRTH_BITS))));
  A_U(kb, A_SUB(A_SUB(A_SHR(ix, A_PICK(23, 52)), A_KU(A_PICK(127u, 1023u))),
                kadj));                                           /* k, two's complement */
  A_U(mb, A_ADD(A_AND(ix, A_KU(A_PICK(0x007fffffu, 0x000fffffffffffffu))),
                A_CU(SQRTH_BITS)));
  A_F(fm, A_SUB(A_FLOAT(mb), A_K(1.0)));
  *f = fm;
  A_RET(A_SUB(A_FLOAT(A_ADD(kb, A_CU(RND_BITS))), A_C(RND)));
}

/* s (hfsq + R) for log(1+f) = f - hfsq + s (hfsq + R), hfsq = f^2/2 (fdlibm's form:
** the small correction is added last, so f and hfsq carry the bulk exactly). */
A_FN(log_corr, A_X(f), A_X(hfsq))
{
  A_F(s, A_DIV(f, A_ADD(A_K(2.0), f)));
  A_F(z, A_MUL(s, s));
#if APPROX_BITS == 32
  A_F(g, A_C(LOG_G3));
#else
  A_F(g, A_C(LOG_G6));
  A_SET(g, A_FMA(g, z, A_C(LOG_G5)));
  A_SET(g, A_FMA(g, z, A_C(LOG_G4)));
  A_SET(g, A_FMA(g, z, A_C(LOG_G3)));
#endif
  A_SET(g, A_FMA(g, z, A_C(LOG_G2)));
  A_SET(g, A_FMA(g, z, A_C(LOG_G1)));
  A_SET(g, A_FMA(g, z, A_C(LOG_G0)));
  A_F(rr, A_MUL(g, z));
  A_RET(A_MUL(s, A_ADD(hfsq, rr)));
}

/* log x = k ln2 + log(1+f), summed small-to-large; then the special inputs:
** 0 -> -inf, negative -> NaN, +inf and NaN -> themselves. */
A_FN(log, A_X(x))
{
  A_DECL(f);
  A_F(kf, A_CALL(log_reduce, x, &f));
  A_F(hfsq, A_MUL(A_MUL(A_K(0.5), f), f));
  A_F(c, A_CALL(log_corr, f, hfsq));
  A_F(y, A_ADD(c, A_MUL(kf, A_C(LN2_LO))));
  A_SET(y, A_SUB(y, hfsq));
  A_SET(y, A_ADD(y, f));
  A_SET(y, A_ADD(y, A_MUL(kf, A_C(LN2_HI))));
  A_SET(y, A_SEL(A_EQ(x, A_K(0.0)), A_K(-INFINITY), y));
  A_SET(y, A_SEL(A_LT(x, A_K(0.0)), A_K(NAN), y));
  A_RET(A_SEL(A_LT(x, A_K(INFINITY)), y, x));                     /* +inf, NaN: x */
}

/* -- tanh ---------------------------------------------------------------------- */

/* tanh|x| = E / (E + 2), E = expm1(2|x|) = 2^n (e^r - 1) + (2^n - 1): full relative
** accuracy near 0, and near 1 the rounding of E + 2 costs at most an ulp.  (A clamped odd
** rational x P(x^2)/Q(x^2) is cheaper, but its float evaluation errs by ~6 ulp as tanh
** nears 1.)  |x| is clamped where tanh rounds to 1 (9.5; f64 22): there E + 2 == E. */
A_FN(tanh, A_X(x))
{
  A_U(sign, A_AND(A_BITS(x), A_CU(SIGN)));
  A_F(ax, A_FLOAT(A_AND(A_BITS(x), A_KU(~A_N(SIGN)))));
  A_SET(ax, A_SEL(A_GT(ax, A_K(A_PICK(9.5, 22.0))), A_K(A_PICK(9.5, 22.0)), ax));
  A_F(u, A_ADD(ax, ax));
  A_DECL(t);
  A_F(r, A_CALL(ln2_reduce, u, &t));     /* n = round(2|x| / ln2) */
  A_F(q, A_CALL(expm1_poly, r));
  A_F(s, A_CALL(pow2n, t));              /* 0 <= n <= 28 (f64 64) */
  A_F(em1, A_FMA(s, q, A_SUB(s, A_K(1.0))));
  A_F(y, A_DIV(em1, A_ADD(em1, A_K(2.0))));
  A_RET(A_NAN_IN(x, A_FLOAT(A_OR(A_BITS(y), sign))));
}

/* -- sigmoid ------------------------------------------------------------------- */

/* 1/(1+e^-x) for x >= 0, e^x/(1+e^x) for x < 0: e = e^-|x| never overflows, and the
** tail e^x (down to denormals) keeps its relative accuracy. */
A_FN(sigmoid, A_X(x))
{
  A_F(mx, A_SEL(A_LT(x, A_K(0.0)), x, A_NEG(x)));               /* -|x| */
  A_F(e, A_CALL(exp, mx));
  A_F(num, A_SEL(A_LT(x, A_K(0.0)), e, A_K(1.0)));
  A_RET(A_NAN_IN(x, A_DIV(num, A_ADD(A_K(1.0), e))));
}

/* -- GELU (tanh form) ------------------------------------------------------------ */

/* 0.5 x (1 + tanh u), u = sqrt(2/pi) (x + 0.044715 x^3), computed as the same function
** x / (1 + e^z), z = -2u = x (C1 + C3 x^2): no cancellation for negative x (the tanh
** form loses all digits there), and cheaper.  e^z is exp without its denormal path: z is
** clamped to [-87, 88], where 2^n stays normal and one multiplication scales; beyond 88
** (x < -10.0) the true value is below 7e-38 and the result is -0 (also for -inf, GELU's
** limit); below -87, 1 + e^z rounds to 1 and the result is x.  f64: z is clamped to
** [-708, 709], -0 from x < -21.2, where the true value is below 3e-307. */
A_FN(gelu, A_X(x))
{
  A_F(x2, A_MUL(x, x));
  A_F(z, A_MUL(A_FMA(x2, A_C(GELU_C3), A_C(GELU_C1)), x));
  A_F(zc, A_SEL(A_GT(z, A_K(A_PICK(88.0, 709.0))), A_K(A_PICK(88.0, 709.0)), z));
  A_SET(zc, A_SEL(A_LT(z, A_K(A_PICK(-87.0, -708.0))), A_K(A_PICK(-87.0, -708.0)), zc));
  A_DECL(t);
  A_F(r, A_CALL(ln2_reduce, zc, &t));
  A_F(q, A_CALL(expm1_poly, r));
  A_F(s, A_CALL(pow2n, t));              /* -126 <= n <= 127 (f64 -1021 <= n <= 1023) */
  A_F(e, A_FMA(s, q, s));
  A_F(y, A_DIV(x, A_ADD(A_K(1.0), e)));
  A_RET(A_SEL(A_GT(z, A_K(A_PICK(88.0, 709.0))), A_K(-0.0), y));
}

/* -- expm1, log1p ---------------------------------------------------------------- */

/* e^x - 1 = 2^n (e^r - 1) + (2^n - 1) with exp's reduction: full relative accuracy near 0
** (n = 0 gives the polynomial itself), one rounding of the sum elsewhere.  x is clamped to
** [-30, 89] (f64 [-45, 710]): below, e^x - 1 rounds to -1; above, it overflows.  2^n is
** normal up to n = 127 (1023); n = 128 (1024) is computed with 2^(n-1) and doubled, so
** results up to the largest float stay finite.  -0 stays -0. */
A_FN(expm1, A_X(x))
{
  A_F(xc, A_SEL(A_GT(x, A_K(A_PICK(89.0, 710.0))), A_K(A_PICK(89.0, 710.0)), x));
  A_SET(xc, A_SEL(A_LT(x, A_K(A_PICK(-30.0, -45.0))), A_K(A_PICK(-30.0, -45.0)), xc));
  A_DECL(t);
  A_F(r, A_CALL(ln2_reduce, xc, &t));
  A_F(q, A_CALL(expm1_poly, r));
  A_F(tn, A_SEL(A_GT(t, A_K(A_N(RND) + A_PICK(127.0, 1023.0))),   /* n = 128: 2^127, doubled */
                A_SUB(t, A_K(1.0)), t));
  A_F(s, A_CALL(pow2n, tn));
  A_F(em1, A_FMA(s, q, A_SUB(s, A_K(1.0))));
  A_SET(em1, A_SEL(A_GT(t, tn), A_MUL(em1, A_K(2.0)), em1));
  A_RET(A_NAN_IN(x, A_SEL(A_EQ(x, A_K(0.0)), x, em1)));
}

/* log(1 + x) = log u + c/u, u = 1 + x rounded, c = x - (u - 1) its rounding error (exact
** for u below 2^24 (2^53), where u - 1 is exact; beyond, c/u is below an ulp of the result),
** added with the small terms of log's sum (fdlibm's log1p).  u = 0 -> -inf, u < 0 -> NaN,
** +inf and NaN pass, -0 stays -0. */
A_FN(log1p, A_X(x))
{
  A_F(u, A_ADD(A_K(1.0), x));
  A_DECL(f);
  A_F(kf, A_CALL(log_reduce, u, &f));
  A_F(c, A_SUB(x, A_SUB(u, A_K(1.0))));
  A_SET(c, A_DIV(c, u));
  A_F(hfsq, A_MUL(A_MUL(A_K(0.5), f), f));
  A_F(cr, A_CALL(log_corr, f, hfsq));
  A_F(y, A_ADD(cr, A_ADD(A_MUL(kf, A_C(LN2_LO)), c)));
  A_SET(y, A_SUB(y, hfsq));
  A_SET(y, A_ADD(y, f));
  A_SET(y, A_ADD(y, A_MUL(kf, A_C(LN2_HI))));
  A_SET(y, A_SEL(A_EQ(u, A_K(0.0)), A_K(-INFINITY), y));
  A_SET(y, A_SEL(A_LT(u, A_K(0.0)), A_K(NAN), y));
  A_SET(y, A_SEL(A_LT(u, A_K(INFINITY)), y, u));                  /* +inf, NaN: u */
  A_RET(A_SEL(A_EQ(x, A_K(0.0)), x, y));
}

/* -- erf --------------------------------------------------------------------------- */

/* Two pieces, both computed, one selected (tools/approx_fit.py erf):
** |x| < 1: erf x = x + x Q(x^2) (Q relative error 2^-29.6 f32, 2^-56.9 f64);
** |x| >= 1: erf x = 1 - e^(L(|x|) - x^2), L = log(erfc) + x^2 with absolute error in erf
** 2^-29.9 (f32, on [1, 4]) or 2^-57.1 (f64, on [1, 6]); |x| is clamped there, where erf
** rounds to 1.  L - x^2 is one multiply-add.  The sign is put back last: erf is odd.  A NaN
** takes the first piece, whose operations all see the same NaN, so its bits do not depend
** on which operand an instruction propagates (the second would meet +NaN and -NaN). */
A_FN(erf, A_X(x))
{
  A_U(sign, A_AND(A_BITS(x), A_CU(SIGN)));
  A_F(ax, A_FLOAT(A_AND(A_BITS(x), A_KU(~A_N(SIGN)))));
  A_F(z, A_MUL(ax, ax));
#if APPROX_BITS == 32
  A_F(q, A_C(ERF_Q6));
#else
  A_F(q, A_C(ERF_Q11));
  A_SET(q, A_FMA(q, z, A_C(ERF_Q10)));
  A_SET(q, A_FMA(q, z, A_C(ERF_Q9)));
  A_SET(q, A_FMA(q, z, A_C(ERF_Q8)));
  A_SET(q, A_FMA(q, z, A_C(ERF_Q7)));
  A_SET(q, A_FMA(q, z, A_C(ERF_Q6)));
#endif
  A_SET(q, A_FMA(q, z, A_C(ERF_Q5)));
  A_SET(q, A_FMA(q, z, A_C(ERF_Q4)));
  A_SET(q, A_FMA(q, z, A_C(ERF_Q3)));
  A_SET(q, A_FMA(q, z, A_C(ERF_Q2)));
  A_SET(q, A_FMA(q, z, A_C(ERF_Q1)));
  A_SET(q, A_FMA(q, z, A_C(ERF_Q0)));
  A_F(ys, A_FMA(ax, q, ax));
  A_F(bx, A_SEL(A_GT(ax, A_C(ERF_XMAX)), A_C(ERF_XMAX), ax));
  A_SET(bx, A_SEL(A_GE(ax, A_K(1.0)), bx, A_K(1.0)));           /* NaN: 1, so yl is finite */
#if APPROX_BITS == 32
  A_F(l, A_C(ERF_L6));
#else
  A_F(l, A_C(ERF_L17));
  A_SET(l, A_FMA(l, bx, A_C(ERF_L16)));
  A_SET(l, A_FMA(l, bx, A_C(ERF_L15)));
  A_SET(l, A_FMA(l, bx, A_C(ERF_L14)));
  A_SET(l, A_FMA(l, bx, A_C(ERF_L13)));
  A_SET(l, A_FMA(l, bx, A_C(ERF_L12)));
  A_SET(l, A_FMA(l, bx, A_C(ERF_L11)));
  A_SET(l, A_FMA(l, bx, A_C(ERF_L10)));
  A_SET(l, A_FMA(l, bx, A_C(ERF_L9)));
  A_SET(l, A_FMA(l, bx, A_C(ERF_L8)));
  A_SET(l, A_FMA(l, bx, A_C(ERF_L7)));
  A_SET(l, A_FMA(l, bx, A_C(ERF_L6)));
#endif
  A_SET(l, A_FMA(l, bx, A_C(ERF_L5)));
  A_SET(l, A_FMA(l, bx, A_C(ERF_L4)));
  A_SET(l, A_FMA(l, bx, A_C(ERF_L3)));
  A_SET(l, A_FMA(l, bx, A_C(ERF_L2)));
  A_SET(l, A_FMA(l, bx, A_C(ERF_L1)));
  A_SET(l, A_FMA(l, bx, A_C(ERF_L0)));
  A_F(h, A_FMA(A_NEG(bx), bx, l));
  A_F(yl, A_SUB(A_K(1.0), A_CALL(exp, h)));
  A_F(y, A_SEL(A_GE(ax, A_K(1.0)), yl, ys));                     /* NaN: ys, one NaN throughout */
  A_RET(A_FLOAT(A_OR(A_BITS(y), sign)));
}

/* -- sin, cos ------------------------------------------------------------------ */

/* sin(|x| + q0 pi/2), with x's sign applied where smask has the sign bit: sin is
** (q0 = 0, smask = sign bit), cos is (1, 0); so sin is exactly odd and cos even.
** r = |x| - k pi/2 with k = round(2|x|/pi): the first steps are exact (short parts); once
** they may round, each step is a Fast2Sum whose error term is carried to the end. */
A_FN(sincos, A_X(x), A_XU(q0), A_XU(smask))
{
  A_U(xsign, A_AND(A_BITS(x), smask));
  A_F(ax, A_FLOAT(A_AND(A_BITS(x), A_KU(~A_N(SIGN)))));
  A_F(t, A_ADD(A_MUL(ax, A_C(2_PI)), A_C(RND)));
  A_F(kf, A_SUB(t, A_C(RND)));
  A_U(q, A_ADD(A_SUB(A_BITS(t), A_CU(RND_BITS)), q0));          /* quadrant (mod 4) */
  A_F(r, A_SUB(ax, A_MUL(kf, A_C(PIO2_1))));                     /* exact */
#if APPROX_BITS == 32
  A_SET(r, A_SUB(r, A_MUL(kf, A_C(PIO2_2))));                    /* exact */
  A_F(w, A_MUL(kf, A_C(PIO2_3)));
#else
  A_F(w, A_MUL(kf, A_C(PIO2_2)));
#endif
  A_F(s, A_SUB(r, w));
  A_F(e, A_SUB(A_SUB(r, s), w));                                  /* s + e == r - w */
#if APPROX_BITS == 32
  A_SET(w, A_MUL(kf, A_C(PIO2_4)));
#else
  A_SET(w, A_MUL(kf, A_C(PIO2_3)));
#endif
  A_F(s2, A_SUB(s, w));
  A_F(e2, A_SUB(A_SUB(s, s2), w));
#if APPROX_BITS == 32
  A_F(tail, A_MUL(kf, A_C(PIO2_5)));
#else
  A_F(tail, A_MUL(kf, A_C(PIO2_4)));
#endif
  A_SET(tail, A_SUB(tail, e));
  A_SET(tail, A_SUB(tail, e2));
  A_SET(r, A_SUB(s2, tail));
  A_SET(r, A_SEL(A_GT(r, A_C(SINCOS_RMAX)), A_C(SINCOS_RMAX), r));
  A_SET(r, A_SEL(A_LT(r, A_K(-A_N(SINCOS_RMAX))), A_K(-A_N(SINCOS_RMAX)), r));
  A_F(z, A_MUL(r, r));
#if APPROX_BITS == 32                                             /* sin r */
  A_F(ps, A_C(SIN_S3));
#else
  A_F(ps, A_C(SIN_S6));
  A_SET(ps, A_FMA(ps, z, A_C(SIN_S5)));
  A_SET(ps, A_FMA(ps, z, A_C(SIN_S4)));
  A_SET(ps, A_FMA(ps, z, A_C(SIN_S3)));
#endif
  A_SET(ps, A_FMA(ps, z, A_C(SIN_S2)));
  A_SET(ps, A_FMA(ps, z, A_C(SIN_S1)));
  A_SET(ps, A_FMA(ps, z, A_C(SIN_S0)));
  A_SET(ps, A_MUL(ps, z));
  A_SET(ps, A_MUL(ps, r));
  A_SET(ps, A_ADD(ps, r));
#if APPROX_BITS == 32                                             /* cos r */
  A_F(pc, A_C(COS_C3));
#else
  A_F(pc, A_C(COS_C6));
  A_SET(pc, A_FMA(pc, z, A_C(COS_C5)));
  A_SET(pc, A_FMA(pc, z, A_C(COS_C4)));
  A_SET(pc, A_FMA(pc, z, A_C(COS_C3)));
#endif
  A_SET(pc, A_FMA(pc, z, A_C(COS_C2)));
  A_SET(pc, A_FMA(pc, z, A_C(COS_C1)));
  A_SET(pc, A_FMA(pc, z, A_C(COS_C0)));
  A_SET(pc, A_MUL(pc, z));
  A_SET(pc, A_MUL(pc, z));
  A_F(hz, A_MUL(A_K(0.5), z));
  A_F(one_h, A_SUB(A_K(1.0), hz));
  /* recovers the rounding of 1 - hz */
  A_SET(pc, A_ADD(one_h, A_ADD(A_SUB(A_SUB(A_K(1.0), one_h), hz), pc)));
  A_F(y, A_SEL(A_NE(A_AND(q, A_KU(1u)), A_KU(0u)), pc, ps));
  /* negate in quadrants 2, 3 and for sin of negative x: adding the sign bit flips it */
  A_U(yb, A_ADD(A_BITS(y), A_SHL(A_AND(q, A_KU(2u)), A_PICK(30, 62))));
  A_RET(A_FLOAT(A_ADD(yb, xsign)));
}

A_FN(sin, A_X(x)) { A_RET(A_CALL(sincos, x, A_KU(0u), A_CU(SIGN))); }
A_FN(cos, A_X(x)) { A_RET(A_CALL(sincos, x, A_KU(1u), A_KU(0u))); }

/* -- pow ----------------------------------------------------------------------- */

/* |a|^b = 2^y, y = b log2|a| = b k + b log2(m).  b k is kept exact as bh k + bl k (bh: the
** top 12 (f64 21) bits of b), so the rounding error of y scales with |b log2 m| <= |b|/2,
** not with |b log2 a|.  Then the C99 special cases, each a plain select on one comparison,
** and exact results for b = 0, 1, -1, 2.  (b = 0.5 is not special-cased: an exact sqrt
** would need __builtin_sqrtf, which under GCC's default -fmath-errno keeps the loop from
** vectorizing.) */
A_FN(pow, A_X(a), A_X(b))
{
  A_U(abits, A_BITS(a));
  A_F(ax, A_FLOAT(A_AND(abits, A_KU(~A_N(SIGN)))));
  A_F(bx, A_FLOAT(A_AND(A_BITS(b), A_KU(~A_N(SIGN)))));
  /* log|a| = k ln2 + log m */
  A_DECL(f);
  A_F(kf, A_CALL(log_reduce, ax, &f));
  A_F(hfsq, A_MUL(A_MUL(A_K(0.5), f), f));
  A_F(lm, A_CALL(log_corr, f, hfsq));
  A_SET(lm, A_SUB(lm, hfsq));
  A_SET(lm, A_ADD(lm, f));
  /* y = yh + yl */
  A_F(tl, A_MUL(b, A_MUL(lm, A_C(LOG2E))));                       /* b log2 m */
  A_F(bh, A_FLOAT(A_AND(A_BITS(b), A_KU(A_PICK(0xfffff000u, 0xffffffff00000000u)))));
  A_F(bl, A_SUB(b, bh));
  A_F(yh, A_MUL(bh, kf));                                         /* exact */
  A_F(yl, A_ADD(A_MUL(bl, kf), tl));
  A_F(y, A_ADD(yh, yl));
  /* 2^y = 2^n 2^r, n = round(y); yh - n is exact */
  A_F(tn, A_ADD(y, A_C(RND)));
  A_F(nf, A_SUB(tn, A_C(RND)));
  A_U(nb, A_SUB(A_BITS(tn), A_CU(RND_BITS)));
  A_F(r, A_ADD(A_SUB(yh, nf), yl));
  A_F(p, A_CALL(exp_poly, A_MUL(r, A_C(LN2))));
  A_F(res, A_CALL(scale, p, nb));
  A_SET(res, A_SEL(A_GT(y, A_K(A_PICK(130.0, 1026.0))), A_K(INFINITY), res));
  A_SET(res, A_SEL(A_LT(y, A_K(A_PICK(-152.0, -1078.0))), A_K(0.0), res));
  /* a = +-0, a = +-inf, b = +-inf */
  A_F(zpow, A_SEL(A_LT(b, A_K(0.0)), A_K(INFINITY), A_K(0.0)));  /* 0^b */
  A_F(ipow, A_SEL(A_LT(b, A_K(0.0)), A_K(0.0), A_K(INFINITY)));  /* inf^b */
  A_SET(res, A_SEL(A_EQ(ax, A_K(0.0)), zpow, res));
  A_SET(res, A_SEL(A_EQ(ax, A_K(INFINITY)), ipow, res));
  A_F(bpow, A_SEL(A_LT(ax, A_K(1.0)), zpow, ipow));              /* |a|^(+-inf) */
  A_SET(bpow, A_SEL(A_EQ(ax, A_K(1.0)), A_K(1.0), bpow));
  A_SET(res, A_SEL(A_EQ(bx, A_K(INFINITY)), bpow, res));
  /* b integer (rb == bx)?  odd?  |b| >= 2^23 (2^52) is an integer, odd only below 2^24
  ** (2^53); below 2^23, tb = |b| + 2^23 rounds to an integer whose parity is tb's last bit. */
  A_F(tb, A_SEL(A_LT(bx, A_K(A_PICK(0x1p23, 0x1p52))), A_ADD(bx, A_K(A_PICK(0x1p23, 0x1p52))),
                bx));
  A_F(rb, A_SEL(A_LT(bx, A_K(A_PICK(0x1p23, 0x1p52))), A_SUB(tb, A_K(A_PICK(0x1p23, 0x1p52))),
                bx));
  /* a with the sign bit set (-0 and -inf too) to an odd integer power is negated */
  A_F(neg, A_SEL(A_NE(A_AND(A_BITS(tb), A_KU(1u)), A_KU(0u)), A_NEG(res), res));
  A_SET(neg, A_SEL(A_LT(tb, A_K(A_PICK(0x1p24, 0x1p53))), neg, res));
  A_SET(neg, A_SEL(A_EQ(rb, bx), neg, res));
  A_SET(res, A_SEL(A_NE(A_AND(abits, A_CU(SIGN)), A_KU(0u)), neg, res));
  /* finite a < 0 to a non-integer power is NaN */
  A_F(nn, A_SEL(A_EQ(rb, bx), res, A_K(NAN)));
  A_SET(nn, A_SEL(A_GT(a, A_K(-INFINITY)), nn, res));
  A_SET(res, A_SEL(A_LT(a, A_K(0.0)), nn, res));
  A_SET(res, A_SEL(A_NE(a, a), A_ADD(a, b), res));
  A_SET(res, A_SEL(A_NE(b, b), A_ADD(a, b), res));
  /* exact cases */
  A_SET(res, A_SEL(A_EQ(b, A_K(2.0)), A_MUL(a, a), res));
  A_SET(res, A_SEL(A_EQ(b, A_K(1.0)), a, res));
  A_SET(res, A_SEL(A_EQ(b, A_K(-1.0)), A_DIV(A_K(1.0), a), res));
  A_SET(res, A_SEL(A_EQ(b, A_K(0.0)), A_K(1.0), res));
  A_RET(A_SEL(A_EQ(a, A_K(1.0)), A_K(1.0), res));
}

#undef A_PICK
#undef A_N
#undef A_C
#undef A_CU
#undef A_NAN_IN
