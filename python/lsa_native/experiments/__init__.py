"""Reproductions of the papers' claims (SPEC section 4), one plain function per id.

Each function ``f(out=None, *, full=False, seed=0, progress=False, **sizes)`` runs the quick size
by default (``full=True``: the paper's), writes PNG/CSV/JSON into ``out`` when given and returns a
:class:`Result` with the measured numbers and PASS/FAIL against the stated condition.
``run(id, ...)`` looks one up by id; ``run_all`` runs every one and writes ``index.md``.
"""
from __future__ import annotations

from ._common import REGISTRY, Result
from .zfb import zfb_random_cov, zfb_shifts, zfb_thm41, zfb_thm42
from .ccs import ccs_fig1, ccs_fig2, ccs_fig3_5_6, ccs_fig4, ccs_prop31, train_cell
from .la import la_merged, la_separate, lro_risk
from .runner import run, run_all, ids

__all__ = ["REGISTRY", "Result", "run", "run_all", "ids", "zfb_thm41", "zfb_thm42", "zfb_shifts",
           "zfb_random_cov", "ccs_prop31", "ccs_fig1", "ccs_fig2", "ccs_fig3_5_6", "ccs_fig4",
           "train_cell", "la_merged", "la_separate", "lro_risk"]
