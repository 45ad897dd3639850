"""Plain numpy references of every native kernel, written straight from the papers' equations.

They are the test oracles of the native core (numpy reference → CPU kernels → CUDA kernels) and
the baselines of the benchmarks. Clarity first; float64 recommended.
"""
from . import kernel_attention, lsa, multihead, population, population_multihead

__all__ = ["kernel_attention", "lsa", "multihead", "population", "population_multihead"]
