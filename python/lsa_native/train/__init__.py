"""Training: one :func:`fit` for every model, optimizers with torch's rules, held-out evaluation,
the metrics the papers plot, run directories with atomic checkpoints and bitwise resume.

Loss convention (the whole package): ½ · mean squared error of the prediction of y_q — ZFB (3.7)
for LSA, ZFB (3.8) for the exact population loss, ½ × CCS (5) for kernel attention.

Train a 3-layer softmax kernel-attention model on exp-kernel GP labels with Adam, gradient
clipping and prompts resampled every 10 steps (CCS H.1, at a reduced size)::

    import numpy as np
    from lsa_native import kernel_attention as ka, sampling, train

    d, n = 5, 30
    spec = sampling.KernelGPPrompts(d, n, "exp", seed=0)        # or train.KernelGPPromptsNumpy
    heldout = sampling.KernelGPPrompts(d, n, "exp", seed=1).sample(batch=3000)
    params0 = ka.KernelAttentionParams.gaussian(np.random.default_rng(0), d, layers=3,
                                                 activations="softmax")
    result = train.fit(
        train.KernelAttentionObjective(params0),                 # hold_A_zero=True: CCS Thm 4.5
        train.Adam(lr=1e-3, clip_norm=1.0),
        data=train.Prompts(spec, batch=3000, resample_every=10),
        eval_data=heldout, eval_every=50, bayes_loss=train.bayes_loss(heldout),
        steps=500, run_dir="runs/ka-softmax", checkpoint_every=100, resume=True,
        metrics={"dist_BC": lambda p: train.kernel_attention_identity_distances(p)["BC"].max()})
    result.params     # KernelAttentionParams; result.history["eval_loss"], ["bayes_gap"], ...

The same loop runs :class:`LSAObjective` (sampled prompts), :class:`PopulationObjective` (exact
loss: fixed Λ, random diagonal Λ, Λ samples) and any ``fn(theta, step) -> (loss, grad)``
(:class:`CallableObjective`). ``sgd_lsa`` and ``gradient_descent`` (on the population loss) are thin
calls of ``fit``; the native gradient flow (``population.gradient_flow``) integrates an ODE instead and
gives its records as a :class:`History` through ``FlowTrajectory.history()``.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from .. import population
from .._validation import positive_float, positive_int
from ..data import PromptBatch
from .data import (FixedPrompts, GeneratorPrompts, KernelGPPromptsNumpy, LinearPromptsNumpy,
                   Prompts, heldout)
from .fit import FitResult, StepInfo, TrainingDiverged, fit
from ..history import History
from .metrics import (bayes_loss, dist_to_identity, kernel_attention_identity_distances,
                      relative_distance)
from .objectives import (CallableObjective, KernelAttentionObjective, LSAObjective,
                         MultiHeadLSAObjective, Objective,
                         PopulationObjective)
from .optim import SGD, Adam, AdamW, Optimizer, clip_grad_norm, make_optimizer
from .rundir import CheckpointError
from .schedules import Schedule, make_schedule

__all__ = [
    "fit", "FitResult", "StepInfo", "TrainingDiverged", "CheckpointError", "History",
    "Objective", "LSAObjective", "MultiHeadLSAObjective", "KernelAttentionObjective", "PopulationObjective",
    "CallableObjective",
    "Optimizer", "SGD", "Adam", "AdamW", "make_optimizer", "clip_grad_norm", "Schedule",
    "make_schedule",
    "Prompts", "FixedPrompts", "GeneratorPrompts", "LinearPromptsNumpy", "KernelGPPromptsNumpy",
    "heldout",
    "dist_to_identity", "kernel_attention_identity_distances", "relative_distance", "bayes_loss",
    "sgd_lsa", "gradient_descent",
]


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
    """Mini-batch SGD θ ← θ − η_k ∇L̂(θ) on fresh prompts each step, L̂ of ZFB (3.7): a thin call of
    :func:`fit` (``LSAObjective``, ``SGD`` with an exponential schedule, ``GeneratorPrompts``).

    ``sample(rng)`` returns a :class:`PromptBatch`; the step size decays geometrically from ``lr``
    to ``lr * lr_decay_to`` over the run (1.0: constant). Parameters are kept in float64; the
    native loss/gradient runs in ``dtype``. ``metric(W_pv, W_kq)`` adds entries to the history
    every ``record_every`` steps (at the parameters of that step; the last row, step ``steps``,
    is the final parameters). Returns (W_pv, W_kq, history).
    """
    steps = positive_int(steps, "steps")
    lr = positive_float(lr, "lr")
    lr_decay_to = positive_float(lr_decay_to, "lr_decay_to")
    decay = lr_decay_to ** (1.0 / max(steps - 1, 1))
    objective = LSAObjective(W_pv, W_kq, dtype=dtype)
    metrics = {} if metric is None else {"metric": lambda params: metric(*params)}
    res = fit(objective, SGD(lr=lr, schedule=Schedule("exponential", gamma=decay)), steps=steps,
              data=GeneratorPrompts(sample, rng), record_every=record_every, metrics=metrics,
              progress=progress, desc="SGD")
    W_pv, W_kq = objective.unpack(res.theta)
    return W_pv.copy(), W_kq.copy(), res.history


def gradient_descent(W_pv, W_kq, Lambda, N: int, *, step: float, n_steps: int,
                     record_every: int = 1):
    """Plain GD θ ← θ − η ∇L(θ) on the exact population loss [ZFB (3.8)] (the discrete gradient
    flow of ``population.gradient_flow``): a thin call of :func:`fit` (``PopulationObjective``,
    ``SGD(lr=step)``). Returns (W_pv, W_kq, steps [K], losses [K]) recorded every
    ``record_every`` steps and at ``n_steps`` (the final parameters). A non-finite loss raises
    :class:`TrainingDiverged` (a FloatingPointError)."""
    W_pv, W_kq, d = population._params(W_pv, W_kq)
    eta = positive_float(step, "step")
    n_steps = positive_int(n_steps, "n_steps", minimum=0)
    record_every = positive_int(record_every, "record_every")
    objective = PopulationObjective(W_pv, W_kq, positive_int(N, "N"),
                                    Lambda=population._covariance(Lambda, d))
    if n_steps == 0:
        L = objective.evaluate(objective.theta0)
        if not np.isfinite(L):
            raise FloatingPointError("gradient_descent: non-finite loss at the initial parameters")
        return W_pv.copy(), W_kq.copy(), np.array([0]), np.array([L])
    res = fit(objective, SGD(lr=eta), steps=n_steps, record_every=record_every, progress=False)
    W_pv, W_kq = objective.unpack(res.theta)
    return W_pv.copy(), W_kq.copy(), res.history["step"], res.history["loss"]
