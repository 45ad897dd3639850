"""Grids of independent cells (trainings) on ``dask.distributed``, cached on disk.

Each cell is a JSON-able configuration; its result is stored as ``<cache>/<key>.json`` where the
key is a hash of (function name, configuration), written atomically by whoever computes it. A
killed sweep therefore restarts where it stopped and a finished one is not recomputed. Cells run
on a ``LocalCluster`` (``workers`` processes) by default, on an existing cluster with
``scheduler="tcp://host:port"``, or in this process (``workers=0``; no Dask needed).
"""
from __future__ import annotations

import hashlib
import importlib
import json
import os
import tempfile
import time
from pathlib import Path

__all__ = ["cell_key", "run_cells", "check_scheduler", "example_cell"]


def _name(fn) -> str:
    return f"{fn.__module__}:{fn.__qualname__}"


def cell_key(fn, config: dict) -> str:
    """Hash of the cell function's name and its configuration (sorted JSON). Keys beginning with
    ``_`` are run options — where the cell runs (``_device``), not what it computes — and are left
    out, so a cell computed on a GPU or a CPU worker is the same cached cell."""
    identity = {k: v for k, v in config.items() if not str(k).startswith("_")}
    blob = json.dumps([_name(fn), identity], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def _write_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp_", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


def _load(path: Path):
    try:
        with open(path) as f:
            return json.load(f)["result"]
    except (OSError, ValueError, KeyError):
        return None


def _compute(fn_name: str, config: dict, cache_file: str | None, threads: int):
    """Run one cell (on a worker or here) and store its result in the cache. A cell already in
    the cache is read, not run: Dask recomputes the results a dead worker held in memory, and
    those must not be computed twice."""
    if cache_file is not None:
        cached = _load(Path(cache_file))
        if cached is not None:
            return cached
    module, qual = fn_name.split(":")
    fn = getattr(importlib.import_module(module), qual)
    if threads:
        import lsa_native

        lsa_native.set_num_threads(threads)
    t0 = time.perf_counter()
    result = fn(config)
    record = {"function": fn_name, "config": config, "result": result,
              "seconds": time.perf_counter() - t0}
    if cache_file is not None:
        _write_json(Path(cache_file), record)
    return result


def check_scheduler(address: str, timeout: float = 5.0):
    """A connected ``dask.distributed.Client`` for ``address``, or a ValueError at once."""
    try:
        from dask.distributed import Client
    except ImportError:
        raise ValueError("scheduler: dask.distributed is not installed "
                         "(pip install 'lsa_native[sweep]')") from None
    try:
        return Client(address, timeout=f"{timeout}s")
    except (OSError, TimeoutError, ValueError) as e:
        raise ValueError(f"scheduler: cannot reach Dask scheduler at {address!r} ({e})") from None


def run_cells(fn, cells: list, cache_dir=None, *, scheduler: str | None = None, workers: int = 2,
              progress: bool = False, desc: str = "cells", gpus: bool = False) -> list:
    """Results of ``fn(config)`` for every config in ``cells`` (in order).

    ``fn`` must be a module-level function (workers import it by name) returning JSON-able data.
    Cached results in ``cache_dir`` are reused; the others run on Dask (``scheduler`` address, or
    a LocalCluster of ``workers`` processes) or here when ``workers == 0`` and no scheduler.
    ``gpus``: the cells use a GPU; without a scheduler they run on one Dask worker per GPU
    (``dask_cuda.LocalCUDACluster``, each worker pinned to its device) when dask-cuda is
    installed, else in this process on the GPU it sees."""
    cache = None if cache_dir is None else Path(cache_dir)
    keys = [cell_key(fn, c) for c in cells]
    results = [None] * len(cells)
    pending = []
    for i, k in enumerate(keys):
        r = _load(cache / f"{k}.json") if cache is not None else None
        if r is None:
            pending.append(i)
        else:
            results[i] = r
    bar = None
    if progress:
        try:
            from tqdm.auto import tqdm
        except ImportError:  # progress bars are optional (extra 'progress')
            tqdm = None
    if progress and tqdm is not None:
        bar = tqdm(total=len(cells), initial=len(cells) - len(pending), desc=desc, unit="cell")
    name = _name(fn)
    files = [None if cache is None else str(cache / f"{keys[i]}.json") for i in range(len(cells))]
    try:
        if not pending:
            return results
        if scheduler is None and gpus and not _have_dask_cuda():
            workers = 0
        if scheduler is None and workers == 0:
            for i in pending:
                results[i] = _compute(name, cells[i], files[i], 0)
                if bar:
                    bar.update()
            return results
        _run_dask(name, cells, files, pending, results, scheduler, workers, bar, gpus)
        return results
    finally:
        if bar:
            bar.close()


def _have_dask_cuda() -> bool:
    try:
        import dask_cuda  # noqa: F401
    except ImportError:
        return False
    return True


def _run_dask(name, cells, files, pending, results, scheduler, workers, bar, gpus=False):
    from dask.distributed import Client, LocalCluster, as_completed

    if scheduler is not None:
        client, cluster = check_scheduler(scheduler), None
        threads = 0
    elif gpus:  # one worker per GPU, CUDA_VISIBLE_DEVICES set per worker by dask-cuda
        from dask_cuda import LocalCUDACluster

        cluster = LocalCUDACluster(threads_per_worker=1, dashboard_address=":0")
        client = Client(cluster)
        threads = 0
    else:
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                               dashboard_address=":0")  # a free port: never clash with another cluster
        client = Client(cluster)
        threads = max(1, (os.cpu_count() or 1) // workers)
    try:
        futures = {client.submit(_compute, name, cells[i], files[i], threads, pure=False): i
                   for i in pending}
        for fut in as_completed(futures):
            results[futures[fut]] = fut.result()
            fut.release()  # the result is here (and cached): workers need not keep it
            if bar:
                bar.update()
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def example_cell(config: dict) -> dict:
    """A cheap cell for tests and demonstrations: sleeps ``config['sleep']`` seconds, waits until
    the file ``config['gate']`` exists (when given: a test holds cells back with it instead of
    racing the clock), appends its id to ``config['log']`` (one line per computation) and returns
    id²."""
    time.sleep(float(config.get("sleep", 0.0)))
    gate = config.get("gate")
    while gate and not os.path.exists(gate):
        time.sleep(0.01)
    if config.get("log"):
        with open(config["log"], "a") as f:
            f.write(f"{config['id']}\n")
    return {"id": config["id"], "value": config["id"] ** 2}
