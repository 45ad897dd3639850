"""lsa_native.torch: gradcheck (float64) for every function and activation, double-backward
refusal, values and gradients vs the numpy references and vs pure-PyTorch autograd of the same
equations (float32 and float64), zero-copy sharing, non-contiguous inputs, argument errors, and the
modules training in a torch.optim.Adam loop."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (optional extra 'torch')")

from torch.autograd.gradcheck import GradcheckError  # noqa: E402

import lsa_native.torch as lt  # noqa: E402
from lsa_native import data  # noqa: E402
from lsa_native import kernel_attention as ka  # noqa: E402
from lsa_native.reference import kernel_attention as ka_ref  # noqa: E402
from lsa_native.reference import lsa as lsa_ref  # noqa: E402

from conftest import conditioned_tolerance  # noqa: E402
from test_kernel_attention import kink_free, relative_conditions  # noqa: E402

ACTS = list(ka.ACTIVATIONS)
TOL = {torch.float64: 1e-11, torch.float32: 2e-4}  # relative to the largest entry


def t(a, dtype=torch.float64, grad=True):
    return torch.tensor(np.asarray(a), dtype=dtype).requires_grad_(grad)


def rel_err(a, b):
    a = a.detach().double().numpy() if isinstance(a, torch.Tensor) else np.asarray(a, np.float64)
    return np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)


def lsa_problem(rng, B, d, N, label_slot=True):
    E = rng.standard_normal((B, d + 1, N + 1))
    if not label_slot:
        E[:, d, N] = 0
    return E, rng.standard_normal((d + 1, d + 1)), rng.standard_normal((d + 1, d + 1))


def ka_problem(rng, B, d, n, L, H, scale=0.3):
    Z0 = rng.standard_normal((B, d + 1, n + 1))
    Z0[:, :d] /= np.sqrt(d)
    V = scale / n * rng.standard_normal((L, H, d + 1, d + 1))
    return Z0, V, scale * rng.standard_normal((L, H, d, d)), scale * rng.standard_normal((L, H, d, d))


def heads(act, H):
    return [act] if H == 1 else [act, ACTS[(ACTS.index(act) + 2) % 4]]


GRADCHECK_EPS = 1e-6  # torch.autograd.gradcheck's central-difference step


def ka_gradcheck_problem(rng, acts, B, d, n, L, H):
    """ka_problem, redrawn while a relu score lies within 10x gradcheck's step of relu's kink."""
    return kink_free(lambda: ka_problem(rng, B, d, n, L, H), 10 * GRADCHECK_EPS, acts)


# --- pure-PyTorch implementations of the same equations (autograd does the gradients) --------

def torch_lsa_forward(E, W_pv, W_kq):
    """ZFB (3.3): E + W^PV E (Eᵀ W^KQ E) / N."""
    N = E.shape[-1] - 1
    return E + W_pv @ E @ (E.transpose(1, 2) @ W_kq @ E) / N


def torch_kernel_attention(Z0, V, B, C, acts):
    """CCS (3), (12) with the query masked as a source."""
    d, n = Z0.shape[1] - 1, Z0.shape[2] - 1
    Z = Z0
    for l in range(V.shape[0]):
        X = Z[:, :d]
        out = Z
        for s, act in enumerate(acts):
            S = ((B[l, s] @ X).transpose(1, 2) @ (C[l, s] @ X))[:, :n, :]
            Hm = {"linear": lambda x: x, "relu": torch.relu, "exp": torch.exp,
                  "softmax": lambda x: torch.softmax(x, dim=1)}[act](S)
            out = out + V[l, s] @ (Z[:, :, :n] @ Hm)
        Z = out
    return Z


# --- gradcheck, float64 -------------------------------------------------------------------------

def gradcheck(fn, args):
    """torch's gradcheck with tolerances tightened from (atol 1e-5, rtol 1e-3) to what float64
    central differences (eps 1e-6, truncation and rounding ≈ 1e-10 relative) support here."""
    return torch.autograd.gradcheck(fn, args, eps=GRADCHECK_EPS, atol=1e-8, rtol=1e-6)


@pytest.mark.parametrize("B,d,N", [(1, 1, 1), (3, 2, 4)])
@pytest.mark.parametrize("fn", ["lsa_forward", "lsa_predict"])
def test_lsa_gradcheck(rng, fn, B, d, N):
    args = [t(a) for a in lsa_problem(rng, B, d, N)]
    assert gradcheck(getattr(lt, fn), args)


@pytest.mark.parametrize("save_context", [True, False])
@pytest.mark.parametrize("shape", [(2, 1, 1, 1, 1), (2, 2, 3, 2, 2)])
@pytest.mark.parametrize("act", ACTS)
def test_kernel_attention_gradcheck(rng, act, shape, save_context):
    args = [t(a) for a in ka_gradcheck_problem(rng, heads(act, shape[-1]), *shape)]
    fn = lambda *a: lt.kernel_attention(*a, heads(act, shape[-1]), save_context=save_context)
    assert gradcheck(fn, args)


@pytest.mark.parametrize("shape", [(2, 1, 1, 1, 1), (2, 2, 3, 2, 2), (9, 2, 4, 1, 1)])
@pytest.mark.parametrize("act", ACTS)
def test_kernel_attention_predict_gradcheck(rng, act, shape):
    """kernel_attention_predict (native predict / predict_vjp: the last layer's query column
    alone) by gradcheck; 9 prompts in float64 run a whole lane group (4 lanes on AVX2) and the
    per-prompt remainder."""
    args = [t(a) for a in ka_gradcheck_problem(rng, heads(act, shape[-1]), *shape)]
    assert gradcheck(lambda *a: lt.kernel_attention_predict(*a, heads(act, shape[-1])), args)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_kernel_attention_module_prediction_is_the_full_models_query_entry(rng, dtype):
    """KernelAttention(output="prediction") (kernel_attention_predict) equals −Z_L[:, d, n] of the
    full model and has its gradients, to rounding: float64 1e-12, float32 the suite's 2e-4 relative
    to each tensor's largest entry (over 10000 seeds the float32 gap had 99.9th percentile 2.4e-6
    and maximum 1.3e-5, in r's gradient; an earlier 1e-5 failed once). save_context is refused."""
    m = lt.KernelAttention(3, 2, 2, ["softmax", "exp"], scale=0.3, dtype=dtype, seed=0)
    Z0 = t(ka_problem(rng, 11, 3, 6, 2, 2)[0], dtype, grad=False)
    full = -lt.kernel_attention(Z0, m.value(), m.B, m.C, m.activations)[:, -1, -1]
    pred = m(Z0)
    tol = 1e-12 if dtype == torch.float64 else 2e-4
    assert pred.shape == (11,)
    assert (pred - full).abs().max() <= tol * full.abs().max()
    w = t(rng.standard_normal(11), dtype, grad=False)
    g_pred = torch.autograd.grad((w * pred).sum(), list(m.parameters()))
    g_full = torch.autograd.grad((w * full).sum(), list(m.parameters()))
    for a, b in zip(g_pred, g_full):
        assert (a - b).abs().max() <= tol * b.abs().max()
    with pytest.raises(ValueError, match="save_context: applies to output='full' alone"):
        lt.KernelAttention(3, 2, save_context=True)
    assert lt.KernelAttention(3, 2, output="full", save_context=True).save_context


def test_sparse_kernel_attention_gradcheck(rng):
    Z0, _, B, C = ka_problem(rng, 2, 2, 3, 2, 1)
    A, r = 0.3 * rng.standard_normal((2, 1, 2, 2)), 0.3 * rng.standard_normal((2, 1))
    fn = lambda Z, A_, r_, B_, C_: lt.kernel_attention(Z, lt.sparse_value(A_, r_), B_, C_, "exp")
    assert gradcheck(fn, [t(a) for a in (Z0, A, r, B, C)])


@pytest.mark.parametrize("which", ["lsa_forward", "lsa_predict", "kernel_attention"])
def test_double_backward_is_refused(rng, which):
    if which == "kernel_attention":
        args = [t(a) for a in ka_problem(rng, 2, 2, 3, 1, 1)]
        fn = lambda *a: lt.kernel_attention(*a, "softmax")
    else:
        args, fn = [t(a) for a in lsa_problem(rng, 2, 2, 3)], getattr(lt, which)
    out = fn(*args).square().sum()
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(out, args, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.gradgradcheck(fn, args)
    torch.autograd.grad(fn(*args).square().sum(), args)  # first order still works


# --- values and gradients vs numpy references and pure PyTorch -----------------------------------

@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("B,d,N", [(1, 1, 1), (4, 5, 17)])
def test_lsa_matches_references(rng, dtype, B, d, N):
    E, W_pv, W_kq = lsa_problem(rng, B, d, N)
    G = rng.standard_normal(E.shape)
    args = [t(a, dtype) for a in (E, W_pv, W_kq)]
    F = lt.lsa_forward(*args)
    assert F.dtype == dtype and rel_err(F, lsa_ref.forward_naive(E, W_pv, W_kq)) < TOL[dtype]
    grads = torch.autograd.grad(F, args, torch.tensor(G, dtype=dtype))
    want = lsa_ref.vjp_naive(E, W_pv, W_kq, G)
    for g, w in zip(grads, (want[2], want[0], want[1])):
        assert g.dtype == dtype and rel_err(g, w) < TOL[dtype]
    args64 = [t(a) for a in (E, W_pv, W_kq)]
    grads_pt = torch.autograd.grad(torch_lsa_forward(*args64), args64, torch.tensor(G))
    for g, w in zip(grads, grads_pt):
        assert rel_err(g, w.numpy()) < TOL[dtype]

    g_y = rng.standard_normal(B)
    y = lt.lsa_predict(*args)
    assert rel_err(y, lsa_ref.predict_naive(E, W_pv, W_kq)) < TOL[dtype]
    grads = torch.autograd.grad(y, args, torch.tensor(g_y, dtype=dtype))
    grads_pt = torch.autograd.grad(torch_lsa_forward(*args64)[:, -1, -1], args64, torch.tensor(g_y))
    for g, w in zip(grads, grads_pt):
        assert rel_err(g, w.numpy()) < TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("shape", [(3, 1, 1, 1, 1), (4, 5, 30, 3, 1), (3, 3, 6, 2, 2)])
@pytest.mark.parametrize("act", ACTS)
def test_kernel_attention_matches_references(rng, act, shape, dtype):
    B, d, n, L, H = shape
    acts = heads(act, H)
    arrays = ka_problem(rng, B, d, n, L, H)
    G = rng.standard_normal(arrays[0].shape)
    args = [t(a, dtype) for a in arrays]
    Z_L = lt.kernel_attention(*args, acts)
    assert Z_L.dtype == dtype and rel_err(Z_L, ka_ref.forward(*arrays, acts)[0]) < TOL[dtype]
    grads = torch.autograd.grad(Z_L, args, torch.tensor(G, dtype=dtype))
    dV, dB, dC, dZ0 = ka_ref.vjp(*arrays, acts, G)
    args64 = [t(a) for a in arrays]
    grads_pt = torch.autograd.grad(torch_kernel_attention(*args64, acts), args64, torch.tensor(G))
    # A gradient can be a small sum of large terms (relative condition κ): max(TOL, 100·κ·u), as in
    # test_ka_cuda (conftest.conditioned_tolerance). The fixed TOL failed 1 of 5000 seeds (linear,
    # shape (3, 1, 1, 1, 1), float32: dB at 2.07e-4; 1.8e-4 against the rounded inputs too).
    kappa_V, kappa_B, kappa_C, kappa_Z0 = relative_conditions(
        lambda *a: ka_ref.vjp(*a, acts, G), arrays, (dV, dB, dC, dZ0), rng)
    np_dtype = np.float32 if dtype == torch.float32 else np.float64
    for name, g, w, w_pt, kappa in zip("Z0 V B C".split(), grads, (dZ0, dV, dB, dC), grads_pt,
                                       (kappa_Z0, kappa_V, kappa_B, kappa_C)):
        assert g.dtype == dtype
        if np.abs(w).max() == 0:  # softmax over one source is constant
            assert g.abs().max() == 0 and w_pt.abs().max() == 0, name
            continue
        tol = conditioned_tolerance(TOL[dtype], kappa, np_dtype)
        assert rel_err(g, w) < tol, (name, rel_err(g, w), kappa)
        assert rel_err(w_pt.numpy(), w) < 1e-11, name  # the two references agree


def test_context_and_recompute_give_identical_gradients(rng):
    args = [t(a, torch.float32) for a in ka_problem(rng, 5, 3, 7, 2, 2)]
    out = [torch.autograd.grad(lt.kernel_attention(*args, ["softmax", "relu"], save_context=s)
                               [:, -1, -1].sum(), args) for s in (True, False)]
    for a, b in zip(*out):
        assert torch.equal(a, b)


# --- memory, layouts and errors -------------------------------------------------------------------

def test_contiguous_cpu_tensors_are_shared_without_copies(rng):
    x = torch.randn(3, 4, 5)
    assert lt._operand(x, "x").__array_interface__["data"][0] == x.data_ptr()
    y = lt._operand(x.transpose(1, 2), "x")  # non-contiguous: one copy
    assert y.flags.c_contiguous and np.array_equal(y, x.transpose(1, 2).numpy())


def test_non_contiguous_inputs_give_the_same_results(rng):
    E, W_pv, W_kq = lsa_problem(rng, 4, 3, 6)
    Et = torch.tensor(np.ascontiguousarray(E.transpose(0, 2, 1))).transpose(1, 2).requires_grad_()
    Wt = torch.tensor(W_kq.T.copy()).T.requires_grad_()
    Wp = t(W_pv)
    assert not Et.is_contiguous() and not Wt.is_contiguous()
    F = lt.lsa_forward(Et, Wp, Wt)
    F_ref = lt.lsa_forward(t(E), t(W_pv), t(W_kq))
    assert torch.equal(F, F_ref)
    g = torch.autograd.grad(F.sum(), (Et, Wp, Wt))  # F.sum()'s upstream is a stride-0 expand
    want = lsa_ref.vjp_naive(E, W_pv, W_kq, np.ones_like(E))
    for a, w in zip(g, (want[2], want[0], want[1])):
        assert rel_err(a, w) < 1e-12


def test_argument_errors(rng):
    E, W_pv, W_kq = (torch.tensor(a) for a in lsa_problem(rng, 2, 2, 3))
    with pytest.raises(TypeError, match="W_pv"):
        lt.lsa_forward(E, W_pv.float(), W_kq)
    with pytest.raises(TypeError, match="E"):
        lt.lsa_predict(E.to(torch.int64), W_pv, W_kq)
    with pytest.raises(TypeError, match="E"):
        lt.lsa_predict(E.numpy(), W_pv, W_kq)
    with pytest.raises(ValueError, match="W_kq"):
        lt.lsa_forward(E, W_pv, W_kq[:2])
    with pytest.raises(ValueError, match="CPU or CUDA tensor"):
        lt.lsa_forward(E.to("meta"), W_pv, W_kq)
    with pytest.raises(ValueError, match="W_kq: expected a tensor on cpu"):
        lt.lsa_forward(E, W_pv, W_kq.to("meta"))
    Z0, V, B, C = (torch.tensor(a) for a in ka_problem(rng, 2, 2, 3, 1, 2))
    with pytest.raises(ValueError, match="activation"):
        lt.kernel_attention(Z0, V, B, C, ["exp"])
    with pytest.raises(ValueError, match="activation"):
        lt.kernel_attention(Z0, V, B, C, "gelu")
    with pytest.raises(ValueError, match="B"):
        lt.kernel_attention(Z0, V, B[:, :, :1], C, "exp")


# --- CUDA tensors: the native CUDA backend, same values and gradients as the CPU --------------

def needs_native_cuda(test):
    return pytest.mark.cuda(pytest.mark.skipif(
        not (torch.cuda.is_available() and lt._core.cuda_available()),
        reason="needs a CUDA device and lsa_native built with CUDA kernels")(test))


@pytest.mark.skipif(not torch.cuda.is_available() or lt._core.cuda_available(),
                    reason="needs a CUDA device and lsa_native built without CUDA kernels")
def test_cuda_tensors_without_cuda_kernels_get_a_clear_error():
    E = torch.zeros(2, 3, 4, device="cuda")
    W = torch.zeros(3, 3, device="cuda")
    with pytest.raises(ValueError, match="E: a CUDA tensor"):
        lt.lsa_forward(E, W, W)


def _values_and_grads(fn, args):
    """fn(*args) and the gradients of a fixed random projection of it, as float64 numpy."""
    args = [a.detach().clone().requires_grad_(True) for a in args]
    out = fn(*args)
    g = torch.from_numpy(np.random.default_rng(7).standard_normal(tuple(out.shape)))
    (out * g.to(out)).sum().backward()
    return [out.detach().cpu().double().numpy()] + [a.grad.cpu().double().numpy() for a in args]


def _cuda_cases(rng):
    yield "lsa_forward", lt.lsa_forward, lsa_problem(rng, 3, 2, 5)
    yield "lsa_predict", lt.lsa_predict, lsa_problem(rng, 3, 2, 5)
    for act in ACTS:
        yield (f"kernel_attention-{act}",
               lambda *a, act=act: lt.kernel_attention(*a, heads(act, 2)),
               ka_gradcheck_problem(rng, heads(act, 2), 3, 2, 4, 2, 2))
        yield (f"kernel_attention_predict-{act}",
               lambda *a, act=act: lt.kernel_attention_predict(*a, heads(act, 2)),
               ka_gradcheck_problem(rng, heads(act, 2), 3, 2, 4, 2, 2))


@needs_native_cuda
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_cuda_tensors_match_the_cpu(rng, dtype):
    for name, fn, problem in _cuda_cases(rng):
        cpu = [torch.tensor(a, dtype=dtype) for a in problem]
        got = _values_and_grads(fn, [a.cuda() for a in cpu])
        want = _values_and_grads(fn, cpu)
        for g, w in zip(got, want):
            assert rel_err(torch.from_numpy(g), w) < TOL[dtype], name


def test_native_results_become_tensors_without_copies():
    # CUDA results arrive as tensors already and must pass through unchanged (a CUDA-only path a
    # CPU run would otherwise never see); numpy results are wrapped, not copied.
    t = torch.zeros(3)
    assert lt._tensor(t) is t
    a = np.zeros(3)
    assert np.shares_memory(lt._tensor(a).numpy(), a)
    assert lt._tensor(None) is None


@needs_native_cuda
def test_cuda_gradcheck(rng):
    for name, fn, problem in _cuda_cases(rng):
        assert gradcheck(fn, [t(a).detach().cuda().requires_grad_() for a in problem]), name


@needs_native_cuda
def test_cuda_results_stay_on_the_device(rng):
    E, W_pv, W_kq = (torch.tensor(a).cuda() for a in lsa_problem(rng, 2, 2, 3))
    assert lt.lsa_forward(E, W_pv, W_kq).device == E.device
    with pytest.raises(ValueError, match="W_pv: expected a tensor on cuda"):
        lt.lsa_forward(E, W_pv.cpu(), W_kq)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side), pytest.raises(ValueError, match="default stream"):
        lt.lsa_forward(E, W_pv, W_kq)


@needs_native_cuda
@pytest.mark.parametrize("output", ["prediction", "full"])
def test_cuda_adam_loop_follows_the_cpu_loop(rng, output):
    """The same float64 Adam loop on CUDA and CPU tensors (same data, same initialization): equal
    loss trajectories, and the loss goes down (linear-regression prompts, ZFB (3.4))."""
    d, N = 3, 10
    prompts = [data.linear_regression_prompts(rng, 64, d, N) for _ in range(40)]

    def losses(device):
        model = lt.LinearSelfAttention(d, output=output, seed=1).double().to(device)
        head = (lambda F: F[:, d, N]) if output == "full" else (lambda y: y)

        class Head(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = model

            def forward(self, E):
                return head(self.inner(E))

        return _adam(Head(), lambda k: (torch.from_numpy(prompts[k].E).to(device),
                                        torch.from_numpy(prompts[k].y_q).to(device)),
                     steps=40)

    cpu, gpu = losses("cpu"), losses("cuda")
    np.testing.assert_allclose(gpu, cpu, rtol=1e-9)
    assert np.mean(cpu[-5:]) < 0.7 * np.mean(cpu[:5]), cpu[::5]


def test_in_place_change_after_forward_is_detected(rng):
    E, W_pv, W_kq = (t(a) for a in lsa_problem(rng, 2, 2, 3))
    W = W_kq.detach().clone()
    y = lt.lsa_predict(E, W_pv, W)
    W.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


# --- modules ----------------------------------------------------------------------------------

def test_linear_self_attention_initialization_is_assumption_3_3():
    sigma = 0.3
    m = lt.LinearSelfAttention(4, sigma=sigma, seed=1, dtype=torch.float64)
    W_pv, W_kq = m.W_pv.detach().numpy(), m.W_kq.detach().numpy()
    expected_pv = np.zeros((5, 5))
    expected_pv[4, 4] = sigma
    np.testing.assert_array_equal(W_pv, expected_pv)
    block = W_kq[:4, :4]
    assert np.all(W_kq[4] == 0) and np.all(W_kq[:, 4] == 0)
    np.testing.assert_allclose(block, block.T, atol=1e-15)  # ΘΘᵀ: symmetric PSD, ‖·‖_F = 1
    assert np.linalg.eigvalsh(block).min() > -1e-15
    assert abs(np.linalg.norm(block) - sigma) < 1e-14
    assert not np.array_equal(block, lt.LinearSelfAttention(4, sigma=sigma, seed=2).W_kq.detach()
                              .numpy()[:4, :4])


def test_kernel_attention_module_shapes_and_initialization():
    m = lt.KernelAttention(5, 3, 2, ["linear", "exp"], scale=0.1, seed=0)
    assert m.A.shape == (3, 2, 5, 5) and m.r.shape == (3, 2) and m.B.shape == (3, 2, 5, 5)
    allp = torch.cat([p.detach().double().ravel() for p in m.parameters()])
    assert abs(allp.std().item() - 0.1) < 0.02  # N(0, 0.01) entries (n = 456: ±3 se ≈ 0.01)
    V = m.value()
    assert torch.equal(V[:, :, :5, :5], m.A) and torch.equal(V[:, :, 5, 5], m.r)
    assert torch.all(V[:, :, :5, 5] == 0) and torch.all(V[:, :, 5, :5] == 0)
    full = lt.KernelAttention(2, 1, sparse=False, output="full")
    assert full.V.shape == (1, 1, 3, 3) and full(torch.zeros(4, 3, 5)).shape == (4, 3, 5)


def _adam(model, batches, steps=60, lr=0.02):
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for k in range(steps):
        E, y = batches(k)
        loss = 0.5 * (model(E) - y).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_linear_self_attention_trains_with_adam(rng):
    d, N = 4, 20

    def batches(k):
        b = data.linear_regression_prompts(rng, 256, d, N, dtype=np.float32)
        return torch.from_numpy(b.E), torch.from_numpy(b.y_q)

    losses = _adam(lt.LinearSelfAttention(d, sigma=0.1, seed=0), batches)
    # Start: ŷ ≈ 0, loss ≈ ½ E y_q² = d/2 = 2; the trained LSA is near the ZFB limit (≈ 0.5 here).
    assert np.mean(losses[-10:]) < 0.5 * np.mean(losses[:5]), losses[::10]


def test_kernel_attention_trains_with_adam_next_to_an_mlp(rng):
    """A mixed model: a trainable linear embedding of the inputs in front of a 2-layer softmax block,
    60 Adam steps on fresh batches; judged on one held-out batch of 4096 prompts, before and after.
    Over 2000 seeds the held-out ratio had median 0.48, 99th percentile 0.76 and maximum 0.80 (this
    body with the seed loop outside; a frozen or sign-flipped block fails it). It checks that the
    wrapper trains inside a larger graph; the gradient into Z0 (hence the embedding) is checked
    exactly by test_kernel_attention_gradcheck.
    (Not exp: its unbounded exp(S) starts some draws at losses of 1e5 or overflows at step 0, a
    property of the model, docs/reproductions/findings.md, that made the old check fail ≈ 1 % of runs.)"""
    d, n = 3, 12

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Linear(d, d)
            self.attn = lt.KernelAttention(d, 2, activations="softmax", seed=0)

        def forward(self, E):
            X = self.embed(E[:, :d].transpose(1, 2)).transpose(1, 2)
            return self.attn(torch.cat([X, E[:, d:]], dim=1))

    def batch(size):
        b = data.linear_regression_prompts(rng, size, d, n, dtype=np.float32)
        return torch.from_numpy(b.E), torch.from_numpy(b.y_q)

    def heldout_loss():
        with torch.no_grad():
            return float(0.5 * (model(E_test) - y_test).square().mean())

    torch.manual_seed(int(rng.integers(2**31)))  # nn.Linear's initialization
    model = Model()
    E_test, y_test = batch(4096)
    before = heldout_loss()
    _adam(model, lambda k: batch(256), steps=60, lr=0.03)
    assert heldout_loss() < 0.9 * before
    assert model.embed.weight.grad is not None and model.attn.A.grad is not None


@pytest.mark.parametrize("target", ["_predict_vjp", "kernel_attention_vjp"])
def test_gradcheck_catches_a_slightly_wrong_backward(rng, monkeypatch, target):
    """Power check: a VJP off by 0.01 % in one output must fail gradcheck."""
    if target == "_predict_vjp":
        good = lt._predict_vjp
        wrong = lt._native_lsa_function("_Wrong", lt._lsa.predict, lambda *a, **k: tuple(
            None if g is None else g * 1.0001 for g in good(*a, **k)), "d_y")
        fn, args = wrong.apply, [t(a) for a in lsa_problem(rng, 2, 2, 3)]
        gradcheck(lt._LSAPredict.apply, args)  # the same construction with the right VJP passes
    else:
        good = lt._ka.vjp
        monkeypatch.setattr(lt._ka, "vjp", lambda *a, **k: (good(*a, **k)[0] * 1.0001,)
                            + good(*a, **k)[1:])
        fn = lambda *a: lt.kernel_attention(*a, "softmax")
        args = [t(a) for a in ka_problem(rng, 2, 2, 3, 1, 1)]
    with pytest.raises(GradcheckError):
        gradcheck(fn, args)
