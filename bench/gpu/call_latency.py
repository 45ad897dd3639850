"""Host time per call of the CUDA paths (tiny B = 4, so the kernels take microseconds): where a
small-batch training step spends its time outside the GPU. Layers, outermost first:
lsa_native.torch Function (autograd) → lsa.forward (Python conversions) → _core.lsa_forward (array
views, validate(), C++ host code + launch), with the same PyTorch ops for scale. Medians of 5 groups of 300 calls
(one synchronize per group). For a GPU machine: python bench/gpu/call_latency.py"""
import statistics
import time

import torch

import lsa_native.torch as lt
from lsa_native import _core
from lsa_native import kernel_attention as ka
from lsa_native import lsa

B, d, N = 4, 20, 100


def per_call_us(fn, calls=300, groups=5):
    fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(groups):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(out)


E = torch.randn((B, d + 1, N + 1), device="cuda")
W = torch.randn((d + 1, d + 1), device="cuda") / (d + 1)
d_F = torch.randn_like(E)
F = torch.empty_like(E)
Wg = W.clone().requires_grad_()
Z0 = torch.randn((B, 6, 31), device="cuda")
V, Bq = 0.1 * torch.randn((3, 1, 6, 6), device="cuda"), 0.3 * torch.randn((3, 1, 5, 5), device="cuda")
y = torch.randn(B, device="cuda")

rows = [
    ("torch: E + (W (E E^T) W) E, 4 bmm", lambda: E + (W @ (E @ E.transpose(1, 2)) @ W) @ E),
    ("torch: one bmm", lambda: E @ E.transpose(1, 2)),
    ("_core.lsa_forward (views, out=F)", lambda: _core.lsa_forward(E, W, W, F)),
    ("_core.array_info(E) (one array view)", lambda: _core.array_info(E, "E")),
    ("lsa.forward(E, W, W)", lambda: lsa.forward(E, W, W)),
    ("lsa.vjp(E, W, W, d_F)", lambda: lsa.vjp(E, W, W, d_F)),
    ("lsa.loss_and_grad (returns a float: waits)", lambda: lsa.loss_and_grad(E, y, W, W)),
    ("lt.lsa_forward (no grad)", lambda: lt.lsa_forward(E, W, W)),
    ("lt.lsa_forward + backward", lambda: lt.lsa_forward(E, Wg, W).sum().backward()),
    ("ka.forward (d=5 n=30 L=3)", lambda: ka.forward(Z0, V, Bq, Bq, "softmax")),
    ("ka.loss_and_grad (waits)", lambda: ka.loss_and_grad(Z0, y, V, Bq, Bq, "softmax")),
]
print(f"host microseconds per call, B = {B} (kernels negligible), {torch.cuda.get_device_name()}")
for name, fn in rows:
    print(f"  {name:46s} {per_call_us(fn):8.1f} us")
