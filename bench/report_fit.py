"""One Adam step of a 3-layer softmax kernel-attention model at CCS's size (d = 5, n = 30,
B = 30000, float32, sparse V, prompts resampled every 10 steps: CCS H.1) through ``train.fit``,
broken into sampling / native forward+backward / optimizer / Python overhead (medians per step).

Timing is by instrumentation inside one real ``fit`` run: the sampler's ``sample``, the native
``_core.kernel_attention_loss_and_grad`` and the optimizer's ``step`` are wrapped with timers; a
callback timestamps each step. Sampling is reported amortized (time per sample / k) and per
sample. "Python overhead" = step − native − optimizer − sampling in that step (parameter
unpacking, dtype casts, the ½ scaling, gradient concatenation, records, the loop).

    python bench/report_fit.py [--steps 20] [--batch 30000] [--resample-every 10] [--sampler numpy|native]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

# numpy's batched eigh (the numpy K-GP sampler) runs ~30x slower when OpenBLAS threads each tiny
# 31x31 problem on a busy machine; the native core has its own thread pool.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import lsa_native as ln  # noqa: E402
from lsa_native import _core, train  # noqa: E402
from lsa_native import kernel_attention as ka  # noqa: E402


class Timer:
    def __init__(self):
        self.calls = []  # (start, seconds)

    def wrap(self, fn):
        def timed(*a, **kw):
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                self.calls.append((t0, time.perf_counter() - t0))
        return timed

    def within(self, a, b):
        return sum(s for t0, s in self.calls if a <= t0 < b)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=30000)
    p.add_argument("--resample-every", type=int, default=10)
    p.add_argument("--sampler", choices=["numpy", "native"], default="numpy")
    args = p.parse_args(argv)
    d, n, L = 5, 30, 3
    rng = np.random.default_rng(0)
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    Sigma = Q.T @ np.diag([1, 1, 0.25, 2.25, 1]) @ Q  # CCS H.1
    if args.sampler == "native":
        spec = ln.sampling.KernelGPPrompts(d, n, "exp", Sigma=Sigma, seed=0)
    else:
        spec = train.KernelGPPromptsNumpy(d, n, "exp", Sigma=Sigma, seed=0)

    sample_t, native_t, opt_t = Timer(), Timer(), Timer()

    class TimedSpec:
        def sample(self, **kw):
            return sample_t.wrap(spec.sample)(**kw)

    class TimedAdam(train.Adam):
        def step(self, theta, grad, state):
            return opt_t.wrap(super().step)(theta, grad, state)

    orig = _core.kernel_attention_loss_and_grad
    _core.kernel_attention_loss_and_grad = native_t.wrap(orig)
    stamps = []
    try:
        params = ka.KernelAttentionParams.gaussian(rng, d, L, 1, "softmax")
        t_start = time.perf_counter()
        train.fit(train.KernelAttentionObjective(params), TimedAdam(lr=1e-3, clip_norm=1.0),
                  data=train.Prompts(TimedSpec(), batch=args.batch, resample_every=args.resample_every),
                  steps=args.steps, progress=False,
                  callbacks=[lambda info: stamps.append(time.perf_counter())])
    finally:
        _core.kernel_attention_loss_and_grad = orig
    edges = [t_start] + stamps
    rows = []
    for a, b in zip(edges[:-1], edges[1:]):
        rows.append({"step": b - a, "native": native_t.within(a, b), "opt": opt_t.within(a, b),
                     "sample": sample_t.within(a, b)})
    med = lambda k, rs: statistics.median(r[k] for r in rs)
    warm = rows[1:]  # the first step also pays thread start-up and first touches
    no_sample = [r for r in warm if r["sample"] == 0]
    per_sample = statistics.median(s for _, s in sample_t.calls)
    step_ns = med("step", no_sample)
    native, opt = med("native", no_sample), med("opt", no_sample)
    overhead = step_ns - native - opt
    amort = per_sample / args.resample_every
    step = step_ns + amort
    print(f"lsa_native {ln.__version__}, {ln.num_threads()} threads; d={d} n={n} L={L} "
          f"B={args.batch} float32, softmax, sparse V; Adam + clipping; {args.sampler} K-GP sampler, "
          f"resampled every {args.resample_every} steps; {args.steps} steps, medians")
    print("| part | ms per step | share of the step |")
    print("|---|---|---|")
    for name, v in (("sampling (amortized: per sample / k)", amort), ("native forward+backward", native),
                    ("optimizer (Adam, clipping)", opt), ("Python overhead", overhead)):
        print(f"| {name} | {v * 1e3:.2f} | {100 * v / step:.1f}% |")
    print(f"| **step** | {step * 1e3:.2f} | 100% |")
    print(f"sampling: {per_sample * 1e3:.1f} ms per batch of {args.batch}; everything but native "
          f"fwd+bwd: {100 * (step - native) / step:.1f}% of the step (target <= 25%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
