"""The native optimizer-step kernel under compute-sanitizer (memcheck, racecheck): every rule,
clipping, float32/float64 gradients, sizes below and above the 256-lane block, a NaN gradient
(the status record), and a short fit with θ on the device."""
from __future__ import annotations

import numpy as np

from lsa_native import cuda, sampling, train
from lsa_native.train import native_optim

rng = np.random.default_rng(0)
for opt in (train.SGD(lr=0.1, momentum=0.9, nesterov=True), train.Adam(lr=0.01, clip_norm=0.5),
            train.AdamW(lr=0.01, amsgrad=True)):
    for n in (1, 300):
        for dt in (np.float32, np.float64):
            native = native_optim.NativeOptimizer(opt, rng.standard_normal(n), native_optim.CUDA,
                                                  grad_dtype=dt, model=True)
            for k in range(3):
                g = rng.standard_normal(n)
                if k == 2:
                    g[n // 2] = np.nan
                native_optim.CUDA.write(native.grad, g)
                native.step(k)
            print(type(opt).__name__, n, np.dtype(dt).name, native.status())
spec = sampling.LinearPrompts(3, 9, seed=0)
W = 0.2 * rng.standard_normal((2, 4, 4))
res = train.fit(train.LSAObjective(W[0], W[1], device="cuda"), train.Adam(lr=0.01),
                data=train.Prompts(spec, batch=256), steps=10, record_every=5, progress=False)
cuda.synchronize()
print("fit on the device:", res.history["loss"])
