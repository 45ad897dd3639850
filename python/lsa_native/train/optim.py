"""Optimizers on a flat float64 parameter vector, with the update rules of ``torch.optim``.

An optimizer is an immutable spec (hyper-parameters, schedule, clipping); its mutable state is a
plain ``dict`` of numpy arrays and numbers made by :meth:`Optimizer.init` and advanced in place by
:meth:`Optimizer.step`, so a checkpoint is that dict and resuming from it is bitwise exact.

Per step t = 1, 2, … (``state["t"]`` counts the steps taken), with g the gradient:

1. gradient-norm clipping (``clip_norm``, ``torch.nn.utils.clip_grad_norm_``):
   g ← g · min(1, c / (‖g‖₂ + 1e-6));
2. learning rate η_t = lr · schedule(t − 1) (see :mod:`.schedules`);
3. the update rule:

- :class:`SGD` (``torch.optim.SGD``): g ← g + λθ; with momentum μ: b ← g (t = 1),
  b ← μb + (1 − τ)g (t > 1); g ← g + μb (Nesterov) or g ← b; θ ← θ − η_t g.
- :class:`Adam` (``torch.optim.Adam``): g ← g + λθ; m ← β₁m + (1 − β₁)g; v ← β₂v + (1 − β₂)g²;
  m̂ = m/(1 − β₁ᵗ); v̂ = v/(1 − β₂ᵗ) (AMSGrad: v̂ = max over time of v, then corrected);
  θ ← θ − η_t m̂/(√v̂ + ε).
- :class:`AdamW` (``torch.optim.AdamW``): θ ← θ(1 − η_t λ), then Adam without the λθ term.

Per-entry rate factors (``step``'s ``rates``, an objective's ``rate_factors``): entry i steps at
η_t·rates[i] everywhere η_t appears — torch.optim's parameter groups with their own ``lr`` (the
clipping norm is still the whole gradient's, as ``clip_grad_norm_`` over all groups).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .._validation import nonnegative_float, positive_float, real_array
from ._checks import flag
from .schedules import Schedule, make_schedule

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "make_optimizer", "clip_grad_norm", "grad_norm",
           "unchecked_grad_norm", "rate_factors", "OPTIMIZERS"]

_CLIP_EPS = 1e-6  # torch.nn.utils.clip_grad_norm_ adds it to the norm


def grad_norm(grad: np.ndarray) -> float:
    """‖g‖₂ without overflow in ‖g‖² for a finite g (inf only when ‖g‖₂ itself exceeds the float64
    range)."""
    with np.errstate(over="ignore"):
        return unchecked_grad_norm(np.asarray(grad, dtype=np.float64))


def unchecked_grad_norm(grad: np.ndarray) -> float:
    """:func:`grad_norm` of a float64 array, for a caller that has numpy's overflow warning off
    (``fit``'s loop): np.linalg.norm's own sum sqrt(g·g), without its overhead."""
    flat = grad.ravel()
    sq = float(flat.dot(flat))
    if math.isfinite(sq):
        return math.sqrt(sq)
    norm = float(np.linalg.norm(grad))
    if math.isinf(norm) and np.all(np.isfinite(grad)):  # ‖g‖² overflowed: rescale first
        big = float(np.max(np.abs(grad)))
        norm = big * float(np.linalg.norm(grad / big))
    return norm


def clip_grad_norm(grad: np.ndarray, max_norm: float) -> tuple[np.ndarray, float]:
    """(g · min(1, max_norm/(‖g‖₂ + 1e-6)), ‖g‖₂) — ``torch.nn.utils.clip_grad_norm_``."""
    grad = real_array(grad, "grad", nonempty=False)
    max_norm = positive_float(max_norm, "max_norm")
    norm = grad_norm(grad)
    return _clipped(grad, norm, max_norm), norm


def _clipped(grad: np.ndarray, norm: float, max_norm: float) -> np.ndarray:
    """g · min(1, max_norm/(‖g‖₂ + 1e-6)) given ‖g‖₂ (a copy only when it scales)."""
    coef = max_norm / (norm + _CLIP_EPS)
    return grad * coef if coef < 1.0 else grad


def rate_factors(rates, size: int, name: str = "rates", *, zero: bool = False) -> np.ndarray:
    """``rates`` checked as per-entry rate factors of a θ of ``size`` entries (real_array: finite),
    returned as a float64 [size] vector: one factor per entry in θ's order (any shape with
    ``size`` entries), each > 0 (``zero``: ≥ 0, a 0 marking a fixed entry of a native buffer)."""
    r = real_array(rates, name).astype(np.float64, copy=False)
    if r.size != size:
        raise ValueError(f"{name}: expected {size} factors (one per entry of θ), got shape {r.shape}")
    if np.any(r < 0) or (not zero and np.any(r == 0)):
        raise ValueError(f"{name}: expected factors {'>= 0' if zero else '> 0'}")
    return np.ascontiguousarray(r.ravel())


def _unit_interval(value, name: str) -> float:
    v = nonnegative_float(value, name)
    if v >= 1:
        raise ValueError(f"{name}: expected a number in [0, 1), got {value}")
    return v


@dataclass(frozen=True)
class Optimizer:
    """Base spec: ``lr`` (> 0), ``schedule`` (a :class:`Schedule`, a name, or None for constant)
    and ``clip_norm`` (None: no clipping). Subclasses define :meth:`_update`."""

    lr: float = 1e-3
    schedule: Schedule | str | None = None
    clip_norm: float | None = None
    name: str = field(default="", init=False)

    def __post_init__(self):
        object.__setattr__(self, "lr", positive_float(self.lr, "lr"))
        object.__setattr__(self, "schedule", make_schedule(self.schedule))
        if self.clip_norm is not None:
            object.__setattr__(self, "clip_norm", positive_float(self.clip_norm, "clip_norm"))

    def init(self, theta: np.ndarray) -> dict:
        """Fresh state for a parameter vector shaped like ``theta``."""
        return {"t": 0}

    def learning_rate(self, t: int) -> float:
        """η for the (t+1)-th step (t = steps already taken)."""
        return self.lr * self.schedule(t)

    def step(self, theta: np.ndarray, grad: np.ndarray, state: dict, *,
             norm: float | None = None, rates=None) -> dict:
        """θ ← update(θ, g) in place (θ float64 [P]); advances ``state``; returns the step's
        records: ``lr`` (η_t) and ``grad_norm`` (before clipping). ``norm``: ``grad_norm(grad)``
        when the caller has it already (``fit`` does). ``rates``: per-entry rate factors > 0
        (θ's size, in θ's order; entry i steps at η_t·rates[i]; None: all 1)."""
        grad = np.asarray(grad, dtype=np.float64)
        if norm is None:
            norm = grad_norm(grad)
        if self.clip_norm is not None:
            grad = _clipped(grad, norm, self.clip_norm)
        lr = self.learning_rate(state["t"])
        state["t"] += 1
        # η per entry with rates (the native step forms η·rates[i] first, too)
        rate = lr if rates is None else lr * rate_factors(rates, theta.size).reshape(theta.shape)
        self._update(theta, grad, state, rate)
        return {"lr": lr, "grad_norm": norm}

    def _update(self, theta, grad, state, lr):  # pragma: no cover - abstract
        raise NotImplementedError

    def config(self) -> dict:
        """JSON-able description (run directories compare it on resume)."""
        out = {"name": self.name, "lr": self.lr, "schedule": self.schedule.config(),
               "clip_norm": self.clip_norm}
        for k, v in self.__dict__.items():
            if k not in out:
                out[k] = list(v) if isinstance(v, tuple) else v
        return out


@dataclass(frozen=True)
class SGD(Optimizer):
    """``torch.optim.SGD``: momentum μ, dampening τ, Nesterov, L2 weight decay λ."""

    momentum: float = 0.0
    dampening: float = 0.0
    nesterov: bool = False
    weight_decay: float = 0.0

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "name", "sgd")
        object.__setattr__(self, "momentum", _unit_interval(self.momentum, "momentum"))
        object.__setattr__(self, "dampening", _unit_interval(self.dampening, "dampening"))
        object.__setattr__(self, "weight_decay", nonnegative_float(self.weight_decay, "weight_decay"))
        object.__setattr__(self, "nesterov", flag(self.nesterov, "nesterov"))
        if self.nesterov and (self.momentum <= 0 or self.dampening != 0):
            raise ValueError("nesterov: needs momentum > 0 and dampening = 0 (as torch.optim.SGD)")

    def init(self, theta):
        state = super().init(theta)
        if self.momentum > 0:
            state["momentum_buffer"] = np.zeros_like(theta, dtype=np.float64)
        return state

    def _update(self, theta, grad, state, lr):
        if self.weight_decay:
            grad = grad + self.weight_decay * theta
        if self.momentum > 0:
            buf = state["momentum_buffer"]
            if state["t"] == 1:
                buf[...] = grad
            else:
                buf *= self.momentum
                buf += (1 - self.dampening) * grad
            grad = grad + self.momentum * buf if self.nesterov else buf
        theta -= lr * grad


@dataclass(frozen=True)
class Adam(Optimizer):
    """``torch.optim.Adam``: betas (β₁, β₂), eps ε, L2 weight decay λ, AMSGrad."""

    betas: tuple = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    amsgrad: bool = False

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "name", "adam")
        try:
            b1, b2 = self.betas
        except (TypeError, ValueError):
            raise ValueError(f"betas: expected a pair (beta1, beta2), got {self.betas!r}") from None
        object.__setattr__(self, "betas", (_unit_interval(b1, "betas[0]"), _unit_interval(b2, "betas[1]")))
        object.__setattr__(self, "eps", nonnegative_float(self.eps, "eps"))
        object.__setattr__(self, "weight_decay", nonnegative_float(self.weight_decay, "weight_decay"))
        object.__setattr__(self, "amsgrad", flag(self.amsgrad, "amsgrad"))

    def init(self, theta):
        state = super().init(theta)
        state["exp_avg"] = np.zeros_like(theta, dtype=np.float64)
        state["exp_avg_sq"] = np.zeros_like(theta, dtype=np.float64)
        if self.amsgrad:
            state["max_exp_avg_sq"] = np.zeros_like(theta, dtype=np.float64)
        return state

    def _decay(self, theta, grad, lr):
        return grad + self.weight_decay * theta if self.weight_decay else grad

    def _update(self, theta, grad, state, lr):
        grad = self._decay(theta, grad, lr)
        b1, b2 = self.betas
        t = state["t"]
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m *= b1
        m += (1 - b1) * grad
        v *= b2
        v += (1 - b2) * grad * grad
        if self.amsgrad:
            np.maximum(state["max_exp_avg_sq"], v, out=state["max_exp_avg_sq"])
            v = state["max_exp_avg_sq"]
        m_hat = m / (1 - b1**t)
        v_hat = v / (1 - b2**t)
        theta -= lr * m_hat / (np.sqrt(v_hat) + self.eps)


@dataclass(frozen=True)
class AdamW(Adam):
    """``torch.optim.AdamW``: decoupled weight decay θ ← θ(1 − ηλ) before the Adam step
    (default λ = 0.01 as in torch)."""

    weight_decay: float = 0.01

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "name", "adamw")

    def _decay(self, theta, grad, lr):
        if self.weight_decay:
            theta *= 1 - lr * self.weight_decay
        return grad


OPTIMIZERS = {"sgd": SGD, "adam": Adam, "adamw": AdamW}


def make_optimizer(optimizer, **kwargs) -> Optimizer:
    """An :class:`Optimizer` from an instance (returned as is) or a name in :data:`OPTIMIZERS`
    with its keyword arguments (``make_optimizer("adam", lr=1e-3, clip_norm=1.0)``)."""
    if isinstance(optimizer, Optimizer):
        if kwargs:
            raise TypeError("optimizer: keyword arguments are only accepted with an optimizer name")
        return optimizer
    if not isinstance(optimizer, str):
        raise TypeError(f"optimizer: expected an Optimizer or one of {sorted(OPTIMIZERS)}, got "
                        f"{type(optimizer).__name__}")
    if optimizer.lower() in OPTIMIZERS:
        return OPTIMIZERS[optimizer.lower()](**kwargs)
    raise ValueError(f"optimizer: expected an Optimizer or one of {sorted(OPTIMIZERS)}, got {optimizer!r}")
