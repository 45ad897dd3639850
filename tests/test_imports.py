"""The import graph of the package is acyclic (layers without circles, issue 20).

Every ``import`` / ``from … import`` statement of python/lsa_native counts, at module level or
inside a function (a function-local import that only hides a cycle is still a cycle), relative or
absolute. An edge A → B means that A names the package module B: ``from P import n`` names P.n
when P.n is a module of the package, else P; ``import P.Q`` names P.Q. Naming P.Q also imports the
packages above it (Python runs P/__init__ first), so those are edges too, except the root package
(its __init__ re-exports every layer) and the packages the importer itself is inside. The compiled ``_core`` is a node
through its stub ``_core.pyi``."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "lsa_native"
ROOT = Path(__file__).resolve().parent.parent / "python" / PACKAGE


def _modules(root: Path) -> dict[str, Path]:
    """Dotted module name → source file, for every .py file under the package and every stub
    (.pyi) without one (the compiled ``_core``, a leaf)."""
    found = {}
    for path in sorted(root.rglob("*.py*")):
        if path.suffix not in (".py", ".pyi") or (path.suffix == ".pyi" and path.with_suffix(".py").exists()):
            continue
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute name of a (possibly relative) import target written in `module`."""
    if level == 0:
        return target or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def _imported(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Package modules that `module` imports anywhere in its file."""
    is_package = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, is_package, node.level, node.module)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.add(sub if sub in modules else base)
    return {dep for name in out if name in modules for dep in _with_packages(name, module)}


def _with_packages(target: str, importer: str) -> list[str]:
    """`target` and the packages Python initializes to import it: its ancestors below the root,
    except those the importer is inside (already initializing when the importer runs)."""
    parts = target.split(".")
    names = [".".join(parts[:k]) for k in range(2, len(parts) + 1)]
    return [n for n in names if n != importer and not importer.startswith(n + ".")]


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    modules = _modules(root)
    return {name: _imported(name, path, modules) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle [a, b, …, a] of `graph`, or None (depth-first search, sorted order)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_graph_sees_relative_absolute_and_local_imports():
    """The graph builder on the package itself: known edges of each import form are found (so an
    empty graph cannot pass the acyclicity test)."""
    graph = import_graph()
    assert f"{PACKAGE}.train" in graph and f"{PACKAGE}.population" in graph
    assert f"{PACKAGE}.population" in graph[f"{PACKAGE}.train.objectives"]  # from .. import lsa, population
    assert f"{PACKAGE}.data" in graph[f"{PACKAGE}.population"]  # from .data import check_covariance
    assert f"{PACKAGE}.train" in graph[PACKAGE]  # from . import …, train


def test_find_cycle_reports_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_find_cycle_on_parsed_sources(tmp_path):
    """A cycle closed only by a function-local relative import is found."""
    pkg = tmp_path / PACKAGE
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from . import a\n")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..a import g\n    import lsa_native.c\n")
    (pkg / "c.py").write_text("")
    graph = import_graph(pkg)
    assert graph[f"{PACKAGE}.sub.b"] == {f"{PACKAGE}.a", f"{PACKAGE}.c"}
    assert find_cycle(graph) == [f"{PACKAGE}.a", f"{PACKAGE}.sub.b", f"{PACKAGE}.a"]


def test_package_import_graph_is_acyclic():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)
