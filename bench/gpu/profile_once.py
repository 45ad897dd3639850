"""One warmed-up call of the kernels to profile, for Nsight Compute:
    ncu --kernel-name regex:lsa_prediction_kernel ... python profile_once.py        (LSA, d = 20,
        N = 100, B = 2^18, float32: loss_and_grad then predict)
    ncu --kernel-name regex:ka_kernel ... python profile_once.py --ka               (kernel
        attention at CCS size d = 5, n = 30, L = 3, B = 30000, float32 softmax: loss_and_grad)
    ncu --kernel-name regex:"lsa_forward|lsa_vjp" ... python profile_once.py --full (full output
        and its VJP, d = 20, N = 100, B = 2^16, float32)
--ka and --full may be given together."""
import sys

import torch

from lsa_native import kernel_attention as ka
from lsa_native import lsa

if "--full" in sys.argv:
    B, d, N = 2**16, 20, 100
    E = torch.randn((B, d + 1, N + 1), device="cuda")
    d_F = torch.randn((B, d + 1, N + 1), device="cuda")
    W_pv = torch.randn((d + 1, d + 1), device="cuda") / (d + 1)
    W_kq = torch.randn((d + 1, d + 1), device="cuda") / (d + 1)
    for _ in range(2):
        lsa.forward(E, W_pv, W_kq)
        lsa.vjp(E, W_pv, W_kq, d_F)
if "--ka" in sys.argv:
    B, d, n, L = 30000, 5, 30, 3
    Z0 = torch.randn((B, d + 1, n + 1), device="cuda")
    Z0[:, d, n] = 0
    y = torch.randn(B, device="cuda")
    V = 0.1 * torch.randn((L, 1, d + 1, d + 1), device="cuda")
    Bq, Ck = (0.3 * torch.randn((L, 1, d, d), device="cuda") for _ in range(2))
    for _ in range(2):
        ka.loss_and_grad(Z0, y, V, Bq, Ck, "softmax")
if not {"--ka", "--full"} & set(sys.argv):
    B, d, N = 2**18, 20, 100
    E = torch.randn((B, d + 1, N + 1), device="cuda")
    E[:, d, N] = 0
    y_q = torch.randn(B, device="cuda")
    W_pv = torch.randn((d + 1, d + 1), device="cuda") / (d + 1)
    W_kq = torch.randn((d + 1, d + 1), device="cuda") / (d + 1)
    lsa.loss_and_grad(E, y_q, W_pv, W_kq)
    torch.cuda.synchronize()
    lsa.loss_and_grad(E, y_q, W_pv, W_kq)
    lsa.predict(E, W_pv, W_kq)
torch.cuda.synchronize()
print("profile_once: done")
