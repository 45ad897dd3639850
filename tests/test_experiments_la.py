"""The linear-attention reproductions (experiments/la.py) at reduced sizes, and the helpers and
theory they rest on: plateau detection, the effective key matrix U, the PCR risks."""
from __future__ import annotations

import numpy as np
import pytest

from lsa_native import experiments, population as pop, population_multihead as pm, theory
from lsa_native.experiments import la
from lsa_native.reference import population_multihead as ref


def test_registered():
    assert {"la-merged", "la-separate", "lro-risk"} <= set(experiments.ids())


def test_plateaus_of_a_staircase():
    t = np.geomspace(1, 1e4, 400)
    steps = [(0.5, 0.3, 30.0), (0.3, 0.2, 800.0)]  # (from, to, time of the drop)
    L = 0.5 - sum((a - b) / (1 + (t / t0) ** -8) for a, b, t0 in steps)
    found = la.plateaus(t, L)
    assert [round(level, 3) for _, _, level in found] == [0.5, 0.3, 0.2]


def test_effective_key_is_the_label_linear_part_of_the_prediction(rng):
    """U = Σ_h (p2_h K1_h + p1_h k2_hᵀ): for separate heads of rank r, rank U <= H r; and U is
    the aggregate Rᵀ of the exact loss (docs/population.md)."""
    d, H, r = 5, 2, 1
    W_pv = rng.standard_normal((H, d + 1, d + 1))
    keys = tuple(rng.standard_normal((H, r, d + 1)) for _ in range(2))
    U = la.effective_value_key(W_pv, keys)
    assert np.linalg.matrix_rank(U) == H * r
    W_kq = np.swapaxes(keys[0], 1, 2) @ keys[1]
    p1, p2, K1, k2 = ref.split_heads(W_pv, W_kq)
    R = np.einsum("h,hba->ab", p2, K1) + np.einsum("ha,hb->ab", k2, p1)
    np.testing.assert_allclose(U, R.T, atol=1e-12)
    np.testing.assert_allclose(la.effective_value_key(W_pv, W_kq), U, atol=1e-12)


@pytest.mark.parametrize("d,N", [(1, 1), (3, 4), (5, 20)])
def test_pcr_risks(rng, d, N):
    """L_0 = ½ tr Λ, L_d = min L, and L_r is attained on the manifold by U = Γ⁻¹ restricted to the
    top r eigenvectors of Λ; random rank-r U (any scale) never go below it."""
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    lam = np.sort(rng.uniform(0.2, 2.0, d))[::-1]
    Lambda = Q @ np.diag(lam) @ Q.T
    risks = theory.pcr_risks(Lambda, N)
    assert risks[0] == pytest.approx(0.5 * lam.sum(), rel=1e-12)
    assert risks[-1] == pytest.approx(pop.minimum_loss(Lambda, N), rel=1e-12)
    assert np.all(np.diff(risks) <= 0)
    g = (1 + 1 / N) * lam + lam.sum() / N
    for r in range(1, d + 1):
        U = Q[:, :r] @ np.diag(1 / g[:r]) @ Q[:, :r].T
        L = pop.reduced_loss_and_grad(U, 1.0, Lambda, N)[0] + 0.5 * np.trace(Lambda)
        assert L == pytest.approx(risks[r], rel=1e-12)
        for _ in range(5):
            V = rng.standard_normal((d, r)) @ rng.standard_normal((r, d)) * rng.uniform(0.1, 2)
            assert pop.reduced_loss_and_grad(V, 1.0, Lambda, N)[0] + 0.5 * np.trace(Lambda) >= risks[r] - 1e-12


def test_one_rank_one_head_cannot_beat_the_rank_one_pcr_risk(rng):
    """The exact full-model loss (value and key may read both features and labels) of a rank-one
    head at random points stays above L_1, and its flow reaches L_1."""
    d, N = 3, 6
    Lambda = np.diag([1.5, 1.0, 0.5])
    L1 = theory.pcr_risks(Lambda, N)[1]
    for _ in range(20):
        W_pv = rng.standard_normal((1, d + 1, d + 1))
        keys = tuple(rng.standard_normal((1, 1, d + 1)) for _ in range(2))
        assert pm.multihead_loss(W_pv, keys, Lambda, N) >= L1 - 1e-12


def test_la_separate_quick_small():
    r = experiments.la_separate(dim=3, heads=3, context=10, inits=2, flow_time=2e4, records=150,
                                sgd_rate=1.0, sgd_steps=500, sgd_batch=512, sgd_records=20)
    # the flow's conditions; SGD's agreement only: at this size the drops are so sharp that the
    # replicates' timing spread leaves no power against 2N (the quick size has it: ratio 1.6)
    det = r.details
    assert not det["stray_plateaus"] and max(det["relative_errors"]) < 1e-3, r.measured
    assert max(det["final_gaps"]) < 1e-8
    assert det["rank_path"] == [0, 1, 2, 3]
    assert det["sgd_margin_ratio"] < 1, r.measured


def test_la_merged_quick_small():
    r = experiments.la_merged(dim=3, heads=2, context=10, flow_time=1e5, records=100,
                              sgd_steps=600, sgd_batch=256, sgd_records=20, white_time=100.0)
    assert r.passed, r.measured
    assert len(r.details["plateaus"]) == 2
    assert r.details["analytic_vs_flow_max_gap"] < 1e-6


def test_lro_risk_quick_small(tmp_path):
    r = experiments.lro_risk(tmp_path, dim=2, context=5, restarts=1, flow_time=1e4)
    assert r.passed, r.measured
    assert (tmp_path / "lro-risk_risks.csv").exists() and (tmp_path / "lro-risk_figure.png").exists()
