"""Learning-rate schedules: multipliers s(t) of the base rate, η_t = lr · s(t), t = steps taken.

Closed forms of ``torch.optim.lr_scheduler`` stepped once per optimizer step:

- ``constant``: s = 1;
- ``step`` (StepLR): s = γ^⌊t / step_size⌋;
- ``exponential`` (ExponentialLR): s = γ^t;
- ``cosine`` (CosineAnnealingLR): s = m + (1 − m)(1 + cos(π min(t, T)/T))/2 with m = min_factor
  (η_min / lr) and T = total_steps;
- ``warmup`` (any of the above): s(t) · min(1, (t + 1)/w) for w = warmup_steps (linear warm-up
  over the first w steps; the first step already moves).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .._validation import positive_float, positive_int, real_float

__all__ = ["Schedule", "make_schedule", "SCHEDULES"]

SCHEDULES = ("constant", "step", "exponential", "cosine")


@dataclass(frozen=True)
class Schedule:
    """``kind`` in :data:`SCHEDULES`; ``gamma`` (step, exponential), ``step_size`` (step),
    ``total_steps`` and ``min_factor`` (cosine), ``warmup_steps`` (0: none)."""

    kind: str = "constant"
    gamma: float = 1.0
    step_size: int = 1
    total_steps: int = 1
    min_factor: float = 0.0
    warmup_steps: int = 0

    def __post_init__(self):
        if not isinstance(self.kind, str):
            raise TypeError(f"schedule: expected a kind name in {list(SCHEDULES)}, got "
                            f"{type(self.kind).__name__}")
        if self.kind not in SCHEDULES:
            raise ValueError(f"schedule: unknown kind {self.kind!r}; expected one of {list(SCHEDULES)}")
        object.__setattr__(self, "gamma", positive_float(self.gamma, "gamma"))
        object.__setattr__(self, "step_size", positive_int(self.step_size, "step_size"))
        object.__setattr__(self, "total_steps", positive_int(self.total_steps, "total_steps"))
        object.__setattr__(self, "warmup_steps", positive_int(self.warmup_steps, "warmup_steps", minimum=0))
        m = real_float(self.min_factor, "min_factor")
        if not (0 <= m <= 1):
            raise ValueError(f"min_factor: expected a number in [0, 1], got {self.min_factor}")
        object.__setattr__(self, "min_factor", m)

    def __call__(self, t: int) -> float:
        if self.kind == "constant":
            s = 1.0
        elif self.kind == "step":
            s = self.gamma ** (t // self.step_size)
        elif self.kind == "exponential":
            s = self.gamma**t
        else:
            T = self.total_steps
            s = self.min_factor + (1 - self.min_factor) * (1 + math.cos(math.pi * min(t, T) / T)) / 2
        if self.warmup_steps and t < self.warmup_steps:
            s *= (t + 1) / self.warmup_steps
        return s

    def config(self) -> dict:
        return dict(self.__dict__)


def make_schedule(schedule=None, **kwargs) -> Schedule:
    """A :class:`Schedule` from None (constant), an instance, a kind name plus keywords, or a dict
    (``Schedule.config()``)."""
    if schedule is None:
        return Schedule(**kwargs)
    if isinstance(schedule, Schedule):
        if kwargs:
            raise TypeError("schedule: keyword arguments are only accepted with a schedule name")
        return schedule
    if isinstance(schedule, str):
        return Schedule(kind=schedule, **kwargs)
    if isinstance(schedule, dict):
        return Schedule(**schedule, **kwargs)
    raise ValueError(f"schedule: expected a Schedule, a name in {list(SCHEDULES)} or None, got {schedule!r}")
