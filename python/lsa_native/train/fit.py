"""``fit``: one optimization loop for every objective (see the package docstring)."""
from __future__ import annotations

import hashlib
import json
import math
import sys
import time
from dataclasses import dataclass

import numpy as np

from .._validation import positive_int, real_array
from ..data import PromptBatch
from .data import FixedPrompts, as_data
from ..history import History
from .metrics import relative_distance
from .objectives import as_objective
from .optim import make_optimizer
from .rundir import RunDir

__all__ = ["fit", "FitResult", "TrainingDiverged", "StepInfo"]


class TrainingDiverged(FloatingPointError):
    """A non-finite loss or gradient. Attributes: ``step``, ``checkpoint`` (path of the last good
    checkpoint or None), ``theta`` (the parameters that gave it), ``history`` (records so far)."""

    def __init__(self, message, *, step, checkpoint, theta, history):
        super().__init__(message)
        self.step, self.checkpoint, self.theta, self.history = step, checkpoint, theta, history


@dataclass
class StepInfo:
    """What a callback sees after each optimizer step: ``step`` (the step just taken, 0-based),
    ``theta`` (parameters after it, read-only view), ``loss`` and ``grad_norm`` (at the parameters
    before it), ``lr``, ``row`` (the record written this step, or None), ``objective``."""

    step: int
    theta: np.ndarray
    loss: float
    grad_norm: float
    lr: float
    row: dict | None
    objective: object


@dataclass
class FitResult:
    """``theta`` (final flat parameters), ``params`` (``objective.unpack(theta)``), ``history``,
    ``steps`` (optimizer steps taken in total), ``stopped`` (a callback stopped the run),
    ``checkpoint`` (last checkpoint written, or None)."""

    theta: np.ndarray
    params: object
    history: History
    steps: int
    stopped: bool
    checkpoint: object


def _sha(a) -> str:
    return hashlib.sha256(np.ascontiguousarray(a, dtype=np.float64).tobytes()).hexdigest()


def _every(value, name):
    return None if value is None else positive_int(value, name)


def _progress_bar(progress, steps, start, desc):
    """A tqdm bar, or None: ``progress`` None shows one only on a terminal with tqdm installed."""
    auto = progress is None
    if not (sys.stderr.isatty() if auto else progress):
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        if auto:
            return None
        raise ImportError("progress: the progress bar needs tqdm (pip install 'lsa_native[progress]'), "
                          "or pass progress=False") from None
    return tqdm(total=steps, initial=start, desc=desc, unit="step")


def fit(objective, optimizer="adam", *, steps: int, data=None, theta0=None, eval_data=None,
        eval_every: int | None = None, record_every: int = 1, metrics: dict | None = None,
        target=None, bayes_loss: float | None = None, callbacks=(), run_dir=None,
        checkpoint_every: int | None = None, keep_checkpoints: int = 3, resume: bool = False,
        progress: bool | None = None, desc: str = "fit", **optimizer_kwargs) -> FitResult:
    """Minimize ``objective`` with ``optimizer`` for ``steps`` steps; see the package docstring.

    Step t (0-based) evaluates ``objective.loss_and_grad(θ_t, t, data)`` and applies one optimizer
    step. Rows are recorded at t % record_every == 0 and t % eval_every == 0, plus a final row at
    t = ``steps`` for the final parameters (``history["loss"][-1]`` is their loss on the last
    step's prompts). A row holds
    ``step``, ``loss`` (training, at θ_t), ``grad_norm`` (before clipping), ``lr``, ``time``
    (seconds since the start, across resumptions), ``eval_loss`` (on ``eval_data``, every
    ``eval_every`` steps), ``dist_to_target`` (‖θ − target‖/‖target‖, ``target`` a flat θ),
    ``bayes_gap`` (eval_loss − ``bayes_loss``) and each ``metrics[name](params)`` (params =
    ``objective.unpack(θ_t)``; a float or array, or a dict adding one column per key).

    ``optimizer``: an :class:`~lsa_native.train.optim.Optimizer` or a name ("sgd", "adam", "adamw")
    with its keywords passed here (``fit(obj, "adam", lr=1e-3, clip_norm=1.0, ...)``).
    ``data``: a data source (``Prompts``, ``FixedPrompts``, ``GeneratorPrompts``) or a PromptBatch
    (fixed). ``callbacks``: callables ``cb(StepInfo)``; a truthy return stops the run.
    ``run_dir``: directory for config.json, history.jsonl (appended as the run goes; history.csv
    when it ends) and checkpoints every
    ``checkpoint_every`` steps (and at the end), the last ``keep_checkpoints`` kept; ``resume``
    continues from its newest checkpoint, bitwise identical to an uninterrupted run.
    ``progress``: a tqdm bar with the loss (None: only when stderr is a terminal).

    A non-finite loss or gradient raises :class:`TrainingDiverged` (step, last good checkpoint,
    a hint). Returns a :class:`FitResult`.
    """
    objective = as_objective(objective, theta0)
    optimizer = make_optimizer(optimizer, **optimizer_kwargs)
    steps = positive_int(steps, "steps")
    record_every = positive_int(record_every, "record_every")
    eval_every = _every(eval_every, "eval_every")
    checkpoint_every = _every(checkpoint_every, "checkpoint_every")
    keep_checkpoints = positive_int(keep_checkpoints, "keep_checkpoints")
    data = as_data(data)
    if data is None and getattr(objective, "needs_data", False):
        raise ValueError(f"data: {type(objective).__name__} trains on prompts; pass data= "
                         "(Prompts(spec, batch=...), FixedPrompts or a PromptBatch)")
    theta = (np.array(objective.theta0, dtype=np.float64) if theta0 is None
             else real_array(theta0, "theta0").copy())
    if theta.shape != np.shape(objective.theta0):
        raise ValueError(f"theta0: expected shape {np.shape(objective.theta0)}, got {theta.shape}")
    if eval_data is not None and eval_every is None:
        eval_every = record_every
    if eval_every is not None and eval_data is None and objective.needs_data:
        raise ValueError("eval_data: required with eval_every (a held-out PromptBatch)")
    if target is not None:
        target = np.asarray(target, dtype=np.float64)
        relative_distance(theta, target)  # validates the shape now, not at the first record
    if bayes_loss is not None:
        bayes_loss = float(bayes_loss)
        if eval_every is None:
            raise ValueError("bayes_loss: the gap is taken on held-out losses; pass eval_data")
    metrics = dict(metrics or {})
    for name, fn in metrics.items():
        if not callable(fn):
            raise TypeError(f"metrics[{name!r}]: expected a callable metric(params) -> float")
    callbacks = [callbacks] if callable(callbacks) else list(callbacks)
    if run_dir is None and (resume or checkpoint_every is not None):
        raise ValueError("run_dir: required for resume=True or checkpoint_every")

    opt_state = optimizer.init(theta)
    start, elapsed0, rows0 = 0, 0.0, []
    run, last_ckpt = None, None
    if run_dir is not None:
        config = {"objective": objective.config(), "optimizer": optimizer.config(),
                  "data": None if data is None else data.config(), "theta0_sha256": _sha(theta),
                  "eval": None if eval_every is None else {
                      "every": eval_every,
                      "data": (FixedPrompts(eval_data).config() if isinstance(eval_data, PromptBatch)
                               else type(eval_data).__name__)},
                  "record_every": record_every, "steps": steps,
                  "checkpoint_every": checkpoint_every, "keep_checkpoints": keep_checkpoints}
        run = RunDir(run_dir, config, resume=resume, keep=keep_checkpoints)
        ckpts = run.checkpoints() if resume else []
        if ckpts:
            last_ckpt = ckpts[-1]
            ck = run.load(last_ckpt, theta.size)
            if ck["step"] > steps:
                raise ValueError(f"steps: the checkpoint is at step {ck['step']} > steps = {steps}")
            if set(ck["opt_state"]) != set(opt_state):
                raise ValueError(f"checkpoint {last_ckpt}: optimizer state does not match the optimizer")
            theta, opt_state, start, elapsed0 = ck["theta"], ck["opt_state"], ck["step"], ck["elapsed"]
            if data is not None:
                data.load_state(ck["data_state"])
        rows0 = run.read_history(start) if resume else []

    history = History.from_rows(rows0)
    log = run.open_history() if run is not None else None
    bar = _progress_bar(progress, steps, start, desc)
    t0 = time.perf_counter()

    def record(t, loss, grad_norm, lr):
        row = {"step": t, "loss": float(loss), "grad_norm": grad_norm, "lr": lr,
               "time": elapsed0 + time.perf_counter() - t0}
        if eval_every is not None and (t % eval_every == 0 or t == steps):
            ev = float(objective.evaluate(theta, eval_data))
            row["eval_loss"] = ev
            if bayes_loss is not None:
                row["bayes_gap"] = ev - bayes_loss
        if target is not None:
            row["dist_to_target"] = relative_distance(theta, target)
        if metrics:
            params = objective.unpack(theta)
            for name, fn in metrics.items():
                value = fn(params)
                items = value.items() if isinstance(value, dict) else [(name, value)]
                for key, v in items:  # a dict-valued metric adds one column per key
                    row[key] = float(v) if np.ndim(v) == 0 else np.asarray(v).tolist()
        history.append_row(row)
        if log is not None:
            log.write(json.dumps(row) + "\n")
            log.flush()
        if bar is not None:
            bar.set_postfix(loss=f"{loss:.4g}", refresh=False)
        return row

    def diverged(t, loss, grad):
        what = "loss" if not math.isfinite(loss) else "gradient"
        where = (f"last good checkpoint: {last_ckpt}" if last_ckpt is not None else
                 "no checkpoint (pass run_dir= and checkpoint_every= to keep one)")
        return TrainingDiverged(
            f"training diverged at step {t}: non-finite {what} ({loss!r}); {where}. Hint: lower "
            f"the learning rate (lr = {optimizer.learning_rate(t):.3g}), clip the gradient "
            "(clip_norm=), or compute in float64 (dtype=np.float64).",
            step=t, checkpoint=last_ckpt, theta=theta.copy(), history=history)

    stopped = False
    try:
        t = start
        while t < steps:
            loss, grad = objective.loss_and_grad(theta, t, data)
            loss = float(loss)
            if not (math.isfinite(loss) and np.all(np.isfinite(grad))):
                raise diverged(t, loss, grad)
            recording = t % record_every == 0 or (eval_every is not None and t % eval_every == 0)
            # Records of step t describe θ_t: take them before the update.
            row = None
            if recording:
                grad_norm = float(np.linalg.norm(grad))
                row = record(t, loss, grad_norm, optimizer.learning_rate(opt_state["t"]))
            info = optimizer.step(theta, grad, opt_state)
            t += 1
            if bar is not None:
                bar.update(1)
            if run is not None and checkpoint_every is not None and t % checkpoint_every == 0 and t < steps:
                last_ckpt = run.save(t, theta, opt_state, data.state() if data is not None else {},
                                     elapsed0 + time.perf_counter() - t0)
            if callbacks:
                theta.flags.writeable = False
                try:
                    si = StepInfo(t - 1, theta, loss, info["grad_norm"], info["lr"], row, objective)
                    stop = any([bool(cb(si)) for cb in callbacks])
                finally:
                    theta.flags.writeable = True
                if stop:
                    stopped = True
                    break
        # Final row: the final parameters, on the last step's prompts (no fresh sample).
        loss, grad = objective.loss_and_grad(theta, max(t - 1, 0), data)
        loss = float(loss)
        if not (math.isfinite(loss) and np.all(np.isfinite(grad))):
            raise diverged(t, loss, grad)
        record(t, loss, float(np.linalg.norm(grad)), None)
        if run is not None:
            last_ckpt = run.save(t, theta, opt_state, data.state() if data is not None else {},
                                 elapsed0 + time.perf_counter() - t0)
            history.to_csv(run.path / "history.csv")  # the whole run as a table, once finished
    finally:
        if log is not None:
            log.close()
        if bar is not None:
            bar.close()
    return FitResult(theta=theta, params=objective.unpack(theta), history=history, steps=t,
                     stopped=stopped, checkpoint=last_ckpt)
