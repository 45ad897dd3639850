"""Per-panel trace analysis of a ccs-fig3-5-6 cell cache (no training): for each panel (A mode, K, h̃)
and each matrix (Σ½B_ℓᵀC_ℓΣ½, ℓ = 0..2; A_0, A_1 with A free), the final dist(M, I) (mean over the
last 10% of each seed's trace, as ``ccs._dist_panel``), its spread over seeds, and the slope of
log10 dist over the last 20% of the steps (decades per 1000 steps), with the steps a matrix still
falling at that rate would need to reach 0.05.

    python docs/reproductions/ccs_traces.py out/gpu-repro/cache/ccs-fig3-5-6 [--csv out.csv]
"""
from __future__ import annotations

import argparse
import glob
import json
import os

import numpy as np

LEVEL, WINDOW, SLOPE_WINDOW = 0.05, 0.1, 0.2


def load(cache: str) -> dict:
    panels = {}
    for f in sorted(glob.glob(os.path.join(cache, "*.json"))):
        d = json.load(open(f))
        c, r = d["config"], d["result"]
        if "trace_dist_BC" not in r or r.get("diverged"):
            continue
        key = ("A=0" if c["hold_A_zero"] else "A free", c["kernel"], c["activations"][0])
        panels.setdefault(key, []).append((c["seed"], r))
    return panels


def matrices(key, r):
    """{name: trace} of a cell's matrices, as the paper plots them (A_{L-1} left out)."""
    out = {f"BC{j}": np.asarray(r["trace_dist_BC"])[:, j] for j in range(np.shape(r["trace_dist_BC"])[1])}
    if key[0] == "A free":
        tA = np.asarray(r["trace_dist_A"])
        out.update({f"A{j}": tA[:, j] for j in range(tA.shape[1] - 1)})
    return out


def slope(step, trace, frac=SLOPE_WINDOW):
    """d log10(dist) / d(1000 steps) by least squares over the last ``frac`` of the trace."""
    k = max(3, int(round(frac * len(trace))))
    s, y = np.asarray(step[-k:], float) / 1000, np.log10(np.maximum(trace[-k:], 1e-12))
    return float(np.polyfit(s, y, 1)[0])


def analyse(panels):
    rows = []
    for key, cells in sorted(panels.items()):
        per = {}
        for seed, r in cells:
            step = np.asarray(r["trace_step"])
            for name, t in matrices(key, r).items():
                k = max(1, int(round(WINDOW * len(t))))
                per.setdefault(name, []).append((t[-k:].mean(), slope(step, t), int(step[-1])))
        for name, v in per.items():
            fin, sl, last = np.array(v).T
            m, sd = fin.mean(), fin.std(ddof=1) if len(fin) > 1 else 0.0
            msl = sl.mean()
            need = (np.log10(LEVEL) - np.log10(m)) / msl * 1000 if (m > LEVEL and msl < 0) else np.nan
            rows.append(dict(panel=" ".join(key), matrix=name, final=m, seed_sd=sd,
                             seed_finals=" ".join(f"{x:.3f}" for x in fin), slope=msl,
                             last_step=int(last.max()), steps_to_level=need))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cache")
    ap.add_argument("--csv")
    a = ap.parse_args()
    rows = analyse(load(a.cache))
    print(f"{'panel':24s} {'M':4s} {'final':>6s} {'±sd':>6s}  {'seeds':20s} {'slope':>7s} {'last':>5s} {'+steps→0.05':>11s}")
    for r in rows:
        print(f"{r['panel']:24s} {r['matrix']:4s} {r['final']:6.3f} {r['seed_sd']:6.3f}  {r['seed_finals']:20s} "
              f"{r['slope']:+7.3f} {r['last_step']:5d} {r['steps_to_level']:11.0f}")
    if a.csv:
        import csv
        with open(a.csv, "w", newline="") as fh:
            w = csv.DictWriter(fh, list(rows[0]))
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()
