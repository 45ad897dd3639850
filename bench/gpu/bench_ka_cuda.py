"""GPU benchmark of the native CUDA kernel attention vs PyTorch CUDA autograd (CUDA events,
medians after warm-up), at CCS's size d = 5, n = 30, L = 3, one head, B = 30000 and 2^20.

    python bench/gpu/bench_ka_cuda.py [--out results.json] [--quick]

Rows (issue 11; target: native ≥ 3x PyTorch CUDA):
- loss+grad: the loss (1/B) Σ (TF + y_q)² and its gradients for V, B, C; native
  kernel_attention.loss_and_grad on torch CUDA tensors vs autograd of the same equations in
  PyTorch (bench/report_kernel_attention.py's torch_loss, the formulation a researcher writes).
- fwd: Z_L only (native forward vs torch_loss's forward without autograd).
- fwd+vjp: forward saving the context, then the VJP for an upstream ∂ℓ/∂Z_L with dZ0 (what an
  autograd wrapper runs) vs torch forward + backward of Σ Z_L ⊙ dZ.
Also a correctness check at each size (native vs torch loss and gradients). Prints a table last.
- predict: ŷ_L alone on the device (kernel_attention.predict: the last layer as the query layer,
  ŷ_L [B] written natively) vs the torch forward's query label.
- vjp: the VJP without a saved context (the forward recomputed per prompt), with dZ0.
impl "old": the native rows again with LSA_NATIVE_CUDA_OLD_KERNELS=1 (the block-per-prompt
kernel, kept until both have been measured; --no-old skips them).
impl "full": loss+grad and predict with LSA_NATIVE_KA_QUERY=0 (the last layer in full, as before
the query layer: the before/after of the query layer in one run; fwd and fwd+vjp never use it).
impl "stored": loss+grad and vjp with LSA_NATIVE_KA_RECOMPUTE=0 (every head's U, W, h̃, Y stored
in the warp's workspace, as before 2026-11-28; "native" runs the default recomputing workspace:
Z_0..Z_L and one head slot per warp, the backward recomputing each head's forward, 20.5 instead of
33.7 KB a warp for the float loss at the CCS size, more warps per SM; the same per-prompt bits,
batch sums to rounding (another launch grid); checked against torch like "native"). predict, fwd
and fwd+vjp have no workspace choice; "full" runs the default (recomputing) workspace, so its
loss+grad rows are not comparable with those of runs before 2026-11-28 (stored then).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the torch reference
from report_kernel_attention import torch_loss  # noqa: E402

import lsa_native  # noqa: E402
from lsa_native import kernel_attention as ka  # noqa: E402
from bench_cuda import environment, old_kernels, publish, timed  # noqa: E402  (switches, CUDA-event medians, the report)


def full_last_layer(on: bool):
    """LSA_NATIVE_KA_QUERY=0 inside when `on`: the last kernel-attention layer in full instead of
    the query layer."""
    return environment("LSA_NATIVE_KA_QUERY", "0", on)


def stored_workspace(on: bool):
    """LSA_NATIVE_KA_RECOMPUTE=0 inside when `on`: the warp kernel stores every head's forward for
    the loss and the context-free VJP instead of recomputing it (the default)."""
    return environment("LSA_NATIVE_KA_RECOMPUTE", "0", on)


def torch_forward(Z0, V, B, C, act):
    """Z_L of CCS (3) in PyTorch (one head): the forward of torch_loss."""
    d, n = Z0.shape[1] - 1, Z0.shape[2] - 1
    Z = Z0
    for l in range(V.shape[0]):
        X = Z[:, :d]
        S = ((B[l, 0] @ X).transpose(1, 2) @ (C[l, 0] @ X))[:, :n, :]
        H = {"linear": lambda s: s, "relu": torch.relu, "exp": torch.exp,
             "softmax": lambda s: torch.softmax(s, dim=1)}[act](S)
        Z = Z + V[l, 0] @ (Z[:, :, :n] @ H)
    return Z


def torch_loss_and_grad(Z0, y, V, B, C, act):
    V, B, C = (t.detach().clone().requires_grad_(True) for t in (V, B, C))
    loss = torch_loss(Z0, y, V, B, C, act)
    loss.backward()
    return loss.item(), V.grad, B.grad, C.grad


def torch_forward_vjp(Z0, V, B, C, act, dZ):
    Z0, V, B, C = (t.detach().clone().requires_grad_(True) for t in (Z0, V, B, C))
    torch_forward(Z0, V, B, C, act).backward(dZ)
    return V.grad, B.grad, C.grad, Z0.grad


def bench_size(dtype, Bsz: int, act: str, warmup: int, repeat: int, with_torch: bool,
               with_old: bool = True):
    d, n, L = 5, 30, 3
    tdtype = {np.float32: torch.float32, np.float64: torch.float64}[dtype]
    name = np.dtype(dtype).name
    gen = torch.Generator(device="cuda").manual_seed(0)
    Z0 = torch.randn((Bsz, d + 1, n + 1), generator=gen, device="cuda", dtype=tdtype)
    Z0[:, d, n] = 0
    y = torch.randn(Bsz, generator=gen, device="cuda", dtype=tdtype)
    V = 0.05 * torch.randn((L, 1, d + 1, d + 1), generator=gen, device="cuda", dtype=tdtype)
    B = 0.1 * torch.randn((L, 1, d, d), generator=gen, device="cuda", dtype=tdtype)
    C = 0.1 * torch.randn((L, 1, d, d), generator=gen, device="cuda", dtype=tdtype)
    dZ = torch.randn_like(Z0)
    size = f"B={Bsz} {act}"
    rows = []

    def row(op, impl, fn):
        try:
            ms = timed(fn, warmup=warmup, repeat=repeat)
        except Exception as exc:  # noqa: BLE001 - e.g. torch out of memory: record, go on
            print(f"[{name} {size}] {op} {impl}: FAILED {type(exc).__name__}: {exc}", flush=True)
            rows.append({"op": op, "impl": impl, "dtype": name, "size": size, "error": str(exc)})
            torch.cuda.empty_cache()
            return
        rows.append({"op": op, "impl": impl, "dtype": name, "size": size, "median_ms": ms,
                     "prompts_per_s": Bsz / ms * 1e3})

    if with_torch:  # correctness at the benchmark size: native vs torch (½ convention of ka)
        try:
            expected = torch_loss_and_grad(Z0, y, V, B, C, act)
            for impl in ("native", "stored"):  # the stored workspace's rows checked too
                with stored_workspace(impl == "stored"):
                    loss, *grads = ka.loss_and_grad(Z0, y, V, B, C, act)
                rel = max([abs(2 * loss - expected[0]) / abs(expected[0])] +
                          [float((2 * a - b).abs().max() / b.abs().max())
                           for a, b in zip(grads, expected[1:])])
                rows.append({"op": "check", "impl": f"{impl} vs torch", "dtype": name,
                             "size": size, "max_rel_diff": rel})
                print(f"[{name} {size}] {impl} vs torch: max relative difference {rel:.2e}",
                      flush=True)
        except Exception as exc:  # noqa: BLE001
            print(f"[{name} {size}] correctness check FAILED: {type(exc).__name__}: {exc}", flush=True)
            torch.cuda.empty_cache()

    def native_predict():  # ŷ_L [B] on the device
        return ka.predict(Z0, V, B, C, act)

    def native_fwd_vjp():
        _, ctx = ka.forward(Z0, V, B, C, act, return_context=True)
        return ka.vjp(Z0, V, B, C, act, dZ, context=ctx)

    for impl in ("native", "full", "stored") + (("old",) if with_old else ()):
        with old_kernels(impl == "old"), full_last_layer(impl == "full"), \
                stored_workspace(impl == "stored"):  # read at every call
            row("loss+grad", impl, lambda: ka.loss_and_grad(Z0, y, V, B, C, act))
            if impl != "full":
                row("vjp", impl, lambda: ka.vjp(Z0, V, B, C, act, dZ))
            if impl == "stored":  # predict, fwd, fwd+vjp have no workspace choice
                continue
            row("predict", impl, native_predict)
            if impl != "full":  # Z_L and the VJP need the full last layer anyway
                row("fwd", impl, lambda: ka.forward(Z0, V, B, C, act))
                row("fwd+vjp", impl, native_fwd_vjp)
    if with_torch:
        row("loss+grad", "torch", lambda: torch_loss_and_grad(Z0, y, V, B, C, act))
        with torch.no_grad():
            row("fwd", "torch", lambda: torch_forward(Z0, V, B, C, act))
            row("predict", "torch", lambda: -torch_forward(Z0, V, B, C, act)[:, d, n])
        row("fwd+vjp", "torch", lambda: torch_forward_vjp(Z0, V, B, C, act, dZ))
    del Z0, y, dZ
    torch.cuda.empty_cache()
    return rows


def table(rows) -> str:
    ok = [r for r in rows if "median_ms" in r]
    ms_of = {(r["op"], r["dtype"], r["size"], r["impl"]): r["median_ms"] for r in ok}
    lines = [f"{'op':<10} {'dtype':<8} {'size':<18} {'impl':<9} {'median ms':>10} "
             f"{'Mprompt/s':>10} {'vs torch':>9}"]
    for r in ok:
        t = ms_of.get((r["op"], r["dtype"], r["size"], "torch"))
        speedup = f"{t / r['median_ms']:.1f}x" if r["impl"] != "torch" and t else ""
        lines.append(f"{r['op']:<10} {r['dtype']:<8} {r['size']:<18} {r['impl']:<9} "
                     f"{r['median_ms']:>10.3f} {r['prompts_per_s'] / 1e6:>10.2f} {speedup:>9}")
    lines += [f"{r['op']:<10} {r['dtype']:<8} {r['size']:<18} {r['impl']:<9} FAILED: {r['error'][:60]}"
              for r in rows if "error" in r]
    lines += [f"check: {r['dtype']} {r['size']} {r['impl']} loss/gradients, max relative "
              f"difference {r['max_rel_diff']:.1e}" for r in rows if r["op"] == "check"]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="write the rows as JSON here (and a .txt table)")
    ap.add_argument("--quick", action="store_true", help="B = 3000 and 2^16 (a smoke run)")
    ap.add_argument("--no-old", action="store_true", help="skip the old kernel's rows")
    args = ap.parse_args(argv)
    if not lsa_native.cuda_available():
        print("no CUDA device / lsa_native without CUDA kernels", file=sys.stderr)
        return 2
    small, large = (3000, 2**16) if args.quick else (30000, 2**20)
    rows = []
    for act in ("softmax", "exp"):
        rows += bench_size(np.float32, small, act, warmup=3, repeat=15, with_torch=True,
                           with_old=not args.no_old)
    rows += bench_size(np.float64, small, "softmax", warmup=2, repeat=10, with_torch=True,
                       with_old=not args.no_old)
    rows += bench_size(np.float32, large, "softmax", warmup=1, repeat=5, with_torch=True,
                       with_old=not args.no_old)
    publish(rows, table(rows), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
