"""The device-loop paths of issue 18 under compute-sanitizer (memcheck): loss= and out= outputs of
lsa / kernel-attention loss_and_grad and of the fused step on device arrays (pieces of one flat
buffer, as fit uses them), the optimizer step reading the loss slot and the rate factors of a
sparse V, and short device fits (LSA fused float32/float64, kernel attention sparse with A held at
0 and with A trained at a tenth of the rate, with held-out evaluation and a non-finite loss)."""
from __future__ import annotations

import numpy as np

from lsa_native import cuda, kernel_attention as ka, lsa, sampling, train
from lsa_native.train import native_optim

rng = np.random.default_rng(0)
A = native_optim.CUDA
for dt in (np.float32, np.float64):
    E = A.array(rng.standard_normal((37, 4, 9)), dt)
    y = A.array(rng.standard_normal(37), dt)
    flat = A.array(0.2 * rng.standard_normal(32), dt)
    grads, loss = A.array(np.zeros(32), dt), A.array(np.zeros(1))
    W = (A.piece(flat, 0, (4, 4)), A.piece(flat, 16, (4, 4)))
    out = (A.piece(grads, 0, (4, 4)), A.piece(grads, 16, (4, 4)))
    lsa.loss_and_grad(E, y, *W, out=out, loss=loss)
    step = sampling.LinearPrompts(3, 9, seed=1).fused_step(batch=300, dtype=dt, device="cuda")
    for method in ("tokens",):
        step(*W, 0, *out, loss=loss)
    print(np.dtype(dt).name, "lsa/fused loss:", A.to_host(loss))
    p = ka.KernelAttentionParams.gaussian(rng, 5, 2, 1, "softmax", sparse=False, scale=0.1)
    Z0 = A.array(rng.standard_normal((50, 6, 12)), dt)
    yq = A.array(rng.standard_normal(50), dt)
    sizes = [p.V.size, p.B.size, p.C.size]
    th = A.array(np.concatenate([p.V.ravel(), p.B.ravel(), p.C.ravel()]), dt)
    gr = A.array(np.zeros(sum(sizes)), dt)
    shapes = [p.V.shape, p.B.shape, p.C.shape]
    offs = np.cumsum([0] + sizes[:-1])
    ka.loss_and_grad(Z0, yq, *(A.piece(th, int(o), s) for o, s in zip(offs, shapes)), "softmax",
                     out=tuple(A.piece(gr, int(o), s) for o, s in zip(offs, shapes)), loss=loss)
    print(np.dtype(dt).name, "ka loss:", A.to_host(loss))
for dt in (np.float32, np.float64):
    W = 0.2 * rng.standard_normal((2, 4, 4))
    res = train.fit(train.LSAObjective(W[0], W[1], device="cuda", dtype=dt), train.Adam(lr=0.01),
                    data=train.Prompts(sampling.LinearPrompts(3, 9, seed=0), batch=256),
                    eval_data=train.heldout(sampling.LinearPrompts(3, 9, seed=5), batch=100),
                    steps=12, record_every=4, progress=False)
    print("LSA device fit:", res.history["loss"], res.history["eval_loss"])
p0 = ka.KernelAttentionParams.gaussian(rng, 5, 3, 1, "softmax", sparse=True, scale=0.1)
p0.A[...] = 0
obj = train.KernelAttentionObjective(p0, hold_A_zero=True, device="cuda", dtype=np.float32)
spec = sampling.KernelGPPrompts(5, 10, "exp", seed=2)
res = train.fit(obj, train.Adam(lr=0.02, clip_norm=1.0), data=train.Prompts(spec, batch=500),
                eval_data=train.heldout(sampling.KernelGPPrompts(5, 10, "exp", seed=3), batch=200),
                steps=12, record_every=4, progress=False)
print("KA sparse device fit:", res.history["loss"], res.history["eval_loss"])
p0.A[...] = 0.01 * rng.standard_normal(p0.A.shape)
res = train.fit(train.KernelAttentionObjective(p0, device="cuda", dtype=np.float32, A_rate=0.1),
                train.Adam(lr=0.02, clip_norm=1.0), data=train.Prompts(spec, batch=500), steps=12,
                record_every=4, progress=False)
print("KA sparse device fit, A at a tenth of the rate:", res.history["loss"])
try:
    train.fit(train.LSAObjective(W[0], W[1], device="cuda"), train.SGD(lr=1e8),
              data=train.Prompts(sampling.LinearPrompts(3, 9, seed=0), batch=256), steps=30,
              record_every=30, progress=False)
except train.TrainingDiverged as e:
    print("diverged as expected:", str(e)[:80])
cuda.synchronize()
