"""Per-call host overhead of small LSA calls (issue 20): the median time of ``lsa.forward``,
``lsa.predict`` and ``lsa.loss_and_grad`` at B = 4, d = 5, N = 20 (float64 and float32), where the
kernels take well under a microsecond and the time is the route from Python to them.

    python bench/report_overhead.py [--repeats 31] [--inner 2000]
    python bench/report_overhead.py --compare BEFORE_PYTHONPATH AFTER_PYTHONPATH [--rounds 5]

``--compare`` runs this script alternately under two package directories (e.g. a build of main
and one of a branch, each a ``python/`` folder with its compiled ``_core``), ``--rounds`` times
each, in fresh processes, and prints the median per-call times of both and their ratio.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from timing import median_seconds  # noqa: E402

B, D, N = 4, 5, 20
OPERATIONS = ("forward", "predict", "loss_and_grad")


def measure(repeats: int, inner: int) -> dict:
    """{"op dtype": median seconds per call} in this process."""
    import lsa_native as ln
    from lsa_native import lsa

    ln.set_num_threads(1)  # a B = 4 call runs on one thread anyway; no pool wake-ups in the noise
    rng = np.random.default_rng(0)
    out = {}
    for dtype in (np.float64, np.float32):
        E = rng.standard_normal((B, D + 1, N + 1)).astype(dtype)
        E[:, D, N] = 0
        W_pv, W_kq = (0.2 * rng.standard_normal((2, D + 1, D + 1))).astype(dtype)
        y_q = rng.standard_normal(B).astype(dtype)
        calls = {"forward": lambda: lsa.forward(E, W_pv, W_kq),
                 "predict": lambda: lsa.predict(E, W_pv, W_kq),
                 "loss_and_grad": lambda: lsa.loss_and_grad(E, y_q, W_pv, W_kq)}
        for op in OPERATIONS:
            out[f"{op} {np.dtype(dtype).name}"] = median_seconds(calls[op], repeats, inner)
    return out


def compare(before: str, after: str, rounds: int, repeats: int, inner: int) -> None:
    runs = {"before": [], "after": []}
    for _ in range(rounds):
        for label, path in (("before", before), ("after", after)):
            env = dict(os.environ, PYTHONPATH=path)
            cmd = [sys.executable, __file__, "--json", "--repeats", str(repeats), "--inner", str(inner)]
            runs[label].append(json.loads(subprocess.check_output(cmd, env=env)))
    print(f"B = {B}, d = {D}, N = {N}; median over {rounds} alternating runs of the median over "
          f"{repeats} x {inner} calls")
    print("| call | dtype | before µs | after µs | after / before |")
    print("|---|---|---|---|---|")
    for key in runs["before"][0]:
        b = statistics.median(r[key] for r in runs["before"]) * 1e6
        a = statistics.median(r[key] for r in runs["after"]) * 1e6
        op, dtype = key.split()
        print(f"| lsa.{op} | {dtype} | {b:.2f} | {a:.2f} | {a / b:.2f} |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=31)
    parser.add_argument("--inner", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print {call: seconds} as JSON")
    parser.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args(argv)
    if args.compare:
        compare(*args.compare, args.rounds, args.repeats, args.inner)
        return 0
    times = measure(args.repeats, args.inner)
    if args.json:
        print(json.dumps(times))
        return 0
    print("| call | dtype | median µs per call |")
    print("|---|---|---|")
    for key, t in times.items():
        op, dtype = key.split()
        print(f"| lsa.{op} | {dtype} | {t * 1e6:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
