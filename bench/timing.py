"""Shared timing helper for the bench/ report scripts: medians, never means."""
from __future__ import annotations

import statistics
import time


def median_seconds(fn, repeats: int, inner: int = 1) -> float:
    """Median over `repeats` runs of the time per call of fn() (each run makes `inner` calls),
    after one warm-up call (page faults, thread start-up)."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        times.append((time.perf_counter() - t0) / inner)
    return statistics.median(times)
