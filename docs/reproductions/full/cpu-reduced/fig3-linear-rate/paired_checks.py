"""Two checks the finding lacked (K^exp labels, h̃^linear, A = 0, seed 0, B = 3000, Gaussian start, the
CCS schedule 0.02 → lr_final over 3000 steps, 6000 steps; diag.py's cells):
(1) lr_final 1e-3 against 1e-4: the two trained models' test losses paired over the same 3000 test
    prompts (ccs_training._evaluate's), with the SE of the difference;
(2) the power control for family_stay.py: plain SGD (rate 0.01, clip 1) for 2000 steps from the
    Adam-trained (lr_final 1e-3) point — does SGD stay there too (then "SGD stays on the family" says
    little about the family)? dist trace and test loss end − start paired over 20000 test prompts.
    python paired_checks.py"""
import json
import numpy as np
from lsa_native import train
from lsa_native.experiments import ccs_training as ct
from lsa_native.experiments.ccs_prompts import ccs_sigma, spec_of

seed = 0
cfg = dict(dim=5, lr=0.02, lr_final=0.001, clip=1.0, init_scale=0.1, retries=2, converge_tol=0.0, steps=6000,
           decay_steps=3000, batch=3000, eval_batch=3000, trace_every=100, kernel="exp",
           activations=["linear"], layers=3, context=30, seed=seed, hold_A_zero=True)
Sigma = ccs_sigma(seed, 5)
spec = spec_of(cfg, Sigma, 2 * seed)
test3k = spec_of(cfg, Sigma, 2 * seed + 1).sample(batch=3000, step=0, dtype=np.float64)
test20k = spec_of(cfg, Sigma, 2 * seed + 1).sample(batch=20000, step=0, dtype=np.float64)
sqerr = lambda P, t: (P.predict(t.E) - t.y_q) ** 2
paired = lambda d: dict(diff=float(d.mean()), se=float(d.std(ddof=1) / np.sqrt(d.size)))

out, trained = {}, {}
for lr_final in (1e-3, 1e-4):
    res, _, _ = ct._train_with_retries(dict(cfg, lr_final=lr_final), spec, Sigma)
    trained[lr_final] = res.params
    out[f"lr{lr_final:g}"] = dict(test_loss_3000=float(sqerr(res.params, test3k).mean()),
                                  final_dist=ct._trace(res.history)["trace_dist_BC"][-1])
    print(lr_final, out[f"lr{lr_final:g}"], flush=True)
out["lr1e-4_minus_lr1e-3_3000"] = paired(sqerr(trained[1e-4], test3k) - sqerr(trained[1e-3], test3k))
out["lr1e-4_minus_lr1e-3_20000"] = paired(sqerr(trained[1e-4], test20k) - sqerr(trained[1e-3], test20k))
print(out, flush=True)

P0 = trained[1e-3]
sq0 = sqerr(P0, test20k)
obj = train.KernelAttentionObjective(P0, hold_A_zero=True, device="cpu")
res = train.fit(obj, train.SGD(lr=0.01, clip_norm=1.0), steps=2000, data=train.Prompts(spec, batch=3000, resample_every=10),
                record_every=100, metrics={"dist": lambda p: ct._trace_metrics(p, Sigma)}, progress=False)
tr = ct._trace(res.history)
out["sgd_from_adam_point"] = dict(start_test_loss=float(sq0.mean()), end_test_loss=float(sqerr(res.params, test20k).mean()),
                                  end_minus_start=paired(sqerr(res.params, test20k) - sq0), steps=tr["trace_step"][::4],
                                  dist=[[round(v, 4) for v in d] for d in tr["trace_dist_BC"][::4]])
print(json.dumps(out, indent=1))
json.dump(out, open("out/diag/paired_checks.json", "w"))
