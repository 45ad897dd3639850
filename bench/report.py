"""Prints the LSA benchmark table: medians, prompts/s, input GB/s, fraction of the read bandwidth
measured in the same run (native streaming sum over an array as large as E), and speedups over the
numpy reference and PyTorch CPU (when installed).

    python bench/report.py [--size full|small] [--repeats 7]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import cases  # noqa: E402
from timing import median_seconds  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", choices=["small", "full"], default="full")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    import lsa_native as ln

    sizes = cases.FULL_SIZES if args.size == "full" else cases.SMALL_SIZES
    print(f"lsa_native {ln.__version__}, CPU kernels {ln.cpu_kernel_isa()}, "
          f"{ln.num_threads()} threads, torch {'absent' if cases.torch is None else cases.torch.__version__}")
    if cases.torch is not None:
        print(f"torch threads: {cases.torch.get_num_threads()}")
    print("| size | dtype | operation | impl | median ms | prompts/s | input GB/s | % of read BW "
          "| native speedup |")
    print("|---|---|---|---|---|---|---|---|---|")
    for size in sizes:
        for dtype in (np.float32, np.float64):
            inputs = cases.make_inputs(size, dtype)
            E = inputs[0]
            fns = cases.implementations(*inputs)
            times = {key: median_seconds(fn, args.repeats) for key, fn in fns.items()}
            bandwidth = E.nbytes / times[("stream read", "native")]
            for (op, impl), t in times.items():
                speedup = ""
                if not impl.startswith("native") and (op, "native") in times:
                    speedup = f"{t / times[(op, 'native')]:.1f}x"
                gbs = E.nbytes / t / 1e9
                print(f"| {size.label()} | {np.dtype(dtype).name} | {op} | {impl} | {t * 1e3:.1f} "
                      f"| {size.batch / t:.3g} | {gbs:.2f} | {100 * E.nbytes / t / bandwidth:.0f}% "
                      f"| {speedup} |")
            del inputs, E, fns
    return 0


if __name__ == "__main__":
    sys.exit(main())
