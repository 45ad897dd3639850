"""Where the host time of an lsa_native.torch forward+backward on CUDA goes (issue 18: 684 µs per
`lt.lsa_forward(E, W, W).sum().backward()` at B = 4 against 47 + 96 µs for the two lsa calls it
makes). Each row removes one layer of the route, so the differences locate the cost:

  direct        lsa.forward + lsa.vjp on detached tensors (the two native calls, nothing else)
  prepared      the same through a bare autograd.Function (operands prepared once, no checks)
  operands      lt's _operand conversions + _cuda_ready alone (3 + 4 tensors)
  lt            lt.lsa_forward(...).sum().backward() (the measured route)
  lt, 1 thread  the same with torch.autograd.set_multithreading_enabled(False): the backward in
                the calling thread instead of autograd's CUDA worker thread
  torch ops     .sum().backward() of a pure torch function of the same shape (autograd's own cost)

Medians of 5 groups of 200 calls, one synchronize per group; B = 4 so the kernels are negligible.
A profile of the lt row (torch.profiler, CPU side) goes to $OUT/torch_host_path_profile.txt.
For a GPU machine: python bench/gpu/torch_host_path.py [--out DIR]"""
import argparse
import os
import statistics
import time

import torch

import lsa_native.torch as lt
from lsa_native import lsa

B, d, N = 4, 20, 100


def per_call_us(fn, calls=200, groups=5):
    fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(groups):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(out)


class Prepared(torch.autograd.Function):
    """lsa.forward / lsa.vjp with no conversion layer: the floor of an autograd wrapper."""

    @staticmethod
    def forward(ctx, E, W_pv, W_kq):
        ctx.save_for_backward(E, W_pv, W_kq)
        return lsa.forward(E.detach(), W_pv.detach(), W_kq.detach(), device="cuda")

    @staticmethod
    def backward(ctx, d_F):
        E, W_pv, W_kq = (t.detach() for t in ctx.saved_tensors)
        d_pv, d_kq, d_E = lsa.vjp(E, W_pv, W_kq, d_F.contiguous(), with_input_grad=False,
                                  device="cuda")
        return None, d_pv, d_kq


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    args = p.parse_args()
    E = torch.randn((B, d + 1, N + 1), device="cuda")
    W = (torch.randn((d + 1, d + 1), device="cuda") / (d + 1))
    Wg = W.clone().requires_grad_()
    d_F = torch.ones_like(E)

    def direct():
        lsa.forward(E, W, W)
        lsa.vjp(E, W, W, d_F, with_input_grad=False)

    def operands():
        lt._lsa_args(E, Wg, W)
        lt._lsa_args(E, Wg, W)
        lt._operand(d_F, "d_F", E)

    def single_threaded():
        with torch.autograd.set_multithreading_enabled(False):
            lt.lsa_forward(E, Wg, W).sum().backward()

    rows = [
        ("direct: lsa.forward + lsa.vjp", direct),
        ("prepared: bare autograd.Function", lambda: Prepared.apply(E, Wg, W).sum().backward()),
        ("operands: _operand x7 + _cuda_ready x2", operands),
        ("lt: lt.lsa_forward(...).sum().backward()", lambda: lt.lsa_forward(E, Wg, W).sum().backward()),
        ("lt, backward in the calling thread", single_threaded),
        ("torch ops: (W E).sum().backward()", lambda: (Wg @ E).sum().backward()),
    ]
    print(f"host microseconds per forward+backward, B = {B}, d = {d}, N = {N}, "
          f"{torch.cuda.get_device_name()}")
    print("| route | µs |\n| --- | --- |")
    for name, fn in rows:
        print(f"| {name} | {per_call_us(fn):.1f} |")
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            lt.lsa_forward(E, Wg, W).sum().backward()
        torch.cuda.synchronize()
    table = prof.key_averages().table(sort_by="cpu_time_total", row_limit=25, max_name_column_width=50)
    with open(os.path.join(args.out, "torch_host_path_profile.txt"), "w") as f:
        f.write(table)
    print("\n".join(table.splitlines()[:16]))


if __name__ == "__main__":
    main()
