"""Native prompt samplers addressed by (seed, step) (SPEC 3.4a), and fused sampled training steps.

A sampler is an immutable spec holding the law and a seed; ``spec.sample(batch=B, step=k)`` returns
a ``lsa_native.data.PromptBatch`` that depends only on (seed, step) — never on the thread count.

- ``LinearPrompts``: linear-regression prompts [ZFB 3.3, 4.2, 4.3; CCS H.1] and the fused LSA step
  ``spec.lsa_loss_and_grad(W_pv, W_kq, batch=B, step=k, method="tokens" | "wishart")``.
- ``KernelGPPrompts``: K Gaussian-process prompts [CCS Definition 3.3, H.1]; ``NumpyKernelGPPrompts``
  the same spec drawn by the numpy reference; ``CompositeKernelGPPrompts`` the composite kernel K♦
  of CCS Figure 4 (Appendix D).
- ``philox4x32``, ``normals``, ``uniforms``, ``gammas``: the raw generator (Philox4x32-10) and its
  variate streams.
"""
from .kernel_gp import CompositeKernelGPPrompts, KernelGPPrompts, NumpyKernelGPPrompts
from .linear import COVARIANCE_LAWS, LinearPrompts
from .random import STREAMS, gammas, normals, philox4x32, uniforms

__all__ = ["LinearPrompts", "KernelGPPrompts", "CompositeKernelGPPrompts", "NumpyKernelGPPrompts",
           "COVARIANCE_LAWS", "STREAMS",
           "philox4x32", "normals", "uniforms", "gammas"]
