"""Shared machinery of the reproductions: sizes (quick / full / overrides), output folder, result
object with PASS/FAIL, registry. Each reproduction is a plain function returning a :class:`Result`."""
from __future__ import annotations

import csv
import functools
import inspect
import json
import os
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ..gp_kernels import KERNELS
from ..kernel_attention import ACTIVATIONS

__all__ = ["Result", "Context", "REGISTRY", "reproduction", "check_sizes", "machine",
           "check_overwrite", "OutputExists"]


@dataclass
class Result:
    """What a reproduction measured. ``passed`` is the stated ``condition`` evaluated on
    ``measured`` (the headline number, printed in the table); ``details`` holds every number,
    ``params`` the sizes used, ``files`` what was written."""

    id: str
    claim: str
    condition: str
    passed: bool
    measured: str
    details: dict = field(default_factory=dict)
    params: dict = field(default_factory=dict)
    files: list = field(default_factory=list)
    wall_time: float = 0.0
    full: bool = False

    @property
    def status(self) -> str:
        return "PASS" if self.passed else "FAIL"

    def to_dict(self) -> dict:
        return _jsonable(asdict(self))

    def row(self) -> str:
        cells = [self.id, self.status, self.measured, self.condition, f"{self.wall_time:.1f} s"]
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, (np.floating, float)):
        return float(x) if np.isfinite(x) else str(float(x))
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.bool_,)):
        return bool(x)
    return x


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"


class Context:
    """Run-time settings of one reproduction: output folder (None: write nothing), seed, progress
    bars, full size, Dask scheduler for sweeps, the device trainings run on ("cpu" or "cuda").
    Helpers write plots, JSON and CSV there."""

    def __init__(self, id: str, out, *, seed: int, full: bool, progress: bool,
                 scheduler: str | None = None, workers: int = 2, device: str = "cpu"):
        self.id = id
        self.out = None if out is None else prepare_output(out)
        self.seed = int(seed)
        self.full = bool(full)
        self.progress = bool(progress)
        self.scheduler = scheduler
        self.workers = workers
        self.device = device
        self.files: list[str] = []
        self.notes: dict = {}  # added to the result's details (e.g. how many cells were cached)

    def rng(self, *stream) -> np.random.Generator:
        """An independent generator per (seed, stream) — e.g. ctx.rng(1) for the test prompts."""
        return np.random.default_rng([self.seed, *stream])

    def path(self, name: str) -> Path | None:
        if self.out is None:
            return None
        p = self.out / f"{self.id}_{name}"
        self.files.append(p.name)
        return p

    def save_figure(self, fig, name: str = "figure.png") -> None:
        import matplotlib.pyplot as plt

        p = self.path(name)
        if p is not None:
            fig.savefig(p, dpi=110)
        plt.close(fig)

    def save_csv(self, name: str, header, rows) -> None:
        p = self.path(name)
        if p is None:
            return
        with open(p, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(header)
            for r in rows:
                w.writerow([_fmt(v) for v in r])

    def cache_dir(self) -> Path | None:
        return None if self.out is None else self.out / "cache" / self.id


def _fmt(v):
    if isinstance(v, (float, np.floating)):
        return f"{float(v):.10g}"
    return v


def prepare_output(out) -> Path:
    """The output folder, created; a clear error when it cannot be written."""
    p = Path(out)
    try:
        p.mkdir(parents=True, exist_ok=True)
        probe = p / ".write_probe"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise ValueError(f"out: cannot write to output folder {str(p)!r} ({e.strerror or e})") from None
    return p


class OutputExists(FileExistsError):
    """An output folder holds a previous run's outputs that a new run would overwrite."""


def run_config(full: bool, seed: int, params: dict) -> dict:
    """What identifies a run's outputs: full or quick, the seed and every size (as JSON)."""
    return _jsonable({"full": bool(full), "params": {"seed": int(seed), **params}})


def _tracked_files(out: Path, id: str) -> list[str]:
    """The files ``<id>_*`` in ``out`` that git tracks (none outside a work tree or without git)."""
    import subprocess

    try:
        res = subprocess.run(["git", "-C", str(out), "ls-files", "--", f"{id}_*"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    return res.stdout.split() if res.returncode == 0 else []


def check_overwrite(out, id: str, config: dict, *, force: bool = False) -> None:
    """Refuse to write reproduction ``id`` into ``out`` where that would silently replace a
    previous run's outputs: raises :class:`OutputExists` when ``out`` holds ``<id>_result.json``
    of a different configuration (``run_config``: quick/full, seed, sizes), or ``<id>_*`` files
    that git tracks (committed outputs, e.g. ``docs/reproductions/``). A rerun of the same
    configuration into an untracked folder is allowed (it continues from the cell cache).
    ``force=True`` skips the check."""
    if force or out is None:
        return
    out = Path(out)
    tracked = _tracked_files(out, id) if out.is_dir() else []
    if tracked:
        raise OutputExists(f"out: {str(out)!r} holds committed outputs of {id} ({', '.join(tracked[:3])}"
                           f"{', ...' if len(tracked) > 3 else ''}); choose another folder or pass "
                           "--force (force=True) to overwrite them")
    path = out / f"{id}_result.json"
    if not path.exists():
        return
    try:
        old = json.loads(path.read_text())
        previous = {"full": bool(old.get("full", False)), "params": old.get("params")}
    except (OSError, ValueError, AttributeError):
        previous = None
    if previous != config:
        diff = _config_difference(previous, config)
        raise OutputExists(f"out: {str(out)!r} holds outputs of another {id} run ({diff}); choose "
                           "another folder or pass --force (force=True) to overwrite them")


def _config_difference(old, new) -> str:
    if not isinstance(old, dict) or not isinstance(old.get("params"), dict):
        return f"unreadable {new and 'result.json'}"
    parts = [] if old["full"] == new["full"] else [f"full {old['full']} -> {new['full']}"]
    keys = sorted(set(old["params"]) | set(new["params"]))
    parts += [f"{k} {old['params'].get(k)!r} -> {new['params'].get(k)!r}" for k in keys
              if old["params"].get(k) != new["params"].get(k)]
    return "; ".join(parts[:4]) + ("; ..." if len(parts) > 4 else "")


# Names a string-valued size may take (lists of them are checked element by element): the kernel
# and activation tables, and the targets of CCS Figure 4 (experiments/ccs.py: FIG4_KERNELS).
CHOICES = {"kernels": KERNELS, "activations": tuple(ACTIVATIONS),
           "targets": ("linear", "exp", "composite"), "a_modes": ("zero", "free"),
           "init": ("gaussian", "aligned")}
# Number sizes for which 0 is a value, not a degenerate size (A_ℓ started at 0).
ZERO_ALLOWED = frozenset({"A_init"})


def check_sizes(defaults: dict, overrides: dict) -> dict:
    """Overrides checked against the defaults: known names, same kind of value, sizes > 0."""
    sizes = dict(defaults)
    for key, value in overrides.items():
        if key not in defaults:
            raise ValueError(f"unknown size {key!r}; expected one of {sorted(defaults)}")
        ref = defaults[key]
        sizes[key] = _check_value(key, value, ref)
    return sizes


def _check_value(key, value, ref):
    if isinstance(ref, bool):
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{key}: expected true/false, got {value!r}")
        return bool(value)
    if isinstance(ref, (list, tuple)):
        seq = list(value) if isinstance(value, (list, tuple, np.ndarray)) else [value]
        if not seq:
            raise ValueError(f"{key}: expected a non-empty list")
        proto = ref[0] if ref else seq[0]
        return [_check_value(key, v, proto) for v in seq]
    if isinstance(ref, str):
        if not isinstance(value, str):
            raise TypeError(f"{key}: expected a string, got {value!r}")
        if key in CHOICES and value not in CHOICES[key]:
            raise ValueError(f"{key}: unknown name {value!r}; expected one of {list(CHOICES[key])}")
        return value
    if isinstance(ref, (int, np.integer)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{key}: expected an integer, got {value!r}")
        if value < 1:
            raise ValueError(f"{key}: expected an integer >= 1, got {value}")
        return int(value)
    if isinstance(ref, (float, np.floating)):
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise TypeError(f"{key}: expected a number, got {value!r}") from None
        zero = key in ZERO_ALLOWED
        if not np.isfinite(v) or v < 0 or (v == 0 and not zero):
            raise ValueError(f"{key}: expected a finite number {'>= 0' if zero else '> 0'}, got {value}")
        return v
    return value


@dataclass
class Entry:
    id: str
    claim: str
    condition: str
    quick: dict
    full: dict
    function: Callable
    condition_full: str = ""  # the pass condition at the paper's sizes (``condition``: quick)

    def sizes(self, full: bool, overrides: dict) -> dict:
        """The sizes of a run: quick (``full``: updated with the paper's), then ``overrides``."""
        return check_sizes({**self.quick, **(self.full if full else {})}, overrides)


REGISTRY: dict[str, Entry] = {}


def reproduction(id: str, *, claim: str, condition: str, quick: dict, full: dict):
    """Register ``body(ctx, sizes) -> (passed, measured, details)`` as reproduction ``id`` and
    return the public function ``f(out=None, *, full=False, seed=0, progress=False,
    scheduler=None, workers=2, device="cpu", **sizes) -> Result``. Sizes default to ``quick``
    (``full``: the paper's); ``device="cuda"`` trains the kernel-attention cells on the GPU."""

    def wrap(body):
        @functools.wraps(body)
        def run(out=None, *, full: bool = False, seed: int = 0, progress: bool = False,
                scheduler: str | None = None, workers: int = 2, device: str = "cpu",
                force: bool = False, **sizes) -> Result:
            from .. import cuda
            from .._validation import positive_int

            if not isinstance(full, (bool, np.bool_)):
                raise TypeError(f"full: expected True or False, got {full!r}")
            seed = positive_int(seed, "seed", minimum=0)
            workers = positive_int(workers, "workers", minimum=0)
            device = cuda.check_device(device)
            params = REGISTRY[id].sizes(bool(full), sizes)
            check_overwrite(out, id, run_config(full, seed, params), force=bool(force))
            ctx = Context(id, out, seed=seed, full=full, progress=progress, scheduler=scheduler,
                          workers=workers, device=device)
            t0 = time.perf_counter()
            passed, measured, details = body(ctx, params)
            details = {**details, **ctx.notes}
            result = Result(id=id, claim=claim, condition=condition if not full else condition_full,
                            passed=bool(passed), measured=measured, details=details,
                            params={"seed": seed, **params}, wall_time=time.perf_counter() - t0,
                            full=full)
            if ctx.out is not None:
                result.files = list(ctx.files) + [f"{id}_result.json"]
                with open(ctx.out / f"{id}_result.json", "w") as f:
                    json.dump(result.to_dict(), f, indent=1)
            return result

        run.__doc__ = (body.__doc__ or "") + (
            f"\n\n    Claim: {claim}\n    Pass condition (quick): {condition}\n"
            f"    Pass condition (full): {condition_full}\n    Quick sizes: {quick}\n"
            f"    Full sizes: {full_sizes}\n")
        run.__signature__ = inspect.Signature(
            [inspect.Parameter("out", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None)]
            + [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=v) for k, v in
               (("full", False), ("seed", 0), ("progress", False), ("scheduler", None), ("workers", 2),
                ("device", "cpu"), ("force", False))]
            + [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=v) for k, v in quick.items()])
        REGISTRY[id] = Entry(id, claim, condition, dict(quick), dict(full_sizes), run, condition_full)
        return run

    if isinstance(condition, tuple):
        condition, condition_full = condition
    else:
        condition_full = condition
    full_sizes = full
    return wrap
