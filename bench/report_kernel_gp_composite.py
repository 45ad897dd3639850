"""The K♦ composite-kernel sampler of CCS Figure 4 (Appendix D) at ccs-fig4's size: one batch of
B prompts, d = 5, n = 14, H.1 Σ, float32, medians over repeats (wall and process CPU seconds).

Rows: the native ``sampling.CompositeKernelGPPrompts`` for 4(c) (α = ½: Cholesky of K♦) and 4(a)
(α = 1: the Gram route), the native exp kernel (``KernelGPPrompts``, the same route with the SIMD
exp) for reference, and the numpy sampler ``experiments.ccs_prompts.CompositeGPPrompts`` (batched
eigh) that ccs-fig4's cells used before. Same-run ratios only: the absolute numbers depend on the
machine's load.

    python bench/report_kernel_gp_composite.py [--batch 30000] [--repeats 5] [--threads 1,2]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from timing import median_seconds  # noqa: E402

import lsa_native as ln
from lsa_native import sampling
from lsa_native.experiments import ccs_prompts

D, N = 5, 14


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=30000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", default="1,2", help="native thread counts, comma-separated")
    args = ap.parse_args(argv)
    B = args.batch
    Sigma = ccs_prompts.ccs_sigma(0)
    alpha, g1, g2 = ccs_prompts.FIG4_KERNELS["composite"]
    native = {
        "native K♦ 4(c), α = ½ (Cholesky)": sampling.CompositeKernelGPPrompts(D, N, alpha, g1, g2, Sigma=Sigma, seed=1),
        "native K♦ 4(a), α = 1 (Gram)": sampling.CompositeKernelGPPrompts(D, N, 1.0, np.ones(D), np.ones(D),
                                                                         Sigma=Sigma, seed=1),
        "native exp kernel (reference)": sampling.KernelGPPrompts(D, N, "exp", Sigma=Sigma, seed=1),
    }
    numpy_spec = ccs_prompts.CompositeGPPrompts(D, N, alpha, g1, g2, Sigma=Sigma, seed=1)
    print(f"B = {B}, d = {D}, n = {N}, float32; medians of {args.repeats}\n")
    print("| sampler | threads | wall ms | CPU ms | wall / numpy K♦ |")
    print("| --- | --- | --- | --- | --- |")
    numpy_wall = median_seconds(lambda: numpy_spec.sample(batch=B, step=0, dtype=np.float32), args.repeats)
    numpy_cpu = median_seconds(lambda: numpy_spec.sample(batch=B, step=0, dtype=np.float32), args.repeats,
                               clock=time.process_time)
    before = ln.num_threads()
    try:
        for threads in (int(t) for t in args.threads.split(",")):
            ln.set_num_threads(threads)
            for name, spec in native.items():
                draw = lambda spec=spec: spec.sample(B, 0, np.float32)  # noqa: E731
                wall = median_seconds(draw, args.repeats)
                cpu = median_seconds(draw, args.repeats, clock=time.process_time)
                print(f"| {name} | {threads} | {wall * 1e3:.1f} | {cpu * 1e3:.1f} | {wall / numpy_wall:.3f} |")
    finally:
        ln.set_num_threads(before)
    print(f"| numpy K♦ 4(c) (CompositeGPPrompts) | BLAS | {numpy_wall * 1e3:.1f} | {numpy_cpu * 1e3:.1f} | 1 |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
