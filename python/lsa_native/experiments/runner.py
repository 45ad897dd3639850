"""Run reproductions by id; ``run_all`` writes an index page with every plot and the table."""
from __future__ import annotations

import time
from pathlib import Path

from ._common import REGISTRY, Result, machine, prepare_output

__all__ = ["ids", "run", "run_all", "table", "write_index", "load_results", "rebuild_index"]


def ids() -> list[str]:
    return list(REGISTRY)


def run(id: str, out=None, **kwargs) -> Result:
    """Run reproduction ``id`` (see :data:`REGISTRY`) with the keyword arguments of its function."""
    if id not in REGISTRY:
        raise ValueError(f"unknown reproduction id {id!r}; expected one of {ids()} or 'all'")
    return REGISTRY[id].function(out, **kwargs)


def table(results) -> str:
    lines = ["| id | result | measured | condition | wall time |", "| --- | --- | --- | --- | --- |"]
    return "\n".join(lines + [r.row() for r in results])


def write_index(out, results, *, command: str = "", total_time: float | None = None) -> Path:
    """index.md in ``out``: the PASS/FAIL table, then each reproduction's claim and plots."""
    out = Path(out)
    full = any(r.full for r in results)
    parts = [f"# lsa_native reproductions ({'full' if full else 'quick'} sizes)", ""]
    if command:
        parts += [f"Command: `{command}`", ""]
    parts += [f"Machine: {machine()}."
              + (f" Total wall time: {total_time:.0f} s." if total_time is not None else ""), "",
              table(results), ""]
    for r in results:
        parts += [f"## {r.id}: {r.status}", "", r.claim, "", f"- condition: {r.condition}",
                  f"- measured: {r.measured}", f"- sizes: `{r.params}`",
                  f"- wall time: {r.wall_time:.1f} s"
                  + (f" ({r.details['sweep_cells']})" if "sweep_cells" in r.details else ""), ""]
        for f in r.files:
            if f.endswith(".png"):
                parts += [f"![{r.id}]({f})", ""]
        others = [f for f in r.files if not f.endswith(".png")]
        if others:
            parts += ["Data: " + ", ".join(f"[{f}]({f})" for f in others), ""]
    path = out / "index.md"
    path.write_text("\n".join(parts))
    return path


def run_all(out, *, only=None, command: str = "", **kwargs) -> list[Result]:
    """Run every reproduction (or the ids in ``only``) into ``out`` and write ``index.md``."""
    prepare_output(out)
    chosen = ids() if only is None else list(only)
    for i in chosen:
        if i not in REGISTRY:
            raise ValueError(f"unknown reproduction id {i!r}; expected one of {ids()}")
    t0 = time.perf_counter()
    results = []
    for i in chosen:
        results.append(run(i, out, **kwargs))
    write_index(out, results, command=command, total_time=time.perf_counter() - t0)
    return results


def load_results(out) -> list[Result]:
    """The results saved in ``out`` (``*_result.json``), in registry order."""
    import json

    out = Path(out)
    found = {}
    for path in out.glob("*_result.json"):
        d = json.loads(path.read_text())
        found[d["id"]] = Result(**d)
    return [found[i] for i in ids() if i in found]


def rebuild_index(out, command: str = "") -> Path:
    """index.md of ``out`` from the saved results (e.g. after several separate runs)."""
    results = load_results(out)
    return write_index(out, results, command=command,
                       total_time=sum(r.wall_time for r in results))
