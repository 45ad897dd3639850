"""The H-head CUDA kernels (cuda/multihead_*, issue 21) under compute-sanitizer: every entry point
of lsa_native.multihead on device arrays (predict, loss_and_grad, forward, vjp, predict_vjp), the
merged and the separate parametrization, float32 and float64, shapes with N + 1 > 32 tokens and
H (d+1) > 32 head entries; LinearPrompts drawn on the GPU (sample_embedding, sample: the
generator kernel of cuda/sampled_kernels.cuh), N + 1 > 32 and a task pool with label noise; the
fused H-head steps on the GPU (tokens; Wishart: cuda/multihead_sampled_kernels.cuh, with its work
in shared and in global memory) and the native merge_kq / chain_kq kernels."""
from __future__ import annotations

import numpy as np

from lsa_native import cuda, multihead as mh, sampling

rng = np.random.default_rng(0)
for dt in (np.float32, np.float64):
    for B, d, N, H in ((7, 3, 7, 3), (37, 5, 40, 5), (5, 6, 9, 8)):
        E = rng.standard_normal((B, d + 1, N + 1)).astype(dt)
        E[:, d, N] = 0
        W_pv, W_kq = (0.5 * rng.standard_normal((2, H, d + 1, d + 1))).astype(dt)
        y = rng.standard_normal(B).astype(dt)
        dF = rng.standard_normal(E.shape).astype(dt)
        Ed, yd, dFd = cuda.to_device(E), cuda.to_device(y), cuda.to_device(dF)
        Wd = (cuda.to_device(W_pv), cuda.to_device(W_kq))
        mh.predict(Ed, *Wd)
        mh.loss_and_grad(Ed, yd, *Wd, return_predictions=True)
        mh.forward(Ed, *Wd)
        mh.vjp(Ed, *Wd, dFd)
        mh.vjp(Ed, *Wd, dFd, with_input_grad=False)
        mh.predict_vjp(Ed, *Wd, yd)
        W_k, W_q = (0.5 * rng.standard_normal((2, H, 1, d + 1))).astype(dt)
        mh.loss_and_grad(Ed, yd, Wd[0], W_k=W_k, W_q=W_q)
        print(np.dtype(dt).name, (B, d, N, H), "ok")
for dt in (np.float32, np.float64):
    for spec in (sampling.LinearPrompts(5, 40, seed=1),
                 sampling.LinearPrompts(3, 7, seed=2, tasks=4, noise_std=0.1)):
        spec.sample_embedding(37, 0, dt, device="cuda")
        spec.sample(37, 1, dt, device="cuda")
    print(np.dtype(dt).name, "LinearPrompts on the GPU ok")
for dt in (np.float32, np.float64):
    # The Wishart work goes to shared memory only for tiny shapes (launch_heads_wishart: the block's
    # HeadsWishartLayout::shared_bytes within 48 KiB): d = 1, H = 2 (23.7 KB float32, 46.3 KB
    # float64) in both dtypes, d = 2, H = 2 without label noise in float32 only (40.2 KB; float64
    # 79.2 KB spills); d = 20 with H = 8 spills it to global memory.
    for spec, H, B in ((sampling.LinearPrompts(1, 5, seed=5), 2, 33),
                       (sampling.LinearPrompts(2, 9, seed=3), 2, 77),
                       (sampling.LinearPrompts(20, 40, seed=4, noise_std=0.1), 8, 301)):
        d = spec.dim
        W_pv, W_kq = (0.3 * rng.standard_normal((2, H, d + 1, d + 1))).astype(dt)
        Wd = [cuda.to_device(W_pv), cuda.to_device(W_kq)]
        grads = [cuda.to_device(np.zeros_like(W_pv)), cuda.to_device(np.zeros_like(W_kq))]
        loss = cuda.to_device(np.zeros(1))
        for method in ("tokens", "wishart"):
            step = spec.multihead_fused_step(batch=B, method=method, dtype=dt, device="cuda")
            step(*Wd, 0, *grads, loss=loss)
        W_k, W_q = (0.5 * rng.standard_normal((2, H, 2, d + 1))).astype(dt)
        Kd, Qd = cuda.to_device(W_k), cuda.to_device(W_q)
        mh.merge_kq(Kd, Qd, out=Wd[1])
        mh.chain_kq(Kd, Qd, Wd[1], out=(cuda.to_device(np.zeros_like(W_k)),
                                        cuda.to_device(np.zeros_like(W_q))))
        print(np.dtype(dt).name, (d, H, B), "fused H-head steps and merge/chain on the GPU ok")
cuda.synchronize()
