"""What a run folder of `lsa-native reproduce` shows (gpu_reproductions.sh prints it at the end).

    python docs/reproductions/summarize_run.py RUN_DIR [ID ...]

Per id: the verdict and measured value of ``RUN_DIR/<id>_result.json`` when the id finished; for
ccs-fig3-5-6 the per-panel numbers the paper's claim is about (median over the panel's matrices
of the seed-averaged final dist(M, I), against 0.05), from the result or — when the id was
stopped by the deadline — recomputed from the cells cached so far (``RUN_DIR/cache/<id>/``) with
the experiment's own panel summary and verdict; then one row per cached training (steps taken,
convergence test, test loss, training wall seconds).
"""
from __future__ import annotations

import glob
import json
import math
import os
import sys


def _cells(run_dir: str, rid: str) -> list[tuple[dict, dict]]:
    out = []
    for path in sorted(glob.glob(os.path.join(run_dir, "cache", rid, "*.json"))):
        with open(path) as f:
            rec = json.load(f)
        out.append((rec["config"], rec["result"]))
    return out


def _fmt(v, spec=".3f", scale=1.0) -> str:
    """scale × a number of a result file (NaN is stored as the string "nan"), or "nan"."""
    try:
        v = scale * float(v)
    except (TypeError, ValueError):
        return "nan"
    return "nan" if math.isnan(v) else format(v, spec)


def _panels_from_cells(cells) -> tuple[list[dict], bool]:
    """The panels of ccs-fig3-5-6 from cached cells (the experiment's own summary and verdict)."""
    from lsa_native.experiments import ccs

    groups: dict = {}
    for cfg, r in cells:
        key = ("A = 0 (Thm 4.5)" if cfg["hold_A_zero"] else "A free (Thm 4.6)", cfg["kernel"], cfg["activations"][0])
        if cfg.get("init", "gaussian") != "gaussian":  # a diagnostic start: its own panel
            key = (f"{key[0]}, {cfg['init']} start", *key[1:])
        groups.setdefault(key, []).append(r)
    summary = [ccs._dist_panel(key, rs) for key, rs in sorted(groups.items())]
    passed = ccs._dist_verdict(summary, full=True)
    return [{k: v for k, v in s.items() if not k.startswith("_")} for s in summary], passed


def _print_panels(panels) -> None:
    """Median dist(M, I) at the start, mid-training and final (the last 10%), the largest final
    one, the A's median final dist, the verdict against 0.05, the end slope (decades of dist per
    1000 steps over the last 20%: < 0 still falling), the matrices of single trainings that never
    fell below 0.5 (untrained) and ‖A_ℓ‖_F (whether A grew toward a·I)."""
    print(f"  {'panel':<34} {'trained':>7} {'conv.':>5} {'initial':>8} {'mid':>6} {'final':>7} {'max':>6} "
          f"{'A':>6}  < 0.05  {'slope':>6} {'untr.':>5}  ‖A_ℓ‖_F")
    for s in panels:
        norms = " ".join(_fmt(v, ".2f") for v in s.get("A_norm_final", []))
        print(f"  {s['panel']:<34} {s['trained']:>7} {s['converged']:>5} {_fmt(s['median_initial']):>8} "
              f"{_fmt(s['median_mid']):>6} {_fmt(s['median_final']):>7} {_fmt(s['max_final'], '.2f'):>6} "
              f"{_fmt(s['A_final'], '.2f'):>6}  {'yes' if s.get('passed') else 'NO ':<6}  "
              f"{_fmt(s.get('median_slope', float('nan')), '+.3f'):>6} {s.get('untrained', ''):>5}  {norms}")


def summarize(run_dir: str, ids=None) -> None:
    found = sorted(os.path.basename(p)[: -len("_result.json")] for p in glob.glob(os.path.join(run_dir, "*_result.json")))
    cached = sorted(os.path.basename(p) for p in glob.glob(os.path.join(run_dir, "cache", "*")))
    for rid in ids or sorted(set(found) | set(cached)):
        cells = _cells(run_dir, rid)
        path = os.path.join(run_dir, f"{rid}_result.json")
        print(f"=== {rid}")
        if os.path.exists(path):
            with open(path) as f:
                r = json.load(f)
            print(f"  {'PASS' if r['passed'] else 'FAIL'} ({'full' if r.get('full') else 'quick'}, "
                  f"{r.get('wall_time', float('nan')):.0f} s): {r['measured']}")
            print(f"  condition: {r['condition']}")
            d = r.get("details", {})
            if "panels" in d:
                _print_panels(d["panels"])
            for name, verdict in d.get("checks", {}).items():
                if verdict != "holds":
                    print(f"  {verdict}: {name}")
        else:
            print(f"  no result (stopped before the end): {len(cells)} cells cached")
            if rid == "ccs-fig3-5-6" and cells:
                panels, passed = _panels_from_cells(cells)
                print(f"  panels of the cached cells only ({'would PASS' if passed else 'would FAIL'} "
                      "on these panels; the others did not run):")
                _print_panels(panels)
        if cells:
            print(f"  {'cell':<40} {'steps':>6} {'conv.':>5} {'Δloss% ± SE':>14} {'test loss':>10} {'wall s':>7}")
            for cfg, res in sorted(cells, key=lambda c: (not c[0].get("hold_A_zero", False), c[0]["kernel"],
                                                         c[0]["activations"], c[0]["context"], c[0]["layers"])):
                name = (f"{cfg['kernel']} {'+'.join(cfg['activations'])} n={cfg['context']} L={cfg['layers']}"
                        + (" A=0" if cfg.get("hold_A_zero") else "") + f" s={cfg['seed']}")
                change = res.get("train_loss_change", float("nan"))
                se = res.get("train_loss_change_se", float("nan"))
                print(f"  {name:<40} {res.get('steps_taken', 0):>6} {str(bool(res.get('converged'))):>5} "
                      f"{_fmt(change, '+.2f', 100):>7} ± {_fmt(se, '.2f', 100):<5} {_fmt(res.get('loss'), '.4f'):>10} "
                      f"{_fmt(res.get('train_wall_s'), '.1f'):>7}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: summarize_run.py RUN_DIR [ID ...]")
    summarize(sys.argv[1], sys.argv[2:])
