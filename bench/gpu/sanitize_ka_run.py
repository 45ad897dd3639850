"""A small run of every CUDA kernel-attention kernel (both dtypes, every activation, device arrays
and host copies, shared-memory and global workspaces) for compute-sanitizer (memcheck, racecheck,
synccheck). No torch/cupy import: fast under the tool. Exits 1 when a result differs from the CPU
kernels beyond rounding (float32 2e-4, float64 1e-12 relative). Runs the warp-per-prompt kernel
with its recomputing workspace (the default) and with the stored one (LSA_NATIVE_KA_RECOMPUTE=0),
then the block kernel (LSA_NATIVE_CUDA_OLD_KERNELS=1; n = 600 takes it in every pass)."""
import os
import sys

import numpy as np

from lsa_native import cuda
from lsa_native import kernel_attention as ka

rng = np.random.default_rng(11)
bad = []
for old, recompute in (("0", "1"), ("0", "0"), ("1", "1")):
    os.environ["LSA_NATIVE_CUDA_OLD_KERNELS"] = old  # both read by the launch code at every call
    os.environ["LSA_NATIVE_KA_RECOMPUTE"] = recompute
    for dtype, tol in ((np.float32, 2e-4), (np.float64, 1e-12)):
        for (B, d, n, L, H) in ((1, 1, 1, 1, 1), (5, 3, 7, 2, 2), (3, 5, 30, 3, 1), (2, 4, 600, 1, 1)):
            for act in ka.ACTIVATIONS:
                names = [act] + ["softmax"] * (H - 1)
                Z0 = rng.standard_normal((B, d + 1, n + 1)).astype(dtype)
                y = rng.standard_normal(B).astype(dtype)
                V = (0.3 / (d + 1) * rng.standard_normal((L, H, d + 1, d + 1))).astype(dtype)
                Bq, Ck = ((0.5 / d * rng.standard_normal((L, H, d, d))).astype(dtype) for _ in range(2))
                dZ = rng.standard_normal(Z0.shape).astype(dtype)
                dev = [cuda.to_device(a) for a in (Z0, y, V, Bq, Ck, dZ)]
                Z, ctx = ka.forward(dev[0], dev[2], dev[3], dev[4], names, return_context=True)
                got = {
                    "forward": [cuda.to_host(Z)],
                    "vjp ctx": [cuda.to_host(r) for r in ka.vjp(dev[0], dev[2], dev[3], dev[4], names,
                                                               dev[5], context=ctx)],
                    "vjp host": list(ka.vjp(Z0, V, Bq, Ck, names, dZ, device="cuda")),
                    "loss_and_grad": [np.asarray(r) if np.isscalar(r) else cuda.to_host(r) for r in
                                      ka.loss_and_grad(dev[0], dev[1], dev[2], dev[3], dev[4], names,
                                                       input_grad=True)],
                }
                want = {
                    "forward": [ka.forward(Z0, V, Bq, Ck, names, device="cpu")],
                    "vjp ctx": list(ka.vjp(Z0, V, Bq, Ck, names, dZ, device="cpu")),
                    "loss_and_grad": [np.asarray(r) for r in
                                      ka.loss_and_grad(Z0, y, V, Bq, Ck, names, input_grad=True, device="cpu")],
                }
                want["vjp host"] = want["vjp ctx"]
                for op in got:
                    for a, b in zip(got[op], want[op]):
                        err = float(np.max(np.abs(a - b)) / (np.max(np.abs(b)) + 1e-30))
                        if not err <= tol:
                            bad.append(f"old={old} recompute={recompute} {op} {np.dtype(dtype).name} {act} "
                                       f"B={B} d={d} n={n} L={L} H={H}: relative error {err:.2e}")
print("\n".join(bad) if bad else "kernel attention: all CUDA results match the CPU")
sys.exit(1 if bad else 0)
