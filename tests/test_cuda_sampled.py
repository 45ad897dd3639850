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

import importlib

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


# ---- LinearPrompts.sample / sample_embedding on the GPU (issue 18) ------------------------------
# On an emulated GPU (everywhere): host memory presented as CUDA arrays and the dispatcher told to
# run the CPU sampler where it would launch linear_prompts_kernel — the route (binding, output
# views, shapes, dtypes, checks) is the GPU's, and its values are the CPU sampler's bit for bit.
# The kernel's own values are checked against the CPU sampler by the emulated C++ test
# (GeneratedPromptsEqualTheCpuSampler) and, on a GPU, by the ``cuda`` tests below.

def _sampler_laws(rng, d):
    """Every option of the law the GPU sampler supports (sphere covariates included)."""
    return {**_laws(rng, d), "uniform": {"covariance_law": ("uniform", 0.5, 2.0)},
            "sphere": {"Lambda": _spd(rng, d), "covariates": "sphere"}}


@pytest.fixture
def emulated_gpu(monkeypatch):
    from conftest import HostBackedCudaArray
    from lsa_native import _core, cuda

    monkeypatch.setattr(cuda, "available", lambda: True)
    monkeypatch.setattr(cuda, "empty", lambda template, shape, dtype, device:
                        HostBackedCudaArray(np.full(shape, np.nan, dtype)))
    _core.emulate_cuda_on_cpu_for_tests(True)
    yield HostBackedCudaArray
    _core.emulate_cuda_on_cpu_for_tests(False)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d,N", [(1, 1), (3, 7), (2, 40)])
def test_emulated_sample_embedding_route(rng, emulated_gpu, dtype, d, N):
    """sample_embedding(device="cuda") into new and into preallocated CUDA arrays: the CPU's draws."""
    Host = emulated_gpu
    for name, law in _sampler_laws(rng, d).items():
        spec = sampling.LinearPrompts(d, N, seed=int(rng.integers(2**63)), **law)
        B, step = int(rng.integers(1, 40)), int(rng.integers(1000))
        E, y_q = spec.sample_embedding(B, step, dtype)
        got_E, got_y = spec.sample_embedding(B, step, dtype, device="cuda")
        assert isinstance(got_E, Host) and isinstance(got_y, Host), name
        np.testing.assert_array_equal(got_E.a, E, err_msg=name)
        np.testing.assert_array_equal(got_y.a, y_q, err_msg=name)
        bufE, bufy = Host(np.full(E.shape, np.nan, dtype)), Host(np.full(B, np.nan, dtype))
        out = spec.sample_embedding(B, step, dtype, E=bufE, y_q=bufy, device="auto")
        assert out[0] is bufE and out[1] is bufy
        np.testing.assert_array_equal(bufE.a, E, err_msg=name)
        np.testing.assert_array_equal(bufy.a, y_q, err_msg=name)


@pytest.mark.parametrize("dtype", DTYPES)
def test_emulated_sample_route(rng, emulated_gpu, dtype):
    """sample(device="cuda"): X, y, x_q, y_q, w, E as CUDA arrays holding the CPU's draws; the law's
    fields as the CPU batch's, ξ left out; label_fn / query shift: the CPU batch copied."""
    Host = emulated_gpu
    from lsa_native import cuda

    copies = []
    to_device = cuda.to_device

    def counted_to_device(a, *args, **kw):
        copies.append(a.shape)
        return Host(np.asarray(a))

    for name, law in _sampler_laws(rng, 3).items():
        spec = sampling.LinearPrompts(3, 5, seed=int(rng.integers(2**63)), **law)
        cpu = spec.sample(17, 4, dtype)
        gpu = spec.sample(17, 4, dtype, device="cuda")
        for field in ("X", "y", "x_q", "y_q", "w", "E"):
            assert isinstance(getattr(gpu, field), Host), (name, field)
            np.testing.assert_array_equal(getattr(gpu, field).a, getattr(cpu, field), err_msg=f"{name} {field}")
        assert gpu.xi is None and gpu.xi_q is None
        assert gpu.noise_std == cpu.noise_std
    cuda.to_device = counted_to_device
    try:
        spec = sampling.LinearPrompts(3, 2, seed=5)
        gpu = spec.sample(9, 1, dtype, device="cuda", query="orthogonal", label_fn=np.tanh)
        cpu = spec.sample(9, 1, dtype, query="orthogonal", label_fn=np.tanh)
    finally:
        cuda.to_device = to_device
    assert len(copies) == 6  # the CPU fallback: one copy per array
    np.testing.assert_array_equal(gpu.y_q.a, cpu.y_q)
    np.testing.assert_array_equal(gpu.E.a, cpu.E)


def test_emulated_sample_embedding_checks_its_outputs(rng, emulated_gpu):
    Host = emulated_gpu
    spec = sampling.LinearPrompts(2, 3, seed=1)
    with pytest.raises(TypeError, match="E: expected a CUDA array"):
        spec.sample_embedding(4, device="cuda", E=np.empty((4, 3, 4), np.float32))
    # The native output checks (bind_sampling.cpp: sample_on_device), naming the argument.
    with pytest.raises(ValueError, match=r"E: expected a C-contiguous array of shape \(4, 3, 4\)"):
        spec.sample_embedding(4, device="cuda", E=Host(np.empty((4, 3, 5), np.float32)))
    with pytest.raises(TypeError, match=r"y_q: expected dtype float32, got float64"):
        spec.sample_embedding(4, device="cuda", y_q=Host(np.empty(4, np.float64)))
    with pytest.raises(TypeError, match=r"E: expected dtype float64, got float32"):
        spec.sample_embedding(4, dtype=np.float64, device="cuda", E=Host(np.empty((4, 3, 4), np.float32)))
    readonly = Host(np.empty(4, np.float32))
    readonly.__cuda_array_interface__["data"] = (readonly.a.ctypes.data, True)
    with pytest.raises(ValueError, match="y_q: must be writeable"):
        spec.sample_embedding(4, device="cuda", y_q=readonly)
    with pytest.raises(ValueError, match="device='cpu' but E is a CUDA array"):
        spec.sample_embedding(4, device="cpu", E=Host(np.empty((4, 3, 4), np.float32)))
    big = Host(np.empty((4, 3, 4), np.float32))
    from lsa_native import cuda
    overlap = cuda.Piece(big, 0, (4,))
    with pytest.raises(ValueError, match="y_q: overlaps the memory of E"):
        spec.sample_embedding(4, device="cuda", E=big, y_q=overlap)


def test_emulated_device_draws_checked_when_not_proven(emulated_gpu):
    """A law whose bounds do not prove the draws finite: the CUDA outputs are read back and checked
    (FloatingPointError naming the argument, as on the CPU)."""
    spec = sampling.LinearPrompts(3, 4, 1e76 * np.eye(3), seed=2)
    with pytest.raises(FloatingPointError, match="overflowed.*Lambda"):
        spec.sample_embedding(50, device="cuda")  # labels ~1e38 N(0, 3): some overflow
    with pytest.raises(FloatingPointError, match="overflowed.*Lambda"):
        spec.sample(50, device="cuda")
    assert spec.replace(Lambda=np.eye(3))._draws_proven_finite(np.float32)  # the usual law: no read


@pytest.mark.skipif(lsa_native.cuda_available(), reason="a GPU is visible")
def test_sampler_device_cuda_without_gpu_is_a_clear_error():
    spec = sampling.LinearPrompts(3, 8, seed=1)
    for call in (lambda: spec.sample_embedding(4, device="cuda"), lambda: spec.sample(4, device="cuda")):
        with pytest.raises(ValueError, match=r"device: 'cuda' needs"):
            call()


# ---- on a GPU: the kernel's draws vs the CPU sampler ---------------------------------------------
# float64: the normals' log/sin/cos and FMA contraction, ~1e-15 per variate, through sums of d
# terms (relative to the largest entry: 1e-12); float32: the same at float precision (2e-5 x d).
SAMPLER_TOL = {np.float64: 1e-12, np.float32: 2e-5}


@pytest.mark.cuda
@needs_gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,d,N", [(1, 1, 1), (3, 1, 5), (77, 3, 7), (300, 5, 20), (65, 2, 45),
                                   (33, 20, 100), (1000, 4, 33)])
def test_gpu_sample_equals_cpu_sample(rng, dtype, B, d, N):
    from lsa_native import cuda

    for name, law in _sampler_laws(rng, d).items():
        spec = sampling.LinearPrompts(d, N, seed=int(rng.integers(2**63)), **law)
        step = int(rng.integers(1000))
        cpu, gpu = spec.sample(B, step, dtype), spec.sample(B, step, dtype, device="cuda")
        for field in ("X", "y", "x_q", "y_q", "w", "E"):
            got = cuda.to_host(getattr(gpu, field))
            assert got.dtype == dtype
            _close(got, getattr(cpu, field), SAMPLER_TOL[dtype] * (d + 1), f"{name} {field} B={B} d={d} N={N}")
        E, y_q = spec.sample_embedding(B, step, dtype, device="cuda")
        _close(cuda.to_host(E), cpu.E, SAMPLER_TOL[dtype] * (d + 1), f"{name} sample_embedding E")
        _close(cuda.to_host(y_q), cpu.y_q, SAMPLER_TOL[dtype] * (d + 1), f"{name} sample_embedding y_q")


@pytest.mark.cuda
@needs_gpu
def test_gpu_sample_embedding_into_torch_buffers_and_deterministic(rng):
    torch = pytest.importorskip("torch")
    spec = sampling.LinearPrompts(5, 20, noise_std=0.1, tasks=7, seed=3)
    E = torch.empty((4096, 6, 21), dtype=torch.float32, device="cuda")
    y_q = torch.empty(4096, dtype=torch.float32, device="cuda")
    spec.sample_embedding(4096, 2, E=E, y_q=y_q, device="cuda")
    first = E.cpu().numpy().copy(), y_q.cpu().numpy().copy()
    spec.sample_embedding(4096, 2, E=E, y_q=y_q)  # auto: CUDA outputs
    np.testing.assert_array_equal(E.cpu().numpy(), first[0])
    np.testing.assert_array_equal(y_q.cpu().numpy(), first[1])
    cpu = spec.sample_embedding(4096, 2)
    _close(first[0], cpu[0], 2e-5 * 6, "torch E")
    other = spec.sample_embedding(4096, 3, device="cuda")[0]
    with pytest.raises(AssertionError):  # power: another step's prompts differ
        _close(lsa_native.cuda.to_host(other), cpu[0], 1e-2, "another step")


@pytest.mark.cuda
@needs_gpu
def test_gpu_sampler_too_large_prompts_are_a_clear_error():
    spec = sampling.LinearPrompts(20, 20000, seed=1)
    with pytest.raises(ValueError, match="shared memory"):
        spec.sample_embedding(2, dtype=np.float64, device="cuda")


# ---- MultiHeadLSAObjective(device="cuda"): the tokens route on device prompts ---------------------

def _multihead_problem(rng, d=3, N=6, H=2, separate=False):
    W_pv = 0.2 * rng.standard_normal((H, d + 1, d + 1))
    if separate:
        return W_pv, {"W_k": 0.3 * rng.standard_normal((H, 1, d + 1)),
                      "W_q": 0.3 * rng.standard_normal((H, 1, d + 1))}
    return W_pv, {"W_kq": 0.3 * rng.standard_normal((H, d + 1, d + 1))}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("separate", [False, True])
def test_emulated_multihead_objective_on_device_prompts(rng, emulated_gpu, monkeypatch, dtype, separate):
    """device="cuda": the step's prompts drawn by sample_embedding(device="cuda") into buffers reused
    across steps (redrawn only at a resample), multihead.loss_and_grad on them; on the emulated GPU
    the losses and gradients are the CPU route's bit for bit, and a fit follows it exactly."""
    Host = emulated_gpu
    spec = sampling.LinearPrompts(3, 6, noise_std=0.1, seed=int(rng.integers(2**63)))
    W_pv, kq = _multihead_problem(rng, separate=separate)
    data = train.Prompts(spec, batch=23, dtype=dtype, resample_every=2)
    gpu = train.MultiHeadLSAObjective(W_pv, **kq, device="cuda")
    cpu = train.MultiHeadLSAObjective(W_pv, **kq, device="cpu")
    draws = []
    sample_embedding = sampling.LinearPrompts.sample_embedding

    def counted(self, *args, **kw):
        draws.append(kw.get("device"))
        return sample_embedding(self, *args, **kw)

    monkeypatch.setattr(sampling.LinearPrompts, "sample_embedding", counted)
    buffers = set()
    for step in range(5):
        theta = gpu.theta0 + 0.01 * step
        got, want = gpu.loss_and_grad(theta, step, data), cpu.loss_and_grad(theta, step, data)
        assert got[0] == want[0]
        np.testing.assert_array_equal(got[1], want[1])
        assert isinstance(gpu._draw[2], Host)
        buffers.add(id(gpu._draw[2]))
    assert draws.count("cuda") == 3 and len(buffers) == 1  # steps 0, 2, 4: one buffer
    monkeypatch.setattr(importlib.import_module("lsa_native.train.fit"), "_native_arrays", lambda plan: None)
    runs = [train.fit(obj, train.Adam(lr=0.02), data=data, steps=6, progress=False) for obj in (gpu, cpu)]
    np.testing.assert_array_equal(runs[0].theta, runs[1].theta)


def test_multihead_objective_device_argument(rng):
    W_pv, kq = _multihead_problem(rng)
    with pytest.raises(ValueError, match="device"):
        train.MultiHeadLSAObjective(W_pv, **kq, device="gpu")
    obj = train.MultiHeadLSAObjective(W_pv, **kq, method="auto", device="cuda")
    assert obj._wishart(train.Prompts(sampling.LinearPrompts(3, 9, seed=1), batch=4))  # GPU Wishart
    assert not obj._wishart(train.Prompts(sampling.LinearPrompts(3, 2, seed=1), batch=4))
    assert obj.config() == train.MultiHeadLSAObjective(W_pv, **kq, method="auto").config()


@pytest.mark.skipif(lsa_native.cuda_available(), reason="a GPU is visible")
def test_multihead_objective_cuda_without_gpu_is_a_clear_error(rng):
    W_pv, kq = _multihead_problem(rng)
    obj = train.MultiHeadLSAObjective(W_pv, **kq, device="cuda")
    with pytest.raises(ValueError, match="device: 'cuda' needs"):
        train.fit(obj, "sgd", lr=0.1, steps=2,
                  data=train.Prompts(sampling.LinearPrompts(3, 6, seed=1), batch=4), progress=False)


@pytest.mark.cuda
@needs_gpu
@pytest.mark.parametrize("separate", [False, True])
def test_gpu_multihead_objective_follows_the_cpu_route(rng, separate):
    """float64: the GPU route's step equals the CPU route's to rounding, a short fit too."""
    spec = sampling.LinearPrompts(5, 20, noise_std=0.1, tasks=9, seed=4)
    W_pv, kq = _multihead_problem(rng, d=5, H=3, separate=separate)
    data = train.Prompts(spec, batch=2048, dtype=np.float64)
    runs = {}
    for device in ("cpu", "cuda"):
        obj = train.MultiHeadLSAObjective(W_pv, **kq, device=device)
        loss, grad = obj.loss_and_grad(obj.theta0, 3, data)
        runs[device] = (loss, grad, train.fit(obj, "sgd", lr=0.05, steps=5, data=data, progress=False).theta)
    _close(runs["cuda"][0], runs["cpu"][0], 1e-11, "loss")
    _close(runs["cuda"][1], runs["cpu"][1], 1e-10, "gradient")
    _close(runs["cuda"][2], runs["cpu"][2], 1e-10, "theta after 5 SGD steps")
