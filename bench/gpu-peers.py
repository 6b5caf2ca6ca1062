#!/usr/bin/env python3
"""gpu-peers.py -- tc-gpu-bench's workloads in PyTorch on the CUDA device,
eager and through torch.compile, with the same method: medians of N runs,
each ended by torch.cuda.synchronize(); the device copy (copy_ of 16M f32)
as the floor, and the eager launch overhead per op (add_ on one element).

    python3 bench/gpu-peers.py [--reps N] [--no-compile]
"""
import argparse
import statistics
import time

import torch

M16 = 16 << 20


def median_ms(fn, reps, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def adam_step(p, g, m, v, t):
    b1, b2, lr, eps = 0.9, 0.999, 1e-3, 1e-8
    m.mul_(b1).add_(g * (1 - b1))
    v.mul_(b2).add_(g * g * (1 - b2))
    mhat = m / (1 - b1 ** t)
    vhat = v / (1 - b2 ** t)
    p.sub_(mhat / (vhat.sqrt() + eps) * lr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=11)
    ap.add_argument("--no-compile", action="store_true")
    a = ap.parse_args()
    dev = "cuda"
    src = torch.randn(M16, device=dev)
    dst = torch.empty_like(src)
    copy_ms = median_ms(lambda: dst.copy_(src), a.reps)
    floor = 2 * M16 * 4 / (copy_ms * 1e-3) / 1e9
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}: "
          f"device copy {floor:.1f} GB/s")

    x1 = torch.randn(M16, device=dev)
    x2 = torch.randn(4096, 4096, device=dev)
    x3 = torch.randn(8192, 1024, device=dev)
    g3, b3 = torch.randn(1024, device=dev), torch.randn(1024, device=dev)
    p, g, m = (torch.randn(M16, device=dev) for _ in range(3))
    v = torch.rand(M16, device=dev)
    step = [0]

    def w7():
        step[0] += 1
        adam_step(p, g, m, v, step[0])

    work = [
        ("W1", lambda: torch.nn.functional.gelu(x1, approximate="tanh"), 8 * M16),
        ("W2", lambda: torch.softmax(x2, -1), 8 * M16),
        ("W3", lambda: torch.nn.functional.layer_norm(x3, (1024,), g3, b3, 1e-5),
         8 * 8192 * 1024),
        ("W7", w7, 28 * M16),
    ]
    for wid, fn, nbytes in work:
        rows = [("eager", fn)]
        if not a.no_compile:
            rows.append(("torch.compile", torch.compile(fn)))
        for mode, f in rows:
            ms = median_ms(f, a.reps)
            gbs = nbytes / (ms * 1e-3) / 1e9
            print(f"{wid} {mode:14s} {ms:9.3f} ms {gbs:8.1f} GB/s "
                  f"{100 * gbs / floor:5.0f}% of copy")

    one = torch.zeros(1, device=dev)
    n = 2000
    one.add_(1.0)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        one.add_(1.0)
    torch.cuda.synchronize()
    print(f"launch overhead: {(time.perf_counter() - t0) / n * 1e6:.2f} us "
          f"per eager op (add_ on 1 element, {n} ops)")


if __name__ == "__main__":
    main()
