"""The CUDA backend of lsa_native.kernel_attention: device selection and errors (everywhere), the
Python device path on an emulated GPU (everywhere), and on a GPU: CUDA vs the CPU kernels for
every activation and dtype (float64 to 1e-12 relative, float32 2e-4), odd sizes, d = 1, n = 1,
layers and heads, context vs recomputation, determinism, the global-memory workspace for shapes
beyond shared memory, PyTorch tensors.

GPU tests carry the ``cuda`` marker and skip with a reason where no GPU is visible.
"""
from __future__ import annotations

import numpy as np
import pytest

import lsa_native
from lsa_native import cuda
from lsa_native import kernel_attention as ka
from conftest import conditioned_tolerance
from test_kernel_attention import forward_conditions, relative_conditions
from test_cuda import FakeCudaArray, HostBackedCudaArray, _import_or_skip, emulated_gpu, interop, needs_gpu  # noqa: F401

DTYPES = [np.float32, np.float64]
ACTS = list(ka.ACTIVATIONS)
# (B, d, n, L, H): d = 1, n = 1, odd sizes, the CCS size, several heads, n + 1 = 32 and > 32 tokens
# (the warp kernel's lanes hold one and two tokens), d + 1 > 8 (two register passes).
SHAPES = [(1, 1, 1, 1, 1), (3, 1, 9, 3, 1), (5, 3, 1, 2, 1), (37, 2, 7, 2, 2), (131, 5, 30, 3, 1),
          (9, 4, 13, 2, 3), (6, 3, 31, 2, 1), (7, 3, 40, 2, 2), (5, 9, 6, 2, 2)]
# The warp-per-prompt kernel (default) and the block kernel (its fallback for large prompts, forced
# for every shape by LSA_NATIVE_CUDA_OLD_KERNELS=1).
KERNELS = ["warp", "block"]
# The backward passes run the warp kernel both ways: its recomputing workspace (the default: no
# stored per-layer intermediates beyond Z_ℓ; timings in docs/gpu.md) and, as "stored", every head's
# U, W, h̃, Y kept (LSA_NATIVE_KA_RECOMPUTE=0).
KERNELS_BACKWARD = KERNELS + ["stored"]


@pytest.fixture
def kernel_choice(request, monkeypatch):
    if request.param == "block":
        monkeypatch.setenv("LSA_NATIVE_CUDA_OLD_KERNELS", "1")
    else:
        monkeypatch.delenv("LSA_NATIVE_CUDA_OLD_KERNELS", raising=False)
    if request.param == "stored":
        monkeypatch.setenv("LSA_NATIVE_KA_RECOMPUTE", "0")
    else:
        monkeypatch.delenv("LSA_NATIVE_KA_RECOMPUTE", raising=False)
    return request.param


def problem(rng, B, d, n, L, H, dtype, scale=0.5):
    Z0 = rng.standard_normal((B, d + 1, n + 1))
    Z0[:, d, n] = 0
    y = rng.standard_normal(B)
    V = 0.3 / (d + 1) * rng.standard_normal((L, H, d + 1, d + 1))
    Bq = scale / d * rng.standard_normal((L, H, d, d))
    Ck = scale / d * rng.standard_normal((L, H, d, d))
    dZ = rng.standard_normal(Z0.shape)
    return tuple(a.astype(dtype) for a in (Z0, y, V, Bq, Ck, dZ))


def bounded_problem(rng, shape, dtype, acts, limit=1e6):
    """problem() redrawn until the float64 forward stays below `limit` (far inside float32's range):
    the unnormalized exp over 3 layers overflowed at (3, 1, 9, 3, 1) for 77 of 1500 draws
    (FloatingPointError on the CPU side, i.e. a test error on a correct library); redraws are rare
    (<= 5% per draw) and only drop the draws whose Z_L leaves the representable range."""
    for _ in range(1000):
        drawn = problem(rng, *shape, dtype)
        Z0, _, V, B, C, _ = (a.astype(np.float64) for a in drawn)
        try:
            if np.abs(ka.forward(Z0, V, B, C, acts, device="cpu")).max() < limit:
                return drawn
        except FloatingPointError:
            pass
    raise AssertionError(f"no bounded problem at {shape} {acts}")


def acts_for(act, H):
    return [act] + ["softmax"] * (H - 1)


def assert_close(a, b, dtype, what, condition=1.0):
    """max |a − b| ≤ max(tol, 100·κ·u) · max |b| (conftest.conditioned_tolerance): tol float64
    1e-12, float32 2e-4, κ the output's estimated relative condition number
    (tests/test_kernel_attention.py relative_conditions: a gradient entry can be a small sum of
    large terms, where two backward-stable evaluations differ by about κ·u); and every entry
    finite."""
    a, b = cuda.to_host(a), cuda.to_host(b)
    assert np.all(np.isfinite(a)), f"{what}: non-finite entries (unwritten?)"
    tol = conditioned_tolerance(1e-12 if dtype == np.float64 else 2e-4, condition, dtype)
    assert np.max(np.abs(a - b)) <= tol * np.max(np.abs(b)), (what, condition)


def gradient_conditions(rng, Z0, y, V, B, C, dZ, acts):
    """κ of the VJP's (dV, dB, dC, dZ0) and of loss_and_grad's (loss, dV, dB, dC, dZ0,
    predictions) at the problem, from float64 CPU evaluations (see assert_close)."""
    args = [a.astype(np.float64) for a in (Z0, y, V, B, C, dZ)]
    vjp = lambda Z0_, V_, B_, C_, dZ_: ka.vjp(Z0_, V_, B_, C_, acts, dZ_, device="cpu")  # noqa: E731
    lag = lambda Z0_, y_, V_, B_, C_: ka.loss_and_grad(  # noqa: E731
        Z0_, y_, V_, B_, C_, acts, input_grad=True, return_predictions=True, device="cpu")
    vjp_in = [args[i] for i in (0, 2, 3, 4, 5)]
    lag_in = args[:5]
    return (relative_conditions(vjp, vjp_in, vjp(*vjp_in), rng),
            relative_conditions(lag, lag_in, lag(*lag_in), rng))


# ---- everywhere ---------------------------------------------------------------------------------

@pytest.mark.skipif(lsa_native.cuda_available(), reason="a GPU is visible")
@pytest.mark.parametrize("fn", ["forward", "predict", "vjp", "predict_vjp", "loss_and_grad",
                                "params.loss"])
def test_device_cuda_without_gpu_is_a_clear_error(rng, fn):
    Z0, y, V, B, C, dZ = problem(rng, 2, 2, 3, 1, 1, np.float64)
    params = ka.KernelAttentionParams(B=B, C=C, activations=["softmax"], V=V)
    call = {"forward": lambda: ka.forward(Z0, V, B, C, "softmax", device="cuda"),
            "predict": lambda: ka.predict(Z0, V, B, C, "softmax", device="cuda"),
            "params.loss": lambda: params.loss(Z0, y, device="cuda"),
            "vjp": lambda: ka.vjp(Z0, V, B, C, "softmax", dZ, device="cuda"),
            "predict_vjp": lambda: ka.predict_vjp(Z0, V, B, C, "softmax", y, device="cuda"),
            "loss_and_grad": lambda: ka.loss_and_grad(Z0, y, V, B, C, "softmax", device="cuda")}[fn]
    why = "no CUDA device" if lsa_native.cuda_compiled() else "no CUDA kernels"
    with pytest.raises(ValueError, match=why):
        call()


def test_device_argument_and_bad_cuda_arrays_are_clear_errors(rng):
    """Checked in Python (or by the dispatcher) before any GPU call."""
    Z0, y, V, B, C, dZ = problem(rng, 2, 2, 3, 1, 2, np.float32)
    acts = ["relu", "exp"]
    with pytest.raises(ValueError, match="device: expected one of"):
        ka.forward(Z0, V, B, C, acts, device="gpu")
    fake = FakeCudaArray(Z0.shape)
    with pytest.raises(ValueError, match="device='cpu' but Z0 is a CUDA array"):
        ka.forward(fake, V, B, C, acts, device="cpu")
    with pytest.raises(TypeError, match="Z0: expected dtype float32 or float64, got float16"):
        ka.forward(FakeCudaArray(Z0.shape, "<f2"), V, B, C, acts)
    with pytest.raises(ValueError, match="Z0: CUDA arrays must be C-contiguous"):
        ka.forward(FakeCudaArray(Z0.shape, strides=(48, 4, 12)), V, B, C, acts)
    with pytest.raises(ValueError, match=r"V: expected shape \[L, H, d\+1, d\+1\]"):
        ka.forward(fake, V[0], B, C, acts)
    with pytest.raises(TypeError, match="V: expected dtype float32"):
        ka.forward(fake, FakeCudaArray(V.shape, "<f8"), B, C, acts)
    with pytest.raises(ValueError, match=r"C: expected shape \(1, 2, 2, 2\)"):
        ka.forward(fake, V, B, FakeCudaArray((1, 2, 2, 3)), acts)
    with pytest.raises(ValueError, match="activation: expected one name or 2 names"):
        ka.forward(fake, V, B, C, ["relu"])
    with pytest.raises(ValueError, match="unknown name 'tanh'"):
        ka.loss_and_grad(fake, y, V, B, C, ["relu", "tanh"])
    with pytest.raises(ValueError, match="y_q: expected shape"):
        ka.loss_and_grad(fake, np.zeros(3), V, B, C, acts)
    with pytest.raises(ValueError, match="d_Z_out: expected shape"):
        ka.vjp(fake, V, B, C, acts, FakeCudaArray((2, 3, 3)))
    with pytest.raises(ValueError, match="context: expected the ForwardContext"):
        ka.vjp(fake, V, B, C, acts, dZ, context=ka.ForwardContext(np.zeros((2, 5), np.float32),
                                                                   (2, 2, 3, 1, 1)))
    # predict: the checks of forward (it is one), on either output shape.
    for every_layer in (False, True):
        with pytest.raises(ValueError, match="device='cpu' but Z0 is a CUDA array"):
            ka.predict(fake, V, B, C, acts, every_layer=every_layer, device="cpu")
        with pytest.raises(ValueError, match="device: expected one of"):
            ka.predict(Z0, V, B, C, acts, every_layer=every_layer, device="gpu")
        with pytest.raises(TypeError, match="V: expected dtype float32"):
            ka.predict(fake, FakeCudaArray(V.shape, "<f8"), B, C, acts, every_layer=every_layer)
        with pytest.raises(ValueError, match=r"B: expected shape \(1, 2, 2, 2\)"):
            ka.predict(fake, V, FakeCudaArray((1, 2, 3, 2)), C, acts, every_layer=every_layer)
        with pytest.raises(ValueError, match="activation: expected one name or 2 names"):
            ka.predict(fake, V, B, C, ["relu"], every_layer=every_layer)


# ---- the route of a GPU call on an emulated GPU (runs everywhere) ------------------------------
# Host memory behind __cuda_array_interface__, the dispatcher running the CPU kernels where it
# would launch the CUDA ones (test_cuda.emulated_gpu): checks kernel_attention.py → array views →
# validate() → backend, outputs on Z0's side, saved contexts across sides.

@pytest.mark.parametrize("dtype", DTYPES)
def test_device_path_glue_on_an_emulated_gpu(rng, emulated_gpu, dtype):
    Z0, y, V, B, C, dZ = problem(rng, 7, 3, 5, 2, 2, dtype)
    acts = ["exp", "softmax"]
    g = HostBackedCudaArray
    cpu = dict(device="cpu")
    # Forward: device results equal to the CPU's bit for bit; the context is a device array.
    Z, preds, ctx = ka.forward(g(Z0), g(V), B, C, acts, return_predictions=True, return_context=True)
    Z_c, preds_c, ctx_c = ka.forward(Z0, V, B, C, acts, return_predictions=True, return_context=True, **cpu)
    assert isinstance(Z, HostBackedCudaArray) and isinstance(ctx.data, HostBackedCudaArray)
    np.testing.assert_array_equal(Z.a, Z_c)
    np.testing.assert_array_equal(preds.a, preds_c)
    np.testing.assert_array_equal(ctx.data.a, ctx_c.data)
    assert isinstance(ka.forward(g(Z0), V, B, C, acts), HostBackedCudaArray)
    # VJP: with the device context, with the host context (one layout), recomputing; all equal.
    expected = ka.vjp(Z0, V, B, C, acts, dZ, **cpu)
    for context in (ctx, ctx_c, None):
        got = ka.vjp(g(Z0), V, B, C, acts, g(dZ), context=context)
        for a, b in zip(got, expected):
            np.testing.assert_array_equal(a.a, b)
    assert ka.vjp(g(Z0), V, B, C, acts, dZ, input_grad=False)[3] is None
    # A device context on the auto path routes a host call to the device.
    got = ka.vjp(Z0, V, B, C, acts, dZ, context=ctx)
    np.testing.assert_array_equal(got[0], expected[0])
    # loss_and_grad: the core's loss ½·MSE and its gradients, equal to the CPU's bit for bit.
    out = ka.loss_and_grad(g(Z0), g(y), V, B, C, acts, input_grad=True, return_predictions=True)
    out_c = ka.loss_and_grad(Z0, y, V, B, C, acts, input_grad=True, return_predictions=True, **cpu)
    assert out[0] == out_c[0]
    for a, b in zip(out[1:], out_c[1:]):
        np.testing.assert_array_equal(a.a, b)
    # predict: ŷ_L [B] and ŷ_ℓ [B, L+1] as device arrays of their own (not views), the CPU's bits.
    for every_layer in (False, True):
        got = ka.predict(g(Z0), V, g(B), C, acts, every_layer=every_layer)
        want = ka.predict(Z0, V, B, C, acts, every_layer=every_layer, **cpu)
        assert isinstance(got, HostBackedCudaArray) and got.a.shape == want.shape
        np.testing.assert_array_equal(got.a, want)
        host = ka.predict(Z0, V, B, C, acts, every_layer=every_layer, device="cuda")
        assert isinstance(host, np.ndarray)
        np.testing.assert_array_equal(host, want)
    # predict_vjp: device arrays with the CPU's bits (y as the upstream d_y); host arrays with
    # device="cuda" come back as numpy.
    want = ka.predict_vjp(Z0, V, B, C, acts, y, **cpu)
    got = ka.predict_vjp(g(Z0), V, B, C, acts, g(y))
    host = ka.predict_vjp(Z0, V, B, C, acts, y, device="cuda")
    for a, h, b in zip(got, host, want):
        assert isinstance(a, HostBackedCudaArray) and isinstance(h, np.ndarray)
        np.testing.assert_array_equal(a.a, b)
        np.testing.assert_array_equal(h, b)
    assert ka.predict_vjp(g(Z0), V, B, C, acts, y, input_grad=False)[3] is None
    params = ka.KernelAttentionParams(B=B, C=C, activations=acts, V=V)
    assert params.loss(g(Z0), g(y)) == params.loss(Z0, y, **cpu)
    # numpy with device="cuda": numpy results.
    loss, dV, dB, dC = ka.loss_and_grad(Z0, y, V, B, C, acts, device="cuda")
    assert loss == out_c[0] and isinstance(dV, np.ndarray)
    np.testing.assert_array_equal(dV, out_c[1])
    # Overflow in a host result is reported as on the CPU.
    big = (200 * B).astype(dtype)
    with pytest.raises(FloatingPointError, match="Z_L: overflowed to non-finite values"):
        ka.forward(Z0, V, big, big, "exp", device="cuda")
    # A NaN upstream of a host VJP is named, like on the CPU (not reported as an overflow).
    dZ_bad = np.ones_like(Z0)
    dZ_bad[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="^d_Z_out: contains non-finite values"):
        ka.vjp(Z0, V, B, C, acts, dZ_bad, device="cuda")


# ---- on a GPU -----------------------------------------------------------------------------------

@needs_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("kernel_choice", KERNELS, indirect=True)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("shape", SHAPES)
def test_cuda_predict_matches_the_cpu(rng, shape, act, dtype, kernel_choice):
    """predict on the device (the query-layer forward writing ŷ_L [B] or ŷ_ℓ [B, L+1]) vs the CPU:
    max |Δ| ≤ max(tol, 100·κ·u) · max |ŷ_cpu| (float64 1e-12, float32 2e-4: assert_close); the query layer
    against the full last layer (LSA_NATIVE_KA_QUERY=0) is the next test."""
    B_, d, n, L, H = shape
    Z0, y, V, B, C, _ = bounded_problem(rng, shape, dtype, acts_for(act, H))
    acts = acts_for(act, H)
    Zd, Vd, Bd, Cd = (cuda.to_device(a) for a in (Z0, V, B, C))
    every_c = ka.predict(Z0, V, B, C, acts, every_layer=True, device="cpu")
    final = ka.predict(Zd, Vd, Bd, Cd, acts)
    every = ka.predict(Zd, Vd, Bd, Cd, acts, every_layer=True)
    assert tuple(final.shape) == (B_,) and tuple(every.shape) == (B_, L + 1)
    _, (k_final, k_every) = forward_conditions(rng, Z0, V, B, C, acts)
    assert_close(final, every_c[:, -1], dtype, "predict", k_final)
    assert_close(every, every_c, dtype, "predict every_layer", k_every)
    np.testing.assert_array_equal(cuda.to_host(final), cuda.to_host(every)[:, -1])
    # numpy in, device="cuda": numpy out, the device arrays' bits.
    host = ka.predict(Z0, V, B, C, acts, device="cuda")
    assert isinstance(host, np.ndarray)
    np.testing.assert_array_equal(host, cuda.to_host(final))
    params = ka.KernelAttentionParams(B=B, C=C, activations=acts, V=V)
    loss = params.loss(Zd, cuda.to_device(y))
    assert abs(loss - params.loss(Z0, y, device="cpu")) <= (1e-12 if dtype == np.float64 else 2e-4) * loss


@needs_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("every_layer", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_predict_host_output_gets_its_values_and_nothing_beyond(rng, dtype, every_layer):
    """A host ``out`` staged through the GPU (numpy in, device="cuda") receives ŷ_L [B] (or
    [B, L+1]) and no value past it — the H200 run of 2026-11-27 aborted on a host heap overflow
    here: ŷ_L alone was copied back at B·(L+1) values. ``out`` is the head of a NaN-filled buffer."""
    B_, d, n, L, H = 37, 5, 30, 3, 1
    Z0, _, V, B, C, _ = problem(rng, B_, d, n, L, H, dtype)
    want = ka.predict(Z0, V, B, C, "softmax", every_layer=every_layer, device="cpu")
    buffer = np.full((3 * B_,) + want.shape[1:], np.nan, dtype)
    got = ka.predict(Z0, V, B, C, "softmax", every_layer=every_layer, device="cuda",
                     out=buffer[:B_])
    assert np.shares_memory(got, buffer)
    assert np.isnan(buffer[B_:]).all(), "values written past out"
    assert_close(buffer[:B_], want, dtype, "predict into a host out")


@needs_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_predict_query_layer_switch(rng, dtype, monkeypatch):
    """LSA_NATIVE_KA_QUERY=0 (the full last layer) and the query layer agree on the device."""
    Z0, y, V, B, C, _ = problem(rng, 57, 5, 30, 3, 1, dtype)
    Zd = cuda.to_device(Z0)
    query = cuda.to_host(ka.predict(Zd, V, B, C, "softmax"))
    monkeypatch.setenv("LSA_NATIVE_KA_QUERY", "0")
    full = cuda.to_host(ka.predict(Zd, V, B, C, "softmax"))
    assert_close(query, full, dtype, "query vs full last layer")


@needs_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("kernel_choice", KERNELS_BACKWARD, indirect=True)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("shape", SHAPES)
def test_cuda_matches_the_cpu_kernels(rng, shape, act, dtype, kernel_choice):
    B_, d, n, L, H = shape
    Z0, y, V, B, C, dZ = bounded_problem(rng, shape, dtype, acts_for(act, H))
    acts = acts_for(act, H)
    dev = [cuda.to_device(a) for a in (Z0, y, V, B, C, dZ)]
    Zd, Vd, Bd, Cd = dev[0], dev[2], dev[3], dev[4]
    # Forward with predictions and context; results fresh device arrays (uninitialised memory:
    # the finiteness check catches unwritten entries as far as garbage is non-finite; the C++
    # device test poisons outputs with NaN explicitly).
    Z, p, ctx = ka.forward(Zd, Vd, Bd, Cd, acts, return_predictions=True, return_context=True)
    Z_c, p_c, ctx_c = ka.forward(Z0, V, B, C, acts, return_predictions=True, return_context=True,
                                 device="cpu")
    (k_Z, k_p, k_ctx), _ = forward_conditions(rng, Z0, V, B, C, acts)
    assert_close(Z, Z_c, dtype, "Z_L", k_Z)
    assert_close(p, p_c, dtype, "predictions", k_p)
    assert_close(ctx.data, ctx_c.data, dtype, "context", k_ctx)
    # VJP: without and with the context are bitwise equal; both match the CPU. The warp kernel's
    # recomputing workspace (its default) runs another launch grid than the context's VJP, so its
    # batch sums (dV, dB, dC) may group the prompts differently (equal to rounding); per-prompt dZ0
    # stays bitwise.
    kappa_vjp, kappa_loss = gradient_conditions(rng, Z0, y, V, B, C, dZ, acts)
    expected = ka.vjp(Z0, V, B, C, acts, dZ, device="cpu")
    recomputed = ka.vjp(Zd, Vd, Bd, Cd, acts, dev[5])
    saved = ka.vjp(Zd, Vd, Bd, Cd, acts, dev[5], context=ctx)
    for a, b, e, k, what in zip(recomputed, saved, expected, kappa_vjp, ("dV", "dB", "dC", "dZ0")):
        if kernel_choice == "warp" and what != "dZ0":
            assert_close(a, b, dtype, "vjp recomputed vs saved " + what, k)
        else:
            np.testing.assert_array_equal(cuda.to_host(a), cuda.to_host(b))
        assert_close(a, e, dtype, "vjp " + what, k)
    # loss_and_grad
    out = ka.loss_and_grad(Zd, dev[1], Vd, Bd, Cd, acts, input_grad=True, return_predictions=True)
    out_c = ka.loss_and_grad(Z0, y, V, B, C, acts, input_grad=True, return_predictions=True,
                             device="cpu")
    assert_close(np.float64(out[0]), np.float64(out_c[0]), dtype, "loss", kappa_loss[0])
    for a, b, k, what in zip(out[1:], out_c[1:], kappa_loss[1:],
                             ("dV", "dB", "dC", "dZ0", "predictions")):
        assert_close(a, b, dtype, "loss " + what, k)
    # numpy through device="cuda": the same bits as device arrays.
    loss2 = ka.loss_and_grad(Z0, y, V, B, C, acts, device="cuda")
    assert loss2[0] == out[0]
    np.testing.assert_array_equal(loss2[1], cuda.to_host(out[1]))


@needs_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("kernel_choice", KERNELS_BACKWARD, indirect=True)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("shape", SHAPES)
def test_cuda_predict_vjp_matches_the_cpu(rng, shape, act, dtype, kernel_choice):
    """predict_vjp on the GPU (loss_and_grad's kernel seeded with −d_y) vs the CPU's, to the
    κ-raised tolerances of assert_close; without input_grad the same parameter gradients."""
    Z0, y, V, B, C, _ = bounded_problem(rng, shape, dtype, acts_for(act, shape[-1]))
    acts = acts_for(act, shape[-1])
    args64 = [a.astype(np.float64) for a in (Z0, V, B, C, y)]
    pvjp = lambda Z0_, V_, B_, C_, y_: ka.predict_vjp(Z0_, V_, B_, C_, acts, y_, device="cpu")  # noqa: E731
    kappa = relative_conditions(pvjp, args64, pvjp(*args64), rng)
    want = ka.predict_vjp(Z0, V, B, C, acts, y, device="cpu")
    dev = [cuda.to_device(a) for a in (Z0, V, B, C, y)]
    got = ka.predict_vjp(*dev[:4], acts, dev[4])
    for a, b, k, what in zip(got, want, kappa, ("dV", "dB", "dC", "dZ0")):
        assert_close(a, b, dtype, "predict_vjp " + what, k)
    no_input = ka.predict_vjp(*dev[:4], acts, dev[4], input_grad=False)
    assert no_input[3] is None
    for a, b, k, what in zip(no_input[:3], want[:3], kappa, ("dV", "dB", "dC")):
        assert_close(a, b, dtype, "predict_vjp (no input gradient) " + what, k)


@needs_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("kernel_choice", KERNELS_BACKWARD, indirect=True)
def test_cuda_batch_sums_are_deterministic(rng, kernel_choice):
    Z0, y, V, B, C, dZ = problem(rng, 20000, 5, 30, 3, 1, np.float32)
    runs = [ka.loss_and_grad(Z0, y, V, B, C, "softmax", device="cuda") for _ in range(2)]
    assert runs[0][0] == runs[1][0]
    for a, b in zip(runs[0][1:], runs[1][1:]):
        np.testing.assert_array_equal(a, b)
    # exp logits at scale 0.5 overflow float32 in ~1 of 8 draws of 20000 prompts (the CPU raises the
    # same FloatingPointError); at 0.25 the largest |dZ0| over 40 draws was 1.5e5.
    Z0, y, V, B, C, dZ = problem(rng, 20000, 5, 30, 3, 1, np.float32, scale=0.25)
    v = [ka.vjp(Z0, V, B, C, "exp", dZ, device="cuda") for _ in range(2)]
    for a, b in zip(v[0], v[1]):
        np.testing.assert_array_equal(a, b)


@needs_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_global_workspace_for_large_prompts(rng, dtype):
    """A prompt whose workspace exceeds shared memory runs from a global-memory scratch."""
    Z0, y, V, B, C, dZ = problem(rng, 3, 6, 600, 2, 1, dtype)
    out = ka.loss_and_grad(Z0, y, V, B, C, "softmax", input_grad=True, device="cuda")
    out_c = ka.loss_and_grad(Z0, y, V, B, C, "softmax", input_grad=True, device="cpu")
    for a, b in zip(out[1:], out_c[1:]):
        assert_close(a, b, dtype, "large prompt")


@interop
@needs_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_torch_tensors(rng, dtype):
    torch = _import_or_skip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA")
    Z0, y, V, B, C, dZ = problem(rng, 11, 3, 8, 2, 1, dtype)
    t = [torch.from_numpy(a).cuda() for a in (Z0, y, V, B, C, dZ)]
    Z, ctx = ka.forward(t[0], t[2], t[3], t[4], "relu", return_context=True)
    assert isinstance(Z, torch.Tensor) and Z.is_cuda and isinstance(ctx.data, torch.Tensor)
    assert_close(Z, ka.forward(Z0, V, B, C, "relu", device="cpu"), dtype, "torch forward")
    got = ka.vjp(t[0], t[2], t[3], t[4], "relu", t[5], context=ctx)
    for a, b in zip(got, ka.vjp(Z0, V, B, C, "relu", dZ, device="cpu")):
        assert isinstance(a, torch.Tensor)
        assert_close(a, b, dtype, "torch vjp")
    y_hat = ka.predict(t[0], t[2], t[3], t[4], "relu")
    assert isinstance(y_hat, torch.Tensor) and y_hat.is_cuda and tuple(y_hat.shape) == (11,)
    assert_close(y_hat, ka.predict(Z0, V, B, C, "relu", device="cpu"), dtype, "torch predict")


@needs_gpu
@pytest.mark.cuda
def test_cuda_more_than_2_to_the_31_elements(rng):
    """64-bit batch offsets: B·(d+1)·(n+1) > 2^31 with d = n = 1. All prompts equal but the last
    one, so the batch mean and the last prediction are checked against two CPU prompts."""
    d, n, L = 1, 1, 1
    B = 2**31 // ((d + 1) * (n + 1)) + 3
    Z0, y, V, Bq, Ck, _ = problem(rng, 2, d, n, L, 1, np.float32, scale=1.0)
    big = np.empty((B, d + 1, n + 1), np.float32)
    big[:] = Z0[0]
    big[-1] = Z0[1]
    y_big = np.full(B, y[0], np.float32)
    y_big[-1] = y[1]
    Zd, yd = cuda.to_device(big), cuda.to_device(y_big)
    del big, y_big
    loss, dV, dB, dC, preds = ka.loss_and_grad(Zd, yd, V, Bq, Ck, "exp", return_predictions=True)
    first = ka.loss_and_grad(Z0[:1], y[:1], V, Bq, Ck, "exp", return_predictions=True, device="cpu")
    last = ka.loss_and_grad(Z0[1:], y[1:], V, Bq, Ck, "exp", return_predictions=True, device="cpu")
    w = 1.0 / B
    for got, a, b in zip((loss, dV, dB, dC), first[:4], last[:4]):
        expected = (1 - w) * np.asarray(a, np.float64) + w * np.asarray(b, np.float64)
        assert np.max(np.abs(cuda.to_host(got) - expected)) <= 1e-5 * np.max(np.abs(expected))
    tail = cuda.to_host(preds)[-2:]
    np.testing.assert_allclose(tail[0], first[4][0], rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(tail[1], last[4][0], rtol=2e-5, atol=1e-6)
