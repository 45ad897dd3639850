"""Objectives for :func:`~lsa_native.train.fit`: a model's loss and gradient on a flat parameter
vector θ (float64).

The protocol (duck-typed; :class:`Objective` is the base):

- ``theta0``: the initial θ [P] (float64);
- ``loss_and_grad(theta, step, data) -> (loss, grad [P])``: the training loss at step ``step``
  on the prompts the data source gives for that step (``data`` is None for exact objectives);
- ``evaluate(theta, batch) -> float``: the loss on a held-out :class:`~lsa_native.data.PromptBatch`
  (exact objectives ignore ``batch``);
- ``unpack(theta)``: the model's parameters (what metrics and callbacks receive);
- ``config() -> dict``: JSON-able identity (run directories refuse a checkpoint of another one;
  it includes whatever sets ``rate_factors``);
- ``needs_data``: whether ``fit`` must be given ``data=``;
- ``rate_factors`` (optional; None: all 1): per-entry rate factors [P] > 0 — ``fit``'s optimizer
  steps entry i at η_t·rate_factors[i] (a parameter group with its own learning rate);
- ``bind(data) -> step_fn`` (optional; the base gives one): ``step_fn(theta, step) -> (loss,
  grad)`` for a training loop on ``data``, with everything that does not change between steps
  checked and prepared once (``fit`` calls it once per run). ``grad`` may be a buffer the next
  call overwrites; the step may leave numpy's overflow warning to its caller (``fit`` turns it
  off for the run and checks every result).

**Loss convention (one for the whole package): ½ · mean squared error of the prediction of
y_q** — ZFB (3.7) L = (1/(2B)) Σ_b (ŷ_b − y_q,b)² for LSA, its expectation ZFB (3.8) for the
population loss, and for kernel attention (1/(2B)) Σ_b (TF_b + y_q,b)² = ½ × CCS (5) (CCS writes
(5) without the ½; TF predicts −y_q, CCS (4)).
"""
from __future__ import annotations

import hashlib
import inspect
import math

import numpy as np

from .. import kernel_attention as ka
from .. import _core, cuda, lsa, multihead, population
from ..data import check_covariance
from .._validation import as_array, check_finite_result, positive_float, positive_int, real_array
from ..sampling.random import check_step
from ._checks import real_array_output, real_output
from . import native_optim
from .data import Prompts

__all__ = ["Objective", "LSAObjective", "MultiHeadLSAObjective", "KernelAttentionObjective", "PopulationObjective",
           "CallableObjective", "as_objective"]


def _sha(*arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a, dtype=np.float64)
        h.update(str(a.shape).encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _float_dtype(dtype):
    if dtype is None:
        return None
    dt = np.dtype(dtype)
    if dt not in (np.float32, np.float64):
        raise TypeError(f"dtype: expected float32, float64 or None, got {dt}")
    return dt


def _check_fused_route(method: str, device: str) -> None:
    """The fused step's ``method`` and ``device`` of the LSA objectives (ValueError naming them)."""
    if method not in ("tokens", "wishart", "auto"):
        raise ValueError(f"method: expected 'tokens', 'wishart' or 'auto', got {method!r}")
    if device not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device: expected 'auto', 'cpu' or 'cuda', got {device!r}")


# The spec methods making a native fused step: their steps take the sample index unchecked (the
# caller checks its range; fit: once, at the start, by fused_steps_take_unchecked_indices).
_FUSED_STEP_MAKERS = ("fused_step", "multihead_fused_step")


def spec_fused_step(data, name: str):
    """The spec's maker of a native fused step, ``name`` one of ``_FUSED_STEP_MAKERS``, when
    ``data`` is a :class:`~lsa_native.train.data.Prompts` whose spec has it (duck typing: the
    native ``sampling.LinearPrompts``, or any spec with that method), else None — the objectives'
    test of whether this data source's steps can go to the native fused step."""
    make = getattr(data.spec, name, None) if isinstance(data, Prompts) else None
    return make if callable(make) else None


def fused_steps_take_unchecked_indices(data) -> bool:
    """Whether an objective's bound step on ``data`` may pass each step's sample index to a native
    fused step unchecked (:func:`spec_fused_step` for any maker): ``fit`` then checks the last
    step's index once, at the start."""
    return any(spec_fused_step(data, name) is not None for name in _FUSED_STEP_MAKERS)


class _CastBatch:
    """(E, y_q) of the step's batch in ``dtype`` (None: as they are), cast once per batch: a data
    source hands the same batch object while it is reused, so the cast is kept for it (keyed on
    the object: a source must not refill a batch in place, see :mod:`.data`)."""

    def __init__(self):
        self._last = (None, None, None)

    def __call__(self, batch, dtype):
        if dtype is None or batch.E.dtype == dtype:
            return batch.E, batch.y_q
        if self._last[0] is not batch or self._last[1] != dtype:
            self._last = (None, None, None)  # free the old cast first
            self._last = (batch, dtype, (batch.E.astype(dtype), batch.y_q))
        return self._last[2]


class _Pieces:
    """Consecutive pieces of ``shapes`` of flat buffers of ``arrays`` (:mod:`.native_optim`'s
    backends: the parameter or gradient views of a host or device step), made once per buffer:
    a run's buffers (θ double-buffered, the gradient) live as long as the run. At most ``keep``
    buffers are remembered (a caller passing a new θ at every call does not grow the cache)."""

    def __init__(self, arrays, shapes, keep: int = 4):
        self.arrays, self.shapes, self.keep, self._made = arrays, shapes, keep, {}

    def __call__(self, buffer) -> tuple:
        made = self._made.get(id(buffer))
        if made is None or made[0] is not buffer:
            if len(self._made) >= self.keep:
                self._made.clear()
            views, k = [], 0
            for shape in self.shapes:
                views.append(self.arrays.piece(buffer, k, shape))
                k += int(np.prod(shape))
            made = self._made[id(buffer)] = (buffer, tuple(views))  # the buffer kept: its id stays its own
        return made[1]


class _HostParams:
    """θ [P] (float64) as the parameter arrays of a native host step computing in ``dtype``, and
    the step's gradient buffers, prepared once per run (the bound steps of :class:`LSAObjective`
    and :class:`MultiHeadLSAObjective`). ``parts``: {name: shape} of θ's consecutive pieces.

    float64: the parameters are views of θ itself (made once per θ buffer: ``fit`` double-buffers
    θ) and the native call writes its gradient in place into :attr:`grad`'s views; float32: θ is
    cast into one buffer (its range checked in one reduction, the error of the unbound step —
    "W_pv: values overflow float32" — only when that fails), the gradient written into one
    float32 buffer and copied into :attr:`grad`. No allocation per step."""

    def __init__(self, parts: dict, dtype):
        shapes = list(parts.values())
        size = sum(int(np.prod(s)) for s in shapes)
        self.names, self.dtype = list(parts), np.dtype(dtype)
        self.grad = np.empty(size)  # the float64 gradient the step returns
        wide = self.dtype == np.float64
        self._cast = None if wide else np.empty(size, self.dtype)
        self._low = self.grad if wide else np.empty(size, self.dtype)
        self._pieces = _Pieces(native_optim.HOST, shapes)
        self.grads = self._pieces(self._low)  # written by the native call
        self._cast_views = None if wide else self._pieces(self._cast)

    def params(self, theta) -> tuple:
        """The parameter arrays at θ, in ``dtype`` (ValueError naming the piece that overflows)."""
        W = self._cast
        if W is None:
            return self._pieces(theta)
        np.copyto(W, theta, casting="unsafe")
        # θ is finite (fit checks it), so W is unless θ is past float32's range; a finite sum
        # says so in one pass (a non-finite one: an entry overflowed). Summed in float64, so that
        # no finite float32 W overflows it (a float32 sum, or W·W, would: a spurious warning, or a
        # FloatingPointError under np.errstate(over="raise"), on valid parameters).
        if not math.isfinite(np.add.reduce(W, dtype=np.float64)) and not np.isfinite(W).all():
            for name, piece in zip(self.names, self._pieces(theta)):
                as_array(piece, piece.shape, self.dtype, name)
        return self._cast_views

    def gradient(self) -> np.ndarray:
        """The step's gradient as float64 [P] (float32: copied from the native call's buffer)."""
        if self._low is not self.grad:
            np.copyto(self.grad, self._low)
        return self.grad


def _device_evaluation(arrays, batch, dtype, shapes, run):
    """``evaluate(theta, loss)`` on the device: the held-out batch uploaded once in ``dtype``,
    ``run(E, y_q, params, grads, loss)`` queues the held-out loss into device ``loss`` for the flat
    parameter buffer ``theta`` (in ``dtype``), gradients into a scratch buffer."""
    E, y_q = arrays.array(batch.E, dtype), arrays.array(batch.y_q, dtype)
    pieces = _Pieces(arrays, shapes)
    scratch = arrays.array(np.zeros(sum(int(np.prod(s)) for s in shapes)), dtype)

    def evaluate(theta, loss):
        run(E, y_q, pieces(theta), pieces(scratch), loss)

    evaluate.dtype = np.dtype(dtype)
    return evaluate


def _separate_kq(W_kq, d_kq):
    """The separate parametrization's step around a merged one, on one side (host or device):
    ``call(model, params, t, grads, *rest)`` with params (W_pv, W_k, W_q) and grads (dW_pv,
    dW_k, dW_q) merges W^KQ_h = W^K_hᵀ W^Q_h into the buffer ``W_kq``, runs the merged
    ``model(W_pv, W_kq, t, dW_pv, d_kq, *rest)`` and chains ``d_kq`` = ∂ℓ/∂W^KQ_h into
    dW^K_h = W^Q_h dW^KQ_hᵀ, dW^Q_h = W^K_h dW^KQ_h; returns the model's result.

    The first call goes through the public :func:`~lsa_native.multihead.merge_kq` /
    :func:`~lsa_native.multihead.chain_kq` (every operand check: one side, dtypes, no aliasing);
    once one has passed, the calls (a run's buffers: the same shapes, dtype and side) go to the
    native entry points directly, whose validate() still checks shapes, dtypes and layouts — as
    :meth:`LSAObjective.bind`'s step calls the native step its ``fused_step`` checked once."""
    merge_native, chain_native = _core.multihead_merge_kq, _core.multihead_chain_kq
    fast = (lambda W_k, W_q: merge_native(W_k, W_q, W_kq),
            lambda W_k, W_q, d_k, d_q: chain_native(W_k, W_q, d_kq, d_k, d_q))
    kq = [lambda W_k, W_q: multihead.merge_kq(W_k, W_q, out=W_kq),
          lambda W_k, W_q, d_k, d_q: multihead.chain_kq(W_k, W_q, d_kq, out=(d_k, d_q))]

    def call(model, params, t, grads, *rest):
        (W_pv, W_k, W_q), (d_pv, d_k, d_q) = params, grads
        merge, chain = kq
        merge(W_k, W_q)
        result = model(W_pv, W_kq, t, d_pv, d_kq, *rest)
        chain(W_k, W_q, d_k, d_q)
        kq[:] = fast  # checked once
        return result

    return call


class Objective:
    """Base of the objectives; see the module docstring for the protocol."""

    needs_data = True
    theta0: np.ndarray
    rate_factors: np.ndarray | None = None

    def loss_and_grad(self, theta, step: int, data):  # pragma: no cover - abstract
        raise NotImplementedError

    def evaluate(self, theta, batch) -> float:
        raise TypeError(f"{type(self).__name__} has no held-out evaluation")

    def bind(self, data):
        """``step_fn(theta, step) -> (loss, grad)`` on ``data`` (see the module docstring)."""
        loss_and_grad = self.loss_and_grad
        return lambda theta, step: loss_and_grad(theta, step, data)

    def unpack(self, theta):
        return theta

    def config(self) -> dict:
        return {"type": type(self).__name__}


class _WeightPair:
    """θ = (Vec W^PV, Vec W^KQ) of a one-layer LSA, both [d+1, d+1]."""

    def _init_pair(self, W_pv, W_kq):
        W_pv = real_array(W_pv, "W_pv").copy()
        W_kq = real_array(W_kq, "W_kq").copy()
        if W_pv.ndim != 2 or W_pv.shape[0] != W_pv.shape[1] or W_pv.shape[0] < 2:
            raise ValueError(f"W_pv: expected shape (d+1, d+1) with d >= 1, got {W_pv.shape}")
        if W_kq.shape != W_pv.shape:
            raise ValueError(f"W_kq: expected shape {W_pv.shape}, got {W_kq.shape}")
        self.n = W_pv.shape[0]
        self.theta0 = np.concatenate([W_pv.ravel(), W_kq.ravel()])

    def unpack(self, theta):
        """(W_pv, W_kq) as views of θ."""
        k = self.n * self.n
        return theta[:k].reshape(self.n, self.n), theta[k:].reshape(self.n, self.n)


class LSAObjective(_WeightPair, Objective):
    """One-layer LSA on sampled prompts, L = (1/(2B)) Σ (ŷ − y_q)² [ZFB (3.7)], θ = (W^PV, W^KQ).

    With a :class:`~lsa_native.train.data.Prompts` source whose spec has ``lsa_loss_and_grad``
    (the native ``sampling.LinearPrompts``), the fused path runs (no prompts materialized;
    ``method`` "tokens", "wishart" or "auto", see ``LinearPrompts.lsa_loss_and_grad``); otherwise ``lsa.loss_and_grad`` on the step's batch, its
    E cast to ``dtype`` (None: the batch's dtype).
    ``device``: where the fused step runs, "cpu", "cuda" (prompts generated on the GPU; ``fit``
    then keeps θ and the optimizer state on the GPU, see ``fit``) or "auto" (= "cpu" for host
    parameters); the non-fused path and ``evaluate`` run on the CPU.
    """

    def __init__(self, W_pv, W_kq, *, dtype=None, method: str = "tokens", fused: bool = True,
                 device: str = "auto"):
        self._init_pair(W_pv, W_kq)
        self.dtype = _float_dtype(dtype)
        _check_fused_route(method, device)
        self.method, self.fused, self.device = method, bool(fused), device
        self._cast = _CastBatch()

    def _fused(self, data) -> bool:
        return (self.fused and isinstance(data, Prompts)
                and callable(getattr(data.spec, "lsa_loss_and_grad", None)))

    def loss_and_grad(self, theta, step, data):
        W_pv, W_kq = self.unpack(theta)
        if self._fused(data):
            where = {} if self.device == "auto" else {"device": self.device}  # specs without device=
            loss, g_pv, g_kq = data.spec.lsa_loss_and_grad(
                W_pv, W_kq, batch=data.batch, step=data.sample_index(step), method=self.method,
                dtype=self.dtype or data.dtype, **where)
        else:
            E, y_q = self._cast(data.at(step), self.dtype)
            loss, g_pv, g_kq = lsa.loss_and_grad(E, y_q, W_pv, W_kq)
        return loss, np.concatenate([g_pv.ravel(), g_kq.ravel()])

    def bind(self, data):
        """The fused step with its arguments checked once (``spec.fused_step``, e.g.
        :meth:`~lsa_native.sampling.LinearPrompts.fused_step`): per step only θ's cast into a
        preallocated buffer and the native call (float64: none, it reads θ and writes the gradient
        buffer in place; :class:`_HostParams`); otherwise the base's step. The fused step takes
        each step's sample index unchecked: its range ([0, 2^32), see ``fused_step``) is the
        caller's to check (``fit`` checks the last step's once, at the start)."""
        if not (self._fused(data) and spec_fused_step(data, "fused_step")):
            return super().bind(data)
        device = "cpu" if self.device == "auto" else self.device
        step_fn = data.spec.fused_step(batch=data.batch, method=self.method,
                                       dtype=self.dtype or data.dtype, device=device)
        host = _HostParams({"W_pv": (self.n, self.n), "W_kq": (self.n, self.n)}, step_fn.dtype)
        index_of, grads = data.sample_index, host.grads

        def lsa_step(theta, step):
            loss = step_fn(*host.params(theta), index_of(step), *grads)
            return loss, host.gradient()

        return lsa_step

    def evaluate(self, theta, batch):
        W_pv, W_kq = self.unpack(theta)
        E = batch.E if self.dtype is None else batch.E.astype(self.dtype, copy=False)
        return lsa.loss_and_grad(E, batch.y_q, W_pv, W_kq)[0]

    def bind_device(self, data, arrays):
        """The fused step on device buffers, for ``fit``'s device loop (``arrays``: the array
        backend of :mod:`.native_optim`): ``step(model, step, grad, loss)`` queues the loss and
        gradient at the flat θ buffer ``model`` (in ``step.dtype``) into the flat buffer ``grad``
        and the float64 [1] ``loss``, all device memory (nothing waits). None when the step is not
        the fused one (``fit`` then runs the objective on host θ). The sample index goes to the
        fused step unchecked, as in :meth:`bind` (the caller checks its range)."""
        if self.device != "cuda" or not (self._fused(data) and spec_fused_step(data, "fused_step")):
            return None
        step_fn = data.spec.fused_step(batch=data.batch, method=self.method,
                                       dtype=self.dtype or data.dtype, device="cuda")
        pieces, index_of = _Pieces(arrays, [(self.n, self.n)] * 2), data.sample_index

        def step(model, t, grad, loss):
            step_fn(*pieces(model), index_of(t), *pieces(grad), loss)

        step.dtype = np.dtype(step_fn.dtype)
        return step

    def device_evaluation(self, batch, arrays):
        """``evaluate(theta, loss)`` on the device for the held-out ``batch`` (see
        :func:`_device_evaluation`), in the dtype :meth:`evaluate` computes in."""
        dtype = self.dtype or batch.E.dtype
        return _device_evaluation(
            arrays, batch, dtype, [(self.n, self.n)] * 2,
            lambda E, y_q, params, grads, loss: lsa.loss_and_grad(E, y_q, *params, out=grads,
                                                                 loss=loss))

    def config(self):
        # The device is not part of the identity: a run checkpointed on one resumes on the other.
        return {"type": "LSAObjective", "dim": self.n - 1, "dtype": getattr(self.dtype, "name", None),
                "method": self.method, "fused": self.fused}


class MultiHeadLSAObjective(Objective):
    """One-layer H-head linear self-attention on sampled prompts (:mod:`lsa_native.multihead`),
    L = (1/(2B)) Σ_b (ŷ_b − y_q,b)² [ZFB (3.7)], ŷ = E[d, N] + Σ_h p_hᵀ G q_h.

    θ = (Vec W^PV, Vec W^KQ) with ``W_kq`` [H, d+1, d+1] (merged), or (Vec W^PV, Vec W^K,
    Vec W^Q) with ``W_k``, ``W_q`` [H, r, d+1] (separate, W^KQ_h = W^K_hᵀ W^Q_h, the gradients
    chained from dW^KQ_h here); ``W_pv`` [H, d+1, d+1]. Pass either ``W_kq`` or both ``W_k=`` and
    ``W_q=``.

    With a :class:`~lsa_native.train.data.Prompts` source of the native ``sampling.LinearPrompts``
    the fused path runs, in ``dtype`` (None: the source's dtype), by ``method`` as
    :class:`LSAObjective`'s: "tokens": the step's prompts are drawn by the native sampler into a
    buffer reused across steps (no PromptBatch) and consumed by the native H-head kernel, the very
    prompts of ``data.at(step)`` (bitwise the non-fused path); "wishart": the prediction depends on
    a prompt only through G = E Eᵀ/N and the query, so G is drawn by the Bartlett decomposition
    and each head costs O(d²) per prompt whatever N (``spec.multihead_fused_step``; same law, other
    draws; Gaussian covariates, N >= d, or d + 1 with label noise); "auto": wishart where it
    applies. Otherwise ``multihead.loss_and_grad`` on the step's batch (``method`` unused).

    ``device``: where the fused step runs, "cpu", "cuda" or "auto" (= "cpu"). "cuda": tokens —
    the step's prompts are generated on the GPU (``sample_embedding(device="cuda")``, the CPU
    route's prompts up to the rounding of the device's log/sin/cos) into device buffers reused
    across steps, and ``multihead.loss_and_grad`` runs on them there; wishart — the GPU H-head
    Wishart step (``spec.multihead_fused_step(device="cuda")``: one thread per prompt on the CPU
    step's Philox streams, equal to the CPU step to rounding, ~1e-12 relative in float64; batch
    sums in a fixed order, bitwise reproducible); "auto" picks wishart where it applies, as on the
    CPU. ``fit`` keeps θ, the gradient, the optimizer state and each step's loss on the GPU for
    both routes and both parametrizations (:meth:`bind_device`: W_pv, W_kq or W_k, W_q are pieces
    of the flat device θ buffer, the gradients and the loss written in place; the separate
    parametrization's W^KQ_h = W^K_hᵀ W^Q_h and its chain rule run on the GPU too,
    :func:`~lsa_native.multihead.merge_kq` / :func:`~lsa_native.multihead.chain_kq` on device
    buffers; the held-out loss on the device: :meth:`device_evaluation`), so the host reads back
    only at record steps. The non-fused path and ``evaluate`` run where their batch is (the CPU).
    """

    def __init__(self, W_pv, W_kq=None, *, W_k=None, W_q=None, dtype=None, method: str = "tokens",
                 fused: bool = True, device: str = "auto"):
        self.dtype = _float_dtype(dtype)
        _check_fused_route(method, device)
        self.device = device
        W_pv, W_kq_m, sep = multihead.parameters(W_pv, W_kq, W_k=W_k, W_q=W_q)
        self.parts = {"W_pv": W_pv.shape, **({"W_kq": W_kq_m.shape} if sep is None else
                                            {"W_k": sep[0].shape, "W_q": sep[1].shape})}
        arrays = (W_pv, W_kq_m) if sep is None else (W_pv, *sep)
        self.theta0 = np.concatenate([a.ravel() for a in arrays])
        self.method, self.fused = method, bool(fused)
        self._step = (None, None, None, None)  # (spec, batch, dtype) of the cached Wishart step, it
        self._draw = (None, None, None, None)  # ((spec, B, dtype, device), sample index, E, y_q)
        self._cast = _CastBatch()

    def unpack(self, theta):
        """{name: view of θ} for W_pv and W_kq, or W_pv, W_k and W_q."""
        out, k = {}, 0
        for name, shape in self.parts.items():
            n = int(np.prod(shape))
            out[name] = theta[k:k + n].reshape(shape)
            k += n
        return out

    def _fused(self, data) -> bool:
        return (self.fused and isinstance(data, Prompts)
                and callable(getattr(data.spec, "sample_embedding", None)))

    def _wishart(self, data) -> bool:
        """Whether the fused step takes the Wishart route: method "wishart" (ValueError for a spec
        without ``multihead_fused_step``), or "auto" where it applies."""
        has = spec_fused_step(data, "multihead_fused_step") is not None
        if self.method == "wishart" and not has:
            raise ValueError(f"method: 'wishart' needs a spec with multihead_fused_step (the native "
                             f"sampling.LinearPrompts), got {type(data.spec).__name__}")
        return has and (self.method == "wishart"
                        or (self.method == "auto" and bool(getattr(data.spec, "wishart_applies", False))))

    @property
    def _on_gpu(self) -> dict:
        """The spec calls' ``device=`` argument: {"device": "cuda"} on the GPU, else none (specs
        without ``device=`` keep working on the CPU)."""
        return {"device": "cuda"} if self.device == "cuda" else {}

    def _prompts(self, data, step):
        """(E, y_q) of the step for the tokens route: the native draw (on the GPU with
        device="cuda") into the buffer kept from the last step (drawn again only when the sample
        index changes). The spec itself (not its id, which a new object could reuse) is in the key."""
        dt, index = np.dtype(self.dtype or data.dtype), data.sample_index(step)
        key = (data.spec, data.batch, dt, self.device)
        last_key, last, E, y_q = self._draw
        reuse = last_key is not None and last_key[0] is key[0] and last_key[1:] == key[1:]
        if not (reuse and last == index):
            buffers = {"E": E, "y_q": y_q} if reuse else {}
            self._draw = (None, None, None, None)  # free the old buffer before a new one
            E, y_q = data.spec.sample_embedding(data.batch, index, dt, **buffers, **self._on_gpu)
            self._draw = (key, index, E, y_q)
        return E, y_q

    def _fused_step(self, data):
        """The spec's fused Wishart step for this source, on this objective's device (made once
        per spec, batch and dtype)."""
        key = (data.spec, data.batch, self.dtype or data.dtype)
        if self._step[:-1] != key:
            step_fn = data.spec.multihead_fused_step(batch=data.batch, method="wishart",
                                                     dtype=key[2], **self._on_gpu)
            self._step = (*key, step_fn)
        return self._step[-1]

    def _wishart_step(self, theta, step, data):
        """(L, gradient) of the fused Wishart step (the separate parametrization through
        :meth:`_on_parameters`: W^KQ merged, the gradients chained)."""
        step_fn, index_of = self._fused_step(data), data.sample_index
        dt = step_fn.dtype
        p = self.unpack(theta)
        params = [as_array(p["W_pv"], p["W_pv"].shape, dt, "W_pv"),
                  *((as_array(p["W_kq"], p["W_kq"].shape, dt, "W_kq"),) if "W_kq" in p
                    else (p["W_k"].astype(dt), p["W_q"].astype(dt)))]
        grads = [np.empty_like(a) for a in params]

        def model(W_pv, W_kq, t, d_pv, d_kq):
            return step_fn(W_pv, W_kq, check_step(index_of(t)), d_pv, d_kq)
        loss = self._on_parameters(native_optim.HOST, dt)(model, params, step, grads)
        for name, out in (("loss", loss), *zip(self.parts, grads)):
            check_finite_result(out, {}, name)
        return float(loss), np.concatenate([g.ravel() for g in grads]).astype(np.float64)

    def _batch(self, batch):
        E = batch.E if self.dtype is None else batch.E.astype(self.dtype, copy=False)
        return E, batch.y_q

    def _loss_and_grad(self, theta, E, y_q):
        """multihead.loss_and_grad on (E, y_q) (CUDA arrays: on the GPU, the gradients read back)."""
        p = self.unpack(theta)
        W_pv = p.pop("W_pv")
        loss, *grads = multihead.loss_and_grad(E, y_q, W_pv, **p)
        return loss, np.concatenate([cuda.to_host(g).ravel() for g in grads]).astype(np.float64)

    def loss_and_grad(self, theta, step, data):
        if not self._fused(data):  # E cast once per batch while the source reuses it
            return self._loss_and_grad(theta, *self._cast(data.at(step), self.dtype))
        if self._wishart(data):
            return self._wishart_step(theta, step, data)
        return self._loss_and_grad(theta, *self._prompts(data, step))

    def evaluate(self, theta, batch):
        return self._loss_and_grad(theta, *self._batch(batch))[0]

    def bind(self, data):
        """The fused CPU step (tokens or Wishart) with everything that repeats prepared once
        (:class:`_HostParams`, as :meth:`LSAObjective.bind`): θ's views made once per θ buffer
        (float32: θ cast into one buffer, its range checked in one reduction), the native call
        writing dW_pv, dW_kq into views of one flat gradient buffer — separate: W^KQ_h = W^K_hᵀ
        W^Q_h merged into one buffer and the chain rule written into the gradient's dW_k, dW_q
        views (:meth:`_on_parameters`: the public merge_kq / chain_kq's checks on the first step
        only) — so no allocation, conversion, Python validation or concatenation per step; the
        tokens route's prompts drawn into the buffer kept from the last draw, once per sample
        index. Bitwise :meth:`loss_and_grad`. Otherwise (``device="cuda"``, a non-fused source)
        the base's step. The Wishart route passes each step's sample index to the native step
        unchecked (unlike :meth:`loss_and_grad`): its range ([0, 2^32), as for ``fused_step``) is
        the caller's to check (``fit`` checks the last step's once, at the start)."""
        if self.device == "cuda" or not self._fused(data):
            return super().bind(data)
        if self._wishart(data):
            fused = self._fused_step(data)
            index = data.sample_index

            def native(W_pv, W_kq, step, d_pv, d_kq):  # fit checks the step range once
                return fused(W_pv, W_kq, index(step), d_pv, d_kq)
            dtype = fused.dtype
        else:
            kernel, dtype = _core.multihead_lsa_loss_and_grad, self.dtype or data.dtype
            prompts = self._bound_prompts(data, dtype)

            def native(W_pv, W_kq, step, d_pv, d_kq):
                return kernel(*prompts(step), W_pv, W_kq, False, "cpu", out=(d_pv, d_kq))[0]
        host = _HostParams(self.parts, dtype)
        call, grads = self._on_parameters(native_optim.HOST, host.dtype), host.grads

        def host_step(theta, step):
            return call(native, host.params(theta), step, grads), host.gradient()
        return host_step

    def _bound_prompts(self, data, dtype):
        """``prompts(step) -> (E, y_q)`` of the bound tokens step: the prompts of ``step`` drawn by
        the spec's ``embedding_step`` (arguments checked once) into buffers allocated once, again
        only when the sample index changes — the prompts :meth:`_prompts` draws; a spec without
        ``embedding_step``: :meth:`_prompts`."""
        embedding_step = getattr(data.spec, "embedding_step", None)
        if not callable(embedding_step):
            return lambda step: self._prompts(data, step)
        draw, index_of = embedding_step(batch=data.batch, dtype=dtype), data.sample_index
        d, N = data.spec.dim, data.spec.context
        E, y_q = np.empty((data.batch, d + 1, N + 1), draw.dtype), np.empty(data.batch, draw.dtype)
        drawn = [None]  # the sample index E and y_q hold

        def prompts(step):
            index = index_of(step)
            if index != drawn[0]:
                drawn[0] = None  # a failed draw leaves no index behind
                draw(index, E, y_q)
                drawn[0] = index
            return E, y_q

        return prompts

    def bind_device(self, data, arrays):
        """The fused step on device buffers for ``fit``'s device loop (see
        :meth:`LSAObjective.bind_device`): W_pv and W_kq (or W_k, W_q) read as pieces of the flat
        θ buffer, the gradients written as pieces of the gradient buffer, the loss into the device
        slot: nothing waits. Wishart: ``spec.multihead_fused_step(device="cuda")`` with ``loss=``;
        tokens: the step's prompts drawn on the GPU into the buffers reused across steps
        (:meth:`_prompts`) and ``multihead.loss_and_grad(..., out=, loss=)``. The separate
        parametrization merges W^KQ_h into a device buffer and chains dW^KQ_h into dW^K, dW^Q
        there (:meth:`_on_parameters`). None — ``fit`` then runs the model on host θ —
        unless ``device="cuda"`` and a fused source. As in :meth:`bind`, the Wishart route passes
        each step's sample index unchecked: its range is the caller's to check (``fit``: once, at
        the start)."""
        if self.device != "cuda" or not self._fused(data):
            return None
        if self._wishart(data):
            fused, index_of = self._fused_step(data), data.sample_index

            def model(W_pv, W_kq, t, d_pv, d_kq, loss):  # fit checks the step range once
                fused(W_pv, W_kq, index_of(t), d_pv, d_kq, loss)
            dtype = fused.dtype
        else:
            def model(W_pv, W_kq, t, d_pv, d_kq, loss):
                E, y_q = self._prompts(data, t)
                multihead.loss_and_grad(E, y_q, W_pv, W_kq, out=(d_pv, d_kq), loss=loss)
            dtype = self.dtype or data.dtype
        call, pieces = self._on_parameters(arrays, dtype), _Pieces(arrays, list(self.parts.values()))

        def step(theta, t, grad, loss):
            call(model, pieces(theta), t, pieces(grad), loss)

        step.dtype = np.dtype(dtype)
        return step

    def _on_parameters(self, arrays, dtype):
        """``call(model, params, t, grads, *rest)`` running the merged ``model(W_pv, W_kq, t,
        dW_pv, dW_kq, *rest)`` on the parameter arrays ``params`` and gradient arrays ``grads``
        (θ's and the gradient's pieces; host or device, ``arrays`` the backend of their side):
        directly for the merged parametrization; for the separate one through
        :func:`_separate_kq` (W^KQ_h merged into a buffer of ``arrays`` in ``dtype`` first, dW^K,
        dW^Q chained from its dW^KQ after: on the device, the native kernels, no host copy)."""
        if "W_kq" in self.parts:
            return lambda model, params, t, grads, *rest: model(*params, t, *grads, *rest)
        zeros = np.zeros(self.parts["W_pv"])
        return _separate_kq(arrays.array(zeros, dtype), arrays.array(zeros, dtype))

    def device_evaluation(self, batch, arrays):
        """The held-out loss on the device for a θ buffer laid out as :meth:`bind_device`'s, in
        :meth:`evaluate`'s dtype (see :func:`_device_evaluation`; the separate parametrization
        merged on the device as in :meth:`bind_device`)."""
        dtype = self.dtype or batch.E.dtype
        call = self._on_parameters(arrays, dtype)

        def run(E, y_q, params, grads, loss):
            def model(W_pv, W_kq, t, d_pv, d_kq, loss):
                multihead.loss_and_grad(E, y_q, W_pv, W_kq, out=(d_pv, d_kq), loss=loss)
            call(model, params, 0, grads, loss)

        return _device_evaluation(arrays, batch, dtype, list(self.parts.values()), run)

    def config(self):
        return {"type": "MultiHeadLSAObjective",
                "shapes": {k: list(v) for k, v in self.parts.items()},
                "dtype": getattr(self.dtype, "name", None), "method": self.method,
                "fused": self.fused}


class KernelAttentionObjective(Objective):
    """Kernel attention [CCS (3)] on sampled prompts, loss (1/(2B)) Σ (TF + y_q)² (½ × CCS (5)).

    ``params``: a :class:`~lsa_native.kernel_attention.KernelAttentionParams` (initial value),
    full V or the sparse V = [[A, 0], [0, r]] of CCS Assumption 4.4. ``hold_A_zero`` (sparse only,
    CCS Theorem 4.5 / H.2): A is fixed at 0 and left out of θ, so θ = (r, B, C); otherwise θ is
    ``params.to_vector()``. E is cast to ``dtype`` (None: the batch's dtype).

    ``A_rate`` (sparse V, A trained): the rate factor of A's entries (:attr:`rate_factors`):
    ``fit``'s optimizer moves A_ℓ at ``A_rate`` × the learning rate of r, B, C (1: one rate; the
    CCS cells' use: :mod:`lsa_native.experiments.ccs_training`).

    ``device="cuda"``: the training prompts are drawn on the GPU (``spec.sample(..., device=
    "cuda")`` of a :class:`~lsa_native.train.data.Prompts` source, e.g.
    ``sampling.KernelGPPrompts``: the CPU's prompts up to rounding), directly in ``dtype`` (the
    CPU route draws in the source's dtype and casts), kept there while they are reused
    (``resample_every``) and rewritten in place at each resample, and the forward/backward runs on
    the GPU; ``fit`` keeps θ and the optimizer state on the GPU too (the native optimizer step;
    checkpoints are host arrays, so a run resumes on either device). ``evaluate`` runs on the CPU.
    """

    def __init__(self, params: ka.KernelAttentionParams, *, hold_A_zero: bool = False, dtype=None,
                 device: str = "cpu", A_rate: float = 1.0):
        if not isinstance(params, ka.KernelAttentionParams):
            raise TypeError(f"params: expected KernelAttentionParams, got {type(params).__name__}")
        self.device = cuda.check_device(device)
        self.hold_A_zero = bool(hold_A_zero)
        if self.hold_A_zero:
            if not params.sparse:
                raise ValueError("hold_A_zero: needs sparse parameters (A, r), not a full V")
            params = ka.KernelAttentionParams(B=params.B, C=params.C, activations=list(params.activations),
                                              A=np.zeros_like(params.A, dtype=np.float64), r=params.r)
        self.template = params
        self.dtype = _float_dtype(dtype)
        full = params.to_vector()
        self._nA = params.A.size if self.hold_A_zero else 0
        self.theta0 = full[self._nA:].copy()
        self.A_rate = positive_float(A_rate, "A_rate")
        if self.A_rate != 1.0:
            if not params.sparse or self.hold_A_zero:
                raise ValueError("A_rate: needs sparse parameters (A, r) with A trained "
                                 "(not hold_A_zero)")
            self.rate_factors = np.ones(self.theta0.size)
            self.rate_factors[:params.A.size] = self.A_rate  # θ = (A, r, B, C): to_vector's order
        self._device_batch = (None, None)  # ((spec, B, dtype, sample index), (Z0, y_q) on the GPU)
        self._cast = _CastBatch()

    def unpack(self, theta) -> ka.KernelAttentionParams:
        theta = np.asarray(theta, dtype=np.float64)
        if self._nA:
            theta = np.concatenate([np.zeros(self._nA), theta])
        return self.template.from_vector(theta)

    def _batch_on_device(self, step, data):
        """(Z0, y_q) of the step on the GPU: sampled there in ``dtype`` (None: the source's), and
        rewritten in place at each resample while the source, batch size and dtype stay the same
        (the cache is keyed on all four, so a second ``fit`` with another source samples anew)."""
        spec = getattr(data, "spec", None)
        if not (hasattr(data, "sample_index") and spec is not None
                and "device" in inspect.signature(spec.sample).parameters):
            raise TypeError("data: device='cuda' trains on a train.Prompts source whose spec samples "
                            "on the GPU (e.g. sampling.KernelGPPrompts), got "
                            f"{type(spec if spec is not None else data).__name__}")
        dtype = self.dtype if self.dtype is not None else data.dtype
        # The spec itself (not its id, which a new object could reuse) is kept in the key.
        key = (spec, data.batch, np.dtype(dtype), data.sample_index(step))
        cached_key, arrays = self._device_batch
        if cached_key != key:
            reuse = cached_key is not None and cached_key[:3] == key[:3]
            b = spec.sample(batch=data.batch, step=key[3], dtype=dtype, device="cuda",
                            out=arrays if reuse else None)
            self._device_batch = (key, (b.E, b.y_q))
        return self._device_batch[1]

    def bind(self, data):
        """The step with the parameter layout prepared once: θ is scattered into one flat
        [V | B | C] buffer of the batch's dtype (sparse V's other entries stay 0), the native call
        writes dV, dB, dC into one flat gradient buffer, and the gradient is gathered from it by
        precomputed positions (no parameter objects, V embedding, allocations or concatenations
        per step). The batch's operands are converted and checked once per batch (E cast to
        ``dtype``, y_q to E's dtype: no per-step copy of either), then each step is the native call
        alone (whose validate() checks the operands' shapes and finiteness). Bitwise
        :meth:`loss_and_grad`. "Once per batch" is once per batch object ``data.at`` returns: a
        source must return a new object when its prompts change, never refill one in place (the
        contract of :mod:`.data`; a batch refilled in place would be trained on as first seen)."""
        p, dest = self.template, self._positions()
        shapes = self._shapes()
        cuts = np.cumsum([int(np.prod(s)) for s in shapes])
        whole = dest.size == cuts[-1]  # full V: θ is the flat buffer itself, in order
        activations = list(p.activations)
        native = _core.kernel_attention_loss_and_grad
        grad = np.empty(self.theta0.size)
        buffers = {}  # dtype -> (flat θ, its (V, B, C) views, flat gradient, its views)
        given = converted = None  # the batch's (E, y_q) as given; as the native call reads them

        def split(flat):
            return tuple(a.reshape(s) for a, s in zip(np.split(flat, cuts[:-1]), shapes))

        def at(theta, dt):
            """θ scattered into the flat buffer of ``dt`` (made once per dtype with its views:
            sparse V's other entries stay 0); returns its buffers."""
            if dt not in buffers:
                flat, g = np.zeros(cuts[-1], dt), np.empty(cuts[-1], dt)
                buffers[dt] = (flat, split(flat), g, split(g))
            if whole:
                np.copyto(buffers[dt][0], theta, casting="unsafe")
            else:
                buffers[dt][0][dest] = theta
            return buffers[dt]

        def prompts(step):
            """(Z0, y_q) of the step as the native call reads them: converted and checked once
            per batch (the same arrays while the source reuses its batch)."""
            nonlocal given, converted
            E, y_q = self._cast(data.at(step), self.dtype)
            if given is None or E is not given[0] or y_q is not given[1]:
                Z0, dt = cuda.native_prompts(E, "Z0")
                converted = (Z0, cuda.native_operand(y_q, dt, "y_q"))
                given = (E, y_q)
            return converted

        def ka_step(theta, step):
            if self.device == "cuda":
                return self._host_theta_cuda_step(theta, step, data, at, dest, activations)
            Z0, y_q = prompts(step)
            _, views, g, g_views = at(theta, Z0.dtype)
            loss = native(Z0, y_q, *views, activations, out=g_views)[0]
            if whole:
                np.copyto(grad, g)
            else:
                grad[...] = g[dest]
            return loss, grad

        return ka_step

    def _host_theta_cuda_step(self, theta, step, data, at, dest, activations):
        """The host-θ step of ``device="cuda"``: the prompts on the GPU, θ scattered into the
        bound step's host buffer (``at``: its views made once) and the gradient gathered on the
        host."""
        Z0, y_q = self._batch_on_device(step, data)
        views = at(theta, np.dtype(Z0.dtype))[1]
        loss, *grads = ka.loss_and_grad(Z0, y_q, *views, activations)
        return loss, np.concatenate([cuda.to_host(g).ravel() for g in grads])[dest]

    def _positions(self) -> np.ndarray:
        """Where each entry of θ sits in the flat [V | B | C] buffer (θ's order: to_vector's,
        without A when held at zero)."""
        p = self.template
        if not p.sparse:
            return np.arange(self.theta0.size)
        V = np.arange(p.layers * p.heads * (p.B.shape[-1] + 1) ** 2).reshape(
            p.layers, p.heads, p.B.shape[-1] + 1, p.B.shape[-1] + 1)
        d = p.B.shape[-1]
        rest = V.size + np.arange(p.B.size + p.C.size)
        full = np.concatenate([V[:, :, :d, :d].ravel(), V[:, :, d, d].ravel(), rest])
        return full[self._nA:]

    def loss_and_grad(self, theta, step, data):
        if self.device == "cuda":
            Z0, y_q = self._batch_on_device(step, data)
        else:
            Z0, y_q = self._cast(data.at(step), self.dtype)
        loss, grad = self.unpack(theta).loss_and_grad(Z0, y_q)
        return loss, grad[self._nA:]

    def evaluate(self, theta, batch):
        E = batch.E if self.dtype is None else batch.E.astype(self.dtype, copy=False)
        return self.unpack(theta).loss(E, batch.y_q)

    def _shapes(self):
        """The shapes of V, B, C: θ is their concatenation when V is full (to_vector's order)."""
        p = self.template
        return [(p.layers, p.heads, p.B.shape[-1] + 1, p.B.shape[-1] + 1), p.B.shape, p.C.shape]

    def bind_device(self, data, arrays):
        """The step on device buffers for ``fit``'s device loop (see
        :meth:`LSAObjective.bind_device`): the prompts sampled on the GPU, V, B, C read as pieces
        of the flat θ buffer and dV, dB, dC written as pieces of the gradient buffer. With the
        sparse V = [[A, 0], [0, r]] (A held at 0 or not) the device buffer is [V | B | C] and θ's
        entries sit at ``step.positions`` in it (``step.size`` entries): the rest are fixed zeros
        (rate factor 0 for the optimizer)."""
        if self.device != "cuda":
            return None
        shapes = self._shapes()
        pieces, activations = _Pieces(arrays, shapes), list(self.template.activations)

        def step(model, t, grad, loss):
            Z0, y_q = self._batch_on_device(t, data)
            ka.loss_and_grad(Z0, y_q, *pieces(model), activations, out=pieces(grad), loss=loss)

        step.dtype = np.dtype(self.dtype if self.dtype is not None else data.dtype)
        if self.template.sparse:
            step.positions, step.size = self._positions(), sum(int(np.prod(s)) for s in shapes)
        return step

    def device_evaluation(self, batch, arrays):
        """The held-out loss on the device for a θ buffer laid out as :meth:`bind_device`'s, in
        :meth:`evaluate`'s dtype."""
        activations = list(self.template.activations)
        return _device_evaluation(
            arrays, batch, self.dtype or batch.E.dtype, self._shapes(),
            lambda E, y_q, params, grads, loss: ka.loss_and_grad(E, y_q, *params, activations,
                                                                out=grads, loss=loss))

    def config(self):
        # The device is not part of the identity: a run checkpointed on one resumes on the other.
        p = self.template
        return {"type": "KernelAttentionObjective", "layers": p.layers, "heads": p.heads,
                "dim": p.B.shape[-1], "activations": list(p.activations), "sparse": p.sparse,
                "hold_A_zero": self.hold_A_zero, "dtype": getattr(self.dtype, "name", None),
                # only when set: the identity of a one-rate run stays what it was
                **({"A_rate": self.A_rate} if self.A_rate != 1.0 else {})}


class PopulationObjective(_WeightPair, Objective):
    """The exact population loss L(W^PV, W^KQ; Λ, N) = ½ E[(ŷ − y_q)²] [ZFB (3.8)] and its
    gradient (native, O(d³)): fixed Λ (``Lambda``), random diagonal Λτ (``moments`` [3, d],
    ZFB Appendix C) or covariance samples (``samples`` [S, d, d]) — exactly one. No data."""

    needs_data = False

    def __init__(self, W_pv, W_kq, N: int, *, Lambda=None, moments=None, samples=None):
        self._init_pair(W_pv, W_kq)
        self.N = positive_int(N, "N")
        d = self.n - 1
        given = [x is not None for x in (Lambda, moments, samples)]
        if sum(given) != 1:
            raise ValueError("PopulationObjective: pass exactly one of Lambda, moments, samples")
        if Lambda is not None:
            check_covariance(Lambda, "Lambda", d)  # now, not at the first step (the raw Λ is kept)
            self.kind, self.law = "fixed", population._covariance(Lambda, d)
        elif moments is not None:
            self.kind, self.law = "random_diagonal", population._as_moments(moments, d)
        else:
            self.kind, self.law = "samples", population._covariance_samples(samples, d)

    def loss_and_grad(self, theta, step, data=None):
        W_pv, W_kq = self.unpack(theta)
        L, g_pv, g_kq = population._core.population_loss(
            self.kind, np.ascontiguousarray(W_pv), np.ascontiguousarray(W_kq), self.law, self.N)
        return L, np.concatenate([g_pv.ravel(), g_kq.ravel()])

    def evaluate(self, theta, batch=None):
        return self.loss_and_grad(theta, 0)[0]

    def config(self):
        return {"type": "PopulationObjective", "dim": self.n - 1, "N": self.N, "kind": self.kind,
                "law_sha256": _sha(self.law)}


class CallableObjective(Objective):
    """Any ``fn(theta, step) -> (loss, grad)`` with an initial ``theta0``; ``eval_fn(theta, batch)``
    (optional) gives held-out losses (``batch``: ``fit``'s ``eval_data``, passed as given). ``name``
    identifies it in run directories. The loss must be a real number and the gradient real values,
    one per parameter (TypeError/ValueError naming the objective otherwise; a non-finite value is
    ``fit``'s divergence)."""

    needs_data = False

    def __init__(self, fn, theta0, *, eval_fn=None, name: str | None = None):
        if not callable(fn):
            raise TypeError(f"fn: expected a callable fn(theta, step) -> (loss, grad), got {type(fn).__name__}")
        if eval_fn is not None and not callable(eval_fn):
            raise TypeError(f"eval_fn: expected a callable eval_fn(theta, batch) -> float, "
                            f"got {type(eval_fn).__name__}")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name: expected a string or None, got {type(name).__name__}")
        theta0 = real_array(theta0, "theta0", nonempty=False).copy()
        if theta0.ndim != 1 or theta0.size < 1:
            raise ValueError(f"theta0: expected a non-empty flat vector, got shape {theta0.shape}")
        self.fn, self.eval_fn, self.theta0 = fn, eval_fn, theta0
        self.name = name or getattr(fn, "__qualname__", "callable")

    def loss_and_grad(self, theta, step, data=None):
        out = self.fn(theta, step)
        if not (isinstance(out, tuple) and len(out) == 2):
            raise TypeError(f"objective: a callable objective must return (loss, grad), got "
                            f"{type(out).__name__}")
        loss = real_output(out[0], f"objective: the loss returned by {self.name}")
        grad = real_array_output(out[1], f"objective: the gradient returned by {self.name}")
        if grad.size != theta.size:
            raise ValueError(f"objective: the gradient has {grad.size} values, θ has {theta.size}")
        return loss, grad.reshape(theta.shape)

    def evaluate(self, theta, batch):
        if self.eval_fn is None:
            return super().evaluate(theta, batch)
        return real_output(self.eval_fn(theta, batch), f"eval_fn: the held-out loss of {self.name}")

    def config(self):
        return {"type": "CallableObjective", "name": self.name, "size": int(self.theta0.size)}


def as_objective(objective, theta0=None) -> Objective:
    """An objective instance, or a plain callable ``fn(theta, step)`` wrapped with ``theta0``."""
    if hasattr(objective, "loss_and_grad") and hasattr(objective, "theta0"):
        return objective
    if callable(objective):
        if theta0 is None:
            raise ValueError("theta0: required when the objective is a plain callable")
        return CallableObjective(objective, theta0)
    raise TypeError("objective: expected an Objective (LSAObjective, KernelAttentionObjective, "
                    f"PopulationObjective, CallableObjective) or a callable, got {type(objective).__name__}")
