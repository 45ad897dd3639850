"""pytest-benchmark suite of the LSA kernels: native vs numpy reference vs PyTorch (if installed).

    python -m pytest bench [--bench-size full] [--benchmark-json out.json]

For the summary table with bandwidth fractions and ratios, run ``python bench/report.py``.
"""
import numpy as np
import pytest

import cases

OPERATIONS = ["pred fwd+bwd", "pred fwd", "full fwd", "stream read"]
IMPLS = ["native", "numpy", "torch"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("size_index", [0, 1], ids=["d20-N100", "d5-N30"])
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("operation", OPERATIONS)
def test_lsa(benchmark, bench_sizes, size_index, dtype, operation, impl):
    size = bench_sizes[size_index]
    fns = cases.implementations(*cases.make_inputs(size, dtype))
    if (operation, impl) not in fns:
        pytest.skip(f"no {impl} implementation of {operation}" +
                    (" (torch not installed)" if impl == "torch" and cases.torch is None else ""))
    benchmark.extra_info.update(size=size.label(), dtype=np.dtype(dtype).name)
    benchmark.pedantic(fns[(operation, impl)], rounds=5, warmup_rounds=1)
