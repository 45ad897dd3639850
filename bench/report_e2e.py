"""Issue 22's CPU report in one run, as same-run ratios, once per CPU kernel table (each forced
through LSA_NATIVE_CPU_ISA in its own child process; a table the CPU lacks falls back to the best
one below it, and the row says which table ran):

- end to end: one-layer LSA trained by ``train.fit`` on fresh prompts (``sampling.LinearPrompts``,
  float32, SGD, fused "wishart" and "tokens" steps) at d = 5, N = 20, B = 4096 and d = 20,
  N = 100, B = 1024, vs a careful PyTorch CPU loop of the same SGD step (torch.randn prompts,
  Gram-first prediction p^T G q, autograd, torch.optim.SGD: ``report_sampling.torch_loop``) and,
  for reference, the papers'-code attention-matrix loop (E + W^PV E M (Eᵀ W^KQ E)/N, the masked
  (N+1)² attention matrix of every prompt); fit's time per step includes everything it does in
  the run (setup, records every step, the final record), divided by its steps;
- LSA prediction forward + backward (predict + predict_vjp without the input gradient, d = 20,
  N = 100, float32, E larger than the last-level cache) as a fraction of the read bandwidth that
  numpy reaches on the same array (np.add.reduce over E), and the training kernel
  `lsa.loss_and_grad` (prediction, loss and both gradients in one read of E) the same way;
- kernel attention loss_and_grad at the CCS size (d = 5, n = 30, L = 3, B = 30000, float32, one
  head) vs PyTorch CPU autograd of the same model, and its rate in GFLOP/s vs numpy's sgemm in the
  same process (FLOPs counted for the full attention, ka_flops; the native last layer computes
  only the query column, so the rate is an effective one: the full algorithm's FLOPs per second),
  and the rate of the FLOPs the kernel does (ka_flops_done, about 0.62 of ka_flops at this size);
- standard normals per second on one thread vs numpy's standard_normal and torch.randn.

    python bench/report_e2e.py [--repeats 5] [--tables baseline,avx2-fma,avx512] [--quick] [--cpu-time]
                               [--sections fit,lsa,ka,normals]

Medians of `repeats` runs; run on an otherwise idle machine if you can (say so if not). With
--cpu-time every time is CPU-seconds of the process (time.process_time) on one thread (native,
numpy's BLAS, torch): per-core rates, what a loaded machine disturbs least.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from timing import median_seconds as _median_seconds  # noqa: E402

median_seconds = _median_seconds

TABLES = ("baseline", "avx2-fma", "avx512")


def ka_flops(B: int, d: int, n: int, L: int, H: int = 1) -> float:
    """FLOPs of the full kernel-attention forward + backward (2 per multiply-add): per layer and
    head U = BX, W = CX (2·d²T each), S = UᵀW (n·T·d), Y = Z M H (D·T·n), V Y (D²·T), T = n + 1,
    D = d + 1; the backward counted as twice the forward."""
    T, D = n + 1, d + 1
    fwd = 2.0 * (2 * d * d * T + n * T * d + D * T * n + D * D * T)
    return 3.0 * fwd * B * L * H


def ka_flops_done(B: int, d: int, n: int, L: int, H: int = 1, input_grad: bool = False) -> float:
    """FLOPs the native CPU loss_and_grad does (2 per multiply-add; kernel_attention_kernels.inl):
    L − 1 full layers forward and backward as ka_flops counts them, less layer 0's terms of ∂ℓ/∂Z_0
    (dY Hᵀ: D·n·T, Bᵀ dU + Cᵀ dW: 2·d²·T) without input_grad, and the last layer's query column alone
    (forward w_q, q: 2d², s: n·d, y: D·n, TF: D; backward dV, dy: 2D, dZ and dh: 2·D·n, a and
    dX: 2·d·n, dB, dw_q, dC, Cᵀ dw_q: 4d²)."""
    T, D = n + 1, d + 1
    fwd = 2 * d * d * T + n * T * d + D * T * n + D * D * T
    bwd = 2 * fwd
    skipped = 0 if input_grad or L == 1 else D * n * T + 2 * d * d * T
    query = (2 * d * d + n * d + D * n + D) + (2 * D + 2 * D * n + 2 * d * n + 4 * d * d)
    return 2.0 * B * H * ((L - 1) * (fwd + bwd) - skipped + query)


def sgemm_gflops(repeats: int) -> float:
    a = np.random.default_rng(0).standard_normal((2048, 2048), dtype=np.float32)
    t = median_seconds(lambda: a @ a, repeats)
    return 2 * 2048**3 / t / 1e9


def read_bandwidth(x: np.ndarray, repeats: int) -> float:
    """Bytes per second numpy reads x at (a sum over its leading axis)."""
    flat = x.reshape(-1, 1024)
    t = median_seconds(lambda: np.add.reduce(flat, axis=0), repeats)
    return x.nbytes / t


# ---- end to end: fit on fresh prompts vs PyTorch loops ----------------------------------------

E2E_SIZES = ((5, 20, 4096), (20, 100, 1024))
E2E_METHODS = ("wishart", "tokens")
FIT_LR = 1e-3


def attention_matrix_loss(E, y_q, W_pv, W_kq):
    """The papers'-code loss: ½-MSE of ŷ = the [d, N] entry of the full LSA forward
    E + W^PV E M (Eᵀ W^KQ E)/N [ZFB (3.5)], M = diag(I_N, 0) (the query is not a key): the
    (N+1)² attention matrix of every prompt."""
    import torch

    d, N = E.shape[1] - 1, E.shape[-1] - 1
    keys = (torch.arange(N + 1) < N).to(E.dtype)[:, None]  # M's diagonal, as a column
    attention = (E.transpose(1, 2) @ W_kq @ E) * keys / N  # [B, N+1, N+1]
    out = E + W_pv @ E @ attention
    return 0.5 * ((out[:, d, N] - y_q) ** 2).mean()


def fit_e2e(repeats: int, quick: bool) -> dict:
    """{"d=.. N=.. B=..": {method: fit s/step, "torch": s/step, "torch_attention": s/step}}."""
    import lsa_native as ln
    from lsa_native import train
    from report_sampling import torch_loop

    out = {}
    for d, N, B in E2E_SIZES:
        if quick:
            B = max(64, B // 16)
        spec = ln.sampling.LinearPrompts(d, N, seed=1)
        rng = np.random.default_rng(0)
        W_pv, W_kq = (0.01 * rng.standard_normal((d + 1, d + 1)) for _ in range(2))
        steps = 5 if quick else 40
        row = {}
        for method in E2E_METHODS:
            run = lambda m=method: train.fit(  # noqa: E731
                train.LSAObjective(W_pv, W_kq, method=m), "sgd", lr=FIT_LR, steps=steps,
                data=train.Prompts(spec, batch=B), progress=False)
            row[method] = median_seconds(run, repeats) / steps
        inner = 2 if quick else 8
        for name, loss_fn in (("torch", None), ("torch_attention", attention_matrix_loss)):
            loop = torch_loop(d, N, B, loss_fn, lr=FIT_LR)
            if loop is not None:
                row[name] = median_seconds(loop, repeats, inner)
        out[f"d={d} N={N} B={B}"] = row
    return out


def child(args) -> dict:
    """The measurements of one table (this process's LSA_NATIVE_CPU_ISA)."""
    import lsa_native as ln
    from lsa_native import kernel_attention as ka
    from lsa_native.sampling import random as rnd

    r = args.repeats
    clock = time.process_time if args.cpu_time else time.perf_counter
    global median_seconds
    median_seconds = functools.partial(_median_seconds, clock=clock)
    if args.cpu_time:
        ln.set_num_threads(1)
    out = {"isa": ln.cpu_kernel_isa(), "threads": ln.num_threads()}
    g = np.random.default_rng(0)
    if "fit" in args.sections:
        out["fit"] = fit_e2e(r, args.quick)
    if "lsa" in args.sections:
        lsa_bandwidth(out, g, args)
    if "ka" in args.sections:
        ka_speed(out, g, args)
    if "normals" in args.sections:
        normal_rates(out, args)
    ln.set_num_threads(1 if args.cpu_time else 0)
    return out


def lsa_bandwidth(out: dict, g, args) -> None:
    import lsa_native as ln

    r = args.repeats

    # LSA prediction fwd + bwd vs read bandwidth.
    B, d, N = (1024 if args.quick else 8192), 20, 100
    E = g.standard_normal((B, d + 1, N + 1), dtype=np.float32)
    Wp, Wk = (g.standard_normal((d + 1, d + 1)).astype(np.float32) / (d + 1) for _ in range(2))
    dy = g.standard_normal(B).astype(np.float32)
    t_fwd = median_seconds(lambda: ln.lsa.predict(E, Wp, Wk), r)
    t_bwd = median_seconds(lambda: ln.lsa.predict_vjp(E, Wp, Wk, dy, with_input_grad=False), r)
    t_lg = median_seconds(lambda: ln.lsa.loss_and_grad(E, dy, Wp, Wk), r)  # one read of E
    bw = read_bandwidth(E, r)
    out["lsa"] = {"fwd_ms": t_fwd * 1e3, "bwd_ms": t_bwd * 1e3, "read_GBps": bw / 1e9,
                  "fraction": 2 * E.nbytes / (t_fwd + t_bwd) / bw,
                  "lg_ms": t_lg * 1e3, "lg_fraction": E.nbytes / t_lg / bw}


def ka_speed(out: dict, g, args) -> None:
    """Kernel attention at the CCS size vs torch and vs sgemm."""
    import lsa_native as ln
    from lsa_native import kernel_attention as ka

    r = args.repeats
    Bk, dk, n, L = (3000 if args.quick else 30000), 5, 30, 3
    # The data and parameters of report_kernel_attention.py (kernel-GP prompts, CCS's scale).
    batch = ln.data.kernel_gp_prompts(g, Bk, dk, n, "exp", dtype=np.float32)
    Z0, y = batch.E, batch.y_q
    params = ka.KernelAttentionParams.gaussian(g, dk, L, 1, "exp", sparse=False, scale=0.2)
    V, Bm, Cm = (a.astype(np.float32) for a in (params.V / n, params.B, params.C))
    sg = sgemm_gflops(r)
    out["sgemm_GFLOPs"] = sg
    flops, done = ka_flops(Bk, dk, n, L), ka_flops_done(Bk, dk, n, L)
    torch = None
    try:
        import torch  # noqa: F811
        sys.path.insert(0, str(Path(__file__).parent))
        from report_kernel_attention import torch_loss_and_grad
    except ImportError:
        torch = None
    out["ka"] = {}
    for act in args.activations:
        t = median_seconds(lambda: ka.loss_and_grad(Z0, y, V, Bm, Cm, act), r)
        row = {"ms": t * 1e3, "GFLOPs": flops / t / 1e9, "of_sgemm": flops / t / 1e9 / sg,
               "done_of_sgemm": done / t / 1e9 / sg}
        if torch is not None:
            tZ, ty, tV, tB, tC = (torch.from_numpy(np.ascontiguousarray(a)) for a in (Z0, y, V, Bm, Cm))
            tt = median_seconds(lambda: torch_loss_and_grad(tZ, ty, tV, tB, tC, act), max(1, r // 2))
            row["torch_ms"] = tt * 1e3
            row["vs_torch"] = tt / t
        out["ka"][act] = row


def normal_rates(out: dict, args) -> None:
    """Normals per second on one thread."""
    import lsa_native as ln
    from lsa_native.sampling import random as rnd

    r = args.repeats
    torch = None
    try:
        import torch  # noqa: F811
    except ImportError:
        pass
    ln.set_num_threads(1)
    m = 1 << (20 if args.quick else 22)
    out["normals"] = {}
    rng = np.random.default_rng(0)
    if torch is not None:
        torch.set_num_threads(1)
    for dt in (np.float32, np.float64):
        name = np.dtype(dt).name
        t_ln = median_seconds(lambda: rnd.normals(m, seed=1, dtype=dt), r)
        t_np = median_seconds(lambda: rng.standard_normal(m, dtype=dt), r)
        row = {"per_s": m / t_ln, "numpy_per_s": m / t_np, "vs_numpy": t_np / t_ln}
        if torch is not None:
            tdt = torch.float32 if dt == np.float32 else torch.float64
            t_t = median_seconds(lambda: torch.randn(m, dtype=tdt), r)
            row["torch_per_s"] = m / t_t
            row["vs_torch"] = t_t / t_ln
        out["normals"][name] = row


def _table(header: list, rows) -> None:
    """A markdown table: the header and one line per row (lists of cells)."""
    print("\n| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")


def print_fit(results: dict) -> None:
    """The end-to-end table: ms per SGD step and fit's speed-up over each torch loop."""
    nan = float("nan")
    rows = []
    for label, r in results.items():
        for size, row in r["fit"].items():
            t, ta = row.get("torch", nan), row.get("torch_attention", nan)
            w, k = row["wishart"], row["tokens"]
            rows.append([label, r["isa"], size, f"{w * 1e3:.2f}", f"{k * 1e3:.2f}", f"{t * 1e3:.2f}",
                         f"{ta * 1e3:.2f}", f"{t / w:.1f}x", f"{t / k:.1f}x", f"{ta / w:.1f}x",
                         f"{ta / k:.1f}x"])
    _table(["table asked", "table ran", "size", "fit wishart ms/step", "fit tokens ms/step",
            "torch (Gram-first) ms", "torch (attention matrix) ms", "wishart vs torch",
            "tokens vs torch", "wishart vs attention matrix", "tokens vs attention matrix"], rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--tables", default=",".join(TABLES))
    p.add_argument("--activations", default="linear,relu,exp,softmax")
    p.add_argument("--quick", action="store_true", help="small sizes (a smoke run, not a measurement)")
    p.add_argument("--cpu-time", action="store_true", help="CPU-seconds on one thread (per-core rates)")
    p.add_argument("--sections", default="fit,lsa,ka,normals",
                   help="what to measure: fit (end to end vs torch), lsa, ka, normals")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.activations = args.activations.split(",")
    args.sections = args.sections.split(",")
    if args.child:
        print(json.dumps(child(args)))
        return 0
    results = {}
    for label in args.tables.split(","):
        env = dict(os.environ, LSA_NATIVE_CPU_ISA=label)
        if args.cpu_time:  # one thread for numpy's BLAS and torch too (set before they load)
            env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        cmd = [sys.executable, __file__, "--child", "--repeats", str(args.repeats),
               "--activations", ",".join(args.activations), "--sections", ",".join(args.sections)]
        cmd += ["--quick"] if args.quick else []
        cmd += ["--cpu-time"] if args.cpu_time else []
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        results[label] = json.loads(res.stdout.strip().splitlines()[-1])
    first = next(iter(results.values()))
    print(f"clock: {'CPU-seconds, 1 thread' if args.cpu_time else 'wall'}; native threads "
          f"{first['threads']}; load average at the end: {os.getloadavg()}")
    if "fit" in args.sections:
        print_fit(results)
    if "lsa" in args.sections:
        _table(["table asked", "table ran", "LSA pred fwd ms", "bwd ms", "numpy read GB/s",
                "fraction of read bw", "loss_and_grad ms (one pass)", "its fraction"],
               ([label, r["isa"], f"{l['fwd_ms']:.2f}", f"{l['bwd_ms']:.2f}",
                 f"{l['read_GBps']:.1f}", f"{l['fraction']:.0%}", f"{l['lg_ms']:.2f}",
                 f"{l['lg_fraction']:.0%}"] for label, r in results.items() for l in [r["lsa"]]))
    nan = float("nan")
    if "ka" in args.sections:
        _table(["table ran", "activation", "KA loss_and_grad ms", "GFLOP/s (effective)",
                "sgemm GFLOP/s", "of sgemm", "FLOPs done, of sgemm", "torch ms", "vs torch"],
               ([r["isa"], act, f"{k['ms']:.1f}", f"{k['GFLOPs']:.1f}", f"{r['sgemm_GFLOPs']:.0f}",
                 f"{k['of_sgemm']:.0%}", f"{k['done_of_sgemm']:.0%}", f"{k.get('torch_ms', nan):.1f}",
                 f"{k.get('vs_torch', nan):.1f}x"]
                for r in results.values() for act, k in r["ka"].items()))
    if "normals" in args.sections:
        _table(["table ran", "dtype", "normals/s (1 thread)", "numpy /s", "torch.randn /s",
                "vs numpy", "vs torch"],
               ([r["isa"], name, f"{k['per_s']:.3g}", f"{k['numpy_per_s']:.3g}",
                 f"{k.get('torch_per_s', nan):.3g}", f"{k['vs_numpy']:.1f}x",
                 f"{k.get('vs_torch', nan):.1f}x"]
                for r in results.values() for name, k in r["normals"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
