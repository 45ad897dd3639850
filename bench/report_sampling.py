"""Benchmark of training LSA on fresh prompts (issue 8): SGD steps per second at (d=5, N=20,
B=4096) and (d=20, N=100, B=1024), and the cost of one variate (issue 22), all in one run.

Drivers compared per size (float32, one SGD step = fresh prompts + loss + gradients + update):
  fused tokens   spec.lsa_loss_and_grad(method="tokens"): prompts generated in cache, E never stored
  fused wishart  spec.lsa_loss_and_grad(method="wishart"): Bartlett sufficient statistics, O(d²)/prompt
  native+kernel  spec.sample_embedding (native sampler writes E) then lsa.loss_and_grad
  numpy driver   data.linear_regression_prompts (numpy rng) then lsa.loss_and_grad (train.sgd_lsa's path)
  pre-sampled    lsa.loss_and_grad alone on one fixed batch (the kernel's ceiling)
  torch loop     torch.randn sampling + LSA prediction + autograd + torch.optim.SGD (if installed)

Variates (one thread, preallocated outputs, n = 2^20 per call so nothing leaves L3): ns and
cycles per variate of uniforms, normals and gammas (shape 0.5: the boost path; 2.5; 10), float32
and float64, with same-run ratios vs numpy's Generator (PCG64: random, standard_normal,
standard_gamma) and torch (rand, randn, _standard_gamma). Times are CPU seconds of the process
(time.process_time; every library runs on one thread), which a shared machine disturbs least. Cycles = ns x the core clock, which this
script cannot read from counters on every machine: --ghz gives it (default: /proc/cpuinfo's MHz).

    python bench/report_sampling.py [--repeats 7] [--threads 2] [--variates-only] [--ghz 3.0]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

# torch's OpenMP threads spin while waiting; on a shared (oversubscribed) machine that made the torch
# loop 8x slower in our runs. Passive waiting is the fair setting there (set before torch loads).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from timing import median_seconds  # noqa: E402

import lsa_native as ln
from lsa_native import data, lsa
from lsa_native import _core
from lsa_native.sampling import LinearPrompts
from lsa_native.sampling.random import STREAMS

SIZES = [(5, 20, 4096), (20, 100, 1024)]
LR = 1e-3


def _sgd(step_fn, W):
    state = {"k": 0}

    def run():
        loss, g_pv, g_kq = step_fn(state["k"], W[0], W[1])
        W[0] -= LR * g_pv
        W[1] -= LR * g_kq
        state["k"] += 1
    return run


def torch_prompts(torch, d, N, B):
    """(E, y_q) of B fresh ZFB 3.3 prompts drawn by torch.randn (w ~ N(0, I), x ~ N(0, I))."""
    w = torch.randn(B, d)
    X = torch.randn(B, N + 1, d)  # N context covariates and the query
    y = torch.einsum("bnd,bd->bn", X, w)
    E = torch.empty(B, d + 1, N + 1)               # [B, d+1, N+1]   [ZFB (3.4)]
    E[:, :d, :] = X.transpose(1, 2)
    E[:, d, :N] = y[:, :N]
    E[:, d, N] = 0
    return E, y[:, N]


def torch_gram_first_loss(E, y_q, W_pv, W_kq):
    """½-MSE of the Gram-first prediction ŷ = p^T G q [ZFB (3.6)] (O(N d²) per prompt)."""
    N, d = E.shape[-1] - 1, E.shape[1] - 1
    G = E @ E.transpose(1, 2) / N
    q = W_kq @ E[:, :, N:]                     # [B, d+1, 1]
    y_hat = (G @ q).squeeze(-1) @ W_pv[d]       # p^T G q   [ZFB (3.6)], [B]
    return 0.5 * ((y_hat - y_q) ** 2).mean()


def torch_loop(d, N, B, loss_fn=None, lr=LR):
    """One SGD step on fresh torch.randn prompts: ``loss_fn(E, y_q, W_pv, W_kq)`` (default
    :func:`torch_gram_first_loss`), autograd, torch.optim.SGD; None without torch."""
    try:
        import torch
    except ImportError:
        return None
    loss_fn = loss_fn or torch_gram_first_loss
    torch.set_num_threads(ln.num_threads())
    W_pv = torch.nn.Parameter(0.01 * torch.randn(d + 1, d + 1))
    W_kq = torch.nn.Parameter(0.01 * torch.randn(d + 1, d + 1))
    opt = torch.optim.SGD([W_pv, W_kq], lr=lr)

    def run():
        E, y_q = torch_prompts(torch, d, N, B)
        loss = loss_fn(E, y_q, W_pv, W_kq)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return run


def _core_ghz() -> float:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("cpu MHz"):
                return float(line.split(":")[1]) / 1000
    except OSError:
        pass
    return float("nan")


def _variate_drivers(dt):
    """name -> (native, numpy, torch or None) callables filling preallocated outputs of n variates."""
    n = VARIATE_N
    out = np.empty(n, dt)
    addr = (3, 0, 0, STREAMS["user"], 0)
    g = np.random.default_rng(0)
    try:
        import torch
        tt = torch.empty(n, dtype=torch.float32 if dt == np.float32 else torch.float64)
    except ImportError:
        torch = None
    drivers = {
        "uniform": (lambda: _core.random_uniforms(*addr, out), lambda: g.random(n, dtype=dt, out=out),
                    (lambda: torch.rand(n, out=tt)) if torch else None),
        "normal": (lambda: _core.random_normals(*addr, out),
                   lambda: g.standard_normal(n, dtype=dt, out=out),
                   (lambda: torch.randn(n, out=tt)) if torch else None),
    }
    for shape in GAMMA_SHAPES:
        shapes_t = torch.full((n,), shape, dtype=tt.dtype) if torch else None
        drivers[f"gamma({shape})"] = (
            lambda a=shape: _core.random_gammas(*addr, a, out),
            lambda a=shape: g.standard_gamma(a, n, dtype=dt, out=out),
            (lambda s=shapes_t: torch._standard_gamma(s)) if torch else None)
    return drivers


VARIATE_N = 2**20
GAMMA_SHAPES = (0.5, 2.5, 10.0)


def variates_table(repeats: int, ghz: float) -> None:
    """ns and cycles per variate, one thread, vs numpy and torch in the same run."""
    ghz = ghz or _core_ghz()
    threads = ln.num_threads()
    ln.set_num_threads(1)
    try:
        import torch
        torch_threads = torch.get_num_threads()
        torch.set_num_threads(1)
    except ImportError:
        torch = None
    print(f"\nVariates, 1 thread, n = {VARIATE_N} per call, table {ln.cpu_kernel_isa()}, "
          f"cycles at {ghz:.3f} GHz")
    print("| variate | dtype | ns | cycles | numpy cycles | x numpy | torch cycles | x torch |")
    print("|---|---|---|---|---|---|---|---|")
    for dt in (np.float32, np.float64):
        for name, (nat, npy, tor) in _variate_drivers(dt).items():
            per = [median_seconds(f, repeats, clock=time.process_time) / VARIATE_N * 1e9 if f else float("nan")
                   for f in (nat, npy, tor)]
            cyc = [p * ghz for p in per]
            print(f"| {name} | {np.dtype(dt).name} | {per[0]:.2f} | {cyc[0]:.1f} | {cyc[1]:.1f} | "
                  f"{per[1] / per[0]:.1f}x | {cyc[2]:.1f} | {per[2] / per[0]:.1f}x |")
    ln.set_num_threads(threads)
    if torch:
        torch.set_num_threads(torch_threads)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=0, help="threads for lsa_native and torch (0: default)")
    parser.add_argument("--variates-only", action="store_true", help="only the cost-per-variate table")
    parser.add_argument("--ghz", type=float, default=0.0, help="core clock for cycles (0: /proc/cpuinfo)")
    args = parser.parse_args(argv)
    if args.threads > 0:
        ln.set_num_threads(args.threads)
    if args.variates_only:
        print(f"lsa_native {ln.__version__}, CPU kernels: {ln.cpu_kernel_isa()}")
        variates_table(args.repeats, args.ghz)
        return 0
    rng = np.random.default_rng(0)
    print(f"lsa_native {ln.__version__}, {ln.num_threads()} threads, CPU kernels: {ln.cpu_kernel_isa()}")
    rows = []
    for d, N, B in SIZES:
        spec = LinearPrompts(d, N, seed=1)
        W0 = [0.01 * rng.standard_normal((d + 1, d + 1)).astype(np.float32) for _ in range(2)]
        inner = 20 if d == 5 else 40
        res = {}
        for method in ("tokens", "wishart"):
            W = [w.copy() for w in W0]
            res[f"fused {method}"] = median_seconds(_sgd(
                lambda k, a, b, m=method: spec.lsa_loss_and_grad(a, b, batch=B, step=k, method=m), W),
                args.repeats, inner)
        E = np.empty((B, d + 1, N + 1), np.float32)
        y_q = np.empty(B, np.float32)

        def native_kernel(k, a, b):
            spec.sample_embedding(B, step=k, E=E, y_q=y_q)
            return lsa.loss_and_grad(E, y_q, a, b)
        res["native sampler + kernel"] = median_seconds(_sgd(native_kernel, [w.copy() for w in W0]),
                                                        args.repeats, inner)
        g = np.random.default_rng(2)

        def numpy_driver(k, a, b):
            batch = data.linear_regression_prompts(g, B, d, N)
            return lsa.loss_and_grad(batch.E.astype(np.float32), batch.y_q.astype(np.float32), a, b)
        res["numpy sampler + kernel"] = median_seconds(_sgd(numpy_driver, [w.copy() for w in W0]),
                                                       args.repeats, max(1, inner // 10))
        E0, yq0 = spec.sample_embedding(B, step=0)
        res["pre-sampled kernel"] = median_seconds(
            _sgd(lambda k, a, b: lsa.loss_and_grad(E0, yq0, a, b), [w.copy() for w in W0]),
            args.repeats, inner)
        tl = torch_loop(d, N, B)
        if tl is not None:
            res["torch loop"] = median_seconds(tl, args.repeats, max(1, inner // 4))
        rows.append(((d, N, B), res))

    print("\n| size | driver | steps/s | prompts/s | vs torch | vs pre-sampled |")
    print("|---|---|---|---|---|---|")
    for (d, N, B), res in rows:
        t_torch = res.get("torch loop")
        for name, t in res.items():
            vs_t = f"{t_torch / t:.1f}x" if t_torch else "-"
            print(f"| d={d}, N={N}, B={B} | {name} | {1 / t:.0f} | {B / t:.3g} | {vs_t} | "
                  f"{res['pre-sampled kernel'] / t:.2f} |")

    variates_table(args.repeats, args.ghz)
    return 0


if __name__ == "__main__":
    sys.exit(main())
