"""Sweeps: cells cached by configuration; a 2-worker LocalCluster sweep killed mid-way restarts
where it stopped (finished cells are not recomputed) and a finished sweep recomputes nothing."""
import os
import signal
import subprocess
import sys
import time

import pytest

from lsa_native.experiments import sweep


def _cells(log, n=8, sleep=0.0):
    return [{"id": i, "sleep": sleep, "log": str(log)} for i in range(n)]


def _computed(log):
    return [int(x) for x in log.read_text().split()] if log.exists() else []


def test_cache_keys_and_in_process_resume(tmp_path):
    log = tmp_path / "log.txt"
    cells = _cells(log, 5)
    assert len({sweep.cell_key(sweep.example_cell, c) for c in cells}) == 5
    assert sweep.cell_key(sweep.example_cell, {"b": 1, "a": 2}) == sweep.cell_key(sweep.example_cell, {"a": 2, "b": 1})
    res = sweep.run_cells(sweep.example_cell, cells[:3], tmp_path / "cache", workers=0)
    assert [r["value"] for r in res] == [0, 1, 4]
    res = sweep.run_cells(sweep.example_cell, cells, tmp_path / "cache", workers=0)
    assert [r["value"] for r in res] == [i * i for i in range(5)]
    assert sorted(_computed(log)) == [0, 1, 2, 3, 4]  # each cell computed once


def test_unreachable_scheduler_fails_fast():
    pytest.importorskip("dask.distributed")
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="cannot reach Dask scheduler"):
        sweep.check_scheduler("tcp://127.0.0.1:9", timeout=2)
    assert time.perf_counter() - t0 < 30


DRIVER = """
import sys
from lsa_native.experiments import sweep
log, cache = sys.argv[1], sys.argv[2]
cells = [{"id": i, "sleep": 0.6, "log": log} for i in range(10)]
sweep.run_cells(sweep.example_cell, cells, cache, workers=2)
"""


def test_local_cluster_sweep_killed_and_restarted(tmp_path):
    pytest.importorskip("dask.distributed")
    log, cache = tmp_path / "log.txt", tmp_path / "cache"
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, str(log), str(cache)],
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and len(list(cache.glob("*.json"))) < 3:
            if proc.poll() is not None:
                break
            time.sleep(0.1)
        assert proc.poll() is None, "the sweep finished before it could be killed"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver, its LocalCluster and workers
        proc.wait()
    done_before = {p.stem for p in cache.glob("*.json")}
    assert 3 <= len(done_before) < 10
    computed_before = _computed(log)

    cells = [{"id": i, "sleep": 0.6, "log": str(log)} for i in range(10)]
    res = sweep.run_cells(sweep.example_cell, cells, cache, workers=2)
    assert [r["value"] for r in res] == [i * i for i in range(10)]
    recomputed = _computed(log)[len(computed_before):]
    finished_ids = {c["id"] for c in cells if sweep.cell_key(sweep.example_cell, c) in done_before}
    assert not finished_ids & set(recomputed)  # cached cells were not run again
    assert set(recomputed) | finished_ids == set(range(10))

    n = len(_computed(log))
    assert sweep.run_cells(sweep.example_cell, cells, cache, workers=0) == res
    assert len(_computed(log)) == n  # a finished sweep recomputes nothing
