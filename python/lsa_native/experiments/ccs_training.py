"""One CCS training (a sweep cell): the setting of CCS Appendix H.1, our learning-rate schedule,
the convergence test that sets the training horizon, and the evaluation on fresh prompts.

CCS gives no learning rate, schedule or step count ("the loss values are taken after convergence
of training loss", Section 3.3). Ours: Adam (β = 0.9, 0.999) with gradient clipping at norm
``clip``, the rate decaying exponentially from ``lr`` to ``lr_final`` over ``decay_steps`` and
held there; the run stops when the training loss has converged (:class:`ConvergenceMonitor`)
after the decay, or at ``steps``. A training that diverges (non-finite loss in float32) is rerun
from the same initialization with both rates halved, up to ``retries`` times; one whose initial
parameters already overflow (deep exp models with A free: X grows by about 1 + ‖A‖·n per layer,
the logits by its square) is rerun from the same draw scaled by ½ instead (a smaller rate cannot
help there; at most ``INIT_HALVINGS`` times, not counted in ``retries``). The rate and the
initialization scale used are reported.

A_ℓ (A trained) may start from ``A_init`` × its initial value (the Gaussian draw, or the aligned
start's) and move at ``A_rate`` × the rate of r, B, C (``train.KernelAttentionObjective``'s
``A_rate``; both 1 by default, :data:`A_FACTORS`: CCS H.1's one initialization and one
optimizer). Figures 2 and 4 train A_ℓ from 0 at 0.01 × the rate (``ccs.SLOW_A``, where the reason
is).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .. import kernel_attention as ka, sampling, train
from .._validation import nonnegative_float
from ..train.schedules import Schedule
from .ccs_prompts import bayes_prediction, ccs_sigma, spec_of

__all__ = ["train_cell", "ConvergenceMonitor", "FlooredExponential", "CONVERGENCE_TOL", "describe_schedule",
           "A_FACTORS"]

# The default convergence tolerance: the mean training loss of the last 5% of the steps taken is
# within 1% of that of the 5% before (both halves of the last 10%), by CONVERGENCE_Z standard
# errors: the change plus 2 SE below 1%. (Without the margin a noisy window passes by chance: at
# B = 1000, n = 30 the SE of the change is ~2% and a plain "< 1%" stopped a training at 3300 steps
# whose dist(M, I) was still falling.)
CONVERGENCE_TOL = 0.01
CONVERGENCE_Z = 2.0
# At most this many halvings of the initialization scale for initial parameters that overflow
# float32 (not counted in a cell's ``retries``, which halve the rates). At B = 30000 the N(0, 0.1²)
# draw overflows for h̃^exp at n = 14, L >= 5 (ccs-fig2) and the Figure 4 models at L >= 4-5; at
# most 2 halvings were needed over seeds 0-2 and L <= 8 (docs/reproductions/findings.md).
INIT_HALVINGS = 4
# A_ℓ's start and rate factors and their defaults (a cell holds them only when not the default).
A_FACTORS = {"A_init": 1.0, "A_rate": 1.0}


@dataclass(frozen=True)
class FlooredExponential(Schedule):
    """s(t) = max(γ^t, floor): exponential decay to ``floor``, then constant."""

    floor: float = 0.0

    def __call__(self, t: int) -> float:
        return max(self.gamma**t, self.floor)


def schedule(lr: float, lr_final: float, decay_steps: int) -> FlooredExponential:
    floor = lr_final / lr
    return FlooredExponential(kind="exponential", gamma=floor ** (1.0 / max(decay_steps - 1, 1)),
                              floor=floor)


def describe_schedule(p: dict) -> str:
    """The training schedule of sizes ``p`` in words (figure titles, ``lsa-native list``)."""
    decay = min(p.get("decay_steps", p["steps"]), p["steps"])
    stop = (f"then until the training loss changes < {p['converge_tol']:g} over the last 10% of steps "
            f"by {CONVERGENCE_Z:g} SE (at most {p['steps']} steps)" if decay < p["steps"] else f"{p['steps']} steps in all")
    a = {k: p.get(k, v) for k, v in A_FACTORS.items()}
    start = "0" if a["A_init"] == 0 else f"{a['A_init']:g}× its start"
    slow_A = f", A_ℓ (trained) from {start} at {a['A_rate']:g}× the rate" if a != A_FACTORS else ""
    return (f"Adam, lr {p['lr']}→{p['lr_final']} over {decay} steps, clip {p['clip']}{slow_A}, {stop}, "
            f"batch {p['batch']} resampled every 10 steps")


class ConvergenceMonitor:
    """The convergence test of a training (a ``fit`` callback). Over the last ``fraction`` (10%)
    of the steps taken — at least ``min_window`` — the training loss's relative change from the
    first half of that window to the second, (m₁ − m₂)/m₂, with its standard error from the
    means of ``block``-step blocks (the prompts are resampled every 10 steps). Converged when the
    change's size plus ``z`` standard errors is below ``tol`` (a window too noisy to tell, or a
    loss that rose, is not converged); with ``stop`` the run ends there once ``start`` steps are taken (checked every
    ``every`` steps)."""

    def __init__(self, tol: float = CONVERGENCE_TOL, *, start: int = 0, stop: bool = False,
                 every: int = 50, fraction: float = 0.1, min_window: int = 200, block: int = 10,
                 z: float = CONVERGENCE_Z):
        self.tol, self.start, self.stop, self.every, self.z = tol, start, stop, every, z
        self.fraction, self.min_window, self.block = fraction, min_window, block
        self.losses: list[float] = []

    def __call__(self, info) -> bool:
        self.losses.append(float(info.loss))
        t = len(self.losses)
        if not self.stop or t < self.start or t % self.every:
            return False
        return self.converged()

    def converged(self) -> bool:
        rel, se = self.change()  # |change|: a loss that rose over the window has not settled either
        return bool(abs(rel) + self.z * se < self.tol)

    def change(self) -> tuple[float, float]:
        """(relative change of the mean training loss over the last window, its standard error);
        (inf, nan) before two blocks per half exist."""
        t = len(self.losses)
        w = max(int(self.fraction * t), self.min_window)
        w -= w % (2 * self.block)
        if w < 4 * self.block or w > t:
            return float("inf"), float("nan")
        blocks = np.asarray(self.losses[t - w:]).reshape(-1, self.block).mean(axis=1)
        b1, b2 = np.split(blocks, 2)
        m1, m2 = b1.mean(), b2.mean()
        se = np.sqrt(b1.var(ddof=1) / b1.size + b2.var(ddof=1) / b2.size) / m2
        return float((m1 - m2) / m2), float(se)

    def report(self) -> dict:
        rel, se = self.change()
        return {"converged": self.converged(), "train_loss_change": rel, "train_loss_change_se": se,
                "steps_taken": len(self.losses), "convergence_tol": self.tol,
                # the training-loss curve in 10-step block means (the convergence figure)
                "train_loss_blocks": _block_means(self.losses, self.block)}


def _block_means(losses, block):
    n = len(losses) // block * block
    return np.asarray(losses[:n]).reshape(-1, block).mean(axis=1).tolist() if n else []


def train_cell(cfg: dict) -> dict:
    """Train one kernel-attention model of CCS H.1 and evaluate it. ``cfg`` (JSON): kernel (label
    GP: linear / relu / exp, or fig4-linear / fig4-exp / fig4-composite), activations (one name per
    head), layers, context n, dim, seed, steps (the most), decay_steps (the rate's decay; the
    convergence test stops the run after it when decay_steps < steps), converge_tol, retries,
    batch, lr, lr_final, clip, init_scale, hold_A_zero, eval_batch, trace_every (0: no trace),
    optionally A_init and A_rate (A_ℓ's start and rate factors, default 1),
    optionally init ("aligned": :func:`_aligned_start`, with init_perturbation; absent: Gaussian);
    ``_device`` ("cpu" or "cuda", not part of the cell's identity) where it trains. Returns the
    test in-context loss E(TF + y_q)² (CCS (5)) at every depth ℓ = 0..L on fresh prompts with
    its Monte Carlo standard error, the Bayes loss on the same prompts, the convergence report,
    and (trace) dist(Σ^{1/2}B_ℓᵀC_ℓΣ^{1/2}, I), dist(A_ℓ, I) during training."""
    Sigma = ccs_sigma(cfg["seed"], cfg["dim"])
    spec = spec_of(cfg, Sigma, 2 * cfg["seed"])
    test_spec = spec_of(cfg, Sigma, 2 * cfg["seed"] + 1)
    wall, cpu = time.perf_counter(), time.process_time()
    res, monitor, info = _train_with_retries(cfg, spec, Sigma)
    # the cost of the training (retries included) in this process: wall and CPU seconds
    out = {**info, **monitor.report(), "train_wall_s": time.perf_counter() - wall,
           "train_cpu_s": time.process_time() - cpu}
    out.update(_evaluate(cfg, test_spec, None if res is None else res.params))
    if res is not None:
        out["train_loss_final"] = float(2 * res.history["loss"][-1])  # fit records ½ × CCS (5)
        if cfg.get("trace_every", 0):
            out.update(_trace(res.history))
    return out


def _initial_params(cfg, scale, Sigma):
    """CCS H.1's Gaussian initialization N(0, scale²); with ``cfg["init"] == "aligned"`` the start
    near the stationary family of Theorems 4.5/4.6 instead (:func:`_aligned_start`)."""
    rng = np.random.default_rng([cfg["seed"], 99])
    params0 = ka.KernelAttentionParams.gaussian(rng, cfg["dim"], cfg["layers"], len(cfg["activations"]),
                                                list(cfg["activations"]), sparse=True, scale=scale)
    init = cfg.get("init", "gaussian")
    if init not in ("gaussian", "aligned"):
        raise ValueError(f"init: expected 'gaussian' or 'aligned', got {init!r}")
    if init == "aligned":
        params0 = _aligned_start(params0, Sigma, scale, cfg["init_perturbation"])
    if cfg["hold_A_zero"]:
        params0.A[...] = 0
    params0.A[...] *= nonnegative_float(cfg.get("A_init", A_FACTORS["A_init"]), "A_init")
    return params0


def _aligned_start(params, Sigma, scale, perturbation):
    """A start on the family the trained matrices converge to in CCS Theorems 4.5/4.6, plus
    ``perturbation`` × the Gaussian draw: B_ℓ = C_ℓ = s Σ^{-1/2} (so Σ^{1/2}B_ℓᵀC_ℓΣ^{1/2} = s² I,
    dist 0) with s such that ‖B_ℓ‖_F = scale · d (a d × d N(0, scale²) draw's typical norm),
    A_ℓ = scale · I, r_ℓ the Gaussian draw's. Whether training keeps dist(M, I) near its small
    initial value or drives it to where a Gaussian start ends tells whether that family attracts
    (issue 19's diagnostic for panels that stall above the paper's 0.05)."""
    from ..data import inverse_sqrtm

    d = params.B.shape[-1]
    root_inv = inverse_sqrtm(Sigma, "Sigma", d)
    s = scale * d / np.linalg.norm(root_inv)
    B = s * root_inv + perturbation * params.B
    C = s * root_inv + perturbation * params.C
    A = scale * np.eye(d) + perturbation * params.A
    return ka.KernelAttentionParams(B=B, C=C, activations=list(params.activations), A=A, r=params.r.copy())


def _train_with_retries(cfg, spec, Sigma):
    """(FitResult or None if every try diverged, its ConvergenceMonitor, {diverged, lr_used,
    init_scale_used, retries_used, init_halvings, error}). A divergence after an update halves the rates (at most
    ``retries`` times: retries_used); one at the initial parameters (step 0, no update yet) halves
    the initialization scale (at most INIT_HALVINGS times)."""
    # "_device" is where the cell runs, not part of its identity (sweep.cell_key leaves it out);
    # prompts without a GPU sampler (fig4 composites of sampler "numpy") train on the CPU.
    device = cfg.get("_device", "cpu") if isinstance(spec, sampling.KernelGPPrompts) else "cpu"
    trace = cfg.get("trace_every", 0)
    metrics = None
    if trace:
        metrics = {"dist": lambda p: _trace_metrics(p, Sigma)}
    decay = min(cfg.get("decay_steps") or cfg["steps"], cfg["steps"])
    lr, lr_final, scale = cfg["lr"], cfg["lr_final"], cfg["init_scale"]
    rate_halvings = scale_halvings = 0
    while True:
        monitor = ConvergenceMonitor(cfg.get("converge_tol", CONVERGENCE_TOL), start=decay,
                                     stop=decay < cfg["steps"])
        objective = train.KernelAttentionObjective(_initial_params(cfg, scale, Sigma), hold_A_zero=cfg["hold_A_zero"],
                                                   device=device,
                                                   A_rate=cfg.get("A_rate", A_FACTORS["A_rate"]))
        opt = train.Adam(lr=lr, clip_norm=cfg["clip"], schedule=schedule(lr, lr_final, decay))
        try:
            res = train.fit(objective, opt, steps=cfg["steps"],
                            data=train.Prompts(spec, batch=cfg["batch"], resample_every=10),
                            record_every=trace or cfg["steps"], metrics=metrics, callbacks=[monitor],
                            progress=False)
            return res, monitor, {"diverged": False, "lr_used": lr, "init_scale_used": scale,
                                  "retries_used": rate_halvings, "init_halvings": scale_halvings}
        except (train.TrainingDiverged, FloatingPointError) as e:
            info = {"diverged": True, "error": str(e)[:200], "lr_used": lr, "init_scale_used": scale,
                    "retries_used": rate_halvings, "init_halvings": scale_halvings}
            if getattr(e, "step", None) == 0 and getattr(e, "lr", 0) is None:  # the initial parameters
                if scale_halvings == INIT_HALVINGS:
                    return None, monitor, info
                scale, scale_halvings = scale / 2, scale_halvings + 1
            elif rate_halvings < cfg.get("retries", 0):
                lr, lr_final, rate_halvings = lr / 2, lr_final / 2, rate_halvings + 1
            else:
                return None, monitor, info


def _trace_metrics(params, Sigma) -> dict:
    """dist(Σ½B_ℓᵀC_ℓΣ½, I), dist(A_ℓ, I) and ‖A_ℓ‖_F per layer and head (dist(A, I) of a small
    A is noise: its norm tells whether A grew toward a·I or stayed near its initialization)."""
    out = {"dist_" + k: np.asarray(v).ravel()
           for k, v in train.kernel_attention_identity_distances(params, Sigma).items()}
    if getattr(params, "A", None) is not None:
        out["norm_A"] = np.linalg.norm(np.asarray(params.A, dtype=np.float64), axis=(-2, -1)).ravel()
    return out


def _evaluate(cfg, test_spec, params) -> dict:
    """Test loss per layer (mean and Monte Carlo SE over eval_batch fresh prompts) and the Bayes
    loss on the same prompts; NaN losses for a diverged training."""
    L = cfg["layers"]
    test = test_spec.sample(batch=cfg["eval_batch"], step=0, dtype=np.float64)
    out = {"bayes_loss": float(np.mean((bayes_prediction(test_spec, test) - test.y_q) ** 2))}
    nan = [float("nan")] * (L + 1)
    out.update(loss_per_layer=nan, loss_se_per_layer=nan, loss=float("nan"))
    if params is None:
        return out
    try:
        sq = (params.predict(test.E, every_layer=True) - test.y_q[:, None]) ** 2  # −TF_ℓ, ℓ = 0..L
    except FloatingPointError:
        return out
    mean, se = sq.mean(axis=0), sq.std(axis=0, ddof=1) / np.sqrt(sq.shape[0])
    out.update(loss_per_layer=[float(v) for v in mean], loss_se_per_layer=[float(v) for v in se],
               loss=float(mean[-1]))
    return out


def _trace(h) -> dict:
    out = {"trace_step": [int(s) for s in h["step"]]}
    for key in ("dist_BC", "dist_A", "norm_A"):
        if key in h.columns():
            out["trace_" + key] = np.asarray(h[key]).tolist()
    return out
