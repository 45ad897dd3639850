"""Every CPU kernel table, forced through LSA_NATIVE_CPU_ISA (read once per process, so each table
runs in a child process), gives the baseline table's results: LSA prediction/forward/VJP, the
H-head LSA, kernel attention (every activation), the samplers, the fused sampled steps, the exact
H-head population loss. Random streams: uniforms are
the same bits on every table and thread count; normals and prompts agree within the stated
rounding bound (the SIMD log/sqrt/sin/cos of each table round differently, a few ulp); every
table's draws are identical across thread counts. A table this CPU cannot run falls back to the
best one below it (cpu_kernel_isa() says which ran): the test skips it and names the reason."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import lsa_native

from conftest import SEED

LABELS = ("baseline", "avx2-fma", "avx512")
# Normals (and the prompts built from them) across tables: |Δ| <= bound · max(1, |z|).
NORMAL_BOUND = {np.float32: 4e-6, np.float64: 1e-14}
# Gamma variates across tables, relative (x = d·(1 + c·z)³ carries z's rounding): see test_isa.cpp.
GAMMA_BOUND = {np.float32: 2e-5, np.float64: 1e-13}
# Kernel outputs across tables, relative to max(1, max |x|): FMA contraction and vector widths.
KERNEL_TOL = {np.float32: 2e-4, np.float64: 1e-11}

CHILD = r'''
import sys
import numpy as np
import lsa_native as ln
from lsa_native import kernel_attention as ka
from lsa_native.sampling import random as rnd
from lsa_native.sampling import LinearPrompts

seed, out = int(sys.argv[1]), sys.argv[2]
RANGE_STARTS, RANGE_MAX = @RANGES@
RANGE_END = max(RANGE_STARTS) + RANGE_MAX
res = {"isa": np.array(ln.cpu_kernel_isa())}
for threads in (1, 2):
    ln.set_num_threads(threads)
    for dt in (np.float32, np.float64):
        tag = f"{np.dtype(dt).name}_t{threads}"
        res[f"uniforms_{tag}"] = rnd.uniforms(9001, seed=seed, start=7, dtype=dt)
        res[f"normals_{tag}"] = rnd.normals(9001, seed=seed, start=3, dtype=dt)
        # Ranges of every length 0 .. RANGE_MAX at starts inside a block, a group of 8 blocks, a
        # Philox call (heads and tails of the fills), concatenated; the parent slices them.
        for kind, fill in (("uniforms", rnd.uniforms), ("normals", rnd.normals)):
            res[f"{kind}_long_{tag}"] = fill(RANGE_END, seed=seed, step=5, dtype=dt)
            res[f"{kind}_ranges_{tag}"] = np.concatenate(
                [fill(n, seed=seed, step=5, start=s, dtype=dt) for s in RANGE_STARTS for n in range(RANGE_MAX + 1)])
        for law, kw in (("fixed", {}), ("exp", {"covariance_law": ("exponential", 1.0), "noise_std": 0.3})):
            lp = LinearPrompts(5, 21, seed=seed, **kw)
            b = lp.sample(37, step=2, dtype=dt)
            res[f"prompts_{law}_{tag}"] = b.E
            W = np.random.default_rng(seed).standard_normal((2, 6, 6)).astype(dt) * 0.2
            for method in ("tokens", "wishart"):
                loss, g1, g2 = lp.lsa_loss_and_grad(W[0], W[1], batch=37, step=2, method=method, dtype=dt)
                res[f"fused_{method}_{law}_{tag}"] = np.concatenate([[loss], g1.ravel(), g2.ravel()])
        res[f"gammas_{tag}"] = rnd.gammas(501, 2.5, seed=seed, dtype=dt)
ln.set_num_threads(0)
g = np.random.default_rng(seed)
for dt in (np.float32, np.float64):
    name = np.dtype(dt).name
    for (B, d, N) in ((3, 1, 1), (7, 5, 20), (19, 5, 20), (2, 20, 100)):
        E = g.standard_normal((B, d + 1, N + 1)).astype(dt)
        y = g.standard_normal(B).astype(dt)
        Wp, Wk = (g.standard_normal((d + 1, d + 1)).astype(dt) / (d + 1) for _ in range(2))
        dF = g.standard_normal(E.shape).astype(dt)
        k = f"{name}_{B}_{d}_{N}"
        res[f"lsa_predict_{k}"] = ln.lsa.predict(E, Wp, Wk)
        res[f"lsa_forward_{k}"] = ln.lsa.forward(E, Wp, Wk)
        loss, a, c = ln.lsa.loss_and_grad(E, y, Wp, Wk)
        res[f"lsa_lossgrad_{k}"] = np.concatenate([[loss], a.ravel(), c.ravel()])
        res[f"lsa_vjp_{k}"] = np.concatenate([x.ravel() for x in ln.lsa.vjp(E, Wp, Wk, dF)])
        res[f"lsa_pvjp_{k}"] = np.concatenate([x.ravel() for x in ln.lsa.predict_vjp(E, Wp, Wk, y)])
        # The multi-head kernels live in the LSA tables (multihead_kernels.inl): H = 2 heads.
        Wph, Wkh = (g.standard_normal((2, d + 1, d + 1)).astype(dt) / (d + 1) for _ in range(2))
        res[f"mh_predict_{k}"] = ln.multihead.predict(E, Wph, Wkh)
        loss, a, c = ln.multihead.loss_and_grad(E, y, Wph, Wkh)
        res[f"mh_lossgrad_{k}"] = np.concatenate([[loss], a.ravel(), c.ravel()])
        res[f"mh_vjp_{k}"] = np.concatenate([x.ravel() for x in ln.multihead.vjp(E, Wph, Wkh, dF)])
    # B = 21: whole groups of prompts in the vector lanes (loss_and_grad) and a remainder.
    for (B, d, n, L, H) in ((3, 1, 1, 1, 1), (4, 3, 7, 2, 2), (5, 5, 30, 3, 1), (21, 3, 7, 2, 2)):
        Z0 = g.standard_normal((B, d + 1, n + 1)).astype(dt)
        y = g.standard_normal(B).astype(dt)
        V = (0.1 / (d + 1) * g.standard_normal((L, H, d + 1, d + 1))).astype(dt)
        Bm, Cm = ((0.3 / d * g.standard_normal((L, H, d, d))).astype(dt) for _ in range(2))
        dZ = g.standard_normal(Z0.shape).astype(dt)
        for act in ka.ACTIVATIONS:
            k = f"{name}_{B}_{d}_{n}_{L}_{H}_{act}"
            res[f"ka_forward_{k}"] = ka.forward(Z0, V, Bm, Cm, act)
            loss, *grads = ka.loss_and_grad(Z0, y, V, Bm, Cm, act, input_grad=True)
            res[f"ka_lossgrad_{k}"] = np.concatenate([[loss]] + [x.ravel() for x in grads])
            res[f"ka_vjp_{k}"] = np.concatenate([x.ravel() for x in ka.vjp(Z0, V, Bm, Cm, act, dZ)])
# The exact H-head population loss (population_multihead_kernels.inl), merged and separate heads.
from lsa_native import population_multihead as pm
for (d, H, r) in ((1, 1, 0), (5, 3, 0), (20, 8, 0), (5, 3, 2)):
    Wph = 0.3 * g.standard_normal((H, d + 1, d + 1))
    keys = (0.3 * g.standard_normal((H, d + 1, d + 1)) if r == 0 else
            tuple(0.3 * g.standard_normal((H, r, d + 1)) for _ in range(2)))
    Q = np.linalg.qr(g.standard_normal((d, d)))[0]
    Lam = Q @ np.diag(np.linspace(0.5, 2.0, d)) @ Q.T
    loss, a, c = pm.multihead_loss_and_grad(Wph, keys, Lam, 20, noise_std=0.3)
    res[f"popmh_{d}_{H}_{r}"] = np.concatenate([[loss], a.ravel()] + [x.ravel() for x in (c if r else (c,))])
np.savez(out, **res)
'''


RANGE_STARTS, RANGE_MAX = (1, 2, 3, 5, 17, 31, 63, 65, 127, 129, 257), 100  # the child's short ranges
CHILD = CHILD.replace("@RANGES@", repr((RANGE_STARTS, RANGE_MAX)))


def _check_ranges(res: dict) -> None:
    """Each range fill of a table gives, bit for bit, the same table's long fill's slice."""
    for key in [k for k in res if "_ranges_" in k]:
        ranges, long = res[key], res[key.replace("_ranges_", "_long_")]
        i = 0
        for s in RANGE_STARTS:
            for n in range(RANGE_MAX + 1):
                np.testing.assert_array_equal(ranges[i:i + n], long[s:s + n], err_msg=f"{key} start {s} n {n}")
                i += n
        assert i == ranges.size, key


def _run(label: str, tmp: Path) -> dict:
    out = tmp / f"{label}.npz"
    env = dict(os.environ, LSA_NATIVE_CPU_ISA=label)
    subprocess.run([sys.executable, "-c", CHILD, str(SEED % 2**32), str(out)], env=env, check=True,
                   timeout=600)
    with np.load(out) as f:
        return {k: f[k] for k in f.files}


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    res = _run("baseline", tmp_path_factory.mktemp("isa"))
    _check_ranges(res)
    return res


def _dtype_of(key: str):
    return np.float32 if "float32" in key else np.float64


@pytest.mark.parametrize("label", LABELS)
def test_table_matches_baseline(label, baseline, tmp_path):
    got = _run(label, tmp_path)
    if str(got["isa"]) != label:
        pytest.skip(f"this CPU cannot run the {label} tables (fell back to {got['isa']})")
    assert str(baseline["isa"]) == "baseline"
    _check_ranges(got)
    for key, ref in baseline.items():
        if key == "isa":
            continue
        x = got[key]
        dt = _dtype_of(key)
        assert x.dtype == ref.dtype and x.shape == ref.shape, key
        if key.startswith("uniforms"):
            # Uniforms are the same bits on every table.
            np.testing.assert_array_equal(x, ref, err_msg=key)
        elif key.startswith("gammas"):
            assert np.all(np.abs(x.astype(np.float64) - ref) <= GAMMA_BOUND[dt] * np.abs(ref)), key
        elif key.startswith(("normals", "prompts")):
            bound = NORMAL_BOUND[dt] * np.maximum(1.0, np.abs(ref.astype(np.float64)))
            assert np.all(np.abs(x.astype(np.float64) - ref) <= bound), key
        else:
            scale = max(1.0, float(np.max(np.abs(ref))))
            tol = KERNEL_TOL[dt] * (10 if key.startswith("fused") else 1)
            assert float(np.max(np.abs(x.astype(np.float64) - ref))) <= tol * scale, key
        # Every table's draws and kernels are identical across thread counts.
        if "_t2" in key:
            np.testing.assert_array_equal(x, got[key.replace("_t2", "_t1")], err_msg=key)


def test_unknown_isa_is_a_clear_error(tmp_path):
    env = dict(os.environ, LSA_NATIVE_CPU_ISA="sse9")
    r = subprocess.run([sys.executable, "-c", "import lsa_native; lsa_native.cpu_kernel_isa()"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    # The message lists the tables this build has: baseline everywhere, avx2/avx512 on x86-64 only.
    assert "LSA_NATIVE_CPU_ISA" in r.stderr and "sse9" in r.stderr and "baseline" in r.stderr


def test_default_is_best_supported():
    if os.environ.get("LSA_NATIVE_CPU_ISA"):
        pytest.skip("LSA_NATIVE_CPU_ISA is set")
    assert lsa_native.cpu_kernel_isa() in LABELS
