"""Baselines and theory predictors against their defining identities."""
import numpy as np

from lsa_native import baselines, data, lsa, theory


def test_ols_and_ridge_recover_noiseless_linear_tasks(rng):
    b = data.linear_regression_prompts(rng, 50, 4, 12)
    truth = np.einsum("bd,bd->b", b.x_q, b.w)
    np.testing.assert_allclose(baselines.ols(b.X, b.y, b.x_q), truth, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(baselines.ridge(b.X, b.y, b.x_q, 1e-10), truth, rtol=1e-6, atol=1e-6)
    assert np.all(baselines.zero_estimator(b.X, b.y, b.x_q) == 0)
    # Ridge shrinks: a large λ pulls predictions towards 0.
    assert np.abs(baselines.ridge(b.X, b.y, b.x_q, 1e6)).max() < 1e-2 * np.abs(truth).max()


def test_limit_prediction_is_the_lsa_at_theorem41_limits(rng):
    """ZFB (4.3): at (W*^PV, W*^KQ) the LSA predicts x_q^T Γ^{-1} (1/M) Σ y_i x_i."""
    d, N, M = 3, 10, 25
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    Lambda = Q @ np.diag([0.5, 1.0, 2.0]) @ Q.T
    b = data.linear_regression_prompts(rng, 40, d, M, Lambda)
    W_pv, W_kq = theory.thm41_limits(Lambda, N)
    # The LSA normalizes by the prompt length M (ρ = M at test time).
    np.testing.assert_allclose(lsa.predict(b.E, W_pv, W_kq),
                               theory.limit_prediction(b.X, b.y, b.x_q, Lambda, N), rtol=1e-10,
                               atol=1e-12)


def test_bayes_estimator_is_the_gp_posterior_mean_for_psd_kernels(rng):
    b = data.kernel_gp_prompts(rng, 20, 3, 6, "exp")
    pts = np.concatenate([b.X, b.x_q[:, None]], axis=1)
    K = baselines.kernel_matrix("exp", pts, pts)
    expected = np.einsum("bi,bi->b", K[:, :6, 6], np.linalg.solve(K[:, :6, :6], b.y[..., None])[..., 0])
    np.testing.assert_allclose(baselines.bayes_estimator(b.X, b.y, b.x_q, "exp"), expected,
                               rtol=1e-6, atol=1e-8)
