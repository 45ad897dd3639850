"""One warmed-up lsa.loss_and_grad and lsa.predict call (float32, d = 20, N = 100, B = 2^18) for
Nsight Compute: run as `ncu --kernel-name regex:lsa_prediction_kernel ... python profile_once.py`."""
import torch

from lsa_native import lsa

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
