"""Native prompt samplers addressed by (seed, step): immutable specs of a law plus a seed whose
``sample(batch=B, step=k, dtype=...)`` returns a :class:`lsa_native.data.PromptBatch`."""
from .kernel_gp import KernelGPPrompts, NumpyKernelGPPrompts

__all__ = ["KernelGPPrompts", "NumpyKernelGPPrompts"]
