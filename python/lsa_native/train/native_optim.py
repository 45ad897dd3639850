"""The optimizer step as one native call where the parameters live (issue 18: training on the GPU).

:class:`NativeOptimizer` runs an :class:`~lsa_native.train.optim.Optimizer`'s rule — SGD, Adam,
AdamW, gradient-norm clipping; torch's rules — as ``_core.optimizer_step`` (the per-element
recipe ``cpp/src/common/optim_recipe.hpp``, one CPU loop or one CUDA block) on buffers allocated
once per run by an *array backend*: host numpy arrays (:data:`HOST`) or CUDA device arrays
(:data:`CUDA`). The Python code is the same for both; only the backend differs, so everything but
the kernel launch is tested on the CPU.

What a step does not need: the host. The gradient norm, the clipping factor, the update and the
divergence checks (a non-finite norm leaves θ alone; a non-finite θ_{t+1} is recorded) run in the
native call, which writes a 3-number status record (norm, code, step of the first failure) in the
backend's memory; a step after a recorded failure does nothing, so the parameters of the failing
step survive until the host reads the record (:meth:`NativeOptimizer.status`: the one wait).
θ is double-buffered: step k reads buffer k % 2 and writes the other.

Equalities (tests/test_native_optim.py): in float64 the native step equals ``Optimizer.step``
bitwise given the same norm (fit's host path passes numpy's), and to rounding with its own norm
(a fixed-order sum: 256 strided partials, then a halving tree — the same order on both backends;
the CUDA file is compiled without FMA contraction, so the GPU step equals the CPU one bit for bit).
"""
from __future__ import annotations

import math

import numpy as np

from .. import _core
from .. import cuda as _cuda
from .optim import SGD, Adam, AdamW, Optimizer, rate_factors as _rate_factors

__all__ = ["NativeOptimizer", "HOST", "CUDA", "BAD_GRADIENT", "BAD_PARAMETERS", "BAD_LOSS"]

_FIELD = {name: i for i, name in enumerate(_core.optimizer_step_fields)}
_RULES = {"sgd": 0, "adam": 1, "adamw": 2}
OK, BAD_GRADIENT, BAD_PARAMETERS, BAD_LOSS = 0, 1, 2, 3  # the status codes of optim.hpp
_LR, _FIRST, _STEP_INDEX, _BIAS1, _BIAS2, _DECOUPLED = (
    _FIELD[k] for k in ("lr", "first", "step_index", "bias1", "bias2", "decoupled_decay"))
_STATE_KEYS = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer")


class _HostArrays:
    """Host numpy buffers (their addresses are taken once)."""

    device = "cpu"

    @staticmethod
    def array(values, dtype=np.float64):
        return np.array(values, dtype=dtype)  # a fresh C-contiguous copy

    @staticmethod
    def address(a) -> int:
        return a.ctypes.data

    @staticmethod
    def to_host(a) -> np.ndarray:
        return np.array(a)

    @staticmethod
    def write(a, values) -> None:
        np.copyto(a, values, casting="unsafe")

    @staticmethod
    def piece(a, offset: int, shape: tuple):
        """Elements offset .. of flat buffer ``a`` as an array of ``shape`` (a view: no copy)."""
        return a[offset:offset + int(np.prod(shape, dtype=np.int64))].reshape(shape)


class _CudaArrays:
    """CUDA device buffers (``lsa_native.cuda.DeviceArray``); reading one waits for the device."""

    device = "cuda"

    @staticmethod
    def array(values, dtype=np.float64):
        return _cuda.to_device(np.asarray(values, dtype=dtype))

    @staticmethod
    def address(a) -> int:
        return int(a.ptr)

    @staticmethod
    def to_host(a) -> np.ndarray:
        return _cuda.to_host(a)

    @staticmethod
    def write(a, values) -> None:
        a.copy_from_host(np.ascontiguousarray(values, dtype=np.dtype(a.dtype)))

    @staticmethod
    def piece(a, offset: int, shape: tuple):
        """Elements offset .. of flat buffer ``a`` as a CUDA array of ``shape`` (no copy)."""
        return _cuda.Piece(a, offset, shape)


HOST, CUDA = _HostArrays(), _CudaArrays()


def backend(device: str):
    """The array backend of ``device`` ("cpu" or "cuda": checked, a clear error without a GPU)."""
    return CUDA if _cuda.check_device(device) == "cuda" else HOST


class NativeOptimizer:
    """``optimizer``'s steps on θ (host float64 [P], copied in) with buffers of ``arrays``
    (:data:`HOST` or :data:`CUDA`). ``status``: 3 float64 values in the backend's memory for the
    status record, holding (NaN, OK, −1) (default: a buffer of its own). ``rates``: host [P],
    each entry's rate factor ≥ 0 (entry i steps at η_t·rates[i], as ``Optimizer.step``'s
    ``rates``); 0 where an entry of θ is not a parameter (its gradient is read as 0, so it keeps
    its value: a fixed zero among the parameters) — None: all 1. ``grad_dtype``: the dtype of
    :attr:`grad`, the buffer the objective writes each step's gradient into (the model's dtype:
    read as double). ``model``: also keep θ in ``grad_dtype`` (:attr:`model`, written by each
    step) for a model computing in float32. ``opt_state``: a host state dict of
    ``optimizer.init``'s form to resume from."""

    def __init__(self, optimizer: Optimizer, theta, arrays=HOST, *, grad_dtype=np.float64,
                 model: bool = False, opt_state: dict | None = None, status=None, rates=None):
        if not isinstance(optimizer, (SGD, Adam)):
            raise TypeError(f"optimizer: the native step runs SGD, Adam and AdamW, got "
                            f"{type(optimizer).__name__}")
        theta = np.ascontiguousarray(theta, dtype=np.float64)
        if theta.ndim != 1:
            raise ValueError(f"theta: expected a flat vector, got shape {theta.shape}")
        self.optimizer, self.arrays = optimizer, arrays
        self.grad_dtype = np.dtype(grad_dtype)
        if self.grad_dtype not in (np.float32, np.float64):
            raise TypeError(f"grad_dtype: expected float32 or float64, got {self.grad_dtype}")
        host_state = optimizer.init(theta) if opt_state is None else opt_state
        if set(host_state) != set(optimizer.init(theta)):
            raise ValueError("opt_state: its keys do not match the optimizer's state")
        self.t = int(host_state["t"])
        self.theta = [arrays.array(theta), arrays.array(theta)]
        self.grad = arrays.array(np.zeros(theta.size), self.grad_dtype)
        self.model = arrays.array(theta, self.grad_dtype) if model else None
        self.state = {k: arrays.array(v) for k, v in host_state.items() if k != "t"}
        # The status record: its own buffer, or 3 doubles of the caller's (``status``, e.g. the
        # head of a readout buffer that also holds the losses: one copy reads both back).
        self.status_buffer = arrays.array([math.nan, OK, -1.0]) if status is None else status
        self.steps_taken = 0  # by this object: step k reads θ buffer k % 2
        self._scalars = self._constant_scalars()
        # What every step passes unchanged, looked up once (a dtype's name is a slow property).
        self._scalars_ptr = self._scalars.ctypes.data
        self._grad_dtype_name, self._device = self.grad_dtype.name, arrays.device
        self._betas = optimizer.betas if isinstance(optimizer, Adam) else None
        self._decoupled = isinstance(optimizer, AdamW)
        address = arrays.address
        self._theta_ptr = [address(a) for a in self.theta]
        self._args = (
            address(self.grad),
            *(address(self.state[k]) if k in self.state else 0 for k in _STATE_KEYS),
        )
        self._status_ptr = address(self.status_buffer)
        self._model_ptr = address(self.model) if model else 0
        self.rates = None if rates is None else arrays.array(_rate_factors(rates, theta.size, zero=True))
        self._rates_ptr = 0 if rates is None else address(self.rates)
        self._n = theta.size

    def _constant_scalars(self) -> np.ndarray:
        opt, s = self.optimizer, np.zeros(len(_FIELD))
        s[_FIELD["rule"]] = _RULES[opt.name]
        s[_FIELD["weight_decay"]] = opt.weight_decay
        s[_FIELD["clip_norm"]] = 0.0 if opt.clip_norm is None else opt.clip_norm
        if isinstance(opt, SGD):
            s[_FIELD["momentum"]] = opt.momentum
            s[_FIELD["one_minus_dampening"]] = 1 - opt.dampening
            s[_FIELD["nesterov"]] = opt.nesterov
        else:
            b1, b2 = opt.betas
            for name, v in (("beta1", b1), ("one_minus_beta1", 1 - b1), ("beta2", b2),
                            ("one_minus_beta2", 1 - b2), ("eps", opt.eps),
                            ("amsgrad", opt.amsgrad)):
                s[_FIELD[name]] = v
        return s

    @property
    def current(self):
        """θ_t: the buffer the next step reads."""
        return self.theta[self.steps_taken % 2]

    def step(self, step_index: int, norm: float | None = None, loss=None) -> float:
        """One step θ_t → θ_{t+1} from :attr:`grad` (queued on the device: nothing waits);
        ``norm``: ‖grad‖₂ when the caller has it (else computed natively); ``loss``: a float64
        [1] buffer of the backend holding the step's loss (a non-finite one records BAD_LOSS and
        leaves θ alone, like a non-finite gradient). Returns η_t."""
        opt, s, t = self.optimizer, self._scalars, self.t + 1
        lr = opt.learning_rate(self.t)
        s[_LR] = lr
        s[_FIRST] = t == 1
        s[_STEP_INDEX] = step_index
        if self._betas is not None:
            b1, b2 = self._betas
            s[_BIAS1] = 1 - b1**t
            s[_BIAS2] = 1 - b2**t
            if self._decoupled:
                s[_DECOUPLED] = 1 - lr * opt.weight_decay
        k = self.steps_taken % 2
        _core.optimizer_step(self._scalars_ptr, self._n, self._theta_ptr[k], self._theta_ptr[1 - k],
                             *self._args, -1.0 if norm is None else float(norm), self._status_ptr,
                             self._model_ptr, self._grad_dtype_name, self._device,
                             0 if loss is None else self.arrays.address(loss), self._rates_ptr)
        self.t, self.steps_taken = t, self.steps_taken + 1
        return lr

    def status(self) -> tuple[float, int, int]:
        """(‖g‖₂ of the last step, its status code, the step index of the first failure or −1):
        the host reads the record (on a GPU: waits for the queued steps)."""
        norm, code, step = self.arrays.to_host(self.status_buffer)
        return float(norm), int(code), int(step)

    def theta_read_at(self, steps_taken: int):
        """The θ buffer step number ``steps_taken`` (of this object) read."""
        return self.theta[steps_taken % 2]

    def host_state(self, theta_buffer=None) -> tuple[np.ndarray, dict]:
        """(θ, state dict of ``optimizer.init``'s form) as host arrays (a checkpoint's)."""
        theta = self.arrays.to_host(self.current if theta_buffer is None else theta_buffer)
        state = {"t": self.t}
        state.update({k: self.arrays.to_host(v) for k, v in self.state.items()})
        return theta, state
