"""Ctrl-C reaches long native calls: SIGINT raises KeyboardInterrupt within a fraction of a second
(the core polls Python's signal handlers between chunks and flow steps), and the package keeps
working afterwards (the thread pool is not left locked)."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.skipif(os.name != "posix", reason="needs POSIX signals")

# Each child prints READY, then enters a native call that runs for many seconds unless interrupted;
# after catching KeyboardInterrupt it runs a small call of the same kind and prints OK.
LONG_CALLS = {
    "gradient_flow": """
        Lam = np.eye(3)
        W_pv, W_kq = ln.theory.assumption33_init(3, 0.1, rng=np.random.default_rng(0))
        def call(t_end):
            ln.population.gradient_flow(W_pv, W_kq, 10, Lambda=Lam, times=[0.0, t_end])
        long_args, short_args = (1e9,), (1.0,)
    """,
    # The stiff method polls inside its Jacobian too (2n = 2500 gradients of an O(d^4) objective here).
    "gradient_flow_rosenbrock": """
        def call(d):
            W_pv, W_kq = ln.theory.assumption33_init(d, 0.1, rng=np.random.default_rng(0))
            ln.population.gradient_flow(W_pv, W_kq, 10, moments=ln.population.exponential_moments(d),
                                        times=[0.0, 1.0], method="rosenbrock")
        long_args, short_args = (24,), (2,)
    """,
    "kernel_attention": """
        rng = np.random.default_rng(0)
        p = ln.kernel_attention.KernelAttentionParams.gaussian(rng, dim=5, layers=8,
                                                               activations="softmax")
        Z_long = rng.standard_normal((100_000, 6, 101))
        def call(Z0):
            p.forward(Z0)
        long_args, short_args = (Z_long,), (Z_long[:4],)
    """,
}


@pytest.mark.parametrize("name", sorted(LONG_CALLS))
def test_sigint_interrupts_native_call(name):
    script = textwrap.dedent("""
        import sys, time
        import numpy as np
        import lsa_native as ln
    """) + textwrap.dedent(LONG_CALLS[name]) + textwrap.dedent("""
        print("READY", flush=True)
        t0 = time.perf_counter()
        try:
            call(*long_args)
        except KeyboardInterrupt:
            print(f"INTERRUPTED {time.perf_counter() - t0:.3f}", flush=True)
        else:
            print("FINISHED", flush=True)
        call(*short_args)
        print("OK", flush=True)
    """)
    # Unbuffered binary pipes: communicate() reads the raw descriptor, so lines that a buffered
    # readline() had already pulled in (OK right after INTERRUPTED) would be lost.
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, bufsize=0)
    try:
        assert proc.stdout.readline().decode().strip() == "READY", proc.stderr.read().decode()
        time.sleep(0.5)  # well inside the long call (it runs for tens of seconds)
        sent = time.perf_counter()
        proc.send_signal(signal.SIGINT)
        line = proc.stdout.readline().decode().strip()
        latency = time.perf_counter() - sent
        out, err = (b.decode() for b in proc.communicate(timeout=30))
    finally:
        proc.kill()
    assert line.startswith("INTERRUPTED"), (line, err)
    # Polling runs every 20 ms; 1 s leaves room for a loaded 2-core machine.
    assert latency < 1.0, latency
    assert out.strip() == "OK", err
    assert proc.returncode == 0, err


# ---- the flow's step control on overflow, and requests that cannot finish -------------------

import numpy as np  # noqa: E402

import lsa_native as ln  # noqa: E402


def _huge_init(d=3, scale=30.0, seed=1):
    rng = np.random.default_rng(seed)
    return (scale * rng.standard_normal((d + 1, d + 1)), scale * rng.standard_normal((d + 1, d + 1)))


def test_dopri5_shrinks_on_overflowing_trial_stage():
    # From a loss of ~2e7 the first trial stages overflow; the flow must shrink its step and go on
    # (it used to report "diverged"), reaching the same point as a run started with a tiny step.
    W_pv, W_kq = _huge_init()
    assert ln.population.loss(W_pv, W_kq, np.eye(3), 10) > 1e6
    big = ln.population.gradient_flow(W_pv, W_kq, 10, Lambda=np.eye(3), times=[0, 1.0], step=1.0)
    tiny = ln.population.gradient_flow(W_pv, W_kq, 10, Lambda=np.eye(3), times=[0, 1.0], step=1e-9)
    assert big.rejected_steps > 0
    assert big.losses[-1] < 1e-6 * big.losses[0]
    np.testing.assert_allclose(big.final_W_kq, tiny.final_W_kq, rtol=1e-6, atol=1e-8)


def test_rk4_overflow_says_diverged_with_a_hint():
    W_pv, W_kq = _huge_init()
    with pytest.raises(ValueError, match="diverged.*smaller step or method='dopri5'"):
        ln.population.gradient_flow(W_pv, W_kq, 10, Lambda=np.eye(3), times=[0, 1.0], step=1e-3,
                                    method="rk4")


def test_rk4_request_that_cannot_finish_is_refused_at_once():
    W_pv, W_kq = ln.theory.assumption33_init(2, 0.1, rng=np.random.default_rng(0))
    # The up-front refusal ("needs … steps > max_steps"), not the run-time "max_steps … exceeded".
    with pytest.raises(ValueError, match="step: reaching t = 1.0.*needs .* steps > max_steps"):
        ln.population.gradient_flow(W_pv, W_kq, 5, Lambda=np.eye(2), times=[0, 1.0], step=1e-300,
                                    method="rk4")


@pytest.mark.parametrize("name", ["grad_tol", "gap_tol", "loss_target", "atol"])
def test_flow_stopping_rules_reject_nan(name):
    W_pv, W_kq = ln.theory.assumption33_init(2, 0.1, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match=name):
        ln.population.gradient_flow(W_pv, W_kq, 5, Lambda=np.eye(2), times=[0, 1.0],
                                    **{name: float("nan")})


@pytest.mark.parametrize("value, error", [(2.5, TypeError), (10**20, ValueError), (-1, ValueError)])
def test_set_num_threads_names_its_argument(value, error):
    with pytest.raises(error, match="n: expected"):
        ln.set_num_threads(value)


def test_huge_integer_sizes_name_the_argument():
    W_pv, W_kq = ln.theory.assumption33_init(2, 0.1, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="N: expected an integer <="):
        ln.population.gradient_flow(W_pv, W_kq, 10**20, Lambda=np.eye(2), times=[0, 1.0])
    with pytest.raises(ValueError, match="max_steps: expected an integer <="):
        ln.population.gradient_flow(W_pv, W_kq, 5, Lambda=np.eye(2), times=[0, 1.0],
                                    max_steps=10**30)
