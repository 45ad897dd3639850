"""Baselines and theory predictors against their defining identities."""
import numpy as np
import pytest

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


# ---- Batches that carry their law; kernel baselines on ξ = Σ^{-1/2} x (issue 8, item 4) ----

def ccs_h1_sigma(rng, d=5):
    """CCS H.1: Σ = Uᵀ D U, U uniform orthogonal, D = diag(1, 1, 0.25, 2.25, 1)."""
    Q, R = np.linalg.qr(rng.standard_normal((d, d)))
    Q = Q * np.sign(np.diag(R))  # Haar-distributed
    return Q.T @ np.diag([1.0, 1.0, 0.25, 2.25, 1.0][:d]) @ Q


def posterior_variance(b, kernel, use_psd_part=True):
    """μ − νᵀ K̂^{-1} ν of [[K̂, ν],[νᵀ, μ]] = K_+(ξ) (or K(ξ)): E[(f^bayes − y_q)² | X]."""
    pts = np.concatenate([b.xi, b.xi_q[:, None]], axis=1)
    K = baselines.kernel_matrix(kernel, pts, pts, b.bandwidth)
    K = baselines.psd_part(K) if use_psd_part else K
    n = b.context
    nu = K[:, :n, n]
    # pinv: K̂ can be singular (relu on few dimensions is linear on a cone); min-norm as the estimator.
    return K[:, n, n] - np.einsum("bi,bij,bj->b", nu, np.linalg.pinv(K[:, :n, :n], hermitian=True), nu)


def mse_z(pred, b, postvar):
    """z-score of mean(t²) − 1 with t = (y_q − ŷ)/√postvar. Given the context, y_q is Gaussian with
    the posterior mean and variance, so t ~ N(0, 1) exactly iff ŷ is the posterior mean (Var t² = 2).
    Prompts with a degenerate posterior (query in the span of the context features) are left out:
    a selection on X only."""
    keep = postvar > 1e-8
    t2 = (b.y_q[keep] - pred[keep]) ** 2 / postvar[keep]
    return (t2.mean() - 1) / np.sqrt(2 / t2.size)


# A mean of ~20000 χ²₁ standardised by its known variance: P(|z| > 5.5) = 3.8e-8 (the skewness
# adds ~1e-8 at this size); it was 4, a 6.3e-5 false alarm per check. The power checks ask > 6.
MSE_Z_MAX = 5.5


def test_kernel_gp_batch_carries_its_law(rng):
    d, n = 5, 7
    Sigma = ccs_h1_sigma(rng)
    b = data.kernel_gp_prompts(rng, 40, d, n, "relu", bandwidth=1.5, Sigma=Sigma)
    assert b.kernel == "relu" and b.bandwidth == 1.5 and b.noise_std == 0.0
    np.testing.assert_allclose(b.Sigma, Sigma, rtol=1e-15, atol=1e-15)  # symmetrized copy
    np.testing.assert_allclose(np.linalg.norm(b.xi, axis=-1), 1, rtol=1e-13)
    np.testing.assert_allclose(np.linalg.norm(b.xi_q, axis=-1), 1, rtol=1e-13)
    root = data.sqrtm(Sigma)
    np.testing.assert_allclose(b.X, b.xi @ root, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(b.x_q, b.xi_q @ root, rtol=1e-12, atol=1e-13)
    # whitened() recomputes ξ from the law when the batch does not store it.
    bare = data.PromptBatch(X=b.X, y=b.y, x_q=b.x_q, y_q=b.y_q, w=None, E=b.E, Sigma=Sigma)
    xi, xi_q = bare.whitened()
    np.testing.assert_allclose(xi, b.xi, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(xi_q, b.xi_q, rtol=1e-11, atol=1e-12)
    # Old constructor calls still work and carry no law (identity whitening).
    old = data.PromptBatch(b.X, b.y, b.x_q, b.y_q, None, b.E)
    assert old.shape_matrix is None and old.whitened()[0] is b.X


def test_linear_batch_carries_lambda_noise_and_query_noise_option(rng):
    d, N, sigma = 3, 5, 0.7
    Lam = np.diag([0.5, 1.0, 3.0])
    b = data.linear_regression_prompts(rng, 4000, d, N, Lam, noise_std=sigma)
    np.testing.assert_array_equal(b.Lambda, Lam)
    assert b.noise_std == sigma and not b.query_noise
    np.testing.assert_allclose(b.y_q, np.einsum("bd,bd->b", b.x_q, b.w), rtol=1e-12)  # noiseless
    xi, _ = b.whitened()
    # ξ = Λ^{-1/2} x ~ N(0, I): second moments within 5 standard errors of I.
    m2 = np.einsum("bni,bnj->ij", xi, xi) / (4000 * N)
    assert np.abs(m2 - np.eye(d)).max() < 5 * np.sqrt(2 / (4000 * N))
    bq = data.linear_regression_prompts(rng, 4000, d, N, Lam, noise_std=sigma, query_noise=True)
    eps = bq.y_q - np.einsum("bd,bd->b", bq.x_q, bq.w)
    # Var of a sample variance of normals: 2σ⁴/(B−1).
    z = (eps.var() - sigma**2) / (sigma**2 * np.sqrt(2 / 3999))
    assert abs(z) < 5, z
    with pytest.raises(ValueError, match="noise_std"):
        data.linear_regression_prompts(rng, 2, d, N, noise_std=-1.0)


def test_bayes_estimator_whitens_with_sigma(rng):
    """CCS (13) at n = 6, d = 5 with the H.1 Σ: the Bayes estimator read from the batch is the
    posterior mean (E[(ŷ − y_q)² | X] = posterior variance, z-test), while K on raw x (the old
    behaviour: mean squared error ≈ 1.33 instead of ≈ 1.155) fails the same test."""
    d, n, B = 5, 6, 20000
    b = data.kernel_gp_prompts(rng, B, d, n, "exp", Sigma=ccs_h1_sigma(rng))
    postvar = posterior_variance(b, "exp")
    assert abs(mse_z(baselines.bayes_estimator(b), b, postvar)) < MSE_Z_MAX
    np.testing.assert_allclose(baselines.bayes_estimator(b.X, b.y, b.x_q, "exp", Sigma=b.Sigma),
                               baselines.bayes_estimator(b), rtol=1e-8, atol=1e-10)
    # Power check: the kernel on raw x (Σ ignored) is biased by ≈ 0.17 ⇒ z ≈ 12 at this B.
    assert mse_z(baselines.bayes_estimator(b.X, b.y, b.x_q, "exp"), b, postvar) > 6


def test_bayes_estimator_uses_k_plus_not_k_for_relu(rng):
    """CCS Def. 3.3: labels have covariance K_+; the posterior mean uses K_+'s blocks. For relu K is
    indefinite, so an estimator built on K instead must differ and fail the z-test."""
    d, n, B = 3, 8, 20000
    b = data.kernel_gp_prompts(rng, B, d, n, "relu", Sigma=ccs_h1_sigma(rng, d))
    postvar = posterior_variance(b, "relu")
    bayes = baselines.bayes_estimator(b)
    assert abs(mse_z(bayes, b, postvar)) < MSE_Z_MAX
    pts = np.concatenate([b.xi, b.xi_q[:, None]], axis=1)
    K = baselines.kernel_matrix("relu", pts, pts)  # the mutation: K where K_+ belongs
    wrong = np.einsum("bi,bij,bj->b", K[:, :n, n], np.linalg.pinv(K[:, :n, :n], hermitian=True), b.y)
    assert np.median(np.abs(wrong - bayes)) > 1e-3
    assert mse_z(wrong, b, postvar) > 6


@pytest.mark.parametrize("kernel", ["linear", "relu", "exp"])
def test_functional_gd_equals_kernel_attention_construction(rng, kernel):
    """One bandwidth convention: baselines.functional_gd on the batch (ξ = Σ^{-1/2}x, exp(<u,w>/σ²))
    equals kernel attention with the Prop. 3.1 construction at σ = 2 and Σ ≠ I, to rounding."""
    from lsa_native import kernel_attention as ka

    d, n, L, sigma = 5, 9, 4, 2.0
    Sigma = ccs_h1_sigma(rng)
    b = data.kernel_gp_prompts(rng, 64, d, n, kernel, bandwidth=sigma, Sigma=Sigma)
    steps = rng.uniform(0.02, 0.1, L)
    want = baselines.functional_gd(b, step_sizes=steps)
    got = ka.KernelAttentionParams.functional_gd(d, steps, kernel, bandwidth=sigma,
                                                 Sigma=Sigma).predict(b.E, every_layer=True)
    # Same arithmetic up to summation order and the rounding of Σ^{-1/2}: float64 rounding level.
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12 * np.abs(want).max())
    # The bandwidth matters for exp only; Σ matters always (power: the raw-x baseline differs).
    raw = baselines.functional_gd(b.X, b.y, b.x_q, kernel, steps, sigma)
    assert np.abs(raw - want).max() > 1e-3 * np.abs(want).max()


def test_two_head_construction_with_bandwidth_and_sigma(rng):
    """CCS Prop. D.1 under the convention: linear + exp heads at σ = 2, Σ ≠ I run functional GD
    with K_linear(ξ, ξ') + exp(<ξ, ξ'>/σ²)."""
    from lsa_native import kernel_attention as ka

    d, n, L, sigma = 5, 7, 3, 2.0
    Sigma = ccs_h1_sigma(rng)
    b = data.kernel_gp_prompts(rng, 32, d, n, "exp", bandwidth=sigma, Sigma=Sigma)
    steps = np.full(L, 0.3 / n)
    got = ka.KernelAttentionParams.functional_gd(d, steps, ["linear", "exp"], bandwidth=sigma,
                                                 Sigma=Sigma).predict(b.E, every_layer=True)
    lin = baselines.functional_gd(b, kernel="linear", step_sizes=steps)  # sanity of the override path
    assert lin.shape == (32, L + 1)
    K = lambda u, w: baselines.kernel_matrix("linear", u, w) + baselines.kernel_matrix("exp", u, w, sigma)
    K_ctx, K_q = K(b.xi, b.xi), K(b.xi_q[:, None], b.xi)[:, 0]
    f_ctx, f_q = np.zeros_like(b.y), np.zeros(32)
    for ell, r in enumerate(steps):
        resid = b.y - f_ctx
        f_q = f_q + r * np.einsum("bi,bi->b", K_q, resid)
        f_ctx = f_ctx + r * np.einsum("bji,bi->bj", K_ctx, resid)
        np.testing.assert_allclose(got[:, ell + 1], f_q, rtol=1e-10, atol=1e-12)


def test_kernel_baselines_reject_bad_input(rng):
    b = data.kernel_gp_prompts(rng, 3, 2, 4, "exp")
    with pytest.raises(ValueError, match="kernel"):
        baselines.kernel_matrix("rbf", b.X, b.X)
    with pytest.raises(ValueError, match="bandwidth"):
        baselines.bayes_estimator(b, bandwidth=0.0)
    with pytest.raises(ValueError, match="bandwidth"):
        baselines.functional_gd(b, step_sizes=[0.1], bandwidth=float("nan"))
    with pytest.raises(ValueError, match="Sigma"):
        baselines.bayes_estimator(b.X, b.y, b.x_q, "exp", Sigma=-np.eye(2))
    with pytest.raises(TypeError, match="y, x_q"):
        baselines.bayes_estimator(b, b.y)
    with pytest.raises(ValueError, match="kernel"):
        baselines.bayes_estimator(data.linear_regression_prompts(rng, 2, 2, 3))
    with pytest.raises(ValueError, match="kernel"):
        data.kernel_gp_prompts(rng, 2, 2, 3, "rbf")
    with pytest.raises(ValueError, match="bandwidth"):
        data.kernel_gp_prompts(rng, 2, 2, 3, bandwidth=-1.0)
