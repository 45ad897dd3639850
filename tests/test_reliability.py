"""Regression cases of the "nothing silent" issue: out-of-domain input raises an error naming the
argument, and results that overflow raise instead of coming back as inf/NaN."""
import numpy as np
import pytest

import lsa_native as ln


def _params(d=2, scale=1.0, seed=0):
    rng = np.random.default_rng(seed)
    return scale * rng.standard_normal((d + 1, d + 1)), scale * rng.standard_normal((d + 1, d + 1))


def test_population_overflow_raises():
    W_pv, W_kq = _params(scale=1e200)
    with pytest.raises(FloatingPointError, match="overflowed"):
        ln.population.loss_and_grad(W_pv, W_kq, np.eye(2), 5)
    with pytest.raises(FloatingPointError, match="overflowed"):
        ln.population.loss_and_grad_random_diagonal(W_pv, W_kq,
                                                     ln.population.exponential_moments(2), 5)


def test_population_complex_input_is_refused():
    W_pv, W_kq = _params()
    with pytest.raises(TypeError, match="W_kq: expected a real-valued array"):
        ln.population.loss_and_grad(W_pv, W_kq + 1j, np.eye(2), 5)
    with pytest.raises(TypeError, match="Lambda"):
        ln.population.loss_and_grad(W_pv, W_kq, np.eye(2) * (1 + 0j), 5)


def test_random_diagonal_third_moment_is_checked():
    # mean 1, second 2, third 0.5: no positive variable has them (E λ³ E λ >= (E λ²)² fails);
    # the exact loss of such "moments" came back negative.
    W_pv, W_kq = _params()
    with pytest.raises(ValueError, match="E\\[λ_i³\\]"):
        ln.population.loss_and_grad_random_diagonal(W_pv, W_kq, [[1, 1], [2, 2], [0.5, 0.5]], 5)
    with pytest.raises(ValueError, match="E\\[λ_i³\\]"):
        ln.theory.thm45_limits([[1, 1], [2, 2], [0.5, 0.5]], 5)
    # A valid law passes: two-point {1, 3} with equal weights has moments (2, 5, 14).
    ln.population.loss_and_grad_random_diagonal(W_pv, W_kq, [[2, 2], [5, 5], [14, 14]], 5)


def test_reduced_objective_validates_u11_and_u():
    with pytest.raises(ValueError, match="U11: contains non-finite"):
        ln.population.reduced_loss_and_grad(np.full((2, 2), np.nan), 1.0, np.eye(2), 5)
    with pytest.raises(ValueError, match="u: expected a finite number"):
        ln.population.reduced_loss_and_grad(np.eye(2), float("nan"), np.eye(2), 5)
    with pytest.raises(TypeError, match="u: expected a real number"):
        ln.population.reduced_loss_and_grad(np.eye(2), 1j, np.eye(2), 5)


def test_pl_constant_outside_its_domain_raises():
    Lam = np.diag([1.0, 2.0])
    bound = ln.theory.sigma_bound(Lam, 10)
    TT = np.eye(2) / np.sqrt(2)
    assert ln.theory.pl_constant(Lam, 10, 0.5 * bound, TT) > 0
    with pytest.raises(ValueError, match="sigma"):
        ln.theory.pl_constant(Lam, 10, 1.1 * bound, TT)  # used to return μ < 0
