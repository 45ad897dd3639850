#!/usr/bin/env python3
"""Mutation check of the test suite: realistic one-line bugs in the math, applied one at a time.

Each mutant replaces one exact snippet of a source file; the package is rebuilt (C++ mutants, via
the editable install of this checkout) and the suites run. A mutant is *caught* when a suite fails.
Run before resolving an issue that changes the math, and report the score:

    pip install --no-build-isolation -e ".[test]"          # once, in this checkout
    python tools/mutants.py                                  # pytest only
    python tools/mutants.py --ctest build-cpp                # also GoogleTest (configured build dir)
    python tools/mutants.py --only softmax-max --list

Files are always restored (also on Ctrl-C); a mutant whose snippet no longer occurs exactly once is
reported as STALE (update its snippet when the code moves).
"""
from __future__ import annotations

import argparse
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
           "add_outer(G.K1, inv_n2 * 2 * tau, a, a);", "a Wick pairing count in the F6 gradient"),
    Mutant("wick-t3", "cpp/src/cpu/population_cpu.cpp", "G.p2 += 2 * p2 * k2Lk2 * c3;",
           "G.p2 += 2 * p2 * k2Lk2 * c3 * (1 + 1e-3);", "T3 gradient coefficient"),
    Mutant("random-diag-skew", "cpp/src/cpu/population_cpu.cpp", "kappa / 6.0 * third", "kappa / 3.0 * third",
           "random diagonal: third-cumulant term"),
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


def rebuild(ctest_dir):
    code, _, out = run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "-q",
                        "--no-deps", *PIP_CONFIG, "-e", "."], 900)
    if code != 0:
        return False, out
    if ctest_dir:
        code, _, out = run(["cmake", "--build", ctest_dir, "-j2"], 900)
        return code == 0, out
    return True, ""


def suites_fail(ctest_dir, timeout) -> tuple[str, str]:
    """(result, suite): CAUGHT by the first failing suite, SURVIVED, or TIMEOUT (a suite ran past
    `timeout` seconds: a loaded machine, not a caught bug — rerun that mutant)."""
    code, _, out = run([sys.executable, "-m", "pytest", "-x", "-q", "-m", "not slow",
                        "-p", "no:cacheprovider"], timeout)
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
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--ctest", metavar="BUILD_DIR", help="also build and run ctest in BUILD_DIR")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per suite run")
    ap.add_argument("--config-setting", action="append", default=[], metavar="KEY=VALUE",
                    help="passed to pip for the rebuilds, e.g. cmake.define.LSA_NATIVE_CUDA=OFF")
    args = ap.parse_args(argv)
    PIP_CONFIG[:] = [f"--config-settings={c}" for c in args.config_setting]
    # SIGTERM unwinds like Ctrl-C, so the `finally` below always restores the mutated file.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(130))
    chosen = [m for m in MUTANTS if not args.only or m.name in args.only]
    if args.list:
        for m in chosen:
            print(f"{m.name:18s} {m.path}: {m.why}")
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
            result, by = suites_fail(args.ctest, args.timeout)
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
