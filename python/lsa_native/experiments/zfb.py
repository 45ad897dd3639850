"""Reproductions of Zhang, Frei & Bartlett (ZFB): Theorem 4.1 (convergence to the limit),
Theorem 4.2 (prediction error in M, N), the shifts of Section 4.2 and the random-covariance
results of Section 4.3 (Theorem 4.5, the ⅓ factor, JMLR Figure 1)."""
from __future__ import annotations

import numpy as np

from .. import baselines, data, lsa, population, theory
from . import _figures as _fig
from ._common import reproduction
from ._stats import mean_se, z_threshold

__all__ = ["zfb_thm41", "zfb_thm42", "zfb_shifts", "zfb_random_cov", "anisotropic_covariance"]


def anisotropic_covariance(rng: np.random.Generator, d: int, low: float = 0.5, high: float = 2.0):
    """Q diag(linspace(low, high, d)) Q^T with Q a random orthogonal matrix."""
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return Q @ np.diag(np.linspace(low, high, d)) @ Q.T


# --------------------------------------------------------------------------------------------
# zfb-thm41

@reproduction(
    "zfb-thm41",
    claim="ZFB Thm 4.1: gradient flow from Assumption 3.3 converges to W* (4.1); loss gap <= e^(-μt) gap(0)",
    condition="exact flow ‖θ−θ*‖/‖θ*‖ < 1e-6, gap under e^(−μt)gap(0) throughout, SGD ‖θ−θ*‖/‖θ*‖ < 5e-2",
    quick=dict(dim=5, context=20, batch=4096, steps=3000, lr=0.008, flow_time=60.0),
    full=dict(dim=5, context=20, batch=16384, steps=6000, lr=0.008, flow_time=80.0),
)
def zfb_thm41(ctx, p):
    """ZFB Theorem 4.1 on an anisotropic Λ (eigenvalues spread over [0.5, 2]): exact population
    gradient flow (native) from the Assumption 3.3 initialization with σ at half the bound, and SGD
    on sampled prompts (native LSA loss and gradient), both against the closed-form limit. The
    PL inequality of Lemma 5.4, ‖∇L‖² >= μ(L − min L), makes the gap's local decay rate
    −d log gap/dt at least μ at every t (a sharper view of e^(−μt)gap(0), which μ ≈ 1e-3 leaves
    flat on the flow's time scale): both are shown."""
    rng = ctx.rng(0)
    d, N = p["dim"], p["context"]
    Lambda = anisotropic_covariance(rng, d)
    sigma = 0.5 * theory.sigma_bound(Lambda, N)
    W_pv0, W_kq0 = theory.assumption33_init(d, sigma, rng=rng)
    mu = theory.pl_constant(Lambda, N, sigma, W_kq0[:d, :d] / sigma)
    fl = _thm41_flow(p, Lambda, W_pv0, W_kq0, mu)
    hist = _thm41_sgd(ctx, p, Lambda, W_pv0, W_kq0)
    sgd_dist = hist.metrics["dist"][-1]
    _fig.finish(ctx, _plot_thm41(p, fl, hist, mu),
                f"ZFB Theorem 4.1, d={d}, N={N}, anisotropic Λ, σ={sigma:.3f}, μ={mu:.4f}")
    ctx.save_csv("flow.csv", ["t", "loss_gap", "pl_bound", "dist"],
                 zip(fl["t"], fl["gap"], np.exp(-mu * fl["t"]) * fl["gap"][0], fl["dist"]))
    ctx.save_csv("sgd.csv", ["step", "loss", "dist", "gap"],
                 zip(hist.step, hist.loss, hist.metrics["dist"], hist.metrics["gap"]))
    passed = fl["dist"][-1] < 1e-6 and fl["pl_ok"] and sgd_dist < 5e-2
    measured = (f"flow {fl['dist'][-1]:.1e}, SGD {sgd_dist:.3f}, PL bound {'held' if fl['pl_ok'] else 'broken'} "
                f"(slowest local rate {fl['min_rate']:.4f} >= μ {mu:.4f})")
    return passed, measured, {"flow_distance": fl["dist"][-1], "sgd_distance": sgd_dist,
                              "pl_bound_held": fl["pl_ok"], "mu": mu, "sigma": sigma,
                              "min_local_rate": fl["min_rate"], "flow_steps": fl["steps"],
                              "final_gap": fl["gap"][-1]}


def _thm41_flow(p, Lambda, W_pv0, W_kq0, mu) -> dict:
    """The exact flow: times, loss gap, distance to (4.1), the e^(−μt) bound and the local rate."""
    N = p["context"]
    W_pv_star, W_kq_star = theory.thm41_limits(Lambda, N)
    flow = population.gradient_flow(W_pv0, W_kq0, N, Lambda=Lambda, times=np.linspace(0, p["flow_time"], 201))
    gap = flow.losses - population.minimum_loss(Lambda, N)
    dist = np.array([theory.relative_distance(P, K, W_pv_star, W_kq_star) for P, K in zip(flow.W_pv, flow.W_kq)])
    # −d log gap/dt between recorded times, where the gap is well above rounding
    resolved = (gap[:-1] > 1e-10 * gap[0]) & (gap[1:] > 1e-10 * gap[0])
    rate = -np.diff(np.log(np.maximum(gap, 1e-300))) / np.diff(flow.times)
    return {"t": flow.times, "gap": gap, "dist": dist, "steps": flow.steps,
            "pl_ok": bool(np.all(gap <= np.exp(-mu * flow.times) * gap[0] * (1 + 1e-9) + 1e-13)),
            "rate_t": flow.times[1:][resolved], "rate": rate[resolved],
            "min_rate": float(rate[resolved].min()) if resolved.any() else float("nan")}


def _thm41_sgd(ctx, p, Lambda, W_pv0, W_kq0):
    from .. import train

    d, N = p["dim"], p["context"]
    W_pv_star, W_kq_star = theory.thm41_limits(Lambda, N)
    L_min = population.minimum_loss(Lambda, N)

    def sample(r):
        return data.linear_regression_prompts(r, p["batch"], d, N, Lambda, dtype=np.float32)

    def metrics(W_pv, W_kq):
        return {"dist": theory.relative_distance(W_pv, W_kq, W_pv_star, W_kq_star),
                "gap": population.loss(W_pv, W_kq, Lambda, N) - L_min}

    return train.sgd_lsa(W_pv0, W_kq0, sample, steps=p["steps"], lr=p["lr"], rng=ctx.rng(1), lr_decay_to=0.1,
                         metric=metrics, record_every=25, progress=None if ctx.progress else False)[2]


def _plot_thm41(p, fl, hist, mu):
    fig, axes = _fig.panels(1, 4, size=(4.2, 4.4))
    ax = axes[0, 0]
    ax.semilogy(fl["t"], np.maximum(fl["gap"], 1e-16), label="exact gradient flow")
    ax.semilogy(fl["t"], np.exp(-mu * fl["t"]) * fl["gap"][0], "--", label=r"$e^{-\mu t}\,$gap(0) (Lemma 5.4)")
    ax.set(xlabel="t", ylabel="L(θ(t)) − min L", title="Loss gap, population flow")
    ax = axes[0, 1]
    ax.semilogy(fl["rate_t"], fl["rate"], label="−d log gap / dt (flow)")
    ax.axhline(mu, color="C1", ls="--", label="μ (PL: the rate stays above)")
    ax.set(xlabel="t", ylabel="local decay rate", title="Decay rate vs the PL constant")
    ax = axes[0, 2]
    ax.semilogy(fl["t"], np.maximum(fl["dist"], 1e-16), label="‖θ − θ*‖/‖θ*‖")
    ax.axhline(1e-6, color="gray", ls=":", label="pass: 1e-6")
    ax.set(xlabel="t", ylabel="‖θ − θ*‖/‖θ*‖", title="Distance to the Theorem 4.1 limit")
    ax = axes[0, 3]
    ax.semilogy(hist.step, hist.metrics["dist"], label="‖θ − θ*‖/‖θ*‖")
    ax.semilogy(hist.step, np.maximum(hist.metrics["gap"], 1e-16), label="exact loss gap")
    ax.axhline(5e-2, color="gray", ls=":", label="pass: 5e-2")
    ax.set(xlabel="SGD step", title=f"SGD on sampled prompts (B={p['batch']})")
    for ax in axes[0]:
        _fig.legend_below(ax, ncol=1)
    return fig


# --------------------------------------------------------------------------------------------
# zfb-thm42

def _predict_limit(X, y, x_q, A):
    """Native LSA prediction with W^PV = e e^T, W^KQ = [[A^T, 0],[0, 0]]: ŷ = x_q^T A (1/M)Σ y_i x_i."""
    d = A.shape[0]
    W_pv = np.zeros((d + 1, d + 1))
    W_pv[d, d] = 1.0
    W_kq = np.zeros((d + 1, d + 1))
    W_kq[:d, :d] = A.T
    return lsa.predict(data.embed(X, y, x_q), W_pv, W_kq)


def _quadratic_prompts(rng, B, M, Lambda, w, v, beta):
    """x ~ N(0, Λ), y = <w, x> + β((v^Tx)² − v^TΛv) for the M context points and the query."""
    d = Lambda.shape[0]
    C = np.linalg.cholesky(Lambda)
    X = rng.standard_normal((B, M + 1, d)) @ C.T
    s = v @ Lambda @ v
    Y = X @ w + beta * ((X @ v) ** 2 - s)
    return X[:, :M], Y[:, :M], X[:, M], Y[:, M]


@reproduction(
    "zfb-thm42",
    claim="ZFB Thm 4.2: excess prediction error (1/M)tr[ΣΓ⁻²Λ] + (1/N²)[…] over the best linear predictor",
    condition="Monte Carlo within z_K standard errors of (4.6) on every (N, M), linear and quadratic labels "
              "(z_K = max(3, Bonferroni 0.5%))",
    quick=dict(dim=5, contexts=[10, 40], test_lengths=[5, 10, 20, 40, 80, 160], samples=20000, beta=0.5),
    full=dict(dim=5, contexts=[10, 20, 40, 100], test_lengths=[5, 10, 20, 40, 80, 160, 320, 640],
              samples=200000, beta=0.5),
)
def zfb_thm42(ctx, p):
    """Error of the Theorem 4.1 limit (native LSA with the closed-form W*) on test prompts of length
    M, for several training lengths N, against ZFB (4.6): linear labels y = <w, x> (w ~ N(0, I),
    averaged) and a nonlinear task y = <w, x> + β((v^Tx)² − v^TΛv) (w, v fixed; best-linear floor
    2β²(v^TΛv)²). Also reports the z-scores against (4.6) without its 1/N² term (power check)."""
    rng = ctx.rng(0)
    d = p["dim"]
    Lambda = anisotropic_covariance(rng, d)
    w_fix = rng.standard_normal(d)
    v_fix = rng.standard_normal(d) / np.sqrt(d)
    a, Sigma, floor = theory.quadratic_task_moments(Lambda, w_fix, v_fix, p["beta"])
    rows = []
    mc = ctx.rng(1)
    chunk = 20000
    for N in p["contexts"]:
        A = np.linalg.inv(theory.gamma(Lambda, N))
        for M in p["test_lengths"]:
            for task in ("linear", "quadratic"):
                errs = []
                left = p["samples"]
                while left > 0:
                    B = min(chunk, left)
                    left -= B
                    if task == "linear":
                        b = data.linear_regression_prompts(mc, B, d, M, Lambda)
                        X, y, x_q, y_q = b.X, b.y, b.x_q, b.y_q
                    else:
                        X, y, x_q, y_q = _quadratic_prompts(mc, B, M, Lambda, w_fix, v_fix, p["beta"])
                    errs.append((_predict_limit(X, y, x_q, A) - y_q) ** 2)
                m, se = mean_se(np.concatenate(errs))
                if task == "linear":
                    th = theory.thm42_prediction_error(Lambda, N, M)
                    Gi2 = A @ A
                    wrong = th - (np.trace(Gi2 @ Lambda @ Lambda @ Lambda) + 2 * np.trace(Lambda)
                                  * np.trace(Gi2 @ Lambda @ Lambda)
                                  + np.trace(Lambda) ** 2 * np.trace(Gi2 @ Lambda)) / N**2
                    fl = 0.0
                else:
                    th = theory.thm42_error(Lambda, N, M, a, Sigma, floor)
                    wrong = floor + float(np.trace(Sigma @ A @ A @ Lambda)) / M
                    fl = floor
                rows.append(dict(task=task, N=N, M=M, mc=m, se=se, theory=th, floor=fl,
                                 z=(m - th) / se, z_without_1_over_N2=(m - wrong) / se))
    zk = z_threshold(len(rows))
    zmax = max(abs(r["z"]) for r in rows)
    zwrong = max(abs(r["z_without_1_over_N2"]) for r in rows)
    ctx.save_csv("table.csv", list(rows[0]), [list(r.values()) for r in rows])

    fig, axes = _fig.panels(1, 2, size=(6.0, 5.0))
    colors = [f"C{i}" for i in range(10)]
    for ax, task in zip(axes[0], ("linear", "quadratic")):
        for i, N in enumerate(p["contexts"]):
            rs = [r for r in rows if r["task"] == task and r["N"] == N]
            Ms = np.array([r["M"] for r in rs])
            Mf = np.unique(np.round(np.geomspace(Ms.min(), Ms.max(), 100)).astype(int))
            if task == "linear":
                curve = [theory.thm42_prediction_error(Lambda, N, int(round(m))) for m in Mf]
            else:
                curve = [theory.thm42_error(Lambda, N, int(round(m)), a, Sigma, floor) for m in Mf]
            ax.plot(Mf, curve, "-", color=colors[i], label=f"Thm 4.2, N={N}")
            ax.errorbar(Ms, [r["mc"] for r in rs], yerr=[3 * r["se"] for r in rs], fmt="o",
                        color=colors[i], ms=4, capsize=2, label=f"simulation (±3 SE), N={N}")
        if task == "quadratic":
            ax.axhline(floor, color="k", ls="--", label="best linear predictor")
        ax.set(xscale="log", yscale="log", xlabel="test prompt length M",
               ylabel="E(ŷ − y_q)²",
               title=("linear labels y = <w,x>, w ~ N(0, I)" if task == "linear"
                      else f"nonlinear labels y = <w,x> + {p['beta']}((v·x)² − E)"))
        _fig.legend_below(ax)
    _fig.finish(ctx, fig, f"ZFB Theorem 4.2: prediction error of the trained LSA, d={d}, anisotropic Λ")
    passed = zmax < zk
    return passed, f"max |z| = {zmax:.2f} < {zk:.2f} over {len(rows)} cells", {
        "max_abs_z": zmax, "z_threshold": zk, "cells": rows,
        "max_abs_z_without_1_over_N2": zwrong, "best_linear_floor": floor}


# --------------------------------------------------------------------------------------------
# zfb-shifts

def _sim_errors(rng, A, Lambda_t, M, B, *, Lambda_q=None, noise=0.0, normalize=True):
    """Simulated errors of the LSA (ŷ = x_q^T A m) and OLS on B test prompts; returns
    ((mean, se) LSA, (mean, se) OLS) of E(ŷ − y_q)², optionally divided by E y_q²."""
    d = A.shape[0]
    b = data.linear_regression_prompts(rng, B, d, M, Lambda_t, noise_std=noise)
    x_q = b.x_q
    if Lambda_q is not None:
        x_q = rng.standard_normal((B, d)) @ np.linalg.cholesky(Lambda_q).T
    y_q = np.einsum("bd,bd->b", x_q, b.w) + noise * rng.standard_normal(B)
    e_lsa = (_predict_limit(b.X, b.y, x_q, A) - y_q) ** 2
    e_ols = (baselines.ols(b.X, b.y, x_q) - y_q) ** 2
    Lq = Lambda_t if Lambda_q is None else Lambda_q
    scale = (np.trace(Lq) + noise**2) if normalize else 1.0
    return [tuple(v / scale for v in mean_se(e)) for e in (e_lsa, e_ols)], scale


@reproduction(
    "zfb-shifts",
    claim="ZFB §4.2: task (noise) and query shifts are tolerated by the trained LSA, covariate shift is not",
    condition="simulation within z_K SE of the exact shift errors at every point; normalized error under "
              "query shift varies < 10%; under covariate scale c_max it is >= 10x that at c = 1 while "
              "OLS's does not grow (ratio <= 1.1)",
    quick=dict(dim=5, context=20, test_length=40, samples=20000, base_noise=0.1,
               noise=[0.25, 0.5, 1.0, 2.0], query_scale=[0.25, 0.5, 1.0, 2.0, 4.0],
               covariate_scale=[0.25, 0.5, 1.0, 2.0, 4.0]),
    full=dict(dim=10, context=40, test_length=80, samples=200000,
              noise=[0.1, 0.25, 0.5, 1.0, 2.0, 4.0], query_scale=[0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 10.0],
              covariate_scale=[0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 10.0]),
)
def zfb_shifts(ctx, p):
    """The Theorem 4.1 limit (trained on N(0, Λ), length N) under the shifts of ZFB 4.2 on test
    prompts of length M: task shift (label noise σ), query shift (x_q ~ N(0, sΛ), independent of
    the context), covariate shift (x_i, x_q ~ N(0, cΛ)). Normalized error E(ŷ − y_q)²/E y_q² of
    the native LSA and of OLS, against the exact formulas of :mod:`lsa_native.theory`. The query
    and covariate panels carry a small label noise ``base_noise`` (so that OLS, exact on noiseless
    labels once M >= d, has an error to compare with; the theory includes it). Also the
    query orthogonal to the span of the context (M < d, Λ = I): the LSA predicts exactly 0."""
    rng = ctx.rng(0)
    d, N, M = p["dim"], p["context"], p["test_length"]
    Lambda = anisotropic_covariance(rng, d)
    A = np.linalg.inv(theory.gamma(Lambda, N))
    sim = ctx.rng(1)
    B = p["samples"]
    rows = []
    for s in p["noise"]:
        (l, o), sc = _sim_errors(sim, A, Lambda, M, B, noise=s)
        th = theory.limit_predictor_error(A, M, Lambda, noise_std=s) / sc
        rows.append(dict(shift="task (label noise σ)", size=s, lsa=l[0], lsa_se=l[1], ols=o[0],
                         ols_se=o[1], theory=th, z=(l[0] - th) / l[1]))
    s0 = p["base_noise"]
    for s in p["query_scale"]:
        (l, o), sc = _sim_errors(sim, A, Lambda, M, B, Lambda_q=s * Lambda, noise=s0)
        th = theory.query_shift_error(Lambda, N, M, s * Lambda, noise_std=s0) / sc
        rows.append(dict(shift="query (x_q ~ N(0, sΛ))", size=s, lsa=l[0], lsa_se=l[1], ols=o[0],
                         ols_se=o[1], theory=th, z=(l[0] - th) / l[1]))
    for c in p["covariate_scale"]:
        (l, o), sc = _sim_errors(sim, A, c * Lambda, M, B, noise=s0)
        th = theory.covariate_shift_error(Lambda, N, M, c * Lambda, noise_std=s0) / sc
        rows.append(dict(shift="covariate (x ~ N(0, cΛ))", size=c, lsa=l[0], lsa_se=l[1], ols=o[0],
                         ols_se=o[1], theory=th, z=(l[0] - th) / l[1]))
    ctx.save_csv("table.csv", list(rows[0]), [list(r.values()) for r in rows])

    # Query orthogonal to the context span (Garg et al.; ZFB 4.2): Λ = I, M < d.
    M_orth = max(1, d // 2)
    A_iso = np.linalg.inv(theory.gamma(np.eye(d), N))
    b = data.linear_regression_prompts(sim, 2000, d, M_orth, np.eye(d))
    Q, _ = np.linalg.qr(np.concatenate([np.swapaxes(b.X, 1, 2), sim.standard_normal((2000, d, d))], axis=2))
    x_orth = Q[:, :, M_orth] * np.sqrt(d)  # unit direction orthogonal to x_1..x_M, scaled
    orth_pred = float(np.max(np.abs(_predict_limit(b.X, b.y, x_orth, A_iso))))
    orth_target = float(np.sqrt(np.mean(np.einsum("bd,bd->b", x_orth, b.w) ** 2)))

    zk = z_threshold(len(rows))
    zmax = max(abs(r["z"]) for r in rows)
    q = [r for r in rows if r["shift"].startswith("query")]
    cv = [r for r in rows if r["shift"].startswith("covariate")]
    q_var = max(r["lsa"] for r in q) / min(r["lsa"] for r in q) - 1
    c1 = min(cv, key=lambda r: abs(r["size"] - 1))
    cmax = max(cv, key=lambda r: r["size"])
    cov_ratio = cmax["lsa"] / c1["lsa"]
    ols_ratio = cmax["ols"] / c1["ols"]

    fig, axes = _fig.panels(1, 3, size=(5.0, 4.8))
    for ax, kind in zip(axes[0], ("task", "query", "covariate")):
        rs = [r for r in rows if r["shift"].startswith(kind)]
        x = np.array([r["size"] for r in rs])
        ax.plot(x, [r["theory"] for r in rs], "-", color="C0", label="LSA limit, exact (theory)")
        ax.errorbar(x, [r["lsa"] for r in rs], yerr=[3 * r["lsa_se"] for r in rs], fmt="o",
                    color="C0", capsize=2, label="LSA, simulation (±3 SE)")
        ax.errorbar(x, [r["ols"] for r in rs], yerr=[3 * r["ols_se"] for r in rs], fmt="s--",
                    color="C1", capsize=2, label="OLS, simulation")
        ax.set_xscale("log")
        ax.set_xticks(x, [f"{v:g}" for v in x])
        ax.minorticks_off()
        ax.set(yscale="log", xlabel=rs[0]["shift"], ylabel="E(ŷ − y_q)² / E y_q²",
               title={"task": "Task shift: tolerated", "query": "Query shift: tolerated",
                      "covariate": "Covariate shift: not tolerated"}[kind])
        _fig.legend_below(ax, ncol=1)
    _fig.finish(ctx, fig, f"ZFB §4.2 shifts: Theorem 4.1 limit trained on N(0, Λ), d={d}, N={N}, test M={M} "
                f"(query/covariate panels: label noise σ={s0:g})")

    passed = zmax < zk and q_var < 0.10 and cov_ratio >= 10 and ols_ratio <= 1.1
    measured = (f"max |z| {zmax:.2f}; query-shift spread {100 * q_var:.1f}%; covariate c={cmax['size']:g}: "
                f"LSA x{cov_ratio:.1f}, OLS x{ols_ratio:.2f}")
    return passed, measured, {"rows": rows, "max_abs_z": zmax, "z_threshold": zk,
                              "query_spread": q_var, "covariate_ratio": cov_ratio,
                              "ols_covariate_ratio": ols_ratio,
                              "orthogonal_query_max_abs_prediction": orth_pred,
                              "orthogonal_query_rms_target": orth_target}


# --------------------------------------------------------------------------------------------
# zfb-random-cov

def _random_diag_prompts(rng, B, M, lam, w, x_q=None):
    """Prompts with covariance diag(λ_b) per prompt: λ [B, d], w [B, d] or [d]; x_q drawn from
    N(0, diag λ_b) unless given ([d] or [B, d])."""
    d = lam.shape[1]
    X = _diag_covariates(rng, B, M, lam)
    w = np.broadcast_to(w, (B, d))
    if x_q is None:
        x_q = rng.standard_normal((B, d)) * np.sqrt(lam)
    x_q = np.broadcast_to(x_q, (B, d))
    y = np.einsum("bmd,bd->bm", X, w)
    return X, y, np.ascontiguousarray(x_q), np.einsum("bd,bd->b", x_q, w)


def _diag_covariates(rng, B, M, lam):
    """x_{b,i} ~ N(0, diag λ_b), i = 1..M: [B, M, d]."""
    return rng.standard_normal((B, M, lam.shape[1])) * np.sqrt(lam)[:, None, :]


class RandomDiagonalPrompts:
    """Linear-regression prompts (w ~ N(0, I)) whose covariance is diag(λ), λ_i iid
    scale·Exponential(1) drawn per prompt (ZFB §4.3; ``scale=None``: fixed Λ = I), from
    ``np.random.default_rng([seed, step])`` — the duck type of ``sampling.LinearPrompts``."""

    def __init__(self, dim: int, context: int, scale: float | None = 1.0, seed: int = 0):
        self.dim, self.context, self.scale, self.seed = dim, context, scale, seed

    def sample(self, *, batch: int, step: int = 0, dtype=np.float32):
        rng = np.random.default_rng([self.seed, int(step)])
        d = self.dim
        lam = np.ones((batch, d)) if self.scale is None else self.scale * rng.exponential(1.0, (batch, d))
        w = rng.standard_normal((batch, d))
        X, y, xq, yq = _random_diag_prompts(rng, batch, self.context, lam, w)
        return data.PromptBatch(X=X, y=y, x_q=xq, y_q=yq.astype(dtype), w=w, E=data.embed(X, y, xq, dtype))


def _train_softmax_stand_in(ctx, p, scale, seed, N):
    """A 3-layer softmax kernel-attention model with dense value matrices (our stand-in for the
    GPT2 of JMLR Fig. 1) trained with Adam (lr 0.02 → 0.001, clip 1.0) on prompts of length N with
    fixed (scale=None) or random diagonal covariance."""
    from .. import kernel_attention as ka, train

    d = p["dim"]
    params0 = ka.KernelAttentionParams.gaussian(ctx.rng(10, seed), d, 3, 1, "softmax", sparse=False)
    steps = p["tf_steps"]
    opt = train.Adam(lr=0.02, clip_norm=1.0,
                     schedule=train.make_schedule("exponential", gamma=(0.001 / 0.02) ** (1 / max(steps - 1, 1))))
    spec = RandomDiagonalPrompts(d, N, scale, seed=ctx.seed * 1000 + seed)
    res = train.fit(train.KernelAttentionObjective(params0), opt, steps=steps,
                    data=train.Prompts(spec, batch=p["tf_batch"], resample_every=10), record_every=steps,
                    progress=None if ctx.progress else False,
                    desc=f"softmax TF ({'fixed' if scale is None else 'random'} Λ, N={N})")
    return res.params


def _random_cov_sigma(rng, moments, Theta_TT, N, samples=20000):
    """Half the initialization bound (4.10) of Theorem 4.5, its expectation by Monte Carlo over
    Exponential-type diagonal Λτ with the given first moments (scale·Exponential(1))."""
    d = moments.shape[1]
    lam = rng.exponential(moments[0], size=(samples, d))
    gam_op = ((N + 1) / N) * lam.max(axis=1) + lam.sum(axis=1) / N  # ‖Γτ‖_op for diagonal Λτ
    denom = np.sqrt(d) * np.mean(gam_op * (lam**2).sum(axis=1))
    EL = np.diag(moments[0])
    num = 2 * np.trace(EL @ EL @ Theta_TT)  # ‖EΛτ Θ‖_F² = tr(Θ^T (EΛτ)² Θ)
    return 0.5 * np.sqrt(num / denom)


# The flow stops once the gradient is this small relative to its initial size (or at flow_time):
# near the minimum ‖θ − θ*‖ ≈ ‖∇L‖/λ_min(∇²L); at d = 20 this stops at t ≈ 8 with the distance
# ~1e-10, far below the 1e-6 of the condition (the distance is measured, not assumed), before
# the integrator turns stiff and builds its 882 x 882 Jacobian (1764 gradients).
FLOW_GRAD_TOL = 1e-8


def _random_cov_flow(ctx, p, mom):
    """(1) Exact gradient flow on the random-covariance loss (4.9) from Assumption 3.3 with σ at
    half the bound (4.10); its distance to the Theorem 4.5 limit (4.11) along the way."""
    d, N = p["dim"], p["context"]
    rng = ctx.rng(0)
    W_pv_star, W_kq_star = theory.thm45_limits(mom, N)
    M0 = rng.standard_normal((d, d))
    TT = M0 @ M0.T
    TT /= np.linalg.norm(TT)
    sigma = _random_cov_sigma(ctx.rng(5), mom, TT, N)
    W_pv0, W_kq0 = theory.assumption33_init(d, sigma, Theta=np.linalg.cholesky(TT))
    g0 = np.linalg.norm(np.concatenate([g.ravel() for g in
                                        population.loss_and_grad_random_diagonal(W_pv0, W_kq0, mom, N)[1:]]))
    times = np.concatenate([[0.0], np.geomspace(1e-2, p["flow_time"], 200)])
    flow = population.gradient_flow(W_pv0, W_kq0, N, moments=mom, times=times,
                                    grad_tol=FLOW_GRAD_TOL * g0)
    dist = lambda P, K: theory.relative_distance(P, K, W_pv_star, W_kq_star)  # noqa: E731
    reached = flow.times <= flow.final_time
    return {"flow": flow, "times": flow.times[reached],
            "dists": np.array([dist(P, K) for P, K in zip(flow.W_pv[reached], flow.W_kq[reached])]),
            "losses": flow.losses[reached], "final_dist": dist(flow.final_W_pv, flow.final_W_kq),
            "W_pv": flow.final_W_pv, "W_kq": flow.final_W_kq, "sigma": sigma}


def _random_cov_slopes(ctx, p, mom, W_pv, W_kq):
    """(2) With the converged LSA: E ŷ/<w,x_q> over Λ_new for fixed (w, x_q), and the regression
    slope of ŷ on <w, x_q> for an in-distribution query, against (4.12)."""
    d = p["dim"]
    rng, sim = ctx.rng(0, 1), ctx.rng(1)
    w_fix = rng.standard_normal(d)
    xq_fix = w_fix + 0.5 * rng.standard_normal(d)  # a query with <w, x_q> far from 0
    yh_fixed, num, den = [], [], []
    for B in _chunks(p["slope_samples"]):
        # One context X per prompt serves both estimators (each stays unbiased with its own SE;
        # drawing X is most of the cost).
        lam = sim.exponential(1.0, size=(B, d))
        X = _diag_covariates(sim, B, p["slope_length"], lam)
        yh_fixed.append(lsa.predict(data.embed(X, X @ w_fix, np.broadcast_to(xq_fix, (B, d))), W_pv, W_kq))
        # In-distribution query x_q ~ N(0, Λ_new): ŷ is linear in x_q (p1 = 0 at the limit), so
        # E[ŷ <w, x_q> | context] = ŷ evaluated at the query Λ_new w, and E[<w,x_q>² | ·] = w^TΛ_new w
        # (the query integrated out exactly: smaller variance, same expectation).
        w = sim.standard_normal((B, d))
        num.append(lsa.predict(data.embed(X, np.einsum("bmd,bd->bm", X, w), lam * w), W_pv, W_kq))
        den.append(np.einsum("bd,bd->b", w * lam, w))
    t_fix = float(w_fix @ xq_fix)
    m, se = mean_se(np.concatenate(yh_fixed))
    num, den = np.concatenate(num), np.concatenate(den)
    s_in = num.mean() / den.mean()
    out = {"theory": theory.random_cov_slopes(mom, p["context"]), "t_fix": t_fix, "mean_fix": m,
           "fixed_query": m / t_fix, "fixed_query_se": se / abs(t_fix), "in_distribution": s_in,
           "in_distribution_se": float(np.std(num - s_in * den, ddof=1) / np.sqrt(num.size) / den.mean())}
    out["z"] = {k: (out[k] - out["theory"][k]) / out[k + "_se"] for k in ("fixed_query", "in_distribution")}
    return out


def _chunks(total: int, chunk: int = 20000):
    while total > 0:
        yield min(chunk, total)
        total -= chunk


def _fig1_tests(p):
    """The test laws of JMLR Fig. 1: (name, scale c or None for fixed I, moments [3, d], E y_q²)."""
    d = p["dim"]
    # Fixed test covariance I: a degenerate "random" law with moments (1, 1, 1).
    return [("fixed", None, np.ones((3, d)), d)] + [
        (f"random c={c:g}", c, population.exponential_moments(d, c), c * d) for c in p["scales"]]


def _random_cov_curves(ctx, p, mom, stand_ins):
    """(3) JMLR Figure 1: normalized error vs test length M for each test law — exact curves of
    the LSA limits trained on fixed I (Thm 4.1) and on random Λ (Thm 4.5, every training length
    N of ``fig1_contexts``), their M, N → ∞ value; simulated dots of the N = ``context`` limits,
    OLS and the softmax stand-ins."""
    d, Ms, cr = p["dim"], list(p["test_lengths"]), ctx.rng(2)
    limits = {f"lsa_fixed_N{N}": np.linalg.inv(theory.gamma(np.eye(d), N)) for N in p["fig1_contexts"]}
    limits.update({f"lsa_random_N{N}": theory.random_cov_prediction_matrix(mom, N) for N in p["fig1_contexts"]})
    simulated = {"lsa_fixed": np.linalg.inv(theory.gamma(np.eye(d), p["context"])),
                 "lsa_random": theory.random_cov_prediction_matrix(mom, p["context"])}
    A_inf = np.diag(mom[1] / mom[2])  # the random-Λ limit as M, N → ∞
    curves = []
    for name, c, test_mom, norm in _fig1_tests(p):
        row = {"test": name, "M": Ms, "lsa_random_MN_inf":
               theory.random_diagonal_error(np.diag(A_inf), 10**12, test_mom) / norm}
        for key, A in list(limits.items()) + list(simulated.items()):
            row[key] = [theory.random_diagonal_error(np.diag(A), M, test_mom) / norm for M in Ms]
        sims = {}
        for M in Ms:
            B = p["curve_samples"]
            lam = np.ones((B, d)) if c is None else c * cr.exponential(1.0, size=(B, d))
            X, y, xq, yq = _random_diag_prompts(cr, B, M, lam, cr.standard_normal((B, d)))
            errs = {key: _predict_limit(X, y, xq, A) for key, A in simulated.items()}
            errs["ols"] = baselines.ols(X, y, xq)
            # The stand-ins (not in the condition) on the first tf_eval_samples prompts only.
            n = min(B, p["tf_eval_samples"])
            E = data.embed(X[:n], y[:n], xq[:n])
            errs.update({key: model.predict(E) for key, model in stand_ins.items()})
            for key, pred in errs.items():
                sims.setdefault(key, []).append(mean_se((pred - yq[:pred.shape[0]]) ** 2 / norm))
        for key, v in sims.items():
            row[key + "_sim"], row[key + "_se"] = [m for m, _ in v], [s for _, s in v]
        row["z"] = [(s - t) / e for key in simulated
                    for s, t, e in zip(row[key + "_sim"], row[key], row[key + "_se"])]
        curves.append(row)
    return curves


def _plot_random_cov(p, fl, sl, curves, zmax, zk):
    """Top: the flow's distance to (4.11), ŷ against <w, x_q> with both slopes, the numbers;
    bottom: the four test laws of JMLR Fig. 1 (legend in its own panel, never over a curve)."""
    fig, axes = _fig.panels(2, 4, size=(4.6, 4.4))
    ax = axes[0, 0]
    ax.loglog(fl["times"][1:], np.maximum(fl["dists"][1:], 1e-16))
    ax.axhline(1e-6, color="gray", ls=":", label="pass: 1e-6")
    ax.set(xlabel="t", ylabel="‖θ − θ*‖/‖θ*‖", title="Flow on (4.9) → Thm 4.5 limit (4.11)")
    ax.legend(fontsize=8)
    _plot_slopes(axes[0, 1], p, sl)
    _slope_text(axes[0, 2], p, fl, sl, zmax, zk)
    legend_ax = axes[0, 3]
    for ax, row in zip(axes[1], curves):
        _plot_fig1_panel(ax, p, row)
    handles, labels = axes[1, 0].get_legend_handles_labels()
    legend_ax.axis("off")
    legend_ax.legend(handles, labels, fontsize=7, loc="center", frameon=False)
    for ax in axes[1, len(curves):]:
        ax.axis("off")
    return fig


def _plot_slopes(ax, p, sl):
    rng = np.random.default_rng(0)
    d, B = p["dim"], 4000
    lam, w = rng.exponential(1.0, size=(B, d)), rng.standard_normal((B, d))
    X, y, xq, yq = _random_diag_prompts(rng, B, p["slope_length"], lam, w)
    yh = lsa.predict(data.embed(X, y, xq), sl["W_pv"], sl["W_kq"])
    th = sl["theory"]
    ax.scatter(yq, yh, s=2, alpha=0.2, color="gray", label="prompts, x_q ~ N(0, Λ_new)")
    t = np.linspace(np.percentile(yq, 1), np.percentile(yq, 99), 10)
    ax.plot(t, th["in_distribution"] * t, "C0-", label=f"in-distribution slope {th['in_distribution']:.3f} (→ ⅔)")
    ax.plot(t, th["fixed_query"] * t, "C3-", label=f"fixed-query slope {th['fixed_query']:.3f} (→ ⅓)")
    ax.plot(t, t, "k:", label="ŷ = <w, x_q>")
    ax.plot([sl["t_fix"]], [sl["mean_fix"]], "C3*", ms=12,
            label=f"E ŷ at fixed (w, x_q): {sl['fixed_query']:.4f}·<w,x_q>")
    ax.set(xlabel="<w, x_q>", ylabel="ŷ", xlim=(t[0], t[-1]), ylim=(t[0], t[-1]), title="E ŷ vs <w, x_q> (4.12)")
    ax.legend(fontsize=6)


def _slope_text(ax, p, fl, sl, zmax, zk):
    th, N = sl["theory"], p["context"]
    ax.axis("off")
    ax.text(0, 1, "\n".join([
        "Slopes of E ŷ on <w, x_q> (trained LSA,",
        "native predictions):",
        f" fixed w, x_q: {sl['fixed_query']:.4f} ± {sl['fixed_query_se']:.4f}",
        f"   (4.12), N={N}: {th['fixed_query']:.4f}; N→∞: ⅓",
        f" x_q ~ N(0, Λ_new): {sl['in_distribution']:.4f} ± {sl['in_distribution_se']:.4f}",
        f"   formula, N={N}: {th['in_distribution']:.4f}; N→∞: ⅔",
        "",
        f"Flow: ‖θ − θ*‖/‖θ*‖ = {fl['final_dist']:.1e}",
        f"  at t = {fl['flow'].final_time:.3g} ({fl['flow'].method},",
        f"  {fl['flow'].steps} steps)",
        f"Curves: max |z| = {zmax:.2f} (threshold {zk:.2f})"]),
        va="top", fontsize=8.5, family="monospace")


def _plot_fig1_panel(ax, p, row):
    Ms = row["M"]
    ax.axhline(1.0, color="gray", ls="--", label="zero estimator")
    ax.axhline(row["lsa_random_MN_inf"], color="k", ls="--", label="LSA limit, M,N→∞ (random Λ)")
    for i, N in enumerate(p["fig1_contexts"]):
        ax.plot(Ms, row[f"lsa_random_N{N}"], "-", color="C0", alpha=1 - 0.3 * i,
                label=f"LSA trained on random Λ, N={N} (exact)")
        ax.plot(Ms, row[f"lsa_fixed_N{N}"], "-", color="C2", alpha=1 - 0.3 * i,
                label=f"LSA trained on fixed I, N={N} (exact)")
    ax.plot(Ms, row["lsa_random_sim"], "C0o", ms=3, label=f"simulation, N={p['context']}")
    ax.plot(Ms, row["lsa_fixed_sim"], "C2o", ms=3)
    ax.plot(Ms, row["tf_fixed_sim"], "C4^:", ms=4, label=f"3-layer softmax TF, fixed I, N={p['context']}")
    ax.plot(Ms, row["tf_random_sim"], "C5v:", ms=4, label=f"3-layer softmax TF, random Λ, N={p['context']}")
    ols = np.array(row["ols_sim"])
    ax.plot(Ms, np.where(ols > 1e-12, ols, np.nan), "C1s-", ms=3, label="least squares (0 for M >= d)")
    ax.set(yscale="log", xlabel="in-context examples M", ylabel="normalized squared error",
           title=("Test on fixed covariance" if row["test"] == "fixed"
                  else f"Test on random covariance, scale = {row['test'][9:]}"))
    ax.set_ylim(bottom=max(1e-3, ax.get_ylim()[0]))


CURVE_COLUMNS = ("lsa_fixed", "lsa_fixed_sim", "lsa_fixed_se", "lsa_random", "lsa_random_sim",
                 "lsa_random_se", "ols_sim", "ols_se", "tf_fixed_sim", "tf_random_sim")


def _save_random_cov_tables(ctx, p, fl, curves):
    ctx.save_csv("flow.csv", ["t", "dist", "loss"], zip(fl["times"], fl["dists"], fl["losses"]))
    extra = [f"lsa_{k}_N{N}" for N in p["fig1_contexts"] for k in ("fixed", "random")]
    rows = [[row["test"], M] + [row[k][j] for k in CURVE_COLUMNS + tuple(extra)] + [row["lsa_random_MN_inf"], 1.0]
            for row in curves for j, M in enumerate(row["M"])]
    ctx.save_csv("fig1.csv", ["test", "M", *CURVE_COLUMNS, *extra, "lsa_random_MN_inf", "zero"], rows)


@reproduction(
    "zfb-random-cov",
    claim="ZFB Thm 4.5: flow on the random-covariance loss converges to (4.11); E ŷ → ⅓<w,x_q> "
          "(fixed query), ⅔ slope (in-distribution query); JMLR Fig. 1 LSA-limit/OLS/zero curves",
    condition="converged parameters within 1e-6 of (4.11); both slopes E ŷ/<w,x_q> within z_K standard "
              "errors of (4.12) at the prompt length used, with a standard error below 0.5% (power: "
              "the M, N → ∞ values ⅓, ⅔ are rejected); simulated LSA errors within z_K SE of the exact "
              "curves (z_K = max(3, Bonferroni 0.5%))",
    quick=dict(dim=5, context=20, fig1_contexts=[20], slope_samples=400000, slope_length=20,
               test_lengths=[1, 2, 3, 5, 8, 12, 20, 30, 40], scales=[1.0, 4.0, 9.0], curve_samples=10000,
               flow_time=3000.0, tf_steps=400, tf_batch=1000, tf_eval_samples=2000),
    full=dict(dim=20, context=40, fig1_contexts=[40, 70, 100], slope_samples=1000000, slope_length=40,
              test_lengths=[1, 2, 5, 10, 15, 20, 25, 30, 40, 50, 60, 70, 80, 90, 100],
              scales=[1.0, 4.0, 9.0], curve_samples=20000, flow_time=20000.0, tf_steps=800, tf_batch=2000,
              tf_eval_samples=4000),
)
def zfb_random_cov(ctx, p):
    """ZFB Section 4.3 with λ_i iid Exponential(1): (1) exact gradient flow on the random-covariance
    population loss (4.9) (native, exact from the moments) from Assumption 3.3 converges to the
    Theorem 4.5 limit (4.11); (2) with the converged LSA, E ŷ/<w,x_q> over Λ_new with w and x_q
    fixed (⅓ as M, N → ∞; finite-N value from (4.12)) and the regression slope of ŷ on
    y_q = <w,x_q> when x_q is drawn with the context from N(0, Λ_new) (⅔ as N → ∞): both against
    :func:`lsa_native.theory.random_cov_slopes`; (3) the analogue of JMLR Figure 1: normalized
    error vs test length M on fixed (I) and random (cΛ, c = 1, 4, 9) covariance for the LSA limits
    trained on fixed I and on random covariance at N = 40, 70, 100 (exact curves, simulation
    dots at N = ``context``), their M, N → ∞ value, OLS, the zero estimator, and a trained 3-layer
    softmax kernel-attention model (dense V; the stand-in for the paper's GPT2) trained on fixed
    vs random covariance — reported, not part of the pass condition (the paper's GPT2 claims are
    qualitative)."""
    mom = population.exponential_moments(p["dim"])
    fl = _random_cov_flow(ctx, p, mom)
    sl = dict(_random_cov_slopes(ctx, p, mom, fl["W_pv"], fl["W_kq"]), W_pv=fl["W_pv"], W_kq=fl["W_kq"])
    stand_ins = {"tf_fixed": _train_softmax_stand_in(ctx, p, None, 1, p["context"]),
                 "tf_random": _train_softmax_stand_in(ctx, p, 1.0, 2, p["context"])}
    curves = _random_cov_curves(ctx, p, mom, stand_ins)
    z_all = [z for row in curves for z in row["z"]]
    zk, zmax = z_threshold(len(z_all)), float(np.max(np.abs(z_all)))
    _fig.finish(ctx, _plot_random_cov(p, fl, sl, curves, zmax, zk),
                f"ZFB §4.3 random covariance, λ_i ~ Exponential(1), d={p['dim']}, N={p['context']} "
                f"(bottom: JMLR Fig. 1 analogue; dots = simulation, error / E y_q²; softmax TF: "
                f"{p['tf_steps']} Adam steps, batch {p['tf_batch']})")
    _save_random_cov_tables(ctx, p, fl, curves)
    return _random_cov_verdict(fl, sl, curves, zmax, zk)


def _random_cov_verdict(fl, sl, curves, zmax, zk):
    th, z2 = sl["theory"], z_threshold(2)
    slopes_ok = all(abs(sl["z"][k]) < z2 and sl[k + "_se"] < 0.005 * th[k]
                    and abs(sl[k] - th[k + "_limit"]) > z2 * sl[k + "_se"]
                    for k in ("fixed_query", "in_distribution"))
    passed = fl["final_dist"] < 1e-6 and slopes_ok and zmax < zk
    rel = {k: sl[k] / th[k] - 1 for k in ("fixed_query", "in_distribution")}
    measured = (f"limit {fl['final_dist']:.1e}; slopes {sl['fixed_query']:.4f} (formula {th['fixed_query']:.4f}, "
                f"{100 * rel['fixed_query']:+.2f}%, z {sl['z']['fixed_query']:+.2f}), {sl['in_distribution']:.4f} "
                f"({th['in_distribution']:.4f}, {100 * rel['in_distribution']:+.2f}%, z {sl['z']['in_distribution']:+.2f}); "
                f"curves max |z| {zmax:.2f}")
    flow = fl["flow"]
    return passed, measured, {
        "limit_distance": fl["final_dist"], "sigma": fl["sigma"], "flow_steps": flow.steps,
        "flow_method": flow.method, "flow_final_time": flow.final_time,
        "flow_stopped_by_tolerance": flow.stopped_by_tolerance,
        "slope_fixed_query": sl["fixed_query"], "slope_fixed_query_se": sl["fixed_query_se"],
        "slope_in_distribution": sl["in_distribution"], "slope_in_distribution_se": sl["in_distribution_se"],
        "slope_z": sl["z"], "z_threshold_slopes": z2,
        "slopes_theory": th, "curves": curves, "curves_max_abs_z": zmax, "z_threshold": zk}
