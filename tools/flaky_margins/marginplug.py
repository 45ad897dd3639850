"""Pytest plugin (measurement only, never in the default suite): records how close every
comparison assert and every np.testing.assert_allclose came to failing, per test and line.

Each `assert A < B` / `A <= B` (also inside np.all(...)/all(...) and `and` chains) records
max(A / B) when B > 0 (1.0 = at the threshold); `A > B` / `A >= B` records max(B / A) when A > 0.
Other signs record the slack as ("diff", max(A − B)). assert_allclose records
max |a − d| / (atol + rtol |d|). Records go to $LSA_MARGIN_OUT (JSON lines) at session end.
Use with a fresh PYTHONPYCACHEPREFIX so that pytest re-rewrites the test modules:
    PYTHONPYCACHEPREFIX=$(mktemp -d) LSA_MARGIN_OUT=m.jsonl \
        python -m pytest -p marginplug -p no:cacheprovider tests/...
"""
from __future__ import annotations

import ast
import builtins
import json
import os

import numpy as np
import _pytest.assertion.rewrite as _rw

RECORDS: dict = {}
CURRENT = {"node": None}
_OPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}


def _record(where, value):
    key = (CURRENT["node"], where)
    old = RECORDS.get(key)
    if old is None or (isinstance(value, float) and isinstance(old, float) and value > old):
        RECORDS[key] = value
    elif isinstance(value, tuple) and isinstance(old, tuple) and value[1] > old[1]:
        RECORDS[key] = value


def _margin(a, b, op, where):
    try:
        a64 = np.asarray(a, dtype=np.float64)
        b64 = np.asarray(b, dtype=np.float64)
        num, den = (a64, b64) if op in ("<", "<=") else (b64, a64)
        if np.all(den > 0) and np.all(num >= 0):
            _record(where, float(np.max(num / den)) if num.size and den.size else 0.0)
        else:
            _record(where, ("diff", float(np.max(num - den)) if num.size and den.size else 0.0))
    except Exception:  # non-numeric comparisons: ignore
        pass
    return {"<": lambda x, y: x < y, "<=": lambda x, y: x <= y,
            ">": lambda x, y: x > y, ">=": lambda x, y: x >= y}[op](a, b)


builtins.__lsa_margin__ = _margin


class _Wrap(ast.NodeTransformer):
    def __init__(self, path):
        self.path = os.path.basename(path or "?")

    def _cmp(self, node):
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _OPS:
            where = f"{self.path}:{node.lineno}"
            return ast.copy_location(ast.Call(
                func=ast.Name("__lsa_margin__", ast.Load()),
                args=[node.left, node.comparators[0], ast.Constant(_OPS[type(node.ops[0])]),
                      ast.Constant(where)], keywords=[]), node)
        if isinstance(node, ast.Call) and len(node.args) == 1 and (
                (isinstance(node.func, ast.Attribute) and node.func.attr == "all")
                or (isinstance(node.func, ast.Name) and node.func.id == "all")):
            node.args[0] = self._cmp(node.args[0])
            return node
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
            node.values = [self._cmp(v) for v in node.values]
            return node
        return node

    def visit_Assert(self, node):
        node.test = self._cmp(node.test)
        return node


_orig = _rw.rewrite_asserts


def _rewrite(mod, source, module_path=None, config=None):
    _Wrap(module_path).visit(mod)
    ast.fix_missing_locations(mod)
    return _orig(mod, source, module_path, config)


_rw.rewrite_asserts = _rewrite

_orig_allclose = np.testing.assert_allclose


def _allclose(actual, desired, rtol=1e-7, atol=0, *args, **kwargs):
    try:
        a = np.asarray(actual, dtype=np.float64)
        d = np.asarray(desired, dtype=np.float64)
        den = atol + rtol * np.abs(d)
        err = np.abs(a - d)
        import inspect
        fr = inspect.currentframe().f_back
        while fr is not None and not os.path.basename(fr.f_code.co_filename).startswith(("test_", "conftest")):
            fr = fr.f_back
        where = f"{os.path.basename(fr.f_code.co_filename)}:{fr.f_lineno}:allclose" if fr else "?"
        finite = np.isfinite(a) & np.isfinite(d)
        if np.all(den[finite] > 0) if np.ndim(den) else den > 0:
            _record(where, float(np.max(err[finite] / np.broadcast_to(den, err.shape)[finite])) if finite.any() else 0.0)
        else:
            nz = np.broadcast_to(den, err.shape) > 0
            _record(where, ("diff", float(np.max(err[finite & ~nz]))) if (finite & ~nz).any() else 0.0)
    except Exception:
        pass
    return _orig_allclose(actual, desired, rtol, atol, *args, **kwargs)


np.testing.assert_allclose = _allclose


def pytest_runtest_setup(item):
    CURRENT["node"] = item.nodeid
    _set_seed(item)


def pytest_sessionfinish(session):
    out = os.environ.get("LSA_MARGIN_OUT")
    if not out:
        return
    with open(out, "a") as f:
        seed = os.environ.get("LSA_TEST_SEED")
        for (node, where), v in RECORDS.items():
            f.write(json.dumps({"seed": seed, "node": node, "where": where, "v": v}) + "\n")


# ---- repetitions: --seeds=K runs every selected test K times, the rng fixture's run seed being
# LSA_TEST_SEED + step (conftest.SEED is read when the fixture is built). The repetition adds a
# [sK] parameter to every node id, and the rng stream hashes the node id: a failure found this way
# is NOT replayed by LSA_TEST_SEED=<seed + K> alone; rerun it with the same --seeds and node id. ----

def pytest_addoption(parser):
    parser.addoption("--seeds", type=int, default=0, help="repeat each test with this many seeds (changes the node ids: "
                     "not replayable with LSA_TEST_SEED alone)")


@__import__("pytest").fixture
def _seed_step(request):
    return request.param


def pytest_generate_tests(metafunc):
    k = metafunc.config.getoption("--seeds")
    if k:
        metafunc.fixturenames.append("_seed_step")
        metafunc.parametrize("_seed_step", range(k), indirect=True, ids=[f"s{i}" for i in range(k)])


def _set_seed(item):
    import sys
    cs = getattr(item, "callspec", None)
    step = cs.params.get("_seed_step") if cs else None
    cf = sys.modules.get("conftest")
    if step is not None and cf is not None:
        cf.SEED = int(os.environ.get("LSA_TEST_SEED", "0")) + step
