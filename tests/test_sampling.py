"""Native linear-prompt samplers (lsa_native.sampling.LinearPrompts) and the fused LSA steps.

Statistical checks: z-scores with |z| < 5 (false alarm < 1e-6 per check) on fixed fresh seeds, each
with a power check (a deliberately wrong model must give |z| > 5).
"""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

import lsa_native as ln
from lsa_native import data, lsa, population
from lsa_native.experiments._stats import t_threshold
from lsa_native.sampling import LinearPrompts

from conftest import SEED

Z_MAX = 5.0
# The z threshold of means of skewed powers (λ³ of the covariance laws): 3 z's per law stay
# below 1e-8 at 6 where Z_MAX would not.
Z_SKEWED = 6.0


def _spd(rng, d):
    A = rng.standard_normal((d, d))
    return A @ A.T / d + 0.5 * np.eye(d)


def _zmean(x, mu):
    x = np.asarray(x, np.float64)
    return (x.mean(0) - mu) / (x.std(0, ddof=1) / np.sqrt(x.shape[0]))


# ---- structure and determinism ---------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d,N", [(1, 1), (3, 7), (5, 20), (4, 2)])
def test_batch_is_consistent(dtype, d, N):
    rng = np.random.default_rng(100 + d + N)
    spec = LinearPrompts(d, N, _spd(rng, d), noise_std=0.3, seed=7)
    b = spec.sample(9, step=4, dtype=dtype)
    assert b.E.dtype == dtype and b.E.shape == (9, d + 1, N + 1)
    np.testing.assert_array_equal(b.E[:, :d, :N], np.swapaxes(b.X, 1, 2))
    np.testing.assert_array_equal(b.E[:, d, :N], b.y)
    np.testing.assert_array_equal(b.E[:, :d, N], b.x_q)
    assert np.all(b.E[:, d, N] == 0)
    tol = 1e-5 if dtype == np.float32 else 1e-13  # one rounding of the dot product in dtype
    np.testing.assert_allclose(b.y_q, np.einsum("bd,bd->b", b.x_q, b.w), rtol=tol, atol=tol * 10)
    E, y_q = spec.sample_embedding(9, step=4, dtype=dtype)
    np.testing.assert_array_equal(E, b.E)
    np.testing.assert_array_equal(y_q, b.y_q)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_same_seed_same_batch_for_1_and_2_threads(dtype):
    spec = LinearPrompts(4, 9, noise_std=0.5, tasks=17, seed=2**63 + 5)
    W = np.random.default_rng(1).standard_normal((2, 5, 5))
    before = ln.num_threads()
    try:
        out = []
        for t in (1, 2):
            ln.set_num_threads(t)
            out.append((spec.sample(1000, step=3, dtype=dtype).E,
                        spec.lsa_loss_and_grad(W[0], W[1], batch=1000, step=3, dtype=dtype),
                        spec.lsa_loss_and_grad(W[0], W[1], batch=1000, step=3, method="wishart",
                                               dtype=dtype)))
    finally:
        ln.set_num_threads(before)
    np.testing.assert_array_equal(out[0][0], out[1][0])
    for k in (1, 2):
        assert out[0][k][0] == out[1][k][0]
        np.testing.assert_array_equal(out[0][k][1], out[1][k][1])
        np.testing.assert_array_equal(out[0][k][2], out[1][k][2])
    other = spec.sample(1000, step=4, dtype=dtype).E
    assert not np.array_equal(other, out[0][0])
    # the prompt index addresses a prompt: a smaller batch is a prefix
    np.testing.assert_array_equal(spec.sample(10, step=3, dtype=dtype).E, out[0][0][:10])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d,N,B", [(1, 1, 5), (3, 5, 300), (5, 20, 129), (2, 33, 1)])
def test_tokens_step_equals_kernel_on_sampled_batch(dtype, d, N, B):
    rng = np.random.default_rng(d * 100 + N)
    spec = LinearPrompts(d, N, _spd(rng, d), noise_std=0.2, seed=int(rng.integers(2**32)))
    W_pv, W_kq = rng.standard_normal((2, d + 1, d + 1)).astype(dtype)
    E, y_q = spec.sample_embedding(B, step=11, dtype=dtype)
    L0, gp0, gk0 = lsa.loss_and_grad(E, y_q, W_pv, W_kq)
    L1, gp1, gk1 = spec.lsa_loss_and_grad(W_pv, W_kq, batch=B, step=11, dtype=dtype)
    # identical per-prompt arithmetic; only the grouping of the float64 batch sums differs
    np.testing.assert_allclose(L1, L0, rtol=1e-10)
    scale = max(np.abs(gp0).max(), np.abs(gk0).max())
    np.testing.assert_allclose(gp1, gp0, rtol=1e-6, atol=1e-10 * scale)
    np.testing.assert_allclose(gk1, gk0, rtol=1e-6, atol=1e-10 * scale)


# ---- the law of the prompts ------------------------------------------------------------------

def test_moments_of_x_w_y_and_power():
    rng = np.random.default_rng(2024)
    d, N, B = 3, 4, 40000
    Lam = _spd(rng, d)
    b = LinearPrompts(d, N, Lam, noise_std=0.5, seed=99).sample(B, dtype=np.float64)
    X = b.X.reshape(-1, d)
    # E[x x^T] = Λ entrywise (z-test per entry), E[w w^T] = I, Var(y) = tr Λ + σ²
    zx = _zmean(np.einsum("ni,nj->nij", X, X).reshape(len(X), -1), Lam.ravel())
    assert np.abs(zx).max() < Z_MAX
    zw = _zmean(np.einsum("ni,nj->nij", b.w, b.w).reshape(B, -1), np.eye(d).ravel())
    assert np.abs(zw).max() < Z_MAX
    assert abs(_zmean(b.x_q, 0).max()) < Z_MAX
    zy = _zmean(b.y[:, 0] ** 2, np.trace(Lam) + 0.25)
    assert abs(zy) < Z_MAX
    assert abs(_zmean(b.y_q ** 2, np.trace(Lam))) < Z_MAX
    # power: Λ scaled by 5% is rejected
    assert np.abs(_zmean(np.einsum("ni,nj->nij", X, X).reshape(len(X), -1), 1.05 * Lam.ravel())).max() > Z_MAX


def test_two_sample_against_numpy_reference():
    rng = np.random.default_rng(31)
    d, N, B = 3, 5, 20000
    Lam = _spd(rng, d)
    nat = LinearPrompts(d, N, Lam, noise_std=0.4, seed=12).sample(B, dtype=np.float64)
    ref = data.linear_regression_prompts(np.random.default_rng(5), B, d, N, Lam, noise_std=0.4)
    for a, b in [(nat.y_q, ref.y_q), (nat.y[:, 2], ref.y[:, 2]), (nat.X[:, 1, 0], ref.X[:, 1, 0]),
                 (nat.E[:, d, :N].ravel(), ref.E[:, d, :N].ravel())]:
        assert stats.ks_2samp(a, b).pvalue > 1e-4
    # power: a reference with Λ scaled by 1.3 is told apart
    ref1 = data.linear_regression_prompts(np.random.default_rng(6), B, d, N, 1.3 * Lam, noise_std=0.4)
    assert stats.ks_2samp(nat.y_q, ref1.y_q).pvalue < 1e-4


@pytest.mark.parametrize("law,mean,var", [
    (("exponential", 2.0), 2.0, 4.0),
    (("gamma", 3.0, 0.5), 1.5, 0.75),
    (("uniform", 0.5, 2.5), 1.5, 4.0 / 12),
    (("two_point", 1.0, 4.0, 0.25), 3.25, 9 * 0.25 * 0.75),
])
def test_random_covariance_laws(law, mean, var):
    d, B = 4, 50000
    spec = LinearPrompts(d, 3, covariance_law=law, seed=77)
    lam = spec.sample_lambdas(B).ravel()
    z_mean = (lam.mean() - mean) / np.sqrt(var / lam.size)
    assert abs(z_mean) < Z_MAX
    assert abs((lam.var() - var) / (var * np.sqrt(2.0 / lam.size) * 3)) < Z_MAX  # loose: kurtosis
    assert abs((lam.mean() - 1.03 * mean) / np.sqrt(var / lam.size)) > Z_MAX  # power
    # covariates given λ: x_k / sqrt(λ_k) ~ N(0, 1)
    b = spec.sample(2000, dtype=np.float64)
    lam_b = spec.sample_lambdas(2000)
    xs = (b.X / np.sqrt(lam_b)[:, None, :]).ravel()
    assert stats.kstest(xs, "norm").pvalue > 1e-4


# One example of every law of the native table (a new law needs one: test_law_table_is_complete).
LAW_EXAMPLES = {"exponential": (2.0,), "gamma": (3.0, 0.5), "uniform": (0.5, 2.5), "two_point": (1.0, 4.0, 0.25)}


def test_law_table_is_complete():
    """The laws come from the native table; each has an example here and moments and a bound in
    lsa_native.covariance_laws (a law without them fails loudly, naming itself)."""
    from lsa_native import _core, covariance_laws

    assert ln.sampling.COVARIANCE_LAWS is _core.COVARIANCE_LAWS is covariance_laws.COVARIANCE_LAWS
    assert set(LAW_EXAMPLES) == set(_core.COVARIANCE_LAWS)
    assert set(covariance_laws._FORMULAS) == set(_core.COVARIANCE_LAWS)
    for name, params in _core.COVARIANCE_LAWS.items():
        assert isinstance(params, tuple) and len(params) == len(LAW_EXAMPLES[name]) >= 1
        LinearPrompts(2, 3, covariance_law=(name, *LAW_EXAMPLES[name]))  # the native table knows it
    missing = {k: v for k, v in covariance_laws._FORMULAS.items() if k != "gamma"}
    law = covariance_laws.parse_law(("gamma", 2.0, 1.0))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(covariance_laws, "_FORMULAS", missing)
        for f in (covariance_laws.law_moments, covariance_laws.lambda_max):
            with pytest.raises(NotImplementedError, match="gamma"):
                f(law)


@pytest.mark.parametrize("name", sorted(LAW_EXAMPLES))
def test_covariance_law_moments_match_the_draws(name, rng):
    """(E λ, E λ², E λ³) of population.covariance_law_moments against the native draws (z-scores),
    every draw within the law's bound; power: the moments of the law with its values scaled by 1.1
    are rejected."""
    from lsa_native import covariance_laws

    params = LAW_EXAMPLES[name]
    d, B = 4, 40000
    spec = LinearPrompts(d, 2, covariance_law=(name, *params), seed=int(rng.integers(2**63)))
    lam = spec.sample_lambdas(B).ravel()
    powers = np.stack([lam, lam**2, lam**3], axis=1)
    m = population.covariance_law_moments(d, (name, *params))
    assert m.shape == (3, d) and np.all(m == m[:, :1])
    assert np.abs(_zmean(powers, m[:, 0])).max() < Z_SKEWED
    scaled = tuple(1.1 * v for v in params[:2]) + params[2:]
    wrong = population.covariance_law_moments(d, (name, *scaled))
    assert np.abs(_zmean(powers, wrong[:, 0])).max() > Z_SKEWED  # |z| >= 40
    bound = covariance_laws.lambda_max(covariance_laws.parse_law((name, *params)))
    assert lam.max() <= bound
    assert spec.sample_lambdas(B, dtype=np.float32).max() <= bound


def test_covariance_law_moments_errors():
    d = 3
    np.testing.assert_array_equal(population.covariance_law_moments(d, ("exponential", 1.7)),
                                  population.exponential_moments(d, 1.7))
    np.testing.assert_array_equal(population.covariance_law_moments(d, "exponential"),
                                  population.exponential_moments(d))
    with pytest.raises(ValueError, match="covariance_law: expected a random law"):
        population.covariance_law_moments(d, None)
    with pytest.raises(ValueError, match="covariance_law: uniform needs 0 <= lo < hi"):
        population.covariance_law_moments(d, ("uniform", 2.0, 1.0))
    with pytest.raises(ValueError, match="unknown law"):
        population.covariance_law_moments(d, ("cauchy", 1.0))
    with pytest.raises(ValueError, match="d"):
        population.covariance_law_moments(0, "exponential")
    with pytest.raises(FloatingPointError, match="moments"):
        population.covariance_law_moments(d, ("gamma", 1e110, 1.0))


def test_task_pool():
    d, kappa, B = 3, 5, 20000
    spec = LinearPrompts(d, 2, tasks=kappa, seed=3)
    w1 = spec.sample(B, step=0, dtype=np.float64).w
    w2 = spec.sample(B, step=1, dtype=np.float64).w
    pool = np.unique(np.concatenate([w1, w2]), axis=0)
    assert len(pool) == kappa  # the same κ tasks at every step
    counts = np.array([(np.abs(w1 - t).sum(1) == 0).sum() for t in pool])
    assert stats.chisquare(counts).pvalue > 1e-4  # uniform over the pool
    assert not np.array_equal(w1, w2)
    assert len(np.unique(LinearPrompts(d, 2, tasks=1, seed=3).sample(50).w, axis=0)) == 1


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_task_pool_drawn_once_per_range_gives_the_per_prompt_draws(dtype):
    # A range of >= κ prompts draws the pool once and copies; a shorter one draws per prompt. Both
    # are the same Philox positions, hence the same bits.
    spec = LinearPrompts(3, 4, tasks=7, noise_std=0.3, seed=SEED)
    few = spec.sample(3, step=2, dtype=dtype)    # 3 < κ: per-prompt draws
    many = spec.sample(300, step=2, dtype=dtype)  # cached pool
    np.testing.assert_array_equal(few.w, many.w[:3])
    np.testing.assert_array_equal(few.E, many.E[:3])


def test_sphere_covariates():
    rng = np.random.default_rng(8)
    d = 5
    Sigma = _spd(rng, d)
    b = LinearPrompts(d, 6, Sigma, covariates="sphere", seed=1).sample(3000, dtype=np.float64)
    L = np.linalg.cholesky(Sigma)
    xi = np.linalg.solve(L, b.X.reshape(-1, d).T).T
    np.testing.assert_allclose(np.linalg.norm(xi, axis=1), 1.0, rtol=1e-12)
    # E[x xᵀ] = Σ/d for ξ uniform on the sphere
    zx = _zmean(np.einsum("ni,nj->nij", b.X.reshape(-1, d), b.X.reshape(-1, d)).reshape(-1, d * d),
                (Sigma / d).ravel())
    assert np.abs(zx).max() < Z_MAX


def test_evaluation_shifts():
    rng = np.random.default_rng(9)
    d, N = 6, 3
    spec = LinearPrompts(d, N, _spd(rng, d), seed=2)
    b = spec.sample(50, dtype=np.float64, query="orthogonal")
    np.testing.assert_allclose(np.einsum("bnd,bd->bn", b.X, b.x_q), 0, atol=1e-12)
    np.testing.assert_allclose(b.y_q, np.einsum("bd,bd->b", b.x_q, b.w), rtol=1e-12)
    np.testing.assert_array_equal(b.E[:, :d, N], b.x_q)
    nl = spec.sample(50, dtype=np.float64, label_fn=np.tanh)
    lin = spec.sample(50, dtype=np.float64)
    np.testing.assert_allclose(nl.y, np.tanh(lin.y), rtol=1e-12)
    np.testing.assert_allclose(nl.y_q, np.tanh(lin.y_q), rtol=1e-12)
    # covariate shift and another test length: a modified copy of the spec
    M = spec.replace(context=11, Lambda=4 * spec.Lambda)
    assert M.context == 11 and M.sample(3).E.shape == (3, d + 1, 12)
    qs = spec.replace(query_Lambda=9 * np.eye(d)).sample(20000, dtype=np.float64)
    assert abs(_zmean(qs.x_q[:, 0] ** 2, 9.0)) < Z_MAX
    with pytest.raises(ValueError, match="orthogonal"):
        LinearPrompts(2, 3).sample(4, query="orthogonal")


# ---- fused steps against the exact population loss --------------------------------------------

def _fused_samples(spec, W_pv, W_kq, method, batches, B):
    res = [spec.lsa_loss_and_grad(W_pv, W_kq, batch=B, step=k, method=method, dtype=np.float64)
           for k in range(batches)]
    return np.array([np.concatenate([[r[0]], r[1].ravel(), r[2].ravel()]) for r in res])


def _z(v, exact):
    """z-scores of the mean of per-batch (L, ∇L) samples v against the exact values."""
    ex = np.concatenate([[exact[0]], exact[1].ravel(), exact[2].ravel()])
    sd = v.std(0, ddof=1) / np.sqrt(v.shape[0])
    live = sd > 0
    assert np.all(v[:, ~live] == ex[~live])  # structurally zero gradient entries are exactly 0
    return (v.mean(0) - ex)[live] / sd[live]


@pytest.mark.parametrize("method", ["tokens", "wishart"])
@pytest.mark.parametrize("sigma,query_noise", [(0.0, False), (0.7, False), (0.7, True)])
def test_fused_mean_equals_population_loss_and_gradient(method, sigma, query_noise):
    rng = np.random.default_rng(4321)
    d, N = 2, 3  # short prompts: the N-dependence is strong enough for the power check
    Lam = _spd(rng, d)
    W_pv, W_kq = 0.5 * rng.standard_normal((2, d + 1, d + 1))
    spec = LinearPrompts(d, N, Lam, noise_std=sigma, query_noise=query_noise, seed=2026)
    v = _fused_samples(spec, W_pv, W_kq, method, batches=60, B=8192)
    exact = population.loss_and_grad(W_pv, W_kq, Lam, N, noise_std=sigma, query_noise=query_noise)
    assert np.abs(_z(v, exact)).max() < Z_MAX
    # power: the same Monte Carlo means are far from the population values at N + 1
    wrong = population.loss_and_grad(W_pv, W_kq, Lam, N + 1, noise_std=sigma, query_noise=query_noise)
    assert np.abs(_z(v, wrong)).max() > Z_MAX
    if sigma > 0:  # and from the noiseless population loss
        clean = population.loss_and_grad(W_pv, W_kq, Lam, N)
        assert np.abs(_z(v, clean)).max() > Z_MAX


def test_wishart_random_covariance_matches_population():
    rng = np.random.default_rng(55)
    d, N, scale = 2, 5, 1.5
    W_pv, W_kq = 0.3 * rng.standard_normal((2, d + 1, d + 1))
    spec = LinearPrompts(d, N, covariance_law=("exponential", scale), noise_std=0.5, seed=9)
    exact = population.loss_and_grad_random_diagonal(
        W_pv, W_kq, population.exponential_moments(d, scale), N, noise_std=0.5)
    for method in ("tokens", "wishart"):
        v = _fused_samples(spec, W_pv, W_kq, method, batches=60, B=8192)
        assert np.abs(_z(v, exact)).max() < Z_MAX


@pytest.mark.parametrize("name", sorted(set(LAW_EXAMPLES) - {"exponential"}))
def test_random_law_loss_matches_population(name, rng):
    """The exact random-Λ loss with the table's moments is the mean of the sampled steps, for every
    law (exponential: the test above); power: the moments of the fixed Λ = E Λτ are rejected."""
    d, N = 2, 3
    W_pv, W_kq = 0.4 * rng.standard_normal((2, d + 1, d + 1))
    law = (name, *LAW_EXAMPLES[name])
    spec = LinearPrompts(d, N, covariance_law=law, seed=int(rng.integers(2**63)))
    v = _fused_samples(spec, W_pv, W_kq, "wishart", batches=40, B=8192)
    moments = population.covariance_law_moments(d, law)
    exact = population.loss_and_grad_random_diagonal(W_pv, W_kq, moments, N)
    # A fresh seed per run: 19 Student t's with 39 degrees of freedom (40 batch means of 8192
    # prompts) need t_threshold(19, 39, 1e-6) = 6.7 for a false alarm below 1e-6 per test
    # (|z| < 5 was ~2.5e-4 per law). The wrong moments give |z| ~ 30.
    t_max = t_threshold(19, v.shape[0] - 1, alpha=1e-6)
    assert np.abs(_z(v, exact)).max() < t_max
    mean = moments[0]  # λ deterministic at its mean: same E Λτ, other higher moments
    wrong = population.loss_and_grad_random_diagonal(W_pv, W_kq, np.stack([mean, mean**2, mean**3]), N)
    assert np.abs(_z(v, wrong)).max() > t_max


# ---- errors ------------------------------------------------------------------------------------

def test_bad_input():
    with pytest.raises(ValueError, match="seed"):
        LinearPrompts(2, 3, seed=-1)
    with pytest.raises(ValueError, match="seed"):
        LinearPrompts(2, 3, seed=2**64)
    with pytest.raises(ValueError, match="noise_std"):
        LinearPrompts(2, 3, noise_std=-0.1)
    with pytest.raises(ValueError, match="tasks"):
        LinearPrompts(2, 3, tasks=0)
    with pytest.raises(ValueError, match="unknown law"):
        LinearPrompts(2, 3, covariance_law=("cauchy", 1.0))
    with pytest.raises(ValueError, match="positive definite"):
        LinearPrompts(2, 3, np.array([[1.0, 2.0], [2.0, 1.0]]))
    with pytest.raises(ValueError, match="context"):
        LinearPrompts(2, 0)
    with pytest.raises(ValueError, match="covariance_law"):
        LinearPrompts(2, 3, covariance_law=("exponential", -1.0))
    with pytest.raises(ValueError, match="Lambda"):
        LinearPrompts(2, 3, np.eye(2), covariance_law="exponential")
    with pytest.raises(ValueError, match="covariates"):
        LinearPrompts(2, 3, covariates="cube")
    spec = LinearPrompts(4, 3)
    W = np.zeros((5, 5))
    with pytest.raises(ValueError, match="wishart"):
        spec.lsa_loss_and_grad(W, W, batch=4, method="wishart")  # N < d
    with pytest.raises(ValueError, match="wishart"):
        LinearPrompts(2, 3, covariates="sphere").lsa_loss_and_grad(np.zeros((3, 3)), np.zeros((3, 3)),
                                                                  batch=4, method="wishart")
    with pytest.raises(ValueError, match="method"):
        spec.lsa_loss_and_grad(W, W, batch=4, method="exact")
    # "auto" falls back to tokens where the Bartlett decomposition does not exist (N < d)
    assert not spec.wishart_applies
    assert spec.lsa_loss_and_grad(W, W, batch=4, method="auto")[0] == spec.lsa_loss_and_grad(W, W, batch=4)[0]
    with pytest.raises(ValueError, match="W_pv"):
        spec.lsa_loss_and_grad(np.zeros((4, 4)), W, batch=4)
    with pytest.raises(ValueError, match="step"):
        spec.sample(4, step=-1)
    with pytest.raises(ValueError, match="batch"):
        spec.sample(0)
    with pytest.raises(ValueError, match="noise_std"):
        population.loss_and_grad(W, W, np.eye(4), 3, noise_std=-1.0)


@pytest.mark.parametrize("method", ["tokens", "wishart"])
def test_training_trajectory_independent_of_thread_count(method):
    spec = LinearPrompts(3, 8, noise_std=0.1, covariance_law=("gamma", 2.0, 0.5), seed=404)
    W0 = 0.1 * np.random.default_rng(3).standard_normal((2, 4, 4))
    before = ln.num_threads()
    runs = []
    try:
        for threads in (1, 2):
            ln.set_num_threads(threads)
            W_pv, W_kq = W0[0].copy(), W0[1].copy()
            for k in range(5):
                _, g_pv, g_kq = spec.lsa_loss_and_grad(W_pv, W_kq, batch=700, step=k, method=method)
                W_pv -= 0.05 * g_pv
                W_kq -= 0.05 * g_kq
            runs.append((W_pv, W_kq))
    finally:
        ln.set_num_threads(before)
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    np.testing.assert_array_equal(runs[0][1], runs[1][1])


def test_gradient_flow_with_label_noise_reaches_a_stationary_point():
    rng = np.random.default_rng(17)
    d, N = 2, 6
    Lam = _spd(rng, d)
    W_pv, W_kq = ln.theory.assumption33_init(d, 0.1, rng=rng)
    traj = population.gradient_flow(W_pv, W_kq, N, Lambda=Lam, times=[0, 1e4], grad_tol=1e-9,
                                    noise_std=0.5)
    L, g_pv, g_kq = population.loss_and_grad(traj.final_W_pv, traj.final_W_kq, Lam, N, noise_std=0.5)
    assert np.sqrt((g_pv**2).sum() + (g_kq**2).sum()) <= 1e-8
    assert traj.final_loss == pytest.approx(L, rel=1e-12)
    # the noisy optimum differs from the noiseless one (the flow really sees the noise terms)
    _, h_pv, h_kq = population.loss_and_grad(traj.final_W_pv, traj.final_W_kq, Lam, N)
    assert np.sqrt((h_pv**2).sum() + (h_kq**2).sum()) > 1e-4


def test_batch_carries_its_law():
    rng = np.random.default_rng(23)
    d = 3
    Lam = _spd(rng, d)
    b = LinearPrompts(d, 4, Lam, noise_std=0.2, seed=5).sample(20000, dtype=np.float64)
    np.testing.assert_allclose(b.Lambda, Lam)
    assert b.noise_std == 0.2 and b.query_noise is False
    # ξ = Λ^{-1/2} x: identity covariance (z-test per entry); power: Λ^{-1/2} replaced by I fails
    xi = b.xi.reshape(-1, d)
    assert np.abs(_zmean(np.einsum("ni,nj->nij", xi, xi).reshape(len(xi), -1), np.eye(d).ravel())).max() < Z_MAX
    X = b.X.reshape(-1, d)
    assert np.abs(_zmean(np.einsum("ni,nj->nij", X, X).reshape(len(X), -1), np.eye(d).ravel())).max() > Z_MAX
    s = LinearPrompts(d, 4, Lam, covariates="sphere", seed=5).sample(10, dtype=np.float64)
    np.testing.assert_allclose(np.linalg.norm(s.xi, axis=-1), 1.0, rtol=1e-12)  # Σ^{-1/2}x on the sphere
    np.testing.assert_allclose(s.Sigma, Lam)
