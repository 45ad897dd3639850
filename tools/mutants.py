#!/usr/bin/env python3
"""Mutation check of the test suite: realistic one-line bugs in the math, applied one at a time.

Each mutant replaces one exact snippet of a source file; the package is rebuilt (C++ mutants, via
the editable install of this checkout) and the suites run. A mutant is *caught* when a suite fails.
Run before resolving an issue that changes the math, and report the score:

    pip install --no-build-isolation -e ".[test]"          # once, in this checkout
    python tools/mutants.py                                  # pytest only
    python tools/mutants.py --ctest build-cpp                # also GoogleTest (configured build dir)
    python tools/mutants.py --only softmax-max --list
    python tools/mutants.py --build-dir build/dev --targeted --only-prefix noise-

``--build-dir``: rebuild with ``cmake --build DIR`` and copy its ``_core*.so`` into
python/lsa_native (the CPU-only developer build, no pip). ``--targeted``: run only each mutant's
own test files (``Mutant.tests``; the whole suite for a mutant without any): much faster, and a
lower bound on what the whole suite catches.

Files are always restored (also on Ctrl-C); a mutant whose snippet no longer occurs exactly once is
reported as STALE (update its snippet when the code moves).
"""
from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str
    find: str
    replace: str
    why: str
    tests: tuple = ()  # test files that should catch it (--targeted); () = the whole suite


POP = ("tests/test_population.py", "tests/test_population_noise.py", "tests/test_sampling.py")
KGP = ("tests/test_kernel_gp.py",)
SAMPLING = ("tests/test_sampling.py", "tests/test_random.py")
OPTIM = ("tests/test_train_optim.py", "tests/test_train.py")


MUTANTS = [
    Mutant("dopri5-a43", "cpp/src/gradient_flow.cpp", "{{44.0 / 45, &k1_}", "{{44.0 / 46, &k1_}",
           "DOPRI5 tableau: a_41"),
    Mutant("dopri5-b1", "cpp/src/gradient_flow.cpp", "{{35.0 / 384, &k1_}", "{{35.0 / 385, &k1_}",
           "DOPRI5 tableau: 5th-order weight b_1"),
    Mutant("rk4-weight", "cpp/src/gradient_flow.cpp", "{1.0 / 3, &k2}, {1.0 / 3, &k3}",
           "{1.0 / 3, &k2}, {1.0 / 3.01, &k3}", "RK4 weight of k3"),
    Mutant("ros34pw2-a31", "cpp/src/gradient_flow.cpp",
           "{8.4457060015369423e-01, -1.1299064236484185e-01, 0}",
           "{8.4457060015369423e-02, -1.1299064236484185e-01, 0}", "ROS34PW2 tableau: a_31"),
    Mutant("ros34pw2-coupling", "cpp/src/gradient_flow.cpp",
           "matrices_.add_jacobian_times(hf, coupling, rhs);",
           "matrices_.add_jacobian_times(h, coupling, rhs);",
           "Rosenbrock stage coupling with A = J instead of (h_f/h) J (the reused factorisation's A)"),
    Mutant("softmax-max", "cpp/src/cpu/kernel_attention_kernels.inl",
           "S[i * Tt + j] -= col[j];", "S[i * Tt + j] -= T(0) * col[j];",
           "softmax without max subtraction"),
    Mutant("relu-derivative", "cpp/src/common/ka_recipe.hpp",
           "relu_gradient(T h, T dh, T) { return h > T(0) ? dh : T(0); }",
           "relu_gradient(T h, T dh, T) { return h >= T(0) ? dh : dh; }", "relu' = 1 everywhere"),
    Mutant("softmax-backward", "cpp/src/common/ka_recipe.hpp",
           "{ return h * (dh - column_dot); }", "{ return h * dh; }",
           "softmax Jacobian without the column term"),
    Mutant("lsa-rho", "cpp/src/common/lsa_recipe.hpp", "  return T(1) / T(N);\n",
           "  return T(1) / T(N + 1);\n", "LSA prediction and gradients with ρ = N+1 instead of N"),
    Mutant("lsa-grad-p", "cpp/src/cpu/lsa_kernels.inl", "d_p[r] += scaled * double(w.g_p[r]);",
           "d_p[r] += scaled * double(w.g_k[r]);", "∂ŷ/∂p uses Σ t_j e_j instead of Σ s_j e_j"),
    Mutant("wick-f6", "cpp/src/cpu/population_cpu.cpp", "add_outer(G.K1, inv_n2 * 4 * tau, a, a);",
           "add_outer(G.K1, inv_n2 * 2 * tau, a, a);", "a Wick pairing count in the F6 gradient", POP),
    Mutant("wick-t3", "cpp/src/cpu/population_cpu.cpp", "G.p2 += 2 * p2 * k2Lk2 * c3;",
           "G.p2 += 2 * p2 * k2Lk2 * c3 * (1 + 1e-3);", "T3 gradient coefficient", POP),
    Mutant("random-diag-skew", "cpp/src/cpu/population_cpu.cpp", "kappa / 6.0 * third", "kappa / 3.0 * third",
           "random diagonal: third-cumulant term", POP),
    Mutant("gamma", "python/lsa_native/theory.py", "(1 + 1 / N) * L + np.trace(L) / N * np.eye",
           "(1 + 1 / N) * L + np.trace(L) / (N + 1) * np.eye", "Γ with tr(Λ)/(N+1)"),
    Mutant("thm41-scale", "python/lsa_native/theory.py", "scale = np.trace(G_inv @ G_inv) ** 0.25",
           "scale = np.trace(G_inv @ G_inv) ** 0.5", "Theorem 4.1 limit scale"),
    Mutant("psd-part", "python/lsa_native/baselines.py", "(U * np.abs(w)[..., None, :])",
           "(U * w[..., None, :])", "Bayes estimator with K instead of K_+"),
    Mutant("predict-vjp-label", "cpp/src/cpu/lsa_predict_vjp.inl", "if (r == D - 1) o[N] += g;",
           "if (r == D - 1) o[N] += T(0) * g;", "prediction VJP without ŷ's query-label slot (CPU)"),
    Mutant("cuda-predict-vjp-label", "cpp/src/common/lsa_recipe.hpp", "    if (r == rows - 1) v += dy;",
           "    if (r == rows - 1) v += T(0) * dy;",
           "prediction VJP without the label slot (the CUDA recipe; caught by --ctest only)"),
    Mutant("ka-loss-seed", "cpp/src/common/ka_recipe.hpp", "return 2 * residual * (1.0 / double(batch));",
           "return residual * (1.0 / double(batch));", "kernel-attention loss seed without the 2"),
    Mutant("exp-moments", "python/lsa_native/population.py", "np.full(d, 6 * c**3)",
           "np.full(d, 5 * c**3)", "Exponential(1) third moment"),
    Mutant("pl-constant", "python/lsa_native/theory.py", "(2 - np.sqrt(d) * sigma**2",
           "(2 - d * sigma**2", "PL constant: √d → d"),
    # ---- added with issue 23: terms written after the list above ----
    # Label noise of the exact population loss (population_cpu.cpp twice_noise_loss).
    Mutant("noise-C-2/N", "cpp/src/cpu/population_cpu.cpp",
           "const double C = (1 + 2 / n) * p2 * p2", "const double C = (1 + 1 / n) * p2 * p2",
           "label noise: Var((1/N)Σε²) term 1 + 2/N → 1 + 1/N (loss and k2 gradient)", POP),
    Mutant("noise-grad-p2-C", "cpp/src/cpu/population_cpu.cpp",
           "4 * (1 + 2 / n) * p2 * (s2 * t", "4 * (1 + 1 / n) * p2 * (s2 * t",
           "label noise: the same 1 + 2/N in ∂/∂p2 only", POP),
    Mutant("noise-c1", "cpp/src/cpu/population_cpu.cpp", "const double c1 = s2 * (1 + 1 / n);",
           "const double c1 = s2 * (1 + 2 / n);", "label noise: σ²(1 + 1/N) p2 m coefficient", POP),
    Mutant("noise-sigma4", "cpp/src/cpu/population_cpu.cpp",
           "(s2 * t + 0.5 * s2 * s2) + s2 * pi", "(s2 * t + s2 * s2) + s2 * pi",
           "label noise: σ⁴/2 → σ⁴ in C", POP),
    Mutant("noise-pi", "cpp/src/cpu/population_cpu.cpp", "+ s2 * pi / (2 * n);",
           "+ s2 * pi / n;", "label noise: σ²π/(2N) → σ²π/N in C", POP),
    Mutant("noise-X4", "cpp/src/cpu/population_cpu.cpp", "const double X4 = rho * theta + m + m2;",
           "const double X4 = rho * theta + m;", "label noise: the query term's 4th moment without m'",
           POP),
    Mutant("noise-tau", "cpp/src/cpu/population_cpu.cpp", "s2 * p2 * p2 * tau / n + 2 * e * X4 + q;",
           "s2 * p2 * p2 * tau / (2 * n) + 2 * e * X4 + q;", "label noise: σ²p2²τ/(2N) halved", POP),
    Mutant("noise-query", "cpp/src/cpu/population_cpu.cpp", "const double q = noise.query ? s2 : 0.0;",
           "const double q = noise.query ? 0.5 * s2 : 0.0;", "query noise: ½σ² → ¼σ²", POP),
    Mutant("noise-grad-k2", "cpp/src/cpu/population_cpu.cpp", "add_scaled(g->k2, 4 * C, Lk2);",
           "add_scaled(g->k2, 2 * C, Lk2);", "label noise: ∂(Cκ2)/∂k2 halved", POP),
    Mutant("noise-grad-p1-pi", "cpp/src/cpu/population_cpu.cpp",
           "add_scaled(g->p1, 2 * s2 * kappa2 / n, Lp1);", "add_scaled(g->p1, s2 * kappa2 / n, Lp1);",
           "label noise: ∂(σ²πκ2/(2N))/∂p1 halved", POP),
    Mutant("noise-grad-K1-tau", "cpp/src/cpu/population_cpu.cpp",
           "add_scaled(g->K1, 2 * s2 * p2 * p2 / n, LK1L);", "add_scaled(g->K1, s2 * p2 * p2 / n, LK1L);",
           "label noise: ∂τ/∂K1 term halved", POP),
    Mutant("random-diag-var", "cpp/src/cpu/population_cpu.cpp",
           "total[k] += 0.5 * std::max(var, 0.0) * second", "total[k] += 0.25 * std::max(var, 0.0) * second",
           "random diagonal: variance term ½Var·g'' halved", POP),
    # K-GP prompts (common/kernel_gp.hpp, cpu/kernel_gp_cpu.cpp).
    Mutant("kgp-abs-root", "cpp/src/common/kernel_gp.hpp", "std::sqrt(std::fabs(diag[j])) * z[j]",
           "std::sqrt(diag[j] > 0 ? diag[j] : 0.0) * z[j]",
           "labels with U D_+ Uᵀ instead of K_+ = U|D|Uᵀ (relu)", KGP),
    Mutant("kgp-unscale", "cpp/src/common/kernel_gp.hpp", "* z[j] * unscale;", "* z[j];",
           "exp labels by the eigen path without undoing the 1/max|K| scaling", KGP),
    Mutant("kgp-householder", "cpp/src/common/kernel_gp.hpp", "  householder_apply(a, n, y);\n",
           "\n", "eigen-path labels S|D|^½z without Q (the Householder basis)", KGP),
    Mutant("kgp-relu", "cpp/src/common/kernel_gp.hpp", "return t > 0 ? t : 0.0;",
           "return t > 0 ? t : 0.1 * t;", "leaky relu kernel", KGP),
    Mutant("kgp-sphere", "cpp/src/common/kernel_gp.hpp", "const double inv = 1.0 / std::sqrt(s);",
           "const double inv = 1.0 / s;", "sphere points normalised by ‖g‖² instead of ‖g‖", KGP),
    Mutant("kgp-sigma-root", "cpp/src/cpu/kernel_gp_cpu.cpp",
           "s += v[i * n + k] * std::sqrt(w[k]) * v[j * n + k];", "s += v[i * n + k] * w[k] * v[j * n + k];",
           "covariates Σ ξ instead of Σ^{1/2} ξ", KGP),
    # Linear prompts and the Wishart step (common/linear_prompts.hpp, cpu/simd_random.hpp).
    Mutant("prompt-label-noise", "cpp/src/common/linear_prompts.hpp",
           "return P.sigma > T(0) ? y + P.sigma * *eps : y;",
           "return P.sigma > T(0) ? y + T(0.5) * P.sigma * *eps : y;", "label noise σ/2 in sampled prompts",
           SAMPLING + ("tests/test_population_noise.py",)),
    Mutant("wishart-dof", "cpp/src/cpu/simd_random.hpp",
           "shape[l] = T(0.5) * static_cast<T>(N - slot.i);", "shape[l] = T(0.5) * static_cast<T>(N - slot.i + 1);",
           "Bartlett χ²_{N−i} → χ²_{N−i+1} (SIMD path)", SAMPLING),
    # Optimizers and schedules (train/optim.py, train/schedules.py).
    Mutant("adam-bias-v", "python/lsa_native/train/optim.py", "v_hat = v / (1 - b2**t)",
           "v_hat = v / (1 - b2**(t + 1))", "Adam second-moment bias correction off by one step", OPTIM),
    Mutant("adamw-decay", "python/lsa_native/train/optim.py", "theta *= 1 - lr * self.weight_decay",
           "theta *= 1 - self.weight_decay", "AdamW decay without the learning rate", OPTIM),
    Mutant("cosine-schedule", "python/lsa_native/train/schedules.py", "(1 + math.cos(math.pi * min(t, T) / T)) / 2",
           "(1 + math.cos(math.pi * min(t, T) / (T + 1))) / 2", "cosine schedule period T+1", OPTIM),
    Mutant("warmup", "python/lsa_native/train/schedules.py", "s *= (t + 1) / self.warmup_steps",
           "s *= t / self.warmup_steps", "warm-up starts at 0 instead of 1/w", OPTIM),
]

CPP_SUFFIXES = {".cpp", ".inl", ".hpp", ".cu", ".cuh"}


def run(cmd, timeout):
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        return r.returncode, time.perf_counter() - t0, r.stdout + r.stderr
    except subprocess.TimeoutExpired:
        return -1, time.perf_counter() - t0, "timeout"


PIP_CONFIG: list = []  # extra pip arguments (--config-setting), from the command line


BUILD_DIR: list = []  # [DIR] with --build-dir: cmake --build DIR and copy _core*.so, no pip


def rebuild(ctest_dir):
    if BUILD_DIR:
        code, _, out = run(["cmake", "--build", BUILD_DIR[0], "-j2"], 900)
        if code != 0:
            return False, out
        for so in Path(ROOT / BUILD_DIR[0]).glob("_core*.so"):
            shutil.copy2(so, ROOT / "python" / "lsa_native" / so.name)
    else:
        code, _, out = run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "-q",
                            "--no-deps", *PIP_CONFIG, "-e", "."], 900)
    if code != 0:
        return False, out
    if ctest_dir:
        code, _, out = run(["cmake", "--build", ctest_dir, "-j2"], 900)
        return code == 0, out
    return True, ""


def suites_fail(ctest_dir, timeout, tests=()) -> tuple[str, str]:
    """(result, suite): CAUGHT by the first failing suite, SURVIVED, or TIMEOUT (a suite ran past
    `timeout` seconds: a loaded machine, not a caught bug — rerun that mutant). `tests`: the test
    files to run (empty: the whole suite)."""
    code, _, out = run([sys.executable, "-m", "pytest", "-x", "-q", "-m", "not slow",
                        "-p", "no:cacheprovider", *tests], timeout)
    if code == -1:
        return "TIMEOUT", "pytest"
    if code != 0:
        return "CAUGHT", "pytest"
    if ctest_dir:
        code, _, out = run(["ctest", "--test-dir", ctest_dir, "-E", "consumer|install",
                            "--stop-on-failure"], timeout)
        if code == -1:
            return "TIMEOUT", "ctest"
        if code != 0:
            return "CAUGHT", "ctest"
    return "SURVIVED", ""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", help="mutant names to run (default: all)")
    ap.add_argument("--only-prefix", nargs="*", default=[],
                    help="run the mutants whose names start with one of these prefixes")
    ap.add_argument("--build-dir", metavar="DIR",
                    help="rebuild with cmake --build DIR and copy its _core*.so (no pip install)")
    ap.add_argument("--targeted", action="store_true",
                    help="run each mutant's own test files only (Mutant.tests)")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--ctest", metavar="BUILD_DIR", help="also build and run ctest in BUILD_DIR")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per suite run")
    ap.add_argument("--config-setting", action="append", default=[], metavar="KEY=VALUE",
                    help="passed to pip for the rebuilds, e.g. cmake.define.LSA_NATIVE_CUDA=OFF")
    args = ap.parse_args(argv)
    PIP_CONFIG[:] = [f"--config-settings={c}" for c in args.config_setting]
    # SIGTERM unwinds like Ctrl-C, so the `finally` below always restores the mutated file.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(130))
    BUILD_DIR[:] = [args.build_dir] if args.build_dir else []
    chosen = [m for m in MUTANTS
              if (not args.only and not args.only_prefix) or (args.only and m.name in args.only)
              or any(m.name.startswith(p) for p in args.only_prefix)]
    if args.list:
        for m in chosen:
            print(f"{m.name:18s} {m.path}: {m.why}" + (f" [{' '.join(m.tests)}]" if m.tests else ""))
        return 0
    rows = []
    for m in chosen:
        path = ROOT / m.path
        original = path.read_text()
        if original.count(m.find) != 1:
            rows.append((m, "STALE", "snippet not found exactly once"))
            continue
        cpp = path.suffix in CPP_SUFFIXES
        try:
            path.write_text(original.replace(m.find, m.replace))
            if cpp:
                ok, out = rebuild(args.ctest)
                if not ok:
                    rows.append((m, "CAUGHT", "does not compile"))
                    continue
            result, by = suites_fail(args.ctest, args.timeout, m.tests if args.targeted else ())
            rows.append((m, result, by))
        finally:
            path.write_text(original)
        print(f"{rows[-1][1]:8s} {m.name}: {m.why} {rows[-1][2]}", flush=True)
    if any(Path(ROOT / m.path).suffix in CPP_SUFFIXES for m in chosen):
        rebuild(args.ctest)  # leave the build matching the sources
    caught = sum(r[1] == "CAUGHT" for r in rows)
    live = sum(r[1] not in ("STALE", "TIMEOUT") for r in rows)
    print("\n| mutant | file | bug | result |\n| --- | --- | --- | --- |")
    for m, result, by in rows:
        print(f"| {m.name} | {m.path} | {m.why} | {result}{' (' + by + ')' if by else ''} |")
    stale = sum(r[1] == "STALE" for r in rows)
    timeouts = sum(r[1] == "TIMEOUT" for r in rows)
    print(f"\nscore: {caught}/{live} caught" + (f", {stale} stale" if stale else "")
          + (f", {timeouts} timed out (rerun them)" if timeouts else ""))
    return 0 if caught == live else 1


if __name__ == "__main__":
    sys.exit(main())
