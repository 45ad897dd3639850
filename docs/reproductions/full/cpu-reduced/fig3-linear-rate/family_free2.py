"""Follow-up to family_free.py (A-free (K^exp, linear), seed 0, B = 3000): is the trained model at
lr_final 1e-4 (loss level with the Thm 4.6 family's best, dist 0.13–0.37) on a flat floor around the
family or at another configuration?
 1. retrain it (the same cell as family_free.py's, so the same parameters); M_ℓ = Σ½B_ℓᵀC_ℓΣ½'s symmetric
    part's eigenvalues over their mean, its antisymmetric share, A_ℓ's eigenvalues;
 2. the isotropized model: A_0, A_1 replaced by (tr A_ℓ / d)·I, everything else kept: test loss − trained's;
 3. 6000 more steps of Adam at 1e-4 (constant) from it: dist traces, end − start and end − family;
 4. 2000 steps of SGD 1e-3 (clip 1) from the family's best point and from the trained point: does SGD
    at a rate that is not too hot for A stay on the family, and does it carry the trained point to it?
All test losses on family_free.py's 20000 test prompts, paired, with SE and z.
    python family_free2.py"""
import json, time
import numpy as np
from lsa_native import kernel_attention as ka, train
from lsa_native.experiments import ccs_training as ct
from lsa_native.experiments.ccs_prompts import ccs_sigma, spec_of
from lsa_native.data import inverse_sqrtm

t0 = time.perf_counter()
prev = json.load(open("out/diag/family_free_exp_linear_0_6000.json"))
cfg = dict(prev["cfg"], lr_final=1e-4)
seed = cfg["seed"]
Sigma = ccs_sigma(seed, 5)
spec = spec_of(cfg, Sigma, 2 * seed)
test = spec_of(cfg, Sigma, 2 * seed + 1).sample(batch=20000, step=0, dtype=np.float64)
R = inverse_sqrtm(Sigma, "Sigma", 5)
S_half = np.linalg.inv(R)
sqerr = lambda P: (P.predict(test.E) - test.y_q) ** 2
paired = lambda d: dict(diff=float(d.mean()), se=float(d.std(ddof=1) / np.sqrt(d.size)),
                        z=float(d.mean() / (d.std(ddof=1) / np.sqrt(d.size))))
dist = lambda P: {k: np.asarray(v).ravel().round(4).tolist() for k, v in train.kernel_attention_identity_distances(P, Sigma).items()}


def family(g):  # family_free.py's: g = (a_0, a_1, r_0, r_1, r_2), B_ℓ = C_ℓ = Σ^{-1/2}, A_2 = a_1 I
    B = np.broadcast_to(R, (3, 1, 5, 5)).copy()
    A = np.stack([ai * np.eye(5) for ai in (g[0], g[1], g[1])])[:, None]
    return ka.KernelAttentionParams(B=B, C=B.copy(), activations=["linear"], A=A, r=np.asarray(g[2:], float).reshape(3, 1))


def spectra(P):
    out = []
    for l in range(3):
        M = S_half @ np.asarray(P.B[l, 0]).T @ np.asarray(P.C[l, 0]) @ S_half
        e = np.linalg.eigvalsh((M + M.T) / 2)
        out.append(dict(layer=l, M_sym_eigs_over_mean=(e / e.mean()).round(3).tolist(),
                        M_anti_rel=round(float(np.linalg.norm((M - M.T) / 2) / np.linalg.norm(M)), 3),
                        A_eigs=sorted(np.linalg.eigvals(np.asarray(P.A[l, 0])).real.round(3).tolist())))
    return out


def run(P, opt, steps):
    res = train.fit(train.KernelAttentionObjective(P, hold_A_zero=False, device="cpu"), opt, steps=steps,
                    data=train.Prompts(spec, batch=3000, resample_every=10), record_every=100,
                    metrics={"dist": lambda p: ct._trace_metrics(p, Sigma)}, progress=False)
    tr = ct._trace(res.history)
    k = max(1, len(tr["trace_step"]) // 5)
    return res.params, dict(steps=tr["trace_step"][::k], dist_BC=[[round(v, 3) for v in d] for d in tr["trace_dist_BC"][::k]],
                            dist_A=[[round(v, 3) for v in d[:2]] for d in tr["trace_dist_A"][::k]])


F = family(prev["family_g"])
sqF = sqerr(F)
res, _, _ = ct._train_with_retries(cfg, spec, Sigma)
P = res.params
sqP = sqerr(P)
out = dict(cfg=cfg, n_test=20000, trained=dict(final=dist(P), spectra=spectra(P), test_loss=float(sqP.mean()),
                                               trained_minus_family=paired(sqP - sqF)))
print("trained", out["trained"], flush=True)
A_iso = np.asarray(P.A, dtype=np.float64).copy()
for l in range(2):
    A_iso[l, 0] = np.trace(A_iso[l, 0]) / 5 * np.eye(5)
iso = ka.KernelAttentionParams(B=np.asarray(P.B).copy(), C=np.asarray(P.C).copy(), activations=["linear"], A=A_iso,
                               r=np.asarray(P.r).copy())
out["A_isotropized"] = dict(final=dist(iso), minus_trained=paired(sqerr(iso) - sqP))
print("iso", out["A_isotropized"], flush=True)
Q, tr = run(P, train.Adam(lr=1e-4, clip_norm=1.0), 6000)
out["adam1e-4_6000_more"] = dict(tr, final=dist(Q), spectra=spectra(Q), end_minus_start=paired(sqerr(Q) - sqP),
                                 end_minus_family=paired(sqerr(Q) - sqF))
print("more", out["adam1e-4_6000_more"], flush=True)
for name, start, sq0 in (("sgd1e-3_from_family", F, sqF), ("sgd1e-3_from_trained", P, sqP)):
    Q, tr = run(start, train.SGD(lr=1e-3, clip_norm=1.0), 2000)
    out[name] = dict(tr, final=dist(Q), end_minus_start=paired(sqerr(Q) - sq0), end_minus_family=paired(sqerr(Q) - sqF))
    print(name, out[name], flush=True)
out["wall"] = time.perf_counter() - t0
json.dump(out, open("out/diag/family_free2_exp_linear_0.json", "w"), indent=1)
print("wall", out["wall"])
