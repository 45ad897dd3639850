"""lsa_native: fast, exact in-context-learning research on attention models.

Submodules: ``lsa`` (native batched LSA), ``multihead`` (H-head linear attention, merged or
separate key/query), ``population`` (exact population losses, gradient flow), ``reference`` (numpy oracles), ``data`` (prompt
samplers), ``gp_kernels`` (the GP kernels of CCS (12), (14)), ``sampling`` (native samplers by seed and step), ``theory`` (ZFB closed forms), ``train`` (training drivers), ``cli`` (``lsa-native``).
"""
from . import _core
from ._validation import positive_int
from . import (baselines, cuda, data, gp_kernels, kernel_attention, lsa, multihead, population,
               population_multihead, reference, sampling, theory, train)

__version__ = _core.__version__

cuda_compiled = _core.cuda_compiled
cuda_available = _core.cuda_available
num_threads = _core.num_threads


def set_num_threads(n: int) -> int:
    """Use ``n`` CPU threads in the batched kernels (0 restores the default: the CPUs this process may
    run on, e.g. those ``taskset`` or a container allows) and return
    the count in use. When the system refuses to start that many (a process or address-space
    limit), the pool keeps the threads it could start, with a RuntimeWarning saying so.
    Results never depend on it: batch reductions run over fixed chunks in a fixed order."""
    n = positive_int(n, "n", minimum=0, maximum=4096)
    got = _core.set_num_threads(n)
    if n > 0 and got < n:
        import warnings

        warnings.warn(f"set_num_threads: the system refused threads beyond {got} (a process or "
                      f"address-space limit); using {got} instead of {n}", RuntimeWarning,
                      stacklevel=2)
    return got


cpu_kernel_isa = _core.cpu_kernel_isa

__all__ = [
    "lsa",
    "multihead",
    "cuda",
    "kernel_attention",
    "baselines",
    "gp_kernels",
    "population",
    "population_multihead",
    "reference",
    "data",
    "sampling",
    "theory",
    "train",
    "cuda_compiled",
    "cuda_available",
    "num_threads",
    "set_num_threads",
    "cpu_kernel_isa",
    "__version__",
]
