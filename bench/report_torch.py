"""PyTorch training loop with pure-PyTorch attention vs the wrapped native one (lsa_native.torch):
the same Adam loop (forward, ½-MSE loss, backward, optimizer step) on a fixed batch, steps/s as
medians over the steps of one run, and the wrapper overhead: time inside the autograd Functions
but outside the native calls, as a percentage of the native step.

    python bench/report_torch.py [--steps 7] [--lsa-batch 8192] [--ka-batch 30000] [--device cuda]

With --device cuda both loops run on CUDA tensors (the native one on the CUDA backend); each timed
step ends with a synchronize, and the overhead and floor columns (CPU-only instruments) are left out.

LSA: d = 20, N = 100, B = 8192, full forward (ZFB (3.3)) + backward; pure PyTorch both in the
papers' attention-matrix form E + W^PV E (Eᵀ W^KQ E)/N (O(N² d) per prompt) and in the best
Gram-first form E + (W^PV G W^KQ) E. Kernel attention: CCS size d = 5, n = 30, L = 3, one head,
B = 30000, softmax and exp.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

import lsa_native as ln
import lsa_native.torch as lt
from lsa_native import _core


class TorchLSA(torch.nn.Module):
    """The same parameters as lt.LinearSelfAttention(output='full'), pure PyTorch."""

    def __init__(self, native: lt.LinearSelfAttention, gram_first: bool):
        super().__init__()
        self.W_pv = torch.nn.Parameter(native.W_pv.detach().clone())
        self.W_kq = torch.nn.Parameter(native.W_kq.detach().clone())
        self.gram_first = gram_first

    def forward(self, E):
        N = E.shape[-1] - 1
        if self.gram_first:
            G = E @ E.transpose(1, 2) / N
            return E + (self.W_pv @ G @ self.W_kq) @ E
        return E + self.W_pv @ E @ (E.transpose(1, 2) @ self.W_kq @ E) / N


class TorchKA(torch.nn.Module):
    """The same parameters as lt.KernelAttention (sparse, one head), pure PyTorch (CCS (3))."""

    def __init__(self, native: lt.KernelAttention):
        super().__init__()
        for name in ("A", "r", "B", "C"):
            setattr(self, name, torch.nn.Parameter(getattr(native, name).detach().clone()))
        self.act = native.activations[0]

    def forward(self, Z):
        d, n = Z.shape[1] - 1, Z.shape[2] - 1
        V = lt.sparse_value(self.A, self.r)
        for l in range(V.shape[0]):
            X = Z[:, :d]
            S = ((self.B[l, 0] @ X).transpose(1, 2) @ (self.C[l, 0] @ X))[:, :n, :]
            H = torch.softmax(S, dim=1) if self.act == "softmax" else torch.exp(S)
            Z = Z + V[l, 0] @ (Z[:, :, :n] @ H)
        return -Z[:, -1, -1]


class FullRouteKA(torch.nn.Module):
    """lt.KernelAttention's prediction through the full Z_L (lt.kernel_attention, the native
    forward and vjp of every column) instead of kernel_attention_predict (the last layer's query
    column alone): what the module did before predict_vjp."""

    def __init__(self, native: lt.KernelAttention):
        super().__init__()
        self.native = native

    def forward(self, Z):
        m = self.native
        return -lt.kernel_attention(Z, m.value(), m.B, m.C, m.activations)[:, -1, -1]


class Timers:
    """Wall time inside the autograd Functions' forward/backward and inside the native _core calls
    (wrapped in place for the measurement)."""

    def __init__(self):
        self.wrapper = 0.0
        self.native = 0.0
        self._undo = []

    def _wrap(self, owner, name, attr):
        fn = getattr(owner, name)
        raw = fn.__func__ if isinstance(fn, staticmethod) else fn

        def timed(*a, **k):
            t0 = time.perf_counter()
            try:
                return raw(*a, **k)
            finally:
                setattr(self, attr, getattr(self, attr) + time.perf_counter() - t0)

        setattr(owner, name, staticmethod(timed) if isinstance(owner, type) else timed)
        self._undo.append((owner, name, fn))

    def __enter__(self):
        for cls in (lt._LSAForward, lt._LSAPredict, lt._KernelAttention,
                    lt._KernelAttentionPredict):
            for m in ("forward", "backward"):
                self._wrap(cls, m, "wrapper")
        for name in ("lsa_forward", "lsa_vjp", "lsa_predict", "kernel_attention_forward",
                     "kernel_attention_vjp", "kernel_attention_predict_vjp"):
            self._wrap(_core, name, "native")
        return self

    def __exit__(self, *exc):
        for owner, name, fn in reversed(self._undo):
            setattr(owner, name, fn)


CLOCK = time.perf_counter  # --clock cpu: time.process_time (CPU seconds of all threads)
SYNC = lambda: None  # --device cuda: torch.cuda.synchronize


def adam_step(model, x, y):
    """One step of the benchmarked loop as a closure: forward, ½-MSE of the query prediction (the
    last entry of a full output), backward, Adam (lr 1e-3)."""
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step():
        out = model(x)
        pred = out[:, -1, -1] if out.ndim == 3 else out
        loss = 0.5 * (pred - y).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def train_steps(model, x, y, steps):
    """Median seconds per Adam step (one warm-up step first)."""
    step = adam_step(model, x, y)
    step()
    SYNC()
    times = []
    for _ in range(steps):
        t0 = CLOCK()
        step()
        SYNC()
        times.append(CLOCK() - t0)
    return statistics.median(times)


def without_native_kernels(fn):
    """fn() with the native LSA calls replaced by no-ops: the loop's cost outside the kernels
    (autograd, allocation and first touch of the outputs, the loss, Adam), a floor for any kernel."""
    saved = {name: getattr(_core, name) for name in ("lsa_forward", "lsa_vjp")}

    def forward_stub(E, W_pv, W_kq, out=None, device="auto"):
        return np.empty_like(E) if out is None else out  # the output's allocation, no kernel

    def vjp_stub(E, W_pv, W_kq, d_F, with_input_grad=True, device="auto"):
        # zero gradients, so that Adam keeps the parameters finite
        return (np.zeros_like(W_pv), np.zeros_like(W_kq),
                np.empty_like(E) if with_input_grad else None)

    try:
        _core.lsa_forward = forward_stub
        _core.lsa_vjp = vjp_stub
        return fn()
    finally:
        for name, f in saved.items():
            setattr(_core, name, f)


def overhead(model, x, y, steps):
    """Percent of the loop's wall time spent in the wrapper outside the native calls."""
    with Timers() as t:
        t0 = time.perf_counter()
        train_steps(model, x, y, steps)
        wall = time.perf_counter() - t0
    return 100.0 * (t.wrapper - t.native) / wall


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=7)
    p.add_argument("--lsa-batch", type=int, default=8192)
    p.add_argument("--ka-batch", type=int, default=30000)
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="cpu: CPU seconds of all threads (steadier on a shared, loaded machine)")
    p.add_argument("--lsa-only", action="store_true")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = p.parse_args(argv)
    global CLOCK, SYNC
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    dev = torch.device(args.device)
    on_cpu = args.device == "cpu"
    if not on_cpu:
        SYNC = torch.cuda.synchronize
    rng = np.random.default_rng(0)
    print(f"lsa_native {ln.__version__} ({_core.cpu_kernel_isa()}, {ln.num_threads()} threads), "
          f"torch {torch.__version__} ({torch.get_num_threads()} threads), float32, "
          f"median of {args.steps} Adam steps after 1 warm-up, {args.clock} clock, device {dev}"
          + ("" if on_cpu else f" ({torch.cuda.get_device_name()})"))
    print("| model | size | pure PyTorch steps/s | native steps/s | speedup | wrapper overhead |")
    print("| --- | --- | --- | --- | --- | --- |")

    d, N, B = 20, 100, args.lsa_batch
    batch = ln.data.linear_regression_prompts(rng, B, d, N, dtype=np.float32)
    E, y = torch.from_numpy(batch.E).to(dev), torch.from_numpy(batch.y_q).to(dev)
    native = lt.LinearSelfAttention(d, output="full", seed=0).to(dev)
    t_native = train_steps(native, E, y, args.steps)
    ovh = (f"{overhead(lt.LinearSelfAttention(d, output='full', seed=0), E, y, args.steps):.1f}%"
           if on_cpu else "")
    for form, gram in (("attention-matrix form", False), ("Gram-first form", True)):
        t_torch = train_steps(TorchLSA(native, gram), E, y, args.steps)
        print(f"| LSA full fwd+bwd vs PyTorch {form} | d={d} N={N} B={B} | {1 / t_torch:.2f} | "
              f"{1 / t_native:.2f} | {t_torch / t_native:.1f}x | {ovh} |")
    if on_cpu:
        t_floor = without_native_kernels(lambda: train_steps(
            lt.LinearSelfAttention(d, output="full", seed=0), E, y, args.steps))
        print(f"| (LSA loop with no-op native kernels: the floor) | d={d} N={N} B={B} | | "
              f"{1 / t_floor:.2f} | at most {t_torch / t_floor:.1f}x | |")
    if args.lsa_only:
        return 0

    d, n, L = 5, 30, 3
    Bk = args.ka_batch
    Z0 = rng.standard_normal((Bk, d + 1, n + 1)).astype(np.float32)
    Z0[:, :d] /= np.linalg.norm(Z0[:, :d], axis=1, keepdims=True)  # unit-sphere covariates (H.1)
    Z0[:, d, n] = 0
    yk = torch.from_numpy(rng.standard_normal(Bk).astype(np.float32)).to(dev)
    Z0 = torch.from_numpy(Z0).to(dev)
    for act in ("softmax", "exp"):
        native = lt.KernelAttention(d, L, 1, act, seed=0).to(dev)
        t_native = train_steps(native, Z0, yk, args.steps)
        ovh = (f"{overhead(lt.KernelAttention(d, L, 1, act, seed=0), Z0, yk, args.steps):.1f}%"
               if on_cpu else "")
        t_torch = train_steps(TorchKA(native), Z0, yk, args.steps)
        print(f"| kernel attention ({act}) | d={d} n={n} L={L} B={Bk} | {1 / t_torch:.2f} | "
              f"{1 / t_native:.2f} | {t_torch / t_native:.1f}x | {ovh} |")
        t_full = train_steps(FullRouteKA(lt.KernelAttention(d, L, 1, act, seed=0).to(dev)), Z0, yk,
                             args.steps)
        print(f"| (the same through the full Z_L: kernel_attention + vjp) | d={d} n={n} L={L} "
              f"B={Bk} | {1 / t_torch:.2f} | {1 / t_full:.2f} | {t_torch / t_full:.1f}x | |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
