"""GPU benchmark of the fused sampled LSA training step (issue 11): native CUDA steps (prompts
generated and consumed on the GPU, parameters and gradients on the host, SGD in numpy as
``train.fit`` does) vs a PyTorch CUDA loop (torch.randn sampling + the O(N d) token-form prediction
+ autograd + torch.optim.SGD), in the same run. Target: native >= 10x the PyTorch loop.

    python bench/gpu/bench_sampled.py [--out results.json] [--quick]

Sizes: d = 5, N = 20, B = 4096 and d = 20, N = 100, B = 2^16 (float32; float64 native rows too).
Wall-clock medians of groups of steps after warm-up (each native step returns its loss, so it
waits for the GPU; the torch groups end with a synchronize). CPU fused steps at the small size for
reference. Prints a table last.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np
import torch

import lsa_native
from lsa_native import sampling

LR = 1e-3
SIZES = [(5, 20, 4096), (20, 100, 1 << 16)]


def steps_per_second(step, *, inner: int, repeats: int, sync=lambda: None) -> float:
    """Median over `repeats` groups of `inner` calls of step(), after one warm-up group."""
    for _ in range(inner):
        step()
    sync()
    rates = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            step()
        sync()
        rates.append(inner / (time.perf_counter() - t0))
    return statistics.median(rates)


def native_loop(d, N, B, method, dtype, device):
    spec = sampling.LinearPrompts(d, N, seed=1)
    rng = np.random.default_rng(0)
    W = [(0.01 * rng.standard_normal((d + 1, d + 1))).astype(dtype) for _ in range(2)]
    state = {"k": 0, "loss": None}

    def step():
        loss, g_pv, g_kq = spec.lsa_loss_and_grad(W[0], W[1], batch=B, step=state["k"], method=method,
                                                  dtype=dtype, device=device)
        W[0] -= LR * g_pv
        W[1] -= LR * g_kq
        state["k"] += 1
        state["loss"] = loss
    return step, state


def torch_loop(d, N, B, dtype):
    dev = torch.device("cuda")
    W_pv = torch.nn.Parameter(0.01 * torch.randn(d + 1, d + 1, device=dev, dtype=dtype))
    W_kq = torch.nn.Parameter(0.01 * torch.randn(d + 1, d + 1, device=dev, dtype=dtype))
    opt = torch.optim.SGD([W_pv, W_kq], lr=LR)
    state = {"loss": None}

    def step():
        w = torch.randn(B, d, device=dev, dtype=dtype)
        X = torch.randn(B, d, N + 1, device=dev, dtype=dtype)   # covariates as E's rows, query last
        y = torch.einsum("bkn,bk->bn", X, w)
        E = torch.cat([X, y.unsqueeze(1)], dim=1)               # [B, d+1, N+1]   [ZFB (3.4)]
        E[:, d, N] = 0
        y_q = y[:, N]
        q = (W_kq @ E[:, :, N:]).squeeze(-1)                    # W^KQ e_q   [B, d+1]
        t = torch.einsum("r,brj->bj", W_pv[d], E)               # p·e_j
        s = torch.einsum("br,brj->bj", q, E)                    # e_j·q
        y_hat = (t * s).sum(-1) / N                             # p^T G q   [ZFB (3.6)]
        loss = 0.5 * ((y_hat - y_q) ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        state["loss"] = loss.detach()
    return step, state


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument("--quick", action="store_true", help="fewer repeats (smoke test)")
    args = parser.parse_args(argv)
    if not lsa_native.cuda_available():
        print("no CUDA device visible: nothing to measure", file=sys.stderr)
        return 1
    repeats = 3 if args.quick else 7
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"lsa_native {lsa_native.__version__}, CPU threads {lsa_native.num_threads()}")
    rows = []

    def record(size, driver, rate, torch_rate, loss):
        rows.append({"size": size, "driver": driver, "steps_per_s": rate,
                     "vs_torch": None if torch_rate is None else rate / torch_rate, "loss": loss})
        vs = "" if torch_rate is None else f" ({rate / torch_rate:.1f}x torch)"
        print(f"  {size:<22} {driver:<26} {rate:10.1f} steps/s{vs}   loss {loss:.4g}", flush=True)

    for d, N, B in SIZES:
        size = f"d={d} N={N} B={B}"
        inner = 20 if B <= 4096 else 5
        t_step, t_state = torch_loop(d, N, B, torch.float32)
        torch_rate = steps_per_second(t_step, inner=inner, repeats=repeats, sync=torch.cuda.synchronize)
        record(size, "torch CUDA loop f32", torch_rate, None, t_state["loss"].item())
        for method in ("tokens", "wishart"):
            for dtype in (np.float32, np.float64):
                step, state = native_loop(d, N, B, method, dtype, "cuda")
                rate = steps_per_second(step, inner=inner, repeats=repeats)
                record(size, f"native cuda {method} {np.dtype(dtype).name}", rate,
                       torch_rate if dtype == np.float32 else None, state["loss"])
        if B <= 4096:  # CPU reference (this host's cores)
            for method in ("tokens", "wishart"):
                step, state = native_loop(d, N, B, method, np.float32, "cpu")
                rate = steps_per_second(step, inner=5, repeats=3)
                record(size, f"native cpu {method} float32", rate, torch_rate, state["loss"])

    print("\n| size | driver | steps/s | vs torch CUDA loop |")
    print("|---|---|---|---|")
    for r in rows:
        vs = "-" if r["vs_torch"] is None else f"{r['vs_torch']:.1f}x"
        print(f"| {r['size']} | {r['driver']} | {r['steps_per_s']:.1f} | {vs} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
