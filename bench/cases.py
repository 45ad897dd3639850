"""Benchmark cases shared by the pytest-benchmark suite and report.py (SPEC section 5 sizes)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import lsa_native as ln
from lsa_native import _core
from lsa_native.reference import lsa as ref

try:
    import torch
except ImportError:  # torch is an optional extra (pip install ".[bench]")
    torch = None


@dataclass(frozen=True)
class Size:
    batch: int
    dim: int
    context: int

    def label(self) -> str:
        return f"d={self.dim} N={self.context} B={self.batch}"


FULL_SIZES = [Size(65536, 20, 100), Size(262144, 5, 30)]
SMALL_SIZES = [Size(4096, 20, 100), Size(16384, 5, 30)]


def make_inputs(size: Size, dtype, seed: int = 0):
    rng = np.random.default_rng(seed)
    batch = ln.data.linear_regression_prompts(rng, size.batch, size.dim, size.context, dtype=dtype)
    W_pv, W_kq = ln.theory.thm41_limits(np.eye(size.dim), size.context)
    W_pv = (W_pv + 0.01 * rng.standard_normal(W_pv.shape)).astype(dtype)
    W_kq = (W_kq + 0.01 * rng.standard_normal(W_kq.shape)).astype(dtype)
    return batch.E, batch.y_q.astype(dtype), W_pv, W_kq


def torch_prediction_fb(E, y_q, W_pv, W_kq):
    """PyTorch's best CPU formulation of forward+backward: the O(N d) token form with autograd."""
    d = E.shape[1] - 1
    N = E.shape[2] - 1
    p = W_pv[-1].clone().requires_grad_(True)
    K = W_kq[:, :d].clone().requires_grad_(True)
    t = torch.einsum("r,brj->bj", p, E)
    q = E[:, :d, -1] @ K.T
    s = torch.einsum("br,brj->bj", q, E)
    y_hat = (t * s).sum(-1) / N
    loss = 0.5 * ((y_hat - y_q) ** 2).mean()
    loss.backward()
    return loss.item(), p.grad, K.grad


def torch_forward(E, W_pv, W_kq):
    """PyTorch Gram-first full output E + (W^PV G W^KQ) E with G = E E^T / N."""
    N = E.shape[2] - 1
    G = torch.bmm(E, E.transpose(1, 2)) / N
    return E + torch.matmul(W_pv @ G @ W_kq, E)


def implementations(E, y_q, W_pv, W_kq):
    """{(operation, implementation): zero-argument callable} for the inputs given."""
    F_out = np.empty_like(E)
    impls = {
        ("pred fwd+bwd", "native"): lambda: ln.lsa.loss_and_grad(E, y_q, W_pv, W_kq),
        ("pred fwd+bwd", "numpy"): lambda: ref.loss_and_grad_tokens(E, y_q, W_pv, W_kq),
        ("pred fwd", "native"): lambda: ln.lsa.predict(E, W_pv, W_kq),
        ("pred fwd", "numpy"): lambda: ref.predict_tokens(E, W_pv, W_kq),
        ("full fwd", "native"): lambda: ln.lsa.forward(E, W_pv, W_kq),
        ("full fwd", "numpy"): lambda: ref.forward_gram(E, W_pv, W_kq),
        # Training loops reuse the output buffer: no page faults on 0.5-1 GB of fresh memory.
        ("full fwd", "native out="): lambda: ln.lsa.forward(E, W_pv, W_kq, out=F_out),
        ("stream read", "native"): lambda: _core.stream_sum(E),
    }
    if torch is not None:
        tE, ty, tP, tK = (torch.from_numpy(a) for a in (E, y_q, W_pv, W_kq))
        impls[("pred fwd+bwd", "torch")] = lambda: torch_prediction_fb(tE, ty, tP, tK)
        impls[("full fwd", "torch")] = lambda: torch_forward(tE, tP, tK)
    return impls
