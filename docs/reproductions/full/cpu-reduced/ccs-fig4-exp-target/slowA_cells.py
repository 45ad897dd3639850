"""ccs-fig4's deep cells with A_ℓ from 0 at 0.01 × the rate (A_init 0, A_rate 0.01), B = 3000, seed 0:
the cells the experiment itself makes (ccs._base), run one at a time, most informative first, into
a cache folder that `lsa-native reproduce ccs-fig4 --full --out RUN ...` with the same sizes reads.

    python slowA_cells.py RUN/cache/ccs-fig4 exp         # K^exp target (4(b)): 1-head exp, 2-head; L = 8, 7
    python slowA_cells.py RUN/cache/ccs-fig4 composite   # K♦ (4(c)): 1-head exp, 2-head; L = 8
"""
import sys
import time

import lsa_native as ln
from lsa_native.experiments import ccs
from lsa_native.experiments.ccs_training import train_cell
from lsa_native.experiments.sweep import run_cells

cache, t = sys.argv[1], sys.argv[2]
ln.set_num_threads(1)
p = dict(dim=5, lr=0.02, lr_final=0.001, clip=1.0, init_scale=0.1, retries=2, converge_tol=0.01,
         A_init=0.0, A_rate=0.01, steps=20000, decay_steps=3000, batch=3000, eval_batch=10000, context=14)
order = ([(["exp"], 8), (["exp"], 7), (["linear", "exp"], 8), (["linear", "exp"], 7)] if t == "exp"
         else [(["exp"], 8), (["linear", "exp"], 8)])
for acts, L in order:
    cell = ccs._base(p, kernel=f"fig4-{t}", activations=acts, layers=L, context=p["context"], seed=0,
                     kernel_params=[ccs.FIG4_KERNELS[t][0], [float(g) for g in ccs.FIG4_KERNELS[t][1]],
                                    [float(g) for g in ccs.FIG4_KERNELS[t][2]]], sampler="native")
    t0 = time.time()
    r = run_cells(train_cell, [cell], cache, workers=0)[0]
    print(acts, L, "loss", r.get("loss"), "diverged", r.get("diverged"), "lr", r.get("lr_used"),
          "steps", r.get("steps_taken"), "converged", r.get("converged"), "bayes", r.get("bayes_loss"),
          f"{time.time() - t0:.0f}s", flush=True)
