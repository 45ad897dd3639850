"""Shared timing helper for the bench/ report scripts: medians, never means."""
from __future__ import annotations

import statistics
import time


def median_seconds(fn, repeats: int, inner: int = 1, clock=time.perf_counter) -> float:
    """Median over `repeats` runs of the time per call of fn() (each run makes `inner` calls),
    after one warm-up call (page faults, thread start-up). `clock`: wall time by default;
    time.process_time gives CPU-seconds of the whole process (all its threads), the measure that
    a machine shared with other jobs disturbs least."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = clock()
        for _ in range(inner):
            fn()
        times.append((clock() - t0) / inner)
    return statistics.median(times)
