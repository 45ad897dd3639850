"""GPU benchmark of CCS H.1 kernel-attention training (issue 18): the training step (d = 5, n = 30,
L = 3, one softmax head, sparse V with A held at 0, K-GP exp labels with the H.1 covariance,
B = 30000, Adam with clipping, resampled every 10 steps) through ``train.fit`` with
``KernelAttentionObjective(device="cuda")`` (prompts drawn and the model trained on the GPU; θ,
its gradient and Adam on the host), against the same loop in PyTorch CUDA (sphere points and the
kernel matrix in torch, ``torch.linalg.cholesky_ex`` with the eigen route for the prompts it
refuses, the model written with autograd, ``torch.optim.Adam``), in the same run. Then paper-size
ccs-fig1 cells (800 steps, B = 30000) through the experiment's own ``train_cell`` on the GPU, and
an extrapolation to the whole grid (3 label kernels x 4 activations x n in 2..14 x 3 seeds).
Targets: native >= 5x the PyTorch loop; the grid <= 10 minutes on one GPU.

    python bench/gpu/bench_ccs_training.py [--out results.json] [--steps 200] [--quick]

Wall-clock medians of groups of steps after warm-up (each native step returns its loss, so it
waits for the GPU; torch groups end with a synchronize).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from report_kernel_attention import torch_loss  # noqa: E402

import lsa_native  # noqa: E402
from lsa_native import kernel_attention as ka, sampling, train  # noqa: E402
from lsa_native.experiments import ccs  # noqa: E402

D, L = 5, 3
RESAMPLE = 10
LR, CLIP = 0.02, 1.0
GRID_N = (2, 4, 6, 8, 10, 12, 14)
GRID_KERNELS = ("linear", "relu", "exp")
GRID_ACTIVATIONS = tuple(ka.ACTIVATIONS)
GRID_SEEDS = 3


def native_steps_per_second(n, batch, steps, groups):
    spec = sampling.KernelGPPrompts(D, n, "exp", Sigma=ccs.ccs_sigma(0, D), seed=1)
    p0 = ka.KernelAttentionParams.gaussian(np.random.default_rng(0), D, L, 1, "softmax",
                                           sparse=True, scale=0.1)
    p0.A[...] = 0
    obj = train.KernelAttentionObjective(p0, hold_A_zero=True, device="cuda")
    data = train.Prompts(spec, batch=batch, resample_every=RESAMPLE)
    opt = train.Adam(lr=LR, clip_norm=CLIP)

    def run():
        train.fit(obj, opt, steps=steps, data=data, progress=False, record_every=steps)

    run()  # warm-up: module load, pool, first samples
    times = []
    for _ in range(groups):
        t0 = time.perf_counter()
        run()
        times.append((time.perf_counter() - t0) / steps)
    return 1.0 / statistics.median(times)


def torch_sample(batch, n, root, bandwidth, gen, dtype=torch.float32):
    """K-GP prompts [CCS H.1] in PyTorch on the GPU: x = Σ^{1/2}ξ, Y ~ N(0, K_+(ξ))."""
    dev = root.device
    g = torch.randn(batch, n + 1, D, device=dev, dtype=torch.float64, generator=gen)
    xi = g / g.norm(dim=-1, keepdim=True)
    K = torch.exp(xi @ xi.transpose(1, 2) / bandwidth**2)
    Lk, info = torch.linalg.cholesky_ex(K)
    bad = info != 0
    if bool(bad.any()):  # numerically singular K: the eigen route K_+ = U|D|Uᵀ
        w, U = torch.linalg.eigh(K[bad])
        Lk[bad] = U * w.abs().sqrt().unsqueeze(1)
    z = torch.randn(batch, n + 1, 1, device=dev, dtype=torch.float64, generator=gen)
    y = (Lk @ z)[..., 0]
    x = xi @ root.T
    Z0 = torch.empty(batch, D + 1, n + 1, device=dev, dtype=dtype)
    Z0[:, :D] = x.transpose(1, 2).to(dtype)
    Z0[:, D] = y.to(dtype)
    Z0[:, D, n] = 0
    return Z0, y[:, n].to(dtype)


def torch_steps_per_second(n, batch, steps, groups):
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev)
    gen.manual_seed(1)
    S = ccs.ccs_sigma(0, D)
    w, U = np.linalg.eigh(S)
    root = torch.tensor(U @ np.diag(np.sqrt(w)) @ U.T, device=dev)
    p0 = ka.KernelAttentionParams.gaussian(np.random.default_rng(0), D, L, 1, "softmax",
                                           sparse=True, scale=0.1)
    r = torch.tensor(p0.r, device=dev, dtype=torch.float32, requires_grad=True)
    B = torch.tensor(p0.B, device=dev, dtype=torch.float32, requires_grad=True)
    C = torch.tensor(p0.C, device=dev, dtype=torch.float32, requires_grad=True)
    opt = torch.optim.Adam([r, B, C], lr=LR)
    state = {"t": 0, "batch": None}

    def step():
        if state["t"] % RESAMPLE == 0:
            state["batch"] = torch_sample(batch, n, root, 1.0, gen)
        Z0, y_q = state["batch"]
        V = torch.zeros(L, 1, D + 1, D + 1, device=dev)
        V[:, :, D, D] = r  # A held at 0
        loss = 0.5 * torch_loss(Z0, y_q, V, B, C, "softmax")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([r, B, C], CLIP)
        opt.step()
        state["t"] += 1

    for _ in range(RESAMPLE):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(groups):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) / steps)
    return 1.0 / statistics.median(times)


def cell_seconds(kernel, activation, n, steps, batch):
    cfg = dict(ccs._base(dict(dim=D, steps=steps, batch=batch, lr=0.02, lr_final=0.001, clip=1.0,
                              init_scale=0.1, eval_batch=5000)),
               kernel=kernel, activations=[activation], layers=L, context=n, seed=0, _device="cuda")
    t0 = time.perf_counter()
    out = ccs.train_cell(cfg)
    return time.perf_counter() - t0, out["loss"], out["bayes_loss"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out")
    ap.add_argument("--steps", type=int, default=100, help="steps per timed group")
    ap.add_argument("--groups", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    args = ap.parse_args(argv)
    batch = 2000 if args.quick else 30000
    cell_steps = 50 if args.quick else 800
    print(f"lsa_native {lsa_native.__version__}, torch {torch.__version__}, "
          f"{torch.cuda.get_device_name()}", flush=True)
    res = {"device": torch.cuda.get_device_name(), "batch": batch, "steps_per_group": args.steps}
    rows = []
    for n in (30, 14):
        nat = native_steps_per_second(n, batch, args.steps, args.groups)
        tor = torch_steps_per_second(n, batch, args.steps, args.groups)
        rows.append(dict(n=n, native_steps_s=nat, torch_steps_s=tor, ratio=nat / tor))
        print(f"n={n}: native {nat:.1f} steps/s, torch {tor:.1f} steps/s, {nat / tor:.2f}x", flush=True)
    res["step"] = rows
    cells = {}
    for kernel in ("exp", "relu", "linear"):
        for n in (2, 14):
            t, loss, bayes = cell_seconds(kernel, "softmax", n, cell_steps, batch)
            cells[f"{kernel},softmax,{n}"] = t
            print(f"cell {kernel} softmax n={n}: {t:.1f} s ({cell_steps} steps, B={batch}); "
                  f"loss {loss:.4f}, Bayes {bayes:.4f}", flush=True)
    # The grid: cell time linear in n between the measured ends, per label kernel (the sampler's
    # cost differs by kernel; the activation changes the step little).
    total = 0.0
    for kernel in GRID_KERNELS:
        t2, t14 = cells[f"{kernel},softmax,2"], cells[f"{kernel},softmax,14"]
        for n in GRID_N:
            total += (t2 + (t14 - t2) * (n - 2) / 12) * len(GRID_ACTIVATIONS) * GRID_SEEDS
    res["cells_s"] = cells
    res["grid_s_extrapolated"] = total
    print(f"ccs-fig1 grid ({len(GRID_KERNELS) * len(GRID_ACTIVATIONS) * len(GRID_N) * GRID_SEEDS} "
          f"cells of {cell_steps} steps, B={batch}) extrapolated: {total / 60:.1f} min on one GPU")
    print("| n | native steps/s | PyTorch CUDA steps/s | native / PyTorch |")
    print("| --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['n']} | {r['native_steps_s']:.1f} | {r['torch_steps_s']:.1f} | {r['ratio']:.2f}x |")
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
