"""Per-step records of a training run or a recorded trajectory: ``train.fit`` and its drivers, and
``population.FlowTrajectory.history()`` (so it lives below both; ``train.History`` is this class)."""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field

import numpy as np

__all__ = ["History"]


@dataclass
class History:
    """Rows of records: ``step`` and ``loss`` plus named columns in ``metrics`` (``grad_norm``,
    ``lr``, ``time``, ``eval_loss``, user metrics, …). A column missing from a row holds NaN, so
    every column has one value per row. ``history["name"]`` gives a column as an array."""

    step: list = field(default_factory=list)
    loss: list = field(default_factory=list)
    metrics: dict = field(default_factory=dict)

    def record(self, step: int, loss: float, **metrics) -> None:
        n = len(self.step)
        self.step.append(int(step))
        self.loss.append(float(loss) if loss is not None else math.nan)
        for k, v in metrics.items():
            col = self.metrics.setdefault(k, [math.nan] * n)
            col.append(math.nan if v is None else v)
        for k, col in self.metrics.items():
            if len(col) == n:
                col.append(math.nan)

    def append_row(self, row: dict) -> None:
        """Record a row dict with keys ``step``, ``loss`` and any metrics (as :meth:`record`, in
        one pass over the row: ``fit`` appends one per step)."""
        n = len(self.step)
        self.step.append(int(row["step"]))
        loss = row.get("loss")
        self.loss.append(float(loss) if loss is not None else math.nan)
        metrics, seen = self.metrics, 0
        for k, v in row.items():
            if k == "step" or k == "loss":
                continue
            col = metrics.get(k)
            if col is None:
                col = metrics[k] = [math.nan] * n
            col.append(math.nan if v is None else v)
            seen += 1
        if seen != len(metrics):  # columns this row lacks
            for col in metrics.values():
                if len(col) == n:
                    col.append(math.nan)

    def __len__(self) -> int:
        return len(self.step)

    def __getitem__(self, name: str) -> np.ndarray:
        if name == "step":
            return np.asarray(self.step)
        if name == "loss":
            return np.asarray(self.loss, dtype=np.float64)
        return np.asarray(self.metrics[name])

    def columns(self) -> list:
        return ["step", "loss", *self.metrics]

    def rows(self) -> list:
        """The records as a list of dicts (one per row)."""
        names = self.columns()
        cols = [self.step, self.loss, *self.metrics.values()]
        return [dict(zip(names, vals)) for vals in zip(*cols)]

    def to_csv(self, path) -> None:
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(self.columns())
            for row in self.rows():
                w.writerow(row.values())

    @classmethod
    def from_rows(cls, rows) -> "History":
        h = cls()
        for row in rows:
            h.append_row(row)
        return h
