"""The CUDA backend of lsa_native.lsa: CUDA vs the numpy reference (the same rounding bounds as the
CPU tests) and vs the CPU kernels, poisoned outputs, odd sizes, d = 1, N = 1, a batch of more than
2^31 elements, PyTorch / CuPy / DLPack inputs, bad device arrays, determinism.

GPU tests carry the ``cuda`` marker and skip with a reason where no GPU is visible; the tests at the
top run everywhere (device selection and the errors that need no GPU).
"""
from __future__ import annotations

import os

import numpy as np
from conftest import HostBackedCudaArray
import pytest

import lsa_native
from lsa_native import cuda, lsa
from lsa_native.reference import lsa as ref
from conftest import assert_within_probable_rounding
from test_lsa import n_ops, random_problem

DTYPES = [np.float32, np.float64]
SHAPES = [(1, 1, 1), (3, 1, 5), (7, 4, 1), (5, 3, 7), (131, 5, 30), (300, 2, 17), (130, 20, 100),
          (37, 33, 3), (2, 7, 700)]

needs_gpu = pytest.mark.skipif(
    not lsa_native.cuda_available(),
    reason=("no CUDA device visible" if lsa_native.cuda_compiled()
            else "lsa_native was built without CUDA kernels"),
)


class FakeCudaArray:
    """Just a __cuda_array_interface__ (never dereferenced: the checks fail before any GPU call)."""

    def __init__(self, shape, typestr="<f4", strides=None, ptr=0x1000, readonly=False):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr,
                                         "data": (ptr, readonly), "strides": strides, "version": 3}


# ---- everywhere ---------------------------------------------------------------------------------

def test_cuda_compiled_matches_the_build():
    """LSA_NATIVE_EXPECT_CUDA=1/0 (set by the GPU check script and CI) states what the build was."""
    expected = os.environ.get("LSA_NATIVE_EXPECT_CUDA")
    if expected is None:
        pytest.skip("LSA_NATIVE_EXPECT_CUDA not set")
    assert lsa_native.cuda_compiled() is (expected == "1")
    assert cuda.compiled() == lsa_native.cuda_compiled()
    if not lsa_native.cuda_compiled():
        assert not lsa_native.cuda_available()


@pytest.mark.skipif(lsa_native.cuda_available(), reason="a GPU is visible")
@pytest.mark.parametrize("fn", ["predict", "loss_and_grad", "forward", "vjp", "predict_vjp"])
def test_device_cuda_without_gpu_is_a_clear_error(rng, fn):
    (E, W_pv, W_kq, y_q), _ = random_problem(rng, 3, 2, 4, np.float64)
    args = {"predict": (E, W_pv, W_kq), "forward": (E, W_pv, W_kq), "vjp": (E, W_pv, W_kq, E),
            "loss_and_grad": (E, y_q, W_pv, W_kq), "predict_vjp": (E, W_pv, W_kq, y_q)}[fn]
    why = "no CUDA device" if lsa_native.cuda_compiled() else "no CUDA kernels"
    with pytest.raises(ValueError, match=why):
        getattr(lsa, fn)(*args, device="cuda")
    with pytest.raises(ValueError):
        cuda.DeviceArray([3], np.dtype(np.float32))


def test_release_memory_without_a_gpu_is_a_no_op():
    if not lsa_native.cuda_available():
        assert cuda.release_memory() is None


@pytest.mark.skipif(lsa_native.cuda_available(), reason="a GPU is visible")
def test_gpu_variates_without_gpu_are_a_clear_error():
    with pytest.raises(ValueError):
        cuda.philox4x32(np.zeros((3, 4), np.uint32), 1)
    with pytest.raises(ValueError):
        cuda.random_normals(10, seed=1)


def test_device_argument_is_checked(rng):
    (E, W_pv, W_kq, _), _ = random_problem(rng, 2, 2, 3, np.float32)
    with pytest.raises(ValueError, match="device: expected one of"):
        lsa.predict(E, W_pv, W_kq, device="gpu")
    assert cuda.resolve_device("auto", E=E, W=W_pv) == "cpu"
    fake = FakeCudaArray(E.shape)
    assert cuda.resolve_device("auto", E=E, W=fake) == "cuda"
    with pytest.raises(ValueError, match="device='cpu' but E is a CUDA array"):
        lsa.predict(fake, W_pv, W_kq, device="cpu")


def test_bad_cuda_arrays_are_clear_errors_before_any_gpu_call(rng):
    """Layout, dtype and shape of CUDA arrays are checked in Python before the native call."""
    (E, W_pv, W_kq, y_q), _ = random_problem(rng, 2, 2, 3, np.float32)
    B, rows, cols = E.shape
    with pytest.raises(TypeError, match="E: expected dtype float32 or float64, got float16"):
        lsa.predict(FakeCudaArray(E.shape, "<f2"), W_pv, W_kq)
    with pytest.raises(ValueError, match="E: CUDA arrays must be C-contiguous"):
        lsa.predict(FakeCudaArray(E.shape, "<f4", strides=(4 * rows * cols, 4, 4 * rows)), W_pv, W_kq)
    with pytest.raises(ValueError, match="E: expected a 3-d array"):
        lsa.predict(FakeCudaArray((B, rows * cols)), W_pv, W_kq)
    with pytest.raises(ValueError, match="N >= 1"):
        lsa.predict(FakeCudaArray((B, rows, 1)), W_pv, W_kq)
    e = FakeCudaArray(E.shape)
    with pytest.raises(TypeError, match="W_pv: expected dtype float32"):
        lsa.predict(e, FakeCudaArray(W_pv.shape, "<f8"), W_kq)
    with pytest.raises(ValueError, match=r"W_kq: expected shape \(3, 3\)"):
        lsa.predict(e, W_pv, FakeCudaArray((3, 4)))
    with pytest.raises(ValueError, match="y_q: expected shape"):
        lsa.loss_and_grad(e, np.zeros(B + 1), W_pv, W_kq)
    with pytest.raises(TypeError, match="out: expected a CUDA array"):
        lsa.predict(e, W_pv, W_kq, out=np.empty(B, np.float32))
    with pytest.raises(ValueError, match="out: must be writeable"):
        lsa.predict(e, W_pv, W_kq, out=FakeCudaArray((B,), readonly=True))
    with pytest.raises(TypeError, match="out: expected a numpy.ndarray"):
        lsa.predict(E, FakeCudaArray(W_pv.shape), W_kq, out=FakeCudaArray((B,)))
    with pytest.raises(ValueError, match="masked"):
        fake = FakeCudaArray(E.shape)
        fake.__cuda_array_interface__["mask"] = object()
        lsa.predict(fake, W_pv, W_kq)

    class Refusing:  # e.g. a torch CUDA tensor that requires grad
        def __dlpack_device__(self):
            return (2, 0)  # kDLCUDA, device 0

        @property
        def __cuda_array_interface__(self):
            raise RuntimeError("no export of a tensor that requires grad")

    with pytest.raises(TypeError, match=r"^E: cannot read the CUDA array \(RuntimeError: no export "
                                        r"of a tensor that requires grad\)$"):
        lsa.predict(Refusing(), W_pv, W_kq)


# ---- the route of a GPU call on an emulated GPU (runs everywhere) ------------------------------
# Host memory presented through __cuda_array_interface__, and the native dispatcher told to run the
# CPU kernels where it would launch the CUDA ones (_core.emulate_cuda_on_cpu_for_tests): checks the
# route of lsa.py → array views → validate() → backend (which array goes where, outputs on E's
# side, out=, optional outputs, mixed host/CUDA operands) without a GPU.

@pytest.fixture
def emulated_gpu(monkeypatch):
    from lsa_native import _core

    monkeypatch.setattr(cuda, "empty", lambda template, shape, dtype, device:
                        HostBackedCudaArray(np.full(shape, np.nan, dtype)))
    _core.emulate_cuda_on_cpu_for_tests(True)
    yield
    _core.emulate_cuda_on_cpu_for_tests(False)


def test_array_adapter_reads_every_array_protocol(rng):
    """One view per operand (pointer, shape, byte strides, dtype, device) from numpy, from
    __cuda_array_interface__ (a host pointer presented as a CUDA array: parsed, never launched)
    and from __dlpack__ (numpy and PyTorch CPU tensors), without copies."""
    from lsa_native import _core

    E = rng.standard_normal((2, 3, 4))
    info = _core.array_info(E, "E")
    assert (info["ptr"], info["shape"], info["strides"], info["dtype"], info["device"]) == (
        E.ctypes.data, (2, 3, 4), E.strides, "float64", -1)
    T = np.asfortranarray(E.astype(np.float32))
    assert _core.array_info(T)["strides"] == T.strides
    assert _core.array_info(E[:, ::2])["strides"] == E[:, ::2].strides
    fake = FakeCudaArray((5, 3), "<f8", strides=(8, 40), ptr=E.ctypes.data, readonly=True)
    info = _core.array_info(fake)
    assert (info["ptr"], info["shape"], info["strides"], info["dtype"], info["readonly"]) == (
        E.ctypes.data, (5, 3), (8, 40), "float64", True)
    assert info["device"] >= 0
    assert _core.array_info(FakeCudaArray((2, 2), "<f2"))["dtype"] == "float16"

    class DLPackOnly:
        def __init__(self, a):
            self._a = a

        def __dlpack__(self, stream=None):
            return self._a.__dlpack__()

    info = _core.array_info(DLPackOnly(E[1:]), "E")
    assert (info["ptr"], info["shape"], info["strides"], info["dtype"], info["device"]) == (
        E[1:].ctypes.data, (1, 3, 4), (96, 32, 8), "float64", -1)
    assert _core.array_info(DLPackOnly(np.zeros(3, np.int32)))["dtype"] == "int32"
    # DLPack-only host arrays: read in place by the core, converted without copies by lsa.py.
    W = 0.3 * rng.standard_normal((2, 3, 3))
    want = lsa.predict(E, W[0], W[1])
    np.testing.assert_array_equal(_core.lsa_predict(DLPackOnly(E), W[0], W[1]), want)
    np.testing.assert_array_equal(lsa.predict(DLPackOnly(E), DLPackOnly(W[0]), W[1]), want)
    with pytest.raises(TypeError, match="out: expected an array"):
        lsa.predict(E, W[0], W[1], out=[0.0, 0.0])
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(E)
    info = _core.array_info(t.transpose(1, 2), "E")
    assert (info["ptr"], info["shape"], info["strides"], info["device"]) == (
        E.ctypes.data, (2, 4, 3), (96, 8, 32), -1)
    np.testing.assert_array_equal(_core.lsa_predict(t, W[0], W[1]), lsa.predict(E, W[0], W[1]))


@pytest.mark.skipif(lsa_native.cuda_available(), reason="a GPU is visible")
def test_cuda_array_interface_without_gpu_is_refused_before_any_launch(rng):
    """A parsed CUDA view routes the call to CUDA; without a GPU the dispatcher refuses with a
    clear error instead of touching the pointer."""
    (E, W_pv, W_kq, y_q), _ = random_problem(rng, 3, 2, 4, np.float64)
    why = "no CUDA device" if lsa_native.cuda_compiled() else "no CUDA kernels"
    fake = FakeCudaArray(E.shape, "<f8", ptr=E.ctypes.data)
    for call in (lambda: lsa.predict(fake, W_pv, W_kq), lambda: lsa.loss_and_grad(fake, y_q, W_pv, W_kq),
                 lambda: lsa.forward(E, FakeCudaArray(W_pv.shape, "<f8", ptr=W_pv.ctypes.data), W_kq)):
        with pytest.raises(ValueError, match=why):
            call()


@pytest.mark.parametrize("dtype", DTYPES)
def test_device_path_glue_on_an_emulated_gpu(rng, emulated_gpu, dtype):
    (E, W_pv, W_kq, y_q), _ = random_problem(rng, 9, 3, 6, dtype)
    d_F = rng.standard_normal(E.shape).astype(dtype)
    g = HostBackedCudaArray
    cpu = dict(device="cpu")
    # Every input on the "device"; results are device arrays equal to the CPU's bit for bit.
    y = lsa.predict(g(E), g(W_pv), g(W_kq))
    assert isinstance(y, HostBackedCudaArray)
    np.testing.assert_array_equal(y.a, lsa.predict(E, W_pv, W_kq, **cpu))
    loss, d_pv, d_kq, y_hat = lsa.loss_and_grad(g(E), g(y_q), g(W_pv), g(W_kq), return_predictions=True)
    loss_c, d_pv_c, d_kq_c, y_hat_c = lsa.loss_and_grad(E, y_q, W_pv, W_kq, return_predictions=True, **cpu)
    assert loss == loss_c
    for a, b in ((d_pv, d_pv_c), (d_kq, d_kq_c), (y_hat, y_hat_c)):
        np.testing.assert_array_equal(a.a, b)
    assert len(lsa.loss_and_grad(g(E), y_q, W_pv, g(W_kq))) == 3
    F = lsa.forward(g(E), W_pv, g(W_kq))  # mixed: host parameters
    np.testing.assert_array_equal(F.a, lsa.forward(E, W_pv, W_kq, **cpu))
    got = lsa.vjp(g(E), g(W_pv), g(W_kq), g(d_F))
    for a, b in zip(got, lsa.vjp(E, W_pv, W_kq, d_F, **cpu)):
        np.testing.assert_array_equal(a.a, b)
    d_pv, d_kq, d_E = lsa.vjp(g(E), W_pv, W_kq, d_F, with_input_grad=False)
    assert d_E is None
    np.testing.assert_array_equal(d_kq.a, got[1].a)
    got_pred = lsa.predict_vjp(g(E), g(W_pv), g(W_kq), g(y_q))
    for a, b in zip(got_pred, lsa.predict_vjp(E, W_pv, W_kq, y_q, **cpu)):
        np.testing.assert_array_equal(a.a, b)
    assert lsa.predict_vjp(g(E), W_pv, W_kq, y_q, with_input_grad=False)[2] is None
    # out= device arrays are written in place and returned.
    out = g(np.full(E.shape[0], np.nan, dtype))
    assert lsa.predict(g(E), W_pv, W_kq, out=out) is out
    np.testing.assert_array_equal(out.a, y.a)
    F_out = g(np.full(E.shape, np.nan, dtype))
    assert lsa.forward(g(E), W_pv, W_kq, out=F_out) is F_out
    np.testing.assert_array_equal(F_out.a, F.a)
    # numpy with device="cuda": numpy results.
    y_np = lsa.predict(E, W_pv, W_kq, device="cuda")
    assert isinstance(y_np, np.ndarray)
    np.testing.assert_array_equal(y_np, y.a)
    loss_np, d_pv_np, _ = lsa.loss_and_grad(E, y_q, W_pv, W_kq, device="cuda")
    assert loss_np == loss_c and isinstance(d_pv_np, np.ndarray)
    np.testing.assert_array_equal(lsa.vjp(E, W_pv, W_kq, d_F, device="cuda")[2], got[2].a)
    # Host parameters are converted to E's dtype like on the CPU path.
    np.testing.assert_array_equal(lsa.predict(g(E), W_pv.astype(np.float16), W_kq).a,
                                  lsa.predict(E, W_pv.astype(np.float16), W_kq, **cpu))


# ---- on a GPU -----------------------------------------------------------------------------------
def interop(test):
    """Ignore the warnings PyTorch and CuPy emit from their own modules (deprecations, version
    notes): they are not about this package, and pytest turns warnings into errors."""
    for category in ("DeprecationWarning", "UserWarning", "FutureWarning"):
        for module in ("torch", "cupy", "cupyx"):
            test = pytest.mark.filterwarnings(f"ignore::{category}:{module}")(test)
    return test


def _import_or_skip(name):
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pytest.importorskip(name)


def _host(a):
    return cuda.to_host(a)


def _check_predict(y, E64, P64, K64, dtype, d, N, what):
    assert_within_probable_rounding(_host(y), ref.predict_naive(E64, P64, K64),
                                    ref.predict_tokens(np.abs(E64), np.abs(P64), np.abs(K64)),
                                    n_ops(d, N), dtype, what)


@needs_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,d,N", SHAPES)
def test_cuda_predict_and_forward_match_reference(rng, B, d, N, dtype):
    (E, W_pv, W_kq, _), (E64, P64, K64, _) = random_problem(rng, B, d, N, dtype, False)
    E_dev = cuda.to_device(E)
    # Poisoned outputs: every element must be written.
    y_dev = cuda.to_device(np.full(B, np.nan, dtype))
    out = lsa.predict(E_dev, cuda.to_device(W_pv), cuda.to_device(W_kq), out=y_dev)
    assert out is y_dev
    _check_predict(y_dev, E64, P64, K64, dtype, d, N, "cuda predict")
    F_dev = cuda.to_device(np.full(E.shape, np.nan, dtype))
    lsa.forward(E_dev, W_pv, W_kq, out=F_dev)  # host parameters with device prompts
    F = F_dev.copy_to_host()
    assert_within_probable_rounding(F, ref.forward_naive(E64, P64, K64),
                                    ref.forward_gram(np.abs(E64), np.abs(P64), np.abs(K64)),
                                    n_ops(d, N) + 2 * d, dtype, "cuda forward")
    # numpy in, numpy out through device="cuda"; equal to the device-array path bit for bit.
    y_np = lsa.predict(E, W_pv, W_kq, device="cuda")
    assert isinstance(y_np, np.ndarray) and y_np.dtype == dtype
    np.testing.assert_array_equal(y_np, y_dev.copy_to_host())
    np.testing.assert_array_equal(lsa.forward(E, W_pv, W_kq, device="cuda"), F)


@needs_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,d,N", SHAPES)
def test_cuda_loss_and_grad_matches_reference(rng, B, d, N, dtype):
    (E, W_pv, W_kq, y_q), (E64, P64, K64, y64) = random_problem(rng, B, d, N, dtype)
    loss, g_pv, g_kq, y_hat = lsa.loss_and_grad(cuda.to_device(E), cuda.to_device(y_q),
                                                cuda.to_device(W_pv), cuda.to_device(W_kq),
                                                return_predictions=True)
    assert isinstance(g_pv, cuda.DeviceArray) and g_pv.dtype == dtype
    g_pv, g_kq, y_hat = map(_host, (g_pv, g_kq, y_hat))
    loss_ref, g_pv_ref, g_kq_ref = ref.loss_and_grad_tokens(E64, y64, P64, K64)
    loss_abs, g_pv_abs, g_kq_abs = ref.loss_and_grad_tokens(
        np.abs(E64), -np.abs(y64), np.abs(P64), np.abs(K64))
    ops = n_ops(d, N)
    assert_within_probable_rounding(loss, loss_ref, loss_abs, ops, dtype, "cuda loss")
    assert_within_probable_rounding(g_pv, g_pv_ref, g_pv_abs, ops, dtype, "cuda dW_pv")
    assert_within_probable_rounding(g_kq, g_kq_ref, g_kq_abs, ops, dtype, "cuda dW_kq")
    _check_predict(y_hat, E64, P64, K64, dtype, d, N, "cuda y_hat")
    assert np.all(g_pv[:d] == 0) and np.all(g_kq[:, d] == 0)
    # vs the CPU kernels: float64 to 1e-12 relative to the magnitudes (both are within rounding
    # of the reference; this states the bound directly).
    loss_cpu, g_pv_cpu, g_kq_cpu = lsa.loss_and_grad(E, y_q, W_pv, W_kq, device="cpu")
    if dtype == np.float64:
        assert abs(loss - loss_cpu) <= 1e-12 * loss_abs
        assert np.all(np.abs(g_pv - g_pv_cpu) <= 1e-12 * g_pv_abs)
        assert np.all(np.abs(g_kq - g_kq_cpu) <= 1e-12 * g_kq_abs)
    # numpy through device="cuda" gives the same bits as device arrays.
    loss2, g_pv2, g_kq2 = lsa.loss_and_grad(E, y_q, W_pv, W_kq, device="cuda")
    assert loss2 == loss
    np.testing.assert_array_equal(g_pv2, g_pv)
    np.testing.assert_array_equal(g_kq2, g_kq)


@needs_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,d,N", SHAPES)
def test_cuda_vjp_matches_reference(rng, B, d, N, dtype):
    (E, W_pv, W_kq, _), (E64, P64, K64, _) = random_problem(rng, B, d, N, dtype, False)
    d_F = rng.standard_normal(E.shape).astype(dtype)
    got = lsa.vjp(cuda.to_device(E), cuda.to_device(W_pv), cuda.to_device(W_kq), cuda.to_device(d_F))
    got = [_host(a) for a in got]
    expected = ref.vjp_naive(E64, P64, K64, d_F.astype(np.float64))
    magnitude = ref.vjp_gram(np.abs(E64), np.abs(P64), np.abs(K64), np.abs(d_F.astype(np.float64)))
    for name, a, e, m in zip(("dW_pv", "dW_kq", "dE"), got, expected, magnitude):
        assert a.dtype == dtype
        assert_within_probable_rounding(a, e, m, n_ops(d, N) + 4 * d + 10, dtype, "cuda vjp " + name)
        if dtype == np.float64:
            cpu = lsa.vjp(E, W_pv, W_kq, d_F, device="cpu")[("dW_pv", "dW_kq", "dE").index(name)]
            assert np.all(np.abs(a - cpu) <= 1e-12 * m), name
    d_W_pv, d_W_kq, d_E = lsa.vjp(E, W_pv, W_kq, d_F, with_input_grad=False, device="cuda")
    assert d_E is None
    np.testing.assert_array_equal(d_W_pv, got[0])
    np.testing.assert_array_equal(d_W_kq, got[1])
    cuda.release_memory()  # the scratch pool handed back: the next call maps fresh memory
    again = lsa.vjp(E, W_pv, W_kq, d_F, device="cuda")
    for a, b in zip(again, got):
        np.testing.assert_array_equal(a, b)  # fixed-order sums: bitwise reproducible


@needs_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("old", [False, True], ids=["tiled", "old"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,d,N", [(1, 1, 1), (3, 2, 150), (5, 8, 70), (4, 9, 31), (600, 20, 100),
                                   (3, 64, 5)])
def test_cuda_full_kernels_old_and_tiled_match_the_cpu(rng, monkeypatch, B, d, N, dtype, old):
    # Both full forward / VJP kernel families (LSA_NATIVE_CUDA_OLD_KERNELS=1 selects the old one at
    # each launch) against the CPU kernels, entrywise within the rounding bound of the sums of
    # products (magnitudes: the reference on absolute values; both sides' rounding counted), not
    # relative to the largest entry, which a cancelling entry at B = d = N = 1 can fail;
    # d = 64 fits the VJP kernels in float32 only, on a GPU with 227 KB of shared memory per block
    # (float64 is a clear error for both).
    if old:
        monkeypatch.setenv("LSA_NATIVE_CUDA_OLD_KERNELS", "1")
    (E, W_pv, W_kq, _), _ = random_problem(rng, B, d, N, dtype, False)
    d_F = rng.standard_normal(E.shape).astype(dtype)
    if d == 64 and dtype == np.float64:
        with pytest.raises(ValueError, match="shared memory"):
            lsa.vjp(E, W_pv, W_kq, d_F, device="cuda")
        return
    got = [lsa.forward(E, W_pv, W_kq, device="cuda")]
    try:
        got += list(lsa.vjp(E, W_pv, W_kq, d_F, device="cuda"))
    except ValueError as exc:  # d = 64 needs ~227 KB per block: H100 / H200 only
        if d == 64 and "shared memory" in str(exc):
            pytest.skip(f"this GPU's shared memory is too small for d = 64: {exc}")
        raise
    got.append(lsa.vjp(E, W_pv, W_kq, d_F, with_input_grad=False, device="cuda")[1])
    want = [lsa.forward(E, W_pv, W_kq, device="cpu")]
    want += list(lsa.vjp(E, W_pv, W_kq, d_F, device="cpu"))
    want.append(want[2])
    aE, aP, aK, aF = (np.abs(a.astype(np.float64)) for a in (E, W_pv, W_kq, d_F))
    magnitude = [ref.forward_gram(aE, aP, aK), *ref.vjp_gram(aE, aP, aK, aF)]
    magnitude.append(magnitude[2])
    ops = n_ops(d, N) + 4 * d + 10 + B  # + B: the batch sums of dW
    for name, a, b, m in zip(("F", "dW_pv", "dW_kq", "dE", "dW_kq without dE"), got, want, magnitude):
        assert a.dtype == dtype and a.shape == b.shape
        assert_within_probable_rounding(a, b, m, ops, dtype, name)


@needs_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,d,N", SHAPES)
def test_cuda_predict_vjp_matches_the_cpu(rng, B, d, N, dtype):
    (E, W_pv, W_kq, d_y), _ = random_problem(rng, B, d, N, dtype)
    got = [_host(a) for a in lsa.predict_vjp(cuda.to_device(E), cuda.to_device(W_pv),
                                             cuda.to_device(W_kq), cuda.to_device(d_y))]
    want = lsa.predict_vjp(E, W_pv, W_kq, d_y, device="cpu")
    # Entrywise within the rounding bound (as above): magnitudes from the VJP on absolute values.
    d_F = np.zeros(E.shape)
    d_F[:, d, N] = np.abs(d_y)
    magnitude = ref.vjp_gram(*(np.abs(a.astype(np.float64)) for a in (E, W_pv, W_kq)), d_F)
    for name, a, b, m in zip(("dW_pv", "dW_kq", "dE"), got, want, magnitude):
        assert a.dtype == dtype and a.shape == b.shape
        assert_within_probable_rounding(a, b, m, n_ops(d, N) + 4 * d + 10 + B, dtype, name)


@needs_gpu
@pytest.mark.cuda
def test_cuda_batch_sums_are_deterministic(rng):
    (E, W_pv, W_kq, y_q), _ = random_problem(rng, 20000, 5, 30, np.float32)
    args = [cuda.to_device(a) for a in (E, y_q, W_pv, W_kq)]
    first = lsa.loss_and_grad(*args)
    for _ in range(2):
        again = lsa.loss_and_grad(*args)
        assert again[0] == first[0]
        np.testing.assert_array_equal(_host(again[1]), _host(first[1]))
        np.testing.assert_array_equal(_host(again[2]), _host(first[2]))
    d_F = cuda.to_device(rng.standard_normal(E.shape).astype(np.float32))
    v1 = [_host(a) for a in lsa.vjp(args[0], args[2], args[3], d_F)]
    v2 = [_host(a) for a in lsa.vjp(args[0], args[2], args[3], d_F)]
    for a, b in zip(v1, v2):
        np.testing.assert_array_equal(a, b)


@interop
@needs_gpu
@pytest.mark.cuda
def test_cuda_more_than_2_to_the_31_elements():
    """B (d+1)(N+1) > 2^31 (d = 20, N = 100, B = 2^20, float32, 8.9 GB): 64-bit indexing. Checked
    on the first and last prompts (the last ones start beyond element 2^31) against the CPU."""
    torch = _import_or_skip("torch")
    B, d, N = 2**20, 20, 100
    assert B * (d + 1) * (N + 1) > 2**31
    if torch.cuda.mem_get_info()[0] < 12 * 2**30:
        pytest.skip("needs 12 GB of free GPU memory")
    gen = torch.Generator(device="cuda").manual_seed(1234)
    E = torch.randn((B, d + 1, N + 1), generator=gen, device="cuda", dtype=torch.float32)
    W_pv = torch.randn((d + 1, d + 1), generator=gen, device="cuda") / (d + 1)
    W_kq = torch.randn((d + 1, d + 1), generator=gen, device="cuda") / (d + 1)
    y = torch.full((B,), float("nan"), device="cuda")
    lsa.predict(E, W_pv, W_kq, out=y)
    P, K = W_pv.cpu().numpy(), W_kq.cpu().numpy()
    for sl in (slice(0, 512), slice(B - 2048, B)):
        E64, P64, K64 = (a.astype(np.float64) for a in (E[sl].cpu().numpy(), P, K))
        assert_within_probable_rounding(y[sl].cpu().numpy(), ref.predict_naive(E64, P64, K64),
                                        ref.predict_tokens(np.abs(E64), np.abs(P64), np.abs(K64)),
                                        n_ops(d, N), np.float32, f"predict {sl}")
    assert bool(torch.isfinite(y).all())
    del E
    torch.cuda.empty_cache()


@interop
@needs_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_torch_tensors(rng, dtype):
    torch = _import_or_skip("torch")
    (E, W_pv, W_kq, y_q), (E64, P64, K64, y64) = random_problem(rng, 77, 6, 19, dtype)
    t = lambda a: torch.from_numpy(a).cuda()
    y = lsa.predict(t(E), t(W_pv), t(W_kq))
    assert isinstance(y, torch.Tensor) and y.is_cuda and y.dtype == t(E).dtype
    _check_predict(y, E64, P64, K64, dtype, 6, 19, "torch predict")
    loss, g_pv, g_kq = lsa.loss_and_grad(t(E), t(y_q), t(W_pv), t(W_kq))
    assert isinstance(g_kq, torch.Tensor) and g_kq.is_cuda
    loss_ref, _, g_kq_ref = ref.loss_and_grad_tokens(E64, y64, P64, K64)
    _, _, g_kq_abs = ref.loss_and_grad_tokens(np.abs(E64), -np.abs(y64), np.abs(P64), np.abs(K64))
    assert_within_probable_rounding(g_kq.cpu().numpy(), g_kq_ref, g_kq_abs, n_ops(6, 19), dtype, "torch dW_kq")
    F = lsa.forward(t(E), t(W_pv), t(W_kq))
    assert isinstance(F, torch.Tensor) and tuple(F.shape) == E.shape
    np.testing.assert_array_equal(F.cpu().numpy(), lsa.forward(E, W_pv, W_kq, device="cuda"))
    # Errors: non-contiguous, wrong dtype, read through the same checks as above.
    with pytest.raises(ValueError, match="C-contiguous"):
        lsa.predict(t(E).transpose(1, 2).contiguous().transpose(1, 2), t(W_pv), t(W_kq))
    with pytest.raises(TypeError, match="dtype"):
        lsa.predict(t(E).half(), t(W_pv), t(W_kq))
    other = torch.float64 if dtype == np.float32 else torch.float32
    with pytest.raises(TypeError, match="E's dtype"):
        lsa.predict(t(E), t(W_pv).to(other), t(W_kq))
    with pytest.raises(ValueError, match="device='cpu'"):
        lsa.predict(t(E), W_pv, W_kq, device="cpu")
    with pytest.raises(TypeError, match=r"E: cannot read the CUDA array \(RuntimeError: "):
        lsa.predict(t(E).requires_grad_(True), W_pv, W_kq)
    # DeviceArray → torch without copies, both protocols.
    buf = cuda.to_device(E)
    via_cai = torch.as_tensor(buf, device="cuda")
    via_dlpack = torch.from_dlpack(buf)
    assert via_cai.data_ptr() == buf.ptr == via_dlpack.data_ptr()
    np.testing.assert_array_equal(via_dlpack.cpu().numpy(), E)


@interop
@needs_gpu
@pytest.mark.cuda
def test_cuda_dlpack_only_inputs(rng):
    """Arrays that expose only __dlpack__ (e.g. JAX) are read through the DLPack capsule."""
    torch = _import_or_skip("torch")

    class OnlyDLPack:
        def __init__(self, tensor):
            self._t = tensor

        def __dlpack__(self, stream=None):
            return self._t.__dlpack__(stream=stream)

        def __dlpack_device__(self):
            return self._t.__dlpack_device__()

    (E, W_pv, W_kq, _), (E64, P64, K64, _) = random_problem(rng, 13, 3, 9, np.float64)
    y = lsa.predict(OnlyDLPack(torch.from_numpy(E).cuda()), W_pv, W_kq)
    assert isinstance(y, cuda.DeviceArray)
    _check_predict(y, E64, P64, K64, np.float64, 3, 9, "dlpack predict")
    with pytest.raises(ValueError, match="C-contiguous"):
        lsa.predict(OnlyDLPack(torch.from_numpy(E).cuda().transpose(1, 2).contiguous().transpose(1, 2)),
                    W_pv, W_kq)


@interop
@needs_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_cupy_arrays(rng, dtype):
    cp = _import_or_skip("cupy")
    (E, W_pv, W_kq, y_q), (E64, P64, K64, _) = random_problem(rng, 41, 4, 11, dtype)
    y = lsa.predict(cp.asarray(E), cp.asarray(W_pv), cp.asarray(W_kq))
    assert isinstance(y, cp.ndarray) and y.dtype == dtype
    _check_predict(y, E64, P64, K64, dtype, 4, 11, "cupy predict")
    d_W_pv, d_W_kq, d_E = lsa.vjp(cp.asarray(E), cp.asarray(W_pv), cp.asarray(W_kq), cp.asarray(E))
    assert isinstance(d_E, cp.ndarray)
    np.testing.assert_array_equal(d_E.get(), lsa.vjp(E, W_pv, W_kq, E, device="cuda")[2])
    with pytest.raises(ValueError, match="C-contiguous"):
        lsa.predict(cp.asarray(E)[:, :, ::2], cp.asarray(W_pv), cp.asarray(W_kq))
    buf = cuda.to_device(E)
    np.testing.assert_array_equal(cp.asarray(buf).get(), E)
    np.testing.assert_array_equal(cp.from_dlpack(buf).get(), E)


@needs_gpu
@pytest.mark.cuda
def test_cuda_too_large_prompts_are_a_clear_error(rng):
    E = np.zeros((1, 201, 400), np.float64)  # 643 KB per prompt: more than any GPU's shared memory
    W = np.zeros((201, 201))
    with pytest.raises(ValueError, match="shared memory"):
        lsa.predict(E, W, W, device="cuda")


@needs_gpu
@pytest.mark.cuda
def test_cuda_philox_words_equal_the_cpu(rng):
    from lsa_native.sampling import random as srandom
    counters = rng.integers(0, 2**32, size=(5000, 4), dtype=np.uint64)
    seed = int(rng.integers(0, 2**63))
    np.testing.assert_array_equal(cuda.philox4x32(counters, seed), srandom.philox4x32(counters, seed))


@needs_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_normals_and_uniforms_equal_the_cpu(rng, dtype):
    """Same stream positions as the CPU: uniforms bit for bit; normals to the rounding of log, sin
    and cos (|Δz| ≤ a few ulp of r = sqrt(−2 log u) ≤ 5.8 (float) / 8.6 (double)); a shifted
    position or a wrong Box–Muller pairing differs by O(1)."""
    from lsa_native.sampling import random as srandom
    kw = dict(seed=int(rng.integers(0, 2**63)), step=int(rng.integers(0, 2**32)), prompt=7,
              stream=srandom.STREAMS["x"], start=3)
    n = 100_003
    z = cuda.to_host(cuda.random_normals(n, dtype=dtype, **kw))
    z_cpu = srandom.normals(n, dtype=dtype, **kw)
    tol = 8e-6 if dtype == np.float32 else 5e-14
    assert np.max(np.abs(z - z_cpu)) <= tol
    u = cuda.to_host(cuda.random_uniforms(n, dtype=dtype, **kw))
    np.testing.assert_array_equal(u, srandom.uniforms(n, dtype=dtype, **kw))
