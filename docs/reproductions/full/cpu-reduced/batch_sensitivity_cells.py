"""Per-cell table of the CCS batch-sensitivity runs (issue 19): reads the cell cache of each run
folder (``RUNS/<run>/cache/<id>/*.json``, written by ``lsa-native reproduce``) and prints one
markdown row per training — batch, steps taken, the convergence test, the test loss (CCS (5))
with its Monte Carlo SE, the Bayes loss, the training's wall and CPU seconds, and for traced
trainings (ccs-fig3-5-6) the median dist(Σ½B_ℓᵀC_ℓΣ½, I) along the way.

    python docs/reproductions/full/cpu-reduced/batch_sensitivity_cells.py RUNS > cells.md
"""
import glob
import json
import os
import sys

import numpy as np

TRACE_STEPS = (0, 1000, 2000, 3000, 4000, 5000, 6000)


def cells(root):
    for run in sorted(glob.glob(os.path.join(root, "p*"))):
        for path in glob.glob(os.path.join(run, "cache", "*", "*.json")):
            d = json.load(open(path))
            yield os.path.basename(run), d["config"], d["result"]


def trace_text(cfg, r):
    if "trace_dist_BC" not in r:
        return ""
    steps, med = r["trace_step"], np.median(np.asarray(r["trace_dist_BC"]), axis=1)
    pick = dict.fromkeys([i for i, s in enumerate(steps) if s in TRACE_STEPS] + [len(steps) - 1])
    text = "median dist(Σ½BᵀCΣ½, I) at step " + ", ".join(f"{steps[i]}: {med[i]:.3f}" for i in pick)
    if "trace_dist_A" in r and not cfg["hold_A_zero"]:  # A_0 .. A_{L-2} (A_{L-1} never reaches ŷ)
        text += f"; final dist(A_ℓ, I) {np.round(np.asarray(r['trace_dist_A'])[-1][:-1], 3).tolist()}"
        text += f", ‖A_ℓ‖_F {np.round(np.asarray(r['trace_norm_A'])[-1][:-1], 3).tolist()}"
    return text


def main(root):
    print("| run | labels K, h̃, n, A | B | steps taken | converged (loss change ± SE) | test loss ± SE "
          "| Bayes | lr | training wall s (CPU s) | trace |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    rows = sorted(cells(root), key=lambda c: (c[0], c[1]["kernel"], c[1]["hold_A_zero"], c[1]["context"],
                                               c[1]["activations"]))
    for run, cfg, r in rows:
        a = "A = 0" if cfg["hold_A_zero"] else "A free"
        print(f"| {run} | {cfg['kernel']}, {cfg['activations'][0]}, {cfg['context']}, {a} | {cfg['batch']} "
              f"| {r['steps_taken']} | {r['converged']} ({100 * r['train_loss_change']:+.2f}% ± "
              f"{100 * r['train_loss_change_se']:.2f}%) | {r['loss']:.4f} ± {r['loss_se_per_layer'][-1]:.4f} "
              f"| {r['bayes_loss']:.4f} | {r['lr_used']} | {r['train_wall_s']:.0f} ({r['train_cpu_s']:.0f}) "
              f"| {trace_text(cfg, r)} |")


if __name__ == "__main__":
    main(sys.argv[1])
