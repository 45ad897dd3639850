"""The shipped type stub _core.pyi (generated with pybind11-stubgen) must match the compiled
module: every function, every overload's parameter names. Regenerate with
``pybind11-stubgen lsa_native._core -o /tmp/stubs`` and copy the file when this fails."""
import re
from pathlib import Path

import lsa_native
from lsa_native import _core

STUB = Path(lsa_native.__file__).with_name("_core.pyi")


def _params(signature: str) -> tuple:
    inside = signature[signature.index("(") + 1: signature.rindex(")")]
    return tuple(re.findall(r"(\w+)\s*:", inside))


def stub_signatures():
    text = STUB.read_text()
    out = {}
    for name, args in re.findall(r"^def (\w+)\((.*?)\) ->", text, flags=re.M):
        out.setdefault(name, set()).add(_params(f"({args})"))
    return out


def module_signatures():
    out = {}
    for name in dir(_core):
        fn = getattr(_core, name)
        if name.startswith("_") or not callable(fn):
            continue
        for line in (fn.__doc__ or "").splitlines():
            m = re.match(rf"^(?:\d+\. )?{name}(\(.*\)) ->", line.strip())
            if m:
                out.setdefault(name, set()).add(_params(m.group(1)))
    return out


def test_stub_matches_module():
    assert STUB.exists(), "python/lsa_native/_core.pyi is missing"
    assert stub_signatures() == module_signatures()
