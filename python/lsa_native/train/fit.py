"""``fit``: one optimization loop for every objective (see the package docstring).

The call is in parts: :func:`_setup` checks every argument once, before any work (bad input is a
TypeError/ValueError naming the argument there, never in the loop); :func:`_start` opens the run
directory and resumes from its newest checkpoint; :class:`_Recorder` writes the history rows;
:func:`_run_steps` takes the steps (per step: the bound objective step, the checks of its
results, the record, and the optimizer step — one native call for the built-in optimizers). Every
sign of divergence — a non-finite loss, gradient, held-out loss or updated parameters, a native
overflow — is raised by :class:`_Divergence` as one :class:`TrainingDiverged`.
"""
from __future__ import annotations

import hashlib
import math
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from .. import cuda as _cuda
from .._validation import nonnegative_float, positive_int, real_array
from ..data import PromptBatch
from ..history import History
from .._streams import check_step
from ._checks import flag, real_array_output, real_output
from .data import FixedPrompts, Prompts, as_data
from .metrics import relative_distance
from .objectives import CallableObjective, Objective, as_objective, fused_steps_take_unchecked_indices
from . import native_optim
from .optim import SGD, Adam, AdamW, make_optimizer, rate_factors, unchecked_grad_norm
from .rundir import RunDir

__all__ = ["fit", "FitResult", "TrainingDiverged", "StepInfo"]

# The columns fit writes itself: no metric may take these names.
_COLUMNS = ("step", "loss", "grad_norm", "lr", "time", "eval_loss", "bayes_gap", "dist_to_target")
_F32_MAX = float(np.finfo(np.float32).max)
_F64 = np.dtype(np.float64)


class TrainingDiverged(FloatingPointError):
    """Training met a non-finite value: a loss, gradient or held-out loss, the parameters after an
    update, or a native overflow (that FloatingPointError is the ``__cause__``). Attributes:
    ``step``, ``checkpoint`` (path of the last good checkpoint or None), ``theta`` (the last finite
    parameters: those of ``step``), ``history`` (records so far), ``lr`` (the learning rate of the
    update that led there; None when the initial parameters themselves fail, at step 0)."""

    def __init__(self, message, *, step, checkpoint, theta, history, lr=None):
        super().__init__(message)
        self.step, self.checkpoint, self.theta, self.history = step, checkpoint, theta, history
        self.lr = lr


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
    ``objective.unpack(θ_t)``; a real number or array, or a dict adding one column per key).

    ``optimizer``: an :class:`~lsa_native.train.optim.Optimizer` or a name ("sgd", "adam", "adamw")
    with its keywords passed here (``fit(obj, "adam", lr=1e-3, clip_norm=1.0, ...)``).
    ``data``: a data source (``Prompts``, ``FixedPrompts``, ``GeneratorPrompts``) or a PromptBatch
    (fixed). ``eval_data``: a held-out PromptBatch (``train.heldout(spec, batch=...)``), or a
    ``Prompts``/``FixedPrompts`` source, evaluated on one fixed batch: its first, ``source.at(0)``
    (give a ``Prompts`` source a spec seed the training data does not use); a
    ``CallableObjective``'s ``eval_fn`` receives any ``eval_data`` as given.
    ``metrics``: ``{name: metric(params)}``, or one callable (recorded as "metric").
    ``callbacks``: a callable ``cb(StepInfo)`` or a list of them (None: none); a truthy return
    stops the run.
    ``run_dir``: directory (a str or path) for config.json, history.jsonl (appended as the run
    goes; history.csv when it ends) and checkpoints every
    ``checkpoint_every`` steps (and at the end), the last ``keep_checkpoints`` kept; ``resume``
    continues from its newest checkpoint, bitwise identical to an uninterrupted run. A write that
    fails (a full disk) raises OSError naming the file and leaves no partial file.
    ``progress``: a tqdm bar with the loss (None: only when stderr is a terminal).

    Divergence — a non-finite loss, gradient, held-out loss or updated parameters, or a native
    FloatingPointError (overflow) — raises :class:`TrainingDiverged` with the step, the last good
    checkpoint and a learning-rate hint (at step 0 it says the initial parameters or the data are
    to blame); numpy's floating-point warnings are off during the run, these checks replace them.
    Bad arguments raise TypeError/ValueError naming them before any step. Returns a
    :class:`FitResult`.

    On the host the built-in optimizers (SGD, Adam, AdamW) step as one native call on θ's buffers
    (:mod:`.native_optim`, bitwise ``Optimizer.step``); a subclass's ``step`` runs as written.
    An objective with ``device="cuda"`` and a built-in optimizer (SGD, Adam, AdamW) trains with θ
    and the optimizer state on the GPU (:mod:`.native_optim`: one native step, equal to the
    Python optimizer's to rounding); the gradient norm and the divergence checks are read back
    only for a record, a checkpoint, a callback or the end (the first failure and the parameters
    before it are kept on the device, so the error is the same). When the objective can step on
    device buffers (``bind_device``: LSAObjective's fused step, KernelAttentionObjective,
    MultiHeadLSAObjective's tokens step with merged W^KQ) the model's loss and gradient and the
    held-out loss stay on the device as well, and the host reads one buffer back per record step
    (:func:`_run_device_steps`).
    """
    plan = _setup(objective, optimizer, optimizer_kwargs, steps=steps, data=data, theta0=theta0,
                  eval_data=eval_data, eval_every=eval_every, record_every=record_every,
                  metrics=metrics, target=target, bayes_loss=bayes_loss, callbacks=callbacks,
                  run_dir=run_dir, checkpoint_every=checkpoint_every,
                  keep_checkpoints=keep_checkpoints, resume=resume, progress=progress, desc=desc)
    state = _start(plan)
    history = History.from_rows(state.rows)
    guard = _Divergence(plan, state, history)
    bar = _progress_bar(plan.progress, plan.steps, state.step, plan.desc)
    rec = _Recorder(plan, state, history, guard, bar)
    try:
        # numpy's floating-point warnings are off in the loop: every result is checked and a
        # non-finite one raised as TrainingDiverged (one switch per run, not one per step).
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            arrays = _native_arrays(plan)
            device_step = None if arrays is None else _device_step(plan, arrays)
            if arrays is None:
                t, stopped = _run_steps(plan, state, rec, guard, bar)
            elif device_step is not None:
                t, stopped = _run_device_steps(plan, state, rec, guard, bar, arrays, device_step)
            else:
                t, stopped = _run_native_steps(plan, state, rec, guard, bar, arrays)
            # Final row: the final parameters, on the last step's prompts (no fresh sample).
            loss, _, norm = guard.loss_and_grad(t, state.theta, max(t - 1, 0))
            rec.write(t, state.theta, loss, norm, None)
        if state.run is not None:
            _save(plan, state, t, rec.elapsed())
            state.run.write_table(history)  # the whole run as a table, once finished
    finally:
        rec.close()
        if bar is not None:
            bar.close()
    return FitResult(theta=state.theta, params=plan.objective.unpack(state.theta), history=history,
                     steps=t, stopped=stopped, checkpoint=state.checkpoint)


# ---- setup: every argument checked once ---------------------------------------------------------

@dataclass
class _Plan:
    """fit's arguments after the checks of :func:`_setup`."""

    objective: object
    optimizer: object
    steps: int
    data: object
    step_fn: object  # objective.bind(data): (θ, step) -> (loss, grad), prepared once
    theta: np.ndarray
    rates: np.ndarray | None  # objective.rate_factors: entry i steps at η_t·rates[i]
    eval_batch: object
    eval_every: int | None
    eval_config: object
    record_every: int
    metrics: dict
    target: np.ndarray | None
    bayes_loss: float | None
    callbacks: list
    run_dir: object
    checkpoint_every: int | None
    keep_checkpoints: int
    resume: bool
    progress: bool | None
    desc: str


def _setup(objective, optimizer, optimizer_kwargs, *, steps, data, theta0, eval_data, eval_every,
           record_every, metrics, target, bayes_loss, callbacks, run_dir, checkpoint_every,
           keep_checkpoints, resume, progress, desc) -> _Plan:
    objective = as_objective(objective, theta0)
    optimizer = make_optimizer(optimizer, **optimizer_kwargs)
    steps = positive_int(steps, "steps")
    record_every = positive_int(record_every, "record_every")
    eval_every = _every(eval_every, "eval_every")
    checkpoint_every = _every(checkpoint_every, "checkpoint_every")
    keep_checkpoints = positive_int(keep_checkpoints, "keep_checkpoints")
    resume = flag(resume, "resume")
    progress = None if progress is None else flag(progress, "progress")
    if not isinstance(desc, str):
        raise TypeError(f"desc: expected a string, got {type(desc).__name__}")
    data = as_data(data)
    if data is None and getattr(objective, "needs_data", False):
        raise ValueError(f"data: {type(objective).__name__} trains on prompts; pass data= "
                         "(Prompts(spec, batch=...), FixedPrompts or a PromptBatch)")
    _check_sample_indices(data, steps)
    theta = _initial_theta(objective, theta0)
    rates = getattr(objective, "rate_factors", None)
    if rates is not None:
        rates = rate_factors(rates, theta.size, "objective.rate_factors")
    eval_batch = _eval_batch(eval_data, objective)
    if eval_batch is not None and eval_every is None:
        eval_every = record_every
    if eval_every is not None:
        _check_evaluation(objective, eval_batch)
    dim = _model_dim(objective)
    _check_dim("data", data, dim)
    _check_dim("eval_data", eval_batch, dim)
    if target is not None:
        target = real_array(target, "target")
        relative_distance(theta, target)  # validates the shape now, not at the first record
    if bayes_loss is not None:
        bayes_loss = nonnegative_float(bayes_loss, "bayes_loss")
        if eval_every is None:
            raise ValueError("bayes_loss: the gap is taken on held-out losses; pass eval_data")
    if run_dir is not None and not isinstance(run_dir, (str, os.PathLike)):
        raise TypeError(f"run_dir: expected a directory path (str or os.PathLike), got "
                        f"{type(run_dir).__name__}")
    if run_dir is None and (resume or checkpoint_every is not None):
        raise ValueError("run_dir: required for resume=True or checkpoint_every")
    eval_config = None if run_dir is None or eval_every is None else _eval_config(eval_data, eval_batch)
    step_fn = objective.bind(data) if callable(getattr(objective, "bind", None)) else (
        lambda theta, step: objective.loss_and_grad(theta, step, data))
    return _Plan(objective, optimizer, steps, data, step_fn, theta, rates, eval_batch, eval_every, eval_config,
                 record_every, _metrics(metrics), target, bayes_loss, _callbacks(callbacks),
                 run_dir, checkpoint_every, keep_checkpoints, resume, progress, desc)


def _check_sample_indices(data, steps: int) -> None:
    """The objectives' bound fused steps pass each step's sample index to the spec's native step
    unchecked (:func:`~.objectives.fused_steps_take_unchecked_indices`, the objectives' own test):
    the last step's index is checked here once, against :func:`~lsa_native._streams.check_step`'s
    range (the Philox counter's 32-bit step word)."""
    if fused_steps_take_unchecked_indices(data):
        last = data.sample_index(steps - 1)
        try:
            check_step(last)
        except ValueError as e:
            raise ValueError(f"steps: the last step's sample index (steps − 1) // resample_every "
                             f"is out of the sampler's range ({e})") from e


def _every(value, name):
    return None if value is None else positive_int(value, name)


def _initial_theta(objective, theta0) -> np.ndarray:
    theta = (np.array(objective.theta0, dtype=np.float64) if theta0 is None
             else real_array(theta0, "theta0").copy())
    if theta.shape != np.shape(objective.theta0):
        raise ValueError(f"theta0: expected shape {np.shape(objective.theta0)}, got {theta.shape}")
    return theta


def _eval_batch(eval_data, objective):
    """The held-out batch: a PromptBatch as given, a Prompts/FixedPrompts source's first batch;
    for a CallableObjective (its eval_fn decides) anything."""
    if eval_data is None or isinstance(eval_data, PromptBatch):
        return eval_data
    if isinstance(eval_data, (Prompts, FixedPrompts)):
        return eval_data.at(0)
    if isinstance(objective, CallableObjective):
        return eval_data
    spec = callable(getattr(eval_data, "sample", None))
    raise TypeError(
        "eval_data: expected a held-out PromptBatch (train.heldout(spec, batch=...)) or a Prompts "
        f"or FixedPrompts source, got {type(eval_data).__name__}"
        + (" (a sampler spec, which has no batch size: wrap it as train.heldout(spec, batch=...))"
           if spec else ""))


def _eval_config(eval_data, eval_batch):
    """How a run directory identifies the held-out data."""
    if isinstance(eval_data, Prompts):
        return eval_data.config()
    if isinstance(eval_batch, PromptBatch):
        return FixedPrompts(eval_batch).config()
    return type(eval_data).__name__


def _check_evaluation(objective, eval_batch) -> None:
    """eval_every needs an objective that evaluates and, when it trains on prompts, eval_data."""
    evaluate = getattr(type(objective), "evaluate", None)
    if (not callable(evaluate) or evaluate is Objective.evaluate
            or (isinstance(objective, CallableObjective) and objective.eval_fn is None)):
        hint = " (pass eval_fn= to CallableObjective)" if isinstance(objective, CallableObjective) else ""
        raise TypeError(f"eval_data, eval_every: {type(objective).__name__} has no held-out "
                        f"evaluation{hint}")
    if eval_batch is None and getattr(objective, "needs_data", False):
        raise ValueError("eval_data: required with eval_every (a held-out PromptBatch)")


def _model_dim(objective):
    """d of the prompts the objective trains on (None: no prompts, or not known)."""
    if not getattr(objective, "needs_data", False) or not callable(getattr(objective, "config", None)):
        return None
    return objective.config().get("dim")


def _check_dim(name: str, source, dim) -> None:
    """Prompts of the model's d (E has d + 1 rows), checked before the first step."""
    if isinstance(source, FixedPrompts):
        source = source.prompts
    if isinstance(source, PromptBatch):
        got = np.shape(source.E)[1] - 1
    elif isinstance(source, Prompts):
        got = getattr(source.spec, "dim", None)
    else:
        return
    if dim is not None and got is not None and got != dim:
        raise ValueError(f"{name}: prompts of dimension d = {got}, the model has d = {dim} "
                         f"(E must have d + 1 = {dim + 1} rows)")


def _metrics(metrics) -> dict:
    """{name: metric(params)}: a dict of callables, or one callable recorded as "metric"."""
    if metrics is None:
        return {}
    if callable(metrics) and not isinstance(metrics, Mapping):
        return {"metric": metrics}
    if not isinstance(metrics, Mapping):
        raise TypeError("metrics: expected a dict {name: metric(params)} or one callable, got "
                        f"{type(metrics).__name__}")
    for name, fn in metrics.items():
        if not isinstance(name, str):
            raise TypeError(f"metrics: expected string names, got {name!r}")
        if name in _COLUMNS:
            raise ValueError(f"metrics[{name!r}]: a column fit writes itself ({', '.join(_COLUMNS)}); "
                             "choose another name")
        if not callable(fn):
            raise TypeError(f"metrics[{name!r}]: expected a callable metric(params) -> float")
    return dict(metrics)


def _callbacks(callbacks) -> list:
    if callbacks is None:
        return []
    if callable(callbacks):
        return [callbacks]
    try:
        callbacks = list(callbacks)
    except TypeError:
        raise TypeError("callbacks: expected a callable cb(StepInfo), a list of them or None, got "
                        f"{type(callbacks).__name__}") from None
    for i, cb in enumerate(callbacks):
        if not callable(cb):
            raise TypeError(f"callbacks[{i}]: expected a callable cb(StepInfo), got {type(cb).__name__}")
    return callbacks


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


# ---- start: fresh, or from the run directory's newest checkpoint --------------------------------

@dataclass
class _State:
    """The run as it goes: θ and the optimizer state (updated in place), the step the loop starts
    at, the time and rows of earlier sessions, the run directory and its last checkpoint."""

    theta: np.ndarray
    opt_state: dict
    step: int = 0
    elapsed: float = 0.0
    rows: list = field(default_factory=list)
    run: RunDir | None = None
    checkpoint: object = None


def _sha(a) -> str:
    return hashlib.sha256(np.ascontiguousarray(a, dtype=np.float64).tobytes()).hexdigest()


def _config(plan: _Plan) -> dict:
    """The run directory's config.json (a resumption must match it)."""
    return {"objective": plan.objective.config(), "optimizer": plan.optimizer.config(),
            "data": None if plan.data is None else plan.data.config(),
            "theta0_sha256": _sha(plan.theta),
            "eval": None if plan.eval_every is None else {"every": plan.eval_every,
                                                          "data": plan.eval_config},
            "record_every": plan.record_every, "steps": plan.steps,
            "checkpoint_every": plan.checkpoint_every, "keep_checkpoints": plan.keep_checkpoints}


def _start(plan: _Plan) -> _State:
    state = _State(plan.theta, plan.optimizer.init(plan.theta))
    if plan.run_dir is None:
        return state
    state.run = run = RunDir(plan.run_dir, _config(plan), resume=plan.resume, keep=plan.keep_checkpoints)
    ckpts = run.checkpoints() if plan.resume else []
    if ckpts:
        state.checkpoint = ckpts[-1]
        ck = run.load(state.checkpoint, plan.theta.size)
        if ck["step"] > plan.steps:
            raise ValueError(f"steps: the checkpoint is at step {ck['step']} > steps = {plan.steps}")
        if set(ck["opt_state"]) != set(state.opt_state):
            raise ValueError(f"checkpoint {state.checkpoint}: optimizer state does not match the optimizer")
        state.theta, state.opt_state = ck["theta"], ck["opt_state"]
        state.step, state.elapsed = ck["step"], ck["elapsed"]
        if plan.data is not None:
            plan.data.load_state(ck["data_state"])
    state.rows = run.read_history(state.step) if plan.resume else []
    return state


def _save(plan: _Plan, state: _State, t: int, elapsed: float) -> None:
    state.checkpoint = state.run.save(t, state.theta, state.opt_state,
                                      plan.data.state() if plan.data is not None else {}, elapsed)


# ---- divergence ---------------------------------------------------------------------------------

class _Divergence:
    """Runs the objective and the optimizer for the loop and raises :class:`TrainingDiverged` at
    the first non-finite value they give (checks on results only: arguments were checked once)."""

    def __init__(self, plan: _Plan, state: _State, history: History):
        self.plan, self.state, self.history = plan, state, history
        self._before = None  # θ_t during the update of step t

    def loss_and_grad(self, t: int, theta, data_step: int):
        """(loss, grad, ‖grad‖₂) at θ_t on the prompts of ``data_step`` (grad: a buffer the next
        call may overwrite)."""
        loss, grad = self.call(t, theta, self.plan.step_fn, theta, data_step)
        if type(loss) is not float:
            loss = real_output(loss, f"objective: the loss of {type(self.plan.objective).__name__}")
        if not math.isfinite(loss):
            raise self.error(t, f"non-finite loss ({loss!r})", theta, self._lr_into(t))
        if type(grad) is not np.ndarray or grad.dtype != _F64:
            grad = np.asarray(grad, dtype=np.float64)
        norm = unchecked_grad_norm(grad)  # NaN or inf for a non-finite gradient
        if not math.isfinite(norm) and not np.isfinite(grad).all():
            raise self.error(t, "non-finite gradient", theta, self._lr_into(t))
        return loss, grad, norm

    def evaluate(self, t: int, theta) -> float:
        objective = self.plan.objective
        value = self.call(t, theta, objective.evaluate, theta, self.plan.eval_batch)
        return self.checked_eval(t, value, theta)

    def checked_eval(self, t: int, value, theta) -> float:
        """A held-out loss checked (``theta``: θ_t, or a callable giving it for the error)."""
        value = real_output(value, f"eval_data: the held-out loss of {type(self.plan.objective).__name__}")
        if not math.isfinite(value):
            theta = theta() if callable(theta) else theta
            raise self.error(t, f"non-finite held-out loss ({value!r})", theta, self._lr_into(t))
        return value

    def update(self, t: int, theta, grad, norm: float, opt_state) -> dict:
        """The optimizer step θ_t → θ_{t+1} in place; non-finite θ_{t+1} is divergence at step t
        (θ_t, kept in a buffer of the run, is the error's last finite θ)."""
        before = self._before
        if before is None or before.shape != theta.shape:
            before = self._before = np.empty_like(theta)
        np.copyto(before, theta)
        # rates only when set: an Optimizer subclass may override step without them
        rates = {} if self.plan.rates is None else {"rates": self.plan.rates}
        info = self.plan.optimizer.step(theta, grad, opt_state, norm=norm, **rates)
        if not np.isfinite(theta).all():
            raise self.error(t, "the update gave non-finite parameters", before, info["lr"])
        return info

    def call(self, t: int, theta, fn, *args):
        """fn(*args) at θ_t; a native overflow (FloatingPointError, or a ValueError because θ has
        grown past the float32 range a float32 model computes in) is divergence at step t."""
        try:
            return fn(*args)
        except (FloatingPointError, ValueError) as e:
            err = self._diverged(t, theta, e)
            if err is not None:
                raise err from e
            raise

    def _diverged(self, t: int, theta, e: Exception) -> TrainingDiverged | None:
        """The TrainingDiverged at step t that ``e``, raised by a call at θ_t, means (see
        :meth:`call`; the caller raises it from ``e``), or None when ``e`` is to be re-raised as
        it is (already a TrainingDiverged, or a ValueError that is not θ past float32)."""
        if isinstance(e, TrainingDiverged):
            return None
        if isinstance(e, FloatingPointError):
            return self.error(t, str(e), theta, self._lr_into(t))
        if t > 0 and not np.all(np.abs(theta) <= _F32_MAX):  # θ_0 that large is bad input
            return self.error(t, f"parameters beyond the float32 range ({e})", theta,
                              self._lr_into(t))
        return None

    def _lr_into(self, t: int) -> float | None:
        """The learning rate of the update that gave θ_t (None for θ_0: none has been made)."""
        return None if t == 0 else self.plan.optimizer.learning_rate(t - 1)

    def error(self, t: int, what: str, theta, lr: float | None) -> TrainingDiverged:
        """TrainingDiverged at step t, ``theta`` the last finite parameters, ``lr`` that of the
        update that led there (None: θ_0 itself fails)."""
        if lr is None:
            message = (f"training diverged at step {t}: {what}; at the initial parameters, before "
                       "any update, so the learning rate plays no part: check theta0 and the data "
                       "(rescale the inputs, or compute in float64: dtype=np.float64)")
        else:
            message = (f"training diverged at step {t}: {what}; {self._where()}. "
                       f"Hint: {self._hint(lr)}.")
        return TrainingDiverged(message, step=t, checkpoint=self.state.checkpoint,
                                theta=np.array(theta), history=self.history, lr=lr)

    def _where(self) -> str:
        if self.state.checkpoint is not None:
            return f"last good checkpoint: {self.state.checkpoint}"
        return "no checkpoint (pass run_dir= and checkpoint_every= to keep one)"

    def _hint(self, lr: float) -> str:
        optimizer = self.plan.optimizer
        fixes = [f"lower the learning rate (the update used lr = {lr:.3g}; try {lr / 10:.3g} or less)"]
        if optimizer.clip_norm is None:
            fixes.append("clip the gradient (clip_norm=)")
        if getattr(optimizer, "eps", None) == 0:
            fixes.append("use eps > 0 (eps = 0 divides by zero where a gradient is zero)")
        return ", ".join(fixes) + ", or compute in float64 (dtype=np.float64)"


# ---- records ------------------------------------------------------------------------------------

class _Recorder:
    """The history rows (see :func:`fit`): kept in ``history``, appended to history.jsonl."""

    def __init__(self, plan: _Plan, state: _State, history: History, guard: _Divergence, bar):
        self.plan, self.history, self.guard, self.bar = plan, history, guard, bar
        self.shown, self.shown_at = None, -math.inf  # the bar's loss and when it was set
        self.log = state.run.open_history() if state.run is not None else None
        self.elapsed0, self.t0 = state.elapsed, time.perf_counter()

    def elapsed(self) -> float:
        """Seconds of training, across resumptions."""
        return self.elapsed0 + time.perf_counter() - self.t0

    def due(self, t: int) -> bool:
        every = self.plan.eval_every
        return t % self.plan.record_every == 0 or (every is not None and t % every == 0)

    def evaluates(self, t: int) -> bool:
        every = self.plan.eval_every
        return every is not None and (t % every == 0 or t == self.plan.steps)

    def write(self, t: int, theta, loss: float, norm: float, lr, eval_loss=None) -> dict:
        """The row of step t; ``eval_loss``: its held-out loss when computed already (on the
        device), else evaluated here at ``theta`` (host θ; a callable gives it when needed)."""
        plan = self.plan
        row = {"step": t, "loss": loss, "grad_norm": norm, "lr": lr, "time": self.elapsed()}
        if self.evaluates(t):
            if eval_loss is None:
                row["eval_loss"] = self.guard.evaluate(t, theta() if callable(theta) else theta)
            else:
                row["eval_loss"] = self.guard.checked_eval(t, eval_loss, theta)
            if plan.bayes_loss is not None:
                row["bayes_gap"] = row["eval_loss"] - plan.bayes_loss
        if (plan.target is not None or plan.metrics) and callable(theta):
            theta = theta()
        if plan.target is not None:
            row["dist_to_target"] = self.guard.call(t, theta, relative_distance, theta, plan.target)
        if plan.metrics:
            row.update(_metric_columns(plan.metrics, plan.objective.unpack(theta)))
        self.history.append_row(row)
        if self.log is not None:
            self.log.append(row)
        if self.bar is not None:
            self._show(loss, row["time"])
        return row

    def _show(self, loss: float, now: float) -> None:
        """The bar's loss, set at most once per redraw interval of the bar (tqdm draws no more
        often; formatting the postfix at every step cost as much as the rest of the record)."""
        self.shown = loss
        if now - self.shown_at >= self.bar.mininterval:
            self.bar.set_postfix(loss=f"{loss:.4g}", refresh=False)
            self.shown_at = now

    def close(self) -> None:
        if self.bar is not None and self.shown is not None:  # the last loss, whatever its time
            self.bar.set_postfix(loss=f"{self.shown:.4g}", refresh=False)
        if self.log is not None:
            self.log.close()


def _metric_columns(metrics: dict, params) -> dict:
    """{column: value} of every metric at ``params`` (a dict-valued metric: one column per key);
    a value that is not a real number or array is a TypeError naming the metric."""
    out = {}
    for name, fn in metrics.items():
        value = fn(params)
        several = isinstance(value, Mapping)
        for key, v in (value.items() if several else [(name, value)]):
            label = f"metrics[{name!r}]" + (f"[{key!r}]" if several else "")
            if several and (not isinstance(key, str) or key in _COLUMNS):
                raise ValueError(f"{label}: expected a string key that is not a column fit writes "
                                 f"itself ({', '.join(_COLUMNS)})")
            if isinstance(v, (list, tuple)) or (isinstance(v, np.ndarray) and v.ndim > 0):
                out[key] = real_array_output(v, label).tolist()
            else:
                out[key] = real_output(v, label)
    return out


# ---- the loop -----------------------------------------------------------------------------------

def _run_steps(plan: _Plan, state: _State, rec: _Recorder, guard: _Divergence, bar):
    """Steps state.step, …, plan.steps − 1 (or until a callback stops the run); returns
    (the step reached, whether a callback stopped the run). The built-in optimizers (SGD, Adam,
    AdamW, not subclasses) step as one native call on host buffers (:class:`_HostOptimizer`,
    bitwise ``Optimizer.step``); any other optimizer through its ``step``."""
    host = _HostOptimizer.of(plan, state)
    theta = state.theta if host is None else host.theta
    opt_state, optimizer = state.opt_state, plan.optimizer
    callbacks, objective, every = plan.callbacks, plan.objective, plan.checkpoint_every
    saves = state.run is not None and every is not None
    t = state.step
    while t < plan.steps:
        loss, grad, norm = guard.loss_and_grad(t, theta, t)
        # Records of step t describe θ_t: written before the update (the native update writes
        # θ_{t+1} into the other buffer, so θ_t is still there for the record after it).
        row = None
        if host is None:
            if rec.due(t):
                row = rec.write(t, theta, loss, norm, optimizer.learning_rate(opt_state["t"]))
            lr = guard.update(t, theta, grad, norm, opt_state)["lr"]
        else:
            lr = host.step(t, grad, norm)
            if rec.due(t):
                row = rec.write(t, theta, loss, norm, lr)
            if host.failed():
                raise guard.error(t, "the update gave non-finite parameters", theta, lr)
            theta = host.theta
        t += 1
        if bar is not None:
            bar.update(1)
        if saves and t % every == 0 and t < plan.steps:
            if host is not None:
                host.sync(state)
            _save(plan, state, t, rec.elapsed())
        if callbacks:
            if _notify(callbacks, StepInfo(t - 1, theta, loss, norm, lr, row, objective)):
                if host is not None:
                    host.sync(state)
                return t, True
    if host is not None:
        host.sync(state)
    return t, False


class _HostOptimizer:
    """The optimizer step of the host loop as one native call (:class:`.native_optim.
    NativeOptimizer` on host buffers, given numpy's gradient norm: bitwise ``Optimizer.step``, see
    tests/test_native_optim.py): no Python array arithmetic per step. θ is double-buffered, so
    θ_t survives the update for its record and for the error of a non-finite θ_{t+1} (the native
    step records it in the status instead of raising)."""

    def __init__(self, plan: _Plan, state: _State):
        self.native = native_optim.NativeOptimizer(plan.optimizer, state.theta,
                                                   opt_state=state.opt_state, rates=plan.rates)
        self.grad, self.status = self.native.grad, self.native.status_buffer

    @classmethod
    def of(cls, plan: _Plan, state: _State):
        """The native step for a built-in optimizer (a subclass may override ``step``) on a flat
        θ, or None."""
        native = type(plan.optimizer) in (SGD, Adam, AdamW) and state.theta.ndim == 1
        return cls(plan, state) if native else None

    @property
    def theta(self) -> np.ndarray:
        """θ_t: the buffer the next step reads."""
        return self.native.current

    def step(self, t: int, grad, norm: float) -> float:
        """θ_t → θ_{t+1} from ``grad`` (‖grad‖₂ = ``norm``, finite); returns η_t."""
        np.copyto(self.grad, grad)
        return self.native.step(t, norm=norm)

    def failed(self) -> bool:
        """Whether the last step gave non-finite parameters (θ_t kept in its buffer)."""
        return self.status[1] != native_optim.OK

    def sync(self, state: _State) -> None:
        """θ and the optimizer state into ``state`` (host copies: a checkpoint's, the result's)."""
        state.theta, state.opt_state = self.native.host_state()


def _notify(callbacks: list, info: StepInfo) -> bool:
    """Every callback sees the step (θ read-only meanwhile); True when one asks to stop."""
    info.theta.flags.writeable = False
    try:
        return any([bool(cb(info)) for cb in callbacks])
    finally:
        info.theta.flags.writeable = True


# ---- the loop with θ and the optimizer state where the model runs (a GPU) -----------------------

def _native_arrays(plan: _Plan):
    """Where θ and the optimizer state live during the loop: on the GPU (the native optimizer
    step, :mod:`.native_optim`) for an objective with ``device == "cuda"`` and one of the built-in
    optimizers; None (the Python optimizers on host arrays) otherwise. Without a usable GPU the
    host loop runs, so that the objective's first step reports the device error itself (the
    dispatcher's "no CUDA device …" / "no CUDA kernels …"), not the first allocation."""
    if (getattr(plan.objective, "device", None) == "cuda"
            and type(plan.optimizer) in (SGD, Adam, AdamW) and _cuda.available()):
        return native_optim.CUDA
    return None


def _run_native_steps(plan: _Plan, state: _State, rec: _Recorder, guard: _Divergence, bar, arrays):
    """:func:`_run_steps` with θ and the optimizer state in ``arrays``' buffers and the optimizer
    step native (no wait): the gradient norm and the divergence checks are read back only for a
    record, a checkpoint, a callback or the end (the status record keeps the first failure and
    the parameters before it). The objective's step still takes host θ and gives a host loss and
    gradient (the native model calls take host parameters and wait for their loss), so θ comes
    down and the gradient goes up each step: those two small copies are all that is left to
    remove once the model calls take device parameters."""
    native = native_optim.NativeOptimizer(plan.optimizer, state.theta, arrays,
                                          opt_state=state.opt_state, rates=plan.rates)
    first, t = state.step, state.step
    on_host = arrays is native_optim.HOST

    def check(t_now):
        """The status record: a recorded failure becomes TrainingDiverged; returns the norm."""
        norm, code, bad = native.status()
        if code != native_optim.OK:
            before = arrays.to_host(native.theta_read_at(bad - first))
            if code == native_optim.BAD_GRADIENT:
                raise guard.error(bad, "non-finite gradient", before, guard._lr_into(bad))
            raise guard.error(bad, "the update gave non-finite parameters", before,
                              plan.optimizer.learning_rate(bad))
        return norm

    def sync_state():
        state.theta, state.opt_state = native.host_state()

    while t < plan.steps:
        theta = native.current if on_host else arrays.to_host(native.current)
        loss, grad = guard.call(t, theta, plan.step_fn, theta, t)
        if type(loss) is not float:
            loss = real_output(loss, f"objective: the loss of {type(plan.objective).__name__}")
        if not math.isfinite(loss):
            check(t)  # an earlier recorded failure is the cause
            raise guard.error(t, f"non-finite loss ({loss!r})", theta, guard._lr_into(t))
        arrays.write(native.grad, grad)
        lr = native.step(t)
        t += 1
        if bar is not None:
            bar.update(1)
        every = plan.checkpoint_every
        save = state.run is not None and every is not None and t % every == 0 and t < plan.steps
        row = None
        if rec.due(t - 1) or save or plan.callbacks or t == plan.steps:
            norm = check(t)
            if rec.due(t - 1):  # the record of step t − 1 describes θ_{t−1}, its input
                row = rec.write(t - 1, theta, loss, norm, lr)
            if save:
                sync_state()
                _save(plan, state, t, rec.elapsed())
            if plan.callbacks:
                after = arrays.to_host(native.current)
                if _notify(plan.callbacks, StepInfo(t - 1, after, loss, norm, lr, row, plan.objective)):
                    sync_state()
                    return t, True
    check(t)
    sync_state()
    return t, False


# ---- the loop with the model's steps on the device too ------------------------------------------

_READOUT_HEAD = 4  # the readout buffer: [status record (3) | held-out loss | the losses of a span]
_SPAN = 4096       # losses kept between two readbacks at most (a readback when the span fills)


def _device_step(plan: _Plan, arrays):
    """``objective.bind_device(data, arrays)`` (the step on device θ, gradient and loss buffers),
    or None when the objective has none for this data (the host-θ native loop runs)."""
    bind = getattr(plan.objective, "bind_device", None)
    return bind(plan.data, arrays) if callable(bind) else None


def _device_evaluation(plan: _Plan, arrays, dtype):
    """The held-out loss on the device for θ buffers of ``dtype``, or None (evaluated on the host
    at the records: a held-out batch the objective cannot evaluate on the device, or another dtype
    than the model's or float64)."""
    make = getattr(plan.objective, "device_evaluation", None)
    if plan.eval_every is None or not callable(make) or not isinstance(plan.eval_batch, PromptBatch):
        return None
    evaluate = make(plan.eval_batch, arrays)
    return evaluate if evaluate is not None and evaluate.dtype in (dtype, _F64) else None


def _run_device_steps(plan: _Plan, state: _State, rec: _Recorder, guard: _Divergence, bar, arrays,
                      device_step):
    """:func:`_run_native_steps` with the model's step on the device as well: θ, the gradient,
    the optimizer state and each step's loss stay in device memory (``device_step`` writes the
    loss into a slot of a readout buffer whose head is the optimizer's status record), and the
    held-out loss is computed there too. The host reads the readout buffer back — one copy — only
    at a record, a checkpoint, a callback, the end, or when a span of losses fills. The optimizer
    step reads the step's loss too: a non-finite loss, gradient or update stops the optimizer
    there (θ of that step kept), and the readback raises it as :class:`TrainingDiverged` at its
    step, the same error as the host loop's."""
    dtype, layout = device_step.dtype, _Layout(device_step, state.theta.size, plan.rates)
    first, t = state.step, state.step
    span = max(1, min(_SPAN, plan.steps - first))
    readout = arrays.array(np.concatenate([[math.nan, native_optim.OK, -1.0, math.nan],
                                           np.full(span, math.nan)]))
    native = native_optim.NativeOptimizer(plan.optimizer, layout.scatter(state.theta), arrays,
                                          grad_dtype=dtype, model=dtype != _F64,
                                          opt_state=layout.scatter_state(state.opt_state),
                                          status=arrays.piece(readout, 0, (3,)), rates=layout.rates)
    theta_of = lambda buffer: layout.gather(arrays.to_host(buffer))  # noqa: E731
    slots = [arrays.piece(readout, _READOUT_HEAD + i, (1,)) for i in range(span)]
    eval_slot = arrays.piece(readout, 3, (1,))
    evaluate = _device_evaluation(plan, arrays, dtype)
    model = (lambda: native.model) if native.model is not None else (lambda: native.current)
    since = t  # the first step whose loss sits in the readout buffer

    def read(t_now):
        """The readback: (the buffer, losses of steps since .. t_now − 1, status norm), divergence
        raised."""
        values = arrays.to_host(readout)
        norm, code, bad = float(values[0]), int(values[1]), int(values[2])
        losses = values[_READOUT_HEAD:_READOUT_HEAD + t_now - since]
        if code == native_optim.OK:
            return values, losses, norm
        # The optimizer stopped at step `bad` (a step after it does nothing): θ_bad survives.
        before = theta_of(native.theta_read_at(bad - first))
        if code == native_optim.BAD_LOSS:
            loss = float(values[_READOUT_HEAD + bad - since])
            raise guard.error(bad, f"non-finite loss ({loss!r})", before, guard._lr_into(bad))
        if code == native_optim.BAD_GRADIENT:
            raise guard.error(bad, "non-finite gradient", before, guard._lr_into(bad))
        raise guard.error(bad, "the update gave non-finite parameters", before,
                          plan.optimizer.learning_rate(bad))

    def sync_state():
        theta, opt_state = native.host_state()
        state.theta, state.opt_state = layout.gather(theta), layout.gather_state(opt_state)

    while t < plan.steps:
        theta_t = native.current
        device_step(model(), t, native.grad, slots[t - since])
        record = rec.due(t)
        if record and evaluate is not None and rec.evaluates(t):
            evaluate(model() if evaluate.dtype == dtype else theta_t, eval_slot)
        lr = native.step(t, loss=slots[t - since])
        t += 1
        if bar is not None:
            bar.update(1)
        every = plan.checkpoint_every
        save = state.run is not None and every is not None and t % every == 0 and t < plan.steps
        if not (record or save or plan.callbacks or t == plan.steps or t - since == span):
            continue
        values, losses, norm = read(t)
        since, loss = t, float(losses[-1])
        row = None
        if record:  # the record of step t − 1 describes θ_{t−1}, its input
            eval_loss = float(values[3]) if evaluate is not None and rec.evaluates(t - 1) else None
            row = rec.write(t - 1, lambda: theta_of(theta_t), loss, norm, lr, eval_loss=eval_loss)
        if save:
            sync_state()
            _save(plan, state, t, rec.elapsed())
        if plan.callbacks:
            after = theta_of(native.current)
            if _notify(plan.callbacks, StepInfo(t - 1, after, loss, norm, lr, row, plan.objective)):
                sync_state()
                return t, True
    sync_state()
    return t, False


class _Layout:
    """Where θ's entries sit in the flat buffer the device step reads (``device_step.positions``
    into a buffer of ``device_step.size``; absent: θ itself): the other entries are fixed zeros
    (a sparse V's), rate factor 0 for the optimizer. ``rates``: θ's rate factors (None: all 1),
    scattered into the buffer's. Checkpoints and records keep θ's own order."""

    def __init__(self, device_step, size: int, rates=None):
        self.positions = getattr(device_step, "positions", None)
        self.size = getattr(device_step, "size", size)
        self.rates = rates
        if self.positions is not None:
            self.rates = self.scatter(np.ones(size) if rates is None else rates)

    def scatter(self, values):
        if self.positions is None:
            return values
        full = np.zeros(self.size)
        full[self.positions] = values
        return full

    def gather(self, values):
        return values if self.positions is None else values[self.positions]

    def scatter_state(self, opt_state: dict) -> dict:
        return {k: v if k == "t" else self.scatter(v) for k, v in opt_state.items()}

    def gather_state(self, opt_state: dict) -> dict:
        return {k: v if k == "t" else self.gather(v) for k, v in opt_state.items()}
