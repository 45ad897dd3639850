"""Training drivers for the one-layer LSA on sampled prompts (native loss and gradient)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from . import lsa
from ._validation import positive_float, positive_int
from .data import PromptBatch

__all__ = ["History", "sgd_lsa"]


@dataclass
class History:
    """Per-step records of a training run: ``step`` and ``loss`` plus any metric a callback adds."""

    step: list = field(default_factory=list)
    loss: list = field(default_factory=list)
    metrics: dict = field(default_factory=dict)

    def record(self, step: int, loss: float, **metrics) -> None:
        self.step.append(step)
        self.loss.append(loss)
        for k, v in metrics.items():
            self.metrics.setdefault(k, []).append(v)


def sgd_lsa(
    W_pv,
    W_kq,
    sample: Callable[[np.random.Generator], PromptBatch],
    *,
    steps: int,
    lr: float,
    rng: np.random.Generator,
    lr_decay_to: float = 1.0,
    dtype=np.float32,
    record_every: int = 10,
    metric: Callable[[np.ndarray, np.ndarray], dict] | None = None,
    progress: bool = False,
) -> tuple[np.ndarray, np.ndarray, History]:
    """Mini-batch SGD θ ← θ − η_k ∇L̂(θ) on fresh prompts each step, L̂ of ZFB (3.7).

    ``sample(rng)`` returns a :class:`PromptBatch`; the step size decays geometrically from ``lr``
    to ``lr * lr_decay_to`` over the run (1.0: constant). Parameters are kept in float64; the
    native loss/gradient runs in ``dtype``. ``metric(W_pv, W_kq)`` adds entries to the history
    every ``record_every`` steps. Returns (W_pv, W_kq, history).
    """
    steps = positive_int(steps, "steps")
    lr = positive_float(lr, "lr")
    lr_decay_to = positive_float(lr_decay_to, "lr_decay_to")
    record_every = positive_int(record_every, "record_every")
    W_pv = np.array(W_pv, dtype=np.float64)
    W_kq = np.array(W_kq, dtype=np.float64)
    history = History()
    decay = lr_decay_to ** (1.0 / max(steps - 1, 1))
    iterator = range(steps)
    if progress:
        from tqdm.auto import tqdm

        iterator = tqdm(iterator, desc="SGD", unit="step")
    for k in iterator:
        batch = sample(rng)
        loss, g_pv, g_kq = lsa.loss_and_grad(batch.E.astype(dtype, copy=False), batch.y_q,
                                             W_pv, W_kq)
        eta = lr * decay**k
        W_pv -= eta * g_pv
        W_kq -= eta * g_kq
        if k % record_every == 0 or k == steps - 1:
            history.record(k, loss, **(metric(W_pv, W_kq) if metric else {}))
    return W_pv, W_kq, history
