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
    with pytest.raises(ValueError, match="cannot reach Dask scheduler"):
        sweep.check_scheduler("tcp://127.0.0.1:9", timeout=2)


# Cells 0-4 run at once; cells 5-9 wait for a gate file that exists only after the kill, so the
# sweep is mid-way when it is killed however slow or loaded the machine is.
DRIVER = """
import sys
from lsa_native.experiments import sweep
log, cache, gate = sys.argv[1], sys.argv[2], sys.argv[3]
cells = [{"id": i, "log": log, "gate": gate if i >= 5 else None} for i in range(10)]
sweep.run_cells(sweep.example_cell, cells, cache, workers=2)
"""


def test_local_cluster_sweep_killed_and_restarted(tmp_path):
    pytest.importorskip("dask.distributed")
    log, cache, gate = tmp_path / "log.txt", tmp_path / "cache", tmp_path / "gate"
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, str(log), str(cache), str(gate)],
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # Polls a condition, not the clock: the deadline only ends a broken run.
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and len(list(cache.glob("[!.]*.json"))) < 5:
            assert proc.poll() is None, "the sweep driver exited before its gated cells could run"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver, its LocalCluster and workers
        proc.wait()
    done_before = {p.stem for p in cache.glob("[!.]*.json")}
    assert len(done_before) == 5
    computed_before = _computed(log)

    gate.touch()
    cells = [{"id": i, "log": str(log), "gate": str(gate) if i >= 5 else None} for i in range(10)]
    res = sweep.run_cells(sweep.example_cell, cells, cache, workers=2)
    assert [r["value"] for r in res] == [i * i for i in range(10)]
    recomputed = _computed(log)[len(computed_before):]
    finished_ids = {c["id"] for c in cells if sweep.cell_key(sweep.example_cell, c) in done_before}
    assert not finished_ids & set(recomputed)  # cached cells were not run again
    assert set(recomputed) | finished_ids == set(range(10))

    n = len(_computed(log))
    assert sweep.run_cells(sweep.example_cell, cells, cache, workers=0) == res
    assert len(_computed(log)) == n  # a finished sweep recomputes nothing


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(condition, what: str, procs=()):
    """Poll a condition (never the clock for correctness: the deadline only ends a broken run)."""
    deadline = time.monotonic() + 300
    while not condition():
        for p in procs:
            assert p.poll() is None, f"{what}: a process exited early ({p.args})"
        assert time.monotonic() < deadline, f"{what}: not reached"
        time.sleep(0.05)


SCHEDULER_DRIVER = """
import sys
from lsa_native.experiments import sweep
address, log, cache, gate = sys.argv[1:5]
cells = [{"id": i, "log": log, "gate": gate if i >= 6 else None} for i in range(10)]
res = sweep.run_cells(sweep.example_cell, cells, cache, scheduler=address)
assert [r["value"] for r in res] == [i * i for i in range(10)]
"""


def test_external_cluster_survives_a_killed_worker(tmp_path):
    """`dask scheduler` and two `dask worker`s as separate processes on the loopback (as on a real
    cluster); one worker is SIGKILLed while it holds gated cells: the sweep still finishes with
    every cell, each computed once (a killed computation never reaches the log or the cache), and
    a second sweep computes nothing."""
    pytest.importorskip("dask.distributed")
    dask = os.path.join(os.path.dirname(sys.executable), "dask")
    if not os.path.exists(dask):
        pytest.skip("the dask command line is not installed next to this Python")
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    log, cache, gate = tmp_path / "log.txt", tmp_path / "cache", tmp_path / "gate"
    # They run in tmp_path, so a relative PYTHONPATH (e.g. `PYTHONPATH=python pytest`) is made
    # absolute: the workers and the driver must import the same lsa_native as this process.
    pythonpath = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                 cwd=tmp_path, env={**os.environ, "PYTHONPATH": os.pathsep.join(pythonpath)})
    procs = [subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", str(port),
                               "--dashboard-address", ":0", "--no-show"], **quiet)]
    try:
        for name in ("a", "b"):
            procs.append(subprocess.Popen([dask, "worker", address, "--nworkers", "1",
                                           "--nthreads", "1", "--name", name, "--no-nanny",
                                           "--dashboard-address", ":0"], **quiet))
        # Client retries until connected: 300 s is a hang guard, not a speed threshold (the
        # scheduler starts in ~2 s here; 60 s was a wall-clock limit on a loaded machine).
        sweep.check_scheduler(address, timeout=300).close()
        driver = subprocess.Popen([sys.executable, "-c", SCHEDULER_DRIVER, address, str(log),
                                   str(cache), str(gate)], **quiet)
        procs.append(driver)
        # Cells 0-5 finish; 6-9 wait for the gate, so both workers are mid-cell when one dies.
        _wait_for(lambda: len(list(cache.glob("[!.]*.json"))) == 6, "six cached cells", procs)
        os.killpg(procs[1].pid, signal.SIGKILL)
        procs[1].wait()
        gate.touch()
        assert driver.wait(timeout=300) == 0
        assert sorted(_computed(log)) == list(range(10))  # every cell once
        cells = [{"id": i, "log": str(log), "gate": str(gate) if i >= 6 else None}
                 for i in range(10)]
        res = sweep.run_cells(sweep.example_cell, cells, cache, scheduler=address)
        assert [r["value"] for r in res] == [i * i for i in range(10)]
        assert sorted(_computed(log)) == list(range(10))  # cached: nothing computed again
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
