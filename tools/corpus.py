#!/usr/bin/env python
"""A corpus of bad or extreme calls across lsa_native's public API, each classified (issue 13).

Classes:
  ok       an extreme but valid call returned a finite result
  clean    ValueError / TypeError / FloatingPointError whose message names an argument or output
           (an OSError too, for a place on disk the argument names that cannot be written)
           (CLI: a non-zero exit whose message names the option)
  generic  any other exception, or a message that names nothing
  silent   a non-finite value returned, or a bad argument accepted (a wrong value returned)
  crash    the worker process died
  hang     the call ran past the time limit

Each call runs in a pool of worker processes (one case at a time, batched per worker; a worker is
restarted after a crash or a hang), so the whole corpus takes minutes.

    python tools/corpus.py [--python VENV/bin/python] [--jobs 2] [--timeout 20] [--json out.json]
    python tools/corpus.py --list            # print the cases

The cases are generated: for every public function a valid base call, then each argument replaced
in turn by values from a pool for its kind (None, strings, complex, wrong shapes, NaN/inf, 1e±300,
float32 overflow, int dtypes, strided views, ...), plus hand-written cases for known traps.
Each generated value is tagged "error" (a bad argument: the call must raise) or "any" (extreme but
valid: a finite result or a clean error).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import select
import signal
import subprocess
import sys
import time

# --------------------------------------------------------------------------------------------
# The worker's namespace: small valid inputs, rebuilt for every case (cases may write into them).
PREAMBLE = r"""
import numpy as np, warnings, io, contextlib, tempfile, os
import lsa_native as ln
from lsa_native import lsa, population as pop, data, baselines as bl, theory as th, sampling as smp
from lsa_native import kernel_attention as ka, train
from lsa_native import experiments as exps, cli
warnings.simplefilter("ignore")
rng = lambda s=0: np.random.default_rng(s)
_g = np.random.default_rng(1234)
d, N, B = 3, 5, 4
E64 = _g.standard_normal((B, d + 1, N + 1)); E64[:, d, N] = 0
E32 = E64.astype(np.float32)
W = 0.3 * _g.standard_normal((d + 1, d + 1)); W2 = 0.3 * _g.standard_normal((d + 1, d + 1))
W32 = W.astype(np.float32)
yq = _g.standard_normal(B); dF = _g.standard_normal(E64.shape); dy = _g.standard_normal(B)
Lam = np.diag([1.0, 2.0, 0.5])
mom = np.array([[1.0, 1.0, 1.0], [1.5, 1.5, 1.5], [3.0, 3.0, 3.0]])
Z0 = E64.copy(); V = 0.2 * _g.standard_normal((2, 1, d + 1, d + 1))
Bk = 0.3 * _g.standard_normal((2, 1, d, d)); Ck = 0.3 * _g.standard_normal((2, 1, d, d))
Ak = 0.2 * _g.standard_normal((2, 1, d, d)); rk = 0.2 * _g.standard_normal((2, 1))
dZ = _g.standard_normal(E64.shape)
X = _g.standard_normal((B, N, d)); y = _g.standard_normal((B, N)); xq = _g.standard_normal((B, d))
w = _g.standard_normal(d); v = _g.standard_normal(d); v /= np.linalg.norm(v)
K = X[0] @ X[0].T
U11 = np.eye(d) * 0.1
TT = np.eye(2 * d) * 0.01
kp = ka.KernelAttentionParams.gaussian(rng(), d, 2, 1, "exp")

def nanify(a, val=np.nan):
    a = np.array(a, dtype=np.float64 if np.asarray(a).dtype.kind in "biu" else None, copy=True)
    a.flat[a.size // 2] = val
    return a

def strided(a):
    a = np.asarray(a)
    big = np.repeat(a, 2, axis=-1) if a.ndim else a
    return big[..., ::2] if a.ndim else a

def big32(a):
    return np.asarray(a, dtype=np.float64) * 0 + 1e39

def run_cli(*argv):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = cli.main(list(argv))
        except SystemExit as e:
            rc = e.code
    return ("__cli__", rc, err.getvalue())

try:  # the wrappers' cases are skipped where torch / jax are not installed
    import torch
    from lsa_native import torch as lt
    tE = torch.from_numpy(E32.copy()); tW = torch.from_numpy(W32.copy())
    tZ0 = torch.from_numpy(Z0.astype(np.float32)); tV = torch.from_numpy(V.astype(np.float32))
    tB = torch.from_numpy(Bk.astype(np.float32)); tC = torch.from_numpy(Ck.astype(np.float32))
    tA = torch.from_numpy(Ak.astype(np.float32)); tr = torch.from_numpy(rk.astype(np.float32))
except ImportError:
    lt = None
try:
    import jax, jax.numpy as jnp
    from lsa_native import jax as lj
    jE = jnp.asarray(E32); jW = jnp.asarray(W32); jZ0 = jnp.asarray(Z0.astype(np.float32))
    jV = jnp.asarray(V.astype(np.float32)); jB = jnp.asarray(Bk.astype(np.float32))
    jC = jnp.asarray(Ck.astype(np.float32))
except ImportError:
    lj = None
spec = smp.LinearPrompts(3, 5, seed=1)
def tmpdir():
    return tempfile.mkdtemp(prefix="corpus_")

def under_as_cap(code, cap_mb=3000):
    # `code` in a fresh interpreter under an address-space cap: its last stdout line back, or its
    # error re-raised with its class when it names one (a crash: RuntimeError, i.e. generic).
    import subprocess, sys, resource
    limit = lambda: resource.setrlimit(resource.RLIMIT_AS, (cap_mb << 20, cap_mb << 20))
    p = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True,
                       preexec_fn=limit, timeout=60)
    if p.returncode == 0:
        return float(p.stdout.split()[-1])
    last = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}"
    for cls in (ValueError, TypeError, FloatingPointError):
        if last.startswith(cls.__name__ + ":"):
            raise cls(last.split(":", 1)[1].strip())
    raise RuntimeError(f"exit {p.returncode}: {last}")

def equal_params():
    a = ka.KernelAttentionParams.gaussian(rng(), 2, 1)
    b = ka.KernelAttentionParams.gaussian(rng(), 2, 1)
    return a == b
"""

# Value pools: (code template with {g} for the good value, expectation).
E, A = "error", "any"
POOLS = {
    "array": [
        ("None", E), ("'abc'", E), ("{g}.astype(complex) + 1j", E), ("{g}[..., :-1]", E),
        ("{g}[None]", E), ("nanify({g})", E), ("nanify({g}, np.inf)", E), ("nanify({g}, -np.inf)", E),
        ("{g} * 1e200", A), ("{g} * 1e300", A), ("{g} * 1e-300", A), ("{g}.astype(np.int32)", A),
        ("{g}.astype(object)", A), ("np.asarray({g}).tolist()", A), ("strided({g})", A),
        ("{g}.astype(np.float16)", A), ("np.float64(1.0)", E), ("{g}.astype(str)", E),
        ("big32({g})", A), ("{g} * 0", A),
    ],
    "prompts": [(t, A if t == "{g}[..., :-1]" else e) for t, e in [
        ("None", E), ("'abc'", E), ("{g}.astype(complex) + 1j", E), ("{g}[..., :-1]", A),
        ("{g}[:, :1]", E), ("{g}[..., :1]", E), ("{g}[None]", E), ("{g}[0]", E), ("nanify({g})", E),
        ("nanify({g}, np.inf)", E), ("{g} * 1e200", A), ("{g} * 1e300", A), ("{g} * 1e-300", A),
        ("{g}.astype(np.int32)", E), ("{g}.astype(object)", E), ("np.asarray({g}).tolist()", A),
        ("strided({g})", A), ("{g}.astype(np.float16)", E), ("{g}.astype(str)", E), ("{g}[:0]", E),
        ("{g} * 0", A)]],
    "free": [(t, A if t in ("{g}[..., :-1]", "{g}[None]") else e) for t, e in [
        ("None", E), ("'abc'", E), ("{g}.astype(complex) + 1j", E), ("{g}[..., :-1]", A),
        ("{g}[None]", A), ("nanify({g})", E), ("nanify({g}, np.inf)", E), ("{g} * 1e200", A),
        ("{g} * 1e300", A), ("{g} * 1e-300", A), ("{g}.astype(np.int32)", A), ("np.asarray({g}).tolist()", A),
        ("strided({g})", A), ("{g}.astype(str)", E), ("{g} * 0", A)]],
    "cov": [
        ("None", E), ("'abc'", E), ("{g} + 0j", E), ("{g}[:-1]", E), ("-{g}", E),
        ("{g} + np.triu(np.ones_like({g}), 1)", E), ("nanify({g})", E), ("nanify({g}, np.inf)", E),
        ("{g} * 1e200", A), ("{g} * 1e-300", A), ("{g} * 0", E), ("{g}.astype(np.int32)", A),
        ("{g}[None]", E), ("np.eye(len({g}) + 1)", A),
    ],
    "stack": [  # a covariance or a stack [S, d, d] of them
        ("None", E), ("'abc'", E), ("{g} + 0j", E), ("{g}[:-1]", E), ("-{g}", E), ("{g}[None]", A),
        ("nanify({g})", E), ("{g} * 1e200", A), ("{g} * 0", E)],
    "int": [
        ("0", E), ("-1", E), ("2.5", E), ("'3'", E), ("None", E), ("True", E), ("10**20", A),
        ("np.nan", E), ("np.int64({g})", A), ("float({g})", A), ("2**70", A),
    ],
    "int0": [  # >= 0
        ("-1", E), ("2.5", E), ("'3'", E), ("None", E), ("10**20", A), ("np.nan", E), ("0", A),
    ],
    "pfloat": [
        ("np.nan", E), ("np.inf", E), ("-1.0", E), ("0.0", E), ("'x'", E), ("None", E), ("1j", E),
        ("1e300", A), ("1e-300", A), ("np.float32('nan')", E), ("-np.inf", E),
    ],
    "nnfloat": [
        ("np.nan", E), ("np.inf", E), ("-1.0", E), ("0.0", A), ("'x'", E), ("None", E), ("1j", E),
        ("1e300", A), ("1e-300", A),
    ],
    "rfloat": [("np.nan", E), ("np.inf", E), ("'x'", E), ("None", E), ("1j", E), ("1e300", A),
               ("-1e300", A)],
    "name": [("'nope'", E), ("None", E), ("3", E), ("''", E), ("['exp', 'nope']", E)],
    "rng": [("None", E), ("0", E), ("'x'", E)],
    "dtype": [("np.int32", E), ("'nope'", E), ("np.float16", E), ("complex", E), ("None", A)],
    "law": [  # covariance_law of LinearPrompts
        ("('exponential', 'a')", E), ("('gamma', 'a', 1.0)", E), ("('two_point', 0.0, 0.0, 0.5)", E),
        ("('two_point', 0.0, 1.0, 1.0)", E), ("('two_point', 1.0, 0.0, 0.0)", E),
        ("('two_point', 1.0, 2.0, 1.5)", E), ("('gamma', -1.0, 1.0)", E), ("('exponential', np.nan)", E),
        ("('uniform', 2.0, 1.0)", E), ("('nope', 1.0)", E), ("('exponential', 1.0, 2.0)", E), ("42", E),
        ("('exponential', 1j)", E), ("('exponential', None)", E), ("('exponential', 1e308)", A),
        ("('gamma', 1e-300, 1.0)", A), ("('uniform', 0.0, 1e300)", A), ("'gamma'", E), ("()", E)],
    "callable": [("42", E), ("'abc'", E), ("lambda z: z[..., None]", E), ("lambda z: z * np.nan", E),
                 ("lambda z: z * 1j", E), ("lambda z: None", E), ("lambda z: 'a'", E),
                 ("lambda z: z[:1]", E), ("lambda z: z * 1e300", A), ("lambda z: z * 1e39", A),
                 ("lambda z: np.tanh(z)", A), ("lambda z: z.astype(np.float32)", A)],
    "bool": [("'yes'", E), ("None", E), ("1.5", E), ("np.bool_(True)", A)],
    "tensor": [("None", E), ("'abc'", E), ("{g}.numpy()", E), ("{g}.double()", E), ("{g}.int()", E),
               ("{g}[..., :-1]", A), ("{g}[None]", E), ("{g} * float('nan')", E),
               ("{g} * 1e30", A), ("{g}.transpose(-1, -2)", A), ("{g}.to(torch.complex64)", E)],
    "jarray": [("None", E), ("'abc'", E), ("[[1.0]]", E), ("{g}.astype(jnp.int32)", E),
               ("{g}[..., :-1]", A), ("{g}[None]", E), ("{g} * 1e30", A)],
    "tdtype": [("torch.int32", E), ("'float'", E), ("None", E), ("np.float32", E)],
    "seed": [("'a'", E), ("-1", E), ("2.5", E), ("np.int64(3)", A), ("None", A)],
    "rundir": [("123", E), ("'/proc/forbidden/run'", E), ("b'/tmp/x'", E), ("None", A)],
}


def _expand(kind: str, good: str):
    opt = kind.endswith("?")  # None allowed
    kind = kind.rstrip("?")
    g = good if good.isidentifier() else f"np.asarray({good})"
    for tmpl, expect in POOLS[kind]:
        code = tmpl.format(g=g)
        if opt and code == "None":
            expect = A
        yield code, expect


# (function, {arg: (good code, kind)}, output names). Arguments are passed by keyword.
F = [
    ("lsa.predict", {"E": ("E64", "prompts"), "W_pv": ("W", "array"), "W_kq": ("W2", "array")}, ["y_hat", "out"]),
    ("lsa.predict", {"E": ("E32", "prompts"), "W_pv": ("W", "array"), "W_kq": ("W2", "array")}, ["y_hat", "out"]),
    ("lsa.loss_and_grad", {"E": ("E64", "prompts"), "y_q": ("yq", "array"), "W_pv": ("W", "array"),
                           "W_kq": ("W2", "array")}, ["loss", "dW_pv", "dW_kq", "d_W_pv", "d_W_kq"]),
    ("lsa.loss_and_grad", {"E": ("E32", "prompts"), "y_q": ("yq", "array"), "W_pv": ("W", "array"),
                           "W_kq": ("W2", "array")}, ["loss", "dW_pv", "dW_kq", "d_W_pv", "d_W_kq"]),
    ("lsa.forward", {"E": ("E64", "prompts"), "W_pv": ("W", "array"), "W_kq": ("W2", "array")}, ["F", "out"]),
    ("lsa.forward", {"E": ("E32", "prompts"), "W_pv": ("W", "array"), "W_kq": ("W2", "array")}, ["F", "out"]),
    ("lsa.vjp", {"E": ("E64", "prompts"), "W_pv": ("W", "array"), "W_kq": ("W2", "array"),
                 "d_F": ("dF", "array")}, ["dE", "dW_pv", "dW_kq", "d_E", "d_W_pv", "d_W_kq"]),
    ("lsa.vjp", {"E": ("E32", "prompts"), "W_pv": ("W", "array"), "W_kq": ("W2", "array"),
                 "d_F": ("dF", "array")}, ["dE", "dW_pv", "dW_kq", "d_E", "d_W_pv", "d_W_kq"]),
    ("lsa.predict_vjp", {"E": ("E64", "prompts"), "W_pv": ("W", "array"), "W_kq": ("W2", "array"),
                         "d_y": ("dy", "array")}, ["dE", "dW_pv", "dW_kq", "d_E", "d_W_pv", "d_W_kq"]),
    ("ka.forward", {"Z0": ("Z0", "prompts"), "V": ("V", "array"), "B": ("Bk", "array"), "C": ("Ck", "array"),
                    "activation": ("'exp'", "name")}, ["Z", "Z_L", "d_V", "d_B", "d_C"]),
    ("ka.forward", {"Z0": ("Z0", "prompts"), "V": ("V", "array"), "B": ("Bk", "array"), "C": ("Ck", "array"),
                    "activation": ("'softmax'", "name")}, ["Z", "Z_L"]),
    ("ka.predict", {"Z0": ("Z0", "prompts"), "V": ("V", "array"), "B": ("Bk", "array"), "C": ("Ck", "array"),
                    "activation": ("'relu'", "name")}, ["TF", "predictions"]),
    ("ka.vjp", {"Z0": ("Z0", "prompts"), "V": ("V", "array"), "B": ("Bk", "array"), "C": ("Ck", "array"),
                "activation": ("'exp'", "name"), "d_Z_out": ("dZ", "array")},
     ["dV", "dB", "dC", "dZ0", "d_V", "d_B", "d_C", "d_Z0"]),
    ("ka.predict_vjp", {"Z0": ("Z0", "prompts"), "V": ("V", "array"), "B": ("Bk", "array"),
                        "C": ("Ck", "array"), "activation": ("'softmax'", "name"), "d_y": ("dy", "array")},
     ["dV", "dB", "dC", "dZ0", "d_V", "d_B", "d_C", "d_Z0"]),
    ("ka.loss_and_grad", {"Z0": ("Z0", "prompts"), "y_q": ("yq", "array"), "V": ("V", "array"),
                          "B": ("Bk", "array"), "C": ("Ck", "array"), "activation": ("'exp'", "name")},
     ["loss", "dV", "dB", "dC", "d_V", "d_B", "d_C"]),
    ("ka.loss_and_grad", {"Z0": ("Z0", "prompts"), "y_q": ("yq", "array"), "V": ("V", "array"),
                          "B": ("Bk", "array"), "C": ("Ck", "array"), "activation": ("'softmax'", "name")},
     ["loss", "dV", "dB", "dC", "d_V", "d_B", "d_C"]),
    ("ka.loss_and_grad_sparse", {"Z0": ("Z0", "prompts"), "y_q": ("yq", "array"), "A": ("Ak", "array"),
                                 "r": ("rk", "array"), "B": ("Bk", "array"), "C": ("Ck", "array"),
                                 "activation": ("'linear'", "name")}, ["loss", "dA", "dr", "dB", "dC"]),
    ("ka.sparse_value", {"A": ("Ak", "array"), "r": ("rk", "array")}, ["V"]),
    ("ka.context_size", {"dim": ("3", "int"), "context": ("5", "int"), "layers": ("2", "int"),
                         "heads": ("1", "int")}, []),
    ("ka.KernelAttentionParams.gaussian", {"rng": ("rng()", "rng"), "dim": ("3", "int"),
                                           "layers": ("2", "int"), "heads": ("1", "int"),
                                           "activations": ("'exp'", "name"), "scale": ("0.1", "pfloat")}, []),
    ("ka.KernelAttentionParams.functional_gd", {"dim": ("3", "int"), "step_sizes": ("np.array([0.1, 0.2])", "free"),
                                                "activations": ("'exp'", "name"),
                                                "bandwidth": ("1.0", "pfloat"), "Sigma": ("Lam", "cov?")}, []),
    ("kp.loss", {"Z0": ("Z0", "prompts"), "y_q": ("yq", "array")}, ["loss", "predictions"]),
    ("pop.loss", {"W_pv": ("W", "array"), "W_kq": ("W2", "array"), "Lambda": ("Lam", "cov"), "N": ("5", "int"),
                  "noise_std": ("0.1", "nnfloat")}, ["loss"]),
    ("pop.loss_and_grad", {"W_pv": ("W", "array"), "W_kq": ("W2", "array"), "Lambda": ("Lam", "cov"),
                           "N": ("5", "int"), "noise_std": ("0.1", "nnfloat")}, ["loss", "dW_pv", "dW_kq"]),
    ("pop.loss_and_grad_random_diagonal", {"W_pv": ("W", "array"), "W_kq": ("W2", "array"),
                                           "moments": ("mom", "free"), "N": ("5", "int")}, ["loss"]),
    ("pop.loss_and_grad_samples", {"W_pv": ("W", "array"), "W_kq": ("W2", "array"),
                                   "Lambdas": ("np.stack([Lam, 2 * Lam])", "array"), "N": ("5", "int")}, ["loss"]),
    ("pop.reduced_loss_and_grad", {"U11": ("U11", "array"), "u": ("0.5", "rfloat"), "Lambda": ("Lam", "cov"),
                                   "N": ("5", "int")}, ["loss"]),
    ("pop.diagonal_moments", {"mean": ("np.ones(3)", "array"), "second": ("2 * np.ones(3)", "array"),
                              "third": ("6 * np.ones(3)", "array")}, ["moments"]),
    ("pop.exponential_moments", {"d": ("3", "int"), "scale": ("1.0", "pfloat")}, []),
    ("pop.covariance_law_moments", {"d": ("3", "int"), "covariance_law": ("('gamma', 2.0, 1.0)", "law")}, []),
    ("pop.minimum_loss", {"Lambda": ("Lam", "cov"), "N": ("5", "int")}, ["loss"]),
    ("pop.gradient_flow", {"W_pv": ("W", "array"), "W_kq": ("W2", "array"), "N": ("5", "int"),
                           "Lambda": ("Lam", "cov"), "times": ("[0.0, 1.0]", "free"),
                           "step": ("0.01", "pfloat"), "rtol": ("1e-8", "pfloat"),
                           "grad_tol": ("0.0", "nnfloat"), "max_steps": ("100000", "int"),
                           "method": ("'dopri5'", "name")}, ["loss", "losses"]),
    ("pop.reduced_gradient_flow", {"U11": ("U11", "array"), "u": ("0.5", "rfloat"), "Lambda": ("Lam", "cov"),
                                   "N": ("5", "int"), "times": ("[0.0, 1.0]", "free"),
                                   "gap_tol": ("0.0", "nnfloat")}, ["loss"]),
    ("train.gradient_descent", {"W_pv": ("W", "array"), "W_kq": ("W2", "array"), "Lambda": ("Lam", "cov"),
                                "N": ("5", "int"), "step": ("0.01", "pfloat"), "n_steps": ("10", "int0"),
                                "record_every": ("1", "int")}, ["loss", "losses"]),
    ("data.embed", {"X": ("X", "array"), "y": ("y", "array"), "x_q": ("xq", "array"),
                    "dtype": ("np.float64", "dtype")}, ["E"]),
    ("data.linear_regression_prompts", {"rng": ("rng()", "rng"), "batch": ("4", "int"), "dim": ("3", "int"),
                                        "context": ("5", "int"), "Lambda": ("Lam", "cov?"),
                                        "noise_std": ("0.1", "nnfloat"), "dtype": ("np.float64", "dtype")}, []),
    ("data.kernel_gp_prompts", {"rng": ("rng()", "rng"), "batch": ("4", "int"), "dim": ("3", "int"),
                                "context": ("5", "int"), "kernel": ("'exp'", "name"),
                                "bandwidth": ("1.0", "pfloat"), "Sigma": ("Lam", "cov?"),
                                "dtype": ("np.float64", "dtype")}, []),
    ("data.unit_sphere", {"rng": ("rng()", "rng"), "shape": ("(2, 3)", "free"), "dim": ("3", "int"),
                          "Sigma": ("Lam", "cov?")}, []),
    ("data.sqrtm", {"M": ("Lam", "cov")}, ["Sigma"]),
    ("data.inverse_sqrtm", {"M": ("Lam", "cov")}, ["Sigma"]),
    ("bl.kernel_matrix", {"kernel": ("'exp'", "name"), "X1": ("X", "array"), "X2": ("X", "array"),
                          "bandwidth": ("1.0", "pfloat")}, ["K"]),
    ("bl.psd_part", {"K": ("K", "free")}, []),
    ("bl.bayes_estimator", {"X": ("X", "array"), "y": ("y", "array"), "x_q": ("xq", "array"),
                            "kernel": ("'exp'", "name"), "bandwidth": ("1.0", "pfloat?"),
                            "jitter": ("0.0", "nnfloat")}, []),
    ("bl.functional_gd", {"X": ("X", "array"), "y": ("y", "array"), "x_q": ("xq", "array"),
                          "kernel": ("'relu'", "name"), "step_sizes": ("np.array([0.1, 0.1])", "free"),
                          "bandwidth": ("1.0", "pfloat?")}, []),
    ("bl.ols", {"X": ("X", "array"), "y": ("y", "array"), "x_q": ("xq", "array")}, []),
    ("bl.ridge", {"X": ("X", "array"), "y": ("y", "array"), "x_q": ("xq", "array"), "lam": ("0.1", "pfloat")}, []),
    ("bl.zero_estimator", {"X": ("X", "array"), "y": ("y", "array"), "x_q": ("xq", "array")}, []),
    ("th.gamma", {"Lambda": ("Lam", "cov"), "N": ("5", "int")}, ["Gamma"]),
    ("th.thm41_limits", {"Lambda": ("Lam", "cov"), "N": ("5", "int")}, []),
    ("th.sigma_bound", {"Lambda": ("Lam", "cov"), "N": ("5", "int")}, []),
    ("th.assumption33_init", {"dim": ("3", "int"), "sigma": ("0.1", "pfloat"), "rng": ("rng()", "rng")}, []),
    ("th.limit_prediction", {"X": ("X", "array"), "y": ("y", "array"), "x_q": ("xq", "array"),
                             "Lambda": ("Lam", "cov"), "N": ("5", "int")}, []),
    ("th.relative_distance", {"W_pv": ("W", "array"), "W_kq": ("W2", "array"), "W_pv_ref": ("W2", "array"),
                              "W_kq_ref": ("W", "array")}, []),
    ("th.pl_constant", {"Lambda": ("Lam", "cov"), "N": ("5", "int"), "sigma": ("0.01", "pfloat"),
                        "ThetaThetaT": ("TT", "array")}, ["mu"]),
    ("th.thm42_prediction_error", {"Lambda": ("Lam", "cov"), "N": ("5", "int"), "M": ("7", "int"),
                                   "w": ("w", "array?")}, []),
    ("th.cor43_thresholds", {"Lambda": ("Lam", "cov"), "eps": ("0.1", "pfloat")}, []),
    ("th.thm45_limits", {"moments": ("mom", "free"), "N": ("5", "int")}, []),
    ("th.random_cov_prediction_matrix", {"moments": ("mom", "free"), "N": ("5", "int")}, []),
    ("th.quadratic_task_moments", {"Lambda": ("Lam", "cov"), "w": ("w", "array"), "v": ("v", "array"),
                                   "beta": ("0.5", "rfloat")}, ["Sigma", "best_linear_error"]),
    ("th.query_shift_error", {"Lambda": ("Lam", "cov"), "N": ("5", "int"), "M": ("7", "int"),
                              "Lambda_query": ("2 * Lam", "cov?"), "noise_std": ("0.1", "nnfloat")}, []),
    ("th.covariate_shift_error", {"Lambda": ("Lam", "cov"), "N": ("5", "int"), "M": ("7", "int"),
                                  "Lambda_test": ("2 * Lam", "stack")}, []),
    ("th.random_cov_slopes", {"moments": ("mom", "free"), "N": ("5", "int")}, []),
    ("th.random_diagonal_error", {"a": ("np.ones(3) * 0.5", "array"), "M": ("7", "int"),
                                  "moments": ("mom", "array")}, []),
    ("smp.normals", {"n": ("10", "int0"), "seed": ("1", "int0"), "step": ("2", "int0")}, []),
    ("smp.uniforms", {"n": ("10", "int0"), "seed": ("1", "int0"), "prompt": ("2", "int0")}, []),
    ("smp.gammas", {"n": ("10", "int0"), "shape": ("2.0", "pfloat")}, []),
    ("smp.philox4x32", {"counters": ("np.zeros((3, 4), np.uint32)", "array"), "seed": ("1", "int0")}, []),
    ("smp.LinearPrompts(3, 5).sample", {"batch": ("4", "int"), "step": ("0", "int0"),
                                        "dtype": ("np.float32", "dtype")}, []),
    ("smp.LinearPrompts", {"dim": ("3", "int"), "context": ("5", "int"), "Lambda": ("Lam", "cov?"),
                           "noise_std": ("0.1", "nnfloat"), "seed": ("0", "int0")}, []),
    ("smp.KernelGPPrompts", {"dim": ("3", "int"), "context": ("5", "int"), "kernel": ("'exp'", "name"),
                             "bandwidth": ("1.0", "pfloat"), "Sigma": ("Lam", "cov?")}, []),
    ("smp.KernelGPPrompts(3, 5).sample", {"batch": ("4", "int"), "step": ("0", "int0")}, []),
    ("train.make_optimizer", {"optimizer": ("'adam'", "name"), "lr": ("0.01", "pfloat")}, []),
    ("train.SGD", {"lr": ("0.01", "pfloat"), "momentum": ("0.5", "nnfloat"), "clip_norm": ("1.0", "pfloat?")}, []),
    ("train.clip_grad_norm", {"grad": ("np.ones(3)", "free"), "max_norm": ("1.0", "pfloat")}, []),
    ("train.make_schedule", {"schedule": ("'cosine'", "name?"), "total_steps": ("10", "int")}, []),
    ("train.fit", {"objective": ("train.LSAObjective(W, W2)", "name"), "optimizer": ("'adam'", "name"),
                   "steps": ("3", "int"), "data": ("smp.LinearPrompts(3, 5)", "name"), "lr": ("0.01", "pfloat")},
     ["loss", "theta"]),
    ("train.fit", {"objective": ("train.PopulationObjective(W, W2, 5, Lambda=Lam)", "name"),
                   "optimizer": ("'sgd'", "name"), "steps": ("3", "int"), "lr": ("0.01", "pfloat"),
                   "record_every": ("1", "int")}, ["loss", "theta"]),
    ("train.PopulationObjective", {"W_pv": ("W", "array"), "W_kq": ("W2", "array"), "N": ("5", "int"),
                                   "Lambda": ("Lam", "cov")}, []),
    ("train.LSAObjective", {"W_pv": ("W", "array"), "W_kq": ("W2", "array"), "method": ("'tokens'", "name")}, []),
    ("train.relative_distance", {"theta": ("np.ones(3)", "array"), "target": ("np.ones(3) * 2", "array")}, []),
    ("train.dist_to_identity", {"M": ("Lam", "free")}, []),
    ("ln.set_num_threads", {"n": ("1", "int0")}, []),
    # ---- sampling (issue 23): every sampler's arguments and its output checks ----
    ("smp.LinearPrompts", {"dim": ("3", "int"), "context": ("5", "int"), "covariance_law": ("('exponential', 1.0)", "law"),
                           "tasks": ("4", "int?"), "noise_std": ("0.1", "nnfloat")}, []),
    ("smp.LinearPrompts", {"dim": ("3", "int"), "context": ("5", "int"), "query_Lambda": ("Lam", "cov?"),
                           "covariates": ("'sphere'", "name"), "query_noise": ("True", "bool")}, []),
    ("smp.LinearPrompts(3, 5, covariance_law=('gamma', 2.0, 1.0)).sample_lambdas",
     {"batch": ("4", "int"), "step": ("0", "int0"), "dtype": ("np.float64", "dtype")}, ["lambdas"]),
    ("spec.sample", {"batch": ("4", "int"), "step": ("1", "int0"), "dtype": ("np.float64", "dtype"),
                     "label_fn": ("np.sin", "callable"), "query": ("'iid'", "name")}, ["y", "y_q", "E"]),
    ("spec.sample_embedding", {"batch": ("4", "int"), "step": ("1", "int0"), "dtype": ("np.float32", "dtype")}, []),
    ("spec.lsa_loss_and_grad", {"W_pv": ("W32", "array"), "W_kq": ("W32", "array"), "batch": ("8", "int"),
                                "step": ("0", "int0"), "method": ("'tokens'", "name")},
     ["loss", "dW_pv", "dW_kq"]),
    ("smp.KernelGPPrompts(3, 5, 'relu').sample", {"batch": ("4", "int"), "step": ("0", "int0"),
                                                  "dtype": ("np.float64", "dtype"), "return_xi": ("True", "bool")}, []),
    ("smp.NumpyKernelGPPrompts(3, 5).sample", {"batch": ("4", "int"), "step": ("0", "int0"),
                                               "dtype": ("np.float32", "dtype")}, []),
    ("smp.KernelGPPrompts", {"dim": ("3", "int"), "context": ("5", "int"), "kernel": ("'linear'", "name"),
                             "seed": ("3", "int0")}, []),
    # ---- train: objectives, optimizers, schedules, fit arguments ----
    ("train.Adam", {"lr": ("0.01", "pfloat"), "betas": ("(0.9, 0.999)", "free"), "eps": ("1e-8", "nnfloat"),
                    "clip_norm": ("1.0", "pfloat?")}, []),
    ("train.AdamW", {"lr": ("0.01", "pfloat"), "weight_decay": ("0.01", "nnfloat")}, []),
    ("train.Schedule", {"kind": ("'cosine'", "name"), "gamma": ("0.5", "pfloat"), "step_size": ("2", "int"),
                        "total_steps": ("10", "int"), "min_factor": ("0.1", "nnfloat"),
                        "warmup_steps": ("0", "int0")}, []),
    ("train.KernelAttentionObjective", {"params": ("kp", "name")}, []),
    ("train.Prompts", {"spec": ("spec", "name"), "batch": ("4", "int"), "resample_every": ("1", "int")}, []),
    ("train.fit", {"objective": ("train.LSAObjective(W, W2)", "name"), "optimizer": ("'adam'", "name"),
                   "steps": ("2", "int"), "data": ("train.Prompts(spec, batch=4)", "name"),
                   "eval_data": ("spec.sample(8)", "name?"), "eval_every": ("1", "int?"),
                   "record_every": ("1", "int"), "bayes_loss": ("0.1", "nnfloat?"),
                   "run_dir": ("tmpdir()", "rundir"), "checkpoint_every": ("1", "int?"),
                   "keep_checkpoints": ("2", "int"), "progress": ("False", "bool?")}, ["loss", "theta"]),
    # ---- torch / JAX wrappers (skipped where not installed) ----
    ("lt.lsa_predict", {"E": ("tE", "tensor"), "W_pv": ("tW", "tensor"), "W_kq": ("tW", "tensor")}, ["y_hat"]),
    ("lt.lsa_forward", {"E": ("tE", "tensor"), "W_pv": ("tW", "tensor"), "W_kq": ("tW", "tensor")}, ["F"]),
    ("lt.kernel_attention", {"Z0": ("tZ0", "tensor"), "V": ("tV", "tensor"), "B": ("tB", "tensor"),
                             "C": ("tC", "tensor"), "activation": ("'softmax'", "name"),
                             "save_context": ("False", "bool")}, ["Z_L", "Z"]),
    ("lt.kernel_attention_predict", {"Z0": ("tZ0", "tensor"), "V": ("tV", "tensor"), "B": ("tB", "tensor"),
                                     "C": ("tC", "tensor"), "activation": ("'exp'", "name")},
     ["y_hat", "predictions"]),
    ("lt.sparse_value", {"A": ("tA", "tensor"), "r": ("tr", "tensor")}, []),
    ("lt.LinearSelfAttention", {"dim": ("3", "int"), "sigma": ("0.1", "pfloat"), "output": ("'full'", "name"),
                                "dtype": ("torch.float64", "tdtype"), "seed": ("0", "seed")}, []),
    ("lt.KernelAttention", {"dim": ("3", "int"), "layers": ("2", "int"), "heads": ("1", "int"),
                            "activations": ("'exp'", "name"), "sparse": ("True", "bool"),
                            "scale": ("0.1", "pfloat"), "output": ("'prediction'", "name"),
                            "dtype": ("torch.float32", "tdtype"), "seed": ("0", "seed")}, []),
    ("lj.lsa_predict", {"E": ("jE", "jarray"), "W_pv": ("jW", "jarray"), "W_kq": ("jW", "jarray")}, ["y_hat"]),
    ("lj.lsa_forward", {"E": ("jE", "jarray"), "W_pv": ("jW", "jarray"), "W_kq": ("jW", "jarray")}, ["F"]),
    ("lj.kernel_attention", {"Z0": ("jZ0", "jarray"), "V": ("jV", "jarray"), "B": ("jB", "jarray"),
                             "C": ("jC", "jarray"), "activation": ("'exp'", "name")}, ["Z_L"]),
    ("lj.kernel_attention_predict", {"Z0": ("jZ0", "jarray"), "V": ("jV", "jarray"), "B": ("jB", "jarray"),
                                     "C": ("jC", "jarray"), "activation": ("'softmax'", "name")},
     ["y_hat", "predictions"]),
]

# Hand-written cases: (code, expect, extra names).
SPECIAL = [
    # ---- sampling (issue 23): outputs checked once, degenerate laws refused ----
    ("smp.LinearPrompts(3, 5, 1e200 * np.eye(3)).sample(4)", A, ["Lambda", "E"]),
    ("smp.LinearPrompts(3, 5, 1e200 * np.eye(3)).sample_embedding(4)", A, ["Lambda", "E"]),
    ("smp.LinearPrompts(3, 5, 1e76 * np.eye(3)).sample(4)", A, ["Lambda", "E"]),
    ("smp.LinearPrompts(3, 5, 1e-100 * np.eye(3)).sample(4)", A, ["Lambda", "E"]),
    ("smp.LinearPrompts(3, 5, 1e300 * np.eye(3)).sample(4, dtype=np.float64)", A, ["Lambda", "E"]),
    ("smp.LinearPrompts(3, 5, noise_std=1e200).sample(4)", A, ["noise_std", "E", "y"]),
    ("smp.LinearPrompts(3, 5, noise_std=1e300).sample(4, dtype=np.float64)", A, ["noise_std", "E", "y"]),
    ("smp.LinearPrompts(3, 5, noise_std=1e-50).sample(4)", A, ["noise_std"]),
    ("smp.LinearPrompts(3, 5, covariance_law=('exponential', 1e308)).sample(4, dtype=np.float64)", A, ["covariance_law", "E"]),
    ("smp.LinearPrompts(3, 5, covariance_law=('exponential', 1e308)).sample_lambdas(4)", A, ["covariance_law", "lambdas"]),
    ("smp.LinearPrompts(3, 5, covariance_law=('exponential', 1e37)).sample_lambdas(4, dtype=np.float32)", A, ["covariance_law", "lambdas"]),
    ("smp.LinearPrompts(3, 5, covariance_law=('gamma', 1e300, 1e10)).sample(4, dtype=np.float64)", A, ["covariance_law", "E"]),
    ("smp.LinearPrompts(3, 5, covariance_law=('exponential', 1e300)).lsa_loss_and_grad(W, W2, batch=4, dtype=np.float64)", A, ["covariance_law", "loss", "dW_pv", "dW_kq"]),
    ("smp.LinearPrompts(3, 5, 1e200 * np.eye(3)).lsa_loss_and_grad(W32, W32, batch=4)", A, ["Lambda", "loss"]),
    ("smp.LinearPrompts(3, 5, covariance_law=('two_point', 0, 0, 0.5))", E, ["covariance_law"]),
    ("smp.LinearPrompts(3, 5, covariance_law=('gamma', 'a', 1))", E, ["covariance_law", "shape"]),
    ("smp.LinearPrompts(3, 5, tasks=2, covariance_law=('uniform', 0.0, 1e300)).sample(4, dtype=np.float64)", A, ["covariance_law", "E"]),
    ("smp.KernelGPPrompts(3, 5, Sigma=1e300 * np.eye(3)).sample(4)", A, ["Sigma", "E"]),
    ("smp.KernelGPPrompts(3, 5, Sigma=1e300 * np.eye(3)).sample(4, dtype=np.float64)", A, ["Sigma", "E"]),
    ("smp.KernelGPPrompts(3, 5, Sigma=1e80 * np.eye(3)).sample(4)", A, ["Sigma", "E"]),
    ("smp.KernelGPPrompts(2, 3, 'exp', bandwidth=0.07).sample(50)", A, ["bandwidth", "y_q", "E"]),
    ("smp.NumpyKernelGPPrompts(3, 5, Sigma=1e300 * np.eye(3)).sample(4)", A, ["Sigma", "X", "E"]),
    ("data.linear_regression_prompts(rng(), 4, 3, 5, noise_std=1e300, dtype=np.float32)", A, ["noise_std", "y"]),
    ("data.linear_regression_prompts(rng(), 4, 3, 5, Lambda=1e300 * np.eye(3), dtype=np.float32)", A, ["Lambda", "X"]),
    ("data.embed(X * 1e39, y, xq, np.float32)", E, ["X"]),
    ("spec.sample(4, query='nope')", E, ["query"]),
    ("spec.sample(4, query='orthogonal')", E, ["query", "orthogonal"]),
    ("data.check_covariance(np.zeros((0, 0)))", E, ["Lambda"]),
    ("data.check_covariance(np.zeros((0, 0)), 'Sigma')", E, ["Sigma"]),
    ("lsa.split_shape(np.zeros((2, 3)))", E, ["E"]),
    ("lsa.split_shape(None)", E, ["E"]),
    ("under_as_cap('import lsa_native as ln, numpy as np; from lsa_native.sampling import normals; "
     "n = ln.set_num_threads(4096); normals(4096 * 2000); print(ln.num_threads())')", A, ["n"]),
    # ---- train: fit argument handling, divergence, run directories (issue 23 families 1, 5, 6) ----
    ("train.fit(train.LSAObjective(W, W2), 'adam', steps=2, data=train.Prompts(spec, batch=4), eval_data=spec, eval_every=1)", E, ["eval_data"]),
    ("train.fit(train.LSAObjective(W, W2), 'adam', steps=2, data=train.Prompts(spec, batch=4), eval_data=train.Prompts(spec, batch=4), eval_every=1)", A, ["eval_data"]),
    # A bare callable is one metric (column "metric"); callbacks=None is no callbacks: accepted.
    ("train.fit(train.LSAObjective(W, W2), 'adam', steps=2, data=train.Prompts(spec, batch=4), metrics=lambda p: 1.0)", A, ["metrics"]),
    ("train.fit(train.LSAObjective(W, W2), 'adam', steps=2, data=train.Prompts(spec, batch=4), metrics={'m': lambda p: None})", E, ["metrics", "m"]),
    ("train.fit(train.LSAObjective(W, W2), 'adam', steps=2, data=train.Prompts(spec, batch=4), metrics={'m': lambda p: 'x'})", E, ["metrics", "m"]),
    ("train.fit(train.LSAObjective(W, W2), 'adam', steps=2, data=train.Prompts(spec, batch=4), callbacks=None)", A, ["callbacks"]),
    ("train.fit(train.LSAObjective(W, W2), 'adam', steps=2, data=train.Prompts(spec, batch=4), callbacks=[1])", E, ["callbacks"]),
    ("train.fit(train.LSAObjective(W, W2), 'adam', steps=2, data=train.Prompts(spec, batch=4), run_dir=123)", E, ["run_dir"]),
    ("train.fit(train.LSAObjective(W, W2), 'adam', steps=2, data=train.Prompts(spec, batch=4), eval_data=smp.LinearPrompts(4, 5).sample(8), eval_every=1)", E, ["eval_data"]),
    ("train.fit(train.LSAObjective(W, W2), 'adam', steps=2, data=train.Prompts(spec, batch=4), bayes_loss=np.nan)", E, ["bayes_loss"]),
    ("train.fit(train.LSAObjective(W, W2), 'adam', steps=2, data=train.Prompts(spec, batch=4), bayes_loss=np.inf)", E, ["bayes_loss"]),
    ("train.fit(lambda th, step: (1.0, th * 1j), 'adam', steps=2, theta0=np.ones(3))", E, ["objective", "grad", "gradient"]),
    ("train.fit(lambda th, step: (None, th), 'adam', steps=2, theta0=np.ones(3))", E, ["objective", "loss"]),
    ("train.fit(lambda th, step: ('a', th), 'adam', steps=2, theta0=np.ones(3))", E, ["objective", "loss"]),
    ("train.fit(train.LSAObjective(W * 1e15, W2 * 1e15), 'sgd', steps=5, data=train.Prompts(spec, batch=4), lr=1e10)", A, ["loss", "diverged", "TrainingDiverged", "lr"]),
    ("train.fit(train.LSAObjective(W, W2), train.Adam(lr=1e30, eps=0.0), steps=5, data=train.Prompts(spec, batch=4))", A, ["loss", "diverged", "lr"]),
    ("train.Schedule(min_factor='a')", E, ["min_factor"]),
    ("train.Schedule(kind='step', gamma='a')", E, ["gamma"]),
    ("train.Schedule(kind='cosine', total_steps='a')", E, ["total_steps"]),
    ("train.fit(train.LSAObjective(W, W2), 'adam', steps=2, data=train.Prompts(spec, batch=4), run_dir='/proc/forbidden/run', checkpoint_every=1)", E, ["run_dir"]),
    ("train.fit(train.LSAObjective(W, W2), 'adam', steps=2, data=train.Prompts(spec, batch=4), run_dir=tmpdir(), checkpoint_every=1, keep_checkpoints=0)", E, ["keep_checkpoints"]),
    ("train.fit(train.LSAObjective(W, W2), 'adam', steps=2, data=train.Prompts(spec, batch=4), run_dir=tmpdir(), resume='yes')", E, ["resume"]),
    # ---- torch / JAX wrappers: the cases ----
    ("lt.LinearSelfAttention(3, sigma=np.float32(0.1))", A, ["sigma"]),
    ("lt.kernel_attention(tZ0, tV, tB, tC, None)", E, ["activation"]),
    ("lt.sparse_value(Ak, rk)", E, ["A", "r"]),
    ("lt.LinearSelfAttention(3)(tE[..., :-1].contiguous())", A, ["E"]),
    ("lt.KernelAttention(3, 2, sparse=False)(tZ0 * float('nan'))", E, ["Z0"]),
    ("lt.KernelAttention(3, 2, save_context=True)", E, ["save_context"]),
    ("lj.kernel_attention(jZ0, jV, jB, jC, None)", E, ["activation"]),
    ("lj.lsa_predict(jE, jnp.eye(5, dtype=jnp.float32), jW)", E, ["W_pv"]),
    ("lj.lsa_predict(np.asarray(E32), W32, W32)", A, ["E"]),
    # ---- CLI: every flag, values that used to pass validation and fail the run ----
    ("run_cli('reproduce', 'zfb-thm41', '--seed', '18446744073709551616', '--out', tmpdir())", E, ["seed", "--seed"]),
    ("run_cli('reproduce', 'zfb-thm41', '--seed', '4294967296', '--out', tmpdir())", E, ["seed", "--seed"]),
    ("run_cli('reproduce', 'zfb-thm41', '--seed', 'x')", E, ["seed", "--seed"]),
    ("run_cli('reproduce', 'zfb-thm41', '--set', 'context=100000', '--out', tmpdir())", E, ["context"]),
    ("run_cli('reproduce', 'zfb-thm41', '--set', 'batch=1000000000000', '--out', tmpdir())", E, ["batch"]),
    ("run_cli('reproduce', 'zfb-thm41', '--set', 'steps=1e3', '--out', tmpdir())", E, ["steps"]),
    ("run_cli('reproduce', 'zfb-thm41', '--set', 'lr=x', '--out', tmpdir())", E, ["lr"]),
    ("run_cli('reproduce', 'zfb-thm41', '--set', 'lr=1e9', '--out', tmpdir())", E, ["lr"]),
    ("run_cli('reproduce', 'zfb-thm41', '--set', 'flow_time=1e300', '--out', tmpdir())", E, ["flow_time"]),
    ("run_cli('reproduce', 'zfb-thm41', '--set', 'batch=1000000', '--set', 'context=2000', '--out', tmpdir())", E, ["batch", "context"]),
    ("run_cli('reproduce', 'zfb-thm42', '--set', 'contexts=10,100000', '--out', tmpdir())", E, ["contexts"]),
    ("run_cli('reproduce', 'zfb-thm42', '--set', 'test_lengths=5,a', '--out', tmpdir())", E, ["test_lengths"]),
    ("run_cli('reproduce', 'zfb-random-cov', '--set', 'scales=1,-4', '--out', tmpdir())", E, ["scales"]),
    ("run_cli('reproduce', 'ccs-fig1', '--set', 'kernels=linear,nope', '--out', tmpdir())", E, ["kernels"]),
    ("run_cli('reproduce', 'ccs-fig1', '--set', 'seeds=0', '--out', tmpdir())", E, ["seeds"]),
    ("run_cli('reproduce', 'ccs-fig2', '--set', 'depths=1,100000', '--out', tmpdir())", E, ["depths"]),
    ("run_cli('reproduce', 'ccs-fig3-5-6', '--set', 'eval_batch=10000000000', '--out', tmpdir())", E, ["eval_batch"]),
    ("run_cli('reproduce', 'ccs-prop31', '--full', '--set', 'layers=100000', '--out', tmpdir())", E, ["layers"]),
    ("run_cli('reproduce', 'zfb-thm41', '--workers', '100000', '--out', tmpdir())", E, ["workers", "--workers"]),
    ("run_cli('reproduce', 'zfb-thm41', '--workers', 'x')", E, ["workers", "--workers"]),
    ("run_cli('reproduce', 'zfb-thm41', '--out', '')", E, ["out", "--out"]),
    ("run_cli('reproduce', 'zfb-thm41', '--out', '/dev/null/x')", E, ["out", "--out"]),
    ("run_cli('reproduce', 'zfb-thm41', '--scheduler', 'not an address', '--out', tmpdir())", E, ["scheduler", "--scheduler"]),
    ("run_cli('reproduce', 'zfb-thm41', '--bogus')", E, ["bogus", "unrecognized"]),
    ("run_cli('reproduce', 'zfb-thm41', '--full', '--set', 'steps=0', '--out', tmpdir())", E, ["steps"]),
    ("run_cli('demo', '--plot', '/proc/x.png', '--quiet')", E, ["plot", "--plot"]),
    ("run_cli('demo', '--plot', '/tmp', '--quiet')", E, ["plot", "--plot"]),
    ("run_cli('demo', '--plot', '', '--quiet')", E, ["plot", "--plot"]),
    ("run_cli('demo', '--context', '100000', '--quiet')", E, ["context", "--context"]),
    ("run_cli('demo', '--batch', '1000000000000', '--quiet')", E, ["batch", "--batch"]),
    ("run_cli('demo', '--seed', '18446744073709551616', '--quiet')", E, ["seed", "--seed"]),
    ("run_cli('demo', '--lr', '1e9', '--quiet')", E, ["lr", "--lr"]),
    ("run_cli('demo', '--flow-time', '1e300', '--quiet')", E, ["flow-time", "--flow-time"]),
    ("run_cli('demo', '--steps', '1e3', '--quiet')", E, ["steps", "--steps"]),
    ("run_cli('demo', '--bogus')", E, ["bogus", "unrecognized"]),
    ("run_cli('list', '--bogus')", E, ["bogus", "unrecognized"]),

    # out= overlapping an input must not give wrong numbers.
    ("lsa.predict(E64, W, W2, out=W[0, :B])", E, ["out", "W_pv"]),
    ("lsa.predict(E64, W, W2, out=E64[0, 0, :B])", E, ["out", "E"]),
    ("lsa.forward(E64, W, W2, out=E64)", E, ["out", "E"]),
    ("lsa.predict(E32, W32, W32, out=W32[0])", E, ["out", "W_pv", "W_kq"]),
    ("lsa.predict(E64, W, W2, out=np.zeros(B, np.float32))", E, ["out"]),
    ("lsa.predict(E64, W, W2, out=np.zeros(B + 1))", E, ["out"]),
    ("lsa.predict(E64, W, W2, out=np.zeros(2 * B)[::2])", E, ["out"]),
    ("lsa.predict(E64, W, W2, out=[0.0] * B)", E, ["out"]),
    # float32 overflow when casting parameters / large E in float32.
    ("lsa.predict(E32, W * 1e39, W2)", A, ["W_pv", "float32"]),
    ("lsa.loss_and_grad(E32 * 1e13, yq, W, W2)", A, ["E", "dW_kq", "dW_pv", "loss"]),
    ("lsa.loss_and_grad(E32 * 1e18, yq, W, W2)", A, ["E", "dW_kq", "dW_pv", "loss"]),
    ("lsa.vjp(E32 * 1e12, W, W2, dF)", A, ["E", "dE", "dW_kq", "dW_pv"]),
    ("lsa.vjp(E64 * 1e100, W, W2, dF)", A, ["E", "dE", "dW_kq", "dW_pv"]),
    ("lsa.forward(E32 * 1e14, W, W2)", A, ["E", "F"]),
    ("lsa.forward(E64 * 1e120, W, W2)", A, ["E", "F"]),
    ("lsa.predict_vjp(E32 * 1e14, W, W2, dy)", A, ["E", "dE", "dW_kq", "dW_pv"]),
    ("lsa.vjp(E64, W, W2, dF * 1e308)", A, ["d_F", "dE", "dW_kq", "dW_pv"]),
    ("lsa.vjp(E64, W, W2, nanify(dF))", E, ["d_F", "dE", "dW_kq", "dW_pv"]),
    ("lsa.predict_vjp(E64, W, W2, nanify(dy))", E, ["d_y", "dE", "dW_kq", "dW_pv"]),
    # kernel attention at large logits: 0·inf in exp attention.
    ("ka.loss_and_grad(Z0 * 30, yq, V, Bk * 10, Ck * 10, 'exp')", A, ["d_V", "d_B", "d_C", "loss", "predictions"]),
    ("ka.loss_and_grad(Z0 * 30, yq, V, Bk * 10, Ck * 10, 'softmax')", A, ["d_V", "d_B", "d_C", "loss", "predictions"]),
    ("ka.loss_and_grad(Z0.astype(np.float32) * 10, yq, V, Bk * 10, Ck * 10, 'exp')", A, ["d_V", "d_B", "d_C", "loss", "predictions"]),
    ("ka.vjp(Z0 * 30, V, Bk * 10, Ck * 10, 'exp', dZ)", A, ["dV", "dB", "dC", "dZ0", "d_V", "d_B", "d_C", "d_Z0"]),
    ("ka.forward(Z0 * 30, V, Bk * 10, Ck * 10, 'exp')", A, ["Z", "Z_L", "exp"]),
    ("ka.vjp(Z0, V, Bk, Ck, 'exp', nanify(dZ))", E, ["d_Z_out"]),
    ("ka.predict_vjp(Z0, V, Bk, Ck, 'exp', nanify(dy))", E, ["d_y"]),
    ("ka.predict_vjp(Z0.astype(np.float32) * 30, V, Bk * 10, Ck * 10, 'exp', dy)", A,
     ["dV", "dB", "dC", "dZ0", "d_V", "d_B", "d_C", "d_Z0", "predictions"]),
    ("ka.loss_and_grad(Z0, yq, V, Bk, Ck, ['exp'])", A, ["activation"]),
    ("ka.loss_and_grad(Z0, yq, V, Bk, Ck, [None])", E, ["activation"]),
    ("ka.loss_and_grad(Z0, yq, V, Bk, Ck, [])", E, ["activation"]),
    ("ka.loss_and_grad(Z0, yq, V, Bk, Ck, 'EXP')", E, ["activation"]),
    ("ka.KernelAttentionParams.gaussian(rng(), 3, 2, activations=None)", E, ["activations"]),
    ("ka.KernelAttentionParams.gaussian(rng(), 3, 2, scale=np.nan)", E, ["scale"]),
    ("ka.KernelAttentionParams.functional_gd(3, [np.nan, 0.1])", E, ["step_sizes"]),
    ("ka.KernelAttentionParams.functional_gd(3, [])", E, ["step_sizes"]),
    ("ka.KernelAttentionParams.functional_gd(3, [[[0.1]]])", E, ["step_sizes"]),
    ("ka.KernelAttentionParams.functional_gd(3, [0.1], bandwidth=0)", E, ["bandwidth"]),
    ("equal_params()", A, []),
    ("kp == kp.from_vector(kp.to_vector())", A, []),
    ("kp.from_vector(np.full(kp.to_vector().size, np.nan))", E, ["theta"]),
    ("kp.from_vector(np.ones(3))", E, ["theta"]),
    # data
    ("data.linear_regression_prompts(rng(), 4, 3, 5, noise_std=-1)", E, ["noise_std"]),
    ("data.linear_regression_prompts(rng(), 4, 3, 5, dtype=np.int32)", E, ["dtype"]),
    ("data.kernel_gp_prompts(rng(), 4, 3, 5, dtype=np.int32)", E, ["dtype"]),
    ("data.embed(X, y, xq, dtype=np.int32)", E, ["dtype"]),
    ("data.kernel_gp_prompts(rng(), 4, 3, 5, 'exp', bandwidth=1e-3)", A, ["bandwidth", "K"]),
    ("data.kernel_gp_prompts(rng(), 4, 3, 5, 'exp', bandwidth=0.0)", E, ["bandwidth"]),
    ("data.embed(X[:, :, :0], y, xq[:, :0])", E, ["X", "x_q"]),
    ("data.embed(X, y, xq * np.nan)", E, ["x_q"]),
    ("data.unit_sphere(rng(), (2,), 0)", E, ["dim"]),
    ("data.unit_sphere(rng(), (-1,), 3)", E, ["shape"]),
    # baselines outside their domain.
    ("bl.ridge(X, y, xq, lam=-1.0)", E, ["lam"]),
    ("bl.ridge(X, y, xq, lam=np.nan)", E, ["lam"]),
    ("bl.ols(X[:, :1], y[:, :1], xq)", A, ["X"]),
    ("bl.ols(X * 0, y, xq)", A, ["X"]),
    ("bl.kernel_matrix('exp', X * 100, X * 100, 1.0)", A, ["X1", "X2", "bandwidth", "K"]),
    ("bl.bayes_estimator(X * 100, y, xq, 'exp', 1.0)", A, ["X", "bandwidth", "K"]),
    ("bl.bayes_estimator(X, y, xq, 'exp', 1.0, jitter=-1.0)", E, ["jitter"]),
    ("bl.functional_gd(X, y, xq, 'exp', [1e300, 1e300], 1.0)", A, ["step_sizes"]),
    ("bl.functional_gd(X, y, xq, 'exp', [np.nan], 1.0)", E, ["step_sizes"]),
    ("bl.functional_gd(X, y, xq, 'exp', [], 1.0)", E, ["step_sizes"]),
    ("bl.bayes_estimator(data.kernel_gp_prompts(rng(), 4, 3, 5, 'relu'))", A, []),
    ("bl.bayes_estimator(X)", E, ["y", "x_q", "kernel"]),
    ("bl.psd_part(np.ones((3, 4)))", E, ["K"]),
    ("bl.psd_part(nanify(K))", E, ["K"]),
    # theory out of domain.
    ("th.pl_constant(Lam, 5, 10.0, TT)", E, ["sigma"]),
    ("th.pl_constant(Lam, 5, 0.01, -TT)", E, ["ThetaThetaT"]),
    ("th.cor43_thresholds(Lam, 10.0)", A, ["eps"]),
    ("th.cor43_thresholds(Lam, -0.1)", E, ["eps"]),
    ("th.thm42_error(Lam, 5, 7, np.ones(3), Lam, best_linear_error=-1.0)", E, ["best_linear_error"]),
    ("th.thm42_error(Lam, 5, 7, np.ones(3), Lam)", A, []),
    ("th.thm42_error(Lam, 5, 7, np.ones(3) * np.nan, Lam)", E, ["a"]),
    ("th.thm42_error(Lam, 5, 7, np.ones(2), Lam)", E, ["a"]),
    ("th.thm42_error(Lam, 5, 7, np.ones(3), -Lam)", E, ["Sigma"]),
    ("th.limit_predictor_error(np.eye(3), 7, Lam)", A, []),
    ("th.limit_predictor_error(np.eye(3) * np.nan, 7, Lam)", E, ["A"]),
    ("th.limit_predictor_error(np.eye(2), 7, Lam)", E, ["A", "Lambda_test"]),
    ("th.limit_predictor_error(np.eye(3), 0, Lam)", E, ["M"]),
    ("th.limit_predictor_error(np.eye(3), 7, Lam, noise_std=-1)", E, ["noise_std"]),
    ("th.random_diagonal_error(np.ones(3), 7, mom, noise_std=np.nan)", E, ["noise_std"]),
    ("th.random_diagonal_error(np.ones(3), 7, -mom)", E, ["moments"]),
    ("th.random_cov_slopes(mom, 5, new_moments=-mom)", E, ["new_moments"]),
    ("th.random_cov_slopes(mom, 5, new_moments=mom * np.nan)", E, ["new_moments"]),
    ("th.quadratic_task_moments(Lam, w, v * 2, 0.5)", A, ["v"]),
    ("th.thm42_prediction_error(Lam, 5, 7, w * np.nan)", E, ["w"]),
    ("th.assumption33_init(3, 0.1, Theta=np.ones((2, 2)))", E, ["Theta"]),
    ("th.assumption33_init(3, 0.1, Theta=np.ones((3, 3)) * np.nan)", E, ["Theta"]),
    ("th.assumption33_init(3, 0.1)", A, ["rng"]),
    # population
    ("pop.loss(W * 1e200, W2 * 1e200, Lam, 5)", A, ["loss", "W_pv", "W_kq"]),
    ("pop.loss_and_grad(W * 1e100, W2 * 1e100, Lam, 5)", A, ["loss", "dW_pv", "dW_kq"]),
    ("pop.loss_and_grad_random_diagonal(W, W2, np.array([[1.0] * 3, [1.0] * 3, [0.5] * 3]), 5)", E, ["moments"]),
    ("pop.loss_and_grad_random_diagonal(W, W2, mom[:2], 5)", E, ["moments"]),
    ("pop.gradient_flow(W, W2, 5, Lambda=Lam, times=[0, 1e7])", A, ["times", "max_steps"]),
    ("pop.gradient_flow(W, W2, 5, Lambda=Lam, times=[0, 1.0], method='rk4', step=1e-300)", A, ["step"]),
    ("pop.gradient_flow(W, W2, 5, Lambda=Lam, times=[0, 1.0], grad_tol=np.nan)", E, ["grad_tol"]),
    ("pop.gradient_flow(W, W2, 5, Lambda=Lam, times=[0, 1.0], gap_tol=np.nan)", E, ["gap_tol"]),
    ("pop.gradient_flow(W, W2, 5, Lambda=Lam, times=[0, 1.0], loss_target=np.nan)", E, ["loss_target"]),
    ("pop.gradient_flow(W, W2, 5, Lambda=Lam, times=[0, 1.0], max_steps=10**30)", A, ["max_steps"]),
    ("pop.gradient_flow(W, W2, 5, Lambda=Lam, times=[1.0, 0.0])", E, ["times"]),
    ("pop.gradient_flow(W, W2, 5, Lambda=Lam, times=[])", E, ["times"]),
    ("pop.gradient_flow(W, W2, 5, times=[0, 1.0])", E, ["Lambda", "moments", "samples"]),
    ("pop.gradient_flow(W, W2, 5, Lambda=Lam, moments=mom, times=[0, 1.0])", E, ["Lambda", "moments", "samples"]),
    ("pop.gradient_flow(W * 30, W2 * 30, 5, Lambda=Lam, times=[0, 1e-3])", A, ["loss", "diverged", "step"]),
    ("pop.gradient_flow(W, W2, 5, Lambda=Lam, times=[0, 1.0], method='euler')", E, ["method"]),
    ("train.gradient_descent(W, W2, Lam, 5, step=1e3, n_steps=50)", A, ["step", "loss", "diverged"]),
    ("pop.gradient_flow(W, W2, 5, Lambda=Lam, times=[0, 1.0], max_steps=3)", A, ["max_steps"]),
    ("pop.reduced_gradient_flow(U11, 0.5, Lam, 5, times=[0, 1.0], method='rk4', step=np.nan)", E, ["step"]),
    ("pop.exponential_moments(3, scale=1e200)", A, ["scale", "moments"]),
    ("pop.diagonal_moments(1.0, 0.5, 1.0)", E, ["second", "mean", "moments"]),
    ("pop.diagonal_moments(1.0, 2.0, 1.0)", E, ["third", "moments"]),
    ("pop.minimum_loss(Lam * 1e300, 5)", A, ["Lambda", "loss", "minimum_loss"]),
    ("pop.loss_and_grad(W, W2, Lam, 5, noise_std=1e200)", A, ["noise_std", "loss"]),
    # sampling
    ("smp.LinearPrompts(3, 5).sample(2**62)", A, ["batch"]),
    ("smp.LinearPrompts(3, 5).sample(4, out=np.zeros(3))", E, ["out", "E"]),
    ("smp.LinearPrompts(3, 5).sample(4, E=np.zeros(3))", E, ["E", "out"]),
    ("smp.LinearPrompts(3, 5).sample_embedding(4, E=np.zeros((4, 4, 6), np.float32), y_q=np.zeros(3, np.float32))", E, ["y_q"]),
    ("smp.LinearPrompts(3, 5, noise_std=-1)", E, ["noise_std"]),
    ("smp.LinearPrompts(3, 5, covariates='nope')", E, ["covariates"]),
    ("smp.LinearPrompts(3, 5, seed=-1)", E, ["seed"]),
    ("smp.LinearPrompts(3, 5, seed=2**64)", E, ["seed"]),
    ("smp.LinearPrompts(3, 5).lsa_loss_and_grad(W, W2, batch=4, method='nope')", E, ["method"]),
    ("smp.LinearPrompts(3, 5).lsa_loss_and_grad(W * np.nan, W2, batch=4)", E, ["W_pv"]),
    ("smp.LinearPrompts(3, 5).lsa_loss_and_grad(W * 1e30, W2 * 1e30, batch=4)", A, ["W_pv", "loss", "dW_pv", "dW_kq"]),
    ("smp.LinearPrompts(3, 5).sample_lambdas(4)", A, ["covariance_law"]),
    ("smp.gammas(10, 1e-300)", A, ["shape"]),
    ("smp.gammas(10, 1e300)", A, ["shape"]),
    ("smp.normals(10, dtype=np.int32)", E, ["dtype"]),
    ("smp.normals(10, stream=-1)", E, ["stream"]),
    ("smp.normals(10, start=-1)", E, ["start"]),
    ("smp.normals(2**62)", A, ["n"]),
    ("smp.philox4x32(np.zeros((3, 3), np.uint32), 1)", E, ["counters"]),
    ("smp.philox4x32(np.zeros((3, 4)) - 1, 1)", E, ["counters"]),
    ("ln.set_num_threads(2.5)", E, ["n"]),
    ("ln.set_num_threads(-1)", E, ["n"]),
    ("ln.set_num_threads(10**6)", E, ["n"]),
    # train
    ("train.fit(train.PopulationObjective(W, W2, 5, Lambda=Lam), 'sgd', steps=50, lr=1e6)", A, ["loss", "diverged", "lr"]),
    ("train.fit(train.PopulationObjective(W, W2, 5, Lambda=Lam), 'nope', steps=3)", E, ["optimizer"]),
    ("train.fit(train.PopulationObjective(W, W2, 5, Lambda=Lam), 'adam', steps=3, lr=np.nan)", E, ["lr"]),
    ("train.fit(train.PopulationObjective(W, W2, 5, Lambda=Lam), 'adam', steps=3, betas=(1.5, 0.9))", E, ["betas"]),
    ("train.fit(train.PopulationObjective(W, W2, 5, Lambda=Lam), 'adam', steps=3, eps=-1)", E, ["eps"]),
    ("train.fit(train.PopulationObjective(W, W2, 5, Lambda=Lam), 'adam', steps=3, bogus=1)", E, ["bogus"]),
    ("train.fit(train.PopulationObjective(W, W2, 5, Lambda=Lam), 'adam', steps=3, theta0=np.ones(3))", E, ["theta0"]),
    ("train.fit(train.PopulationObjective(W, W2, 5, Lambda=Lam), 'adam', steps=3, theta0=np.full(2 * (d + 1) ** 2, np.nan))", E, ["theta0"]),
    ("train.fit(train.PopulationObjective(W, W2, 5, Lambda=Lam), 'adam', steps=3, eval_every=0)", E, ["eval_every"]),
    ("train.fit(train.PopulationObjective(W, W2, 5, Lambda=Lam), 'adam', steps=3, checkpoint_every=2)", E, ["checkpoint_every", "run_dir"]),
    ("train.fit(train.PopulationObjective(W, W2, 5, Lambda=Lam), 'adam', steps=3, target=np.ones(3))", E, ["target"]),
    ("train.fit(train.PopulationObjective(W, W2, 5, Lambda=Lam), 'adam', steps=3, schedule='nope')", E, ["schedule"]),
    ("train.fit(train.LSAObjective(W, W2), 'adam', steps=3)", E, ["data"]),
    ("train.fit(train.LSAObjective(W, W2), 'adam', steps=3, data=42)", E, ["data"]),
    ("train.fit(lambda th, step: (float(np.sum(th**2)), 2 * th), 'adam', steps=3, theta0=np.ones(3))", A, []),
    ("train.fit(lambda th, step: (np.nan, th), 'adam', steps=3, theta0=np.ones(3))", A, ["loss", "diverged"]),
    ("train.fit(lambda th, step: 1.0, 'adam', steps=3, theta0=np.ones(3))", E, ["objective"]),
    ("train.fit(42, 'adam', steps=3)", E, ["objective"]),
    ("train.fit(train.KernelAttentionObjective(kp), 'adam', steps=3, data=train.Prompts(smp.KernelGPPrompts(3, 5), batch=8), lr=10.0)", A, ["loss", "diverged"]),
    ("train.Prompts(smp.LinearPrompts(3, 5), batch=0)", E, ["batch"]),
    ("train.Prompts(smp.LinearPrompts(3, 5), batch=4, resample_every=0)", E, ["resample_every"]),
    ("train.Prompts(42, batch=4)", E, ["spec"]),
    ("train.heldout(smp.LinearPrompts(3, 5), batch=-1)", E, ["batch"]),
    ("train.bayes_loss(data.kernel_gp_prompts(rng(), 4, 3, 5), jitter=-1)", E, ["jitter"]),
    ("train.bayes_loss(data.linear_regression_prompts(rng(), 4, 3, 5))", A, ["batch", "kernel"]),
    ("train.make_schedule('step', gamma=np.nan)", E, ["gamma"]),
    ("train.make_schedule('cosine', total_steps=0)", E, ["total_steps"]),
    ("train.make_schedule('cosine', min_factor=2.0)", E, ["min_factor"]),
    ("train.make_schedule('nope')", E, ["schedule", "kind"]),
    ("train.Adam(lr=0.01, betas=(0.9,))", E, ["betas"]),
    ("train.AdamW(lr=0.01, weight_decay=-1)", E, ["weight_decay"]),
    ("train.SGD(lr=0.01, nesterov=True)", E, ["nesterov", "momentum"]),
    ("train.LSAObjective(W, W2, dtype=np.int32)", E, ["dtype"]),
    ("train.LSAObjective(W, W2, method='nope')", E, ["method"]),
    ("train.KernelAttentionObjective(42)", E, ["params"]),
    ("train.PopulationObjective(W, W2, 5)", E, ["Lambda", "moments", "samples"]),
    ("train.sgd_lsa(W, W2, lambda g: data.linear_regression_prompts(g, 4, 3, 5), steps=3, lr=np.nan, rng=rng())", E, ["lr"]),
    ("train.sgd_lsa(W, W2, lambda g: data.linear_regression_prompts(g, 4, 3, 5), steps=0, lr=0.01, rng=rng())", E, ["steps"]),
    ("train.sgd_lsa(W, W2, lambda g: data.linear_regression_prompts(g, 4, 3, 5), steps=3, lr=1e6, rng=rng())", A, ["lr", "loss", "diverged"]),
    ("train.kernel_attention_identity_distances(42)", E, ["params"]),
    ("train.dist_to_identity(np.ones((2, 3)))", E, ["M"]),
    ("train.dist_to_identity(np.zeros((3, 3)))", A, ["M"]),
    ("train.relative_distance(np.ones(3), np.zeros(3))", A, ["target"]),
    ("train.relative_distance(np.ones(3), np.ones(4))", E, ["theta", "target"]),
    ("train.History().record(0, np.nan)", A, ["loss"]),
    # experiments
    ("exps.run('nope')", E, ["id"]),
    ("exps.run('zfb-thm41', None, dim=0)", E, ["dim"]),
    ("exps.run('zfb-thm41', None, dim=2.5)", E, ["dim"]),
    ("exps.run('zfb-thm41', None, lr=np.nan)", E, ["lr"]),
    ("exps.run('zfb-thm41', None, bogus=1)", E, ["bogus"]),
    ("exps.run('zfb-thm41', None, seed=-1)", E, ["seed"]),
    ("exps.run('zfb-thm41', '/proc/forbidden/x')", E, ["out"]),
    ("exps.run('zfb-thm42', None, contexts=[])", E, ["contexts"]),
    ("exps.run('zfb-thm42', None, contexts=[0])", E, ["contexts"]),
    ("exps.run('zfb-thm42', None, beta='x')", E, ["beta"]),
    ("exps.run('zfb-shifts', None, noise=[-1.0])", E, ["noise"]),
    ("exps.run('zfb-random-cov', None, scales=[np.inf])", E, ["scales"]),
    ("exps.run('ccs-prop31', None, layers=-2)", E, ["layers"]),
    ("exps.run('ccs-fig1', None, kernels=['nope'])", E, ["kernels", "kernel"]),
    ("exps.run('ccs-fig1', None, activations=['nope'])", E, ["activations"]),
    ("exps.run('ccs-fig2', None, depths=[0])", E, ["depths"]),
    ("exps.run('ccs-fig3-5-6', None, trace_every=0)", E, ["trace_every"]),
    ("exps.run('ccs-fig4', None, targets=['nope'])", E, ["targets"]),
    ("exps.run('ccs-fig4', None, full='yes')", E, ["full"]),
    ("exps.run('zfb-thm41', None, progress='x', dim=-1)", E, ["dim", "progress"]),
    ("exps.run('zfb-thm41', None, scheduler=42, dim=-1)", E, ["dim", "scheduler"]),
    # cli
    ("run_cli('demo', '--dim', '2', '--context', '3', '--batch', '16', '--steps', '2', '--flow-time', '0.1', '--plot', '/nonexistent_dir_xyz/x.png', '--quiet')", E, ["plot", "--plot"]),
    ("run_cli('demo', '--dim', '0', '--quiet')", E, ["dim", "--dim"]),
    ("run_cli('demo', '--dim', 'x')", E, ["dim", "--dim"]),
    ("run_cli('demo', '--lr', 'nan', '--quiet')", E, ["lr", "--lr"]),
    ("run_cli('demo', '--lr', '-1', '--quiet')", E, ["lr", "--lr"]),
    ("run_cli('demo', '--steps', '-5', '--quiet')", E, ["steps", "--steps"]),
    ("run_cli('demo', '--flow-time', 'inf', '--quiet')", E, ["flow_time", "--flow-time"]),
    ("run_cli('demo', '--seed', '-1', '--quiet')", E, ["seed", "--seed"]),
    ("run_cli('reproduce', 'nope')", E, ["id"]),
    ("run_cli('reproduce', 'zfb-thm41', '--set', 'dim=0')", E, ["dim"]),
    ("run_cli('reproduce', 'zfb-thm41', '--set', 'dim')", E, ["dim", "--set"]),
    ("run_cli('reproduce', 'zfb-thm41', '--set', 'bogus=1')", E, ["bogus"]),
    ("run_cli('reproduce', 'zfb-thm41', '--seed', '-1')", E, ["seed", "--seed"]),
    ("run_cli('reproduce', 'zfb-thm41', '--workers', '-1')", E, ["workers", "--workers"]),
    ("run_cli('reproduce', 'zfb-thm41', '--out', '/proc/forbidden')", E, ["out", "--out"]),
    ("run_cli('reproduce', 'all', '--set', 'dim=3')", E, ["--set"]),
    ("run_cli('reproduce', 'zfb-thm41', '--scheduler', 'tcp://127.0.0.1:1')", E, ["scheduler", "--scheduler"]),
    ("run_cli('reproduce', 'zfb-thm41', '--set', 'lr=nan')", E, ["lr"]),
    ("run_cli('reproduce', 'zfb-thm42', '--set', 'contexts=[]')", E, ["contexts"]),
    ("run_cli('bogus')", E, ["bogus", "choose"]),
    ("run_cli()", E, ["command", "required"]),
]


def build_cases() -> list[dict]:
    cases = []

    def add(area, code, expect, names):
        cases.append({"area": area, "code": code, "expect": expect, "names": sorted(set(names))})

    for func, args, outputs in F:
        area = func.split(".")[0]
        names = list(args) + list(outputs) + [func.split(".")[-1]]
        base = ", ".join(f"{k}={g}" for k, (g, _) in args.items())
        add(area, f"{func}({base})", A, names)
        for arg, (good, kind) in args.items():
            for bad, expect in _expand(kind, good):
                call = ", ".join(f"{k}={bad if k == arg else g}" for k, (g, _) in args.items())
                add(area, f"{func}({call})", expect, names)
    for code, expect, names in SPECIAL:
        area = code.split(".")[0].split("(")[0]
        add(area, code, expect, names)
    for i, c in enumerate(cases):
        c["id"] = i
    return cases


# --------------------------------------------------------------------------------------------
# Worker side.

def _nonfinite(x, depth=0) -> bool:
    import numpy as np
    import dataclasses

    if type(x).__name__ == "History":  # rows without a value hold NaN by design (e.g. lr at the end)
        return False
    if depth > 4 or x is None or isinstance(x, (str, bytes, bool)):
        return False
    if isinstance(x, (float, complex, np.floating, np.complexfloating)):
        return not np.isfinite(x)
    if isinstance(x, np.ndarray):
        if x.dtype.kind in "fc":
            return not bool(np.all(np.isfinite(x)))
        if x.dtype.kind == "O":
            return any(_nonfinite(v, depth + 1) for v in x.ravel()[:1000])
        return False
    if isinstance(x, dict):
        return any(_nonfinite(v, depth + 1) for v in x.values())
    if isinstance(x, (list, tuple)):
        return any(_nonfinite(v, depth + 1) for v in x[:1000])
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return any(_nonfinite(getattr(x, f.name), depth + 1) for f in dataclasses.fields(x))
    return False


def _names_something(msg: str, names) -> bool:
    return any(re.search(r"(?<![A-Za-z0-9_])" + re.escape(n) + r"(?![A-Za-z0-9_])", msg)
               for n in names)


def classify(case: dict) -> tuple[str, str]:
    ns: dict = {}
    exec(PREAMBLE, ns)
    for wrapper, package in (("lt", "torch"), ("lj", "jax")):
        if ns[wrapper] is None and re.search(rf"(?<![A-Za-z0-9_]){wrapper}\.", case["code"]):
            return "skip", f"{package} is not installed"
    try:
        res = eval(case["code"], ns)
    except (ValueError, TypeError, FloatingPointError, OSError) as e:
        msg = f"{type(e).__name__}: {e}"
        return ("clean" if _names_something(str(e), case["names"]) else "generic"), msg[:300]
    except BaseException as e:  # noqa: BLE001 - classifying every failure is the point
        return "generic", f"{type(e).__name__}: {e}"[:300]
    if isinstance(res, tuple) and len(res) == 3 and isinstance(res[0], str) and res[0] == "__cli__":
        _, rc, err = res
        if rc in (0, None):
            return "silent", f"exit {rc} on a bad command line"
        last = err.strip().splitlines()[-1] if err.strip() else ""
        if "Traceback" in err or not _names_something(err, case["names"]):
            return "generic", f"exit {rc}: {last}"[:300]
        return "clean", f"exit {rc}: {last}"[:300]
    if _nonfinite(res):
        return "silent", f"non-finite value returned: {type(res).__name__}"
    if case["expect"] == E:
        return "silent", f"bad argument accepted, returned {type(res).__name__}: {str(res)[:120]}"
    return "ok", ""


def worker() -> None:
    out = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    cases = build_cases()
    for line in sys.stdin:
        i = int(line)
        try:
            cls, detail = classify(cases[i])
        except BaseException as e:  # noqa: BLE001 - a classifier bug must not look like a crash
            cls, detail = "generic", f"classifier: {type(e).__name__}: {e}"
        out.write(json.dumps({"id": i, "cls": cls, "detail": detail}) + "\n")


# --------------------------------------------------------------------------------------------
# Parent side: a pool of workers, one case at a time each, with a per-case time limit.

class Worker:
    def __init__(self, python: str):
        self.proc = subprocess.Popen([python, os.path.abspath(__file__), "--worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     bufsize=1, start_new_session=True,
                                     cwd="/tmp")
        self.case = None
        self.started = 0.0

    def send(self, i: int) -> None:
        self.case, self.started = i, time.monotonic()
        self.proc.stdin.write(f"{i}\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


def run(cases, python: str, jobs: int, timeout: float, progress: bool = True) -> dict:
    todo = [c["id"] for c in cases][::-1]
    results = {}
    workers = [Worker(python) for _ in range(jobs)]
    t0 = time.monotonic()
    try:
        while todo or any(w.case is not None for w in workers):
            for k, w in enumerate(workers):
                if w.case is None and todo:
                    try:
                        w.send(todo.pop())
                    except BrokenPipeError:
                        workers[k] = Worker(python)
            busy = {w.proc.stdout.fileno(): w for w in workers if w.case is not None}
            ready, _, _ = select.select(list(busy), [], [], 0.2)
            for fd in ready:
                w = busy[fd]
                line = w.proc.stdout.readline()
                if line:
                    r = json.loads(line)
                    results[r["id"]] = r
                    w.case = None
                else:  # the worker died
                    results[w.case] = {"id": w.case, "cls": "crash",
                                       "detail": f"worker exit {w.proc.wait()}"}
                    workers[workers.index(w)] = Worker(python)
            now = time.monotonic()
            for k, w in enumerate(workers):
                if w.case is not None and now - w.started > timeout:
                    results[w.case] = {"id": w.case, "cls": "hang", "detail": f"> {timeout:.0f} s"}
                    w.kill()
                    workers[k] = Worker(python)
            if progress and sys.stderr.isatty():
                print(f"\r{len(results)}/{len(cases)} ({time.monotonic() - t0:.0f} s)", end="",
                      file=sys.stderr, flush=True)
    finally:
        for w in workers:
            w.kill()
    if progress:
        print(file=sys.stderr)
    return results


CLASSES = ["ok", "clean", "generic", "silent", "crash", "hang", "skip"]

# Surfaces (--surface) by case area (the code's first name): the rest of the API is "core".
SURFACES = {"sampling": ("smp", "spec", "data"), "train": ("train",), "torch": ("lt",),
            "jax": ("lj",), "cli": ("run_cli",)}


def surface(area: str) -> str:
    return next((name for name, areas in SURFACES.items() if area in areas), "core")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--python", default=sys.executable, help="interpreter with lsa_native installed")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds before a call is a hang")
    ap.add_argument("--json", help="write every case with its class to this file")
    ap.add_argument("--list", action="store_true", help="print the cases and exit")
    ap.add_argument("--only", help="regular expression: run only cases whose code matches")
    ap.add_argument("--surface", help="comma-separated surfaces to run: "
                    + ", ".join(list(SURFACES) + ["core"]) + " (default: all)")
    ap.add_argument("--show", default="generic,silent,crash,hang",
                    help="classes whose cases are printed (comma-separated)")
    a = ap.parse_args()
    if a.worker:
        worker()
        return 0
    cases = build_cases()
    if a.only:
        cases = [c for c in cases if re.search(a.only, c["code"])]
    if a.surface:
        wanted = set(a.surface.split(","))
        unknown = wanted - set(SURFACES) - {"core"}
        if unknown:
            ap.error(f"--surface: unknown {sorted(unknown)}; expected {list(SURFACES) + ['core']}")
        cases = [c for c in cases if surface(c["area"]) in wanted]
    if a.list:
        for c in cases:
            print(c["id"], c["expect"], c["code"])
        print(len(cases), "cases")
        return 0
    ids = [c["id"] for c in cases]
    by_id = {c["id"]: c for c in build_cases()}
    sub = [by_id[i] for i in ids]
    t0 = time.monotonic()
    results = run(sub, a.python, a.jobs, a.timeout)
    wall = time.monotonic() - t0
    # run() indexes by case id; map back.
    counts = collections.Counter(r["cls"] for r in results.values())
    area_counts = collections.defaultdict(collections.Counter)
    for i, r in results.items():
        area_counts[by_id[i]["area"]][r["cls"]] += 1
    show = set(a.show.split(","))
    for i in sorted(results):
        r = results[i]
        if r["cls"] in show:
            print(f"[{r['cls']}] #{i} {by_id[i]['code']}\n        {r['detail']}")
    print(f"\n{len(results)} calls in {wall:.0f} s with {a.python}")
    print("| area | " + " | ".join(CLASSES) + " |")
    print("|---" * (len(CLASSES) + 1) + "|")
    for area in sorted(area_counts):
        print(f"| {area} | " + " | ".join(str(area_counts[area][c]) for c in CLASSES) + " |")
    print("| **total** | " + " | ".join(str(counts[c]) for c in CLASSES) + " |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump([{**by_id[i], **results[i]} for i in sorted(results)], f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
