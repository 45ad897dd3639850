"""A small run of every CUDA LSA kernel (both dtypes, device arrays and host copies) and of the
fused sampled steps for
compute-sanitizer (memcheck, racecheck, synccheck). No torch/cupy import: fast under the tool.
Exits 1 when a result differs from the CPU kernels beyond rounding."""
import sys

import numpy as np

from lsa_native import cuda, lsa

rng = np.random.default_rng(7)
bad = []
for dtype, tol in ((np.float32, 2e-4), (np.float64, 1e-12)):
    for B, d, N in ((3, 1, 1), (9, 3, 7), (5, 20, 100), (2, 5, 40), (2, 2, 150)):
        E = rng.standard_normal((B, d + 1, N + 1)).astype(dtype)
        W_pv, W_kq = (rng.standard_normal((d + 1, d + 1)).astype(dtype) for _ in range(2))
        y_q = rng.standard_normal(B).astype(dtype)
        d_F = rng.standard_normal(E.shape).astype(dtype)
        d_y = rng.standard_normal(B).astype(dtype)
        dev = [cuda.to_device(a) for a in (E, y_q, W_pv, W_kq, d_F, d_y)]
        got = {
            "predict": [cuda.to_host(lsa.predict(dev[0], dev[2], dev[3]))],
            "loss_and_grad": [np.asarray(r) if np.isscalar(r) else cuda.to_host(r)
                              for r in lsa.loss_and_grad(*dev[:4], return_predictions=True)],
            "forward": [cuda.to_host(lsa.forward(dev[0], dev[2], dev[3]))],
            "vjp": [cuda.to_host(r) for r in lsa.vjp(dev[0], dev[2], dev[3], dev[4])],
            "vjp host": list(lsa.vjp(E, W_pv, W_kq, d_F, device="cuda")),
            "predict_vjp": [cuda.to_host(r) for r in lsa.predict_vjp(dev[0], dev[2], dev[3], dev[5])],
        }
        want = {
            "predict": [lsa.predict(E, W_pv, W_kq, device="cpu")],
            "loss_and_grad": [np.asarray(r) for r in
                              lsa.loss_and_grad(E, y_q, W_pv, W_kq, return_predictions=True, device="cpu")],
            "forward": [lsa.forward(E, W_pv, W_kq, device="cpu")],
            "vjp": list(lsa.vjp(E, W_pv, W_kq, d_F, device="cpu")),
            "predict_vjp": list(lsa.predict_vjp(E, W_pv, W_kq, d_y, device="cpu")),
        }
        want["vjp host"] = want["vjp"]
        for op in got:
            for a, b in zip(got[op], want[op]):
                err = float(np.max(np.abs(a - b)) / (np.max(np.abs(b)) + 1e-30))
                if not err <= tol:
                    bad.append(f"{op} {np.dtype(dtype).name} B={B} d={d} N={N}: relative error {err:.2e}")
# Counter-based variates on the GPU vs the CPU streams (words and uniforms exactly).
from lsa_native.sampling import random as srandom  # noqa: E402

counters = rng.integers(0, 2**32, size=(257, 4), dtype=np.uint64)
if not np.array_equal(cuda.philox4x32(counters, 99), srandom.philox4x32(counters, 99)):
    bad.append("philox4x32 words differ from the CPU")
for dtype in (np.float32, np.float64):
    if not np.array_equal(cuda.to_host(cuda.random_uniforms(1001, seed=5, start=3, dtype=dtype)),
                          srandom.uniforms(1001, seed=5, start=3, dtype=dtype)):
        bad.append(f"uniforms {np.dtype(dtype).name} differ from the CPU")
    z = cuda.to_host(cuda.random_normals(1001, seed=5, start=3, dtype=dtype))
    if not np.max(np.abs(z - srandom.normals(1001, seed=5, start=3, dtype=dtype))) <= 1e-5:
        bad.append(f"normals {np.dtype(dtype).name} differ from the CPU")
# Fused sampled steps (prompts generated on the GPU) vs the CPU steps of the same (seed, step).
from lsa_native import sampling  # noqa: E402

for dtype, tol in ((np.float32, 2e-4), (np.float64, 1e-12)):
    for d, N, law in ((1, 1, {}), (3, 7, {"noise_std": 0.2, "tasks": 3}), (5, 40, {"covariance_law": ("gamma", 0.8, 1.5)}),
                      (20, 100, {"Lambda": np.diag(np.linspace(0.5, 2, 20)), "query_noise": True})):
        spec = sampling.LinearPrompts(d, N, seed=3, **law)
        W_pv, W_kq = (0.3 * rng.standard_normal((d + 1, d + 1)) for _ in range(2))
        for method in ("tokens", "wishart") if spec.wishart_applies else ("tokens",):
            kw = dict(batch=67, step=2, method=method, dtype=dtype)
            g = spec.lsa_loss_and_grad(W_pv, W_kq, device="cuda", **kw)
            c = spec.lsa_loss_and_grad(W_pv, W_kq, device="cpu", **kw)
            for a, b, name in zip(g, c, ("loss", "d_W_pv", "d_W_kq")):
                err = float(np.max(np.abs(np.asarray(a) - b)) / (np.max(np.abs(b)) + 1e-30))
                if not err <= tol:
                    bad.append(f"sampled {method} {np.dtype(dtype).name} d={d} N={N} {name}: {err:.2e}")
cuda.synchronize()
print("\n".join(bad) if bad else "sanitize_run: all CUDA results match the CPU")
sys.exit(1 if bad else 0)
