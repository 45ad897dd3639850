"""Does a smaller Adam rate for A_ℓ alone keep the deep A-free exp models of ccs-fig4 finite, and
what loss do they reach? A candidate for the decision the finding asks for, not a change of the
reproduction: A_ℓ = s·Ã_ℓ with Ã_ℓ trained by the cell's Adam (rate lr, clipping 1.0) — Adam's step
does not depend on the gradient's scale, so A_ℓ moves at s·lr while every other matrix moves at lr
(the clipping norm sees the scaled gradient). Initial A_ℓ as the cell's (Ã_ℓ = A_ℓ/s), times A_SCALE
from the environment (default 1; 0: A starts at 0).

    PYTHONPATH=python python a_rate_probe.py TARGET ACTS L S [BATCH] [STEPS] [LR] [SCALE]
e.g. composite exp 6 0.1 3000 1500 0.02 0.1; prints the training loss every 100 steps, the divergence
step if any, and the final test loss on 10000 prompts of the cell's test stream (± its SE)."""
import os
import sys
import time

import numpy as np

import lsa_native
from lsa_native import train
from lsa_native.experiments import ccs_training as ct
from lsa_native.experiments.ccs_prompts import FIG4_KERNELS, ccs_sigma, spec_of

lsa_native.set_num_threads(1)
t, acts, L, s = sys.argv[1], sys.argv[2].split("+"), int(sys.argv[3]), float(sys.argv[4])
batch = int(sys.argv[5]) if len(sys.argv) > 5 else 3000
steps = int(sys.argv[6]) if len(sys.argv) > 6 else 1500
lr = float(sys.argv[7]) if len(sys.argv) > 7 else 0.02
scale = float(sys.argv[8]) if len(sys.argv) > 8 else 0.1
cfg = dict(dim=5, kernel=f"fig4-{t}", activations=acts, layers=L, context=14, seed=0, hold_A_zero=False,
           kernel_params=[FIG4_KERNELS[t][0], [float(g) for g in FIG4_KERNELS[t][1]],
                          [float(g) for g in FIG4_KERNELS[t][2]]], sampler="native")
Sigma = ccs_sigma(0, 5)
p0 = ct._initial_params(cfg, scale, Sigma)
p0.A[...] *= float(os.environ.get("A_SCALE", "1"))
objective = train.KernelAttentionObjective(p0, dtype=np.float32)
step_fn = objective.bind(train.Prompts(spec_of(cfg, Sigma, 0), batch=batch, resample_every=10, dtype=np.float32))
theta0 = objective.theta0
is_A = np.zeros(theta0.size, bool)
is_A[np.asarray(objective.unpack(np.arange(theta0.size, dtype=np.float64)).A, dtype=np.int64).ravel()] = True
D = np.where(is_A, s, 1.0)


def scaled(theta_tilde, k):
    loss, grad = step_fn(D * theta_tilde, k)
    return loss, D * grad


def cb(info):
    if info.step % 100 == 0:
        print(f"{info.step:5d} loss {info.loss:.4g} |g| {info.grad_norm:.3g}", flush=True)


t0 = time.perf_counter()
opt = train.Adam(lr=lr, clip_norm=1.0, schedule=ct.schedule(lr, lr * 0.05, 3000))
try:
    res = train.fit(scaled, opt, steps=steps, theta0=theta0 / D, record_every=steps, callbacks=[cb], progress=False)
    params = objective.unpack(D * res.theta)
    test = spec_of(cfg, Sigma, 1).sample(batch=10000, step=0, dtype=np.float64)
    err = (params.predict(test.E) - test.y_q) ** 2
    print(f"END finite after {steps} steps: test loss {err.mean():.4f} ± {err.std(ddof=1) / np.sqrt(err.size):.4f}"
          f" ({time.perf_counter() - t0:.0f} s)")
except train.TrainingDiverged as e:
    print(f"END diverged: {str(e)[:120]} ({time.perf_counter() - t0:.0f} s)")
