"""Reproductions of the papers' claims (SPEC section 4), one plain function per id.

Each function ``f(out=None, *, full=False, seed=0, progress=False, **sizes)`` runs the quick size
by default (``full=True``: the paper's), writes PNG/CSV/JSON into ``out`` when given and returns a
:class:`Result` with the measured numbers and PASS/FAIL against the stated condition.
``run(id, ...)`` looks one up by id; ``run_all`` runs every one and writes ``index.md``.
"""
from __future__ import annotations

from ._common import REGISTRY, Result
from .zfb import zfb_random_cov, zfb_shifts, zfb_thm41, zfb_thm42
from .runner import run, run_all, ids

__all__ = ["REGISTRY", "Result", "run", "run_all", "ids", "zfb_thm41", "zfb_thm42", "zfb_shifts",
           "zfb_random_cov"]
