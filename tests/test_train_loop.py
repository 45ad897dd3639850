"""The loop around the kernels (issue 22): objectives bound once per fit (``Objective.bind``) give
the steps of ``loss_and_grad``; ``LinearPrompts.fused_step`` checks its arguments once; E is cast
once per batch; ``History.append_row`` keeps ``record``'s columns; the one-pass gradient norm."""
from __future__ import annotations

import importlib
import math
import re

import numpy as np
import pytest

from lsa_native import kernel_attention as ka
from lsa_native import sampling, train
from lsa_native.history import History
from lsa_native.train.optim import grad_norm, unchecked_grad_norm


def _lsa(rng, d):
    r = d + 1
    return 0.3 * rng.standard_normal((r, r)), 0.3 * rng.standard_normal((r, r))


@pytest.mark.parametrize("method", ["tokens", "wishart"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d, N", [(1, 1), (3, 7), (5, 20)])
def test_bound_fused_step_equals_loss_and_grad(rng, method, dtype, d, N):
    if method == "wishart" and N < d:
        pytest.skip("wishart needs N >= d")
    spec = sampling.LinearPrompts(d, N, seed=int(rng.integers(2**31)))
    source = train.Prompts(spec, batch=int(rng.integers(1, 70)), resample_every=3, dtype=dtype)
    objective = train.LSAObjective(*_lsa(rng, d), method=method)
    step_fn = objective.bind(source)
    theta = objective.theta0 + 0.1 * rng.standard_normal(objective.theta0.size)
    for t in (0, 2, 3, 7):  # resample_every = 3: steps 0, 2 share prompts
        loss, grad = step_fn(theta, t)
        want_loss, want_grad = objective.loss_and_grad(theta, t, source)
        assert loss == want_loss  # the same native call on the same prompts: bitwise
        np.testing.assert_array_equal(grad, want_grad)
        assert grad.dtype == np.float64 and grad.shape == theta.shape


class _OffsetPrompts(train.Prompts):
    """A source whose steps map to sample indices by its own rule (not step // resample_every)."""

    def sample_index(self, step: int) -> int:
        return 5 + 2 * step


@pytest.mark.parametrize("make", ["lsa", "H-head"])
@pytest.mark.parametrize("method", ["tokens", "wishart"])
def test_bound_steps_draw_the_sources_sample_index(rng, make, method):
    """The bound steps ask the source which sample a step trains on (its sample_index), as
    loss_and_grad does: a source with its own rule gets its own prompts."""
    d, N = 3, 7
    spec = sampling.LinearPrompts(d, N, seed=int(rng.integers(2**31)))
    source = _OffsetPrompts(spec, batch=int(rng.integers(1, 40)), dtype=np.float64)
    if make == "lsa":
        objective = train.LSAObjective(*_lsa(rng, d), method=method)
    else:
        W_pv, kq = _multihead(rng, d, separate=False)
        objective = train.MultiHeadLSAObjective(W_pv, **kq, method=method)
    step_fn = objective.bind(source)
    for t in (0, 1, 4):
        loss, grad = step_fn(objective.theta0, t)
        want_loss, want_grad = objective.loss_and_grad(objective.theta0, t, source)
        assert loss == want_loss
        np.testing.assert_array_equal(grad, want_grad)


def test_bound_step_refuses_parameters_past_float32_as_loss_and_grad_does(rng):
    spec = sampling.LinearPrompts(2, 5, seed=1)
    source = train.Prompts(spec, batch=8, dtype=np.float32)
    objective = train.LSAObjective(*_lsa(rng, 2))
    theta = objective.theta0.copy()
    theta[-1] = 1e39
    with pytest.raises(ValueError, match="W_kq: values overflow float32"), np.errstate(over="ignore"):
        objective.bind(source)(theta, 0)  # under fit's errstate
    with pytest.raises(ValueError, match="W_kq: values overflow float32"):
        objective.loss_and_grad(theta, 0, source)


def test_bound_step_without_fusion_is_loss_and_grad(rng):
    batch = sampling.LinearPrompts(3, 6, seed=2).sample(batch=17, dtype=np.float64)
    objective = train.LSAObjective(*_lsa(rng, 3), dtype=np.float32)
    theta = objective.theta0
    step_fn = objective.bind(train.FixedPrompts(batch))
    loss, grad = step_fn(theta, 0)
    want = objective.loss_and_grad(theta, 0, train.FixedPrompts(batch))
    assert loss == want[0]
    np.testing.assert_array_equal(grad, want[1])


@pytest.mark.parametrize("sparse, hold_A_zero", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("dtype", [None, np.float32, np.float64])
def test_bound_kernel_attention_step_equals_loss_and_grad(rng, sparse, hold_A_zero, dtype):
    d, L, H = int(rng.integers(1, 4)), int(rng.integers(1, 3)), int(rng.integers(1, 3))
    acts = [["softmax", "relu", "exp", "linear"][int(i)] for i in rng.integers(0, 4, H)]
    params = ka.KernelAttentionParams.gaussian(rng, d, L, H, acts, sparse=sparse)
    objective = train.KernelAttentionObjective(params, hold_A_zero=hold_A_zero, dtype=dtype)
    spec = sampling.KernelGPPrompts(d, int(rng.integers(1, 6)), "exp", seed=int(rng.integers(2**31)))
    source = train.Prompts(spec, batch=int(rng.integers(1, 9)), resample_every=2, dtype=np.float64)
    step_fn = objective.bind(source)
    theta = objective.theta0 + 0.05 * rng.standard_normal(objective.theta0.size)
    for t in (0, 1, 2):
        loss, grad = step_fn(theta, t)
        want_loss, want_grad = objective.loss_and_grad(theta, t, source)
        assert loss == want_loss
        np.testing.assert_array_equal(grad, want_grad)
        assert grad.shape == theta.shape


@pytest.mark.parametrize("separate", [False, True])
@pytest.mark.parametrize("method", ["tokens", "wishart"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d, N", [(1, 1), (3, 7), (5, 20)])
def test_bound_multihead_step_equals_loss_and_grad(rng, separate, method, dtype, d, N):
    """The bound H-head step (θ views once per θ buffer, one flat gradient buffer, W^KQ merged and
    the chain rule into preallocated buffers) gives loss_and_grad's loss and gradient bitwise, on
    both of fit's θ buffers and a θ of its own, and returns the same gradient buffer each step."""
    if method == "wishart" and N < d:
        pytest.skip("wishart needs N >= d")
    W_pv, kq = _multihead(rng, d, separate)
    objective = train.MultiHeadLSAObjective(W_pv, **kq, method=method)
    spec = sampling.LinearPrompts(d, N, seed=int(rng.integers(2**31)))
    source = train.Prompts(spec, batch=int(rng.integers(1, 70)), resample_every=3, dtype=dtype)
    step_fn = objective.bind(source)
    thetas = [objective.theta0 + 0.1 * rng.standard_normal(objective.theta0.size) for _ in range(2)]
    grads = set()
    for t in (0, 2, 3, 7, 8):  # resample_every = 3: steps 0, 2 share prompts
        for theta in (*thetas, thetas[0].copy()):
            loss, grad = step_fn(theta, t)
            grads.add(id(grad))
            want_loss, want_grad = objective.loss_and_grad(theta, t, source)
            assert loss == want_loss
            np.testing.assert_array_equal(grad, want_grad)
            assert grad.dtype == np.float64 and grad.shape == theta.shape
        thetas[0] -= 0.01 * want_grad  # as fit's optimizer does: a θ buffer changed in place
    assert len(grads) == 1


@pytest.mark.parametrize("separate", [False, True])
def test_bound_multihead_step_refuses_parameters_past_float32_as_loss_and_grad_does(rng, separate):
    W_pv, kq = _multihead(rng, 2, separate)
    objective = train.MultiHeadLSAObjective(W_pv, **kq)
    source = train.Prompts(sampling.LinearPrompts(2, 5, seed=1), batch=8, dtype=np.float32)
    theta = objective.theta0.copy()
    theta[-1] = 1e39
    name = "W_q" if separate else "W_kq"
    with pytest.raises(ValueError, match=f"{name}: values overflow float32"), \
            np.errstate(over="ignore"):
        objective.bind(source)(theta, 0)  # under fit's errstate
    with pytest.raises(ValueError, match=f"{name}: values overflow float32"):
        objective.loss_and_grad(theta, 0, source)


def test_bound_multihead_tokens_step_reuses_its_buffers(rng, monkeypatch):
    """The tokens step hands the native kernel the same prompt, parameter and gradient arrays at
    every step (prompts redrawn into the buffer at each new sample index): nothing allocated."""
    from lsa_native import _core

    seen = []
    real = _core.multihead_lsa_loss_and_grad

    def spy(E, y_q, W_pv, W_kq, *args, out=None, **kwargs):
        seen.append((E, y_q, W_pv, W_kq, *out))
        return real(E, y_q, W_pv, W_kq, *args, out=out, **kwargs)

    monkeypatch.setattr(_core, "multihead_lsa_loss_and_grad", spy)
    W_pv, kq = _multihead(rng, 3, bool(rng.integers(2)))
    objective = train.MultiHeadLSAObjective(W_pv, **kq)
    spec = sampling.LinearPrompts(3, 6, seed=int(rng.integers(2**31)))
    source = train.Prompts(spec, batch=7, resample_every=2, dtype=np.float32)
    step_fn = objective.bind(source)
    for t in range(5):
        step_fn(objective.theta0, t)
    for call in seen[1:]:
        assert all(a is b for a, b in zip(call, seen[0]))
    np.testing.assert_array_equal(seen[-1][0], source.at(4).E)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_embedding_step_draws_sample_embeddings_prompts(rng, dtype):
    """LinearPrompts.embedding_step (the bound tokens step's sampler, arguments checked once)
    writes sample_embedding's prompts bitwise, and checks draws its law does not prove finite as
    sample_embedding does."""
    d, N, B = int(rng.integers(1, 6)), int(rng.integers(1, 12)), int(rng.integers(1, 40))
    spec = sampling.LinearPrompts(d, N, noise_std=float(rng.uniform(0, 1)),
                                  seed=int(rng.integers(2**31)))
    draw = spec.embedding_step(batch=B, dtype=dtype)
    E, y_q = np.empty((B, d + 1, N + 1), dtype), np.empty(B, dtype)
    for step in (0, int(rng.integers(1, 2**32))):
        draw(step, E, y_q)
        want_E, want_y = spec.sample_embedding(B, step, dtype)
        np.testing.assert_array_equal(E, want_E)
        np.testing.assert_array_equal(y_q, want_y)
    huge = sampling.LinearPrompts(2, 5, noise_std=3e38, seed=1)  # labels overflow float32
    E, y_q = np.empty((64, 3, 6), np.float32), np.empty(64, np.float32)
    with np.errstate(over="ignore"):
        with pytest.raises(FloatingPointError, match="E \\(labels\\): overflowed float32"):
            huge.embedding_step(batch=64)(0, E, y_q)
        with pytest.raises(FloatingPointError, match="E \\(labels\\): overflowed float32"):
            huge.sample_embedding(64, 0)


def test_fused_step_checks_its_arguments_once():
    spec = sampling.LinearPrompts(2, 4, seed=0)
    with pytest.raises(ValueError, match="method"):
        spec.fused_step(batch=4, method="nope")
    with pytest.raises(ValueError, match="device"):
        spec.fused_step(batch=4, device="tpu")
    with pytest.raises(TypeError, match="batch"):
        spec.fused_step(batch=4.0)
    with pytest.raises(TypeError, match="dtype"):
        spec.fused_step(batch=4, dtype=np.int32)
    step_fn = spec.fused_step(batch=4, method="auto")
    assert step_fn.method == "wishart" and step_fn.dtype == np.float32


@pytest.mark.parametrize("make", ["lsa", "kernel_attention", "multihead"])
def test_a_cast_batch_is_cast_once_while_it_is_reused(rng, make):
    """dtype differing from the batch's: the cast E is the same array at every step of a fixed
    batch (no per-step copy), and a new batch gets a new cast."""
    if make == "lsa":
        batch = sampling.LinearPrompts(3, 6, seed=3).sample(batch=9, dtype=np.float64)
        objective = train.LSAObjective(*_lsa(rng, 3), dtype=np.float32, fused=False)
    elif make == "multihead":
        batch = sampling.LinearPrompts(3, 6, seed=3).sample(batch=9, dtype=np.float64)
        W_pv, kq = _multihead(rng, 3, bool(rng.integers(2)))
        objective = train.MultiHeadLSAObjective(W_pv, **kq, dtype=np.float32)
    else:
        batch = sampling.KernelGPPrompts(3, 6, "exp", seed=3).sample(batch=9, dtype=np.float64)
        params = ka.KernelAttentionParams.gaussian(rng, 3, 2, 1, "softmax")
        objective = train.KernelAttentionObjective(params, dtype=np.float32)
    seen = []
    first = objective._cast(batch, np.dtype(np.float32))
    seen.append(first[0])
    theta = objective.theta0
    for t in range(3):
        objective.loss_and_grad(theta, t, train.FixedPrompts(batch))
        assert objective._cast(batch, np.dtype(np.float32))[0] is first[0]
    np.testing.assert_array_equal(first[0], batch.E.astype(np.float32))
    other = sampling.LinearPrompts(3, 6, seed=4).sample(batch=9, dtype=np.float64)
    assert objective._cast(other, np.dtype(np.float32))[0] is not first[0]


def test_append_row_keeps_record_columns():
    rows = [{"step": 0, "loss": 1.0, "a": 2.0}, {"step": 1, "b": 3.0},
            {"step": 2, "loss": None, "a": None, "c": [1, 2]}, {"step": 3, "loss": 0.5}]
    fast, slow = History(), History()
    for row in rows:
        fast.append_row(row)
        r = dict(row)
        slow.record(r.pop("step"), r.pop("loss", None), **r)
    assert fast.columns() == slow.columns()
    assert repr(fast.rows()) == repr(slow.rows())  # NaN-aware comparison through repr


@pytest.mark.parametrize("scale", [1.0, 1e-200, 1e160, 1e300])
def test_one_pass_norm_is_numpys(rng, scale):
    g = scale * rng.standard_normal(int(rng.integers(1, 100)))
    with np.errstate(over="ignore", under="ignore"):
        norm = unchecked_grad_norm(g)
        want = float(np.linalg.norm(g))
    if math.isfinite(want):
        assert norm == want  # the same sum, bitwise
    else:  # ‖g‖² overflowed: the rescaled norm
        assert norm == pytest.approx(scale * np.linalg.norm(g / scale), rel=1e-14)
    assert grad_norm(g) == norm
    assert math.isnan(grad_norm(np.array([1.0, np.nan])))


# ---- LinearPrompts.sample(device=) -------------------------------------------------------------

from lsa_native import cuda  # noqa: E402


def test_sample_device_argument():
    spec = sampling.LinearPrompts(2, 3, seed=0)
    with pytest.raises(ValueError, match="device"):
        spec.sample(4, device="tpu")
    with pytest.raises(ValueError, match="device"):
        spec.sample(4, device=None)
    if not cuda.available():
        with pytest.raises(ValueError, match=r"device: 'cuda' needs .*cuda.available\(\) = False"):
            spec.sample(4, device="cuda")
    cpu = spec.sample(4, device="cpu")
    np.testing.assert_array_equal(cpu.E, spec.sample(4).E)


@pytest.mark.cuda
@pytest.mark.skipif(not cuda.available(), reason="needs a GPU")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sample_on_the_device_equals_the_cpu_sample(rng, dtype):
    spec = sampling.LinearPrompts(3, 5, noise_std=0.1, seed=int(rng.integers(2**31)))
    host, gpu = spec.sample(7, step=3, dtype=dtype), spec.sample(7, step=3, dtype=dtype, device="cuda")
    from test_cuda_sampled import SAMPLER_TOL

    # Drawn on the GPU since issue 18: the CPU's values up to the device's log/sin/cos rounding
    # (the sampler's bound, times d + 1, relative to the largest entry; the first H100 run differed
    # by at most 2.4e-16 / 1.5e-7 relative).
    tol = SAMPLER_TOL[dtype] * (spec.dim + 1)
    for name in ("X", "y", "x_q", "y_q", "w", "E"):
        a = getattr(gpu, name)
        assert cuda.is_cuda_array(a)
        want = getattr(host, name)
        assert np.abs(cuda.to_host(a) - want).max() <= tol * np.abs(want).max(), name
    np.testing.assert_array_equal(gpu.Lambda, host.Lambda)


# ---- fit's trajectory is the hand-written loop's, bitwise ----------------------------------------

_OPTIMIZERS = [
    lambda: train.SGD(lr=0.02),
    lambda: train.SGD(lr=0.02, momentum=0.9, nesterov=True, weight_decay=0.01, schedule="cosine"),
    lambda: train.Adam(lr=0.01, clip_norm=0.3, amsgrad=True),
    lambda: train.AdamW(lr=0.01, weight_decay=0.1, schedule="cosine"),
]


def _hand_loop(objective, optimizer, source, steps):
    """The loop fit runs, written out: the objective's unbound step on the prompts of each step
    and the Python optimizer's step; (rows of (loss, ‖g‖, η) for every step and the final θ)."""
    theta = np.array(objective.theta0, dtype=np.float64)
    state, rows = optimizer.init(theta), []
    for t in range(steps):
        loss, grad = objective.loss_and_grad(theta, t, source)
        norm = grad_norm(grad)
        rows.append((loss, norm, optimizer.step(theta, grad, state, norm=norm)["lr"]))
    loss, grad = objective.loss_and_grad(theta, steps - 1, source)  # fit's final row
    rows.append((loss, grad_norm(grad), None))
    return rows, theta


def _multihead(rng, d, separate, scale=0.3):
    """(W_pv, {W_kq} or {W_k, W_q}) of a random H-head model (rank r separate keys/queries)."""
    H, n = int(rng.integers(1, 5)), d + 1
    r = int(rng.integers(1, n + 1))
    draw = lambda *shape: scale * rng.standard_normal(shape)  # noqa: E731
    kq = {"W_k": draw(H, r, n), "W_q": draw(H, r, n)} if separate else {"W_kq": draw(H, n, n)}
    return draw(H, n, n), kq


def _problem(rng, kind, dtype):
    seed = int(rng.integers(2**31))
    if kind.startswith("H-head"):
        _, parametrization, method = kind.split()
        d = int(rng.integers(1, 6))
        # a small start: up to 4 heads of a cubic (separate) model, whose SGD steps at lr = 0.02
        # could otherwise overflow float32 within the run
        W_pv, kq = _multihead(rng, d, parametrization == "separate", scale=0.1)
        spec = sampling.LinearPrompts(d, int(rng.integers(d, 12)), seed=seed)
        return (lambda: train.MultiHeadLSAObjective(W_pv, **kq, method=method),
                train.Prompts(spec, batch=int(rng.integers(1, 90)), resample_every=2,
                              dtype=dtype or np.float32))
    if kind == "kernel attention":
        d = int(rng.integers(1, 4))
        params = ka.KernelAttentionParams.gaussian(rng, d, 2, 1, "softmax",
                                                   sparse=bool(rng.integers(2)))
        spec = sampling.KernelGPPrompts(d, int(rng.integers(1, 7)), "exp", seed=seed)
        return (lambda: train.KernelAttentionObjective(params, dtype=dtype),
                train.Prompts(spec, batch=int(rng.integers(1, 40)), resample_every=2))
    d = int(rng.integers(1, 6))
    W = _lsa(rng, d)
    spec = sampling.LinearPrompts(d, int(rng.integers(d, 12)), seed=seed)
    return (lambda: train.LSAObjective(*W, method=kind),
            train.Prompts(spec, batch=int(rng.integers(1, 90)), dtype=dtype or np.float32))


@pytest.mark.parametrize("make_optimizer", _OPTIMIZERS)
@pytest.mark.parametrize("kind", ["tokens", "wishart", "kernel attention",
                                  "H-head merged tokens", "H-head separate tokens",
                                  "H-head merged wishart", "H-head separate wishart"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fit_trajectory_is_the_hand_written_loop_bitwise(rng, make_optimizer, kind, dtype):
    """Every record (loss, gradient norm, learning rate) and the final θ of fit equal those of the
    plain loop (objective.loss_and_grad + Optimizer.step) bit for bit: the bound step, the native
    optimizer step on host buffers and the records change nothing. A draw whose plain loop
    overflows float32 (heavy-tailed prompts, about 1 in 200 runs) must fail fit the same way."""
    make_objective, source = _problem(rng, kind, dtype)
    steps = int(rng.integers(3, 9))  # >= 3: a θ buffer is reused after the optimizer wrote it
    try:
        want, theta = _hand_loop(make_objective(), make_optimizer(), source, steps)
    except (FloatingPointError, ValueError) as error:
        if "overflow" not in str(error):
            raise
        with pytest.raises(type(error), match=re.escape(str(error).split(":")[0])):
            train.fit(make_objective(), make_optimizer(), data=source, steps=steps, progress=False)
        return
    got = train.fit(make_objective(), make_optimizer(), data=source, steps=steps, progress=False)
    h = got.history
    assert list(h["step"]) == list(range(steps + 1))
    np.testing.assert_array_equal(h["loss"], [r[0] for r in want])
    np.testing.assert_array_equal(h["grad_norm"], [r[1] for r in want])
    np.testing.assert_array_equal(h["lr"][:-1], [r[2] for r in want[:-1]])
    np.testing.assert_array_equal(got.theta, theta)


class _Quadratic(train.Objective):
    """½‖θ − c‖² with a θ of any shape (a duck-typed objective), no data."""

    needs_data = False

    def __init__(self, theta0, c):
        self.theta0, self.c = theta0, c

    def loss_and_grad(self, theta, step, data=None):
        r = theta - self.c
        return 0.5 * float(np.sum(r * r)), r


@pytest.mark.parametrize("shape", [(7,), (3, 4)])
def test_fit_on_any_theta_shape_and_a_subclassed_optimizer_is_the_python_step(rng, shape):
    """The native host step runs the built-in optimizers on a flat θ; a θ of another shape and a
    subclass (which may override ``step``) take the optimizer's own step — same trajectory."""
    calls = []

    class CountingAdam(train.Adam):
        def step(self, theta, grad, state, *, norm=None):
            calls.append(1)
            return super().step(theta, grad, state, norm=norm)

    theta0, c = rng.standard_normal(shape), rng.standard_normal(shape)
    steps = int(rng.integers(1, 7))
    want, theta = _hand_loop(_Quadratic(theta0, c), train.Adam(lr=0.1), None, steps)
    for optimizer in (train.Adam(lr=0.1), CountingAdam(lr=0.1)):
        got = train.fit(_Quadratic(theta0, c), optimizer, steps=steps, progress=False)
        np.testing.assert_array_equal(got.theta, theta)
        np.testing.assert_array_equal(got.history["loss"], [r[0] for r in want])
    assert len(calls) == steps


@pytest.mark.parametrize("shape", [(7,), (3, 4)])
def test_rate_factors_take_every_route(rng, shape):
    """An objective's ``rate_factors`` (one per entry of θ, θ's order): the native host step (flat
    θ), the Python step (a θ of another shape, a subclassed optimizer) and a hand loop of
    ``Optimizer.step(rates=)`` give the same trajectory, another than without the factors."""

    class Rated(_Quadratic):
        def __init__(self, theta0, c, rates):
            super().__init__(theta0, c)
            self.rate_factors = rates

    class PlainAdam(train.Adam):  # a subclass: the Python step
        pass

    theta0, c = rng.standard_normal(shape), rng.standard_normal(shape)
    rates = rng.choice([1.0, 0.1, 3.0], size=theta0.size)
    # One factor other than 1 at least, or "another than without the factors" cannot hold: all 7
    # factors of shape (7,) drew 1 with probability 3⁻⁷ = 4.6e-4 (then plain = theta, bitwise).
    rates[rng.integers(rates.size)] = rng.choice([0.1, 3.0])
    steps = int(rng.integers(2, 7))
    opt = train.Adam(lr=0.1)
    state, theta = opt.init(theta0), theta0.copy()
    for _ in range(steps):
        opt.step(theta, theta - c, state, rates=rates)
    for optimizer in (train.Adam(lr=0.1), PlainAdam(lr=0.1)):
        got = train.fit(Rated(theta0, c, rates), optimizer, steps=steps, progress=False)
        np.testing.assert_array_equal(got.theta, theta)
    plain = train.fit(_Quadratic(theta0, c), train.Adam(lr=0.1), steps=steps, progress=False)
    assert np.abs(plain.theta - theta).max() > 1e-3
    with pytest.raises(ValueError, match="objective.rate_factors: expected factors > 0"):
        train.fit(Rated(theta0, c, np.zeros(theta0.size)), opt, steps=1, progress=False)


def test_progress_bar_ends_on_the_last_loss(capsys, rng):
    """The bar's loss is set at most once per redraw interval, and to the final record's loss at
    the end."""
    pytest.importorskip("tqdm")
    c = rng.standard_normal(4)
    res = train.fit(_Quadratic(np.zeros(4), c), "sgd", lr=0.05, steps=int(rng.integers(30, 300)),
                    progress=True)
    shown = capsys.readouterr().err.rsplit("loss=", 1)[1].split("]")[0].strip()
    assert shown == f"{res.history['loss'][-1]:.4g}"


def test_bound_kernel_attention_step_converts_a_batch_once(rng, monkeypatch):
    """A batch in another dtype than the model's: E and y_q reach the native call as the same
    converted arrays at every step that reuses the batch (no per-step copy), new ones for a new
    batch."""
    from lsa_native import _core

    seen = []
    real = _core.kernel_attention_loss_and_grad

    def spy(Z0, y_q, *args, **kwargs):
        seen.append((Z0, y_q))
        return real(Z0, y_q, *args, **kwargs)

    monkeypatch.setattr(_core, "kernel_attention_loss_and_grad", spy)
    params = ka.KernelAttentionParams.gaussian(rng, 2, 2, 1, "softmax")
    objective = train.KernelAttentionObjective(params, dtype=np.float32)
    spec = sampling.KernelGPPrompts(2, 5, "exp", seed=int(rng.integers(2**31)))
    source = train.Prompts(spec, batch=7, resample_every=3, dtype=np.float64)
    step_fn = objective.bind(source)
    for t in range(6):
        step_fn(objective.theta0, t)
    assert all(E.dtype == np.float32 and y.dtype == np.float32 for E, y in seen)
    for first, later in ((0, 1), (0, 2), (3, 4), (3, 5)):
        assert seen[first][0] is seen[later][0] and seen[first][1] is seen[later][1]
    assert seen[0][0] is not seen[3][0]
    np.testing.assert_array_equal(seen[3][1], source.at(3).y_q.astype(np.float32))


# ---- records every k steps, and the checks made once at the start --------------------------------

_RECORD_COLUMNS = ("step", "loss", "grad_norm", "lr")  # "time" differs between two runs


@pytest.mark.parametrize("optimizer", [0, 2])
@pytest.mark.parametrize("kind", ["tokens", "wishart", "kernel attention", "H-head separate wishart"])
def test_records_every_k_steps_are_the_every_step_records(rng, optimizer, kind):
    """record_every = k (steps not recorded skip the row work) changes nothing but which rows
    are kept: the same final θ bit for bit, and each row of the k run has the every-step run's
    step, loss, grad_norm and lr at that step (the final row included; "time" differs). A draw
    that overflows float32 (heavy-tailed prompts, as in the trajectory test) must diverge in
    both runs the same way: the same error, at the same step, with the same last θ."""
    make_objective, source = _problem(rng, kind, (np.float32, np.float64)[rng.integers(2)])
    steps, k = int(rng.integers(4, 12)), int(rng.integers(2, 5))

    def run(**kwargs):
        try:
            return train.fit(make_objective(), _OPTIMIZERS[optimizer](), data=source, steps=steps,
                             progress=False, **kwargs), None
        except (FloatingPointError, ValueError) as error:
            if not isinstance(error, train.TrainingDiverged) and "overflow" not in str(error):
                raise
            return None, error

    (every, diverged), (sparse, sparse_diverged) = run(), run(record_every=k)
    if diverged is not None or sparse_diverged is not None:
        assert type(sparse_diverged) is type(diverged) and str(sparse_diverged) == str(diverged)
        if isinstance(diverged, train.TrainingDiverged):
            assert sparse_diverged.step == diverged.step
            np.testing.assert_array_equal(sparse_diverged.theta, diverged.theta)
        return
    np.testing.assert_array_equal(sparse.theta, every.theta)
    kept = [*range(0, steps, k), steps]
    assert list(sparse.history["step"]) == kept
    rows = {row["step"]: row for row in every.history.rows()}
    for row in sparse.history.rows():  # (the final row's lr is NaN: assert_equal matches NaNs)
        np.testing.assert_equal([row[c] for c in _RECORD_COLUMNS],
                                [rows[row["step"]][c] for c in _RECORD_COLUMNS])


def test_fit_checks_the_sample_index_range_once_at_the_start():
    """The bound fused steps pass each step's sample index to the native sampler unchecked: fit
    refuses a run whose last index would not fit its 32-bit step counter before any step (a run
    that long could not otherwise be tested: a callback fails the test at the first step taken,
    so a broken check fails fast instead of running 2**32 steps), and accepts the largest that
    fits."""

    def no_step(info):
        pytest.fail(f"step {info.step} ran before the sample-index check")

    fit_module = importlib.import_module("lsa_native.train.fit")  # train.fit is the function
    spec = sampling.LinearPrompts(2, 3, seed=0)
    objective = train.LSAObjective(np.eye(3), np.eye(3))
    for resample_every in (1, 3):
        source = train.Prompts(spec, batch=2, resample_every=resample_every)
        too_many = 2**32 * resample_every + 1  # last index (too_many − 1) // k = 2**32
        with pytest.raises(ValueError, match=r"steps: the last step's sample index .* 2\*\*32"):
            train.fit(objective, "sgd", data=source, steps=too_many, callbacks=no_step,
                      progress=False)
        fit_module._check_sample_indices(source, too_many - 1)  # last index 2**32 − 1: fits
    # numpy's fall-back spec (default_rng([seed, step])) takes any step: not refused
    numpy_spec = train.Prompts(train.LinearPromptsNumpy(2, 3), batch=2)
    fit_module._check_sample_indices(numpy_spec, 2**33)


@pytest.mark.parametrize("kind", ["tokens", "wishart", "H-head merged wishart", "H-head merged tokens"])
@pytest.mark.parametrize("scale", [1e20, 3e38])  # finite in float32; ‖θ‖² and Σθ in float32 are not
def test_bound_float32_step_takes_large_finite_parameters_without_a_warning(rng, kind, scale):
    """The bound float32 steps check θ's float32 range in one reduction, which must not itself
    overflow for parameters that are finite in float32: no FloatingPointError from numpy under
    np.errstate(over="raise") (a bound step called outside fit) and no warning (pytest turns
    warnings into errors). The model itself may overflow: the LSA fused step returns its
    non-finite loss (the caller checks it), the H-head kernels raise their own overflow error."""
    d = int(rng.integers(1, 4))
    spec = sampling.LinearPrompts(d, d + 2, seed=int(rng.integers(2**31)))
    source = train.Prompts(spec, batch=int(rng.integers(1, 9)), dtype=np.float32)
    method = kind.split()[-1]
    if kind.startswith("H-head"):
        W_pv, kq = _multihead(rng, d, separate=False)
        objective = train.MultiHeadLSAObjective(W_pv, **kq, method=method)
    else:
        objective = train.LSAObjective(*_lsa(rng, d), method=method)
    theta = np.full(objective.theta0.size, scale)
    step_fn = objective.bind(source)
    with np.errstate(over="raise"):
        try:
            loss, grad = step_fn(theta, int(rng.integers(3)))
        except FloatingPointError as error:  # the native kernel's, naming the overflowed output
            # Usually the loss; when ŷ cancels below √FLT_MAX (d = 1, one prompt: ~0.4% of draws
            # at 1e20) the loss stays finite and a gradient overflows first. numpy's range-check
            # overflow would read "overflow encountered in …" instead.
            assert kind.startswith("H-head")
            assert re.match(r"(loss|dW_pv|dW_kq): overflowed to non-finite values from finite inputs",
                            str(error)), str(error)
            return
    assert isinstance(loss, float) and grad.shape == theta.shape
