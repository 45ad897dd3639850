import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


def pytest_addoption(parser):
    parser.addoption("--bench-size", choices=["small", "full"], default="small",
                     help="small (quick) or full (SPEC section 5) benchmark sizes")


@pytest.fixture(scope="session")
def bench_sizes(request):
    import cases

    return cases.FULL_SIZES if request.config.getoption("--bench-size") == "full" else cases.SMALL_SIZES
