"""The fused H-head steps of LinearPrompts (multihead.hpp's linear_prompts_multihead_loss_and_grad)
and MultiHeadLSAObjective's method="wishart": the tokens route equals the H-head kernel on the same
prompts, H = 1 equals the one-head fused step bitwise, the Wishart route agrees in law with the
tokens route (z-test with power: the wrong N is rejected), the objective chains the separate
parametrization. (The Wishart route's exact equality with the token route on one G: the C++ test
MultiHeadWishart.EqualsTheTokenRouteOnTheSameGram.)"""
import numpy as np
import pytest

from lsa_native import multihead as mh
from lsa_native.reference import multihead as ref
from lsa_native.sampling import LinearPrompts


def _weights(rng, H, d, scale=0.5):
    return scale * rng.standard_normal((2, H, d + 1, d + 1))


def _step(spec, method, W_pv, W_kq, step, batch, dtype=np.float64):
    f = spec.multihead_fused_step(batch=batch, method=method, dtype=dtype)
    d_pv, d_kq = np.empty(W_pv.shape, dtype), np.empty(W_kq.shape, dtype)
    loss = f(W_pv.astype(dtype), W_kq.astype(dtype), step, d_pv, d_kq)
    return loss, d_pv, d_kq


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("d,N,H,B", [(1, 1, 2, 5), (3, 7, 3, 37), (5, 20, 5, 100)])
def test_tokens_step_is_the_kernel_on_the_sampled_prompts(rng, dtype, d, N, H, B):
    spec = LinearPrompts(d, N, noise_std=0.3, seed=int(rng.integers(1000)))
    W_pv, W_kq = _weights(rng, H, d)
    step = int(rng.integers(100))
    got = _step(spec, "tokens", W_pv, W_kq, step, B, dtype)
    E, y_q = spec.sample_embedding(B, step, dtype)
    want = mh.loss_and_grad(E, y_q, W_pv.astype(dtype), W_kq.astype(dtype))
    tol = 1e-12 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(got[0], want[0], rtol=tol)
    for a, b in zip(got[1:], want[1:]):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol * np.abs(b).max())


@pytest.mark.parametrize("method", ["tokens", "wishart"])
def test_one_head_is_the_one_head_fused_step_bitwise(rng, method):
    spec = LinearPrompts(3, 9, noise_std=0.2, seed=int(rng.integers(1000)))
    W_pv, W_kq = _weights(rng, 1, 3)
    got = _step(spec, method, W_pv, W_kq, 4, 50)
    want = spec.lsa_loss_and_grad(W_pv[0], W_kq[0], batch=50, step=4, method=method,
                                  dtype=np.float64)
    assert got[0] == want[0]
    np.testing.assert_array_equal(got[1][0], want[1])
    np.testing.assert_array_equal(got[2][0], want[2])


def _per_step(spec, method, W_pv, W_kq, steps, batch):
    """[steps, 1 + #dW_pv + #dW_kq]: the step estimates (loss, gradient) of independent steps."""
    rows = []
    for k in range(steps):
        loss, d_pv, d_kq = _step(spec, method, W_pv, W_kq, k, batch)
        rows.append(np.concatenate([[loss], d_pv.ravel(), d_kq.ravel()]))
    return np.array(rows)


def _max_z(a, b):
    se = np.sqrt(a.var(0, ddof=1) / len(a) + b.var(0, ddof=1) / len(b))
    live = se > 0  # dW_pv is zero but in the last rows
    return np.abs((a.mean(0) - b.mean(0))[live] / se[live]).max()


@pytest.mark.parametrize("noise_std", [0.0, 0.5])
def test_wishart_agrees_in_law_with_tokens(rng, noise_std):
    """Each step's loss and gradient are unbiased estimates of the population ones under both
    routes (same law, other draws): every entry's mean agrees (max |z| over 37 entries < 6: Welch
    z of 100 + 100 means of 4000 prompts, P(|t_198| > 6) ≈ 1e-8 per entry; at 5, ~5e-5 per test), and
    the Wishart route at the wrong N = 2N is rejected at that same threshold (power). Over 120
    draws of the weights at these 100 steps: the null's max |z| <= 3.7, the power's z >= 11.6
    (at 40 steps the power's z fell to 5.7)."""
    d, N, H = 2, 4, 2
    W_pv, W_kq = _weights(rng, H, d, scale=1.0)
    spec = LinearPrompts(d, N, noise_std=noise_std, seed=int(rng.integers(1000)))
    tokens = _per_step(spec, "tokens", W_pv, W_kq, 100, 4000)
    assert _max_z(tokens, _per_step(spec, "wishart", W_pv, W_kq, 100, 4000)) < 6
    assert _max_z(tokens, _per_step(spec.replace(context=2 * N), "wishart", W_pv, W_kq, 100, 4000)) > 6


def test_wishart_conditions_and_bad_arguments(rng):
    W_pv, W_kq = _weights(rng, 2, 3)
    with pytest.raises(ValueError, match="context N >= 4"):
        _step(LinearPrompts(3, 3, noise_std=0.1), "wishart", W_pv, W_kq, 0, 4)
    with pytest.raises(ValueError, match="Gaussian covariates"):
        _step(LinearPrompts(3, 9, covariates="sphere"), "wishart", W_pv, W_kq, 0, 4)
    with pytest.raises(ValueError, match="method"):
        LinearPrompts(3, 9).multihead_fused_step(batch=4, method="gram")
    f = LinearPrompts(3, 9).multihead_fused_step(batch=4, method="wishart", dtype=np.float64)
    with pytest.raises(ValueError, match="W_kq"):
        f(W_pv, np.zeros((2, 3, 3)), 0, np.empty_like(W_pv), np.empty_like(W_kq))
    with pytest.raises(ValueError, match="at least one head"):
        z = np.zeros((0, 4, 4))
        f(z, z, 0, z.copy(), z.copy())
    assert LinearPrompts(3, 9).multihead_fused_step(batch=4, method="auto").method == "wishart"
    assert LinearPrompts(3, 2).multihead_fused_step(batch=4, method="auto").method == "tokens"


def test_objective_wishart_chains_the_separate_parametrization(rng):
    """method="wishart": the fused Wishart step on W^KQ_h = W^K_hᵀ W^Q_h, its gradient chained
    (multihead.chain_kq); training on it lowers the loss."""
    from lsa_native import train

    d, N, H, r = 3, 8, 2, 1
    W_pv = 0.3 * rng.standard_normal((H, d + 1, d + 1))
    W_k, W_q = 0.3 * rng.standard_normal((2, H, r, d + 1))
    spec = LinearPrompts(d, N, seed=int(rng.integers(1000)))
    src = train.Prompts(spec, batch=64, resample_every=2, dtype=np.float64)
    obj = train.MultiHeadLSAObjective(W_pv, W_k=W_k, W_q=W_q, method="wishart")
    loss, grad = obj.loss_and_grad(obj.theta0, 5, src)
    want = _step(spec, "wishart", W_pv, mh.merge_kq(W_k, W_q), src.sample_index(5), 64)
    assert loss == want[0]
    d_k, d_q = mh.chain_kq(W_k, W_q, want[2])
    np.testing.assert_array_equal(grad, np.concatenate([want[1].ravel(), d_k.ravel(), d_q.ravel()]))
    assert train.MultiHeadLSAObjective(W_pv, W_k=W_k, W_q=W_q, method="auto")._wishart(src)

    W_pv, W_kq = _weights(rng, H, d, scale=0.1)
    obj = train.MultiHeadLSAObjective(W_pv, W_kq, method="wishart")
    res = train.fit(obj, "adam", lr=0.02, steps=150, progress=False,
                    data=train.Prompts(LinearPrompts(d, N, seed=3), batch=256))
    loss = res.history["loss"]
    assert np.mean(loss[-20:]) < 0.7 * np.mean(loss[:5])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("d,N,H,B,noise_std", [(1, 2, 2, 5, 0.0), (3, 7, 3, 37, 0.4), (5, 20, 4, 133, 0.0)])
def test_wishart_heads_split_one_head(rng, dtype, d, N, H, B, noise_std):
    """The CPU's H-head Wishart step (SIMD lanes over prompts, partial last groups) against the
    one-head step on the same draws: heads sharing W^KQ with p_h summing to p predict as one head
    (p, W^KQ), so the loss is the same, every head's ∂p_h is the one head's ∂p and the ∂W^KQ_h
    sum to its ∂W^KQ (to rounding)."""
    spec = LinearPrompts(d, N, noise_std=noise_std, seed=int(rng.integers(1000)))
    W_pv1, W_kq1 = _weights(rng, 1, d)
    parts = rng.dirichlet(np.ones(H))  # p_h = parts[h]·p
    W_pv = np.repeat(W_pv1, H, axis=0)
    W_pv[:, d, :] = parts[:, None] * W_pv1[0, d, :]
    W_kq = np.repeat(W_kq1, H, axis=0)
    step = int(rng.integers(100))
    got = _step(spec, "wishart", W_pv, W_kq, step, B, dtype)
    want = _step(spec, "wishart", W_pv1, W_kq1, step, B, dtype)
    tol = 1e-11 if dtype == np.float64 else 2e-4
    np.testing.assert_allclose(got[0], want[0], rtol=tol)
    scale = np.abs(want[1]).max() + np.abs(want[2]).max()
    for h in range(H):
        np.testing.assert_allclose(got[1][h, d], want[1][0, d], rtol=0, atol=tol * scale)
    np.testing.assert_allclose(got[2].sum(0), want[2][0], rtol=0, atol=tol * scale)
    # power: a wrong split (the p_h summing to 2p) fails the checks above, by > 2x their tolerance
    # (the correct split's worst error is ≤ 0.08 of it in 30000 draws). Judged on all of them, not
    # the loss alone: L(2p) − L(p) = mean(3ŷ² − 2ŷy)/2 crosses zero, and at d = 1, B = 5 in float32
    # it was within 10·tol of L in 161 of 30000 draws; the wrong ∂p_h move by mean(g gᵀ)·p, which
    # does not cancel (smallest excess over all three 10.9 in those draws, 4 below 20).
    W_pv[0, d, :] += W_pv1[0, d, :]
    wrong = _step(spec, "wishart", W_pv, W_kq, step, B, dtype)
    excess = max(abs(wrong[0] - want[0]) / (tol * abs(want[0])),
                 np.abs(wrong[1][:, d] - want[1][0, d]).max() / (tol * scale),
                 np.abs(wrong[2].sum(0) - want[2][0]).max() / (tol * scale))
    assert excess > 2, excess


# ---- the GPU route of the fused H-head step and the native merge / chain rule ------------------

@pytest.mark.parametrize("method", ["wishart", "tokens"])
@pytest.mark.parametrize("H", [1, 3])
def test_fused_step_on_the_device_route(rng, method, H):
    """multihead_fused_step(device="cuda") on an emulated GPU (host memory presented as CUDA
    arrays, the CPU kernels where CUDA ones would launch): CUDA parameters and gradients read and
    written in place, the loss into loss= (NaN returned), the CPU step's bits; a CUDA array with
    device="cpu" and an unknown device are named."""
    from conftest import HostBackedCudaArray as g
    from lsa_native import _core

    spec = LinearPrompts(3, 8, noise_std=0.2, seed=int(rng.integers(2**31)))
    W_pv, W_kq = _weights(rng, H, 3)
    want = _step(spec, method, W_pv, W_kq, 4, 21)
    step = spec.multihead_fused_step(batch=21, method=method, dtype=np.float64, device="cuda")
    d = (g(np.full(W_pv.shape, np.nan)), g(np.full(W_pv.shape, np.nan)))
    loss = g(np.full(1, np.nan))
    _core.emulate_cuda_on_cpu_for_tests(True)
    try:
        assert np.isnan(step(g(W_pv), g(W_kq), 4, *d, loss=loss))
        host = np.full(1, np.nan)  # host arrays with device="cuda": the loss written there too
        host_d = (np.empty_like(W_pv), np.empty_like(W_kq))
        assert np.isnan(step(W_pv, W_kq, 4, *host_d, loss=host))
    finally:
        _core.emulate_cuda_on_cpu_for_tests(False)
    assert loss.a[0] == host[0] == want[0]
    for got in (d[0].a, host_d[0]):
        np.testing.assert_array_equal(got, want[1])
    for got in (d[1].a, host_d[1]):
        np.testing.assert_array_equal(got, want[2])
    cpu_step = spec.multihead_fused_step(batch=21, method=method, dtype=np.float64)
    with pytest.raises(ValueError, match="W_pv: a CUDA array needs device='cuda'"):
        cpu_step(g(W_pv), W_kq, 4, np.empty_like(W_pv), np.empty_like(W_kq))
    with pytest.raises(ValueError, match="device: expected 'cpu' or 'cuda'"):
        spec.multihead_fused_step(batch=21, device="gpu")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("H,r,n", [(1, 1, 2), (4, 2, 6), (3, 5, 5)])
def test_merge_and_chain_are_the_definitions(rng, dtype, H, r, n):
    """The native merge_kq / chain_kq: W^KQ_h = W^K_hᵀ W^Q_h, dW^K_h = W^Q_h dW^KQ_hᵀ,
    dW^Q_h = W^K_h dW^KQ_h (the reference's in float64, to rounding), into out= in place, and the
    emulated-GPU route (CUDA arrays) gives the same bits."""
    from conftest import HostBackedCudaArray as g
    from lsa_native import _core

    W_k, W_q = rng.standard_normal((2, H, r, n)).astype(dtype)
    d_kq = rng.standard_normal((H, n, n)).astype(dtype)
    tol = 1e-5 if dtype == np.float32 else 1e-14
    W_kq = mh.merge_kq(W_k, W_q)
    assert W_kq.dtype == dtype
    f64 = [a.astype(np.float64) for a in (W_k, W_q, d_kq)]
    np.testing.assert_allclose(W_kq, ref.merge_kq(*f64[:2]), rtol=tol, atol=tol)
    d_k, d_q = mh.chain_kq(W_k, W_q, d_kq)
    for got, want in zip((d_k, d_q), ref.chain_kq(*f64)):
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * n)
    out = np.full((H, n, n), np.nan, dtype)
    assert mh.merge_kq(W_k, W_q, out=out) is out
    np.testing.assert_array_equal(out, W_kq)
    dev = (g(np.full((H, r, n), np.nan, dtype)), g(np.full((H, r, n), np.nan, dtype)))
    dev_kq = g(np.full((H, n, n), np.nan, dtype))
    _core.emulate_cuda_on_cpu_for_tests(True)
    try:
        mh.merge_kq(g(W_k), g(W_q), out=dev_kq)
        mh.chain_kq(g(W_k), g(W_q), g(d_kq), out=dev)
    finally:
        _core.emulate_cuda_on_cpu_for_tests(False)
    np.testing.assert_array_equal(dev_kq.a, W_kq)
    np.testing.assert_array_equal(dev[0].a, d_k)
    np.testing.assert_array_equal(dev[1].a, d_q)


def test_merge_and_chain_bad_arguments(rng):
    from conftest import HostBackedCudaArray as g

    W_k = rng.standard_normal((2, 1, 4))
    with pytest.raises(ValueError, match="all operands on one device.*W_k host, W_q CUDA"):
        mh.merge_kq(W_k, g(W_k))
    with pytest.raises(ValueError, match="all operands on one device.*out CUDA"):
        mh.merge_kq(W_k, W_k, out=g(np.empty((2, 4, 4))))
    with pytest.raises(ValueError, match="all operands on one device.*d_W_kq CUDA"):
        mh.chain_kq(W_k, W_k, g(np.zeros((2, 4, 4))))
    square = rng.standard_normal((2, 4, 4))  # rank r = d+1: W_k has W_kq's shape
    with pytest.raises(ValueError, match="out: must not share memory"):
        mh.merge_kq(square, square.copy(), out=square)
    d_kq, d_k = np.zeros((2, 4, 4)), np.empty_like(W_k)
    for out in ((W_k, None), (None, W_k[:]), (d_k, d_k)):
        with pytest.raises(ValueError, match="out: must not share memory"):
            mh.chain_kq(W_k, W_k.copy(), d_kq, out=out)
    d_square = square.copy()  # the output is d_W_kq
    with pytest.raises(ValueError, match="out: must not share memory"):
        mh.chain_kq(square, square.copy(), d_square, out=(None, d_square))
    with pytest.raises(ValueError, match=r"W_kq: expected a C-contiguous array of shape \(2, 4, 4\)"):
        mh.merge_kq(W_k, W_k, out=np.empty((2, 3, 3)))
    with pytest.raises(ValueError, match=r"W_q: expected a C-contiguous array of shape \(2, 1, 4\)"):
        mh.merge_kq(W_k, W_k[:, :, :3])
    with pytest.raises(ValueError, match="rank r = 5 out of range"):
        mh.merge_kq(np.zeros((2, 5, 4)), np.zeros((2, 5, 4)))
    with pytest.raises(ValueError, match="W_k: expected shape"):
        mh.merge_kq(np.zeros((5, 4)), np.zeros((5, 4)))
    with pytest.raises(TypeError, match="d_W_k: expected dtype float32"):
        mh.chain_kq(W_k.astype(np.float32), W_k.astype(np.float32), np.zeros((2, 4, 4), np.float32),
                    out=(np.empty((2, 1, 4)), None))


@pytest.mark.cuda
@pytest.mark.skipif(not __import__("lsa_native").cuda.available(), reason="needs a GPU")
@pytest.mark.parametrize("method", ["wishart", "tokens"])
@pytest.mark.parametrize("d,N,H,noise", [(5, 20, 1, 0.1), (5, 20, 4, 0.1), (2, 9, 2, 0.0),
                                         (1, 5, 2, 0.0)])
@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-11), (np.float32, 2e-4)])
def test_gpu_fused_step_equals_the_cpu_step(rng, method, d, N, H, noise, dtype, tol):
    """On a GPU: the H-head Wishart step (one thread per prompt, the CPU's Philox streams) and the
    tokens step (the GPU sampler's prompts, then the H-head kernel) equal the CPU step to rounding
    (relative to the largest entry), with host or CUDA arrays, and two runs give the same bits
    (fixed-order sums); B = 3000 spans several blocks and a partial one. The Wishart work is in
    global memory at d = 5 and in shared memory for the tiny shapes (launch_heads_wishart's 48 KiB:
    d = 1, H = 2 in both dtypes, d = 2, H = 2 without label noise in float32)."""
    import torch

    spec = LinearPrompts(d, N, noise_std=noise, tasks=9, seed=int(rng.integers(2**31)))
    W_pv, W_kq = (a.astype(dtype) for a in _weights(rng, H, d))
    want = _step(spec, method, W_pv, W_kq, 7, 3000, dtype)
    step = spec.multihead_fused_step(batch=3000, method=method, dtype=dtype, device="cuda")
    host = (np.empty_like(W_pv), np.empty_like(W_kq))
    loss = step(W_pv, W_kq, 7, *host)
    dev = [torch.from_numpy(a).cuda() for a in (W_pv, W_kq, W_pv, W_kq)]
    dev_loss = torch.full((1,), float("nan"), dtype=torch.float64, device="cuda")
    runs = []
    for _ in range(2):
        step(dev[0], dev[1], 7, dev[2], dev[3], loss=dev_loss)
        runs.append([dev_loss.cpu().numpy().copy(), dev[2].cpu().numpy(), dev[3].cpu().numpy()])
    for a, b in zip(runs[0], runs[1]):
        np.testing.assert_array_equal(a, b)
    assert abs(loss - want[0]) <= tol * want[0] and abs(runs[0][0][0] - loss) <= tol * loss
    for got, ref in ((host[0], want[1]), (host[1], want[2]), (runs[0][1], want[1]),
                     (runs[0][2], want[2])):
        assert np.abs(got - ref).max() <= tol * np.abs(ref).max()
