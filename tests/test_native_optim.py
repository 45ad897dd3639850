"""The native optimizer step (train.native_optim, common/optim_recipe.hpp) against the Python
optimizers of train.optim (float64: bitwise given the same gradient norm, to rounding with the
native fixed-order norm) and against torch.optim; its divergence record; the GPU backend (skips
without a GPU)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from lsa_native import cuda, train
from lsa_native.train import native_optim
from lsa_native.train.native_optim import BAD_GRADIENT, BAD_PARAMETERS, NativeOptimizer
from lsa_native.train.optim import grad_norm

CONFIGS = [
    ("sgd", {}),
    ("sgd", {"weight_decay": 0.1}),
    ("sgd", {"momentum": 0.9}),
    ("sgd", {"momentum": 0.8, "dampening": 0.3, "weight_decay": 0.05}),
    ("sgd", {"momentum": 0.9, "nesterov": True}),
    ("adam", {}),
    ("adam", {"weight_decay": 0.1, "betas": (0.8, 0.99), "eps": 1e-6}),
    ("adam", {"amsgrad": True}),
    ("adamw", {}),
    ("adamw", {"weight_decay": 0.3, "amsgrad": True}),
]
CLIPS = [None, 0.5]


def _optimizer(name, kwargs, clip, schedule=None):
    return train.make_optimizer(name, lr=0.05, clip_norm=clip, schedule=schedule, **kwargs)


def _rates(rng, P, rated):
    """Per-entry rate factors (parameter groups at 1, a tenth and 2.5 times the rate) or None."""
    return rng.choice([1.0, 0.1, 2.5], size=P) if rated else None


def _gradients(rng, P, steps, theta_dtype=np.float64):
    scales = rng.uniform(0.1, 3.0, size=steps)
    return [(s * rng.standard_normal(P)).astype(theta_dtype) for s in scales]


@pytest.mark.parametrize("name, kwargs", CONFIGS)
@pytest.mark.parametrize("clip", CLIPS)
@pytest.mark.parametrize("rated", [False, True])
def test_native_step_equals_the_python_optimizer(rng, name, kwargs, clip, rated):
    """Given the same gradient norm, θ and the state are bitwise equal to the Python step after every
    step. The native fixed-order norm is another summation order: equal to ‖g‖ to a few ulps, and the
    Python step fed that norm is again bitwise equal (θ itself is not compared across the two norms:
    Adam's m/(√v + ε) amplifies a one-ulp change of the clipping factor by up to |g|/ε where an entry's
    gradient nearly cancels its weight decay). ``rated``: per-entry rate factors."""
    P, steps = int(rng.integers(1, 600)), 7
    opt = _optimizer(name, kwargs, clip, schedule="cosine" if clip else None)
    theta0, rates = rng.standard_normal(P), _rates(rng, P, rated)
    ref_theta, ref_state = theta0.copy(), opt.init(theta0)
    own_ref_theta, own_ref_state = theta0.copy(), opt.init(theta0)
    given = NativeOptimizer(opt, theta0, rates=rates)
    own = NativeOptimizer(opt, theta0, rates=rates)
    for k, g in enumerate(_gradients(rng, P, steps)):
        info = opt.step(ref_theta, g, ref_state, rates=rates)
        given.grad[...] = g
        assert given.step(k, norm=grad_norm(g)) == info["lr"]
        np.testing.assert_array_equal(given.current, ref_theta)
        _, state = given.host_state()
        assert state.keys() == ref_state.keys() and state["t"] == ref_state["t"]
        for key in state:
            np.testing.assert_array_equal(state[key], ref_state[key])

        own.grad[...] = g
        assert own.step(k) == info["lr"]
        norm, code, first = own.status()
        assert code == 0 and first == -1 and norm == pytest.approx(info["grad_norm"], rel=1e-14)
        opt.step(own_ref_theta, g, own_ref_state, norm=norm, rates=rates)
        np.testing.assert_array_equal(own.current, own_ref_theta)
        _, state = own.host_state()
        for key in state:
            np.testing.assert_array_equal(state[key], own_ref_state[key])


@pytest.mark.parametrize("name, kwargs", CONFIGS)
@pytest.mark.parametrize("clip", CLIPS)
@pytest.mark.parametrize("groups", [1, 2])
def test_native_step_equals_torch_optim(rng, name, kwargs, clip, groups):
    """groups = 2: the first ``cut`` entries a torch parameter group at a tenth of the rate, the
    native step's rate factors 0.1 there (one clipping norm over both, as clip_grad_norm_)."""
    torch = pytest.importorskip("torch")
    P, steps = int(rng.integers(2, 300)), 6
    cut = int(rng.integers(1, P)) if groups == 2 else 0
    opt = _optimizer(name, kwargs, clip)
    theta0 = rng.standard_normal(P)
    native = NativeOptimizer(opt, theta0, rates=np.r_[np.full(cut, 0.1), np.ones(P - cut)])
    parts = [torch.nn.Parameter(torch.tensor(x, dtype=torch.float64))
             for x in np.split(theta0, [cut]) if x.size]
    rates = [0.1, 1.0][2 - len(parts):]
    cls = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[name]
    torch_opt = cls([{"params": [p], "lr": 0.05 * r} for p, r in zip(parts, rates)], lr=0.05, **kwargs)
    for k, g in enumerate(_gradients(rng, P, steps)):
        for p, piece in zip(parts, np.split(g, [cut]) if cut else [g]):
            p.grad = torch.tensor(piece)
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(parts, clip)
        torch_opt.step()
        native.grad[...] = g
        native.step(k)
        np.testing.assert_allclose(native.current, np.concatenate([p.detach().numpy() for p in parts]),
                                   rtol=1e-12, atol=1e-14)


def test_float32_gradient_and_model_copy(rng):
    opt = train.Adam(lr=0.01)
    theta0 = rng.standard_normal(37)
    native = NativeOptimizer(opt, theta0, grad_dtype=np.float32, model=True)
    ref_theta, ref_state = theta0.copy(), opt.init(theta0)
    for k, g in enumerate(_gradients(rng, 37, 4, np.float32)):
        opt.step(ref_theta, g.astype(np.float64), ref_state, norm=grad_norm(g))
        native.grad[...] = g
        native.step(k, norm=grad_norm(g))
        np.testing.assert_array_equal(native.current, ref_theta)
        np.testing.assert_array_equal(native.model, ref_theta.astype(np.float32))


def test_a_non_finite_gradient_is_recorded_and_freezes_the_run(rng):
    opt = train.SGD(lr=0.1, momentum=0.9)
    theta0 = rng.standard_normal(10)
    native = NativeOptimizer(opt, theta0)
    native.grad[...] = 1.0
    native.step(0)
    good = native.current.copy()
    native.grad[3] = np.nan
    native.step(1)
    native.grad[...] = 1.0
    native.step(2)  # after a failure: does nothing
    norm, code, first = native.status()
    assert code == BAD_GRADIENT and first == 1 and math.isnan(norm)
    np.testing.assert_array_equal(native.theta_read_at(1), good)  # θ of the failing step


def test_a_non_finite_update_is_recorded_with_the_parameters_before_it():
    opt = train.Adam(lr=0.1, eps=0.0)  # m̂/√v̂ = 0/0 at a zero gradient
    native = NativeOptimizer(opt, np.ones(4))
    native.grad[...] = 0.0
    native.step(0)
    _, code, first = native.status()
    assert code == BAD_PARAMETERS and first == 0
    np.testing.assert_array_equal(native.theta_read_at(0), np.ones(4))
    assert np.isnan(native.theta_read_at(1)).all()


def test_a_huge_finite_gradient_has_a_finite_norm():
    g = np.full(5, 1e300)
    native = NativeOptimizer(train.SGD(lr=1e-310, clip_norm=1.0), np.zeros(5))
    native.grad[...] = g
    native.step(0)
    norm, code, _ = native.status()
    assert code == 0 and norm == pytest.approx(math.sqrt(5) * 1e300, rel=1e-15)


def test_resume_from_a_host_state_continues_the_same_steps(rng):
    opt = train.Adam(lr=0.02, amsgrad=True)
    theta0 = rng.standard_normal(12)
    grads = _gradients(rng, 12, 6)
    whole = NativeOptimizer(opt, theta0)
    for k, g in enumerate(grads):
        whole.grad[...] = g
        whole.step(k)
    first = NativeOptimizer(opt, theta0)
    for k, g in enumerate(grads[:3]):
        first.grad[...] = g
        first.step(k)
    theta, state = first.host_state()
    second = NativeOptimizer(opt, theta, opt_state=state)
    for k, g in enumerate(grads[3:], start=3):
        second.grad[...] = g
        second.step(k)
    np.testing.assert_array_equal(second.current, whole.current)


def test_bad_arguments():
    with pytest.raises(TypeError, match="optimizer"):
        NativeOptimizer(object(), np.zeros(3))
    with pytest.raises(ValueError, match="opt_state"):
        NativeOptimizer(train.Adam(), np.zeros(3), opt_state={"t": 0})
    with pytest.raises(TypeError, match="grad_dtype"):
        NativeOptimizer(train.SGD(), np.zeros(3), grad_dtype=np.int32)
    with pytest.raises(ValueError, match=r"rates: expected 3 factors \(one per entry of θ\)"):
        NativeOptimizer(train.SGD(), np.zeros(3), rates=np.ones(4))
    with pytest.raises(ValueError, match="rates: expected factors >= 0"):
        NativeOptimizer(train.SGD(), np.zeros(3), rates=[1.0, -0.1, 1.0])
    with pytest.raises(ValueError, match="rates: expected factors > 0"):  # θ's own order
        train.SGD().step(np.zeros(3), np.ones(3), train.SGD().init(np.zeros(3)), rates=[1.0, 0.0, 1.0])
    if not cuda.available():
        with pytest.raises(ValueError, match="cuda"):
            native_optim.backend("cuda")


@pytest.mark.cuda
@pytest.mark.skipif(not cuda.available(), reason="needs a GPU")
@pytest.mark.parametrize("name, kwargs", CONFIGS)
def test_gpu_step_equals_the_cpu_step_bitwise(rng, name, kwargs):
    """No FMA contraction in the kernel and the CPU's summation order: the same bits."""
    opt = _optimizer(name, kwargs, 0.5)
    theta0, rates = rng.standard_normal(700), _rates(rng, 700, True)
    rates[::7] = 0  # entries that are not parameters
    host = NativeOptimizer(opt, theta0, rates=rates)
    gpu = NativeOptimizer(opt, theta0, native_optim.CUDA, rates=rates)
    for k, g in enumerate(_gradients(rng, 700, 5)):
        host.grad[...] = g
        host.step(k)
        native_optim.CUDA.write(gpu.grad, g)
        gpu.step(k)
    theta, state = gpu.host_state()
    np.testing.assert_array_equal(theta, host.current)
    assert gpu.status() == host.status()


# ---- fit with θ and the optimizer state in native buffers (the GPU loop, run on host arrays) ----

import importlib  # noqa: E402

from lsa_native import sampling  # noqa: E402

fit_module = importlib.import_module("lsa_native.train.fit")  # (train.fit is the function)


@pytest.fixture
def native_loop(monkeypatch):
    """fit's device loop with the host array backend: the same Python code as on a GPU."""
    monkeypatch.setattr(fit_module, "_native_arrays", lambda plan: native_optim.HOST)


def _lsa_problem(seed, dtype=np.float64):
    spec = sampling.LinearPrompts(3, 9, seed=seed)
    rng = np.random.default_rng(seed)
    W_pv, W_kq = 0.2 * rng.standard_normal((4, 4)), 0.2 * rng.standard_normal((4, 4))
    return train.LSAObjective(W_pv, W_kq), train.Prompts(spec, batch=33, dtype=dtype)


def _fit(seed, optimizer, **kw):
    objective, source = _lsa_problem(seed, kw.pop("dtype", np.float64))
    return train.fit(objective, optimizer, data=source, progress=False, **kw)


# SGD at 0.05 with momentum 0.9 diverged within the 13 steps for 9 of 4000 draws of this problem;
# at 0.01 for 0 of 10000.
@pytest.mark.parametrize("optimizer, exact", [
    (train.SGD(lr=0.01, momentum=0.9), True),
    (train.AdamW(lr=0.01, weight_decay=0.1), True),
    (train.Adam(lr=0.01, clip_norm=0.05), False),  # the native norm: another summation order
])
@pytest.mark.parametrize("record_every", [1, 4])
def test_native_loop_follows_the_host_loop(rng, monkeypatch, optimizer, exact, record_every):
    seed = int(rng.integers(2**31))
    host = _fit(seed, optimizer, steps=13, record_every=record_every)
    monkeypatch.setattr(fit_module, "_native_arrays", lambda plan: native_optim.HOST)
    native = _fit(seed, optimizer, steps=13, record_every=record_every)
    if exact:
        np.testing.assert_array_equal(native.theta, host.theta)
        np.testing.assert_array_equal(native.history["loss"], host.history["loss"])
    else:
        np.testing.assert_allclose(native.theta, host.theta, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(native.history["loss"], host.history["loss"], rtol=1e-10)
    assert native.history.step == host.history.step
    np.testing.assert_allclose(native.history["grad_norm"], host.history["grad_norm"], rtol=1e-13)
    np.testing.assert_array_equal(native.history["lr"], host.history["lr"])


@pytest.mark.parametrize("record_every", [1, 5])
def test_native_loop_divergence_names_the_step_and_the_last_finite_parameters(native_loop, rng,
                                                                             monkeypatch,
                                                                             record_every):
    seed = int(rng.integers(2**31))
    with pytest.raises(train.TrainingDiverged, match="lower the learning rate") as e:
        _fit(seed, train.SGD(lr=1e6), steps=60, record_every=record_every)
    err = e.value
    assert err.step >= 1 and err.lr == 1e6 and np.all(np.isfinite(err.theta))
    # The same failure as the host loop, whatever the record interval (detection is deferred).
    monkeypatch.setattr(fit_module, "_native_arrays", lambda plan: None)
    with pytest.raises(train.TrainingDiverged) as host:
        _fit(seed, train.SGD(lr=1e6), steps=60, record_every=record_every)
    assert host.value.step == err.step
    np.testing.assert_array_equal(host.value.theta, err.theta)


def test_native_loop_checkpoints_host_arrays_and_resumes_bitwise(native_loop, rng, tmp_path):
    seed = int(rng.integers(2**31))
    opt = train.Adam(lr=0.01, amsgrad=True)
    whole = _fit(seed, opt, steps=12, run_dir=tmp_path / "a", checkpoint_every=4)
    stop = lambda info: info.step == 6  # noqa: E731  (stops after step 6: checkpoint at 4)
    _fit(seed, opt, steps=12, run_dir=tmp_path / "b", checkpoint_every=4, callbacks=stop)
    ckpt = sorted((tmp_path / "b").glob("ckpt_*.npz"))[-1]
    with np.load(ckpt) as z:
        assert all(isinstance(z[k], np.ndarray) for k in z.files)
    resumed = _fit(seed, opt, steps=12, run_dir=tmp_path / "b", checkpoint_every=4, resume=True)
    np.testing.assert_array_equal(resumed.theta, whole.theta)


def test_device_is_not_part_of_the_lsa_objective_identity():
    a = train.LSAObjective(np.eye(3), np.eye(3), device="cpu")
    b = train.LSAObjective(np.eye(3), np.eye(3), device="auto")
    assert a.config() == b.config() and "device" not in a.config()


@pytest.mark.cuda
@pytest.mark.skipif(not cuda.available(), reason="needs a GPU")
def test_gpu_fit_keeps_theta_on_the_device_and_matches_the_cpu(rng):
    seed = int(rng.integers(2**31))
    spec = sampling.LinearPrompts(3, 9, seed=seed)
    W = 0.2 * np.random.default_rng(seed).standard_normal((2, 4, 4))
    source = train.Prompts(spec, batch=64, dtype=np.float64)
    results = [train.fit(train.LSAObjective(W[0], W[1], device=device), train.Adam(lr=0.01),
                         data=source, steps=20, record_every=5, progress=False)
               for device in ("cpu", "cuda")]
    np.testing.assert_allclose(results[1].theta, results[0].theta, rtol=1e-9)
    np.testing.assert_allclose(results[1].history["loss"], results[0].history["loss"], rtol=1e-9)
