"""From the best point of the Thm 4.5 family (h̃^linear, A = 0, seed 0: B_ℓ = C_ℓ = Σ^{-1/2}, r_ℓ = γ*:
from family.py's output for K^exp, or fitted here on 10000 prompts for another kernel), train 2000
steps at B = 3000 with (a) Adam at the final rate 1e-3, (b) Adam at 1e-4, (c) plain SGD: does training
stay on the family (a minimum) or leave it (and is the loss lower there: end − start paired over the
20000 test prompts, with its SE)?
    python family_stay.py SGD_RATE [KERNEL]"""
import json, sys
import numpy as np
from lsa_native import kernel_attention as ka, train
from lsa_native.experiments import ccs_training as ct
from lsa_native.experiments.ccs_prompts import ccs_sigma, spec_of
from lsa_native.data import inverse_sqrtm

seed = 0
kernel = sys.argv[2] if len(sys.argv) > 2 else "exp"
fam = json.load(open("out/diag/family_exp_linear_0_6000_3000.json"))
cfg = dict(fam["cfg"], kernel=kernel)
Sigma = ccs_sigma(seed, 5)
spec = spec_of(cfg, Sigma, 2 * seed)
R = inverse_sqrtm(Sigma, "Sigma", 5)
test = spec_of(cfg, Sigma, 2 * seed + 1).sample(batch=20000, step=0, dtype=np.float64)

def start(g=None):
    B = np.broadcast_to(R, (3, 1, 5, 5)).copy()
    return ka.KernelAttentionParams(B=B, C=B.copy(), activations=["linear"], A=np.zeros((3, 1, 5, 5)),
                                    r=np.asarray(fam["family_r"] if g is None else g, float).reshape(3, 1))


if kernel != "exp":  # the family's best r_ℓ for this kernel's labels (family.py's search, without the training)
    from scipy.optimize import minimize
    fit = spec_of(cfg, Sigma, 2 * seed + 2).sample(batch=10000, step=0, dtype=np.float64)
    best = min((minimize(lambda g: 2 * start(g).loss(fit.E, fit.y_q), np.asarray(g0, float), method="Nelder-Mead",
                         options=dict(xatol=1e-6, fatol=1e-7, maxiter=4000))
                for g0 in ([0.1] * 3, [-0.1] * 3, [-0.1, 0.1, -0.1])), key=lambda r: r.fun)
    fam = {"family_r": best.x.tolist()}

out = {"kernel": kernel, "family_r": list(fam["family_r"]), "family_test_loss": 2 * start().loss(test.E, test.y_q)}
sq0 = (start().predict(test.E) - test.y_q) ** 2  # per-prompt squared error at the start, for paired SEs
for name, opt in (("adam1e-3", train.Adam(lr=1e-3, clip_norm=1.0)), ("adam1e-4", train.Adam(lr=1e-4, clip_norm=1.0)),
                  ("sgd1e-2", train.SGD(lr=float(sys.argv[1]) if len(sys.argv) > 1 else 0.01, clip_norm=1.0))):
    obj = train.KernelAttentionObjective(start(), hold_A_zero=True, device="cpu")
    res = train.fit(obj, opt, steps=2000, data=train.Prompts(spec, batch=3000, resample_every=10), record_every=100,
                    metrics={"dist": lambda p: ct._trace_metrics(p, Sigma)}, progress=False)
    tr = ct._trace(res.history)
    out[name] = dict(dist=[[round(v, 3) for v in d] for d in tr["trace_dist_BC"][::4]], steps=tr["trace_step"][::4],
                     test_loss=2 * res.params.loss(test.E, test.y_q))
    d = (res.params.predict(test.E) - test.y_q) ** 2 - sq0  # end − start, paired over the same test prompts
    out[name].update(paired_diff=float(d.mean()), paired_se=float(d.std(ddof=1) / np.sqrt(d.size)))
    print(name, out[name], flush=True)
print(json.dumps(out))
json.dump(out, open(f"out/diag/family_stay_{kernel}.json", "w"))
