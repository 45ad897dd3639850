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


# Bounds of the arguments, checked before any work so that a bad value exits 2 instead of failing
# the run: the reproductions derive per-cell seeds from --seed (2·seed + 1, 1000·seed + k) that
# must stay below the samplers' 2^64; a size may be up to SIZE_FACTOR times the larger of its
# quick and full (paper) values; one batch of prompts, batch x (dim+1) x (context+1) values, at
# most PROMPT_VALUES_MAX (64 GiB in float64: a sanity bound, some sizes are drawn in chunks).
SEED_LIMIT = 2**32
WORKERS_MAX = 256
SIZE_FACTOR = 100
PROMPT_VALUES_MAX = 2**33
# Size names (over all ids) that count prompts in one batch (slope_samples: drawn in chunks of
# 20000, not listed), and tokens in one prompt.
BATCH_SIZES = ("batch", "samples", "eval_batch", "tf_batch", "curve_samples")
CONTEXT_SIZES = ("context", "contexts", "test_length", "test_lengths", "slope_length")


_SEED_RANGE = f"0 <= seed < {SEED_LIMIT}"


def _check_seed(seed: int) -> None:
    if not 0 <= seed < SEED_LIMIT:
        raise ValueError(f"--seed: expected an integer with {_SEED_RANGE}, got {seed}")


def _numbers(value) -> list:
    """The numbers of a size value (a number or a list of them; names and flags: none)."""
    values = value if isinstance(value, (list, tuple)) else [value]
    return [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]


def _check_bounds(entry, sizes: dict, *, full: bool, flag=lambda key: f"--set {key}") -> None:
    """Each size at most SIZE_FACTOR x its largest quick/full value, and one prompt batch of the
    resulting sizes within PROMPT_VALUES_MAX values. `flag(key)` names the argument."""
    for key, value in sizes.items():
        cap = SIZE_FACTOR * max(_numbers(entry.quick.get(key)) + _numbers(entry.full.get(key)) + [0])
        for v in _numbers(value):
            if cap and v > cap:
                raise ValueError(f"{flag(key)}: expected at most {cap} ({SIZE_FACTOR} x its "
                                 f"largest quick/full value), got {v}")
    merged = {**entry.quick, **(entry.full if full else {}), **sizes}
    largest = {key: max(_numbers(merged[key])) for key in merged if _numbers(merged[key])}
    batch = max((largest[k] for k in BATCH_SIZES if k in largest), default=1)
    context = max((largest[k] for k in CONTEXT_SIZES if k in largest), default=1)
    values = batch * (largest.get("dim", 1) + 1) * (context + 1)
    if values > PROMPT_VALUES_MAX:
        names = [k for k in BATCH_SIZES + CONTEXT_SIZES + ("dim",) if k in largest]
        raise ValueError(f"{', '.join(flag(k) for k in names)}: one batch of prompts would hold "
                         f"{values:.3g} values (batch x (dim+1) x (context+1)), more than "
                         f"{PROMPT_VALUES_MAX:.3g}; choose smaller sizes")


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
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"expected an integer, got {text!r}") from None
    if isinstance(ref, float):
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"expected a number, got {text!r}") from None
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


def _check_writable(path: str, flag: str) -> None:
    """`path` can be created or overwritten as a file: probed by opening it for appending (a file
    this probe created is removed again)."""
    import os
    from pathlib import Path

    p = Path(path)
    if not path.strip() or p.is_dir():
        raise ValueError(f"{flag}: expected a file path, got {path!r}")
    existed = p.exists()
    try:
        with open(p, "ab"):
            pass
    except OSError as e:
        raise ValueError(f"{flag}: cannot write {path!r} ({e.strerror or e})") from None
    if not existed:
        os.unlink(p)


def _print_table(results) -> None:
    from .experiments.runner import table

    print(table(results))


def _validate(args, experiments, _common, sweep) -> dict:
    """{id: size overrides} for the ids to run; raises on any bad argument before work starts."""
    from . import cuda as _cuda

    known = experiments.ids()
    if args.id != "all" and args.id not in known:
        raise ValueError(f"unknown reproduction id {args.id!r}; expected one of {known} or 'all'")
    _check_seed(args.seed)
    if not 0 <= args.workers <= WORKERS_MAX:
        raise ValueError(f"--workers: expected an integer in [0, {WORKERS_MAX}], got {args.workers}")
    if args.threads < 0:
        raise ValueError(f"--threads: expected an integer >= 0 (0: all cores), got {args.threads}")
    if args.id == "all" and args.set:
        raise ValueError("--set applies to one reproduction id, not 'all'")
    _cuda.check_device(args.device, "--device")
    if not args.out.strip():
        raise ValueError("--out: expected a folder path, got an empty string")
    try:
        _common.prepare_output(args.out)
    except ValueError as e:
        raise ValueError(f"--{e}") from None  # "out: ..." names the flag
    if args.scheduler:
        sweep.check_scheduler(args.scheduler).close()
    per_id = {}
    for i in (known if args.id == "all" else [args.id]):
        entry = experiments.REGISTRY[i]
        sizes = _sizes(entry, args.set)
        try:
            params = entry.sizes(args.full, sizes)
        except (ValueError, TypeError) as e:
            raise ValueError(f"--set {e}") from None
        _check_bounds(entry, sizes, full=args.full)
        try:
            _common.check_overwrite(args.out, i, _common.run_config(args.full, args.seed, params),
                                    force=args.force)
        except _common.OutputExists as e:
            raise ValueError(f"--{e}") from None  # "out: ..." names the flag
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
    if args.threads:
        import lsa_native

        lsa_native.set_num_threads(args.threads)
    command = "lsa-native " + " ".join(shlex.quote(a) for a in (args.argv or []))
    kw = dict(full=args.full, seed=args.seed, progress=not args.quiet, scheduler=args.scheduler,
              workers=args.workers, device=args.device, force=True)  # checked in _validate
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
    import shutil
    import tempfile
    from pathlib import Path

    from . import experiments
    from .experiments import _common, zfb_thm41

    sizes = dict(dim=args.dim, context=args.context, batch=args.batch, steps=args.steps,
                 lr=args.lr, flow_time=args.flow_time)
    # Every argument is checked before the run: sizes, seed, and the plot's file.
    entry = experiments.REGISTRY["zfb-thm41"]
    flag = lambda key: "--" + key.replace("_", "-")  # noqa: E731
    try:
        try:
            _common.check_sizes(entry.quick, sizes)
        except (ValueError, TypeError) as e:  # "key: why" -> "--key: why"
            key, why = str(e).split(":", 1)
            raise ValueError(f"{flag(key)}:{why}") from None
        _check_bounds(entry, sizes, full=False, flag=flag)
        _check_seed(args.seed)
        if args.plot is not None:
            _check_writable(args.plot, "--plot")
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
    rep.add_argument("--out", default="reproductions",
                     help="output folder (default: reproductions); a folder holding another "
                          "configuration's outputs of an id, or committed ones, is refused")
    rep.add_argument("--force", action="store_true",
                     help="overwrite the outputs of a previous run of another configuration, or "
                          "committed outputs, in --out")
    rep.add_argument("--seed", type=int, default=0, help=f"{_SEED_RANGE} (default 0)")
    rep.add_argument("--set", action="append", metavar="NAME=VALUE",
                     help="override a size, e.g. --set steps=400 --set contexts=10,20 (repeatable; "
                          f"each at most {SIZE_FACTOR}x its quick/full value)")
    rep.add_argument("--scheduler", metavar="ADDRESS",
                     help="Dask scheduler for sweeps (default: a LocalCluster for --full grids)")
    rep.add_argument("--workers", type=int, default=2,
                     help=f"LocalCluster worker processes for sweeps, 0..{WORKERS_MAX} (0: run cells in "
                          "this process)")
    rep.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                     help="where kernel-attention trainings run (cuda: prompts sampled and models "
                          "trained on the GPU; cached cells are shared between devices)")
    rep.add_argument("--threads", type=int, default=0, metavar="N",
                     help="CPU threads of the native kernels in this process (default 0: all cores)")
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
    demo.add_argument("--seed", type=int, default=0, help=f"{_SEED_RANGE} (default 0)")
    demo.add_argument("--plot", metavar="PNG", help="write a figure of both runs to this file")
    demo.add_argument("--quiet", action="store_true", help="no progress bar")
    demo.set_defaults(func=_demo)
    return parser


def _list(args) -> int:
    from . import experiments

    from .experiments.ccs_training import describe_schedule

    for i, e in experiments.REGISTRY.items():
        print(f"{i}: {e.claim}\n    pass (quick): {e.condition}\n    pass (full):  {e.condition_full}\n"
              f"    quick: {e.quick}\n    full:  {e.full}")
        if "decay_steps" in e.quick:  # a CCS training: its schedule at both sizes
            print(f"    training (quick): {describe_schedule(e.quick)}\n"
                  f"    training (full):  {describe_schedule({**e.quick, **e.full})}")
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
