#!/usr/bin/env python3
"""Derive the coefficients and split constants used by src/tensor/approx.h.

Offline tool (needs mpmath; not a dependency of the library).  It runs a
Remez exchange (linear for polynomials, iterated-linearised for rationals) in
high precision, minimising the weighted (usually relative) error, rounds the
coefficients to the target precision and prints them as exact C hex literals.
Run: python3 tools/approx_fit.py [const|poly|erf|tanh-rational P Q XMAX]   (default: const poly)
The literals in approx.h are the output of `const`, `poly` and `erf` verbatim.
"""
import sys
import mpmath as mp

mp.mp.dps = 50


def rnd(x, bits):
    """Round an mpf to `bits` significant bits (round to nearest even)."""
    with mp.workprec(bits):
        return +mp.mpf(x)


def chex(x, bits):
    """Exact C literal for an mpf already representable in `bits` bits."""
    x = rnd(x, bits)
    s = float(x).hex()  # exact: 24 and 53 bits fit a double
    m, e = s.split("p")
    s = (m.rstrip("0").rstrip(".") if "." in m else m) + "p" + e
    return s + ("f" if bits == 24 else "")


def extrema(err, a, b, npts):
    """Local extrema of err on [a, b], one per sign-constant run (alternating)."""
    xs = [a + (b - a) * (1 - mp.cos(mp.pi * i / (npts - 1))) / 2 for i in range(npts)]
    es = [err(x) for x in xs]
    runs = []
    for x, e in zip(xs, es):
        if runs and mp.sign(e) == mp.sign(runs[-1][1]):
            if abs(e) > abs(runs[-1][1]):
                runs[-1] = (x, e)
        else:
            runs.append((x, e))
    return runs


def remez(f, w, a, b, nnum, nden=0, num_basis=None, den_basis=None,
          iters=40, npts=3000):
    """Minimise max |w(x) (f(x) - N(x)/D(x))| on [a, b].

    N = sum p_j num_basis(j, x) (j < nnum), D = 1 + sum q_j den_basis(j, x).
    Returns (p, q, max_err)."""
    num_basis = num_basis or (lambda j, x: x ** j)
    den_basis = den_basis or (lambda j, x: x ** (j + 1))
    n = nnum + nden + 1
    ref = [a + (b - a) * (1 - mp.cos(mp.pi * i / (n - 1))) / 2 for i in range(n)]
    q = [mp.mpf(0)] * nden
    p = None
    best = None
    for _ in range(iters):
        # solve for p, q, E with D_old used in the E term (iterate to converge)
        for _inner in range(6 if nden else 1):
            A = mp.matrix(n, n)
            rhs = mp.matrix(n, 1)
            for i, x in enumerate(ref):
                fx = f(x)
                dold = 1 + sum(q[j] * den_basis(j, x) for j in range(nden))
                for j in range(nnum):
                    A[i, j] = num_basis(j, x)
                for j in range(nden):
                    A[i, nnum + j] = -fx * den_basis(j, x)
                A[i, n - 1] = (-1) ** i * dold / w(x)
                rhs[i] = fx
            sol = mp.lu_solve(A, rhs)
            p = [sol[j] for j in range(nnum)]
            q = [sol[nnum + j] for j in range(nden)]

        def err(x):
            nx = sum(p[j] * num_basis(j, x) for j in range(nnum))
            dx = 1 + sum(q[j] * den_basis(j, x) for j in range(nden))
            return w(x) * (f(x) - nx / dx)
        runs = extrema(err, a, b, npts)
        while len(runs) > n:  # drop the smaller end extremum
            if abs(runs[0][1]) < abs(runs[-1][1]):
                runs.pop(0)
            else:
                runs.pop()
        emax = max(abs(e) for _, e in runs)
        emin = min(abs(e) for _, e in runs)
        best = (p, q, emax)
        if len(runs) < n:
            break
        ref = [x for x, _ in runs]
        if emax / emin < 1 + mp.mpf(10) ** -4:
            break
    return best


def show(name, coeffs, bits):
    for i, c in enumerate(coeffs):
        print("  %s%d = %s" % (name, i, chex(c, bits)))


def log2err(e):
    return float(mp.log(abs(e), 2))


def fit_all():
    LN2 = mp.log(2)
    rexp = LN2 / 2
    # exp: e^r = 1 + r + r^2 E(r), |r| <= ln2/2 (also expm1 = r + r^2 E(r))
    fe = lambda r: (mp.expm1(r) - r) / r ** 2 if r != 0 else mp.mpf(1) / 2
    for bits, deg in ((24, 5), (53, 10)):
        p, _, e = remez(fe, lambda r: 1 / mp.exp(r), -rexp, rexp, deg)
        # the error of e^r is r^2 times that of E: bound it at the interval end
        print("exp f%d: E degree %d, rel err of e^r <= 2^%.1f" % (32 if bits == 24 else 64, deg - 1, log2err(e * rexp ** 2)))
        show("EXP_E", p, bits)
    # log: log(1+f) = 2 atanh(s), s = f/(2+f); R(z) = (2atanh(s) - 2s)/s = z G(z)
    smax = (mp.sqrt(2) - 1) / (mp.sqrt(2) + 1)
    fl = lambda z: (2 * mp.atanh(mp.sqrt(z)) - 2 * mp.sqrt(z)) / (z * mp.sqrt(z)) if z != 0 else mp.mpf(2) / 3
    for bits, deg in ((24, 4), (53, 7)):
        p, _, e = remez(fl, lambda z: 1 / fl(z), 0, smax ** 2, deg)
        print("log f%d: G degree %d, rel err of G 2^%.1f" % (32 if bits == 24 else 64, deg - 1, log2err(e)))
        show("LOG_G", p, bits)
    # sin(r) = r + r^3 S(r^2), cos(r) = 1 - r^2/2 + r^4 C(r^2), |r| <= pi/4 (+margin)
    zmax = (mp.pi / 4 * mp.mpf('1.001')) ** 2
    fs = lambda z: (mp.sin(mp.sqrt(z)) - mp.sqrt(z)) / mp.sqrt(z) ** 3 if z != 0 else -mp.mpf(1) / 6
    fc = lambda z: (mp.cos(mp.sqrt(z)) - 1 + z / 2) / z ** 2 if z != 0 else mp.mpf(1) / 24
    for bits, ds, dc in ((24, 4, 4), (53, 7, 7)):
        p, _, e = remez(fs, lambda z: 1 + 0 * z, 0, zmax, ds)
        print("sin f%d: S degree %d, abs err of S 2^%.1f" % (32 if bits == 24 else 64, ds - 1, log2err(e)))
        show("SIN_S", p, bits)
        p, _, e = remez(fc, lambda z: 1 + 0 * z, 0, zmax, dc)
        print("cos f%d: C degree %d, abs err of C 2^%.1f" % (32 if bits == 24 else 64, dc - 1, log2err(e)))
        show("COS_C", p, bits)


def fit_erf():
    """erf in two pieces (approx_erf_*): |x| < 1: erf x = x + x Q(x^2), Q minimax with the
    error relative to erf; 1 <= |x| <= XMAX: erf x = 1 - e^(L(|x|) - x^2), L(x) = log(erfc x)
    + x^2 minimax with weight erfc(x) (the absolute error it causes in erf)."""
    Q = lambda z: (mp.erf(mp.sqrt(z)) / mp.sqrt(z) - 1) if z != 0 else 2 / mp.sqrt(mp.pi) - 1
    L = lambda x: mp.log(mp.erfc(x)) + x * x
    for bits, dq, dl, xmax in ((24, 7, 7, 4), (53, 12, 18, 6)):
        nm = "f%d" % (32 if bits == 24 else 64)
        p, _, e = remez(Q, lambda z: 1 / (1 + Q(z)), 0, 1, dq, npts=2000)
        print("erf %s: Q degree %d on [0, 1], rel err 2^%.1f" % (nm, dq - 1, log2err(e)))
        show("ERF_Q", p, bits)
        p, _, e = remez(L, mp.erfc, 1, xmax, dl, npts=3000, iters=60)
        print("erf %s: L degree %d on [1, %d], abs err of erf 2^%.1f" % (nm, dl - 1, xmax, log2err(e)))
        show("ERF_L", p, bits)


def fit_tanh(np_, nq, xmax):
    """tanh(x) = x P(x^2) / Q(x^2) on [0, xmax], relative error.

    Not used by approx.h: the fit itself reaches 2^-27..2^-30, but evaluating P and Q in
    float costs ~6 ulp where tanh nears 1, above the 3 ulp aim; kept for comparison."""
    f = lambda t: mp.tanh(mp.sqrt(t)) / mp.sqrt(t) if t != 0 else mp.mpf(1)
    p, q, e = remez(f, lambda t: 1 / f(t), 0, xmax ** 2, np_, nq, npts=4000, iters=60)
    print("tanh rational P deg %d / Q deg %d on [0,%s]: rel err 2^%.1f" % (np_ - 1, nq, xmax, log2err(e)))
    show("TANH_P", p, 24)
    show("TANH_Q", [mp.mpf(1)] + q, 24)


def split(c, parts, bits):
    """Split constant c into parts: each of the first ones has `bits` significant bits."""
    out = []
    rest = c
    for i in range(parts):
        b = bits if i < parts - 1 else 53
        v = rnd(rest, b)
        out.append(v)
        rest -= v
    return out


def constants():
    """Split constants: products n*HI are exact for the n ranges used."""
    LN2 = mp.log(2)
    PIO2 = mp.pi / 2
    print("f32 LN2 (n <= 2^8, 16-bit hi):", [chex(v, 24) for v in split(LN2, 2, 16)])
    print("f64 LN2 (n <= 2^11, 42-bit hi):", [chex(v, 53) for v in split(LN2, 2, 42)])
    p = split(PIO2, 5, 11)
    p[-1] = rnd(p[-1], 24)
    print("f32 PIO2 (k < 2^13, 11-bit parts):", [chex(v, 24) for v in p])
    print("   representation error 2^%.1f" % log2err(PIO2 - sum(p)))
    p = split(PIO2, 4, 33)
    print("f64 PIO2 (k < 2^20, 33-bit parts):", [chex(v, 53) for v in p])
    print("   representation error 2^%.1f" % log2err(PIO2 - sum(p)))
    for name, v in (("LOG2E", 1 / LN2), ("LN2", LN2), ("2/PI", 2 / mp.pi)):
        print(name, chex(v, 24), chex(v, 53))


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "default"
    if what in ("default", "const"):
        constants()
    if what in ("default", "poly"):
        fit_all()
    if what == "erf":
        fit_erf()
    if what == "tanh-rational":
        fit_tanh(int(sys.argv[2]), int(sys.argv[3]), mp.mpf(sys.argv[4]))
