"""The per-step cost of the separate parametrization's operand checks in MultiHeadLSAObjective's
bound steps (issue 21's case: H = 5 rank-one heads, d = 5, N = 20, B = 4096), CPU.

Each step merges W^KQ_h = W^K_hᵀ W^Q_h and chains dW^KQ_h to dW^K_h, dW^Q_h around the merged
step. Before, every step went through the public ``multihead.merge_kq`` / ``chain_kq`` (Python
checks: one device side, dtypes, contiguity, no aliasing); now the first step does and the later
ones call the native entry points directly (``objectives._separate_kq``). Timed, interleaved round
by round (CPU time of the process, 1 native thread, medians over the rounds):

  kq        the merge + chain pair alone: public (checked) vs native calls, on the step's host
            buffers, and on the device loop's operands (``cuda.Piece`` views of flat buffers) of
            an emulated device (host memory presented as CUDA arrays, the native calls running
            the CPU kernels: the Python side of the GPU loop's call)
  step      the whole bound step (``objective.bind(data)``), tokens and Wishart routes, with the
            objectives module of ``--before`` (a git ref, default 5a8c6a2: main before the
            refactor) vs the working tree's

    python bench/report_separate_checks.py [--rounds 41] [--inner 200] [--step-inner 5]
                                           [--before 5a8c6a2] [--dtype float32]
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import lsa_native as ln
from lsa_native import _core, multihead as mh, train
from lsa_native.sampling import LinearPrompts

D, N, H, R, B = 5, 20, 5, 1, 4096


def objectives_at(ref: str):
    """lsa_native.train.objectives as of git ref ``ref``, loaded beside the current one."""
    root = Path(__file__).resolve().parents[1]
    text = subprocess.run(["git", "-C", str(root), "show", f"{ref}:python/lsa_native/train/objectives.py"],
                          check=True, capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "objectives_before.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("lsa_native.train._objectives_before", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def interleaved(variants: dict, rounds: int, inner: int) -> dict:
    """{name: CPU seconds per call in each round} over ``rounds`` rounds, each timing every
    variant for ``inner`` calls in turn (one warm-up call each first)."""
    times = {name: [] for name in variants}
    for fn in variants.values():
        fn()
    for _ in range(rounds):
        for name, fn in variants.items():
            t0 = time.process_time()
            for _ in range(inner):
                fn()
            times[name].append((time.process_time() - t0) / inner)
    return times


def paired(times: dict, a: str, b: str) -> float:
    """The median over rounds of a's time minus b's in the same round."""
    return statistics.median(x - y for x, y in zip(times[a], times[b]))


def _host_backed(a):
    """Host memory presented as a CUDA array: the tests' emulated-device operand
    (tests/conftest.py's HostBackedCudaArray, imported from there)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from conftest import HostBackedCudaArray

    return HostBackedCudaArray(a)


def kq_operands(dtype, device: bool):
    """(W_k, W_q, W_kq, d_kq, d_k, d_q): host arrays, or Pieces of emulated device buffers."""
    rng = np.random.default_rng(0)
    kq, n2 = H * R * (D + 1), H * (D + 1) ** 2
    flat = rng.standard_normal(4 * kq + 2 * n2).astype(dtype) * 0.01
    shapes = [(H, R, D + 1)] * 2 + [(H, D + 1, D + 1)] * 2 + [(H, R, D + 1)] * 2
    if device:
        buffer = _host_backed(flat)
        piece = lambda k, shape: ln.cuda.Piece(buffer, k, shape)  # noqa: E731
    else:
        piece = lambda k, shape: flat[k:k + int(np.prod(shape))].reshape(shape)  # noqa: E731
    out, k = [], 0
    for shape in shapes:
        out.append(piece(k, shape))
        k += int(np.prod(shape))
    return out


def kq_pair(dtype, rounds, inner, device=False):
    W_k, W_q, W_kq, d_kq, d_k, d_q = kq_operands(dtype, device)

    def public():
        mh.merge_kq(W_k, W_q, out=W_kq)
        mh.chain_kq(W_k, W_q, d_kq, out=(d_k, d_q))

    def native():
        _core.multihead_merge_kq(W_k, W_q, W_kq)
        _core.multihead_chain_kq(W_k, W_q, d_kq, d_k, d_q)

    return interleaved({"public (checked)": public, "native": native}, rounds, inner)


def bound_steps(before, dtype, rounds, inner):
    Lambda = np.arange(1, D + 1) / 15.0
    rng = np.random.default_rng(1)
    W_pv = 0.01 * rng.standard_normal((H, D + 1, D + 1))
    W_k, W_q = 0.01 * rng.standard_normal((2, H, R, D + 1))
    out = {}
    for method in ("tokens", "wishart"):
        data = train.Prompts(LinearPrompts(D, N, Lambda=np.diag(Lambda), seed=2), batch=B,
                             dtype=dtype)
        variants, theta = {}, None
        for name, module in (("before", before), ("after", train.objectives)):
            obj = module.MultiHeadLSAObjective(W_pv, W_k=W_k, W_q=W_q, method=method)
            step_fn, theta = obj.bind(data), obj.theta0.copy()
            counter = iter(range(10**9))
            variants[name] = (lambda f=step_fn, c=counter: f(theta, next(c)))
        out[method] = interleaved(variants, rounds, inner)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=41)
    ap.add_argument("--inner", type=int, default=200)
    ap.add_argument("--step-inner", type=int, default=5)
    ap.add_argument("--before", default="5a8c6a2",
                    help="git ref of the objectives module to compare with (default: the last "
                         "commit before the check-once refactor)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    args = ap.parse_args()
    ln.set_num_threads(1)
    dtype = np.dtype(args.dtype)
    print(f"d = {D}, N = {N}, H = {H}, r = {R}, B = {B}, {dtype}, 1 native thread, CPU-time "
          f"medians of {args.rounds} interleaved rounds")
    print("\n| merge + chain pair, µs per step | public (checked) | native | saving (paired median) |"
          "\n| --- | ---: | ---: | ---: |")
    _core.emulate_cuda_on_cpu_for_tests(True)
    try:
        for where, device in (("host arrays", False), ("emulated device Pieces", True)):
            kq = kq_pair(dtype, args.rounds, args.inner, device)
            print(f"| {where} | {statistics.median(kq['public (checked)']) * 1e6:.1f} | "
                  f"{statistics.median(kq['native']) * 1e6:.1f} | "
                  f"{paired(kq, 'public (checked)', 'native') * 1e6:.1f} |")
    finally:
        _core.emulate_cuda_on_cpu_for_tests(False)
    steps = bound_steps(objectives_at(args.before), dtype, args.rounds, args.step_inner)
    print(f"\n| bound step ({args.before} → working tree) | before ms | after ms | saving µs "
          "(paired median) | ratio |\n| --- | ---: | ---: | ---: | ---: |")
    for method, got in steps.items():
        b, a = (statistics.median(got[k]) for k in ("before", "after"))
        print(f"| {method} | {b * 1e3:.3f} | {a * 1e3:.3f} | {paired(got, 'before', 'after') * 1e6:.0f} "
              f"| {b / a:.3f} |")


if __name__ == "__main__":
    main()
