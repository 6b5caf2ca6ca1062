#!/usr/bin/env python3
"""gpu-peers.py -- tc-gpu-bench's workloads in PyTorch on the CUDA device,
eager and through torch.compile, with the same method: medians of N runs,
each ended by torch.cuda.synchronize(); the device copy (copy_ of 16M f32)
as the floor, and the eager launch overhead per op (add_ on one element).
W7's compiled form takes the step's bias corrections as 0-d tensors, so
that torch.compile traces one graph for every step (a Python number that
changes each call would recompile it), as bench/peers.py does on the CPU.

    python3 bench/gpu-peers.py [--reps N] [--no-compile] [--device D]

--device cpu runs the same on the CPU (to check the script without a GPU).
"""
import argparse
import statistics
import time

import torch

M16 = 16 << 20
DEVICE = ["cuda"]


def sync():
    if DEVICE[0] == "cuda":
        torch.cuda.synchronize()


def median_ms(fn, reps, warmup=3):
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


B1, B2, LR, EPS = 0.9, 0.999, 1e-3, 1e-8


def adam_update(p, g, m, v, bc1, bc2):
    """tc-gpu-bench's W7 (the order of its ops); bc1, bc2: 1 - b ** t."""
    m.mul_(B1).add_(g * (1 - B1))
    v.mul_(B2).add_(g * g * (1 - B2))
    mhat = m / bc1
    vhat = v / bc2
    p.sub_(mhat / (vhat.sqrt() + EPS) * LR)


def gelu_prims(x):
    """tc-gpu-bench's W1p: GELU from 9 primitive ops."""
    u = (x + (x * x * x) * 0.044715) * 0.7978845608028654
    return (x * 0.5) * (torch.tanh(u) + 1.0)


def softmax_prims(x):
    """tc-gpu-bench's W2p: softmax as users write it."""
    e = torch.exp(x - x.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=11)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    dev = DEVICE[0] = a.device
    src = torch.randn(M16, device=dev)
    dst = torch.empty_like(src)
    copy_ms = median_ms(lambda: dst.copy_(src), a.reps)
    floor = 2 * M16 * 4 / (copy_ms * 1e-3) / 1e9
    name = torch.cuda.get_device_name() if dev == "cuda" else dev
    print(f"torch {torch.__version__} on {name}: "
          f"device copy {floor:.1f} GB/s", flush=True)
    one = torch.zeros(1, device=dev)
    n = 2000
    one.add_(1.0)
    sync()
    t0 = time.perf_counter()
    for _ in range(n):
        one.add_(1.0)
    sync()
    print(f"launch overhead: {(time.perf_counter() - t0) / n * 1e6:.2f} us "
          f"per eager op (add_ on 1 element, {n} ops)", flush=True)


    x1 = torch.randn(M16, device=dev)
    x2 = torch.randn(4096, 4096, device=dev)
    x3 = torch.randn(8192, 1024, device=dev)
    x15 = torch.randn(64, 32000, device=dev)
    g16 = torch.randn(8192, 768, device=dev)
    i16 = torch.randint(0, 50257, (8192, 1), device=dev).expand(8192, 768)
    i16 = i16.contiguous()
    z16 = torch.zeros(50257, 768, device=dev)
    g3, b3 = torch.randn(1024, device=dev), torch.randn(1024, device=dev)
    p, g, m = (torch.randn(M16, device=dev) for _ in range(3))
    v = torch.rand(M16, device=dev)
    step = [0]
    bc = torch.ones(2, device=dev)

    def w7(update):
        def run():
            step[0] += 1
            bc[0] = 1 - B1 ** step[0]
            bc[1] = 1 - B2 ** step[0]
            update(p, g, m, v, bc[0], bc[1])
        return run

    work = [
        ("W1", lambda f: lambda: f(x1),
         lambda x: torch.nn.functional.gelu(x, approximate="tanh"), 8 * M16),
        ("W2", lambda f: lambda: f(x2), lambda x: torch.softmax(x, -1),
         8 * M16),
        ("W3", lambda f: lambda: f(x3, g3, b3),
         lambda x, g, b: torch.nn.functional.layer_norm(x, (1024,), g, b,
                                                        1e-5),
         8 * 8192 * 1024),
        ("W7", w7, adam_update, 28 * M16),
        ("W1p", lambda f: lambda: f(x1), gelu_prims, 8 * M16),
        ("W2p", lambda f: lambda: f(x2), softmax_prims, 8 * M16),
        ("W14b", lambda f: lambda: f(x2), lambda x: torch.cumsum(x, -1),
         8 * M16),
        ("W15", lambda f: lambda: f(x15),
         lambda x: torch.topk(x, 50, -1, True, True).indices, 4 * 64 * 32000),
        ("W16", lambda f: lambda: f(z16, i16, g16),
         lambda z, i, g: z.scatter_add(0, i, g), 20 * 8192 * 768),
    ]
    for wid, bind, fn, nbytes in work:
        rows = [("eager", bind(fn))]
        if not a.no_compile:
            rows.append(("torch.compile", bind(torch.compile(fn))))
        for mode, f in rows:
            ms = median_ms(f, a.reps)
            gbs = nbytes / (ms * 1e-3) / 1e9
            print(f"{wid} {mode:14s} {ms:9.3f} ms {gbs:8.1f} GB/s "
                  f"{100 * gbs / floor:5.0f}% of copy", flush=True)


if __name__ == "__main__":
    main()
