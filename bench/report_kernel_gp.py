"""K-GP sampling and kernel-attention training at the CCS size (issue 8): one run, medians.

1. Sampling 30000 exp-GP prompts (CCS Def. 3.3, d = 5, n = 30, H.1 Σ): native
   ``sampling.KernelGPPrompts`` vs the numpy reference ``data.kernel_gp_prompts`` (batched eigh).
2. Adam on 3-layer softmax kernel attention (d = 5, n = 30, L = 3, B = 30000, labels resampled
   every 10 steps, float32): time per step (averaged over resample periods, so one sampling per 10
   steps is included) with native sampling, with numpy sampling, and a PyTorch loop (pure-torch
   attention + autograd + torch.optim.Adam with gradient clipping, sampling in torch with a batched
   eigh), when torch is installed. The lsa_native loops use a plain numpy Adam with the same
   clipping (branch `fit` builds the real optimizer).

    python bench/report_kernel_gp.py [--batch 30000] [--periods 2] [--repeats 3]

numpy's batched eigh of many small matrices is far slower with a multi-threaded BLAS on a busy
machine; set OPENBLAS_NUM_THREADS=1 for the fairest numpy baseline (the table header says which).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from report_kernel_attention import torch, torch_loss  # noqa: E402
from timing import median_seconds  # noqa: E402

import lsa_native as ln
from lsa_native import kernel_attention as ka
from lsa_native.sampling import KernelGPPrompts

D, N, L, PERIOD, LR, CLIP = 5, 30, 3, 10, 1e-3, 1.0


def ccs_sigma(rng, d=D):
    """CCS H.1: Σ = Uᵀ diag(1, 1, 0.25, 2.25, 1) U, U uniform orthogonal."""
    Q, R = np.linalg.qr(rng.standard_normal((d, d)))
    Q = Q * np.sign(np.diag(R))
    return Q.T @ np.diag([1.0, 1.0, 0.25, 2.25, 1.0]) @ Q


class NumpyAdam:
    """Adam with global-norm clipping on a flat float64 vector (Kingma & Ba, bias-corrected)."""

    def __init__(self, theta, lr=LR, betas=(0.9, 0.999), eps=1e-8, clip=CLIP):
        self.theta, self.lr, self.b1, self.b2, self.eps, self.clip = theta, lr, *betas, eps, clip
        self.m, self.v, self.t = np.zeros_like(theta), np.zeros_like(theta), 0

    def step(self, g):
        norm = np.linalg.norm(g)
        if norm > self.clip:
            g = g * (self.clip / norm)
        self.t += 1
        self.m = self.b1 * self.m + (1 - self.b1) * g
        self.v = self.b2 * self.v + (1 - self.b2) * g * g
        mh, vh = self.m / (1 - self.b1**self.t), self.v / (1 - self.b2**self.t)
        self.theta = self.theta - self.lr * mh / (np.sqrt(vh) + self.eps)
        return self.theta


def lsa_native_loop(sample, params, batch, periods):
    """Per-step seconds (median over periods) and the sampling share, for sample(period) -> batch."""
    opt = NumpyAdam(params.to_vector())
    per_period, sampling = [], []
    for period in range(periods + 1):  # period 0 warms up (one sampling, one step)
        t0 = time.perf_counter()
        b = sample(period)
        t1 = time.perf_counter()
        Z0, y_q = b.E.astype(np.float32, copy=False), b.y_q.astype(np.float32, copy=False)
        for _ in range(PERIOD if period else 1):
            loss, g = params.loss_and_grad(Z0, y_q)
            params = params.from_vector(opt.step(g))
        t2 = time.perf_counter()
        if period:
            per_period.append((t2 - t0) / PERIOD)
            sampling.append((t1 - t0) / (t2 - t0))
    return statistics.median(per_period), statistics.median(sampling), loss


def torch_loop(rng, params, batch, periods, Sigma):
    V, B, C = (torch.tensor(np.asarray(a), dtype=torch.float32, requires_grad=True)
               for a in (params.V, params.B, params.C))
    opt = torch.optim.Adam([V, B, C], lr=LR)
    root = torch.tensor(ln.data.sqrtm(Sigma), dtype=torch.float32)
    gen = torch.Generator().manual_seed(int(rng.integers(2**31)))

    def sample():  # CCS Def. 3.3 in torch: sphere points, exp kernel, K_+ by batched eigh
        xi = torch.randn(batch, N + 1, D, generator=gen)
        xi = xi / xi.norm(dim=-1, keepdim=True)
        K = torch.exp(xi @ xi.transpose(1, 2))
        w, U = torch.linalg.eigh(K)
        Y = (U * w.abs().sqrt()[:, None, :]) @ torch.randn(batch, N + 1, 1, generator=gen)
        Z0 = torch.zeros(batch, D + 1, N + 1)
        Z0[:, :D] = (xi @ root).transpose(1, 2)
        Z0[:, D, :N] = Y[:, :N, 0]
        return Z0, Y[:, N, 0]

    per_period, sampling = [], []
    for period in range(periods + 1):
        t0 = time.perf_counter()
        Z0, y_q = sample()
        t1 = time.perf_counter()
        for _ in range(PERIOD if period else 1):
            opt.zero_grad()
            loss = torch_loss(Z0, y_q, V, B, C, "softmax")
            loss.backward()
            torch.nn.utils.clip_grad_norm_([V, B, C], CLIP)
            opt.step()
        t2 = time.perf_counter()
        if period:
            per_period.append((t2 - t0) / PERIOD)
            sampling.append((t1 - t0) / (t2 - t0))
    return statistics.median(per_period), statistics.median(sampling), loss.item()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--batch", type=int, default=30000)
    p.add_argument("--periods", type=int, default=2, help="timed resample periods of 10 steps")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--skip-numpy-loop", action="store_true", help="skip training with numpy sampling")
    p.add_argument("--skip-sampling", action="store_true", help="skip the sampler table")
    p.add_argument("--torch-threads", type=int, default=0,
                   help="torch.set_num_threads (0: torch's default; 1 is faster on a busy machine)")
    args = p.parse_args(argv)
    if torch is not None and args.torch_threads > 0:
        torch.set_num_threads(args.torch_threads)
    rng = np.random.default_rng(0)
    Bsz = args.batch
    Sigma = ccs_sigma(rng)
    print(f"lsa_native {ln.__version__}, {ln.num_threads()} threads, torch "
          f"{'absent' if torch is None else torch.__version__ + f' ({torch.get_num_threads()} threads)'}, "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}; "
          f"d={D} n={N} L={L} B={Bsz} float32, resample every {PERIOD} steps\n")

    if not args.skip_sampling:
        sampler_table(args, rng, Sigma)
    training_table(args, rng, Sigma)
    return 0


def sampler_table(args, rng, Sigma):
    Bsz = args.batch
    print("| sampler (B prompts) | median s | prompts/s | vs numpy |")
    print("|---|---|---|---|")
    times = {}
    for kernel in ("exp", "linear", "relu"):
        spec = KernelGPPrompts(D, N, kernel, Sigma=Sigma, seed=1)
        reps = args.repeats if kernel != "relu" else 1
        times[kernel] = median_seconds(lambda: spec.sample(Bsz, 0, np.float32), reps)
    t_np = median_seconds(lambda: ln.data.kernel_gp_prompts(rng, Bsz, D, N, "exp", Sigma=Sigma,
                                                            dtype=np.float32), 1)
    for kernel in ("exp", "linear", "relu"):
        ratio = f"{t_np / times[kernel]:.1f}x" if kernel == "exp" else "—"
        print(f"| native {kernel} | {times[kernel]:.3f} | {Bsz / times[kernel]:.3g} | {ratio} |")
    print(f"| numpy reference exp (batched eigh) | {t_np:.3f} | {Bsz / t_np:.3g} | 1.0x |\n")


def training_table(args, rng, Sigma):
    Bsz = args.batch
    params = ka.KernelAttentionParams.gaussian(rng, D, L, 1, "softmax", sparse=False, scale=0.1)
    spec = KernelGPPrompts(D, N, "exp", Sigma=Sigma, seed=2)
    rows = [("lsa_native, native sampling",
             lsa_native_loop(lambda k: spec.sample(Bsz, k, np.float32), params, Bsz, args.periods))]
    if not args.skip_numpy_loop:
        rows.append(("lsa_native, numpy sampling", lsa_native_loop(
            lambda k: ln.data.kernel_gp_prompts(rng, Bsz, D, N, "exp", Sigma=Sigma, dtype=np.float32),
            params, Bsz, args.periods)))
    if torch is not None:
        rows.append(("PyTorch loop (torch sampling)", torch_loop(rng, params, Bsz, args.periods, Sigma)))
    base = rows[0][1][0]
    base_compute = base * (1 - rows[0][1][1])
    print("| Adam loop (softmax, L=3) | s/step | steps/s | sampling share | s/step without sampling "
          "| time vs first row (with / without sampling) |")
    print("|---|---|---|---|---|---|")
    for name, (t, share, _) in rows:
        compute = t * (1 - share)
        print(f"| {name} | {t:.3f} | {1 / t:.2f} | {100 * share:.0f}% | {compute:.3f} "
              f"| {t / base:.1f}x / {compute / base_compute:.1f}x |")


if __name__ == "__main__":
    sys.exit(main())
