"""Where training prompts come from: a fixed set, or fresh prompts every k steps from a sampler.

A *sampler spec* is any immutable object with ``spec.sample(batch=, step=, dtype=) -> PromptBatch``
whose result depends only on (its seed, ``step``) — the native samplers of
``lsa_native.sampling`` (``LinearPrompts``, ``KernelGPPrompts``) and the numpy fall-backs here
(:class:`LinearPromptsNumpy`, :class:`KernelGPPromptsNumpy`, each ``np.random.default_rng([seed,
step])`` around the reference samplers of :mod:`lsa_native.data`). A spec that also has
``spec.lsa_loss_and_grad(W_pv, W_kq, batch=, step=, method=, dtype=)`` lets the LSA objective
train without materializing prompts (and with ``device=``, on the GPU).

A *data source* tells :func:`~lsa_native.train.fit` which prompts step t uses:

- :class:`Prompts` (spec, batch size B, ``resample_every`` k): the batch ``spec.sample(batch=B,
  step=t // k)``, so any step's data is a pure function of t — the "RNG position" in a checkpoint
  is the step itself and resuming is bitwise exact.
- :class:`FixedPrompts`: one :class:`~lsa_native.data.PromptBatch` for every step.
- :class:`GeneratorPrompts`: ``sample(rng)`` with a ``numpy.random.Generator`` advanced in place
  (the legacy ``sgd_lsa`` interface); its generator state is checkpointed.

The contract of ``at(step)`` (any data source, these and yours): a new PromptBatch object whenever
the prompts change, the same object only while its data are unchanged — never one refilled in
place. The objectives keep what they derive from a batch (E cast to their dtype, the operands of
the native call: ``KernelAttentionObjective.bind``, the ``_CastBatch`` of every objective) for as
long as ``at`` returns the same object, so a batch overwritten in place would be trained on as it
was when first seen.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from .. import data as _data
from .._validation import positive_int

__all__ = ["LinearPromptsNumpy", "KernelGPPromptsNumpy", "Prompts", "FixedPrompts",
           "GeneratorPrompts", "as_data", "heldout"]


def _dtype(dtype):
    dt = np.dtype(dtype)
    if dt not in (np.float32, np.float64):
        raise TypeError(f"dtype: expected float32 or float64, got {dt}")
    return dt


def _jsonable(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return repr(value)


def spec_config(spec) -> dict:
    """A JSON-able description of a sampler spec: its type, public fields and public properties
    (the native specs keep their law in read-only properties)."""
    fields = {k: v for k, v in getattr(spec, "__dict__", {}).items() if not k.startswith("_")}
    for name in dir(type(spec)):
        if not name.startswith("_") and isinstance(getattr(type(spec), name), property):
            fields[name] = getattr(spec, name)
    return {"type": type(spec).__name__, **{k: _jsonable(v) for k, v in sorted(fields.items())}}


@dataclass(frozen=True)
class LinearPromptsNumpy:
    """numpy fall-back of ``sampling.LinearPrompts``: ZFB 3.3 prompts (w ~ N(0, I), x ~ N(0, Λ),
    y = <w, x> + noise) from ``np.random.default_rng([seed, step])``."""

    dim: int
    context: int
    Lambda: object = None
    noise_std: float = 0.0
    seed: int = 0

    def sample(self, *, batch: int, step: int = 0, dtype=np.float32) -> _data.PromptBatch:
        rng = np.random.default_rng([positive_int(self.seed, "seed", 0), positive_int(step, "step", 0)])
        return _data.linear_regression_prompts(rng, batch, self.dim, self.context, self.Lambda,
                                               noise_std=self.noise_std, dtype=_dtype(dtype))


@dataclass(frozen=True)
class KernelGPPromptsNumpy:
    """numpy fall-back of ``sampling.KernelGPPrompts``: CCS Definition 3.3 K-GP labels on
    Σ^{1/2}·(unit sphere) covariates, from ``np.random.default_rng([seed, step])``."""

    dim: int
    context: int
    kernel: str = "exp"
    bandwidth: float = 1.0
    Sigma: object = None
    seed: int = 0

    def sample(self, *, batch: int, step: int = 0, dtype=np.float32) -> _data.PromptBatch:
        rng = np.random.default_rng([positive_int(self.seed, "seed", 0), positive_int(step, "step", 0)])
        return _data.kernel_gp_prompts(rng, batch, self.dim, self.context, self.kernel,
                                       bandwidth=self.bandwidth, Sigma=self.Sigma, dtype=_dtype(dtype))


class Prompts:
    """Fresh prompts from a sampler ``spec``: step t trains on ``spec.sample(batch=B,
    step=t // resample_every, dtype=dtype)`` (CCS H.1: B = 30000, resampled every 10 steps)."""

    def __init__(self, spec, *, batch: int, resample_every: int = 1, dtype=np.float32):
        if not callable(getattr(spec, "sample", None)):
            raise TypeError("spec: expected a sampler spec with .sample(batch=, step=, dtype=)")
        self.spec = spec
        self.batch = positive_int(batch, "batch")
        self.resample_every = positive_int(resample_every, "resample_every")
        self.dtype = _dtype(dtype)
        self._cache = (None, None)

    def sample_index(self, step: int) -> int:
        return step // self.resample_every

    def at(self, step: int) -> _data.PromptBatch:
        """The batch step ``step`` trains on (cached while it is reused)."""
        k = self.sample_index(step)
        if self._cache[0] != k:
            self._cache = (None, None)  # free the old batch before sampling the next
            self._cache = (k, self.spec.sample(batch=self.batch, step=k, dtype=self.dtype))
        return self._cache[1]

    def state(self) -> dict:
        return {}

    def load_state(self, state: dict) -> None:
        pass

    def config(self) -> dict:
        return {"type": "Prompts", "spec": spec_config(self.spec), "batch": self.batch,
                "resample_every": self.resample_every, "dtype": self.dtype.name}


class FixedPrompts:
    """The same :class:`~lsa_native.data.PromptBatch` at every step (a fixed training set)."""

    def __init__(self, batch: _data.PromptBatch):
        if not isinstance(batch, _data.PromptBatch):
            raise TypeError(f"data: expected a PromptBatch, got {type(batch).__name__}")
        self.prompts = batch

    def at(self, step: int) -> _data.PromptBatch:
        return self.prompts

    def state(self) -> dict:
        return {}

    def load_state(self, state: dict) -> None:
        pass

    def config(self) -> dict:
        E = np.ascontiguousarray(self.prompts.E)
        return {"type": "FixedPrompts", "shape": list(E.shape), "dtype": E.dtype.name,
                "sha256": hashlib.sha256(E.tobytes() + np.ascontiguousarray(self.prompts.y_q).tobytes()).hexdigest()}


class GeneratorPrompts:
    """``sample(rng) -> PromptBatch`` called once per step with one generator advanced in place
    (the interface of the legacy ``sgd_lsa``). The generator state is saved in checkpoints."""

    def __init__(self, sample, rng: np.random.Generator):
        if not callable(sample):
            raise TypeError("sample: expected a callable sample(rng) -> PromptBatch")
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"rng: expected a numpy.random.Generator, got {type(rng).__name__}")
        self.sample, self.rng = sample, rng
        self._cache = (None, None)

    def at(self, step: int) -> _data.PromptBatch:
        """A fresh batch for each new step; the same one when asked again for the same step."""
        if self._cache[0] != step:
            self._cache = (None, None)
            self._cache = (step, self.sample(self.rng))
        return self._cache[1]

    def state(self) -> dict:
        return {"bit_generator": self.rng.bit_generator.state}

    def load_state(self, state: dict) -> None:
        self.rng.bit_generator.state = state["bit_generator"]

    def config(self) -> dict:
        return {"type": "GeneratorPrompts", "sample": getattr(self.sample, "__qualname__", "?"),
                "bit_generator": type(self.rng.bit_generator).__name__}


def as_data(data):
    """A data source from None, a PromptBatch (fixed) or a data source (returned as is)."""
    if data is None or all(hasattr(data, a) for a in ("at", "state", "load_state", "config")):
        return data
    if isinstance(data, _data.PromptBatch):
        return FixedPrompts(data)
    raise TypeError("data: expected None, a PromptBatch or a data source (Prompts, FixedPrompts, "
                    f"GeneratorPrompts), got {type(data).__name__}")


def heldout(spec, *, batch: int, dtype=np.float32, step: int = 0) -> _data.PromptBatch:
    """A held-out evaluation set ``spec.sample(batch=, step=)`` — give ``spec`` a seed the training
    spec does not use."""
    return spec.sample(batch=positive_int(batch, "batch"), step=step, dtype=_dtype(dtype))
