"""The H-head CUDA kernels (cuda/multihead_*, issue 21) under compute-sanitizer: every entry point
of lsa_native.multihead on device arrays (predict, loss_and_grad, forward, vjp, predict_vjp), the
merged and the separate parametrization, float32 and float64, shapes with N + 1 > 32 tokens and
H (d+1) > 32 head entries; and LinearPrompts drawn on the GPU (sample_embedding, sample: the
generator kernel of cuda/sampled_kernels.cuh), N + 1 > 32 and a task pool with label noise."""
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
cuda.synchronize()
