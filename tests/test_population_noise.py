"""Label noise in the exact population loss (docs/population.md, "Label noise"): native vs the numpy
reference lsa_native.reference.population for every objective kind — fixed Λ, covariance samples,
random diagonal Λτ (exact by enumeration), and the gradient flow's recorded loss — with
noise_std > 0, with and without query noise, loss and both gradients, float64, tight tolerance.

Power: with every block of (p1, p2, K1, k2) nonzero (random_full_params) each noise term is of the
order of the loss itself, so a wrong coefficient (1 + 2/N → 1 + 1/N in C, a dropped X4/N, a wrong
σ⁴ factor) moves L or a gradient entry by far more than the 1e-12 relative tolerance;
test_noise_terms_are_large_here checks that the σ⁴(1 + 2/N) term alone does, for the cases used."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from lsa_native import population as pop
from lsa_native.reference import population as ref

RTOL = 1e-12

CASES = [(1, 1, 0.3), (1, 4, 1.7), (2, 2, 0.8), (3, 1, 1.2), (3, 7, 0.5), (5, 3, 2.5), (6, 40, 1.0)]


def random_spd(rng, d, spread=3.0):
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return Q @ np.diag(np.geomspace(1 / spread, spread, d)) @ Q.T


def random_full_params(rng, d, scale=0.5):
    """Parameters with every block that affects ŷ nonzero (p1, p2, K1, k2 — SPEC 3.2)."""
    return scale * rng.standard_normal((d + 1, d + 1)), scale * rng.standard_normal((d + 1, d + 1))


def assert_same(got, want):
    """(L, dW_pv, dW_kq) equal to RTOL, each relative to its own largest entry."""
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=RTOL * np.abs(w).max())


def reference_mean(W_pv, W_kq, Lambdas, N, sigma, query):
    """(1/S) Σ_s of the reference (L, dW_pv, dW_kq) over covariance samples Lambdas [S, d, d]."""
    parts = [ref.loss_and_grad(W_pv, W_kq, L, N, sigma, query) for L in Lambdas]
    return tuple(np.mean([p[k] for p in parts], axis=0) for k in range(3))


@pytest.mark.parametrize("query", [False, True])
@pytest.mark.parametrize("d,N,sigma", CASES)
def test_fixed_lambda_noise_matches_reference(rng, d, N, sigma, query):
    Lambda = random_spd(rng, d)
    W_pv, W_kq = random_full_params(rng, d)
    got = pop.loss_and_grad(W_pv, W_kq, Lambda, N, noise_std=sigma, query_noise=query)
    assert_same(got, ref.loss_and_grad(W_pv, W_kq, Lambda, N, sigma, query))
    assert got[0] == pop.loss(W_pv, W_kq, Lambda, N, noise_std=sigma, query_noise=query)


@pytest.mark.parametrize("query", [False, True])
@pytest.mark.parametrize("d,N,sigma", [(1, 2, 0.6), (3, 5, 1.3), (4, 1, 0.9)])
def test_covariance_samples_noise_matches_reference(rng, d, N, sigma, query):
    Lambdas = np.array([random_spd(rng, d) for _ in range(5)])
    W_pv, W_kq = random_full_params(rng, d)
    got = pop.loss_and_grad_samples(W_pv, W_kq, Lambdas, N, noise_std=sigma, query_noise=query)
    assert_same(got, reference_mean(W_pv, W_kq, Lambdas, N, sigma, query))


@pytest.mark.parametrize("query", [False, True])
@pytest.mark.parametrize("values, N, sigma", [((0.5, 2.0), 3, 0.7), ((0.2, 1.0, 3.5), 1, 1.4)])
def test_random_diagonal_noise_matches_enumerated_reference(rng, values, N, sigma, query):
    """Independent entries from a finite law: E over Λτ is an exact average over all diagonals, so
    the moment form (a cubic in λ, differenced natively) must equal the reference's average."""
    d = 3
    vals = np.array(values)
    moments = np.stack([np.full(d, np.mean(vals**k)) for k in (1, 2, 3)])
    diagonals = np.array([np.diag(c) for c in itertools.product(vals, repeat=d)])
    W_pv, W_kq = random_full_params(rng, d)
    got = pop.loss_and_grad_random_diagonal(W_pv, W_kq, moments, N, noise_std=sigma,
                                            query_noise=query)
    want = reference_mean(W_pv, W_kq, diagonals, N, sigma, query)
    # The moment form recovers E over λ from finite differences of a cubic: exact up to rounding
    # amplified by the differencing (~1e-12 relative), as in test_population's enumeration test.
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-11 * np.abs(w).max())


@pytest.mark.parametrize("query", [False, True])
def test_flow_records_the_noisy_loss(rng, query):
    """The flow integrates the same objective: its loss at t = 0 is the reference's noisy loss,
    and a tiny fixed RK4 step moves θ along the reference's −∇L. One step of size h gives
    (θ(h) − θ)/h = −∇L + (h/2)∇²L∇L + O(h²), and the first-order term reaches 1e-4 relative for
    some random θ at h = 1e-7; the Richardson combination 2·D(h) − D(2h) cancels it."""
    d, N, sigma, h = 3, 4, 0.9, 1e-7
    Lambda = random_spd(rng, d)
    W_pv, W_kq = random_full_params(rng, d)
    L, g_pv, g_kq = ref.loss_and_grad(W_pv, W_kq, Lambda, N, sigma, query)

    def one_step(size):
        return pop.gradient_flow(W_pv, W_kq, N, Lambda=Lambda, times=[0.0, size], method="rk4",
                                 step=size, noise_std=sigma, query_noise=query)

    flow, flow2 = one_step(h), one_step(2 * h)
    assert abs(flow.losses[0] - L) <= RTOL * abs(L)
    for k, (W, g) in enumerate(((W_pv, g_pv), (W_kq, g_kq))):
        D1 = (getattr(flow, ("W_pv", "W_kq")[k])[1] - W) / h
        D2 = (getattr(flow2, ("W_pv", "W_kq")[k])[1] - W) / (2 * h)
        # Rounding: (θ(h) − θ) loses ~eps·|θ|/h ≈ 1e-9·|θ| per entry, amplified 3x by Richardson.
        np.testing.assert_allclose(2 * D1 - D2, -g, rtol=1e-6,
                                   atol=1e-6 * np.abs(g).max() + 1e-7 * np.abs(W).max())


# The noisy loss's finite-difference check is test_population.py::test_gradient_matches_finite_differences
# (its noise_std > 0, query_noise=True cases).


def test_query_noise_adds_half_sigma_squared(rng):
    d, N, sigma = 3, 5, 0.8
    Lambda = random_spd(rng, d)
    W_pv, W_kq = random_full_params(rng, d)
    without = pop.loss_and_grad(W_pv, W_kq, Lambda, N, noise_std=sigma)
    with_q = pop.loss_and_grad(W_pv, W_kq, Lambda, N, noise_std=sigma, query_noise=True)
    assert abs(with_q[0] - without[0] - 0.5 * sigma**2) <= RTOL * abs(with_q[0])
    for g, w in zip(with_q[1:], without[1:]):  # a constant: the gradients do not move
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("d,N,sigma", CASES)
def test_noise_terms_are_large_here(rng, d, N, sigma):
    """Power of the comparisons above: the σ⁴(1 + 2/N) part, ½p2²σ⁴(1 + 2/N)κ2 with
    κ2 = k2ᵀΛk2, changes by ½p2²σ⁴κ2/N under 2/N → 1/N; that is >> RTOL·|L| for these cases
    when p2 and k2 are of order one (set so here: a random draw can make them arbitrarily small,
    and the check then failed for some seeds at d = 1)."""
    Lambda = random_spd(rng, d)
    W_pv, W_kq = random_full_params(rng, d)
    W_pv[d, d] = 1.0  # p2
    W_kq[d, :d] = 1.0 / np.sqrt(d)  # k2
    _, p2, _, k2 = ref.split_params(W_pv, W_kq)
    L = ref.loss_and_grad(W_pv, W_kq, Lambda, N, sigma)[0]
    shift = 0.5 * p2**2 * sigma**4 * (k2 @ Lambda @ k2) / N
    assert shift > 1e4 * RTOL * abs(L)


@pytest.mark.parametrize("query", [False, True])
def test_sampled_prompts_carry_the_population_noise(rng, query):
    """The native sampler draws the noise the population loss assumes: y_i − <w, x_i> = σ ε_i with
    ε_i ~ N(0, 1) (mean 0, variance σ², fourth moment 3σ⁴), and y_q − <w, x_q> the same with query
    noise, exactly 0 without. 12 000 residuals: a wrong σ scale (σ/2: variance σ²/4) gives z ≈ 60."""
    from lsa_native.sampling import LinearPrompts

    d, N, B, sigma = 3, 30, 400, 0.7
    spec = LinearPrompts(d, N, random_spd(rng, d), noise_std=sigma, query_noise=query,
                         seed=int(rng.integers(2**63)))
    b = spec.sample(B, step=int(rng.integers(2**31)), dtype=np.float64)
    r = (b.y - np.einsum("bnd,bd->bn", b.X, b.w)).ravel() / sigma
    n = r.size
    # z < 6: a mean of ε⁴ (skewness ~10, excess kurtosis ~300) over 12000 draws has Edgeworth
    # terms of the size of the Gaussian tail at z = 5 (P ≈ 1e-6 per check), ~5e-9 at 6.
    assert abs(r.mean()) / np.sqrt(1 / n) < 6
    assert abs(np.mean(r**2) - 1) / np.sqrt(2 / n) < 6  # Var(ε²) = 2
    assert abs(np.mean(r**4) - 3) / np.sqrt(96 / n) < 6  # Var(ε⁴) = 105 − 9
    r_q = b.y_q - np.einsum("bd,bd->b", b.x_q, b.w)
    if query:
        assert abs(np.mean(r_q**2) / sigma**2 - 1) / np.sqrt(2 / B) < 6
    else:
        np.testing.assert_allclose(r_q, 0, atol=1e-12 * np.abs(b.y_q).max())
