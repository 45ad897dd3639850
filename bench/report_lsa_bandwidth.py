"""LSA prediction forward + backward on the CPU as a fraction of the machine's read bandwidth
(issue 22), with the bandwidth measured in the same run, at 1 and 2 threads.

Rows: `loss_and_grad` (the training kernel: one pass over E gives ŷ, the loss and both parameter
gradients), `predict_vjp` without the input gradient (the prediction VJP alone), `predict` (the
forward alone), and the read probes: the native streaming sum over E (`stream_sum`) and numpy's
`np.add.reduce` over E. "GB/s" is E's bytes over the median time: each kernel must read E once, so
GB/s over a read probe's GB/s is the fraction of the read bandwidth the kernel reaches. Two are
printed: of `stream_sum` (the column earlier tables quote) and of the faster of the two probes
("% read bw"). `stream_sum` reads at numpy's rate or above since its accumulators stay in
registers (before 2026-11-27 an array of 32-byte vectors lived on the stack in its baseline unit
and it read at about half: fractions of it in older tables overstate the kernels' share).

At d = 5 the prediction fwd+bwd is not bound by the read: per prompt it is about 525 lane FMAs (t,
s, Σ t s, G p, G q over 21 tokens and 6 rows; 441 + 78 Gram-first) on 504 bytes (float32): about 2
flops per byte, above an AVX2 core's ratio of FMA peak to L3 read bandwidth. Where the time goes:
`bench/lsa_lanes_phases.cpp`.

    python bench/report_lsa_bandwidth.py [--repeats 9] [--threads 1,2] [--sizes ...]

Run it under `nice` on a shared machine and quote the load average it prints.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from timing import median_seconds  # noqa: E402

# (d, N, B): the e2e report's size (E = 69 MB in float32, beyond a 32 MB L3), SPEC's small-d one,
# and issue 22's fit size (d = 5, N = 20, B = 4096: E = 2 MB, where the kernels run with the prompts
# in SIMD lanes, cpu/lsa_kernels.inl).
SIZES = ((20, 100, 8192), (5, 30, 131072), (5, 20, 4096))


def rows_for(ln, d: int, N: int, B: int, dtype, repeats: int, clock):
    from lsa_native import _core

    g = np.random.default_rng(0)
    E = g.standard_normal((B, d + 1, N + 1)).astype(dtype)
    E[:, d, N] = 0
    y = g.standard_normal(B).astype(dtype)
    Wp, Wk = (g.standard_normal((d + 1, d + 1)).astype(dtype) / (d + 1) for _ in range(2))
    dy = g.standard_normal(B).astype(dtype)
    flat = E.reshape(-1, 1024) if E.size % 1024 == 0 else E.reshape(B, -1)
    fns = {
        "stream_sum (native read)": lambda: _core.stream_sum(E),
        "numpy add.reduce (read)": lambda: np.add.reduce(flat, axis=0),
        "loss_and_grad": lambda: ln.lsa.loss_and_grad(E, y, Wp, Wk),
        "predict_vjp (no dE)": lambda: ln.lsa.predict_vjp(E, Wp, Wk, dy, with_input_grad=False),
        "predict": lambda: ln.lsa.predict(E, Wp, Wk),
    }
    return E.nbytes, [(name, median_seconds(fn, repeats, clock=clock)) for name, fn in fns.items()]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--dtypes", default="float32,float64")
    p.add_argument("--cpu-time", action="store_true",
                   help="CPU-seconds of the process (all its threads) instead of wall time: what a "
                        "loaded machine disturbs least (at 2 threads, GB/s per CPU-second)")
    p.add_argument("--sizes", default=";".join(",".join(map(str, s)) for s in SIZES),
                   help="d,N,B;d,N,B;...")
    args = p.parse_args(argv)
    import lsa_native as ln

    clock = time.process_time if args.cpu_time else time.perf_counter
    print(f"CPU kernels {ln.cpu_kernel_isa()}; clock {'CPU-seconds' if args.cpu_time else 'wall'}; "
          f"load average at start {os.getloadavg()}")
    print("| d | N | B | dtype | threads | operation | median ms | GB/s | % of stream_sum | % read bw |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for size in args.sizes.split(";"):
        d, N, B = (int(v) for v in size.split(","))
        for dtype in args.dtypes.split(","):
            for threads in (int(t) for t in args.threads.split(",")):
                ln.set_num_threads(threads)
                nbytes, rows = rows_for(ln, d, N, B, np.dtype(dtype), args.repeats, clock)
                ref = nbytes / rows[0][1]
                best = nbytes / min(rows[0][1], rows[1][1])  # the faster read probe
                for name, t in rows:
                    gbs = nbytes / t
                    print(f"| {d} | {N} | {B} | {dtype} | {threads} | {name} | {t * 1e3:.3f} "
                          f"| {gbs / 1e9:.2f} | {100 * gbs / ref:.0f}% | {100 * gbs / best:.0f}% |",
                          flush=True)
    ln.set_num_threads(0)
    print(f"load average at end {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
