"""Reproductions of Zhang, Singh, Latham & Saxe, "Training Dynamics of In-Context Learning in Linear
Attention" (ICML 2025) and of the low-rank optimal risk (Li, Rawat & Oymak, NeurIPS 2024) on the
exact H-head population loss (docs/population.md, "H heads"): exact gradient flow, no sampling
noise, against the closed-form plateau heights (theory.pcr_risks)."""
from __future__ import annotations

import numpy as np

from .. import population, population_multihead as pm, theory, train
from ..sampling import LinearPrompts
from ._common import reproduction
from ._stats import t_threshold

__all__ = ["la_merged", "la_separate", "lro_risk", "plateaus", "effective_value_key",
           "ordered_covariance", "aligned_merged_heads", "merged_time_course", "sgd_on_samples",
           "exact_gradient_descent", "sgd_agreement"]


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def ordered_covariance(d: int) -> np.ndarray:
    """Λ = diag(d, d−1, …, 1) / Σ: distinct eigenvalues (principal components learned in order) and
    tr Λ = 1, so the loss starts at ½ (the issue's 5-head benchmark: d = 5)."""
    lam = np.arange(d, 0, -1, dtype=float)
    return np.diag(lam / lam.sum())


def aligned_merged_heads(d: int, H: int, scale: float, rng) -> tuple[np.ndarray, np.ndarray]:
    """(W_pv, W_kq) [H, d+1, d+1] in the initialisation class of the paper's analytic time course
    (docs/population.md, "Analytic time course of merged heads"): label-only values p2_h = a q_h,
    keys K1_h = (a/√d) q_h I with q a random unit vector in R^H and a = ``scale``, every other entry
    0 (balanced: Σ_h p2_h² = ‖(K1_h)_h‖², aligned with the target U* ∝ I), so U(0) = (a²/√d) I."""
    q = rng.standard_normal(H)
    q /= np.linalg.norm(q)
    W_pv, W_kq = np.zeros((H, d + 1, d + 1)), np.zeros((H, d + 1, d + 1))
    W_pv[:, d, d] = scale * q
    W_kq[:, :d, :d] = (scale / np.sqrt(d)) * q[:, None, None] * np.eye(d)
    return W_pv, W_kq


def merged_time_course(t, d: int, N: int, u0: float, lam: float | None = None):
    """(u(t), L(t)): the closed-form gradient flow of merged heads for white Λ = λ I (λ = 1/d by
    default: tr Λ = 1, the paper's white covariance) from :func:`aligned_merged_heads`, U = u I:

        u(t) = u* / (1 + (u*/u0 − 1) e^{−2√d λ² t}),   u* = 1/γ,  γ = λ (1 + (d+1)/N),
        L(t) = ½ d λ − d λ² u + ½ d γ λ² u²

    [Zhang, Singh, Latham & Saxe 2025, Sec. 4: merged attention as a two-layer linear network on
    the cubic features, solved as in Saxe et al. 2014; derived in our notation in
    docs/population.md]. L(∞) = min L = ½ tr Λ − ½ tr(Λ²Γ⁻¹)."""
    lam = 1.0 / d if lam is None else float(lam)
    gamma = lam * (1 + (d + 1) / N)
    u_star = 1 / gamma
    u = u_star / (1 + (u_star / u0 - 1) * np.exp(-2 * np.sqrt(d) * lam ** 2 * np.asarray(t, float)))
    return u, 0.5 * d * lam - d * lam ** 2 * u + 0.5 * d * gamma * lam ** 2 * u ** 2


def _keys_kwargs(W_kq) -> dict:
    """Keyword arguments of train.MultiHeadLSAObjective for merged or (W_k, W_q) keys."""
    return {"W_k": W_kq[0], "W_q": W_kq[1]} if isinstance(W_kq, tuple) else {"W_kq": W_kq}


def _observe(W_pv, W_kq, Lambda, N, basis) -> np.ndarray:
    """[L, s_1 .. s_d, u_1 .. u_d]: the exact population loss, the singular values of U
    (effective_value_key: the learned W^KQ's label part) and U's diagonal in Λ's eigenbasis
    ``basis`` (descending eigenvalues): the components learned."""
    U = effective_value_key(W_pv, W_kq)
    u = np.einsum("ai,ab,bi->i", basis, U, basis)
    s = np.linalg.svd(U, compute_uv=False)
    return np.concatenate([[pm.multihead_loss(W_pv, W_kq, Lambda, N)], s, u])


def _components(observed) -> np.ndarray:
    """The u_i columns of :func:`_observe`'s observations."""
    return observed[..., 1 + (observed.shape[-1] - 1) // 2:]


def _eigenbasis(Lambda) -> np.ndarray:
    w, Q = np.linalg.eigh(Lambda)
    return Q[:, ::-1]


def sgd_on_samples(ctx, W_pv, W_kq, Lambda, N: int, *, lr: float, batch: int, steps: int,
                   records: int, replicates: int, stream: int = 7):
    """``replicates`` independent SGD runs of the native H-head model (train.fit with
    train.MultiHeadLSAObjective, plain SGD at rate ``lr``, ``batch`` fresh prompts of
    LinearPrompts(d, N, Λ) per step, each run its own prompt seed) from the same θ0 = (W_pv, W_kq);
    W_kq an array (merged) or (W_k, W_q). Returns (steps recorded [T], observations
    [replicates, T, 1 + 2d]): per record the exact population loss of the iterate, U's singular
    values and U's diagonal in Λ's eigenbasis (:func:`_observe`). ``steps`` is rounded up to a multiple of
    ``records``."""
    d = Lambda.shape[0]
    every = max(1, -(-steps // records))
    basis = _eigenbasis(Lambda)
    split = (lambda p: (p["W_pv"], (p["W_k"], p["W_q"]))) if isinstance(W_kq, tuple) else \
        (lambda p: (p["W_pv"], p["W_kq"]))
    runs = []
    for k in range(replicates):
        seed = int(ctx.rng(stream, k).integers(2**31))
        obj = train.MultiHeadLSAObjective(W_pv, **_keys_kwargs(W_kq), dtype=np.float64)
        res = train.fit(obj, "sgd", lr=lr, steps=every * records, record_every=every,
                        data=train.Prompts(LinearPrompts(d, N, Lambda, seed=seed), batch=batch,
                                           dtype=np.float64),
                        metrics={"observed": lambda p: _observe(*split(p), Lambda, N, basis)},
                        progress=False, desc="SGD")
        runs.append(np.stack(res.history["observed"]))
        steps_recorded = np.asarray(res.history["step"])
    return steps_recorded, np.stack(runs)


def exact_gradient_descent(W_pv, W_kq, Lambda, N: int, *, lr: float, recorded_steps):
    """The deterministic counterpart of :func:`sgd_on_samples`: θ ← θ − lr ∇L(θ) on the exact
    population loss (the mean of the SGD step), observed (:func:`_observe`) at ``recorded_steps``."""
    basis = _eigenbasis(Lambda)
    sep = isinstance(W_kq, tuple)
    theta = [np.array(W_pv, float)] + ([np.array(a, float) for a in W_kq] if sep else
                                        [np.array(W_kq, float)])
    wanted, out = set(int(s) for s in recorded_steps), {}
    for step in range(int(max(wanted)) + 1):
        keys = tuple(theta[1:]) if sep else theta[1]
        if step in wanted:
            out[step] = _observe(theta[0], keys, Lambda, N, basis)
        _, g_pv, g_kq = pm.multihead_loss_and_grad(theta[0], keys, Lambda, N)
        grads = [g_pv] + (list(g_kq) if sep else [g_kq])
        for a, g in zip(theta, grads):
            a -= lr * g
    return np.stack([out[int(s)] for s in recorded_steps])


def sgd_agreement(observed, expected, *, tol: float = 0.03, alpha: float = 0.01) -> dict:
    """How far SGD's replicate mean of the components u_i (``observed`` [R, T, ·], the loss column
    excluded) is from ``expected`` [T, ·] (exact GD at the same rate), per record and component, in
    units of the margin t_K·SE + tol·scale_i: t_K the two-sided Bonferroni 1% Student-t threshold
    (R − 1 degrees of freedom, over the records with nonzero spread), SE the replicates' standard
    error, scale = max |expected u| over records and components (U's diagonal's size). The ``tol`` term is the SGD bias of order rate/batch
    that averaging replicates does not remove (the noise's second-order drift: SGD lags exact GD
    along the slowest component by ~2% at the quick sizes of la-merged), so ``ratio`` < 1 means
    SGD tracks exact GD to within sampling error plus ``tol`` of the components' size. Returns
    {"ratio", "t_max" (the plain max |t|), "t_threshold", "deviation" (max |mean − expected| /
    scale), "tests"}. The loss column is not tested: near a minimum the SGD iterate's loss
    exceeds its mean's by ½ tr(H Cov θ) ≥ 0, which averaging replicates cannot remove either."""
    u, want = _components(observed), _components(expected)
    R = u.shape[0]
    mean, se = u.mean(axis=0), u.std(axis=0, ddof=1) / np.sqrt(R)
    live = se > 0
    scale = max(float(np.abs(want).max()), 1e-300)
    gap = np.abs(mean - want)
    t_k = t_threshold(int(live.sum()), R - 1, alpha)
    ratio = gap[live] / (t_k * se[live] + tol * scale)
    return {"ratio": float(ratio.max(initial=0.0)),
            "t_max": float((gap[live] / se[live]).max(initial=0.0)), "t_threshold": t_k,
            "deviation": float((gap / scale).max()), "tests": int(live.sum())}


def effective_value_key(W_pv, W_kq) -> np.ndarray:
    """U = Σ_h (p2_h K1_h + p1_h k2_hᵀ) [.., d, d]: the matrix of the label-linear part of ŷ,
    (1/N) Σ_i y_i x_iᵀ U x_q (a head may read the label in its value, p2 K1, or in its key,
    p1 k2ᵀ: the same bilinear form); its numerical rank is the number of principal components
    learned. W_pv [.., H, d+1, d+1]; W_kq [.., H, d+1, d+1] (merged) or (W_k, W_q) [.., H, r, d+1]."""
    d = W_pv.shape[-1] - 1
    if isinstance(W_kq, tuple):
        W_k, W_q = W_kq
        K = np.swapaxes(W_k, -1, -2) @ W_q[..., :d]  # [.., H, d+1, d]
    else:
        K = W_kq[..., :d]
    p = W_pv[..., d, :]
    return (np.einsum("...h,...hij->...ij", p[..., d], K[..., :d, :])
            + np.einsum("...hi,...hj->...ij", p[..., :d], K[..., d, :]))


def plateaus(times, losses, *, flat: float = 0.01, min_points: int = 3):
    """Plateaus of a loss curve sampled on a logarithmic time grid: maximal runs of >= min_points
    consecutive samples where the loss changes by less than ``flat`` (relative) per e-fold of time.
    Returns a list of (t_start, t_end, level), level = the loss at the flattest sample of the run."""
    t, L = np.asarray(times, float), np.asarray(losses, float)
    keep = t > 0
    t, L = t[keep], L[keep]
    slope = np.abs(np.diff(L)) / (np.diff(np.log(t)) * np.maximum(L[:-1], 1e-300))
    flat_step = slope < flat
    runs, start = [], None
    for i, f in enumerate(np.append(flat_step, False)):
        if f and start is None:
            start = i
        elif not f and start is not None:
            if i + 1 - start >= min_points:
                j = start + int(np.argmin(slope[start:i]))
                runs.append((t[start], t[i], L[j]))
            start = None
    return runs


def _numerical_rank(U, rel: float = 0.1) -> np.ndarray:
    """Per time: singular values of U above rel · (largest final singular value)."""
    s = np.linalg.svd(U, compute_uv=False)
    return (s > rel * s[-1].max()).sum(axis=-1), s


def _flow_axes(ax, runs, levels, level_label, title):
    """Exact-flow loss curves (a list of flows) with the theory levels on ``ax`` (log time)."""
    for k, flow in enumerate(runs):
        t = np.maximum(flow.times, flow.times[1] / 2)
        ax.semilogx(t, flow.losses, lw=1.5, label=f"exact gradient flow, init {k}")
    for r, level in enumerate(levels):
        ax.axhline(level, color="gray", ls=":", lw=0.8)
        ax.text(t[0], level, f" {level_label} r={r}: {level:.4f}", va="bottom", fontsize=7)
    ax.set(xlabel="t (SGD: rate × step)", ylabel="population loss L(θ(t))", title=title)


def _sgd_axes(ax, sgd, column=0, color="k", label="SGD on samples"):
    """SGD's observation ``column`` (0: the exact loss of the iterate; see :func:`_observe`) against
    t = rate × step: replicate mean (markers) and min-max band; exact GD at the same rate dashed."""
    t = np.maximum(sgd["t"], sgd["t"][1] / 2)
    y = sgd["observed"][..., column]
    ax.fill_between(t, y.min(axis=0), y.max(axis=0), color=color, alpha=0.2, lw=0)
    ax.semilogx(t, y.mean(axis=0), "o", ms=3, color=color,
                label=label and f"{label} (mean of {y.shape[0]}, band min–max)")
    ax.semilogx(t, sgd["gd"][:, column], "--", color=color, lw=0.8,
                label="exact GD, same rate" if column == 0 else None)


def _components_axes(ax, flow, sgd, Lambda, N):
    """u_i(t) (U's diagonal in Λ's eigenbasis, largest λ first) along the exact flow (lines) and
    SGD (markers): the components learned, the quantities SGD is t-tested on."""
    basis = _eigenbasis(Lambda)
    keys = (flow.W_k, flow.W_q) if flow.W_k is not None else flow.W_kq
    u = np.einsum("ai,tab,bi->ti", basis, effective_value_key(flow.W_pv, keys), basis)
    t = np.maximum(flow.times, flow.times[1] / 2)
    colors = [f"C{i}" for i in range(u.shape[1])]
    for i in range(u.shape[1]):
        ax.semilogx(t, u[:, i], color=colors[i], lw=1.2, label=f"u_{i + 1} flow")
        _sgd_axes(ax, sgd, 1 + u.shape[1] + i, colors[i], label="SGD" if i == 0 else None)
    ax.set(xlabel="t", ylabel="u_i = e_iᵀ U e_i", title="components learned: flow vs SGD")
    ax.legend(fontsize=6, loc="upper left", ncol=2)


def _rank_axes(ax, t, ranks, sv):
    t = np.maximum(t, t[1] / 2)
    ax.loglog(t, np.maximum(sv, 1e-12))
    ax2 = ax.twinx()
    ax2.semilogx(t, ranks, "k--", lw=1, label="numerical rank of U, exact flow")
    ax2.set_ylabel("rank")
    ax.set(xlabel="t", ylabel="singular values of U = Σ_h p2_h K1_h + p1_h k2_hᵀ",
           title="what the heads learned (the effective W^KQ)")
    return ax2


def _sgd_rank(ax2, sgd, sv):
    """The numerical rank of SGD's U (median over runs; the flow's threshold: 0.1 × its largest
    final singular value) on the rank axis ``ax2``; returns the ranks [runs, T]."""
    d = (sgd["observed"].shape[-1] - 1) // 2
    ranks = (sgd["observed"][..., 1:1 + d] > 0.1 * sv[-1].max()).sum(axis=-1)
    ax2.semilogx(np.maximum(sgd["t"], sgd["t"][1] / 2), np.median(ranks, axis=0), "ks", ms=3,
                 label="numerical rank of U, SGD (median)")
    ax2.legend(loc="lower right", fontsize=7)
    return ranks


def _run_sgd(ctx, p, W_pv, W_kq, Lambda, N, stream):
    """SGD on samples (:func:`sgd_on_samples`, sizes from ``p``: sgd_rate, sgd_batch, sgd_steps,
    sgd_records, sgd_replicates) with its exact-GD counterpart and the t-test of u_i."""
    steps, obs = sgd_on_samples(ctx, W_pv, W_kq, Lambda, N, lr=p["sgd_rate"], batch=p["sgd_batch"],
                                steps=p["sgd_steps"], records=p["sgd_records"],
                                replicates=p["sgd_replicates"], stream=stream)
    gd = exact_gradient_descent(W_pv, W_kq, Lambda, N, lr=p["sgd_rate"], recorded_steps=steps)
    # power: the same runs against exact GD of the model with the wrong context length 2N
    wrong = exact_gradient_descent(W_pv, W_kq, Lambda, 2 * N, lr=p["sgd_rate"], recorded_steps=steps)
    return {"t": p["sgd_rate"] * steps, "observed": obs, "gd": gd, **sgd_agreement(obs, gd),
            "ratio_wrong_N": sgd_agreement(obs, wrong)["ratio"]}


def _flow_gap(W_pv, W_kq, Lambda, N, sgd, **flow_options):
    """max |L_GD − L_flow| over the SGD records: the step's time-discretisation error (exact GD
    and the exact flow at t = rate × step)."""
    flow = pm.multihead_gradient_flow(W_pv, W_kq, N, Lambda=Lambda, times=sgd["t"], **flow_options)
    return float(np.abs(sgd["gd"][:, 0] - flow.losses).max())


def _sgd_summary(sgd) -> str:
    R = sgd["observed"].shape[0]
    return (f"SGD ({R} runs) vs exact GD: u_i within {sgd['deviation']:.1%}, "
            f"{sgd['ratio']:.2f} of the margin (t_K {sgd['t_threshold']:.0f} SE + 3%; vs GD with "
            f"2N: {sgd['ratio_wrong_N']:.1f})")


# --------------------------------------------------------------------------------------------
# la-separate

@reproduction(
    "la-separate",
    claim=("Zhang et al. 2025: separate rank-one key/query heads learn principal components one at a "
           "time: plateaus at the in-context PCR risks L_0 > L_1 > … > L_H and nowhere else; SGD on "
           "samples follows the exact dynamics"),
    condition=("over the initialisations: every plateau within 1e-3 of some L_r (relative), every L_r "
               "met by a plateau, every run ends at L_H to 1e-8; SGD of the native model on fresh "
               "prompts (init 0) vs exact GD at the same rate: the replicate mean of every u_i within "
               "t_K SE + 3% of the largest u (t_K: Bonferroni 1% Student t), and outside it against "
               "exact GD with context 2N (power)"),
    quick=dict(dim=5, context=20, heads=5, rank=1, init=0.01, inits=3, flow_time=6e4, records=240,
               method="rk4", step=2.0, rtol=1e-8, sgd_rate=2.0, sgd_batch=512, sgd_steps=2000,
               sgd_records=40, sgd_replicates=4),
    full=dict(dim=5, context=20, heads=5, rank=1, init=0.01, inits=8, flow_time=1e5, records=600,
              method="auto", step=2.0, rtol=1e-10, sgd_rate=1.0, sgd_batch=4096, sgd_steps=30000,
              sgd_records=100, sgd_replicates=8),
)
def la_separate(ctx, p):
    """H separate rank-r heads (W^KQ_h = W^K_hᵀ W^Q_h, r = 1: the paper's rank-one case) from small
    random initialisations, Λ = diag(d, …, 1)/Σ: the exact population flow's plateaus against
    theory.pcr_risks (principal-component regression of rank 1, 2, …), and the rank of the
    learned U = Σ_h (p2_h K1_h + p1_h k2_hᵀ) over time (one component per drop). Which plateaus a
    run shows depends on its initialisation (two drops close in time merge: the heads compete for
    the components), so several initialisations are run and each L_r must appear in one of them.
    Quick: fixed-step RK4 (h = 2, checked against DOPRI5/ROS34PW2 at rtol 1e-8: same plateaus);
    full: ``method="auto"`` under rtol 1e-10.

    SGD on samples: the native model (train.fit, MultiHeadLSAObjective, plain SGD, fresh prompts
    every step) from initialisation 0, ``sgd_replicates`` runs; each record observes the exact
    population loss of the iterate and U. SGD's mean step is exact GD on L at the same rate, so
    the u_i = e_iᵀ U e_i (Λ's eigenvectors) of the runs are t-tested against exact GD; exact GD vs
    the exact flow at t = rate × step (the step's discretisation) is reported beside it. Quick:
    rate 2 (4 diverges), 2000 steps (t = 4000: the first drops)."""
    d, N, H, r = p["dim"], p["context"], p["heads"], p["rank"]
    Lambda = ordered_covariance(d)
    levels = theory.pcr_risks(Lambda, N)[: min(H * r, d) + 1]
    times = np.concatenate([[0.0], np.geomspace(1.0, p["flow_time"], p["records"])])
    runs, met, stray, final_gaps, inits = [], np.zeros(len(levels), bool), [], [], []
    flow_options = dict(method=p["method"], step=p["step"], rtol=p["rtol"], atol=1e-12)
    for k in range(p["inits"]):
        rng = ctx.rng(0, k)
        W_pv = p["init"] * rng.standard_normal((H, d + 1, d + 1))
        keys = tuple(p["init"] * rng.standard_normal((H, r, d + 1)) for _ in range(2))
        inits.append((W_pv, keys))
        flow = pm.multihead_gradient_flow(W_pv, keys, N, Lambda=Lambda, times=times, **flow_options)
        found = [level for _, _, level in plateaus(flow.times, flow.losses)]
        for f in found:
            rel = np.abs(f - levels) / levels
            if rel.min() < 1e-3:
                met[int(np.argmin(rel))] = True
            else:
                stray.append(f)
        final_gaps.append(abs(flow.final_loss - levels[-1]))
        runs.append((flow, found))
    sgd = _run_sgd(ctx, p, *inits[0], Lambda, N, stream=1)
    gd_flow_gap = _flow_gap(*inits[0], Lambda, N, sgd, **flow_options)
    sgd_ok = sgd["ratio"] < 1 < sgd["ratio_wrong_N"]
    passed = bool(met.all() and not stray and max(final_gaps) < 1e-8 and sgd_ok)
    flow = runs[0][0]
    U = effective_value_key(flow.W_pv, (flow.W_k, flow.W_q))
    ranks, sv = _numerical_rank(U)
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.4))
    _flow_axes(axes[0], [fr[0] for fr in runs], levels, "PCR",
               f"la-separate: {H} rank-{r} heads, d={d}, N={N}, init {p['init']}")
    _sgd_axes(axes[0], sgd)
    axes[0].legend(loc="upper right", fontsize=7)
    _components_axes(axes[1], flow, sgd, Lambda, N)
    axes[1].set_xlim(1, p["flow_time"])
    rank_sgd = _sgd_rank(_rank_axes(axes[2], flow.times, ranks, sv), sgd, sv)
    fig.tight_layout()
    ctx.save_figure(fig)
    ctx.save_csv("flow.csv", ["t"] + [f"loss_init{k}" for k in range(len(runs))] + ["rank"],
                 zip(flow.times, *[fr[0].losses for fr in runs], ranks))
    ctx.save_csv("sgd.csv", ["t", "sgd_loss_mean", "sgd_loss_min", "sgd_loss_max", "exact_gd_loss"]
                 + [f"sgd_u{i + 1}_mean" for i in range(d)] + [f"exact_gd_u{i + 1}" for i in range(d)],
                 zip(sgd["t"], sgd["observed"][..., 0].mean(0), sgd["observed"][..., 0].min(0),
                     sgd["observed"][..., 0].max(0), sgd["gd"][:, 0],
                     *_components(sgd["observed"]).mean(0).T, *_components(sgd["gd"]).T))
    best = [min((f for _, fs in runs for f in fs), key=lambda f: abs(f - lv)) if met[i] else np.nan
            for i, lv in enumerate(levels)]
    ctx.save_csv("plateaus.csv", ["r", "theory_L_r", "closest_flow_plateau"],
                 [(i, lv, b) for i, (lv, b) in enumerate(zip(levels, best))])
    errors = [abs(b - lv) / lv for b, lv in zip(best, levels)]
    measured = (f"plateaus " + " → ".join("—" if np.isnan(b) else f"{b:.4f}" for b in best)
                + f" (theory " + " → ".join(f"{lv:.4f}" for lv in levels) + ")"
                + f", max rel. error {np.nanmax(errors):.1e}, {len(stray)} stray; "
                + _sgd_summary(sgd) + f"; GD vs flow {gd_flow_gap:.3f}")
    return passed, measured, {"theory": levels, "closest_plateaus": best, "relative_errors": errors,
                              "plateaus_per_init": [fs for _, fs in runs], "stray_plateaus": stray,
                              "final_gaps": final_gaps,
                              "rank_path": sorted(set(int(k) for k in ranks)),
                              "sgd_rank_path": sorted(set(int(k) for k in np.median(rank_sgd, 0))),
                              "sgd_t_max": sgd["t_max"], "sgd_t_threshold": sgd["t_threshold"],
                              "sgd_tests": sgd["tests"], "sgd_margin_ratio": sgd["ratio"],
                              "sgd_deviation": sgd["deviation"],
                              "sgd_margin_ratio_wrong_N": sgd["ratio_wrong_N"],
                              "gd_vs_flow_max_loss_gap": gd_flow_gap,
                              "sgd_final_loss_excess": float(sgd["observed"][:, -1, 0].mean()
                                                             - sgd["gd"][-1, 0]),
                              "gradient_evaluations": sum(fr[0].gradient_evaluations for fr in runs)}


# --------------------------------------------------------------------------------------------
# la-merged

@reproduction(
    "la-merged",
    claim=("Zhang et al. 2025: merged key-query heads learn all components at once: one abrupt drop; "
           "for white Λ from their initialisation class it follows the analytic time course"),
    condition=("anisotropic Λ: exactly 2 plateaus, ½ tr Λ (1e-3) then min L (1e-8), none at "
               "L_1..L_{d−1}, U ends at rank d; white Λ = I/d, aligned balanced init: the analytic "
               "L(t) within 1e-6 of the exact flow (and off by > 1e-3 with N+1: power); SGD of the "
               "native model on fresh prompts vs exact GD at the same rate, both Λ: the mean of every "
               "u_i within t_K SE + 3% of the largest u (t_K: Bonferroni 1% Student t), outside it "
               "against GD with 2N (power)"),
    quick=dict(dim=5, context=20, heads=5, init=0.01, flow_time=1e5, records=200, rtol=1e-8,
               white_init=0.01, white_time=150.0, sgd_rate=0.25, sgd_batch=1024, sgd_steps=1200,
               sgd_records=30, sgd_replicates=4, white_rate=0.25),
    full=dict(dim=5, context=20, heads=5, init=0.001, flow_time=1e6, records=600, rtol=1e-10,
              white_init=0.001, white_time=250.0, sgd_rate=0.25, sgd_batch=4096, sgd_steps=4000,
              sgd_records=80, sgd_replicates=8, white_rate=0.1),
)
def la_merged(ctx, p):
    """H merged heads (W^KQ_h full) from a small random initialisation, same Λ as la-separate: the
    exact flow has a single drop from ½ tr Λ to min L = ½ tr Λ − ½ tr(Λ²Γ⁻¹) [ZFB Lemma A.1],
    with no intermediate PCR plateau, and U = Σ_h p2_h K1_h gains every direction in that drop.

    The paper's analytic time course (:func:`merged_time_course`) holds for white Λ from an
    aligned, balanced initialisation (:func:`aligned_merged_heads`, scale ``white_init``): there
    the exact flow is integrated by DOPRI5 at rtol 1e-10 and compared with the closed form.

    SGD on samples (both settings): the native model (train.fit, MultiHeadLSAObjective, plain SGD,
    fresh prompts every step) from the flow's initialisation, ``sgd_replicates`` runs, t-tested on
    U's diagonal in Λ's eigenbasis against exact GD at the same rate (the mean SGD step); exact GD
    vs the flow at t = rate × step is reported (the step's discretisation)."""
    d, N, H = p["dim"], p["context"], p["heads"]
    Lambda = ordered_covariance(d)
    rng = ctx.rng(0)
    W_pv, W_kq = (p["init"] * rng.standard_normal((H, d + 1, d + 1)) for _ in range(2))
    times = np.concatenate([[0.0], np.geomspace(1.0, p["flow_time"], p["records"])])
    flow_options = dict(method="auto", rtol=p["rtol"], atol=1e-12)
    flow = pm.multihead_gradient_flow(W_pv, W_kq, N, Lambda=Lambda, times=times, **flow_options)
    L_min = population.minimum_loss(Lambda, N)
    found = plateaus(flow.times, flow.losses)
    U = effective_value_key(flow.W_pv, flow.W_kq)
    ranks, sv = _numerical_rank(U)
    levels = theory.pcr_risks(Lambda, N)
    one_drop = (len(found) == 2 and abs(found[0][2] - levels[0]) < 1e-3 * levels[0]
                and abs(found[1][2] - L_min) < 1e-8)
    # between the plateaus the rank goes from 0 straight to d (no stop at 1..d−1 for a plateau)
    in_drop = (flow.times > found[0][1]) & (flow.times < found[1][0]) if len(found) == 2 else None
    sgd = _run_sgd(ctx, p, W_pv, W_kq, Lambda, N, stream=1)
    gd_flow_gap = _flow_gap(W_pv, W_kq, Lambda, N, sgd, **flow_options)
    white = _white_merged(ctx, p, d, N, H)
    sgd_ok = all(s["ratio"] < 1 < s["ratio_wrong_N"] for s in (sgd, white["sgd"]))
    analytic_ok = white["gap"] < 1e-6 < 1e-3 < white["gap_wrong_N"]
    passed = bool(one_drop and ranks[-1] == d and abs(flow.final_loss - L_min) < 1e-8 and sgd_ok
                  and analytic_ok)
    plt = _plt()
    fig, axes = plt.subplots(2, 2, figsize=(13, 8.4))
    _flow_axes(axes[0, 0], [flow], levels, "PCR (not visited)",
               f"la-merged: {H} merged heads, d={d}, N={N}, Λ ∝ diag({d}..1), init {p['init']}")
    _sgd_axes(axes[0, 0], sgd)
    axes[0, 0].legend(loc="upper right", fontsize=7)
    _white_axes(axes[0, 1], white, d, N, H, p["white_init"])
    _components_axes(axes[1, 0], flow, sgd, Lambda, N)
    axes[1, 0].set_xlim(1, 10 * sgd["t"][-1])
    rank_sgd = _sgd_rank(_rank_axes(axes[1, 1], flow.times, ranks, sv), sgd, sv)
    fig.tight_layout()
    ctx.save_figure(fig)
    ctx.save_csv("flow.csv", ["t", "loss", "rank"], zip(flow.times, flow.losses, ranks))
    ctx.save_csv("white.csv", ["t", "exact_flow_loss", "analytic_loss", "sgd_loss_mean",
                               "exact_gd_loss"],
                 zip(white["sgd"]["t"], white["flow_at_sgd"], white["analytic_at_sgd"],
                     white["sgd"]["observed"][..., 0].mean(0), white["sgd"]["gd"][:, 0]))
    drop = (found[0][1], found[1][0]) if len(found) == 2 else (np.nan, np.nan)
    measured = (f"{len(found)} plateaus: " + " → ".join(f"{lv:.4f}" for _, _, lv in found)
                + f" (min L {L_min:.4f}); drop over t ∈ [{drop[0]:.0f}, {drop[1]:.0f}]; white Λ: "
                f"analytic vs flow {white['gap']:.1e} (N+1: {white['gap_wrong_N']:.1e}); "
                + _sgd_summary(sgd) + "; white: " + _sgd_summary(white["sgd"]))
    return passed, measured, {"plateaus": [lv for _, _, lv in found], "min_loss": L_min,
                              "final_loss": flow.final_loss, "drop_interval": drop,
                              "ranks_during_drop": sorted(set(int(k) for k in ranks[in_drop]))
                              if in_drop is not None else [],
                              "steps": flow.steps, "method": flow.method,
                              "analytic_vs_flow_max_gap": white["gap"],
                              "analytic_wrong_N_gap": white["gap_wrong_N"],
                              "sgd_t_max": sgd["t_max"], "sgd_t_threshold": sgd["t_threshold"],
                              "sgd_margin_ratio": sgd["ratio"], "sgd_deviation": sgd["deviation"],
                              "sgd_margin_ratio_wrong_N": sgd["ratio_wrong_N"],
                              "white_sgd_margin_ratio": white["sgd"]["ratio"],
                              "white_sgd_deviation": white["sgd"]["deviation"],
                              "white_sgd_margin_ratio_wrong_N": white["sgd"]["ratio_wrong_N"],
                              "gd_vs_flow_max_loss_gap": gd_flow_gap,
                              "white_gd_vs_flow_max_loss_gap": white["gd_flow_gap"],
                              "sgd_rank_path": sorted(set(int(k) for k in np.median(rank_sgd, 0)))}


def _white_merged(ctx, p, d, N, H):
    """White Λ = I/d from the aligned balanced initialisation: the exact flow, the analytic time
    course (and with N+1, for power), SGD and exact GD."""
    Lambda = np.eye(d) / d
    W_pv, W_kq = aligned_merged_heads(d, H, p["white_init"], ctx.rng(2))
    u0 = effective_value_key(W_pv, W_kq)[0, 0]
    times = np.concatenate([[0.0], np.geomspace(0.1, p["white_time"], 200)])
    options = dict(method="dopri5", rtol=1e-10, atol=1e-13)
    flow = pm.multihead_gradient_flow(W_pv, W_kq, N, Lambda=Lambda, times=times, **options)
    analytic = merged_time_course(times, d, N, u0)[1]
    sgd = _run_sgd(ctx, {**p, "sgd_rate": p["white_rate"],
                         "sgd_steps": int(round(p["white_time"] / p["white_rate"]))},
                   W_pv, W_kq, Lambda, N, stream=3)
    at_sgd = pm.multihead_gradient_flow(W_pv, W_kq, N, Lambda=Lambda, times=sgd["t"], **options)
    return {"flow": flow, "analytic": analytic, "sgd": sgd,
            "gap": float(np.abs(analytic - flow.losses).max()),
            "gap_wrong_N": float(np.abs(merged_time_course(times, d, N + 1, u0)[1]
                                        - flow.losses).max()),
            "flow_at_sgd": at_sgd.losses, "analytic_at_sgd": merged_time_course(sgd["t"], d, N, u0)[1],
            "gd_flow_gap": float(np.abs(sgd["gd"][:, 0] - at_sgd.losses).max())}


def _white_axes(ax, white, d, N, H, init):
    _flow_axes(ax, [white["flow"]], [], "", f"white Λ = I/{d}, {H} heads, aligned balanced init "
               f"{init}: the paper's analytic class")
    t = np.maximum(white["flow"].times, white["flow"].times[1] / 2)
    ax.semilogx(t, white["analytic"], "r:", lw=2.5,
                label="analytic L(t) [Zhang et al. 2025, Sec. 4] (max gap "
                      f"{white['gap']:.0e})")
    _sgd_axes(ax, white["sgd"])
    ax.legend(loc="lower left", fontsize=7)


# --------------------------------------------------------------------------------------------
# lro-risk

@reproduction(
    "lro-risk",
    claim=("Li, Rawat & Oymak 2024: the optimal risk of rank-r attention is the rank-r PCR risk "
           "L_r = ½ tr Λ − ½ Σ_{i<=r} λ_i²/Γ_i"),
    condition=("for every r = 1..d: on the label-value manifold (the value reads the label, keys "
               "and queries the features: p1 = 0, k2 = 0) the exact flow of one separate rank-r "
               "head ends at L_r to 1e-7 (relative) from every initialisation; the full model "
               "(value and keys read the whole token) never ends below L_r − 1e-7 (L_r is its "
               "optimum too); full-model runs that stop above L_r (other stable points) are "
               "counted, not failed"),
    quick=dict(dim=4, context=10, init=0.5, flow_time=1e5, restarts=2, rtol=1e-10),
    full=dict(dim=6, context=20, init=0.5, flow_time=1e6, restarts=5, rtol=1e-11),
)
def lro_risk(ctx, p):
    """One head with separate rank-r key/query (r = 1..d), anisotropic Λ with distinct
    eigenvalues, ``restarts`` random initialisations per r, each flowed exactly to
    ``flow_time``, in two families: on ZFB's label-value manifold (p1 = 0, k2 = 0: the setting of
    theory.pcr_risks, invariant under the flow) and in the full model (W^PV, W^K, W^Q dense). On
    the manifold every run must end at L_r; the full model's runs must not end below L_r, and those
    that end above it are reported: off the manifold a rank-r head has other stable stationary
    points (at d = 6, N = 20, r = 2: loss 2.698 against L_2 = 2.123, returned to after a
    perturbation of 0.1; docs/reproductions/findings.md)."""
    d, N = p["dim"], p["context"]
    rng = ctx.rng(0)
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    Lambda = Q @ np.diag(np.linspace(2.0, 0.4, d)) @ Q.T
    theory_L = theory.pcr_risks(Lambda, N)

    def final_loss(r, k, on_manifold):
        g = ctx.rng(1, r, k)
        W_pv = p["init"] * g.standard_normal((1, d + 1, d + 1))
        W_k, W_q = (p["init"] * g.standard_normal((1, r, d + 1)) for _ in range(2))
        if on_manifold:  # p1 = 0 (the value reads the label only), k2 = 0 (keys/queries the features)
            W_pv[0, d, :d] = 0.0
            W_k[..., d] = 0.0
            W_q[..., d] = 0.0
        flow = pm.multihead_gradient_flow(W_pv, (W_k, W_q), N, Lambda=Lambda,
                                          times=[0.0, p["flow_time"]], method="auto",
                                          rtol=p["rtol"], atol=1e-14)
        return flow.final_loss

    rows, finals = [], {}
    for r in range(1, d + 1):
        for family in ("manifold", "full"):
            finals[r, family] = np.array([final_loss(r, k, family == "manifold")
                                          for k in range(p["restarts"])])
        rel = {f: (finals[r, f] - theory_L[r]) / theory_L[r] for f in ("manifold", "full")}
        rows.append((r, theory_L[r], float(np.abs(rel["manifold"]).max()),
                     float(finals[r, "full"].min()), float(rel["full"].min()),
                     int((rel["full"] > 1e-7).sum())))
    worst_manifold = max(row[2] for row in rows)
    below = min(row[4] for row in rows)
    stuck = sum(row[5] for row in rows)
    passed = worst_manifold < 1e-7 and below > -1e-7
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    rr = np.arange(0, d + 1)
    ax.plot(rr, theory_L, "o-", color="C0", label="PCR risk L_r (closed form)")
    for family, marker, color, shift in (("manifold", "x", "C2", -0.08), ("full", "+", "C3", 0.08)):
        xs = np.concatenate([np.full(p["restarts"], r + shift) for r in range(1, d + 1)])
        ys = np.concatenate([finals[r, family] for r in range(1, d + 1)])
        ax.plot(xs, ys, marker, color=color, ms=8,
                label=("flow ends, label-value manifold" if family == "manifold"
                       else "flow ends, full model (W^PV, W^K, W^Q dense)"))
    ax.axhline(population.minimum_loss(Lambda, N), color="gray", ls=":", label="min L (full rank)")
    ax.set(xlabel="rank r of W^K, W^Q", ylabel="population loss",
           title=f"lro-risk: d={d}, N={N}, Λ eigenvalues 2 … 0.4, {p['restarts']} inits per point")
    ax.legend(fontsize=7)
    fig.tight_layout()
    ctx.save_figure(fig)
    ctx.save_csv("risks.csv", ["r", "theory_L_r", "manifold_max_relative_error", "full_minimum",
                               "full_minimum_relative_error", "full_runs_above_L_r"], rows)
    missed = [r for r, *_, rel_min, _ in rows if rel_min > 1e-7]
    measured = (f"label-value manifold: every run at L_r, max relative error {worst_manifold:.1e} "
                f"over r = 1..{d}; full model: lowest end {below:+.1e} relative to L_r, "
                f"{stuck} of {d * p['restarts']} runs stopped above L_r"
                + (f" (none reached it at r = {', '.join(map(str, missed))})" if missed else ""))
    return passed, measured, {"rows": rows, "worst_relative_error": worst_manifold,
                              "full_lowest_relative": below, "full_runs_above": stuck,
                              "full_finals": {str(r): finals[r, "full"].tolist() for r in range(1, d + 1)}}
