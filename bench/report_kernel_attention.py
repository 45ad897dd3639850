"""Kernel attention benchmark at CCS's minibatch size (d = 5, n = 30, L = 3, B = 30000, float32,
one head): native forward and forward+backward vs the numpy reference forward and PyTorch CPU
autograd (when installed), each activation, medians of repeated runs in the same process.

    python bench/report_kernel_attention.py [--repeats 5] [--batch 30000]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--batch", type=int, default=30000)
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    Bsz, d, n, L = args.batch, 5, 30, 3
    print(f"lsa_native {ln.__version__}, {ln.num_threads()} threads, torch "
          f"{'absent' if torch is None else torch.__version__}; d={d} n={n} L={L} B={Bsz} float32")
    print("| activation | native fwd ms | native fwd+bwd ms | numpy fwd ms | torch fwd+bwd ms "
          "| fwd vs numpy | fwd+bwd vs torch | bwd/fwd |")
    print("|---|---|---|---|---|---|---|---|")
    batch = ln.data.kernel_gp_prompts(rng, Bsz, d, n, "exp", dtype=np.float32)
    Z0, y = batch.E, batch.y_q
    params = ka.KernelAttentionParams.gaussian(rng, d, L, 1, "exp", sparse=False, scale=0.2)
    V, B, C = (a.astype(np.float32) for a in (params.V / n, params.B, params.C))
    for act in ka.ACTIVATIONS:
        t_fwd = median_seconds(lambda: ka.forward(Z0, V, B, C, act), args.repeats)
        t_fb = median_seconds(lambda: ka.loss_and_grad(Z0, y, V, B, C, act), args.repeats)
        t_np = median_seconds(lambda: ref.forward(Z0, V, B, C, [act]), max(1, args.repeats // 2))
        row = f"| {act} | {t_fwd * 1e3:.1f} | {t_fb * 1e3:.1f} | {t_np * 1e3:.1f} | "
        if torch is not None:
            tZ, ty, tV, tB, tC = (torch.from_numpy(np.ascontiguousarray(a)) for a in (Z0, y, V, B, C))
            t_t = median_seconds(lambda: torch_loss_and_grad(tZ, ty, tV, tB, tC, act), args.repeats)
            row += f"{t_t * 1e3:.1f} | {t_np / t_fwd:.1f}x | {t_t / t_fb:.1f}x | {t_fb / t_fwd:.1f} |"
        else:
            row += f"— | {t_np / t_fwd:.1f}x | — | {t_fb / t_fwd:.1f} |"
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
