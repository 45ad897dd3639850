"""max|X_ℓ| (the covariate rows of each layer's input) over 300 prompts of the training law at the
initial parameters of ccs-fig4's composite 1-head exp cell (seed 0) at depth L, for an
initialization scale: the residual stream's growth with depth that the deep exp heads see.

    PYTHONPATH=python python residual_growth.py [L] [SCALE] [A_SCALE]
(defaults 7 0.05 1; A_SCALE multiplies the initial A_ℓ as in overflow_probe.py)."""
import sys

import numpy as np

from lsa_native import kernel_attention as ka
from lsa_native.experiments import ccs_training as ct
from lsa_native.experiments.ccs_prompts import FIG4_KERNELS, ccs_sigma, spec_of

L = int(sys.argv[1]) if len(sys.argv) > 1 else 7
scale = float(sys.argv[2]) if len(sys.argv) > 2 else 0.05
a_scale = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
t = "composite"
cfg = dict(dim=5, kernel=f"fig4-{t}", activations=["exp"], layers=L, context=14, seed=0, hold_A_zero=False,
           kernel_params=[FIG4_KERNELS[t][0], [float(g) for g in FIG4_KERNELS[t][1]],
                          [float(g) for g in FIG4_KERNELS[t][2]]], sampler="native")
Sigma = ccs_sigma(0, 5)
probe = spec_of(cfg, Sigma, 0).sample(batch=300, step=0, dtype=np.float64)
p = ct._initial_params(cfg, scale, Sigma)
p.A[...] *= a_scale
rows = []
for l in range(L):
    if l == 0:
        Z = probe.E
    else:
        Z = ka.forward(probe.E, ka.sparse_value(p.A[:l], p.r[:l]), p.B[:l], p.C[:l], list(p.activations))
    X = np.asarray(Z, dtype=np.float64)[:, :5, :]
    rows.append((l, float(np.abs(X).max()), float(np.linalg.norm(p.A[l]))))
print(f"composite, 1-head exp, L = {L}, init scale {scale}, A scale {a_scale}, seed 0, 300 prompts")
for l, m, a in rows:
    print(f"layer {l}: max|X_l| {m:.3g}   ||A_l||_F {a:.3g}")
