"""GPU benchmark of the native CUDA LSA kernels vs PyTorch CUDA, with a device-to-device copy as the
bandwidth roofline measured in the same run (CUDA events, medians after warm-up).

    python bench/gpu/bench_cuda.py [--out results.json] [--quick]

Rows (SPEC 5, issue 11):
- pred fwd+bwd: loss and gradients of the prediction at d = 20, N = 100, B = 2^20 (float32 and
  float64); native lsa.loss_and_grad on torch CUDA tensors vs PyTorch autograd of the O(N d) token
  form (the best pure-torch formulation). Bytes = one read of E.
- pred fwd: predictions only (native vs the token form without autograd).
- full fwd / vjp: f(E) Gram-first and its VJP at B = 2^18 (native vs torch bmm + autograd); the
  native rows twice: the tiled kernels (default) and "native old kernels"
  (LSA_NATIVE_CUDA_OLD_KERNELS=1), each checked against torch first.
- copy: torch D2D copy of a tensor as large as E; its bandwidth = (read + write) / time.
Prints a table last.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys

import numpy as np
import torch

import lsa_native
from lsa_native import lsa


def timed(fn, *, warmup: int, repeat: int) -> float:
    """Median milliseconds of fn() measured with CUDA events around each call."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def torch_prediction_fb(E, y_q, W_pv, W_kq):
    """PyTorch autograd of the token form: t = p·e_j, s = e_j·q, ŷ = (1/N)Σ t s  (SPEC 3.2)."""
    d, N = E.shape[1] - 1, E.shape[2] - 1
    p = W_pv[-1].detach().clone().requires_grad_(True)
    K = W_kq[:, :d].detach().clone().requires_grad_(True)
    t = torch.einsum("r,brj->bj", p, E)
    q = E[:, :d, -1] @ K.T
    s = torch.einsum("br,brj->bj", q, E)
    y_hat = (t * s).sum(-1) / N
    loss = 0.5 * ((y_hat - y_q) ** 2).mean()
    loss.backward()
    return loss.item(), p.grad, K.grad


def torch_prediction(E, W_pv, W_kq):
    d, N = E.shape[1] - 1, E.shape[2] - 1
    p, K = W_pv[-1], W_kq[:, :d]
    t = torch.einsum("r,brj->bj", p, E)
    s = torch.einsum("br,brj->bj", E[:, :d, -1] @ K.T, E)
    return (t * s).sum(-1) / N


def torch_forward(E, W_pv, W_kq):
    N = E.shape[2] - 1
    G = torch.bmm(E, E.transpose(1, 2)) / N
    return E + torch.matmul(W_pv @ G @ W_kq, E)


def torch_vjp(E, W_pv, W_kq, d_F):
    E = E.detach().requires_grad_(True)
    P = W_pv.detach().clone().requires_grad_(True)
    K = W_kq.detach().clone().requires_grad_(True)
    torch_forward(E, P, K).backward(d_F)
    return P.grad, K.grad, E.grad


@contextlib.contextmanager
def environment(key: str, value: str, on: bool):
    """Environment variable `key` = `value` inside when `on`, unset otherwise (the native launch
    code reads its switches at every call); the previous value restored after."""
    before = os.environ.get(key)
    if on:
        os.environ[key] = value
    else:
        os.environ.pop(key, None)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = before


def old_kernels(on: bool):
    """LSA_NATIVE_CUDA_OLD_KERNELS=1 inside (the general block-per-prompt kernels of the full LSA
    output and of kernel attention) when `on`."""
    return environment("LSA_NATIVE_CUDA_OLD_KERNELS", "1", on)


def bench_dtype(dtype, B: int, B_full: int, d: int, N: int, warmup: int, repeat: int):
    tdtype = {np.float32: torch.float32, np.float64: torch.float64}[dtype]
    name = np.dtype(dtype).name
    gen = torch.Generator(device="cuda").manual_seed(0)
    E = torch.randn((B, d + 1, N + 1), generator=gen, device="cuda", dtype=tdtype)
    E[:, d, N] = 0
    y_q = torch.randn(B, generator=gen, device="cuda", dtype=tdtype)
    W_pv = torch.randn((d + 1, d + 1), generator=gen, device="cuda", dtype=tdtype) / (d + 1)
    W_kq = torch.randn((d + 1, d + 1), generator=gen, device="cuda", dtype=tdtype) / (d + 1)
    e_bytes = E.numel() * E.element_size()
    rows = []

    def row(op, impl, fn, bytes_moved, size, batch=B):
        """Times fn; a failure (e.g. out of memory in a baseline) is recorded, not fatal."""
        try:
            ms = timed(fn, warmup=warmup, repeat=repeat)
        except Exception as exc:  # noqa: BLE001 - report and go on with the other rows
            print(f"[{name}] {op} {impl}: FAILED {type(exc).__name__}: {exc}", flush=True)
            rows.append({"op": op, "impl": impl, "dtype": name, "size": size, "error": str(exc)})
            torch.cuda.empty_cache()
            return
        rows.append({"op": op, "impl": impl, "dtype": name, "size": size, "median_ms": ms,
                     "GB_per_s": bytes_moved / ms / 1e6, "prompts_per_s": batch / ms * 1e3})

    size = f"d={d} N={N} B=2^{B.bit_length() - 1}"
    dst = torch.empty_like(E)
    row("copy", "torch D2D", lambda: dst.copy_(E), 2 * e_bytes, size)
    del dst

    # Correctness at the benchmark size (a wrong fast kernel is not a result).
    try:
        loss, g_pv, g_kq = lsa.loss_and_grad(E, y_q, W_pv, W_kq)
        loss_t, gp_t, gk_t = torch_prediction_fb(E, y_q, W_pv, W_kq)
        rel = max(abs(loss - loss_t) / abs(loss_t),
                  float((g_pv[-1] - gp_t).abs().max() / gp_t.abs().max()),
                  float((g_kq[:, :d] - gk_t).abs().max() / gk_t.abs().max()))
        print(f"[{name}] native vs torch at the benchmark size: max relative difference {rel:.2e}",
              flush=True)
        rows.append({"op": "check", "impl": "native vs torch", "dtype": name, "size": size,
                     "max_rel_diff": rel})
    except Exception as exc:  # noqa: BLE001
        print(f"[{name}] correctness check FAILED: {type(exc).__name__}: {exc}", flush=True)
        torch.cuda.empty_cache()

    row("pred fwd+bwd", "native", lambda: lsa.loss_and_grad(E, y_q, W_pv, W_kq), e_bytes, size)
    row("pred fwd+bwd", "torch", lambda: torch_prediction_fb(E, y_q, W_pv, W_kq), e_bytes, size)
    y = torch.empty(B, device="cuda", dtype=tdtype)
    row("pred fwd", "native", lambda: lsa.predict(E, W_pv, W_kq, out=y), e_bytes, size)
    row("pred fwd", "torch", lambda: torch_prediction(E, W_pv, W_kq), e_bytes, size)
    del E, y
    torch.cuda.empty_cache()

    # Full forward and VJP at a smaller batch (they write arrays as large as E).
    E = torch.randn((B_full, d + 1, N + 1), generator=gen, device="cuda", dtype=tdtype)
    d_F = torch.randn_like(E)
    fb = E.numel() * E.element_size()
    size_f = f"d={d} N={N} B=2^{B_full.bit_length() - 1}"
    F = torch.empty_like(E)
    # The tiled kernels (default) and the previous ones (LSA_NATIVE_CUDA_OLD_KERNELS=1, read at each
    # launch), both checked against torch at this size before timing.
    for impl, old in (("native", False), ("native old kernels", True)):
        with old_kernels(old):
            try:
                F_t = torch_forward(E, W_pv, W_kq)
                rel_f = float((lsa.forward(E, W_pv, W_kq, out=F) - F_t).abs().max() / F_t.abs().max())
                del F_t
                dE_n = lsa.vjp(E, W_pv, W_kq, d_F)
                dE_t = torch_vjp(E, W_pv, W_kq, d_F)
                rel_v = max(float((a - b).abs().max() / b.abs().max()) for a, b in zip(dE_n, dE_t))
                del dE_n, dE_t
                print(f"[{name}] full fwd / vjp {impl} vs torch: max relative difference "
                      f"{rel_f:.2e} / {rel_v:.2e}", flush=True)
                rows.append({"op": "check full", "impl": f"{impl} vs torch", "dtype": name,
                             "size": size_f, "max_rel_diff": max(rel_f, rel_v)})
            except Exception as exc:  # noqa: BLE001
                print(f"[{name}] full check {impl} FAILED: {type(exc).__name__}: {exc}", flush=True)
                torch.cuda.empty_cache()
            row("full fwd", impl, lambda: lsa.forward(E, W_pv, W_kq, out=F), 2 * fb, size_f, B_full)
            row("vjp", impl, lambda: lsa.vjp(E, W_pv, W_kq, d_F), 3 * fb, size_f, B_full)
    row("full fwd", "torch", lambda: torch_forward(E, W_pv, W_kq), 2 * fb, size_f, B_full)
    row("vjp", "torch", lambda: torch_vjp(E, W_pv, W_kq, d_F), 3 * fb, size_f, B_full)
    del E, d_F, F
    torch.cuda.empty_cache()
    return rows


def table(rows) -> str:
    errors = [r for r in rows if "error" in r]
    checks = [r for r in rows if r["op"] in ("check", "check full")]
    rows = [r for r in rows if "median_ms" in r]
    copy = {(r["dtype"]): r["GB_per_s"] for r in rows if r["op"] == "copy"}
    lines = [f"{'op':<13} {'dtype':<8} {'size':<22} {'impl':<18} {'median ms':>10} {'GB/s':>8} "
             f"{'% copy':>7} {'vs torch':>9}"]
    ms_of = {(r["op"], r["dtype"], r["impl"]): r["median_ms"] for r in rows}
    for r in rows:
        frac = 100 * r["GB_per_s"] / copy[r["dtype"]] if r["dtype"] in copy else float("nan")
        torch_ms = ms_of.get((r["op"], r["dtype"], "torch"))
        speedup = f"{torch_ms / r['median_ms']:.1f}x" if r["impl"].startswith("native") and torch_ms else ""
        lines.append(f"{r['op']:<13} {r['dtype']:<8} {r['size']:<22} {r['impl']:<18} "
                     f"{r['median_ms']:>10.3f} {r['GB_per_s']:>8.0f} {frac:>6.0f}% {speedup:>9}")
    lines += [f"{r['op']:<13} {r['dtype']:<8} {r['size']:<22} {r['impl']:<18} FAILED: {r['error'][:60]}"
              for r in errors]
    lines += [f"check: {r['dtype']} {r['size']} {r['impl']} "
              f"{'loss/gradients' if r['op'] == 'check' else 'F / VJP'}, max relative "
              f"difference {r['max_rel_diff']:.1e}" for r in checks]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    ap.add_argument("--quick", action="store_true", help="B = 2^16 (a smoke run)")
    args = ap.parse_args(argv)
    if not lsa_native.cuda_available():
        print("no CUDA device / lsa_native without CUDA kernels", file=sys.stderr)
        return 2
    B = 2**16 if args.quick else 2**20
    B_full = 2**14 if args.quick else 2**18
    rows = []
    for dtype in (np.float32, np.float64):
        r = bench_dtype(dtype, B, B_full, 20, 100, warmup=3, repeat=10 if dtype == np.float64 else 15)
        rows += r
    publish(rows, table(rows), args.out)
    return 0


def publish(rows, text: str, out) -> None:
    """Prints the table with the device and versions; with `out`, writes the rows as JSON there
    and the table beside it (.txt)."""
    info = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "lsa_native": lsa_native.__version__}
    if out:
        with open(out, "w") as f:
            json.dump({"info": info, "rows": rows}, f, indent=1)
        with open(out.rsplit(".", 1)[0] + ".txt", "w") as f:
            f.write(text + "\n")
    print(f"\n{info}\n{text}")


if __name__ == "__main__":
    sys.exit(main())
