#!/usr/bin/env python3
"""peers.py -- time tc-bench's workloads W1-W7 in NumPy (and PyTorch CPU when it
is installed), with the same method as tc-bench: 2 warm-up runs, then the median
of N timed runs, outputs dropped inside the timed loop.

NumPy is required; torch is optional (skipped when it cannot be imported).
These are for comparison only: the project itself never depends on them.

    pip install numpy threadpoolctl          # torch optional: pip install torch
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python3 bench/peers.py
    python3 bench/peers.py --quick --only W1,W6 --tc-json tc.json --json peers.json

Some machines set OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE in the environment, which
pins OpenBLAS to a kernel other than the one it would pick; unset both in the
command that runs this script (as above). The BLAS kernel actually in use is
printed (from threadpoolctl) so the W6 figure can be judged.

The floor: NumPy cannot express a fused triad, so the script measures a STREAM
"add" (np.add(b, c, out=a), 24 bytes per element, the same traffic as triad)
split across T Python threads (ufuncs release the GIL), plus a real triad
torch.add(b, c, alpha=s, out=a) when torch is here. With --tc-json FILE the
floor tc-bench measured is used instead, and tc's eager times are shown beside.
"""

import argparse
import json
import math
import os
import statistics
import sys
import threading
import time

import numpy as np

M16 = 16 * 1024 * 1024
GELU_K = math.sqrt(2.0 / math.pi)
LR, B1, B2, EPS = 1e-3, 0.9, 0.999, 1e-8

# W11's minimum bytes (x; parameters read; pre-activation and logits written
# and read; gradients written; AdamW reads p, g, m, v, writes p, m, v) and
# W12's floor (weights and the KV cache rows read once per token), as in
# tc-bench.c.
W11_P = 1024 * 4096 + 4096 + 4096 * 1024 + 1024
W11_BYTES = 256 * 1024 * 4 + W11_P * 4 + 256 * 4096 * 4 * 2 + 256 * 1024 * 4 * 2 + W11_P * 4 + 7 * W11_P * 4
W11_WD = 0.01
W11_LR = 1e-5   # as tc-bench's (a higher rate memorizes the 256 targets in a few steps)
W12_TOKENS = 64
W12_CFG = dict(dim=288, hidden=768, layers=6, heads=6, vocab=32000, seq_len=256, eps=1e-5, theta=10000.0)
W12_WBYTES = 4.0 * (6 * (4 * 288 * 288 + 3 * 288 * 768) + 32000 * 288 + 13 * 288)
W12_BYTES = W12_TOKENS * W12_WBYTES + 2.0 * 6 * 288 * 4 * (W12_TOKENS * (W12_TOKENS + 1) / 2)

# id, description, minimum bytes moved per run (0: no floor), flops per run
WORKLOADS = [
    ("W1", "gelu (tanh) 16M f32", 2.0 * M16 * 4, 0),
    ("W2", "softmax 4096x4096 f32 dim -1", 2.0 * M16 * 4, 0),
    ("W3", "layer_norm 8192x1024 f32 +g,b", 2.0 * 8192 * 1024 * 4 + 2.0 * 1024 * 4, 0),
    ("W4", "sum_all(x*x) 16M f32", 1.0 * M16 * 4, 0),
    ("W4b", "sum_all(x) 16M f32", 1.0 * M16 * 4, 0),
    ("W4c", "dot(x,x) 16M f32 [peer only]", 1.0 * M16 * 4, 0),
    ("W5", "add 64 f32 + release (per op)", 0, 0),
    ("W6", "MLP 256x1024x4096x1024 gelu", 0, 2.0 * 256 * 1024 * 4096 * 2),
    ("W6m", "matmul 256x1024 @ 1024x4096", 0, 2.0 * 256 * 1024 * 4096),
    ("W7", "Adam step 16M f32 in place", 7.0 * M16 * 4, 0),
    ("W7f", "Adam, torch fused [peer only]", 7.0 * M16 * 4, 0),
    ("W2p", "softmax 4096x4096 from primitives", 2.0 * M16 * 4, 0),
    ("W3p", "layer_norm from primitives", 2.0 * 8192 * 1024 * 4 + 2.0 * 1024 * 4, 0),
    ("W8", "RMSNorm 8192x1024 from primitives", 2.0 * 8192 * 1024 * 4 + 1024 * 4, 0),
    ("W9", "25-op chain on 64 f32, read", 0, 0),
    ("W10", "MLP + bias/gelu epilogues", 0, 2.0 * 256 * 1024 * 4096 * 2),
    ("W11", "MLP train step (CE, AdamW)", W11_BYTES, 5 * 2.0 * 256 * 1024 * 4096),
    ("W12", "stories15M decode 64 tokens", W12_BYTES, 0),
    ("W13", "GPT train step 4x128 ctx 64 b 16", 0,      # matmul flops, as gpt_flops()
     3.0 * (4 * (2.0 * 16 * 64 * (128 * 384 + 128 * 128 + 2 * 128 * 512) + 4.0 * 16 * 64 * 64 * 128)
            + 2.0 * 16 * 64 * 128 * 96)),
    ("W14", "cumsum 2048x4096 f32 dim 0", 2.0 * 2048 * 4096 * 4, 0),
    ("W14b", "cumsum 2048x4096 f32 dim 1", 2.0 * 2048 * 4096 * 4, 0),
    ("W16", "embedding backward 8192 x 50257x768", 4.0 * 50257 * 768 + 2.0 * 4 * 8192 * 768, 0),
]

# The workloads torch.compile also runs (--compile): the ones a fusing
# compiler changes. Compile time is excluded (the warm-up runs compile).
COMPILED = ("W1", "W2", "W2p", "W3", "W3p", "W6", "W7", "W8", "W9", "W10", "W11", "W12",
            "W13", "W16")


def cpu_snap():
    """(wall, CPU seconds busy machine-wide, stolen, used by this process)."""
    import resource
    ru = resource.getrusage(resource.RUSAGE_SELF)
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
    except OSError:
        return None
    hz = os.sysconf("SC_CLK_TCK")
    return (time.perf_counter(), (v[0] + v[1] + v[2] + v[5] + v[6]) / hz, v[7] / hz, ru.ru_utime + ru.ru_stime)


def cpu_others(a, b):
    """Share of the CPUs used by other processes, and stolen, between two snapshots."""
    if not a or not b:
        return None, None
    cap = (b[0] - a[0]) * os.cpu_count()
    return max(0.0, (b[1] - a[1]) - (b[3] - a[3])) / cap, (b[2] - a[2]) / cap


def median_time(fn, reps, warmup=2, inner=1):
    """Median seconds per call of fn over reps samples of `inner` calls."""
    for _ in range(warmup):
        for _ in range(inner):
            fn()
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        samples.append((time.perf_counter() - t0) / inner)
    return statistics.median(samples), samples


def gelu_ref(x):
    return 0.5 * x * (1.0 + math.tanh(GELU_K * (x + 0.044715 * x ** 3)))


def check(cond, what):
    if not cond:
        raise SystemExit(f"peers.py: sanity check failed: {what}")


# -- floor --------------------------------------------------------------------

def numpy_stream_add(n, threads, reps):
    """GB/s of np.add(b, c, out=a) split over `threads` Python threads."""
    a = np.zeros(n)
    b = np.ones(n)
    c = np.full(n, 2.0)
    bounds = [(n * i // threads, n * (i + 1) // threads) for i in range(threads)]
    if threads == 1:
        def run():
            np.add(b, c, out=a)
    else:
        start = threading.Barrier(threads + 1)
        done = threading.Barrier(threads + 1)
        stop = [False]

        def worker(lo, hi):
            while True:
                start.wait()
                if stop[0]:
                    return
                np.add(b[lo:hi], c[lo:hi], out=a[lo:hi])
                done.wait()

        ts = [threading.Thread(target=worker, args=bd, daemon=True) for bd in bounds]
        for t in ts:
            t.start()

        def run():
            start.wait()
            done.wait()
    med, _ = median_time(run, reps, warmup=1)
    if threads > 1:
        stop[0] = True
        start.wait()
        for t in ts:
            t.join()
    check(a[n // 2] == 3.0, "stream add result")
    return 24.0 * n / med / 1e9


def torch_triad(torch, n, reps):
    a = torch.zeros(n, dtype=torch.float64)
    b = torch.ones(n, dtype=torch.float64)
    c = torch.full((n,), 2.0, dtype=torch.float64)
    med, _ = median_time(lambda: torch.add(b, c, alpha=3.0, out=a), reps, warmup=1)
    check(float(a[n // 2]) == 7.0, "torch triad result")
    return 24.0 * n / med / 1e9


# -- NumPy workloads ------------------------------------------------------------

def np_gelu(x):
    return 0.5 * x * (1.0 + np.tanh(GELU_K * (x + 0.044715 * (x * x * x))))


def np_softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    e /= e.sum(axis=-1, keepdims=True)
    return e


def np_layer_norm(x, g, b, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def numpy_workloads(rng, reps, w5_loop):
    """Yields (id, fn, inner) after checking each one's result once."""
    f32 = np.float32
    out = {}

    x1 = rng.standard_normal(M16, dtype=f32)
    known = np.array([-3.0, -1.0, 0.0, 0.5, 1.0, 3.0], dtype=f32)
    got = np_gelu(known)
    check(all(abs(float(g) - gelu_ref(float(k))) < 1e-5 + 1e-4 * abs(gelu_ref(float(k)))
              for g, k in zip(got, known)), "numpy gelu known values")
    check(np_gelu(x1).dtype == f32, "numpy gelu stays f32")
    out["W1"] = (lambda: np_gelu(x1), 1)

    x2 = rng.standard_normal((4096, 4096), dtype=f32)
    check(np.allclose(np_softmax(x2).sum(axis=-1), 1.0, atol=1e-4), "numpy softmax rows sum to 1")
    out["W2"] = (lambda: np_softmax(x2), 1)

    x3 = rng.standard_normal((8192, 1024), dtype=f32)
    g3 = rng.standard_normal(1024, dtype=f32)
    b3 = rng.standard_normal(1024, dtype=f32)
    y3 = np_layer_norm(x3[:4].astype(np.float64), g3, b3)
    check(np.allclose(np_layer_norm(x3, g3, b3)[:4], y3, atol=1e-4), "numpy layer_norm")
    out["W3"] = (lambda: np_layer_norm(x3, g3, b3), 1)

    x4 = rng.random(M16, dtype=f32)
    ref = float(np.dot(x4.astype(np.float64), x4.astype(np.float64)))
    check(abs(float(np.sum(x4 * x4)) - ref) <= 1e-5 * ref, "numpy sum of squares")
    check(abs(float(x4.sum()) - float(x4.sum(dtype=np.float64))) <= 1e-5 * ref, "numpy sum")
    out["W4"] = (lambda: float(np.sum(x4 * x4)), 1)
    out["W4b"] = (lambda: float(x4.sum()), 1)
    out["W4c"] = (lambda: float(np.dot(x4, x4)), 1)

    x14 = rng.random((2048, 4096), dtype=f32)
    for d in (0, 1):
        ref14 = np.cumsum(x14.astype(np.float64), axis=d)
        check(np.allclose(np.cumsum(x14, axis=d), ref14, rtol=1e-5, atol=1e-4), "numpy cumsum")
    out["W14"] = (lambda: np.cumsum(x14, axis=0), 1)
    out["W14b"] = (lambda: np.cumsum(x14, axis=1), 1)

    a5 = np.arange(64, dtype=f32)
    b5 = np.full(64, 0.5, dtype=f32)
    check(np.array_equal(a5 + b5, np.arange(64, dtype=f32) + f32(0.5)), "numpy add")
    out["W5"] = (lambda: a5 + b5, w5_loop)

    x6 = rng.standard_normal((256, 1024), dtype=f32)
    w1 = rng.standard_normal((1024, 4096), dtype=f32) * f32(1 / 32)
    b1 = rng.standard_normal(4096, dtype=f32) * f32(0.1)
    w2 = rng.standard_normal((4096, 1024), dtype=f32) * f32(1 / 64)
    b2 = rng.standard_normal(1024, dtype=f32) * f32(0.1)

    def mlp():
        return np_gelu(x6 @ w1 + b1) @ w2 + b2
    h = np_gelu(x6[:2].astype(np.float64) @ w1 + b1) @ w2 + b2
    check(np.allclose(mlp()[:2], h, atol=1e-3, rtol=1e-3), "numpy mlp")
    out["W6"] = (mlp, 1)
    out["W6m"] = (lambda: x6 @ w1, 1)

    p = rng.standard_normal(M16, dtype=f32)
    g = rng.standard_normal(M16, dtype=f32)
    m = rng.standard_normal(M16, dtype=f32) * f32(0.1)
    v = rng.random(M16, dtype=f32) * f32(0.01)
    step = [0]

    def adam():
        nonlocal p, m, v  # augmented assignment below works in place
        step[0] += 1
        t = step[0]
        m *= B1
        m += (1 - B1) * g
        v *= B2
        v += (1 - B2) * (g * g)
        mhat = m / (1 - B1 ** t)
        vhat = v / (1 - B2 ** t)
        p -= LR * mhat / (np.sqrt(vhat) + EPS)
    p0, g0, m0, v0 = (float(a[123]) for a in (p, g, m, v))
    adam()
    mr = B1 * m0 + (1 - B1) * g0
    vr = B2 * v0 + (1 - B2) * g0 * g0
    dp = -LR * (mr / (1 - B1)) / (math.sqrt(vr / (1 - B2)) + EPS)
    check(abs(float(p[123]) - p0 - dp) < 1e-6 and p.dtype == f32, "numpy adam")
    out["W7"] = (adam, 1)
    return out


# -- W13: one GPT training step (examples/gpt_model.c's model) ---------------------

GPT = dict(vocab=96, ctx=64, dim=128, layers=4, heads=4, batch=16, lr=1e-3, weight_decay=0.01)


def gpt_flops(c):
    """Matmul flops of one training step, as gpt_step_flops in examples/gpt_model.c."""
    B, T, C, V = c["batch"], c["ctx"], c["dim"], c["vocab"]
    per_layer = 2 * B * T * (C * 3 * C + C * C + 2 * C * 4 * C) + 2 * 2 * B * T * T * C
    return 3 * (c["layers"] * per_layer + 2 * B * T * C * V)


assert gpt_flops(GPT) == dict((w[0], w[3]) for w in WORKLOADS)["W13"]


def gpt_batch_np(c):
    """tc-bench's W13 batch: the same seeded synthetic text and windows."""
    mask = (1 << 64) - 1
    text, s = [0] * 4096, 13
    for i in range(1, 4096):
        s = (s * 6364136223846793005 + 1442695040888963407) & mask
        step = 1 if (s >> 60) < 12 else (s >> 33) % 96
        text[i] = (text[i - 1] + step) % 96
    rng, x, y = 13, [], []
    for _ in range(c["batch"]):  # splitmix64, as gpt_batch
        rng = (rng + 0x9E3779B97F4A7C15) & mask
        z = rng
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        st = (z ^ (z >> 31)) % (4096 - c["ctx"])
        x.append(text[st:st + c["ctx"]])
        y.append(text[st + 1:st + c["ctx"] + 1])
    return np.array(x, dtype=np.int64), np.array(y, dtype=np.int64)


def gpt_workload(torch, compile_):
    """One AdamW training step of the GPT of examples/gpt_model.c (pre-LN
    blocks, causal multi-head attention written out with masked_fill and
    softmax, tanh GELU, tied output layer, GPT-2 init), on one fixed batch.
    compile_: the model's loss through torch.compile and the optimizer step
    through torch.compile (PyTorch's recipe for compiling a training step)."""
    nn, F = torch.nn, torch.nn.functional
    c = GPT
    V, T, C, L, H = c["vocab"], c["ctx"], c["dim"], c["layers"], c["heads"]
    torch.manual_seed(13)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.fc, self.out = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

        def forward(self, x, mask):
            B, T_, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=-1)
            q, k, v = (t.view(B, T_, H, C // H).transpose(1, 2) for t in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
            att = torch.softmax(att.masked_fill(mask[:T_, :T_], float("-inf")), -1)
            y = (att @ v).transpose(1, 2).reshape(B, T_, C)
            x = x + self.proj(y)
            return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPTModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
            self.blocks = nn.ModuleList(Block() for _ in range(L))
            self.lnf = nn.LayerNorm(C)
            self.register_buffer("mask", torch.triu(torch.ones(T, T, dtype=torch.bool), 1))
            for name, p in self.named_parameters():
                if name.endswith("bias"):
                    nn.init.zeros_(p)
                elif p.dim() == 2:
                    std = 0.02 / math.sqrt(2 * L) if name.endswith(("proj.weight", "out.weight")) else 0.02
                    nn.init.normal_(p, 0.0, 0.01 if name == "wpe.weight" else std)

        def forward(self, idx):
            x = self.wte(idx) + self.wpe.weight[:idx.shape[1]]
            for b in self.blocks:
                x = b(x, self.mask)
            return self.lnf(x) @ self.wte.weight.t()   # tied output layer

    model = GPTModel()
    opt = torch.optim.AdamW(model.parameters(), lr=c["lr"], betas=(0.9, 0.99), eps=1e-8,
                            weight_decay=c["weight_decay"])
    xn, yn = gpt_batch_np(c)
    x, y = torch.from_numpy(xn), torch.from_numpy(yn)

    def loss_fn(x, y):
        return F.cross_entropy(model(x).view(-1, V), y.view(-1))
    lossf = torch.compile(loss_fn) if compile_ else loss_fn
    opt_step = torch.compile(opt.step) if compile_ else opt.step

    def step():
        with torch.enable_grad():
            opt.zero_grad(set_to_none=True)
            loss = lossf(x, y)
            loss.backward()
            opt_step()
            return loss.item()
    losses = [step() for _ in range(3)]
    check(abs(losses[0] - math.log(V)) < 0.1 and losses[2] < losses[0],
          f"torch gpt step: losses {losses} (first should be ln({V}), then lower)")
    return step


# -- torch workloads ------------------------------------------------------------

def torch_workloads(torch, reps, w5_loop):
    F = torch.nn.functional
    f32 = torch.float32
    gen = torch.Generator().manual_seed(0)
    rn = lambda *s: torch.randn(*s, dtype=f32, generator=gen)
    ru = lambda *s: torch.rand(*s, dtype=f32, generator=gen)
    out = {}

    x1 = rn(M16)
    known = torch.tensor([-3.0, -1.0, 0.0, 0.5, 1.0, 3.0])
    got = F.gelu(known, approximate="tanh")
    check(all(abs(float(g) - gelu_ref(float(k))) < 1e-5 + 1e-4 * abs(gelu_ref(float(k)))
              for g, k in zip(got, known)), "torch gelu known values")
    out["W1"] = (lambda: F.gelu(x1, approximate="tanh"), 1)

    x2 = rn(4096, 4096)
    check(torch.allclose(torch.softmax(x2, -1).sum(-1), torch.ones(4096), atol=1e-4), "torch softmax")
    out["W2"] = (lambda: torch.softmax(x2, -1), 1)

    x3, g3, b3 = rn(8192, 1024), rn(1024), rn(1024)
    ref3 = torch.from_numpy(np_layer_norm(x3[:4].double().numpy(), g3.double().numpy(), b3.double().numpy()))
    check(torch.allclose(F.layer_norm(x3, (1024,), g3, b3, 1e-5)[:4].double(), ref3, atol=1e-4), "torch layer_norm")
    out["W3"] = (lambda: F.layer_norm(x3, (1024,), g3, b3, 1e-5), 1)

    x4 = ru(M16)
    ref = float((x4.double() * x4.double()).sum())
    check(abs(float((x4 * x4).sum()) - ref) <= 1e-5 * ref, "torch sum of squares")
    out["W4"] = (lambda: float((x4 * x4).sum()), 1)
    out["W4b"] = (lambda: float(x4.sum()), 1)
    out["W4c"] = (lambda: float(torch.dot(x4, x4)), 1)

    x14 = ru(2048, 4096)
    for d in (0, 1):
        check(torch.allclose(torch.cumsum(x14, d).double(), torch.cumsum(x14.double(), d),
                             rtol=1e-5, atol=1e-4), "torch cumsum")
    out["W14"] = (lambda: torch.cumsum(x14, 0), 1)
    out["W14b"] = (lambda: torch.cumsum(x14, 1), 1)

    out["W16"] = (lazy(lambda: w16_fns(torch, False)), 1)

    a5 = torch.arange(64, dtype=f32)
    b5 = torch.full((64,), 0.5)
    check(torch.equal(a5 + b5, torch.arange(64, dtype=f32) + 0.5), "torch add")
    out["W5"] = (lambda: a5 + b5, w5_loop)

    x6 = rn(256, 1024)
    w1, b1 = rn(1024, 4096) / 32, rn(4096) * 0.1
    w2, b2 = rn(4096, 1024) / 64, rn(1024) * 0.1

    def mlp():
        return torch.addmm(b2, F.gelu(torch.addmm(b1, x6, w1), approximate="tanh"), w2)
    h = np_gelu(x6[:2].double().numpy() @ w1.double().numpy() + b1.double().numpy())
    h = h @ w2.double().numpy() + b2.double().numpy()
    check(np.allclose(mlp()[:2].numpy(), h, atol=1e-3, rtol=1e-3), "torch mlp")
    out["W6"] = (mlp, 1)
    out["W6m"] = (lambda: x6 @ w1, 1)

    p, g, m, v = rn(M16), rn(M16), rn(M16) * 0.1, ru(M16) * 0.01
    step = [0]

    def adam():
        step[0] += 1
        t = step[0]
        m.mul_(B1).add_(g, alpha=1 - B1)
        v.mul_(B2).addcmul_(g, g, value=1 - B2)
        mhat = m / (1 - B1 ** t)
        vhat = v / (1 - B2 ** t)
        p.sub_(LR * mhat / (vhat.sqrt() + EPS))
    p0, g0, m0, v0 = (float(a[123]) for a in (p, g, m, v))
    adam()
    mr = B1 * m0 + (1 - B1) * g0
    vr = B2 * v0 + (1 - B2) * g0 * g0
    dp = -LR * (mr / (1 - B1)) / (math.sqrt(vr / (1 - B2)) + EPS)
    check(abs(float(p[123]) - p0 - dp) < 1e-6, "torch adam")
    out["W7"] = (adam, 1)

    # The same Adam with the step's bias corrections as 0-d tensors, so
    # that torch.compile traces one graph for every step (a Python int
    # changing every call would recompile).
    bc = torch.zeros(2)

    def adam_t():
        step[0] += 1
        bc[0] = 1 - B1 ** step[0]
        bc[1] = 1 - B2 ** step[0]
        adam_update(bc)

    def adam_update(bc):
        m.mul_(B1).add_(g, alpha=1 - B1)
        v.mul_(B2).addcmul_(g, g, value=1 - B2)
        p.sub_(LR * (m / bc[0]) / ((v / bc[1]).sqrt() + EPS))
    out["W7c"] = (adam_t, adam_update)

    # Programs written from primitives, as tc-bench's W2p, W3p, W8, W9, W10.
    def softmax_prims():
        e = torch.exp(x2 - x2.amax(-1, keepdim=True))
        return e / e.sum(-1, keepdim=True)
    check(torch.allclose(softmax_prims(), torch.softmax(x2, -1), atol=1e-6), "torch softmax from primitives")
    out["W2p"] = (softmax_prims, 1)

    def layer_norm_prims():
        d = x3 - x3.mean(-1, keepdim=True)
        var = (d * d).mean(-1, keepdim=True)
        return d * torch.rsqrt(var + 1e-5) * g3 + b3
    check(torch.allclose(layer_norm_prims(), F.layer_norm(x3, (1024,), g3, b3, 1e-5), atol=1e-4),
          "torch layer_norm from primitives")
    out["W3p"] = (layer_norm_prims, 1)

    x8, g8 = rn(8192, 1024), rn(1024)

    def rms_norm():
        return x8 * torch.rsqrt((x8 * x8).mean(-1, keepdim=True) + 1e-6) * g8
    out["W8"] = (rms_norm, 1)

    x9, y9 = rn(64), ru(64)

    def chain():
        a = x9
        for _ in range(5):
            a = ((a + y9) * 0.5 - x9) * y9 + 0.25
        return a
    ref9 = x9.double()
    for _ in range(5):
        ref9 = ((ref9 + y9.double()) * 0.5 - x9.double()) * y9.double() + 0.25
    check(torch.allclose(chain().double(), ref9, atol=1e-5), "torch chain")
    out["W9"] = (chain, 2000)
    out["W10"] = (mlp, 1)
    out["W13"] = (gpt_workload(torch, False), 1)

    # torch's own fused CPU Adam (one pass over p, g, m, v): what a fusing
    # compiler should approach. Skipped where this torch lacks it.
    try:
        pf = torch.nn.Parameter(rn(M16))
        pf.grad = rn(M16)
        opt = torch.optim.Adam([pf], lr=LR, betas=(B1, B2), eps=EPS, fused=True)
        opt.step()
        out["W7f"] = (opt.step, 1)
    except Exception as e:  # noqa: BLE001
        print(f"peers.py: torch fused Adam unavailable: {e}", file=sys.stderr)
    out["W11"] = (lazy(lambda: w11_step_fns(torch, False)), 1)
    out["W12"] = (lazy(lambda: w12_decode_fns(torch, False)), 1)
    return out


def compiled_workloads(torch, reps, w5_loop, selected):
    """torch_workloads' functions through torch.compile, for the ids in COMPILED."""
    eager = torch_workloads(torch, reps, w5_loop)
    ids = {w[0] for w in selected}
    out = {}
    for wid in COMPILED:
        if wid not in ids:
            continue
        if wid == "W13":  # its own compiled step: loss and optimizer step through torch.compile
            out[wid] = (gpt_workload(torch, True), 1)
            continue
        if wid == "W7":   # the step: Python bookkeeping around a compiled update
            step_fn, update = eager["W7c"]
            cu = torch.compile(update, dynamic=False)
            bc = torch.zeros(2)
            n = [0]

            def adam_c(cu=cu, bc=bc, n=n):
                n[0] += 1
                bc[0] = 1 - B1 ** n[0]
                bc[1] = 1 - B2 ** n[0]
                cu(bc)
            out[wid] = (adam_c, 1)
            continue
        if wid == "W16":   # the loss through torch.compile, its backward by AOTAutograd
            out[wid] = (lazy(lambda: w16_fns(torch, True)), 1)
            continue
        if wid in ("W11", "W12"):   # the step / the decoder, compiled as a whole (see there)
            build = w11_step_fns if wid == "W11" else w12_decode_fns
            out[wid] = (lazy(lambda build=build: build(torch, True)), 1)
            continue
        fn, inner = eager[wid]
        out[wid] = (torch.compile(fn, dynamic=False), inner)
    return out


# -- W16: an embedding's backward (torch only) -----------------------------------

def w16_fns(torch, compiled):
    """tc-bench's W16: 8192 tokens (Zipf-like, tc-bench's generator) looked
    up in a 50257x768 table, loss sum(rows * c), the table's gradient."""
    F = torch.nn.functional
    V, D, N = 50257, 768, 8192
    gen = torch.Generator().manual_seed(16)
    s, ix = 16, []
    for _ in range(N):
        s = (s * 6364136223846793005 + 1442695040888963407) % 2**64
        u = (s >> 11) * 2.0**-53
        ix.append(int(V * u * u * u) % V)
    idx = torch.tensor(ix, dtype=torch.int64)
    w = torch.randn(V, D, generator=gen).requires_grad_()
    c = torch.randn(N, D, generator=gen)

    def loss():
        return (F.embedding(idx, w) * c).sum()
    loss_fn = torch.compile(loss, dynamic=False) if compiled else loss

    def step():
        with torch.enable_grad():
            w.grad = None
            loss_fn().backward()
        return w.grad
    g = step()
    v = ix[0]
    ref = c.double()[torch.tensor(ix) == v].sum(0)
    check(torch.allclose(g[v].double(), ref, atol=1e-4, rtol=1e-4), "torch embedding backward")
    return step


# -- W11, W12: a training step and decoding (torch only) -------------------------

def w11_step_fns(torch, compiled):
    """tc-bench's W11: one training step of the W6 MLP (addmm, tanh GELU,
    cross_entropy, backward, torch.optim.AdamW, the loss read), on fresh
    parameters. With `compiled`, the step (zero_grad, forward, backward,
    optimizer step) goes through torch.compile: inductor compiles the
    forward with its AOT backward and, after the graph break at
    backward(), the optimizer step. Checked: the first step's loss and b2's
    gradient against NumPy in double precision, and b2's AdamW update."""
    F = torch.nn.functional
    gen = torch.Generator().manual_seed(11)
    rn = lambda *s: torch.randn(*s, dtype=torch.float32, generator=gen)
    x = rn(256, 1024)
    w1, b1 = rn(1024, 4096) / 32, rn(4096) * 0.1
    w2, b2 = rn(4096, 1024) / 64, rn(1024) * 0.1
    y = torch.tensor([((i * 13 + 5) * 2654435761) % 1024 for i in range(256)], dtype=torch.int64)
    params = [t.clone().requires_grad_(True) for t in (w1, b1, w2, b2)]
    opt = torch.optim.AdamW(params, lr=W11_LR, betas=(B1, B2), eps=EPS, weight_decay=W11_WD)

    def body():
        opt.zero_grad(set_to_none=True)
        pw1, pb1, pw2, pb2 = params
        logits = torch.addmm(pb2, F.gelu(torch.addmm(pb1, x, pw1), approximate="tanh"), pw2)
        loss = F.cross_entropy(logits, y)
        loss.backward()
        opt.step()
        return loss.detach()
    run = torch.compile(body) if compiled else body

    def step():
        with torch.enable_grad():
            return float(run())

    # the check: step 1 against double precision
    xd, w1d, b1d, w2d, b2d = (t.double().numpy() for t in (x, w1, b1, w2, b2))
    lg = np_gelu(xd @ w1d + b1d) @ w2d + b2d
    lg -= lg.max(axis=1, keepdims=True)
    sm = np.exp(lg)
    sm /= sm.sum(axis=1, keepdims=True)
    yi = y.numpy()
    loss_ref = float(-np.log(sm[np.arange(256), yi]).mean())
    sm[np.arange(256), yi] -= 1
    gb2_ref = sm.sum(axis=0) / 256
    loss = step()
    check(abs(loss - loss_ref) <= 1e-5 + 1e-5 * abs(loss_ref), f"torch mlp step loss {loss} vs {loss_ref}")
    gb2 = params[3].grad.double().numpy()
    check(np.allclose(gb2, gb2_ref, atol=1e-7, rtol=1e-3), "torch mlp step: grad b2")
    upd = b2d * (1 - W11_LR * W11_WD) - W11_LR * gb2 / (np.abs(gb2) + EPS)
    check(np.allclose(params[3].detach().double().numpy(), upd, atol=1e-7, rtol=1e-6), "torch mlp step: AdamW b2")
    return step


class W12Model:
    """tc-bench's W12 in torch: the Llama of examples/llama_model.c with
    stories15M's shapes and random weights (std 0.02, norms 1, lm_head tied
    to the embedding), greedy decoding of W12_TOKENS tokens from BOS over a
    KV cache. Eager attends over the cache rows 0..pos (slices); the
    torch.compile form is gpt-fast's: static shapes (the whole cache with a
    causal mask, the position as a tensor), so one graph serves every
    position."""

    def __init__(self, torch):
        self.torch = torch
        c = W12_CFG
        gen = torch.Generator().manual_seed(12)
        rn = lambda *s: torch.randn(*s, dtype=torch.float32, generator=gen) * 0.02
        d, hd, L = c["dim"], c["hidden"], c["layers"]
        self.embed = rn(c["vocab"], d)
        self.layers = [dict(wq=rn(d, d), wk=rn(d, d), wv=rn(d, d), wo=rn(d, d), wg=rn(hd, d), wu=rn(hd, d),
                            wd=rn(d, hd), an=torch.ones(d), fn=torch.ones(d)) for _ in range(L)]
        self.norm = torch.ones(d)
        h2 = d // c["heads"] // 2
        inv = c["theta"] ** (-2.0 * torch.arange(h2, dtype=torch.float64) / (2 * h2))
        ang = torch.arange(c["seq_len"], dtype=torch.float64)[:, None] * inv[None, :]
        self.cos, self.sin = ang.cos().float(), ang.sin().float()
        self.kc = torch.zeros(L, c["seq_len"], d)
        self.vc = torch.zeros(L, c["seq_len"], d)
        self.mask = torch.full((c["seq_len"], c["seq_len"]), float("-inf")).triu(1)

    def rms(self, x, g):
        return x * self.torch.rsqrt((x * x).mean(-1, keepdim=True) + W12_CFG["eps"]) * g

    def rope(self, x, cos, sin):   # x (heads, hd); Hugging Face's rotate_half
        h2 = x.shape[-1] // 2
        x1, x2 = x[..., :h2], x[..., h2:]
        return self.torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)

    def forward(self, tok, pos, static):
        """Logits (1, vocab) of token tok (a tensor of one id) at pos (an int,
        or a tensor of one index when static: a 0-d index would make dynamo
        read it, a graph break); the projections are F.linear, as nn.Linear."""
        torch, c = self.torch, W12_CFG
        lin = torch.nn.functional.linear
        H, d = c["heads"], c["dim"]
        hd = d // H
        x = torch.nn.functional.embedding(tok, self.embed)   # (1, d)
        cos, sin = self.cos[pos], self.sin[pos]
        for i, ly in enumerate(self.layers):
            h = self.rms(x, ly["an"])
            q = self.rope(lin(h, ly["wq"]).view(H, hd), cos, sin)
            k = self.rope(lin(h, ly["wk"]).view(H, hd), cos, sin)
            v = lin(h, ly["wv"])
            if static:
                self.kc[i].index_copy_(0, pos, k.reshape(1, d))
                self.vc[i].index_copy_(0, pos, v)
                K, V = self.kc[i], self.vc[i]
            else:
                self.kc[i, pos] = k.reshape(d)
                self.vc[i, pos] = v.view(d)
                K, V = self.kc[i, :pos + 1], self.vc[i, :pos + 1]
            T = K.shape[0]
            sc = (q.view(H, 1, hd) @ K.view(T, H, hd).permute(1, 2, 0)) / math.sqrt(hd)   # H 1 T
            if static:
                sc = sc + self.mask[pos]
            o = torch.softmax(sc, -1) @ V.view(T, H, hd).permute(1, 0, 2)                 # H 1 hd
            x = x + lin(o.reshape(1, d), ly["wo"])
            h = self.rms(x, ly["fn"])
            x = x + lin(torch.nn.functional.silu(lin(h, ly["wg"])) * lin(h, ly["wu"]), ly["wd"])
        return lin(self.rms(x, self.norm), self.embed)

    def logits0_ref(self):
        """BOS's logits at position 0 in double (attention over one row is V)."""
        t = lambda a: a.double().numpy()
        def rms(x, g):
            return x / np.sqrt((x * x).mean() + W12_CFG["eps"]) * t(g)
        x = t(self.embed[1])
        for ly in self.layers:
            h = rms(x, ly["an"])
            x = x + (t(ly["wv"]) @ h) @ t(ly["wo"]).T
            h = rms(x, ly["fn"])
            g = t(ly["wg"]) @ h
            x = x + t(ly["wd"]) @ (g / (1 + np.exp(-g)) * (t(ly["wu"]) @ h))
        return t(self.embed) @ rms(x, self.norm)


def w12_decode_fns(torch, compiled):
    m = W12Model(torch)
    if compiled:
        fwd = torch.compile(lambda tok, pos: m.forward(tok, pos, True), dynamic=False)
        arg = lambda p: torch.tensor([p])
    else:
        fwd = lambda tok, pos: m.forward(tok, pos, False)
        arg = lambda p: p

    def decode(keep=None):
        tok = torch.tensor([1])   # BOS
        toks = []
        for pos in range(W12_TOKENS):
            logits = fwd(tok, arg(pos))
            if keep is not None and pos == 0:
                keep.append(logits.clone())
            tok = torch.tensor([int(logits.argmax())])   # read, as a decoder does
            toks.append(int(tok))
        return toks
    first = []
    toks = decode(first)
    check(np.allclose(first[0].view(-1).double().numpy(), m.logits0_ref(), atol=1e-5, rtol=1e-4),
          "torch llama: logits at position 0 against double precision")
    W12_SEEN[compiled] = toks
    if W12_SEEN.get(not compiled) and W12_SEEN[True] != W12_SEEN[False]:
        same = sum(a == b for a, b in zip(W12_SEEN[True], W12_SEEN[False]))
        print(f"peers.py: note: torch W12: eager and torch.compile tokens differ ({same}/{W12_TOKENS} equal)",
              file=sys.stderr)
    return decode


W12_SEEN = {}   # tokens decoded, by compiled (False/True), compared when both ran


def lazy(build):
    """A workload function made on its first call (a warm-up, untimed): W11
    and W12 build, check and (for torch.compile) compile there, and only
    when they are selected."""
    fn = []

    def run():
        if not fn:
            fn.append(build())
        return fn[0]()
    return run


# -- main -------------------------------------------------------------------------

def fmt_time(sec, per_op):
    if per_op:
        return f"{sec * 1e9:.1f} ns"
    if sec < 1e-3:
        return f"{sec * 1e6:.1f} us"
    return f"{sec * 1e3:.3f} ms"


def blas_info():
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "threadpoolctl not installed (pip install threadpoolctl)", []
    info = threadpool_info()
    parts = []
    for i in info:
        parts.append(f"{i.get('internal_api')} {i.get('version')} arch={i.get('architecture', '-')} "
                     f"threads={i.get('num_threads')} ({os.path.basename(i.get('filepath', ''))})")
    return "; ".join(parts) or "no native thread pools found", info


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer runs, for a smoke test")
    ap.add_argument("--only", help="comma list of workload ids (W1 W2 W2p W3 W3p W4 W4b W4c W5 W6 W6m W7 W7f W8 W9 W10 W11 W12 W13 W14 W14b W16)")
    ap.add_argument("--json", help="write results as JSON to this file")
    ap.add_argument("--tc-json", help="tc-bench --json output: use its floor, show its eager times")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="threads for BLAS/torch (default: all)")
    ap.add_argument("--reps", type=int, help="timed runs per workload (default 11, --quick 3)")
    ap.add_argument("--no-torch", action="store_true", help="skip torch even when installed")
    ap.add_argument("--compile", action="store_true",
                    help="also time torch.compile (inductor, CPU) on " + " ".join(COMPILED))
    args = ap.parse_args()

    reps = args.reps or (3 if args.quick else 11)
    w5_loop = 20000 if args.quick else 100000
    triad_n = (8 if args.quick else 32) * 1024 * 1024
    T = max(1, args.threads)
    only = {s.strip().lower() for s in args.only.split(",")} if args.only else None
    selected = [w for w in WORKLOADS if only is None or w[0].lower() in only]
    if not selected:
        raise SystemExit(f"peers.py: --only '{args.only}' names no workload")

    for var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        if var in os.environ:
            print(f"peers.py: warning: {var}={os.environ[var]} is set; run with "
                  "`env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE` to let OpenBLAS pick its kernel", file=sys.stderr)

    try:
        from threadpoolctl import threadpool_limits
        threadpool_limits(T)
    except ImportError:
        pass

    torch = None
    if not args.no_torch:
        try:
            import torch as _torch
            torch = _torch
            torch.set_num_threads(T)
        except Exception as e:  # noqa: BLE001
            print(f"peers.py: torch not available ({type(e).__name__}: {e}); numpy only", file=sys.stderr)

    tc = None
    if args.tc_json:
        with open(args.tc_json) as f:
            tc = json.load(f)

    # floor
    run0 = cpu_snap()
    print("peers.py: measuring the floor ...", file=sys.stderr)
    np_bw1 = numpy_stream_add(triad_n, 1, reps=4 if args.quick else 10)
    np_bwT = numpy_stream_add(triad_n, T, reps=4 if args.quick else 10)
    t_bwT = torch_triad(torch, triad_n, reps=4 if args.quick else 10) if torch else None
    if tc:
        floor_bw, floor_src = tc["floor"]["gbs_all_threads"], f"tc-bench triad, {tc['threads']} threads"
    else:
        floor_bw, floor_src = np_bwT, f"numpy stream add, {T} threads"

    rng = np.random.default_rng(0)
    impls = {}
    print("peers.py: numpy workloads ...", file=sys.stderr)
    impls["numpy"] = numpy_workloads(rng, reps, w5_loop)
    if torch:
        print("peers.py: torch workloads ...", file=sys.stderr)
        with torch.no_grad():
            impls["torch"] = torch_workloads(torch, reps, w5_loop)

    if torch and args.compile:
        print("peers.py: torch.compile workloads (compiling in the warm-up runs) ...", file=sys.stderr)
        with torch.no_grad():
            impls["torch.compile"] = compiled_workloads(torch, reps, w5_loop, selected)

    results = {}
    for lib, fns in impls.items():
        ctx = torch.no_grad() if lib.startswith("torch") else None
        if ctx:
            ctx.__enter__()
        for wid, *_ in selected:
            if wid not in fns:
                continue
            fn, inner = fns[wid]
            print(f"peers.py: {lib} {wid} ...", file=sys.stderr)
            c0 = cpu_snap()
            med, samples = median_time(fn, reps, warmup=2, inner=inner)
            others, steal = cpu_others(c0, cpu_snap())
            results.setdefault(wid, {})[lib] = {"median_s": med, "samples_s": samples,
                                                "min_s": min(samples), "max_s": max(samples),
                                                "cpu_others": others, "cpu_steal": steal}
        if ctx:
            ctx.__exit__(None, None, None)
        fns.clear()  # free the inputs before the next library

    run_others, run_steal = cpu_others(run0, cpu_snap())
    blas, blas_raw = blas_info()
    tc_by_id = {w["id"]: w for w in tc["workloads"]} if tc else {}

    print(f"\npeers: numpy {np.__version__}" + (f", torch {torch.__version__}" if torch else ", no torch")
          + f"; {T} threads for BLAS/torch (numpy elementwise is 1 thread); median of {reps} runs after 2 warm-ups")
    print(f"numpy BLAS: {blas}")
    print(f"floor: numpy stream add (np.add out=, 24 B/elem): 1 thread {np_bw1:.1f} GB/s, {T} threads {np_bwT:.1f} GB/s"
          + (f"; torch triad {T} threads {t_bwT:.1f} GB/s" if torch else ""))
    print(f"floors below use {floor_bw:.1f} GB/s ({floor_src})\n")

    cols = ["numpy", "torch"] if torch else ["numpy"]
    if "torch.compile" in impls:
        cols.append("torch.compile")
    hdr = f"{'id':<4} {'workload':<31} {'bytes':>9} {'floor':>10}"
    if tc:
        hdr += f" {'tc eager':>11} {'ratio':>7}"
    for c in cols:
        hdr += f" {c:>11} {'ratio':>7} {'achieved':>14}"
    print(hdr)
    print("-" * len(hdr))
    for wid, name, nbytes, flops in selected:
        per_op = wid == "W5"
        floor_s = nbytes / (floor_bw * 1e9) if nbytes else 0
        line = f"{wid:<4} {name:<31} {(f'{nbytes / 1e6:.1f} MB' if nbytes else '-'):>9} " \
               f"{(fmt_time(floor_s, per_op) if floor_s else '-'):>10}"

        def cell(sec):
            ratio = f"{sec / floor_s:.2f}x" if floor_s else "-"
            return f" {fmt_time(sec, per_op):>11} {ratio:>7}"
        if tc:
            tw = tc_by_id.get(wid)
            if tw and "eager" in tw:
                line += cell(tw["eager"]["median_s"])
            else:
                line += f" {'-':>11} {'-':>7}"
        for c in cols:
            r = results.get(wid, {}).get(c)
            if not r:
                line += f" {'-':>11} {'-':>7} {'-':>14}"
                continue
            sec = r["median_s"]
            if flops:
                ach = f"{flops / sec / 1e9:.1f} GFLOP/s"
            elif nbytes:
                ach = f"{nbytes / sec / 1e9:.1f} GB/s"
            else:
                ach = f"{1 / sec / 1e6:.2f} Mop/s"
            line += cell(sec) + f" {ach:>14}"
        print(line)

    for wid, *_ in selected:
        for c in cols:
            r = results.get(wid, {}).get(c)
            if r and r["cpu_others"] is not None and r["cpu_others"] + r["cpu_steal"] > 0.10:
                print(f"note: {c} {wid}: other processes used {100 * r['cpu_others']:.0f}% of the CPUs during "
                      "its timed runs; its figure is not reliable")
    if run_others is not None:
        busy = " -- the machine was busy: rerun when it is quiet" if run_others + run_steal > 0.10 else ""
        print(f"machine: other processes used {100 * run_others:.0f}% of the CPUs during the whole run, "
              f"{100 * run_steal:.0f}% was stolen by the hypervisor{busy}")

    print("\nlegend:\n"
          "  bytes     minimum bytes the workload must move (inputs once + outputs once; W4 counts only x)\n"
          "  floor     bytes / floor bandwidth (all threads): the memory system's time for those bytes\n"
          "  ratio     time / floor (1.00x = bandwidth bound); W5 is ns per op, W6 compares GFLOP/s\n"
          "  numpy     plain NumPy as a user writes it (temporaries included); elementwise ufuncs run on\n"
          "            one thread, matmul on OpenBLAS with the threads shown\n"
          "  torch     PyTorch CPU eager, no autograd (W13: a training step, with autograd); W7f is\n"
          "            torch.optim.Adam(fused=True)\n"
          "  torch.compile  the torch function through torch.compile (inductor), after warm-ups that compile\n"
          "            it; W7 passes the bias corrections as tensors so one graph serves every step;\n"
          "            W13 compiles the loss (forward; backward by AOTAutograd) and optimizer.step\n"
          "  W4c/W7f   peer-only rows: the fused form of W4 / W7 that a fusing runtime should approach\n"
          "  W11       torch only: the MLP step with autograd and torch.optim.AdamW; torch.compile compiles\n"
          "            the step function (forward + AOT backward, then the optimizer step)\n"
          "  W12       torch only: 64 greedy tokens of a stories15M-shaped Llama over a KV cache; torch.compile\n"
          "            runs the static-shape (masked, gpt-fast style) decode step, one graph for every position")

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"tool": "peers.py", "numpy": np.__version__, "cpu_others": run_others,
                       "cpu_steal": run_steal,
                       "torch": torch.__version__ if torch else None, "threads": T, "reps": reps,
                       "blas": [{k: str(v) for k, v in i.items()} for i in blas_raw],
                       "floor": {"numpy_add_gbs_1thread": np_bw1, "numpy_add_gbs_all_threads": np_bwT,
                                 "torch_triad_gbs": t_bwT, "used_gbs": floor_bw, "used_source": floor_src},
                       "workloads": [{"id": w, "name": n, "bytes": b, "flops": fl, **results.get(w, {})}
                                     for w, n, b, fl in selected]}, f, indent=2)


if __name__ == "__main__":
    main()
