"""lsa_native: fast, exact in-context-learning research on attention models.

Submodules: ``lsa`` (native batched LSA), ``population`` (exact population losses, gradient flow), ``reference`` (numpy oracles), ``data`` (prompt
samplers), ``theory`` (ZFB closed forms), ``train`` (training drivers), ``cli`` (``lsa-native``).
"""
from . import _core
from . import baselines, cuda, data, kernel_attention, lsa, population, reference, theory, train

__version__ = _core.__version__

cuda_compiled = _core.cuda_compiled
cuda_available = _core.cuda_available
num_threads = _core.num_threads
set_num_threads = _core.set_num_threads
cpu_kernel_isa = _core.cpu_kernel_isa

__all__ = [
    "lsa",
    "cuda",
    "kernel_attention",
    "baselines",
    "population",
    "reference",
    "data",
    "theory",
    "train",
    "cuda_compiled",
    "cuda_available",
    "num_threads",
    "set_num_threads",
    "cpu_kernel_isa",
    "__version__",
]
