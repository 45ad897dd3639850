"""The fused sampled LSA step on the GPU (``LinearPrompts.lsa_loss_and_grad(device=...)``,
``LSAObjective(device=...)``): the GPU step equals the CPU step of the same (seed, step) for both
methods and dtypes (float64 to 1e-12 relative, float32 to 2e-4: the two backends draw the same
Philox stream and differ only by the rounding of log/sin/cos and the order of the sums),
determinism, odd sizes, d = 1, N = 1, every option of the law, training with ``fit``.
Gamma variates (the Bartlett χ², the gamma covariance law) are accept/reject draws: a rounding
difference at an acceptance boundary would change one variate, so a float32 comparison can fail
with a probability of about 1e-7 per variate (never observed; float64: about 1e-16).

GPU tests carry the ``cuda`` marker and skip with a reason where no GPU is visible; the tests at the
top run everywhere (device selection and its errors). The kernels' indexing and reductions are also
checked without a GPU by the emulated C++ tests (cpp/tests/test_sampled_step_emulated.cpp).
"""
from __future__ import annotations

import numpy as np
import pytest

import lsa_native
from lsa_native import sampling, train
from test_cuda import interop, needs_gpu
DTYPES = [np.float32, np.float64]
# CUDA vs CPU, relative to the largest |entry|: float64 rounding of sums over a prompt and the
# normals' log/sin/cos (~1e-15 each); float32 the same at float precision.
TOL = {np.float32: 2e-4, np.float64: 1e-12}


def _params(rng, d, dtype):
    W_pv = (0.3 * rng.standard_normal((d + 1, d + 1))).astype(dtype)
    W_kq = (0.3 * rng.standard_normal((d + 1, d + 1))).astype(dtype)
    return W_pv, W_kq


def _spd(rng, d):
    A = rng.standard_normal((d, d))
    return A @ A.T / d + 0.5 * np.eye(d)


# ---- everywhere ---------------------------------------------------------------------------------

@pytest.mark.skipif(lsa_native.cuda_available(), reason="a GPU is visible")
@pytest.mark.parametrize("method", ["tokens", "wishart"])
def test_device_cuda_without_gpu_is_a_clear_error(rng, method):
    spec = sampling.LinearPrompts(3, 8, seed=1)
    W_pv, W_kq = _params(rng, 3, np.float64)
    why = "no CUDA device" if lsa_native.cuda_compiled() else "no CUDA kernels"
    with pytest.raises(ValueError, match=why):
        spec.lsa_loss_and_grad(W_pv, W_kq, batch=4, method=method, device="cuda", dtype=np.float64)
    obj = train.LSAObjective(W_pv, W_kq, device="cuda")
    with pytest.raises(ValueError, match=why):
        train.fit(obj, "sgd", lr=0.1, steps=2, data=train.Prompts(spec, batch=4))


def test_device_argument_is_checked(rng):
    spec = sampling.LinearPrompts(2, 5, seed=3)
    W_pv, W_kq = _params(rng, 2, np.float32)
    with pytest.raises(ValueError, match="device"):
        spec.lsa_loss_and_grad(W_pv, W_kq, batch=4, device="gpu")
    with pytest.raises(ValueError, match="device"):
        train.LSAObjective(W_pv, W_kq, device=0)
    with pytest.raises(ValueError, match="device"):
        lsa_native._core.linear_prompts_lsa_loss_and_grad(
            spec._spec, 4, 0, "tokens", W_pv, W_kq, np.empty_like(W_pv), np.empty_like(W_kq), "gpu")


@pytest.mark.parametrize("method", ["tokens", "wishart"])
def test_device_auto_with_host_parameters_is_the_cpu_step(rng, method):
    spec = sampling.LinearPrompts(3, 9, noise_std=0.2, seed=5)
    W_pv, W_kq = _params(rng, 3, np.float64)
    kw = dict(batch=50, step=2, method=method, dtype=np.float64)
    auto = spec.lsa_loss_and_grad(W_pv, W_kq, **kw)
    cpu = spec.lsa_loss_and_grad(W_pv, W_kq, device="cpu", **kw)
    assert auto[0] == cpu[0]
    np.testing.assert_array_equal(auto[1], cpu[1])
    np.testing.assert_array_equal(auto[2], cpu[2])


# ---- on a GPU -----------------------------------------------------------------------------------

def _close(got, want, tol, what):
    scale = max(float(np.max(np.abs(want))), 1e-300)
    err = float(np.max(np.abs(np.asarray(got, np.float64) - np.asarray(want, np.float64))))
    assert err <= tol * scale, f"{what}: max error {err:.3e} > {tol:.0e} x {scale:.3e}"


def _laws(rng, d):
    """Every option of the law that both methods accept (sphere covariates: tokens only)."""
    return {
        "plain": {},
        "Lambda, noise": {"Lambda": _spd(rng, d), "noise_std": 0.3, "query_noise": True},
        "query shift": {"Lambda": _spd(rng, d), "query_Lambda": _spd(rng, d)},
        "task pool": {"tasks": 4, "noise_std": 0.1},
        "exponential": {"covariance_law": ("exponential", 2.0)},
        "gamma": {"covariance_law": ("gamma", 0.7, 1.5), "noise_std": 0.2},
        "two-point": {"covariance_law": ("two_point", 0.5, 3.0, 0.3)},
    }


@pytest.mark.cuda
@needs_gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("method", ["tokens", "wishart"])
@pytest.mark.parametrize("B,d,N", [(1, 1, 1), (3, 1, 5), (77, 3, 7), (300, 5, 20), (65, 2, 45),
                                   (33, 20, 100), (1000, 4, 33)])
def test_gpu_step_equals_cpu_step(rng, method, dtype, B, d, N):
    for name, law in _laws(rng, d).items():
        need = d + (1 if law.get("noise_std", 0) > 0 else 0)
        if method == "wishart" and N < need:
            continue
        spec = sampling.LinearPrompts(d, N, seed=int(rng.integers(2**63)), **law)
        W_pv, W_kq = _params(rng, d, dtype)
        kw = dict(batch=B, step=int(rng.integers(1000)), method=method, dtype=dtype)
        g = spec.lsa_loss_and_grad(W_pv, W_kq, device="cuda", **kw)
        c = spec.lsa_loss_and_grad(W_pv, W_kq, device="cpu", **kw)
        what = f"{method} {np.dtype(dtype).name} B={B} d={d} N={N} {name}"
        _close(g[0], c[0], TOL[dtype], what + " loss")
        _close(g[1], c[1], TOL[dtype], what + " d_W_pv")
        _close(g[2], c[2], TOL[dtype], what + " d_W_kq")
        assert g[1].dtype == dtype and isinstance(g[1], np.ndarray)


@pytest.mark.cuda
@needs_gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_tokens_step_with_sphere_covariates(rng, dtype):
    for d, N in ((1, 1), (5, 30), (3, 40)):
        spec = sampling.LinearPrompts(d, N, _spd(rng, d), covariates="sphere", seed=9)
        W_pv, W_kq = _params(rng, d, dtype)
        g = spec.lsa_loss_and_grad(W_pv, W_kq, batch=129, step=4, device="cuda", dtype=dtype)
        c = spec.lsa_loss_and_grad(W_pv, W_kq, batch=129, step=4, device="cpu", dtype=dtype)
        for a, b in zip(g, c):
            _close(a, b, TOL[dtype], f"sphere d={d} N={N}")


@pytest.mark.cuda
@needs_gpu
def test_gpu_step_has_power(rng):
    """Another step index (other prompts) differs far beyond the tolerance."""
    spec = sampling.LinearPrompts(3, 10, seed=2)
    W_pv, W_kq = _params(rng, 3, np.float64)
    a = spec.lsa_loss_and_grad(W_pv, W_kq, batch=200, step=1, device="cuda", dtype=np.float64)
    b = spec.lsa_loss_and_grad(W_pv, W_kq, batch=200, step=2, device="cpu", dtype=np.float64)
    with pytest.raises(AssertionError):
        _close(a[2], b[2], 1e-3, "other step")


@pytest.mark.cuda
@needs_gpu
@pytest.mark.parametrize("method", ["tokens", "wishart"])
def test_gpu_step_is_deterministic(rng, method):
    spec = sampling.LinearPrompts(5, 20, noise_std=0.1, seed=7)
    W_pv, W_kq = _params(rng, 5, np.float32)
    runs = [spec.lsa_loss_and_grad(W_pv, W_kq, batch=5000, step=3, method=method, device="cuda")
            for _ in range(3)]
    for r in runs[1:]:
        assert r[0] == runs[0][0]
        np.testing.assert_array_equal(r[1], runs[0][1])
        np.testing.assert_array_equal(r[2], runs[0][2])


@pytest.mark.cuda
@needs_gpu
def test_gpu_too_large_prompts_are_a_clear_error(rng):
    spec = sampling.LinearPrompts(20, 20000, seed=1)
    W_pv, W_kq = _params(rng, 20, np.float64)
    with pytest.raises(ValueError, match="shared memory"):
        spec.lsa_loss_and_grad(W_pv, W_kq, batch=2, device="cuda", dtype=np.float64)


@pytest.mark.cuda
@needs_gpu
def test_fit_on_the_gpu_follows_the_cpu_trajectory(rng):
    spec = sampling.LinearPrompts(3, 12, seed=11)
    W_pv, W_kq = _params(rng, 3, np.float64)
    runs = {}
    for device in ("cpu", "cuda"):
        obj = train.LSAObjective(W_pv, W_kq, dtype=np.float64, method="auto", device=device)
        runs[device] = train.fit(obj, "sgd", lr=0.05, steps=5, data=train.Prompts(spec, batch=256))
    _close(runs["cuda"].theta, runs["cpu"].theta, 1e-10, "theta after 5 SGD steps")


@pytest.mark.cuda
@needs_gpu
@interop
def test_gpu_step_takes_torch_cuda_parameters(rng):
    torch = pytest.importorskip("torch")
    spec = sampling.LinearPrompts(4, 10, seed=5)
    W_pv, W_kq = _params(rng, 4, np.float32)
    t_pv, t_kq = (torch.from_numpy(a).cuda() for a in (W_pv, W_kq))
    g = spec.lsa_loss_and_grad(t_pv, t_kq, batch=100)  # auto: CUDA parameters -> the GPU step
    c = spec.lsa_loss_and_grad(W_pv, W_kq, batch=100, device="cpu")
    for a, b in zip(g, c):
        _close(a, b, TOL[np.float32], "torch parameters")
