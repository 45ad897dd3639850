"""A small run of the CUDA K-GP sampler kernel (every kernel and CCS Figure 4's composite K♦, with
and without Σ, both dtypes, a batch that fills several blocks and one that is not a multiple of the
block) for compute-sanitizer memcheck. No torch/cupy import. Exits 1 when covariates differ from
the CPU sampler's beyond rounding, or labels of the linear, exp and composite kernels beyond
rounding amplified by the kernel matrix's conditioning (float64 1e-9; relu's eigen route may
rotate nearly degenerate eigenspaces, see tests/test_ka_cuda_training.py)."""
import sys

import numpy as np

from lsa_native import cuda, sampling

bad = []
for kernel in ("linear", "relu", "exp"):
    for Sigma in (None, np.diag([1.0, 2.0, 0.5])):
        for dtype, x_tol, y_tol in ((np.float32, 2e-6, 2e-6), (np.float64, 1e-13, 1e-9)):
            for B, n in ((1, 1), (70, 9), (130, 30)):
                spec = sampling.KernelGPPrompts(3, n, kernel, Sigma=Sigma, seed=5)
                cpu = spec.sample(B, 3, dtype)
                gpu = spec.sample(B, 3, dtype, device="cuda")
                E, y = cuda.to_host(gpu.E), cuda.to_host(gpu.y_q)
                scale = np.abs(cpu.E).max()
                x_err = np.abs(E[:, :3] - cpu.E[:, :3]).max() / scale
                y_err = 0.0 if kernel == "relu" else max(
                    np.abs(E[:, 3] - cpu.E[:, 3]).max(), np.abs(y - cpu.y_q).max()) / scale
                if not (x_err <= x_tol and y_err <= y_tol):
                    bad.append((kernel, Sigma is not None, np.dtype(dtype).name, B, n, x_err, y_err))
# The composite kernel K♦ of CCS Figure 4: α < 1 by the Cholesky route, α = 1 by the Gram route.
for alpha in (0.5, 1.0):
    for dtype, x_tol, y_tol in ((np.float32, 2e-6, 2e-6), (np.float64, 1e-13, 1e-9)):
        for B, n in ((1, 1), (130, 14)):
            spec = sampling.CompositeKernelGPPrompts(3, n, alpha, [1.0, 1.0, 0.0], [0.0, 0.7, 0.7],
                                                     Sigma=np.diag([1.0, 2.0, 0.5]), seed=5)
            cpu = spec.sample(B, 3, dtype)
            gpu = spec.sample(B, 3, dtype, device="cuda")
            E, y = cuda.to_host(gpu.E), cuda.to_host(gpu.y_q)
            scale = np.abs(cpu.E).max()
            x_err = np.abs(E[:, :3] - cpu.E[:, :3]).max() / scale
            y_err = max(np.abs(E[:, 3] - cpu.E[:, 3]).max(), np.abs(y - cpu.y_q).max()) / scale
            if not (x_err <= x_tol and y_err <= y_tol):
                bad.append((f"composite alpha={alpha}", True, np.dtype(dtype).name, B, n, x_err, y_err))
cuda.synchronize()
print("K-GP sampler kernel: all runs done;", "mismatches: %s" % bad if bad else "all match the CPU")
sys.exit(1 if bad else 0)
