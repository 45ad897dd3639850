"""Why do the deep ccs-fig4 cells diverge after tens of steps at B = 30000? Replays one cell's last
try (the rates halved twice, the initialization scale halved once: what the cache reports) with a
callback that records, per step, the training loss, ‖A_ℓ‖_F, |r_ℓ| and — every few steps, on 300
prompts of the training law in float64 — the largest |logit| (B_ℓx_i)·(C_ℓx_j) of every layer's
exp head, against float32's overflow threshold log(FLT_MAX) ≈ 88.7.

    PYTHONPATH=python python overflow_probe.py TARGET ACTS LAYERS [BATCH] [LR] [SCALE] [DTYPE] [STEPS]
e.g. composite exp 6 30000 0.005 0.05 (the cached cell: diverged at step 88); DTYPE float64 trains
in float64 (the cells train in float32), STEPS (default 200) the steps replayed; TARGET fig2-exp (or
fig2-relu, fig2-linear) trains on ccs-fig2's K-GP labels instead, at context N (argument 9, default 14).
HOLD_A_ZERO=1 in the environment holds A_ℓ = 0 (a diagnostic: CCS trains Fig. 4 with A free); A_SCALE=s
multiplies the initial A_ℓ by s (A_SCALE=0: A starts at 0 and is trained)."""
import os
import sys

import numpy as np

import lsa_native
from lsa_native import kernel_attention as ka, train
from lsa_native.experiments import ccs_training as ct
from lsa_native.experiments.ccs_prompts import FIG4_KERNELS, ccs_sigma, spec_of

lsa_native.set_num_threads(1)
t, acts, L = sys.argv[1], sys.argv[2].split("+"), int(sys.argv[3])
batch = int(sys.argv[4]) if len(sys.argv) > 4 else 30000
lr = float(sys.argv[5]) if len(sys.argv) > 5 else 0.005
scale = float(sys.argv[6]) if len(sys.argv) > 6 else 0.05
dtype = np.dtype(sys.argv[7]) if len(sys.argv) > 7 else np.float32
steps = int(sys.argv[8]) if len(sys.argv) > 8 else 200
hold = os.environ.get("HOLD_A_ZERO") == "1"
cfg = dict(dim=5, steps=6000, batch=batch, lr=0.02, lr_final=0.001, clip=1.0, init_scale=0.1, decay_steps=3000,
           hold_A_zero=False, kernel=f"fig4-{t}", activations=acts, layers=L, context=14, seed=0,
           kernel_params=[FIG4_KERNELS[t][0], [float(g) for g in FIG4_KERNELS[t][1]],
                          [float(g) for g in FIG4_KERNELS[t][2]]] if t in FIG4_KERNELS else None, sampler="native")
if t.startswith("fig2-"):  # ccs-fig2's cell: K-GP labels, no composite kernel
    cfg.update(kernel=t[5:], context=int(sys.argv[9]) if len(sys.argv) > 9 else 14)
    del cfg["kernel_params"], cfg["sampler"]
Sigma = ccs_sigma(0, 5)
spec = spec_of(cfg, Sigma, 0)
probe = spec.sample(batch=300, step=0, dtype=np.float64)
p0 = ct._initial_params(dict(cfg, hold_A_zero=hold), scale, Sigma)
p0.A[...] *= float(os.environ.get("A_SCALE", "1"))
objective = train.KernelAttentionObjective(p0, hold_A_zero=hold, dtype=dtype)
lr_final = 0.001 * lr / 0.02
opt = train.Adam(lr=lr, clip_norm=1.0, schedule=ct.schedule(lr, lr_final, 3000))
exp_heads = [h for h, a in enumerate(acts) if a == "exp"]


def max_logits(p):
    """max_{i,j} |(B_ℓ x_i)·(C_ℓ x_j)| over the probe prompts, per layer ℓ, for the exp head(s)."""
    out = []
    for l in range(L):
        if l == 0:
            Z = probe.E
        else:
            sub = ka.KernelAttentionParams(B=p.B[:l], C=p.C[:l], activations=list(p.activations), A=p.A[:l], r=p.r[:l])
            Z = ka.forward(probe.E, ka.sparse_value(sub.A, sub.r), sub.B, sub.C, list(p.activations))
        X = np.asarray(Z, dtype=np.float64)[:, :5, :]  # [batch, d, n+1]
        m = 0.0
        for h in exp_heads:
            BX = np.einsum("ab,pbn->pan", p.B[l, h], X)
            CX = np.einsum("ab,pbn->pan", p.C[l, h], X)
            m = max(m, float(np.abs(np.einsum("pan,pam->pnm", BX, CX)).max()))
        out.append(m)
    return out


def cb(info):
    p = objective.unpack(info.theta)
    s = info.step
    row = f"{s:4d} loss {info.loss:.4g} |g| {info.grad_norm:.3g} lr {info.lr:.3g} |A_l| " + " ".join(
        f"{np.linalg.norm(p.A[l]):.2f}" for l in range(L)) + " |r_l| " + " ".join(f"{np.abs(p.r[l]).max():.2f}" for l in range(L))
    if exp_heads and (s % 5 == 0 or 70 < s < 100):
        row += " maxlogit " + " ".join(f"{v:.1f}" for v in max_logits(p))
    print(row, flush=True)
    return False


try:
    train.fit(objective, opt, steps=steps, data=train.Prompts(spec, batch=batch, resample_every=10, dtype=dtype),
              record_every=steps, callbacks=[cb], progress=False)
except (train.TrainingDiverged, FloatingPointError) as e:
    print("DIVERGED:", str(e)[:300])
