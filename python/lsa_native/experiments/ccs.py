"""Reproductions of Cheng, Chen & Sra (CCS): Proposition 3.1 (functional GD construction), Figures
1, 2 (loss vs n and vs depth), 3/5/6 (B^TC and A converge to multiples of I), 4 (2-head composite
kernels).

Setting of CCS Appendix H.1: d = 5, x = Σ^{1/2}ξ with ξ uniform on the sphere, Σ = UᵀDU with
D = diag(1, 1, 0.25, 2.25, 1) and U uniform orthogonal per seed, K-GP labels (Definition 3.3) on
ξ, sparse value matrices (Assumption 4.4), Gaussian initialization, Adam with gradient clipping,
minibatch 30000 resampled every 10 steps, 3 seeds averaged. CCS gives no learning rate, schedule
or step count: ours and the convergence test that ends each full training are in
:mod:`.ccs_training`; docs/reproductions/fidelity.md maps every choice to the paper. Trainings are
cells (:func:`train_cell`) of a sweep (:mod:`.sweep`): cached on disk, on Dask for the full grids.
"""
from __future__ import annotations

import numpy as np

from .. import baselines, data, kernel_attention as ka, sampling  # noqa: F401 (data: ccs.data in tests)
from ._common import reproduction
from . import _figures as _fig
from ._stats import z_threshold
from .ccs_prompts import (FIG4_KERNELS, CompositeGPPrompts, _composite_kernel, bayes_prediction,  # noqa: F401
                          ccs_sigma, composite_gp_prompts, spec_of)
from .ccs_training import A_FACTORS, CONVERGENCE_TOL, describe_schedule, train_cell
from .sweep import run_cells

__all__ = ["ccs_sigma", "train_cell", "ccs_prop31", "ccs_fig1", "ccs_fig2", "ccs_fig3_5_6",
           "ccs_fig4", "composite_gp_prompts"]

def _cells_run(ctx, cells, desc):
    """Run cells: in this process for quick sizes, on Dask (LocalCluster or ``scheduler``) for full
    sizes or when a scheduler is given; cached under the output folder."""
    use_dask = ctx.full or ctx.scheduler is not None
    cache = ctx.cache_dir()
    if cache is not None:
        from .sweep import cell_key

        cached = sum((cache / f"{cell_key(train_cell, c)}.json").exists() for c in cells)
        ctx.notes["sweep_cells"] = f"{len(cells)} cells, {cached} read from the cache"
    if ctx.device != "cpu":
        cells = [dict(c, _device=ctx.device) for c in cells]
    return run_cells(train_cell, cells, ctx.cache_dir(), scheduler=ctx.scheduler,
                     workers=ctx.workers if use_dask else 0, progress=ctx.progress, desc=desc,
                     gpus=ctx.device == "cuda")


def _base(p, **kw):
    cfg = {k: p[k] for k in ("dim", "steps", "converge_tol", "retries", "batch", "lr", "lr_final", "clip",
                             "init_scale", "eval_batch")}
    cfg["decay_steps"] = p.get("decay_steps", p["steps"])  # a fixed horizon unless given
    cfg.update(hold_A_zero=False, trace_every=0)
    cfg.update(kw)
    # A_ℓ's start and rate factors (ccs_training), for A trained: in a cell only when not 1, so
    # that the cells cached before they existed keep their keys
    if not cfg["hold_A_zero"]:
        cfg.update({k: p[k] for k, default in A_FACTORS.items() if p.get(k, default) != default})
    return cfg


# Our training schedule (CCS gives none; ccs_training): quick sizes train a fixed ``steps`` with
# the rate decaying over all of them (decay_steps = steps), full sizes decay over decay_steps and
# then run until the training loss has converged (or ``steps``).
TRAINING = dict(dim=5, lr=0.02, lr_final=0.001, clip=1.0, init_scale=0.1, retries=2,
                converge_tol=CONVERGENCE_TOL, **A_FACTORS)
FULL_TRAINING = dict(steps=20000, decay_steps=3000, batch=30000, seeds=3)

# Figures 2 and 4 start A_ℓ at 0 and move it at a hundredth of the rate (ccs_training): their
# deep A-free exp models diverge with one rate (L >= 6: the residual stream grows with depth and
# the exp head overflows, float32 and float64, every retry), and on K^exp labels also with A_ℓ
# from a tenth of its draw at a tenth of the rate (L = 7, 8); with this rule every probed cell
# trains and converges (docs/reproductions/findings.md, 2026-11-28). The paper gives no scale or
# rate for A_ℓ; Figures 1, 3, 5 and 6 keep CCS H.1's one rate.
SLOW_A = dict(A_init=0.0, A_rate=0.01)


def _mean_over_seeds(results, cells, key_fields) -> dict:
    """{key: {"mean", "se" (per layer, [L+1]), "bayes", "trained", "converged"}} over the seeds
    that trained (a diverged training's losses are NaN; a group whose every seed diverged stays
    NaN). se: the standard error of the seed mean — the spread over seeds / √k with k >= 2 seeds
    (it holds the test set's Monte Carlo noise too), the Monte Carlo SE with one."""
    groups = {}
    for cfg, r in zip(cells, results):
        key = tuple(cfg[f] if not isinstance(cfg[f], list) else tuple(cfg[f]) for f in key_fields)
        groups.setdefault(key, []).append(r)
    return {key: _seed_summary(rs) for key, rs in groups.items()}


def _seed_summary(rs) -> dict:
    losses = np.array([r["loss_per_layer"] for r in rs], dtype=np.float64)
    mc = np.array([r.get("loss_se_per_layer", [np.nan] * losses.shape[1]) for r in rs], dtype=np.float64)
    ok = ~np.isnan(losses[:, -1])
    k = int(ok.sum())
    if k == 0:
        mean = se = np.full(losses.shape[1], np.nan)
    elif k == 1:
        mean, se = losses[ok][0], mc[ok][0]
    else:
        mean, se = losses[ok].mean(axis=0), losses[ok].std(axis=0, ddof=1) / np.sqrt(k)
    return {"mean": mean, "se": se, "bayes": float(np.mean([r["bayes_loss"] for r in rs])),
            "trained": k, "seeds": len(rs), "converged": sum(bool(r.get("converged")) for r in rs)}


def compare(lower, higher, z: float) -> str:
    """The claim "``lower`` has the smaller loss" for two seed summaries at one depth (mean, se):
    "holds" (smaller), "tie" (larger by less than z standard errors of the difference) or
    "contradicted" (larger by more; or a training diverged)."""
    (m1, s1), (m2, s2) = lower, higher
    if not (np.isfinite(m1) and np.isfinite(m2)):
        return "contradicted"
    if m1 <= m2:
        return "holds"
    return "tie" if m1 - m2 <= z * np.hypot(s1, s2) else "contradicted"


def _verdict(checks: dict, z: float) -> tuple[bool, str]:
    """PASS iff no check is contradicted; the measured string counts each outcome and names the
    contradicted ones."""
    counts = {v: sum(1 for c in checks.values() if c == v) for v in ("holds", "tie", "contradicted")}
    bad = [k for k, c in checks.items() if c == "contradicted"]
    text = (f"{counts['holds']} of {len(checks)} comparisons hold, {counts['tie']} ties within "
            f"{z:.2f} SE, {counts['contradicted']} contradicted" + (": " + "; ".join(bad[:6]) if bad else ""))
    return bool(checks) and not bad, text


def _plot_loss_vs_layers(ax, agg, key_of, values, label, *, title, depths):
    """CCS Figures 2 and 4: log test loss against depth, one curve per value (error bars: ±1 SE
    over seeds), with the Bayes loss (the same for every curve; read from the first)."""
    for i, v in enumerate(values):
        m = np.array([agg[key_of(v, L)]["mean"][-1] for L in depths])
        se = np.array([agg[key_of(v, L)]["se"][-1] for L in depths])
        ax.errorbar(depths, _fig.log_or_nan(m), yerr=se / np.maximum(m, 1e-300), fmt="o-", color=f"C{i}",
                    capsize=2, label=label(v))
    bayes = [agg[key_of(values[0], L)]["bayes"] for L in depths]
    ax.plot(depths, _fig.log_or_nan(bayes), "k-", lw=2, label="Bayes")
    ax.set(xlabel="number of layers", ylabel="log(test ICL loss)", title=title)
    _fig.integer_ticks(ax, depths)
    _fig.legend_below(ax)


# ------------------------------------------------------------------------------------------------
# ccs-prop31

@reproduction(
    "ccs-prop31",
    claim="CCS Prop. 3.1 / D.1: kernel attention with V_ℓ = [[0,0],[0,−r_ℓ]], B = C = Σ^{-1/2}(/σ) "
          "computes functional GD on K, −TF_ℓ = f_ℓ at every layer",
    condition="max |−TF_ℓ − f_ℓ| / max|f_ℓ| < 1e-12 (float64 rounding) for linear, relu, exp and a 2-head sum",
    quick=dict(dim=5, context=20, layers=6, batch=512),
    full=dict(dim=5, context=30, layers=12, batch=8192),
)
def ccs_prop31(ctx, p):
    """Native kernel attention with the construction of CCS Proposition 3.1 (and D.1 for a 2-head
    linear + exp sum) against the numpy functional-GD iterates f_ℓ of CCS (9), on K-GP prompts with
    the H.1 covariance; also the in-context loss of both along the layers."""
    d, n, L, B = p["dim"], p["context"], p["layers"], p["batch"]
    Sigma = ccs_sigma(ctx.seed, d)
    rng = ctx.rng(0)
    rows = []
    curves = {}
    for acts in (["linear"], ["relu"], ["exp"], ["linear", "exp"]):
        label_kernel = acts[-1]
        batch = sampling.KernelGPPrompts(d, n, label_kernel, Sigma=Sigma, seed=ctx.seed).sample(
            batch=B, step=0, dtype=np.float64)
        r = rng.uniform(0.02, 0.2, size=(L, len(acts))) / n
        params = ka.KernelAttentionParams.functional_gd(d, r, acts, Sigma=Sigma)
        tf = params.predict(batch.E, every_layer=True)
        f = (baselines.functional_gd(batch, kernel=acts[0], step_sizes=r[:, 0]) if len(acts) == 1
             else _fgd_sum(batch, acts, r))
        err = float(np.max(np.abs(tf - f)))
        scale = float(np.max(np.abs(f)))
        name = "+".join(acts)
        rows.append(dict(kernel=name, max_abs_diff=err, max_abs_f=scale, relative=err / scale))
        curves[name] = (np.mean((tf - batch.y_q[:, None]) ** 2, 0), np.mean((f - batch.y_q[:, None]) ** 2, 0))
    worst = max(r["relative"] for r in rows)
    ctx.save_csv("table.csv", list(rows[0]), [list(r.values()) for r in rows])
    fig, axes = _fig.panels(1, 2, size=(5.5, 4.6))
    axes = axes[0]
    for i, (name, (a, b)) in enumerate(curves.items()):
        axes[0].plot(range(L + 1), b, "-", color=f"C{i}", label=f"functional GD, K = {name}")
        axes[0].plot(range(L + 1), a, "o", color=f"C{i}", ms=5, mfc="none", label=f"transformer, h̃ = {name}")
    axes[0].set(yscale="log", xlabel="layer ℓ", ylabel="E(f_ℓ(x_q) − y_q)²",
                title="In-context loss along the layers")
    _fig.integer_ticks(axes[0], range(L + 1))
    _fig.legend_below(axes[0])
    axes[1].bar([r["kernel"] for r in rows], [max(r["relative"], 1e-18) for r in rows])
    axes[1].axhline(1e-12, color="gray", ls=":", label="pass: 1e-12")
    axes[1].set(yscale="log", ylabel="max |−TF_ℓ − f_ℓ| / max |f_ℓ|",
                title="Construction vs functional GD (float64)")
    axes[1].legend()
    _fig.finish(ctx, fig, f"CCS Proposition 3.1: d={d}, n={n}, L={L}, K-GP labels, Σ of H.1")
    return worst < 1e-12, f"max relative difference {worst:.1e}", {"rows": rows}


def _fgd_sum(batch, kernels, r):
    """Functional GD with the sum kernel Σ_h r_{ℓ,h} K_h: f_{ℓ+1} = f_ℓ + Σ_h r_{ℓh} Σ_i (y_i − f_ℓ(x_i)) K_h(·, x_i)."""
    xi, xq, y = batch.xi, batch.xi_q, batch.y
    Kc = [baselines.kernel_matrix(k, xi, xi) for k in kernels]
    Kq = [baselines.kernel_matrix(k, xq[:, None, :], xi)[:, 0] for k in kernels]
    f_ctx = np.zeros_like(y)
    f_q = np.zeros(y.shape[0])
    out = [f_q.copy()]
    for ell in range(r.shape[0]):
        res = y - f_ctx
        f_q = f_q + sum(r[ell, h] * np.einsum("bi,bi->b", Kq[h], res) for h in range(len(kernels)))
        f_ctx = f_ctx + sum(r[ell, h] * np.einsum("bji,bi->bj", Kc[h], res) for h in range(len(kernels)))
        out.append(f_q.copy())
    return np.stack(out, axis=1)


# ------------------------------------------------------------------------------------------------
# ccs-fig1

# CCS Section 3.3: "for L = 3, h̃^softmax is more accurate than h̃^exp on K^exp data for
# n ∈ {6, 8, 10, 12, 14}" (not at n = 2, 4).
FIG1_SOFTMAX_NS = (6, 8, 10, 12, 14)


@reproduction(
    "ccs-fig1",
    claim="CCS Fig. 1: log ICL loss vs n for label kernel K x activation h̃ (3 layers) with the Bayes loss; "
          "ignoring softmax the matching h̃ is best on K^linear and K^relu labels (Fig. 1(a), (b)); "
          "softmax beats exp on K^exp labels at L = 3 for n = 6..14 (Fig. 1(c))",
    condition=("at the largest n, one seed, a fixed short training: the matching h̃ has the lowest loss "
               "(ignoring softmax) on linear and relu labels, softmax below exp on exp labels — a tie "
               "within z_K standard errors (test-set Monte Carlo) counts as consistent; does not check "
               "the other n, convergence, or the seed spread",
               "at every n of the figure (ignoring softmax): the matching h̃ not above any other on linear "
               "and relu labels, softmax not above exp on exp labels at n = 6..14 — each 'not above' "
               "with a margin of z_K standard errors of the seed means (3 seeds; z_K = max(3, "
               "Bonferroni 0.5%) over the comparisons); trainings run to convergence"),
    quick=dict(kernels=["linear", "relu", "exp"], activations=list(ka.ACTIVATIONS),
               contexts=[2, 4, 6, 8, 10], seeds=1, layers=3, steps=250, decay_steps=250, batch=1000,
               eval_batch=3000, **TRAINING),
    full=dict(contexts=[2, 4, 6, 8, 10, 12, 14], eval_batch=30000, **FULL_TRAINING),
)
def ccs_fig1(ctx, p):
    """CCS Figure 1: 3-layer single-head transformers with h̃ in {linear, relu, exp, softmax} trained
    on K-GP labels (K in {linear, relu, exp}) for several context lengths n; test ICL loss (CCS (5))
    vs n, with the Bayes estimator's loss on the same prompts. Cells on the sweep engine."""
    cells = [_base(p, kernel=k, activations=[a], layers=p["layers"], context=n, seed=ctx.seed + s)
             for k in p["kernels"] for a in p["activations"] for n in p["contexts"] for s in range(p["seeds"])]
    results = _cells_run(ctx, cells, "ccs-fig1 trainings")
    agg = _mean_over_seeds(results, cells, ("kernel", "activations", "context"))
    rows = [dict(kernel=k, activation=a[0], n=n, loss=v["mean"][-1], se=v["se"][-1], bayes=v["bayes"],
                 trained=v["trained"], converged=v["converged"]) for (k, a, n), v in agg.items()]
    ctx.save_csv("table.csv", list(rows[0]), [list(r.values()) for r in rows])
    _fig.finish(ctx, _plot_fig1(p, agg), f"CCS Figure 1: {p['layers']}-layer transformers, "
                f"{p['seeds']} seed(s), bars ±1 SE\n{describe_schedule(p)}")
    checks, z = _fig1_checks(ctx, p, agg)
    passed, measured = _verdict(checks, z)
    exp_best = {n: _best_ignoring_softmax(agg, "exp", n, p["activations"]) for n in p["contexts"]} \
        if "exp" in p["kernels"] else {}
    # SPEC 4 also asks for h̃ = exp best on exp labels; the paper claims it only for deep models
    # (Fig. 2(d), L >= 5): reported, not part of the condition.
    return passed, measured, {"rows": rows, "checks": checks, "z": z,
                              "best_on_exp_labels_ignoring_softmax": exp_best,
                              **_training_report(results)}


def _fig1_checks(ctx, p, agg):
    ns = sorted(set(p["contexts"]))
    check_ns = ns if ctx.full else [ns[-1]]
    at = lambda k, a, n: (agg[(k, (a,), n)]["mean"][-1], agg[(k, (a,), n)]["se"][-1])  # noqa: E731
    pairs = {}
    for k in ("linear", "relu"):
        if k in p["kernels"] and k in p["activations"]:
            for n in check_ns:
                for a in p["activations"]:
                    if a not in ("softmax", k):
                        pairs[f"{k} labels n={n}: {k} < {a}"] = (at(k, k, n), at(k, a, n))
    if "exp" in p["kernels"] and {"exp", "softmax"} <= set(p["activations"]):
        for n in ([n for n in check_ns if n in FIG1_SOFTMAX_NS] if ctx.full else [ns[-1]]):
            pairs[f"exp labels n={n}: softmax < exp"] = (at("exp", "softmax", n), at("exp", "exp", n))
    z = z_threshold(len(pairs))
    return {name: compare(lo, hi, z) for name, (lo, hi) in pairs.items()}, z


def _best_ignoring_softmax(agg, k, n, activations):
    cand = [a for a in activations if a != "softmax"]
    return min(cand, key=lambda a: agg[(k, (a,), n)]["mean"][-1]) if cand else None


def _plot_fig1(p, agg):
    fig, axes = _fig.panels(1, len(p["kernels"]), size=(5.0, 5.0))
    ns = sorted(set(p["contexts"]))
    for ax, k in zip(axes[0], p["kernels"]):
        for i, a in enumerate(p["activations"]):
            m = np.array([agg[(k, (a,), n)]["mean"][-1] for n in ns])
            se = np.array([agg[(k, (a,), n)]["se"][-1] for n in ns])
            ax.errorbar(ns, _fig.log_or_nan(m), yerr=se / np.maximum(m, 1e-300), fmt="o-", color=f"C{i}",
                        capsize=2, label=f"h̃ = {a}")
        lo, hi = ax.get_ylim()
        bayes = np.array([agg[(k, (p["activations"][0],), n)]["bayes"] for n in ns])
        ax.plot(ns, _fig.log_or_nan(np.maximum(bayes, 1e-300)), "k-", lw=2,
                label="Bayes" + (" (→ 0 for n >= d: off the axis)" if k == "linear" else ""))
        ax.set_ylim(min(lo, np.nanmin(_fig.log_or_nan(bayes)) - 0.1) if k != "linear" else lo - 0.5, hi)
        ax.set(xlabel="number of demonstrations n", ylabel="log(test ICL loss)", title=f"K^{k} labels")
        _fig.integer_ticks(ax, ns)
        _fig.legend_below(ax)
    return fig


def _training_report(results) -> dict:
    """How the trainings ended: diverged (after the retries), retried at a lower rate, redrawn at a
    smaller initialization scale, converged, steps taken."""
    steps = [r.get("steps_taken", 0) for r in results]
    return {"diverged": sum(r["diverged"] for r in results),
            "retried": sum(r.get("retries_used", 0) > 0 for r in results),
            "init_rescaled": sum(r.get("init_halvings", 0) > 0 for r in results),
            "converged": sum(bool(r.get("converged")) for r in results), "trainings": len(results),
            "steps_taken_median": float(np.median(steps)) if steps else 0.0,
            "steps_taken_max": int(max(steps, default=0))}


# ------------------------------------------------------------------------------------------------
# ccs-fig2

@reproduction(
    "ccs-fig2",
    claim="CCS Fig. 2: log ICL loss vs layers (1..8) for n = 14 and 6; ignoring softmax the matching h̃ is "
          "best on K^relu labels (2(a), 2(c)); h̃^exp is the most accurate on K^exp labels at n = 6 for "
          "L >= 5 (2(d)); h̃^exp approaches the Bayes loss as depth grows (Prop. 3.4)",
    condition=("at the deepest L, one seed, a fixed short training: h̃ = relu best on relu labels and h̃ = exp on "
               "exp labels (ignoring softmax); the exp-on-exp loss at the deepest L below that at the "
               "shallowest — ties within z_K SE consistent; does not check softmax at L >= 5, the other L, "
               "convergence or the seed spread",
               "relu labels, both n, every L: h̃ = relu not above exp or linear; exp labels, n = 6, every "
               "L >= 5: h̃ = exp not above relu or softmax; exp-on-exp loss at L = 8 below L = 1 for both n — "
               "each with a margin of z_K standard errors of the seed means (3 seeds); trainings run to "
               "convergence"),
    quick=dict(TRAINING, kernels=["relu", "exp"], activations=["relu", "exp", "softmax"], contexts=[6],
               depths=[1, 2, 3, 4, 5], seeds=1, steps=250, decay_steps=250, batch=1000, eval_batch=3000,
               **SLOW_A),
    full=dict(contexts=[14, 6], depths=[1, 2, 3, 4, 5, 6, 7, 8], eval_batch=30000, **FULL_TRAINING),
)
def ccs_fig2(ctx, p):
    """CCS Figure 2: test ICL loss vs number of layers for K^relu and K^exp labels and h̃ in
    {relu, exp, softmax}, n = 14 and 6, with the Bayes loss. One training per depth (cells)."""
    cells = [_base(p, kernel=k, activations=[a], layers=L, context=n, seed=ctx.seed + s)
             for n in p["contexts"] for k in p["kernels"] for a in p["activations"] for L in p["depths"]
             for s in range(p["seeds"])]
    results = _cells_run(ctx, cells, "ccs-fig2 trainings")
    agg = _mean_over_seeds(results, cells, ("context", "kernel", "activations", "layers"))
    rows = [dict(n=n, kernel=k, activation=a[0], layers=L, loss=v["mean"][-1], se=v["se"][-1], bayes=v["bayes"],
                 trained=v["trained"], converged=v["converged"]) for (n, k, a, L), v in agg.items()]
    ctx.save_csv("table.csv", list(rows[0]), [list(r.values()) for r in rows])
    panels = [(n, k) for n in p["contexts"] for k in p["kernels"]]
    fig, axes = _fig.panels(1, len(panels), size=(4.6, 5.0))
    depths = sorted(p["depths"])
    for ax, (n, k) in zip(axes[0], panels):
        _plot_loss_vs_layers(ax, agg, lambda a, L: (n, k, (a,), L), p["activations"], lambda a: f"h̃ = {a}",
                             title=f"K^{k} labels, n = {n}", depths=depths)
    _fig.finish(ctx, fig, f"CCS Figure 2: {p['seeds']} seed(s), bars ±1 SE\n{describe_schedule(p)}")
    checks, z = _fig2_checks(ctx, p, agg)
    passed, measured = _verdict(checks, z)
    return passed, measured, {"rows": rows, "checks": checks, "z": z, **_training_report(results)}


def _fig2_checks(ctx, p, agg):
    Ls = sorted(p["depths"])
    at = lambda n, k, a, L: (agg[(n, k, (a,), L)]["mean"][-1], agg[(n, k, (a,), L)]["se"][-1])  # noqa: E731
    acts = p["activations"]
    pairs = {}
    for n in p["contexts"]:
        if "relu" in p["kernels"] and "relu" in acts:
            for L in (Ls if ctx.full else Ls[-1:]):
                for a in acts:
                    if a not in ("relu", "softmax"):
                        pairs[f"relu labels n={n} L={L}: relu < {a}"] = (at(n, "relu", "relu", L), at(n, "relu", a, L))
        if "exp" in p["kernels"] and "exp" in acts:
            if ctx.full:  # 2(d): at n = 6, h̃^exp is the most accurate (softmax included) for L >= 5
                others, depths = ([a for a in acts if a != "exp"], [L for L in Ls if L >= 5]) if n == 6 else ([], [])
            else:
                others, depths = [a for a in acts if a not in ("exp", "softmax")], Ls[-1:]
            for L in depths:
                for a in others:
                    pairs[f"exp labels n={n} L={L}: exp < {a}"] = (at(n, "exp", "exp", L), at(n, "exp", a, L))
            pairs[f"exp labels n={n}: exp at L={Ls[-1]} < L={Ls[0]} (toward Bayes)"] = (
                at(n, "exp", "exp", Ls[-1]), at(n, "exp", "exp", Ls[0]))
    z = z_threshold(len(pairs))
    return {name: compare(lo, hi, z) for name, (lo, hi) in pairs.items()}, z


# ------------------------------------------------------------------------------------------------
# ccs-fig3-5-6

# CCS H.2 / H.3: "in most cases the matrices are converging to identity"; the exceptions it names:
# "Figure 5(c) and 5(i), a few of the parameter matrices appear to asymptote at around 0.2" and
# "Figure 6(b)". The level 0.05 is read off the figures' axes (issue 19; not in the text).
DIST_LEVEL, DIST_EXCEPTION_LEVEL = 0.05, 0.3
DIST_EXCEPTIONS = {"A = 0 (Thm 4.5)": 2, "A free (Thm 4.6)": 1}
FINAL_WINDOW = 0.1  # a matrix's final dist(M, I): the mean of its trace over the last 10% of training
# Reported per panel, not part of the condition (docs/reproductions/findings.md): the trend at the end,
# d log10 dist / d(1000 steps) of the seed-mean curves over the last SLOPE_WINDOW of the common span
# (median over the matrices; < 0: still falling, a training horizon; >= 0: flat or rising), and the
# matrices of single trainings whose dist never fell below UNTRAINED_LEVEL (a matrix that never
# approached I, e.g. a layer stuck in a symmetry-broken state).
SLOPE_WINDOW, UNTRAINED_LEVEL = 0.2, 0.5
# ``--set init=aligned`` (a diagnostic, not the paper's setup): each training starts on the family
# of Theorems 4.5/4.6 (dist 0) plus this fraction of the Gaussian draw (ccs_training._aligned_start)
ALIGNED_PERTURBATION = 0.1


@reproduction(
    "ccs-fig3-5-6",
    claim="CCS Fig. 3/5/6 (Thms 4.5, 4.6): trained Σ^{1/2}B_ℓᵀC_ℓΣ^{1/2} and A_ℓ converge to multiples of I",
    condition=("every panel: median dist(Σ½BᵀCΣ½, I) over the last 10% of training at least 2x below "
               "its initial value and below its value at mid-training (quick: short training, one seed; dist(A, I) "
               "reported; does not check the paper's level 0.05)",
               "per panel (K, h̃), the median over its matrices (Σ½B_ℓᵀC_ℓΣ½, ℓ = 0..2, and A_0, A_1 in "
               "Fig. 6) of dist(M, I) averaged over 3 seeds and over the last 10% of training below 0.05, "
               "except at "
               "most the panels the paper names (2 in Fig. 5: 5(c), 5(i); 1 in Fig. 6: 6(b)), which stay "
               "below 0.3 (the paper: ≈ 0.2); trainings run to convergence"),
    quick=dict(kernels=["exp"], activations=["softmax"], a_modes=["zero", "free"], context=10, seeds=1,
               layers=3, steps=1000, decay_steps=1000, batch=1000, eval_batch=1000, trace_every=20,
               init="gaussian", **TRAINING),
    full=dict(kernels=["linear", "relu", "exp"], activations=["linear", "relu", "softmax"], context=30,
              eval_batch=3000, trace_every=50, **FULL_TRAINING),
)
def ccs_fig3_5_6(ctx, p):
    """CCS Figures 3, 5, 6: 3-layer transformers trained with A_ℓ = 0 held (Theorem 4.5, Fig. 5)
    and A_ℓ free (Theorem 4.6, Fig. 6); log dist(M, I) = min_α ‖M − αI‖_F/‖M‖_F during training for
    M = Σ^{1/2}B_ℓᵀC_ℓΣ^{1/2} and M = A_ℓ (Fig. 3 is the (K^exp, h̃^softmax) panel).
    ``init="aligned"`` (a diagnostic): every training starts near the family the theorems name
    (B_ℓᵀC_ℓ ∝ Σ^{-1}, A_ℓ ∝ I; :data:`ALIGNED_PERTURBATION`), to see whether it attracts."""
    # the start is part of a cell only when it is not CCS's Gaussian one (the cached cells' keys stay)
    start = {} if p["init"] == "gaussian" else dict(init=p["init"], init_perturbation=ALIGNED_PERTURBATION)
    cells = [_base(p, kernel=k, activations=[a], layers=p["layers"], context=p["context"],
                   seed=ctx.seed + s, hold_A_zero=hold, trace_every=p["trace_every"], **start)
             for hold in _holds(p["a_modes"]) for k in p["kernels"] for a in p["activations"] for s in range(p["seeds"])]
    results = _cells_run(ctx, cells, "ccs-fig3-5-6 trainings")
    panels = {}
    for cfg, r in zip(cells, results):
        key = ("A = 0 (Thm 4.5)" if cfg["hold_A_zero"] else "A free (Thm 4.6)", cfg["kernel"], cfg["activations"][0])
        panels.setdefault(key, []).append(r)
    summary = [_dist_panel(key, rs) for key, rs in sorted(panels.items())]
    start_text = "" if not start else (f", start: Thm 4.5/4.6 family + {ALIGNED_PERTURBATION} x the "
                                       "Gaussian draw (a diagnostic)")
    _fig.finish(ctx, _plot_dist_panels(summary), f"CCS Figures 3/5/6: n = {p['context']}, "
                f"{p['seeds']} seed(s), mean over seeds{start_text}\n{describe_schedule(p)}")
    # The paper's claim is about CCS's Gaussian start: an aligned start gives no PASS (exit 1).
    passed = _dist_verdict(summary, ctx.full) and not start  # sets each panel's "passed" (the table's)
    table = [{k: v for k, v in s.items() if not k.startswith("_")} for s in summary]
    if table:  # the columns by name: A = 0 panels have no A_norm_final (blank there)
        columns = list(dict.fromkeys(k for row in table for k in row))
        ctx.save_csv("table.csv", columns, [[row.get(k, "") for k in columns] for row in table])
    measured = ("aligned start (a diagnostic, not the paper's setup: no verdict): " if start else "") + "; ".join(
        f"{s['panel']}: median {s['median_initial']:.2f} → {s['median_final']:.3f}"
        + ("" if s["A_final"] != s["A_final"] else f" (A: {s['A_final']:.2f})") for s in summary)
    return passed, measured, {"panels": table, **_training_report(results)}


def _holds(a_modes) -> list[bool]:
    """``hold_A_zero`` of the panels to run: "zero" (A_ℓ = 0 held, Thm 4.5, Fig. 5), "free" (Thm
    4.6, Fig. 6); e.g. ``--set a_modes=zero`` runs Figure 5's panels alone."""
    return [mode == "zero" for mode in ("zero", "free") if mode in a_modes]


def _dist_panel(key, rs) -> dict:
    """One panel: the seed-averaged traces of its matrices and their medians (initial, middle,
    final). A matrix's final value is the mean of its trace over the last FINAL_WINDOW of the
    training, not its last point: at B = 3000 the last point wanders ±0.015 around a level near
    0.05 (docs/reproductions/findings.md), so one point would decide the paper's 0.05 by chance.
    The A of the last layer does not reach the prediction (zero gradient): the paper plots
    A_0 .. A_{L-2} only; the A's are not in a Fig. 5 (A = 0) panel."""
    rs = [r for r in rs if not r["diverged"] and "trace_dist_BC" in r]
    out = {"panel": " ".join(key), "figure": key[0], "trained": len(rs), "converged": sum(bool(r.get("converged")) for r in rs)}
    if not rs:
        return dict(out, median_slope=np.nan, untrained=0, median_initial=np.nan, median_mid=np.nan,
                    median_final=np.nan, max_final=np.nan, A_final=np.nan, _curves={}, _step=[])
    # Each seed's training stops at its own convergence, so the traces differ in length: a matrix's
    # final value is each seed's mean over its own last FINAL_WINDOW, then averaged over the seeds;
    # the plotted curve is the seed mean over the steps every seed reached.
    curves, finals = {}, {}
    for field, name, skip_last in (("trace_dist_BC", "Σ½B{j}ᵀC{j}Σ½", 0), ("trace_dist_A", "A{j}", 1)):
        if field == "trace_dist_A" and not (key[0].startswith("A free") and field in rs[0]):
            continue
        traces = [np.asarray(r[field]) for r in rs]  # each [T_seed, matrices]
        span = min(len(t) for t in traces)
        mean = np.mean([t[:span] for t in traces], axis=0)
        final = np.mean([t[-max(1, int(round(FINAL_WINDOW * len(t)))):].mean(axis=0) for t in traces], axis=0)
        for j in range(mean.shape[1] - skip_last):
            curves[name.format(j=j)], finals[name.format(j=j)] = mean[:, j], final[j]
    arr = np.array(list(curves.values()))  # [matrices, common span]
    final = np.array(list(finals.values()))
    step = np.asarray(rs[0]["trace_step"][:arr.shape[1]], dtype=float)
    out["median_slope"] = float(np.median([_log_slope(step, c) for c in arr]))
    out["untrained"] = _untrained(rs, key[0].startswith("A free"))
    a_final = [f for name, f in zip(curves, final) if name.startswith("A")]
    if key[0].startswith("A free") and "trace_norm_A" in rs[0]:  # ‖A_ℓ‖_F, ℓ = 0..L-2 (reported)
        out["A_norm_final"] = [float(v) for v in np.mean([np.asarray(r["trace_norm_A"])[-1] for r in rs], axis=0)[:-1]]
    return dict(out, median_initial=float(np.median(arr[:, 0])), median_mid=float(np.median(arr[:, arr.shape[1] // 2])),
                median_final=float(np.median(final)), max_final=float(np.max(final)),
                A_final=float(np.median(a_final)) if a_final else float("nan"),
                _curves=curves, _step=rs[0]["trace_step"][:arr.shape[1]])


def _untrained(rs, a_free: bool) -> int:
    """Matrices of single trainings whose dist(M, I) never fell below UNTRAINED_LEVEL: Σ½B_ℓᵀC_ℓΣ½
    of every layer and, with A free, A_ℓ of the first L−1 layers (trace_dist_A's last column is
    the last layer's, which is not trained)."""
    traces = [np.asarray(r["trace_dist_BC"]) for r in rs]
    if a_free:
        traces += [np.asarray(r["trace_dist_A"])[:, :-1] for r in rs if "trace_dist_A" in r]
    return sum(int(np.sum(t.min(axis=0) > UNTRAINED_LEVEL)) for t in traces)


def _log_slope(step, curve) -> float:
    """d log10(curve) / d(1000 steps), least squares over the last SLOPE_WINDOW of the points."""
    k = max(3, int(round(SLOPE_WINDOW * len(curve))))
    if len(curve) < 3:
        return float("nan")
    return float(np.polyfit(step[-k:] / 1000, np.log10(np.maximum(curve[-k:], 1e-12)), 1)[0])


def _dist_verdict(summary, full: bool) -> bool:
    if not summary:
        return False
    for s in summary:
        s["passed"] = bool(s["median_final"] < DIST_LEVEL if full else
                           (s["median_final"] * 2 <= s["median_initial"] and s["median_final"] < s["median_mid"]))
    if not full:
        return all(s["passed"] for s in summary)
    ok = True
    for figure, allowed in DIST_EXCEPTIONS.items():
        missed = [s for s in summary if s["figure"] == figure and not s["passed"]]
        ok &= len(missed) <= allowed and all(s["median_final"] < DIST_EXCEPTION_LEVEL for s in missed)
    return ok


def _dist_panel_grid(summary) -> tuple[int, int, list[tuple[int, int]]]:
    """(rows, cols, each panel's (row, col)): one K × h̃ grid per figure (rows: K; Fig. 5's
    columns, then Fig. 6's), as the paper lays out its 3 × 3 panels."""
    figures = list(dict.fromkeys(s["figure"] for s in summary))
    kernels = sorted({s["panel"].split()[-2] for s in summary})
    acts = sorted({s["panel"].split()[-1] for s in summary})
    where = [(kernels.index(s["panel"].split()[-2]),
              figures.index(s["figure"]) * len(acts) + acts.index(s["panel"].split()[-1])) for s in summary]
    return len(kernels), len(figures) * len(acts), where


def _plot_dist_panels(summary):
    rows, cols, where = _dist_panel_grid(summary) if summary else (1, 1, [])
    fig, axes = _fig.panels(rows, cols, size=(4.0, 4.4))
    used = set(where)
    for (i, j), s in zip(where, summary):
        ax = axes[i, j]
        for name, c in s["_curves"].items():
            ax.semilogy(s["_step"], c, ls="--" if name.startswith("A") else "-", label=name)
        ax.axhline(DIST_LEVEL, color="gray", ls=":", label=f"paper's level {DIST_LEVEL}")
        ax.set(xlabel="training iteration", ylabel="dist(M, I)", title=s["panel"].replace(" (Thm", "\n(Thm"))
        _fig.legend_below(ax, ncol=3)
    for i, j in np.ndindex(rows, cols):
        if (i, j) not in used:
            axes[i, j].axis("off")
    return fig


# ------------------------------------------------------------------------------------------------
# ccs-fig4

FIG4_MODELS = {"1-head linear": ["linear"], "1-head exp": ["exp"], "2-head linear+exp": ["linear", "exp"]}


@reproduction(
    "ccs-fig4",
    claim="CCS Fig. 4 (Prop. D.1): a 2-head (linear + exp) transformer performs as well as the matching "
          "1-head one on K^linear (4(a)) and K^exp (4(b)) labels and outperforms both 1-head models on "
          "the composite K♦ (4(c))",
    condition=("on the composite kernel at the deepest L, one seed, a fixed short training: 2-head loss <= both "
               "1-head losses; does not check 4(a), 4(b), the other L, convergence or the seed spread",
               "every L: composite — the 2-head's seed-mean loss below both 1-head models' (no margin: "
               "'outperforms'); K^linear / K^exp — the 2-head not above the matching 1-head model by more "
               "than z_K standard errors of the seed means ('as well as'; 3 seeds); trainings run to "
               "convergence"),
    quick=dict(TRAINING, targets=["composite"], depths=[1, 2, 3, 4], context=14, seeds=1, steps=250,
               decay_steps=250, batch=1000, eval_batch=2000, **SLOW_A),
    full=dict(targets=["linear", "exp", "composite"], depths=[1, 2, 3, 4, 5, 6, 7, 8], eval_batch=10000,
              **FULL_TRAINING),
)
def ccs_fig4(ctx, p):
    """CCS Figure 4: loss vs layers on K♦ = αK^linear(G1·, G1·) + (1 − α)K^exp(G2·, G2·) labels,
    n = 14, for 1-head h̃^linear, 1-head h̃^exp and a 2-head (linear, exp) transformer: (a) α = 1
    (K^linear), (b) α = 0 (K^exp), (c) K♦(u, v) = ½(u1v1 + u2v2) + ½exp(½(u3v3 + u4v4 + u5v5))."""
    # The kernel's parameters are part of each cell's configuration (and so of its cache key), and
    # so is the sampler: "native" (sampling.CompositeKernelGPPrompts, on the cell's device) draws
    # other prompts than the numpy sampler of the cells cached before it (no "sampler" field).
    cells = [_base(p, kernel=f"fig4-{t}", activations=acts, layers=L, context=p["context"], seed=ctx.seed + s,
                   kernel_params=[FIG4_KERNELS[t][0], [float(g) for g in FIG4_KERNELS[t][1]],
                                  [float(g) for g in FIG4_KERNELS[t][2]]], sampler="native")
             for t in p["targets"] for acts in FIG4_MODELS.values() for L in p["depths"] for s in range(p["seeds"])]
    results = _cells_run(ctx, cells, "ccs-fig4 trainings")
    agg = {(k[5:], name_of, L): v for (k, a, L), v in _mean_over_seeds(results, cells, ("kernel", "activations", "layers")).items()
           for name_of in [next(n for n, acts in FIG4_MODELS.items() if tuple(acts) == a)]}
    rows = [dict(target=t, model=m, layers=L, loss=v["mean"][-1], se=v["se"][-1], bayes=v["bayes"],
                 trained=v["trained"], converged=v["converged"]) for (t, m, L), v in agg.items()]
    ctx.save_csv("table.csv", list(rows[0]), [list(r.values()) for r in rows])
    fig, axes = _fig.panels(1, len(p["targets"]), size=(5.0, 5.0))
    depths = sorted(p["depths"])
    for ax, t in zip(axes[0], p["targets"]):
        _plot_loss_vs_layers(ax, agg, lambda m, L: (t, m, L), list(FIG4_MODELS), str, title=f"K♦ = {t}",
                             depths=depths)
    _fig.finish(ctx, fig, f"CCS Figure 4: n = {p['context']}, {p['seeds']} seed(s), bars ±1 SE\n"
                f"{describe_schedule(p)}")
    checks, z = _fig4_checks(ctx, p, agg)
    passed, measured = _verdict(checks, z)
    return passed, measured, {"rows": rows, "checks": checks, "z": z, **_training_report(results)}


def _fig4_checks(ctx, p, agg):
    depths = sorted(p["depths"]) if ctx.full else [max(p["depths"])]
    at = lambda t, m, L: (agg[(t, m, L)]["mean"][-1], agg[(t, m, L)]["se"][-1])  # noqa: E731
    two, margin_pairs, strict_pairs = "2-head linear+exp", {}, {}
    for L in depths:
        if "composite" in p["targets"]:
            for m in ("1-head linear", "1-head exp"):
                strict_pairs[f"composite L={L}: 2-head < {m}"] = (at("composite", two, L), at("composite", m, L))
        if ctx.full:
            for t, m in (("linear", "1-head linear"), ("exp", "1-head exp")):
                if t in p["targets"]:
                    margin_pairs[f"{t} L={L}: 2-head <= {m}"] = (at(t, two, L), at(t, m, L))
    z = z_threshold(max(len(margin_pairs), 1))
    checks = {name: compare(lo, hi, z) for name, (lo, hi) in margin_pairs.items()}
    checks.update({name: compare(lo, hi, 0.0) for name, (lo, hi) in strict_pairs.items()})
    return checks, z
