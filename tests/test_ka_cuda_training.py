"""Kernel-attention training on the GPU: K-GP prompts drawn on the device
(``KernelGPPrompts.sample(device="cuda")``) and ``KernelAttentionObjective(device="cuda")`` in
``train.fit``.

The device sampler runs the CPU driver's per-prompt code (common/kernel_gp.hpp's sample_prompt)
on the same Philox streams, one thread per prompt: covariates equal the CPU's to float64 rounding;
labels too for the linear (Gram) and exp (Cholesky) kernels, while relu's eigen route can amplify
the device's exp/sqrt rounding where two eigenvalues of K are close (a rotation of a nearly
degenerate eigenspace: same law, other draws) — so relu is compared through its law-level
statistics, not value by value. The kernel's indexing is checked without a GPU by the emulated
C++ test (cpp/tests/test_kernel_gp_emulated.cpp: bitwise equal to the CPU driver).

GPU tests carry the ``cuda`` marker and skip where no GPU is visible; the tests at the top run
everywhere (the errors of device="cuda" without a GPU).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import lsa_native
from lsa_native import cuda, sampling, train
from lsa_native import kernel_attention as ka
from test_cuda import needs_gpu

no_gpu = pytest.mark.skipif(lsa_native.cuda_available(), reason="a GPU is visible")


# ---- everywhere ---------------------------------------------------------------------------------

@no_gpu
def test_device_cuda_without_a_gpu_says_why():
    p = ka.KernelAttentionParams.gaussian(np.random.default_rng(0), 3, 2, activations="softmax")
    with pytest.raises(ValueError, match="device: 'cuda' needs .*visible GPU"):
        train.KernelAttentionObjective(p, device="cuda")
    with pytest.raises(ValueError, match="device: 'cuda' needs .*visible GPU"):
        sampling.KernelGPPrompts(3, 5, "exp", seed=1).sample(4, device="cuda")


def test_device_names_are_checked():
    p = ka.KernelAttentionParams.gaussian(np.random.default_rng(0), 3, 2, activations="softmax")
    with pytest.raises(ValueError, match="device: expected 'cpu' or 'cuda', got 'gpu'"):
        train.KernelAttentionObjective(p, device="gpu")
    with pytest.raises(ValueError, match="device: expected 'cpu' or 'cuda', got 'tpu'"):
        sampling.KernelGPPrompts(3, 5, "exp", seed=1).sample(4, device="tpu")
    with pytest.raises(ValueError, match="device: the numpy sampler runs on the CPU only"):
        sampling.NumpyKernelGPPrompts(3, 5, "exp", seed=1).sample(4, device="cuda")


class _RecordingSpec:
    """A spec whose device samples are host arrays (so the objective's device bookkeeping runs
    without a GPU): records each call's step and whether it was handed the previous buffers."""

    def __init__(self):
        self.inner = sampling.KernelGPPrompts(3, 6, "exp", seed=8)
        self.calls = []

    def sample(self, *, batch, step, dtype, device="cpu", out=None):
        assert device == "cuda"
        self.calls.append((step, out is not None))
        b = self.inner.sample(batch, step, dtype)
        if out is not None:
            out[0][...], out[1][...] = b.E, b.y_q
            return dataclasses.replace(b, E=out[0], y_q=out[1])
        return b


def test_device_objective_samples_once_per_resample_into_the_same_buffers(monkeypatch):
    monkeypatch.setattr(cuda, "available", lambda: True)
    spec = _RecordingSpec()
    p0 = ka.KernelAttentionParams.gaussian(np.random.default_rng(1), 3, 2, activations="softmax")
    obj = train.KernelAttentionObjective(p0, hold_A_zero=True, device="cuda")
    data = train.Prompts(spec, batch=16, resample_every=4, dtype=np.float64)
    cpu = train.KernelAttentionObjective(p0, hold_A_zero=True)
    for step in range(10):
        loss, grad = obj.loss_and_grad(obj.theta0, step, data)
        want = cpu.loss_and_grad(cpu.theta0, step, train.Prompts(spec.inner, batch=16,
                                                                 resample_every=4, dtype=np.float64))
        assert loss == want[0]
        np.testing.assert_array_equal(grad, want[1])
    assert spec.calls == [(0, False), (1, True), (2, True)]
    # Another source (or batch size) at the same sample index: drawn anew, into new buffers.
    other = _RecordingSpec()
    obj.loss_and_grad(obj.theta0, 9, train.Prompts(other, batch=16, resample_every=4,
                                                    dtype=np.float64))
    obj.loss_and_grad(obj.theta0, 9, train.Prompts(other, batch=8, resample_every=4,
                                                    dtype=np.float64))
    assert other.calls == [(2, False), (2, False)]
    with pytest.raises(TypeError, match="data: device='cuda' trains on a train.Prompts source"):
        obj.loss_and_grad(obj.theta0, 0, train.FixedPrompts(spec.inner.sample(4, 0, np.float64)))


# ---- on a GPU -----------------------------------------------------------------------------------



def _host(batch):
    return cuda.to_host(batch.E), cuda.to_host(batch.y_q)


@pytest.mark.cuda
@needs_gpu
@pytest.mark.parametrize("kernel", ["linear", "exp"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("with_sigma", [False, True])
def test_device_prompts_equal_cpu_prompts(kernel, dtype, with_sigma):
    """Covariates to float64 rounding; labels through the Cholesky factor of an exp kernel matrix
    whose conditioning amplifies the device's exp rounding (1e-11 relative seen at d = 3, n = 30
    on an H100), hence 1e-9 for float64 labels."""
    Sigma = np.diag([1.0, 2.0, 0.5, 1.5, 1.0]) if with_sigma else None
    spec = sampling.KernelGPPrompts(5, 30, kernel, bandwidth=1.0, Sigma=Sigma, seed=9)
    for step, B in [(0, 1), (3, 257), (11, 3000)]:
        cpu = spec.sample(B, step, dtype)
        E, y_q = _host(spec.sample(B, step, dtype, device="cuda"))
        scale = np.abs(cpu.E).max()
        x_tol, y_tol = (1e-13, 1e-9) if dtype == np.float64 else (2e-6, 2e-6)
        np.testing.assert_allclose(E[:, :5], cpu.E[:, :5], rtol=0, atol=x_tol * scale)
        np.testing.assert_allclose(E[:, 5], cpu.E[:, 5], rtol=0, atol=y_tol * scale)
        np.testing.assert_allclose(y_q, cpu.y_q, rtol=0, atol=y_tol * scale)


@pytest.mark.cuda
@needs_gpu
def test_device_relu_prompts_have_the_cpu_covariates_and_label_law():
    """relu's labels go through an eigendecomposition of an indefinite K: where eigenvalues are
    close, the device's rounding rotates the eigenvectors (30% of prompts differ beyond 1e-9 on an
    H100 at d = 5, n = 30), so labels are compared by law: the second moments of y_q and of the
    context labels, CPU vs GPU, within 5 standard errors."""
    spec = sampling.KernelGPPrompts(5, 30, "relu", seed=4)
    cpu = spec.sample(20000, 2, np.float64)
    E, y_q = _host(spec.sample(20000, 2, np.float64, device="cuda"))
    np.testing.assert_allclose(E[:, :5], cpu.E[:, :5], rtol=0, atol=1e-13)  # covariates
    for got, want in ((y_q, cpu.y_q), (E[:, 5, 0], cpu.E[:, 5, 0]), (E[:, 5, 7], cpu.E[:, 5, 7])):
        se = np.sqrt(2.0 / len(want)) * np.var(want)
        assert abs(np.var(got) - np.var(want)) < 5 * se
        assert abs(np.mean(got) - np.mean(want)) < 5 * np.sqrt(np.var(want) / len(want))


@pytest.mark.cuda
@needs_gpu
def test_device_sampling_writes_into_out_and_is_deterministic():
    spec = sampling.KernelGPPrompts(3, 8, "exp", seed=2)
    first = spec.sample(100, 5, np.float32, device="cuda")
    again = spec.sample(100, 5, np.float32, device="cuda", out=(first.E, first.y_q))
    assert again.E is first.E
    np.testing.assert_array_equal(cuda.to_host(again.E),
                                  cuda.to_host(spec.sample(100, 5, np.float32, device="cuda").E))
    with pytest.raises(ValueError, match=r"out\[0\] \(Z0\): expected a writable float32 CUDA array"):
        spec.sample(50, 5, np.float32, device="cuda", out=(first.E, first.y_q))
    with pytest.raises(TypeError, match=r"out\[0\] \(Z0\): expected a CUDA array"):
        spec.sample(100, 5, np.float32, device="cuda", out=(np.zeros((100, 4, 9), np.float32),
                                                              first.y_q))


def _fit(device, dtype, hold_A_zero=True, steps=12):
    spec = sampling.KernelGPPrompts(3, 10, "exp", seed=21)
    p0 = ka.KernelAttentionParams.gaussian(np.random.default_rng(3), 3, 2, activations="softmax")
    obj = train.KernelAttentionObjective(p0, hold_A_zero=hold_A_zero, dtype=dtype, device=device)
    data = train.Prompts(spec, batch=512, resample_every=3, dtype=dtype)
    return train.fit(obj, train.Adam(lr=0.01), steps=steps, data=data, progress=False)


@pytest.mark.cuda
@needs_gpu
@pytest.mark.parametrize("hold_A_zero", [True, False])
def test_fit_on_the_gpu_follows_the_cpu_trajectory(hold_A_zero):
    """float64: the same prompts (to rounding) and the same optimizer give the same trajectory."""
    gpu = _fit("cuda", np.float64, hold_A_zero)
    cpu = _fit("cpu", np.float64, hold_A_zero)
    np.testing.assert_allclose(gpu.theta, cpu.theta, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(gpu.history["loss"], cpu.history["loss"], rtol=1e-9)


@pytest.mark.cuda
@needs_gpu
def test_fit_on_the_gpu_float32_trains():
    res = _fit("cuda", np.float32, steps=40)
    losses = res.history["loss"]
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0]
