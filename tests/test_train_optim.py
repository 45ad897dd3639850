"""Optimizers and schedules of lsa_native.train against a numpy transcription of the update rules
documented for torch.optim (SGD, Adam, AdamW pseudo-code; clip_grad_norm_; StepLR, ExponentialLR,
CosineAnnealingLR closed forms), 10 steps on a random quadratic through ``fit``, float64."""
from __future__ import annotations

import math

import numpy as np
import pytest

from lsa_native import train

STEPS = 10
TOL = 1e-12  # both sides are float64 arithmetic on O(1) numbers: differences are rounding only


def quadratic(rng, P=7):
    """f(θ) = ½ θᵀAθ − bᵀθ with A symmetric positive definite, cond(A) ~ 10."""
    Q, _ = np.linalg.qr(rng.standard_normal((P, P)))
    A = Q @ np.diag(np.linspace(0.5, 5.0, P)) @ Q.T
    b = rng.standard_normal(P)
    theta0 = rng.standard_normal(P)
    fn = lambda th, step: (0.5 * th @ A @ th - b @ th, A @ th - b)
    return fn, theta0


# ---- the transcription: torch.optim documentation, written out per step -------------------------

def torch_lr(lr, t, kind="constant", gamma=1.0, step_size=1, T_max=1, eta_min=0.0, warmup=0):
    """lr at 0-based step t: StepLR, ExponentialLR, CosineAnnealingLR closed forms, times the
    linear warm-up factor min(1, (t+1)/warmup)."""
    if kind == "constant":
        eta = lr
    elif kind == "step":
        eta = lr * gamma ** (t // step_size)
    elif kind == "exponential":
        eta = lr * gamma**t
    else:
        eta = eta_min + 0.5 * (lr - eta_min) * (1 + math.cos(math.pi * min(t, T_max) / T_max))
    return eta * min(1.0, (t + 1) / warmup) if warmup else eta


def torch_clip(g, max_norm):
    total = np.sqrt(np.sum(g**2))
    return g * min(max_norm / (total + 1e-6), 1.0)


def torch_run(name, fn, theta0, lrs, *, momentum=0.0, dampening=0.0, nesterov=False,
              weight_decay=0.0, betas=(0.9, 0.999), eps=1e-8, amsgrad=False, clip=None,
              bias_correction=True):
    theta = theta0.copy()
    b = m = v = vmax = None
    b1, b2 = betas
    for t in range(1, len(lrs) + 1):
        gamma = lrs[t - 1]
        g = fn(theta, t - 1)[1]
        if clip is not None:
            g = torch_clip(g, clip)
        if name == "sgd":
            if weight_decay != 0:
                g = g + weight_decay * theta
            if momentum != 0:
                b = g if t == 1 else momentum * b + (1 - dampening) * g
                g = g + momentum * b if nesterov else b
            theta = theta - gamma * g
            continue
        if name == "adamw":
            theta = theta - gamma * weight_decay * theta
        elif weight_decay != 0:
            g = g + weight_decay * theta
        m = (1 - b1) * g if t == 1 else b1 * m + (1 - b1) * g
        v = (1 - b2) * g**2 if t == 1 else b2 * v + (1 - b2) * g**2
        c1 = 1 - b1**t if bias_correction else 1.0
        c2 = 1 - b2**t if bias_correction else 1.0
        m_hat = m / c1
        if amsgrad:
            vmax = v if t == 1 else np.maximum(vmax, v)
            v_hat = vmax / c2
        else:
            v_hat = v / c2
        theta = theta - gamma * m_hat / (np.sqrt(v_hat) + eps)
    return theta


CASES = [
    ("sgd", {}, {}),
    ("sgd", {"momentum": 0.9}, {}),
    ("sgd", {"momentum": 0.8, "dampening": 0.3, "weight_decay": 0.05}, {}),
    ("sgd", {"momentum": 0.9, "nesterov": True}, {}),
    ("adam", {}, {}),
    ("adam", {"betas": (0.8, 0.99), "eps": 1e-6, "weight_decay": 0.1}, {}),
    ("adam", {"amsgrad": True}, {}),
    ("adamw", {}, {}),
    ("adamw", {"weight_decay": 0.3, "amsgrad": True}, {}),
]
SCHEDULES = [
    ({}, {}),
    ({"schedule": train.Schedule("step", gamma=0.5, step_size=3)}, {"kind": "step", "gamma": 0.5, "step_size": 3}),
    ({"schedule": train.Schedule("exponential", gamma=0.8)}, {"kind": "exponential", "gamma": 0.8}),
    ({"schedule": train.Schedule("cosine", total_steps=8, min_factor=0.1)},
     {"kind": "cosine", "T_max": 8, "eta_min": 0.1}),  # scaled by lr in the test
    ({"schedule": train.Schedule("cosine", total_steps=10, warmup_steps=4)},
     {"kind": "cosine", "T_max": 10, "warmup": 4}),
]


@pytest.mark.parametrize("name, kw, _", CASES)
@pytest.mark.parametrize("sched_kw, torch_sched", SCHEDULES)
@pytest.mark.parametrize("clip", [None, 0.5])
def test_optimizer_matches_torch_rules(rng, name, kw, _, sched_kw, torch_sched, clip):
    fn, theta0 = quadratic(rng)
    lr = 0.05 if name == "sgd" else 0.1
    if "eta_min" in torch_sched:  # torch's η_min is absolute; min_factor is relative to lr
        torch_sched = dict(torch_sched, eta_min=torch_sched["eta_min"] * lr)
    opt = train.make_optimizer(name, lr=lr, clip_norm=clip, **kw, **sched_kw)
    res = train.fit(fn, opt, theta0=theta0, steps=STEPS, progress=False)
    lrs = [torch_lr(lr, t, **torch_sched) for t in range(STEPS)]
    want = torch_run(name, fn, theta0, lrs, clip=clip, **dict(kw, weight_decay=opt.weight_decay))
    np.testing.assert_allclose(res.theta, want, rtol=0, atol=TOL)
    assert np.abs(res.theta - theta0).max() > 1e-3  # it moved: the comparison has content
    np.testing.assert_allclose(res.history["lr"][:-1], lrs, rtol=1e-15)


def test_transcription_tells_rules_apart(rng):
    """Power check: a rule off by one detail (no bias correction) misses by far more than TOL."""
    fn, theta0 = quadratic(rng)
    res = train.fit(fn, train.Adam(lr=0.1), theta0=theta0, steps=STEPS, progress=False)
    wrong = torch_run("adam", fn, theta0, [0.1] * STEPS, bias_correction=False)
    assert np.abs(res.theta - wrong).max() > 1e-3
    wrong = torch_run("adam", fn, theta0, [0.1] * STEPS, weight_decay=0.01)  # Adam's L2 ≠ AdamW
    res_w = train.fit(fn, train.AdamW(lr=0.1, weight_decay=0.01), theta0=theta0, steps=STEPS, progress=False)
    assert np.abs(res_w.theta - wrong).max() > 1e-6


def test_clip_grad_norm(rng):
    g = rng.standard_normal(11)
    norm = np.linalg.norm(g)
    clipped, n = train.clip_grad_norm(g, norm / 4)
    assert n == norm
    np.testing.assert_allclose(np.linalg.norm(clipped), norm / 4 * norm / (norm + 1e-6), rtol=1e-14)
    np.testing.assert_allclose(clipped / np.linalg.norm(clipped), g / norm, rtol=1e-14)
    same, _ = train.clip_grad_norm(g, 2 * norm)
    assert same is g  # below the threshold: untouched


def test_schedule_values():
    s = train.Schedule("step", gamma=0.1, step_size=2)
    assert [s(t) for t in range(5)] == [1, 1, 0.1 ** 1, 0.1 ** 1, 0.1 ** 2]
    c = train.Schedule("cosine", total_steps=4, min_factor=0.2)
    np.testing.assert_allclose([c(t) for t in (0, 2, 4, 9)], [1, 0.6, 0.2, 0.2], rtol=1e-15)
    w = train.Schedule(warmup_steps=4)
    assert [w(t) for t in range(6)] == [0.25, 0.5, 0.75, 1, 1, 1]


def test_sgd_momentum_state_is_plain_arrays(rng):
    fn, theta0 = quadratic(rng)
    opt = train.SGD(lr=0.1, momentum=0.9)
    state = opt.init(theta0)
    theta = theta0.copy()
    info = opt.step(theta, fn(theta, 0)[1], state)
    assert state["t"] == 1 and info["lr"] == 0.1
    np.testing.assert_array_equal(state["momentum_buffer"], fn(theta0, 0)[1])


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: train.Adam(lr=0), "lr"),
        (lambda: train.SGD(lr=-1), "lr"),
        (lambda: train.Adam(lr=1e-3, betas=(0.9, 1.0)), r"betas\[1\]"),
        (lambda: train.Adam(lr=1e-3, clip_norm=0), "clip_norm"),
        (lambda: train.SGD(lr=1, nesterov=True), "nesterov"),
        (lambda: train.make_optimizer("lbfgs", lr=1), "optimizer"),
        (lambda: train.make_optimizer("adam", lr=1, schedule="linear"), "schedule"),
        (lambda: train.Schedule("cosine", total_steps=0), "total_steps"),
        (lambda: train.Schedule("step", gamma=-1.0), "gamma"),
        (lambda: train.Schedule(warmup_steps=-1), "warmup_steps"),
    ],
)
def test_bad_optimizer_arguments(make, match):
    with pytest.raises((ValueError, TypeError), match=match):
        make()
