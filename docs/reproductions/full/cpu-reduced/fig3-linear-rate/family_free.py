"""A free, h̃^linear: is A-free (K, linear)'s stall Adam's floor (as for A = 0, family.py /
family_stay.py) or another attractor?  Theorem 4.6 (F.1) family: A_ℓ = a_ℓ I, B_ℓ = b_ℓ Σ^{-1/2},
C_ℓ = c_ℓ Σ^{-1/2}; for a linear h̃ the layer's update is V_ℓ Z M (B_ℓX)ᵀ(C_ℓX), so b_ℓc_ℓ only rescales
(a_ℓ, r_ℓ): the family is B_ℓ = C_ℓ = Σ^{-1/2} with the scalars (a_ℓ, r_ℓ) (A_2 does not reach the
prediction: a_2 is set to a_1, its gradient is 0). Steps, seed 0 (B = 3000, n = 30, L = 3):
 1. train from the Gaussian start (CCS schedule 0.02 → lr_final over 3000 steps, STEPS steps, loss
    rule off), lr_final 1e-3 and 1e-4;
 2. minimise the loss over the family (Nelder–Mead on 10000 prompts of another seed, several starts);
 3. test losses on 20000 held-out prompts, paired: family − trained(1e-3), family − trained(1e-4),
    trained(1e-4) − trained(1e-3), each with its SE;
 4. from the family's best point, 2000 steps of Adam 1e-3, Adam 1e-4, SGD 0.01 (clip 1, A free):
    dist traces, end − start test loss paired over the same 20000 prompts (family_stay.py's design).
    python family_free.py KERNEL SEED STEPS"""
import json, sys, time
import numpy as np
from scipy.optimize import minimize
from lsa_native import kernel_attention as ka, train
from lsa_native.experiments import ccs_training as ct
from lsa_native.experiments.ccs_prompts import ccs_sigma, spec_of
from lsa_native.data import inverse_sqrtm

kernel, seed, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t0 = time.perf_counter()
cfg = dict(dim=5, lr=0.02, lr_final=0.001, clip=1.0, init_scale=0.1, retries=2, converge_tol=0.0, steps=steps,
           decay_steps=min(3000, steps), batch=3000, eval_batch=3000, trace_every=100, kernel=kernel,
           activations=["linear"], layers=3, context=30, seed=seed, hold_A_zero=False)
Sigma = ccs_sigma(seed, 5)
spec = spec_of(cfg, Sigma, 2 * seed)
test = spec_of(cfg, Sigma, 2 * seed + 1).sample(batch=20000, step=0, dtype=np.float64)
fit = spec_of(cfg, Sigma, 2 * seed + 2).sample(batch=10000, step=0, dtype=np.float64)
R = inverse_sqrtm(Sigma, "Sigma", 5)
S_half = np.linalg.inv(R)
sqerr = lambda P: (P.predict(test.E) - test.y_q) ** 2
paired = lambda d: dict(diff=float(d.mean()), se=float(d.std(ddof=1) / np.sqrt(d.size)),
                        z=float(d.mean() / (d.std(ddof=1) / np.sqrt(d.size))))
dist = lambda P: {k: np.asarray(v).ravel().round(4).tolist() for k, v in train.kernel_attention_identity_distances(P, Sigma).items()}

out = dict(cfg=cfg, n_test=20000, n_fit=10000, trained={})
trained = {}
for lr_final in (1e-3, 1e-4):
    t = time.perf_counter()
    res, _, _ = ct._train_with_retries(dict(cfg, lr_final=lr_final), spec, Sigma)
    P = trained[lr_final] = res.params
    tr = ct._trace(res.history)
    out["trained"][f"{lr_final:g}"] = dict(wall=time.perf_counter() - t, test_loss=float(sqerr(P).mean()), final=dist(P),
                                           trace_step=tr["trace_step"][::10],
                                           trace_dist_BC=[[round(v, 3) for v in d] for d in tr["trace_dist_BC"][::10]],
                                           trace_dist_A=[[round(v, 3) for v in d] for d in tr["trace_dist_A"][::10]],
                                           A_eigs=[sorted(np.linalg.eigvals(np.asarray(P.A[l, 0])).real.round(3).tolist()) for l in range(3)])
    print(lr_final, out["trained"][f"{lr_final:g}"]["final"], out["trained"][f"{lr_final:g}"]["test_loss"], flush=True)


def family(g):  # g = (a_0, a_1, r_0, r_1, r_2)
    B = np.broadcast_to(R, (3, 1, 5, 5)).copy()
    a = [g[0], g[1], g[1]]
    A = np.stack([ai * np.eye(5) for ai in a])[:, None]
    return ka.KernelAttentionParams(B=B, C=B.copy(), activations=["linear"], A=A, r=np.asarray(g[2:], float).reshape(3, 1))


f = lambda g: 2 * family(g).loss(fit.E, fit.y_q)
P = trained[1e-3]
m = [np.trace(S_half @ np.asarray(P.B[l, 0]).T @ np.asarray(P.C[l, 0]) @ S_half) / 5 for l in range(3)]  # M_ℓ ≈ m_ℓ I
g_trained = [np.trace(np.asarray(P.A[l, 0])) / 5 * m[l] for l in range(2)] + [float(P.r[l, 0]) * m[l] for l in range(3)]
starts = [g_trained, [0.0, 0.0, -0.075, -0.075, -0.075], [-0.01, -0.01, -0.075, -0.075, -0.075], [0.005, 0.005, -0.05, -0.05, -0.05]]
fits = []
for g0 in starts:
    r = minimize(f, np.asarray(g0, float), method="Nelder-Mead", options=dict(xatol=1e-6, fatol=1e-8, maxiter=6000, maxfev=6000))
    fits.append(dict(start=[float(x) for x in g0], x=r.x.tolist(), fit_loss=float(r.fun), nfev=int(r.nfev)))
    print("fit", fits[-1], flush=True)
best = min(fits, key=lambda r: r["fit_loss"])
F = family(best["x"])
out.update({"family_fits": fits, "family_g": best["x"], "family_test_loss": float(sqerr(F).mean()),
            "family_minus_trained_1e-3": paired(sqerr(F) - sqerr(trained[1e-3])),
            "family_minus_trained_1e-4": paired(sqerr(F) - sqerr(trained[1e-4])),
            "trained_1e-4_minus_1e-3": paired(sqerr(trained[1e-4]) - sqerr(trained[1e-3]))})
print({k: out[k] for k in ("family_g", "family_test_loss", "family_minus_trained_1e-3", "family_minus_trained_1e-4",
                           "trained_1e-4_minus_1e-3")}, flush=True)

sq0 = sqerr(F)
out["stay"] = {}
for name, opt in (("adam1e-3", train.Adam(lr=1e-3, clip_norm=1.0)), ("adam1e-4", train.Adam(lr=1e-4, clip_norm=1.0)),
                  ("sgd1e-2", train.SGD(lr=0.01, clip_norm=1.0))):
    obj = train.KernelAttentionObjective(family(best["x"]), hold_A_zero=False, device="cpu")
    res = train.fit(obj, opt, steps=2000, data=train.Prompts(spec, batch=3000, resample_every=10), record_every=100,
                    metrics={"dist": lambda p: ct._trace_metrics(p, Sigma)}, progress=False)
    tr = ct._trace(res.history)
    out["stay"][name] = dict(steps=tr["trace_step"][::4], dist_BC=[[round(v, 3) for v in d] for d in tr["trace_dist_BC"][::4]],
                             dist_A=[[round(v, 3) for v in d] for d in tr["trace_dist_A"][::4]],
                             test_loss=float(sqerr(res.params).mean()), end_minus_start=paired(sqerr(res.params) - sq0))
    print(name, out["stay"][name], flush=True)
out["wall"] = time.perf_counter() - t0
json.dump(out, open(f"out/diag/family_free_{kernel}_linear_{seed}_{steps}.json", "w"), indent=1)
print("wall", out["wall"])
