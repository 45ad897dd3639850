"""Ctrl-C reaches long native calls: SIGINT raises KeyboardInterrupt from inside the call (the core
polls Python's signal handlers between chunks and flow steps), and the package keeps working
afterwards (the thread pool is not left locked).

Race-free by construction, whatever the machine's load and however the suite was started:
- the child restores Python's SIGINT handler first (a shell starts background jobs with SIGINT
  ignored, and children inherit that);
- READY means "the core has been entered": a profile hook on the native function's ``c_call``
  event arms a watcher thread, which can take the GIL only when the core releases it (the switch
  interval is set far beyond the test, so the interpreter never hands the GIL over on its own, and
  the hook does no I/O); the watcher then prints READY and the parent sends one SIGINT per READY;
- the same profile hook sees how the native function ended: KeyboardInterrupt raised from inside it
  (``c_exception``) is the pass; a call that ran to its end (``c_return``) and left the signal to
  the interpreter fails (IGNORED) — without this check a core that never polls passed, the pending
  signal raising KeyboardInterrupt just after the call returned (measured: a zlib.compress of tens
  of seconds as the "native call" passed the former test; it fails now);
- should a signal still land before the core was entered (no event past ``c_call``; a signal
  handled on the hook's own entry is read from its frame), the child enters the call again.
No sleeps, no latency thresholds: each long call lasts seconds (the child's pool has 2 threads, so
also on a many-core machine); a signal that a loaded machine delivers only after the call's end
reads as IGNORED, and the child enters the call again, up to IGNORED_TRIES times in all — a core
that never polls is IGNORED every time and fails.
"""
import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

pytestmark = pytest.mark.skipif(os.name != "posix", reason="needs POSIX signals")

# Each child defines call(*args) and the native function it enters (NATIVE); the long call runs
# for tens of seconds unless interrupted (and is never refused up front); after the interrupt it
# runs a small call of the same kind and prints OK.
LONG_CALLS = {
    "gradient_flow": """
        Lam = np.eye(3)
        W_pv, W_kq = ln.theory.assumption33_init(3, 0.1, rng=np.random.default_rng(0))
        NATIVE = "gradient_flow_population"
        def call(t_end):  # fixed-step RK4: t_end / step steps, below max_steps
            ln.population.gradient_flow(W_pv, W_kq, 10, Lambda=Lam, times=[0.0, t_end],
                                        method="rk4", step=1e-3)
        long_args, short_args = (9e3,), (1.0,)
    """,
    # The stiff method polls inside its Jacobian too (2n = 2500 gradients of an O(d^4) objective here).
    "gradient_flow_rosenbrock": """
        NATIVE = "gradient_flow_population"
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
        NATIVE = "kernel_attention_forward"
        def call(Z0):
            p.forward(Z0)
        long_args, short_args = (Z_long,), (Z_long[:4],)
    """,
}

CHILD_PROLOGUE = """
    import signal, sys
    signal.signal(signal.SIGINT, signal.default_int_handler)
    import numpy as np
    import lsa_native as ln
    ln.set_num_threads(2)
"""

IGNORED_TRIES = 3

CHILD_EPILOGUE = f"""
    IGNORED_TRIES = {IGNORED_TRIES}
    import threading
    sys.setswitchinterval(1e4)
    armed = threading.Event()

    def watcher():
        while True:
            armed.wait()  # returns once this thread holds the GIL: the core has released it
            armed.clear()
            print("READY", flush=True)

    threading.Thread(target=watcher, daemon=True).start()

    last = []  # the native function's last profile event: c_call, then c_exception or c_return

    def arm_on_entry():
        last.clear()
        def hook(frame, event, arg):
            if getattr(arg, "__name__", "") == NATIVE:
                last[:] = [event]
                if event == "c_call":
                    armed.set()
                else:
                    sys.setprofile(None)
        sys.setprofile(hook)

    ignored = 0
    for attempt in range(50):
        arm_on_entry()
        try:
            call(*long_args)
        except KeyboardInterrupt as e:
            sys.setprofile(None)
            tb = e.__traceback__
            while tb.tb_next is not None:
                tb = tb.tb_next
            f = tb.tb_frame
            if f.f_code.co_name == "hook" and getattr(f.f_locals["arg"], "__name__", "") == NATIVE:
                last[:] = [f.f_locals["event"]]  # it ran on the hook's entry, at this event
            if last in ([], ["c_call"]):
                print("EARLY", flush=True)  # landed before the core was entered: again
                continue
            if last != ["c_exception"]:
                ignored += 1
                if ignored < IGNORED_TRIES:
                    print("RETRY", flush=True)  # the call ended first: again (a late signal)
                    continue
            print("INTERRUPTED" if last == ["c_exception"] else "IGNORED", flush=True)
        else:
            print("FINISHED", flush=True)
        break
    call(*short_args)
    print("OK", flush=True)
"""


@pytest.mark.parametrize("name", sorted(LONG_CALLS))
def test_sigint_interrupts_native_call(name):
    script = "\n".join(textwrap.dedent(s) for s in (CHILD_PROLOGUE, LONG_CALLS[name], CHILD_EPILOGUE))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, bufsize=0)
    # A watchdog, not a threshold: a child stuck for 10 minutes is killed and the test fails.
    watchdog = threading.Timer(600, proc.kill)
    watchdog.start()
    lines = []
    try:
        for raw in iter(proc.stdout.readline, b""):
            line = raw.decode().strip()
            lines.append(line)
            if line == "READY":
                proc.send_signal(signal.SIGINT)
            elif line not in ("EARLY", "RETRY"):
                break
        out, err = (b.decode() for b in proc.communicate())
    finally:
        watchdog.cancel()
        proc.kill()
    assert lines and lines[-1] == "INTERRUPTED", (lines, err)
    assert out.strip() == "OK", (out, err)
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


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs sched_setaffinity")
def test_default_thread_count_is_the_cpus_this_process_may_use():
    """A process restricted to one CPU (taskset, a cpuset) gets a pool of 1 thread by default, not
    one per CPU of the machine; set_num_threads(0) restores that default after a change."""
    cpu = min(os.sched_getaffinity(0))
    code = textwrap.dedent(f"""
        import os
        os.sched_setaffinity(0, {{{cpu}}})
        import lsa_native as ln
        first = ln.num_threads()
        ln.set_num_threads(3)
        print(first, ln.num_threads(), ln.set_num_threads(0))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.stdout.split() == ["1", "3", "1"]


def test_huge_integer_sizes_name_the_argument():
    W_pv, W_kq = ln.theory.assumption33_init(2, 0.1, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="N: expected an integer <="):
        ln.population.gradient_flow(W_pv, W_kq, 10**20, Lambda=np.eye(2), times=[0, 1.0])
    with pytest.raises(ValueError, match="max_steps: expected an integer <="):
        ln.population.gradient_flow(W_pv, W_kq, 5, Lambda=np.eye(2), times=[0, 1.0],
                                    max_steps=10**30)
