"""Initial-parameter overflow at the papers' batch (issue 19 finding): for the deep CCS cells of
Figures 2 and 4 (A free), how many halvings of the N(0, 0.1²) initialization scale the first
B = 30000 training batch needs before the float32 prediction is finite (0: none; 9: none of 5
scales), seeds 0-2. Output: init_overflow_probe.txt (≈ 3 CPU minutes).

    PYTHONPATH=python python docs/reproductions/full/cpu-reduced/init_overflow_probe.py
"""
import collections

import numpy as np

import lsa_native
from lsa_native.experiments import ccs, ccs_training
from lsa_native.experiments.ccs_prompts import ccs_sigma, spec_of

BATCH = 30000
SCALES = (0.1, 0.05, 0.025, 0.0125, 0.00625)


def halvings_needed(cfg) -> int:
    spec = spec_of(cfg, ccs_sigma(cfg["seed"], 5), 2 * cfg["seed"])  # the training stream's first batch
    E = spec.sample(batch=BATCH, step=0, dtype=np.float32).E
    for k, scale in enumerate(SCALES):
        try:
            if np.all(np.isfinite(ccs_training._initial_params(cfg, scale).predict(E))):
                return k
        except FloatingPointError:
            pass
    return 9


def main():
    lsa_native.set_num_threads(1)
    t = ccs.FIG4_KERNELS["composite"]
    composite = dict(kernel="fig4-composite", context=14,
                     kernel_params=[t[0], list(map(float, t[1])), list(map(float, t[2]))])
    res = collections.defaultdict(list)
    for seed in range(3):
        for L in (4, 5, 6, 7, 8):
            common = dict(dim=5, seed=seed, layers=L, init_scale=0.1, hold_A_zero=False)
            for n in (6, 14):
                for a in ("exp", "softmax"):
                    res[("fig2 exp-labels", a, n, L)].append(
                        halvings_needed(dict(common, kernel="exp", context=n, activations=[a])))
            for acts in (["linear", "exp"], ["exp"]):
                res[("fig4 composite", "+".join(acts), 14, L)].append(
                    halvings_needed(dict(common, activations=acts, **composite)))
    for key, v in res.items():
        print(key, "halvings needed per seed:", v)


if __name__ == "__main__":
    main()
