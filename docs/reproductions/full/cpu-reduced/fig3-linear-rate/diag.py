"""CPU diagnostic (options by environment: LR_FINAL, INIT_SCALE): one ccs-fig3-5-6 cell at a reduced batch, Gaussian vs aligned (Thm 4.5/4.6 family) start;
prints the trained M = Σ½BᵀCΣ½ (eigenvalues of its symmetric part / trace-normalised, antisymmetric norm) and the loss."""
import json, sys, time
import numpy as np
from lsa_native.experiments import ccs_training as ct
from lsa_native.experiments.ccs_prompts import ccs_sigma, spec_of
from lsa_native.data import inverse_sqrtm

kernel, act, hold, init, steps, batch, seed = sys.argv[1], sys.argv[2], sys.argv[3] == "zero", sys.argv[4], int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])
import os
cfg = dict(dim=5, lr=0.02, lr_final=float(os.environ.get("LR_FINAL", 0.001)), clip=1.0, init_scale=float(os.environ.get("INIT_SCALE", 0.1)), retries=2, converge_tol=0.0, steps=steps,
           decay_steps=min(3000, steps), batch=batch, eval_batch=3000, trace_every=100, kernel=kernel,
           activations=[act], layers=3, context=30, seed=seed, hold_A_zero=hold)
if init == "aligned":
    cfg.update(init="aligned", init_perturbation=0.1)
Sigma = ccs_sigma(seed, 5)
spec = spec_of(cfg, Sigma, 2 * seed)
t = time.perf_counter()
res, mon, info = ct._train_with_retries(cfg, spec, Sigma)
wall = time.perf_counter() - t
tr = ct._trace(res.history)
ev = ct._evaluate(cfg, spec_of(cfg, Sigma, 2 * seed + 1), res.params)
P = res.params
S_half = np.linalg.inv(inverse_sqrtm(Sigma, "Sigma", 5))
out = dict(cfg=cfg, r=np.asarray(P.r).ravel().tolist(), wall=wall, loss=ev["loss"], bayes=ev["bayes_loss"], steps=tr["trace_step"],
           dist_BC=tr["trace_dist_BC"], dist_A=tr.get("trace_dist_A"), info=info, mats=[])
for l in range(3):
    B, C = np.asarray(P.B[l]).reshape(5, 5), np.asarray(P.C[l]).reshape(5, 5)
    M = S_half @ B.T @ C @ S_half
    sym, anti = (M + M.T) / 2, (M - M.T) / 2
    ev_ = np.linalg.eigvalsh(sym)
    out["mats"].append(dict(layer=l, trace_over_d=float(np.trace(M) / 5), sym_eigs_over_mean=(ev_ / ev_.mean()).tolist(),
                            anti_rel=float(np.linalg.norm(anti) / np.linalg.norm(M))))
    if not hold:
        A = np.asarray(P.A[l]).reshape(5, 5)
        ea = np.linalg.eigvals(A)
        out["mats"][-1]["A_eigs"] = sorted([complex(x).real for x in ea])
print(json.dumps({k: v for k, v in out.items() if k not in ("dist_BC", "dist_A", "steps")}, indent=0))
print("trace:", [(s, [round(x, 3) for x in d]) for s, d in list(zip(out["steps"], out["dist_BC"]))[::5]])
scale_tag = "" if cfg["init_scale"] == 0.1 else f"init{cfg['init_scale']:g}_"  # INIT_SCALE: the Gaussian start N(0, s²) (default 0.1, ours: CCS H.1 gives no scale)
json.dump(out, open(f"out/diag/lr{cfg['lr_final']:g}_{scale_tag}{kernel}_{act}_{sys.argv[3]}_{init}_{steps}_{batch}_{seed}.json", "w"))
