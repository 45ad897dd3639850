"""The ``lsa-native`` console command: ``lsa-native reproduce <id>|all`` (and ``demo``, an alias of
``reproduce zfb-thm41``)."""
from __future__ import annotations

import argparse
import shlex
import sys
import time

__all__ = ["main"]

EXIT_FAIL = 1   # a reproduction ran and did not meet its pass condition
EXIT_USAGE = 2  # bad arguments (unknown id, bad size, unwritable folder, unreachable scheduler)


class UsageError(ValueError):
    """Bad command-line arguments, detected before anything runs."""


def _parse_value(text: str, ref):
    if isinstance(ref, bool):
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"expected true/false, got {text!r}")
    if isinstance(ref, (list, tuple)):
        proto = ref[0] if ref else 0.0
        return [_parse_value(t, proto) for t in text.split(",") if t.strip()]
    if isinstance(ref, int):
        return int(text)
    if isinstance(ref, float):
        return float(text)
    return text


def _sizes(entry, assignments):
    sizes = {}
    for a in assignments or []:
        if "=" not in a:
            raise ValueError(f"--set: expected NAME=VALUE, got {a!r}")
        key, text = a.split("=", 1)
        key = key.strip().replace("-", "_")
        if key not in entry.quick:
            raise ValueError(f"--set: {entry.id} has no size {key!r}; expected one of {sorted(entry.quick)}")
        try:
            sizes[key] = _parse_value(text.strip(), entry.quick[key])
        except ValueError as e:
            raise ValueError(f"--set {key}: {e}") from None
    return sizes


def _print_table(results) -> None:
    from .experiments.runner import table

    print(table(results))


def _validate(args, experiments, _common, sweep) -> dict:
    """{id: size overrides} for the ids to run; raises on any bad argument before work starts."""
    from . import cuda as _cuda

    known = experiments.ids()
    if args.id != "all" and args.id not in known:
        raise ValueError(f"unknown reproduction id {args.id!r}; expected one of {known} or 'all'")
    if args.seed < 0:
        raise ValueError(f"--seed: expected an integer >= 0, got {args.seed}")
    if args.workers < 0:
        raise ValueError(f"--workers: expected an integer >= 0, got {args.workers}")
    if args.id == "all" and args.set:
        raise ValueError("--set applies to one reproduction id, not 'all'")
    if args.device == "cuda" and not _cuda.available():
        raise ValueError("--device cuda: needs a build with CUDA kernels and a visible GPU")
    _common.prepare_output(args.out)
    if args.scheduler:
        sweep.check_scheduler(args.scheduler).close()
    per_id = {}
    for i in (known if args.id == "all" else [args.id]):
        entry = experiments.REGISTRY[i]
        sizes = _sizes(entry, args.set)
        _common.check_sizes({**entry.quick, **(entry.full if args.full else {})}, sizes)
        per_id[i] = sizes
    return per_id


def _reproduce(args) -> int:
    from . import experiments
    from .experiments import _common, runner, sweep

    try:
        per_id = _validate(args, experiments, _common, sweep)
    except (ValueError, TypeError) as e:
        raise UsageError(str(e)) from None
    chosen = list(per_id)
    command = "lsa-native " + " ".join(shlex.quote(a) for a in (args.argv or []))
    kw = dict(full=args.full, seed=args.seed, progress=not args.quiet, scheduler=args.scheduler,
              workers=args.workers, device=args.device)
    t0 = time.perf_counter()
    results = []
    for i in chosen:
        if not args.quiet:
            print(f"[{i}] running ({'full' if args.full else 'quick'} size) ...", flush=True)
        r = runner.run(i, args.out, **kw, **per_id[i])
        print(f"[{i}] {r.status}: {r.measured} ({r.wall_time:.1f} s)", flush=True)
        results.append(r)
    index = runner.write_index(args.out, results, command=command,
                               total_time=time.perf_counter() - t0)
    print()
    _print_table(results)
    print(f"\nresults, plots and {index.name} written to {args.out}")
    return 0 if all(r.passed for r in results) else EXIT_FAIL


def _demo(args) -> int:
    """``demo``: ``reproduce zfb-thm41`` with the historical flags (--plot PNG)."""
    import os
    import shutil
    import tempfile
    from pathlib import Path

    from . import experiments
    from .experiments import _common, zfb_thm41

    sizes = dict(dim=args.dim, context=args.context, batch=args.batch, steps=args.steps,
                 lr=args.lr, flow_time=args.flow_time)
    # Every argument is checked before the run: sizes, seed, and the plot's folder.
    try:
        _common.check_sizes(experiments.REGISTRY["zfb-thm41"].quick, sizes)
        if args.seed < 0:
            raise ValueError(f"--seed: expected an integer >= 0, got {args.seed}")
        if args.plot:
            folder = Path(args.plot).resolve().parent
            if not folder.is_dir() or not os.access(folder, os.W_OK):
                raise ValueError(f"--plot: folder {str(folder)!r} does not exist or is not writable")
    except (ValueError, TypeError) as e:
        raise UsageError(str(e)) from None
    with tempfile.TemporaryDirectory() as tmp:
        r = zfb_thm41(tmp if args.plot else None, seed=args.seed, progress=not args.quiet, **sizes)
        if args.plot:
            shutil.copy(Path(tmp) / "zfb-thm41_figure.png", args.plot)
    d = r.details
    print(f"lsa_native demo (= lsa-native reproduce zfb-thm41): d={args.dim}, N={args.context}; "
          f"σ = {d['sigma']:.3f}, PL constant μ = {d['mu']:.4f} (ZFB Lemma 5.4)")
    print(f"  exact gradient flow: {d['flow_steps']} steps, loss gap {d['final_gap']:.2e}, "
          f"gap <= e^(−μt)·gap(0) throughout: {d['pl_bound_held']}")
    print(f"distance to the ZFB Theorem 4.1 limit: flow {d['flow_distance']:.2e}, SGD {d['sgd_distance']:.4f}")
    print(f"{r.status}: {r.condition}")
    if args.plot:
        print(f"plot written to {args.plot}")
    return 0


def _parser() -> argparse.ArgumentParser:
    from . import experiments

    parser = argparse.ArgumentParser(prog="lsa-native", description="lsa_native command line")
    sub = parser.add_subparsers(dest="command", required=True)
    rep = sub.add_parser(
        "reproduce", help="reproduce a claim of ZFB / CCS (plots, JSON/CSV, PASS/FAIL)",
        description="Run a reproduction (quick size by default) and print PASS/FAIL. ids: "
                    + ", ".join(experiments.ids()) + ", or 'all' (writes index.md).")
    rep.add_argument("id", help="reproduction id or 'all'")
    rep.add_argument("--full", action="store_true", help="the paper's sizes (slow)")
    rep.add_argument("--out", default="reproductions", help="output folder (default: reproductions)")
    rep.add_argument("--seed", type=int, default=0)
    rep.add_argument("--set", action="append", metavar="NAME=VALUE",
                     help="override a size, e.g. --set steps=400 --set contexts=10,20 (repeatable)")
    rep.add_argument("--scheduler", metavar="ADDRESS",
                     help="Dask scheduler for sweeps (default: a LocalCluster for --full grids)")
    rep.add_argument("--workers", type=int, default=2,
                     help="LocalCluster worker processes for sweeps (0: run cells in this process)")
    rep.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                     help="where kernel-attention trainings run (cuda: prompts sampled and models "
                          "trained on the GPU; cached cells are shared between devices)")
    rep.add_argument("--quiet", action="store_true", help="no progress bars")
    rep.set_defaults(func=_reproduce)
    lst = sub.add_parser("list", help="list reproduction ids with their claims and sizes")
    lst.set_defaults(func=_list)
    demo = sub.add_parser("demo", help="alias of 'reproduce zfb-thm41' (ZFB Theorem 4.1)")
    demo.add_argument("--dim", type=int, default=5)
    demo.add_argument("--context", type=int, default=20)
    demo.add_argument("--batch", type=int, default=4096)
    demo.add_argument("--steps", type=int, default=3000)
    demo.add_argument("--lr", type=float, default=0.008)
    demo.add_argument("--flow-time", type=float, default=60.0)
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--plot", metavar="PNG", help="write a figure of both runs to this file")
    demo.add_argument("--quiet", action="store_true", help="no progress bar")
    demo.set_defaults(func=_demo)
    return parser


def _list(args) -> int:
    from . import experiments

    for i, e in experiments.REGISTRY.items():
        print(f"{i}: {e.claim}\n    pass: {e.condition}\n    quick: {e.quick}\n    full:  {e.full}")
    return 0


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    args.argv = argv
    try:
        return args.func(args)
    except UsageError as e:
        print(f"lsa-native: error: {e}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
