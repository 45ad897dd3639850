"""Kernel attention benchmark at CCS's minibatch size (d = 5, n = 30, L = 3, B = 30000, float32,
one head): native forward and forward+backward vs the numpy reference forward and PyTorch CPU
autograd (when installed), each activation, medians of repeated runs in the same process; then
native forward+backward as a rate (GFLOP/s of the full algorithm, report_e2e.ka_flops: an effective
rate, the last layer computes the query column only) against the practical ceiling, numpy's sgemm,
and the FMA peak of one core (bench/cpp/fma_peak.cpp, compiled here with the system C++ compiler;
"n/a" without one), all measured in this run.

    python bench/report_kernel_attention.py [--repeats 5] [--batch 30000] [--cpu-time] [--native-only]

With --cpu-time every time is CPU-seconds of the process on one thread (native, numpy's BLAS and
torch): per-core rates, what a machine shared with other jobs disturbs least. --native-only skips
the numpy and torch timings (before/after runs of the native kernels). LSA_NATIVE_KA_LANES=0 in the
environment runs loss_and_grad on the per-prompt path instead of prompts in the vector lanes
(kernel_attention_kernels.inl): the before/after of that path in one build, e.g.

    for e in 0 1 0 1; do LSA_NATIVE_KA_LANES=$e python bench/report_kernel_attention.py --cpu-time --native-only; done
"""
from __future__ import annotations

import argparse
import functools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __name__ == "__main__" and "--cpu-time" in sys.argv:  # one BLAS thread: set before numpy loads
    os.environ.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import report_e2e  # noqa: E402
from report_e2e import ka_flops, ka_flops_done, sgemm_gflops  # noqa: E402
from timing import median_seconds  # noqa: E402

import lsa_native as ln
from lsa_native import kernel_attention as ka
from lsa_native.reference import kernel_attention as ref

try:
    import torch
except ImportError:
    torch = None


def torch_loss(Z0, y, V, B, C, act):
    """The model in PyTorch, differentiable (the formulation a researcher writes by hand)."""
    d, n = Z0.shape[1] - 1, Z0.shape[2] - 1
    Z = Z0
    for l in range(V.shape[0]):
        X = Z[:, :d]
        S = (B[l, 0] @ X).transpose(1, 2) @ (C[l, 0] @ X)
        Sm = S[:, :n, :]
        if act == "linear":
            Hm = Sm
        elif act == "relu":
            Hm = torch.relu(Sm)
        elif act == "exp":
            Hm = torch.exp(Sm)
        else:
            Hm = torch.softmax(Sm, dim=1)
        Z = Z + V[l, 0] @ (Z[:, :, :n] @ Hm)
    return ((Z[:, d, n] + y) ** 2).mean()


def torch_loss_and_grad(Z0, y, V, B, C, act):
    """torch_loss with autograd."""
    V, B, C = (t.clone().requires_grad_(True) for t in (V, B, C))
    loss = torch_loss(Z0, y, V, B, C, act)
    loss.backward()
    return loss.item()


def fma_peak_gflops() -> float | None:
    """Single-precision FMA peak of one core in GFLOP/s (bench/cpp/fma_peak.cpp), None without a
    C++ compiler or AVX2+FMA."""
    compiler = shutil.which(os.environ.get("CXX", "c++"))
    if compiler is None:
        return None
    source = Path(__file__).parent / "cpp" / "fma_peak.cpp"
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "fma_peak"
        try:
            subprocess.run([compiler, "-O2", "-mavx2", "-mfma", str(source), "-o", str(exe)],
                           check=True, capture_output=True)
            out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
        except (OSError, subprocess.CalledProcessError):
            return None
    return float(out.split()[0])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--batch", type=int, default=30000)
    p.add_argument("--cpu-time", action="store_true", help="CPU-seconds on one thread (per-core rates)")
    p.add_argument("--native-only", action="store_true", help="skip the numpy and torch timings")
    args = p.parse_args(argv)
    global median_seconds
    if args.cpu_time:
        median_seconds = functools.partial(median_seconds, clock=time.process_time)
        report_e2e.median_seconds = median_seconds  # sgemm_gflops on the same clock
        ln.set_num_threads(1)
        if torch is not None:
            torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    Bsz, d, n, L = args.batch, 5, 30, 3
    lanes = "per-prompt" if os.environ.get("LSA_NATIVE_KA_LANES", "1").startswith("0") else "lanes"
    print(f"lsa_native {ln.__version__}, CPU kernels {ln.cpu_kernel_isa()} (loss_and_grad: {lanes}), "
          f"{ln.num_threads()} threads, "
          f"clock {'CPU-seconds' if args.cpu_time else 'wall'}, torch "
          f"{'absent' if torch is None else torch.__version__}; d={d} n={n} L={L} B={Bsz} float32; "
          f"load average at the start {os.getloadavg()}")
    print("| activation | native fwd ms | native fwd+bwd ms | numpy fwd ms | torch fwd+bwd ms "
          "| fwd vs numpy | fwd+bwd vs torch | bwd/fwd |")
    print("|---|---|---|---|---|---|---|---|")
    batch = ln.data.kernel_gp_prompts(rng, Bsz, d, n, "exp", dtype=np.float32)
    Z0, y = batch.E, batch.y_q
    params = ka.KernelAttentionParams.gaussian(rng, d, L, 1, "exp", sparse=False, scale=0.2)
    V, B, C = (a.astype(np.float32) for a in (params.V / n, params.B, params.C))
    rates, done = {}, ka_flops_done(Bsz, d, n, L) / ka_flops(Bsz, d, n, L)
    for act in ka.ACTIVATIONS:
        t_fwd = median_seconds(lambda: ka.forward(Z0, V, B, C, act), args.repeats)
        t_fb = median_seconds(lambda: ka.loss_and_grad(Z0, y, V, B, C, act), args.repeats)
        rates[act] = ka_flops(Bsz, d, n, L) / t_fb / 1e9
        row = f"| {act} | {t_fwd * 1e3:.1f} | {t_fb * 1e3:.1f} | "
        if args.native_only:
            print(row + f"— | — | — | — | {t_fb / t_fwd:.1f} |")
            continue
        t_np = median_seconds(lambda: ref.forward(Z0, V, B, C, [act]), max(1, args.repeats // 2))
        row += f"{t_np * 1e3:.1f} | "
        if torch is not None:
            tZ, ty, tV, tB, tC = (torch.from_numpy(np.ascontiguousarray(a)) for a in (Z0, y, V, B, C))
            t_t = median_seconds(lambda: torch_loss_and_grad(tZ, ty, tV, tB, tC, act), args.repeats)
            row += f"{t_t * 1e3:.1f} | {t_np / t_fwd:.1f}x | {t_t / t_fb:.1f}x | {t_fb / t_fwd:.1f} |"
        else:
            row += f"— | {t_np / t_fwd:.1f}x | — | {t_fb / t_fwd:.1f} |"
        print(row)
    sgemm, peak = sgemm_gflops(args.repeats), fma_peak_gflops()
    peak_label = "n/a" if peak is None else f"{peak:.0f}"
    print(f"\nsgemm (numpy, 2048², {'1 thread' if args.cpu_time else 'its threads'}) {sgemm:.1f} GFLOP/s; "
          f"FMA peak of one core {peak_label} GFLOP/s; load average at the end {os.getloadavg()}")
    print("| activation | native fwd+bwd GFLOP/s (effective) | of sgemm | of one core's FMA peak "
          "| FLOPs done (ka_flops_done) GFLOP/s | of sgemm | of the FMA peak |")
    print("|---|---|---|---|---|---|---|")
    for act, rate in rates.items():
        of_peak = "n/a" if peak is None else f"{rate / peak:.0%}"
        done_peak = "n/a" if peak is None else f"{rate * done / peak:.0%}"
        print(f"| {act} | {rate:.1f} | {rate / sgemm:.0%} | {of_peak} | {rate * done:.1f} "
              f"| {rate * done / sgemm:.0%} | {done_peak} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
