"""``train.fit`` against the loop it runs, two reports.

``--loop`` (issue 22, "the loop around the kernel"): fit's overhead over a bare loop of the same
native calls, at d = 5, N = 20, B = 4096 — LSAObjective on fresh prompts, fused "tokens" and
"wishart" steps (``sampling.LinearPrompts``), MultiHeadLSAObjective (H = 5 heads, merged W^KQ
and separate rank-one W^K, W^Q, tokens and wishart, float32), and KernelAttentionObjective (full
and sparse V) on a fixed float64 batch trained in float32 (so E is cast: the cast must happen
once, not per step);
SGD and Adam. The bare loop calls the native function directly
(``_core.linear_prompts_lsa_loss_and_grad`` / ``_core.sample_linear_prompts`` +
``_core.multihead_lsa_loss_and_grad`` / ``_core.linear_prompts_multihead_loss_and_grad`` /
``_core.kernel_attention_loss_and_grad``; the separate parametrization's W^KQ merge and chain rule
in numpy into preallocated buffers) with
preallocated arrays and takes the optimizer step (SGD: θ ← θ − η g in numpy; Adam: one native
``NativeOptimizer`` step), plus the one call fit makes for its final record (the loss at the final
θ); fit runs the same optimizer with records every step (its default). Two measures, median over
``--repeats`` alternating runs of ``--steps`` steps each, on ``--threads`` native threads (default
1: per-core CPU time, which a loaded machine disturbs least):

- wall and CPU time per step of both loops with the real kernels (the overhead is their
  difference: noisy on a loaded machine, where both swing with the load);
- the overhead alone: both loops again with the native calls replaced by a no-op (the difference
  is then fit's Python work per step, almost load-free), as a share of the bare loop's real step.
  The stand-ins write zero gradients: a buffer left uninitialized holds arbitrary values, which
  sent θ past 1e30 in the runs seen and timed the loop's overflow fall-backs instead of its step.

``--parts``: where that Python work goes — each part of fit's host-loop step (the bound objective
step with the no-op kernel, the result checks and gradient norm, the optimizer step, the record,
the loop's own checks) timed alone, CPU time, built from fit's internals as fit builds them.
``--record-every k``: fit's ``record_every`` for both reports (default 1, fit's default).

``--noop-min``: the no-op measure alone, as lines for a before/after comparison — fit's and the
bare loop's CPU time per step with the no-op kernels, each the minimum of ``--repeats`` alternating
runs of ``--steps`` steps; ``bench/fit_noop_rounds.sh`` runs it in rounds, alternating two
``python/`` trees in separate processes, and ``--summarize`` makes the table of bench/README.md
from its output (medians over rounds; the overhead is the median of the per-round differences).

Without ``--loop``: one Adam step of a 3-layer softmax kernel-attention model at CCS's size
(d = 5, n = 30, B = 30000, float32, sparse V, prompts resampled every 10 steps: CCS H.1) through
``train.fit``, broken into sampling / native forward+backward / optimizer / Python overhead
(medians per step).

Timing is by instrumentation inside one real ``fit`` run: the sampler's ``sample``, the native
``_core.kernel_attention_loss_and_grad`` and the optimizer's ``step`` are wrapped with timers; a
callback timestamps each step. Sampling is reported amortized (time per sample / k) and per
sample. "Python overhead" = step − native − optimizer − sampling in that step (parameter
unpacking, dtype casts, the ½ scaling, gradient concatenation, records, the loop).

    python bench/report_fit.py --loop [--steps 200] [--repeats 7] [--only all|lsa|multihead|kernel]
                                      [--threads 1] [--record-every 1]
    python bench/report_fit.py --parts [--only ...] [--record-every 1]
    python bench/report_fit.py --noop-min [--only ...] [--steps 2000] [--repeats 15] [--record-every 1]
    python bench/report_fit.py --summarize ROUNDS_FILE...
    python bench/report_fit.py [--steps 20] [--batch 30000] [--resample-every 10] [--sampler numpy|native]
"""
from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import time
import timeit

# numpy's batched eigh (the numpy K-GP sampler) runs ~30x slower when OpenBLAS threads each tiny
# 31x31 problem on a busy machine; the native core has its own thread pool.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import lsa_native as ln  # noqa: E402
from lsa_native import _core, train  # noqa: E402
from lsa_native import kernel_attention as ka  # noqa: E402
from lsa_native.train.native_optim import NativeOptimizer  # noqa: E402


class Timer:
    def __init__(self):
        self.calls = []  # (start, seconds)

    def wrap(self, fn):
        def timed(*a, **kw):
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                self.calls.append((t0, time.perf_counter() - t0))
        return timed

    def within(self, a, b):
        return sum(s for t0, s in self.calls if a <= t0 < b)


# ---- --loop: fit against a bare loop of the same native calls ---------------------------------

LR = 1e-4
OPTIMIZERS = ("sgd", "adam")


def _bare_update(optimizer, theta):
    """The bare loop's optimizer step ``update(t, g)`` on θ (in place): SGD θ ← θ − η g in numpy,
    Adam as one native call (``NativeOptimizer`` on host buffers, what fit's host loop runs);
    returns (update, the final θ)."""
    if optimizer == "sgd":
        def update(t, g):
            theta[...] -= LR * g
        return update, lambda: theta
    native = NativeOptimizer(train.Adam(lr=LR), theta)

    def update(t, g):
        np.copyto(native.grad, g)
        native.step(t)
    return update, lambda: native.current


def _lsa_case(method, d=5, N=20, B=4096):
    spec = ln.sampling.LinearPrompts(d, N, seed=0)
    rng = np.random.default_rng(1)
    r = d + 1
    W_pv, W_kq = 0.1 * rng.standard_normal((r, r)), 0.1 * rng.standard_normal((r, r))

    def bare(steps, optimizer):
        update, current = _bare_update(optimizer, np.concatenate([W_pv.ravel(), W_kq.ravel()]))
        W = np.empty(2 * r * r, np.float32)
        g = np.empty(2 * r * r, np.float32)
        views = (W[:r * r].reshape(r, r), W[r * r:].reshape(r, r), g[:r * r].reshape(r, r),
                 g[r * r:].reshape(r, r))
        native = _core.linear_prompts_lsa_loss_and_grad  # looked up per run (the no-op swap)
        for t in range(steps + 1):  # fit's final record evaluates the final θ: one more call
            np.copyto(W, current(), casting="unsafe")
            native(spec._spec, B, min(t, steps - 1), method, *views, "cpu")
            if t < steps:
                update(t, g)

    def problem():
        return train.LSAObjective(W_pv, W_kq, method=method), train.Prompts(spec, batch=B)

    return bare, problem, {"linear_prompts_lsa_loss_and_grad": _noop_fused}


def _ka_case(d=5, n=20, L=3, B=4096, sparse=False):
    rng = np.random.default_rng(2)
    batch = ln.sampling.KernelGPPrompts(d, n, "exp", seed=0).sample(batch=B, dtype=np.float64)
    params = ka.KernelAttentionParams.gaussian(rng, d, L, 1, "softmax", sparse=sparse)
    objective = train.KernelAttentionObjective(params, dtype=np.float32)
    positions = objective._positions()  # θ's entries in the flat [V | B | C] buffer
    V = params.value()
    shapes = (V.shape, params.B.shape, params.C.shape)
    size = V.size + params.B.size + params.C.size
    activations = list(params.activations)

    def bare(steps, optimizer):
        Z0, y_q = batch.E.astype(np.float32), batch.y_q.astype(np.float32)
        update, current = _bare_update(optimizer, objective.theta0.copy())
        w, g = np.zeros(size, np.float32), np.empty(size, np.float32)
        cut = np.cumsum([int(np.prod(s)) for s in shapes])[:-1]
        ws = [p.reshape(s) for p, s in zip(np.split(w, cut), shapes)]
        gs = tuple(p.reshape(s) for p, s in zip(np.split(g, cut), shapes))
        native = _core.kernel_attention_loss_and_grad
        for t in range(steps + 1):  # fit's final record evaluates the final θ: one more call
            w[positions] = current()
            native(Z0, y_q, *ws, activations, out=gs)
            if t < steps:
                update(t, g[positions])

    def problem():
        return train.KernelAttentionObjective(params, dtype=np.float32), batch

    return bare, problem, {"kernel_attention_loss_and_grad": _noop_ka}


def _multihead_case(method, separate, d=5, N=20, H=5, B=4096, r=1):
    """MultiHeadLSAObjective, H heads, merged W^KQ or separate rank-r W^K, W^Q (float32 model,
    fresh prompts). The bare loop: θ cast once into one float32 buffer (views made once), W^KQ
    merged into a buffer and the gradients chained into the flat gradient's views (separate), and
    the native calls — tokens: the sampler into reused prompt buffers, then the H-head kernel with
    out=; wishart: the fused step."""
    spec = ln.sampling.LinearPrompts(d, N, seed=0)
    rng = np.random.default_rng(3)
    n = d + 1
    W_pv = 0.1 * rng.standard_normal((H, n, n))
    kq = ({"W_k": 0.1 * rng.standard_normal((H, r, n)), "W_q": 0.1 * rng.standard_normal((H, r, n))}
          if separate else {"W_kq": 0.1 * rng.standard_normal((H, n, n))})
    shapes = [W_pv.shape, *(a.shape for a in kq.values())]
    theta0 = np.concatenate([W_pv.ravel(), *(a.ravel() for a in kq.values())])

    def views(flat):
        cut = np.cumsum([int(np.prod(s)) for s in shapes])[:-1]
        return [piece.reshape(s) for piece, s in zip(np.split(flat, cut), shapes)]

    def bare(steps, optimizer):
        update, current = _bare_update(optimizer, theta0.copy())
        W, g = np.empty(theta0.size, np.float32), np.zeros(theta0.size, np.float32)
        Wv, gv = views(W), views(g)
        W_kq, d_kq = (np.empty((H, n, n), np.float32) for _ in range(2))
        if not separate:
            W_kq, d_kq = Wv[1], gv[1]
        E, y_q = np.empty((B, n, N + 1), np.float32), np.empty(B, np.float32)
        sample, native = _core.sample_linear_prompts, _core.multihead_lsa_loss_and_grad
        fused = _core.linear_prompts_multihead_loss_and_grad  # looked up per run (the no-op swap)
        for t in range(steps + 1):  # fit's final record evaluates the final θ: one more call
            np.copyto(W, current(), casting="unsafe")
            if separate:
                ln.multihead.merge_kq(Wv[1], Wv[2], out=W_kq)
            if method == "tokens":
                sample(spec._spec, B, min(t, steps - 1), E=E, y_q=y_q)
                native(E, y_q, Wv[0], W_kq, False, "cpu", out=(gv[0], d_kq))
            else:
                fused(spec._spec, B, min(t, steps - 1), method, Wv[0], W_kq, gv[0], d_kq)
            if separate:
                ln.multihead.chain_kq(Wv[1], Wv[2], d_kq, out=(gv[1], gv[2]))
            if t < steps:
                update(t, g)

    def problem():
        return (train.MultiHeadLSAObjective(W_pv, **kq, method=method),
                train.Prompts(spec, batch=B))

    if method == "tokens":
        return bare, problem, {"sample_linear_prompts": _noop_sample,
                               "multihead_lsa_loss_and_grad": _noop_mh}
    return bare, problem, {"linear_prompts_multihead_loss_and_grad": _noop_fused}


def _timed(fn, steps, optimizer):
    w0, c0 = _clock()
    fn(steps, optimizer)
    w1, c1 = _clock()
    return (w1 - w0) / steps, (c1 - c0) / steps


def _clock():
    return time.perf_counter(), time.process_time()


def _noop_ka(Z0, y_q, V, B, C, activations, out=None):
    """kernel_attention_loss_and_grad's stand-in: a loss of 0 and zero gradients, written into the
    given outputs (else allocated, as the native call would). Zeros, not the outputs left as they
    were: an uninitialized gradient buffer holds arbitrary values, which sent θ past 1e30 in the
    runs seen and the loop into its overflow fall-backs (the norm rescaled, the float32 range
    checked entry by entry), timing those."""
    if out is None:
        return 0.0, np.zeros_like(V), np.zeros_like(B), np.zeros_like(C)
    for g in out:
        g.fill(0)
    return (0.0, *out)


def _noop_mh(E, y_q, W_pv, W_kq, predictions, device, out=None, loss=None):
    """The H-head kernel's stand-in: a loss of 0 and zero gradients, written into the given
    outputs (else allocated, as the native call would; zeros: a finite gradient to chain)."""
    if out is None:
        return 0.0, np.zeros_like(W_pv), np.zeros_like(W_kq)
    for g in out:
        g.fill(0)
    return (0.0, *out)


def _noop_fused(spec, batch, step, method, W_pv, W_kq, d_W_pv, d_W_kq, device="cpu", loss=None):
    """The fused step's stand-in (one head or H heads): a loss of 0, zero gradients written in
    place (see :func:`_noop_ka`)."""
    d_W_pv.fill(0)
    d_W_kq.fill(0)
    return 0.0


def _noop_sample(spec, batch, step, **buffers):
    """sample_linear_prompts' stand-in: the prompt buffers left as they are."""


def _fitted(problem, record_every):
    """``fitted(steps, optimizer)``: train.fit on a fresh ``problem()`` (objective, data)."""
    def fitted(steps, optimizer):
        objective, data = problem()
        train.fit(objective, optimizer, lr=LR, steps=steps, data=data, record_every=record_every,
                  progress=False)
    return fitted


class _NoOps:
    """The native calls ``noops`` names replaced by their stand-ins while in the ``with`` block
    (``swap`` False: left as they are)."""

    def __init__(self, noops: dict, swap: bool = True):
        self.noops, self.swap = noops, swap

    def __enter__(self):
        self.orig = {name: getattr(_core, name) for name in self.noops}
        if self.swap:
            for name, noop in self.noops.items():
                setattr(_core, name, noop)

    def __exit__(self, *exc):
        for name, fn in self.orig.items():
            setattr(_core, name, fn)


def _measure(case, optimizer, steps, repeats, record_every=1):
    bare, problem, noops = case
    fitted = _fitted(problem, record_every)
    out = {}
    for label, swap in (("real", False), ("noop", True)):
        with _NoOps(noops, swap):
            bare(2, optimizer), fitted(2, optimizer)  # warm-up
            runs = {"bare": [], "fit": []}
            n = steps if not swap else 10 * steps  # the no-op loops are fast: more steps
            for _ in range(repeats):
                runs["bare"].append(_timed(bare, n, optimizer))
                runs["fit"].append(_timed(fitted, n, optimizer))
        for k, v in runs.items():
            out[label, k] = (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v))
    return out


def _cases(only: str):
    """{name: case} of the models ``only`` names ("lsa", "multihead", "kernel"; "all")."""
    cases = {}
    if only in ("all", "lsa"):
        cases.update({"LSA tokens (d=5 N=20 B=4096)": lambda: _lsa_case("tokens"),
                      "LSA wishart (d=5 N=20 B=4096)": lambda: _lsa_case("wishart")})
    if only in ("all", "multihead"):
        for separate in (False, True):
            for method in ("tokens", "wishart"):
                name = (f"H-head {'separate r=1' if separate else 'merged'} {method} "
                        "(d=5 N=20 H=5 B=4096)")
                cases[name] = lambda m=method, s=separate: _multihead_case(m, s)
    if only in ("all", "kernel"):
        for sparse in (False, True):
            cases[f"kernel attention softmax {'sparse' if sparse else 'full'} V (d=5 n=20 L=3 "
                  "B=4096, f64 batch, f32 model)"] = lambda s=sparse: _ka_case(sparse=s)
    return cases


def loop_report(steps: int, repeats: int, only: str = "all", threads: int = 1,
                record_every: int = 1) -> None:
    ln.set_num_threads(threads)
    cases = {name: make() for name, make in _cases(only).items()}
    print(f"lsa_native {ln.__version__} ({os.path.dirname(ln.__file__)}), {ln.num_threads()} "
          f"native thread(s), CPU kernels {ln.cpu_kernel_isa()}, load average "
          f"{os.getloadavg()[0]:.1f}; records every {record_every} step(s) (fit's default: 1); "
          f"median of {repeats} alternating runs of {steps} steps (no-op: {10 * steps})")
    print("| case | optimizer | bare step wall / CPU (µs) | fit step wall / CPU (µs) "
          "| fit − bare wall / CPU | no-op kernel: fit step, bare step CPU (µs) "
          "| fit overhead, no-op kernel: wall / CPU (µs) | no-op CPU overhead / bare CPU step |")
    print("|---|---|---|---|---|---|---|---|")
    for name, case in cases.items():
        for optimizer in OPTIMIZERS:
            m = _measure(case, optimizer, steps, repeats, record_every)
            (bw, bc), (fw, fc) = m["real", "bare"], m["real", "fit"]
            (nbw, nbc), (nfw, nfc) = m["noop", "bare"], m["noop", "fit"]
            print(f"| {name} | {optimizer} | {bw * 1e6:.0f} / {bc * 1e6:.0f} "
                  f"| {fw * 1e6:.0f} / {fc * 1e6:.0f} "
                  f"| {100 * (fw - bw) / bw:+.1f}% / {100 * (fc - bc) / bc:+.1f}% "
                  f"| {nfc * 1e6:.1f}, {nbc * 1e6:.1f} "
                  f"| {(nfw - nbw) * 1e6:.1f} / {(nfc - nbc) * 1e6:.1f} "
                  f"| {100 * (nfc - nbc) / bc:.2f}% |", flush=True)
    print("(last column: fit's Python work per step — both loops with the native call replaced by "
          "a no-op, CPU time — over the CPU time of the bare loop's real step: the overhead with "
          "the machine's load taken out)")


def noop_min_report(only: str, steps: int, repeats: int, record_every: int = 1) -> None:
    """``--noop-min``: fit's and the bare loop's CPU time per step with the no-op kernels, each
    the minimum of ``repeats`` alternating runs of ``steps`` steps, one line per case and
    optimizer (``noop|case|optimizer|record_every|fit µs|bare µs``) for :func:`summary_report`."""
    ln.set_num_threads(1)
    for name, make in _cases(only).items():
        bare, problem, noops = make()
        fitted = _fitted(problem, record_every)
        for optimizer in OPTIMIZERS:
            with _NoOps(noops):
                fitted(2, optimizer), bare(2, optimizer)  # warm-up
                runs = {"fit": [], "bare": []}
                for _ in range(repeats):
                    runs["fit"].append(_timed(fitted, steps, optimizer)[1])
                    runs["bare"].append(_timed(bare, steps, optimizer)[1])
            print(f"noop|{name}|{optimizer}|{record_every}|{min(runs['fit']) * 1e6:.2f}|"
                  f"{min(runs['bare']) * 1e6:.2f}", flush=True)


def summary_report(paths) -> None:
    """``--summarize``: the table of rounds of ``--noop-min`` lines, each prefixed ``before|`` or
    ``after|`` (``bench/fit_noop_rounds.sh``): per case, optimizer and record_every, the median
    over rounds of fit's and the bare loop's minima, the median over rounds of the per-round
    difference fit − bare (not the difference of the two medians), and the range of the bare
    loop's minima over rounds (identical code both sides: the noise)."""
    rounds = {}
    for path in paths:
        with open(path) as f:
            for line in f:
                side, tag, case, optimizer, every, fit_us, bare_us = line.strip().split("|")
                if tag == "noop":
                    rounds.setdefault((case, optimizer, every), {}).setdefault(side, []).append(
                        (float(fit_us), float(bare_us)))
    print("| case | optimizer | record_every | rounds | fit, no-op (µs) | bare, no-op (µs) "
          "| bare's range over rounds (µs) | median of per-round fit − bare (µs) |")
    print("|---|---|---|---|---|---|---|---|")
    def cell(sides, of):
        return " → ".join(of(sides[side]) if sides.get(side) else "-" for side in ("before", "after"))

    def median(values):
        return f"{statistics.median(values):.1f}"

    for (case, optimizer, every), sides in rounds.items():
        n = "/".join(str(len(sides.get(side, []))) for side in ("before", "after"))
        print(f"| {case} | {optimizer} | {every} | {n} "
              f"| {cell(sides, lambda runs: median(f for f, _ in runs))} "
              f"| {cell(sides, lambda runs: median(b for _, b in runs))} "
              f"| {cell(sides, lambda runs: f'{min(b for _, b in runs):.1f}-{max(b for _, b in runs):.1f}')} "
              f"| {cell(sides, lambda runs: median(f - b for f, b in runs))} |")


def parts_report(only: str = "all", record_every: int = 1, number: int = 20000) -> None:
    """Where fit's per-step Python time goes (``--parts``): each part of the host loop's step,
    the native calls replaced by the no-op stand-ins, timed alone (CPU time, the minimum of 9
    timeit repeats of ``number`` calls). The parts are fit's own objects, built as ``fit`` builds
    them (its private ``_setup``, ``_Divergence``, ``_Recorder``, ``_HostOptimizer``): this
    report reads fit's internals by design, to attribute its step."""
    fit_module = importlib.import_module("lsa_native.train.fit")  # train.fit is the function
    print(f"lsa_native {ln.__version__} ({os.path.dirname(ln.__file__)}), load average "
          f"{os.getloadavg()[0]:.1f}; µs a call, CPU time, min of 9 x {number} calls")
    print("| case | optimizer | bound step (no-op kernel) | guarded step (bound step, result "
          "checks, ‖g‖) | of which ‖g‖ | optimizer step (copy g, native step) "
          "| record (row, History, time) | loop: due? failed? next θ |")
    print("|---|---|---|---|---|---|---|---|")
    for name, make in _cases(only).items():
        _, problem, noops = make()
        for optimizer in OPTIMIZERS:
            with _NoOps(noops):
                times = _parts(fit_module, problem, optimizer, record_every, number)
            print(f"| {name} | {optimizer} | " + " | ".join(f"{v * 1e6:.2f}" for v in times) + " |",
                  flush=True)


def _parts(fit_module, problem, optimizer, record_every, number):
    """CPU seconds a call of each part of the host loop's step (see :func:`parts_report`)."""
    F = fit_module
    objective, data = problem()
    plan = F._setup(objective, optimizer, {"lr": LR}, steps=10**9, data=data, theta0=None,
                    eval_data=None, eval_every=None, record_every=record_every, metrics=None,
                    target=None, bayes_loss=None, callbacks=(), run_dir=None,
                    checkpoint_every=None, keep_checkpoints=3, resume=False, progress=False,
                    desc="fit")
    state = F._start(plan)
    history = F.History()
    guard = F._Divergence(plan, state, history)
    rec = F._Recorder(plan, state, history, guard, None)
    host = F._HostOptimizer.of(plan, state)
    theta = host.theta
    loss, grad, norm = guard.loss_and_grad(0, theta, 0)
    grad = grad.copy()  # the next bound step overwrites its buffer

    def loop():
        rec.due(5)
        host.failed()
        return host.theta

    calls = [lambda: plan.step_fn(theta, 5), lambda: guard.loss_and_grad(5, theta, 5),
             lambda: F.unchecked_grad_norm(grad), lambda: host.step(5, grad, norm),
             lambda: rec.write(5, theta, loss, norm, LR), loop]
    return [min(timeit.repeat(call, number=number, repeat=9, timer=time.process_time)) / number
            for call in calls]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=30000)
    p.add_argument("--resample-every", type=int, default=10)
    p.add_argument("--sampler", choices=["numpy", "native"], default="numpy")
    p.add_argument("--loop", action="store_true", help="fit vs a bare loop of the native calls")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--lsa-only", action="store_true", help="--loop: = --only lsa")
    p.add_argument("--only", choices=["all", "lsa", "multihead", "kernel"], default="all",
                   help="--loop: the models measured (lsa: LSAObjective, multihead: "
                        "MultiHeadLSAObjective, kernel: KernelAttentionObjective)")
    p.add_argument("--threads", type=int, default=1, help="--loop: native threads (1: per-core)")
    p.add_argument("--record-every", type=int, default=1,
                   help="--loop, --parts: fit's record_every (default 1, fit's default)")
    p.add_argument("--parts", action="store_true",
                   help="where fit's Python time per step goes, part by part (no-op kernels)")
    p.add_argument("--noop-min", action="store_true",
                   help="fit's and the bare loop's no-op CPU step, minimum of --repeats runs of "
                        "--steps steps, as lines for --summarize (bench/fit_noop_rounds.sh)")
    p.add_argument("--summarize", nargs="+", metavar="FILE",
                   help="the before/after table of rounds of --noop-min lines")
    args = p.parse_args(argv)
    only = "lsa" if args.lsa_only else args.only
    if args.summarize:
        summary_report(args.summarize)
        return 0
    if args.noop_min:
        noop_min_report(only, args.steps, args.repeats, args.record_every)
        return 0
    if args.parts:
        parts_report(only, args.record_every)
        return 0
    if args.loop:
        loop_report(args.steps if args.steps != 20 else 200, args.repeats, only, args.threads,
                    args.record_every)
        return 0
    d, n, L = 5, 30, 3
    rng = np.random.default_rng(0)
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    Sigma = Q.T @ np.diag([1, 1, 0.25, 2.25, 1]) @ Q  # CCS H.1
    if args.sampler == "native":
        spec = ln.sampling.KernelGPPrompts(d, n, "exp", Sigma=Sigma, seed=0)
    else:
        spec = train.KernelGPPromptsNumpy(d, n, "exp", Sigma=Sigma, seed=0)

    sample_t, native_t, opt_t = Timer(), Timer(), Timer()

    class TimedSpec:
        def sample(self, **kw):
            return sample_t.wrap(spec.sample)(**kw)

    class TimedAdam(train.Adam):
        def step(self, theta, grad, state):
            return opt_t.wrap(super().step)(theta, grad, state)

    orig = _core.kernel_attention_loss_and_grad
    _core.kernel_attention_loss_and_grad = native_t.wrap(orig)
    stamps = []
    try:
        params = ka.KernelAttentionParams.gaussian(rng, d, L, 1, "softmax")
        t_start = time.perf_counter()
        train.fit(train.KernelAttentionObjective(params), TimedAdam(lr=1e-3, clip_norm=1.0),
                  data=train.Prompts(TimedSpec(), batch=args.batch, resample_every=args.resample_every),
                  steps=args.steps, progress=False,
                  callbacks=[lambda info: stamps.append(time.perf_counter())])
    finally:
        _core.kernel_attention_loss_and_grad = orig
    edges = [t_start] + stamps
    rows = []
    for a, b in zip(edges[:-1], edges[1:]):
        rows.append({"step": b - a, "native": native_t.within(a, b), "opt": opt_t.within(a, b),
                     "sample": sample_t.within(a, b)})
    med = lambda k, rs: statistics.median(r[k] for r in rs)
    warm = rows[1:]  # the first step also pays thread start-up and first touches
    no_sample = [r for r in warm if r["sample"] == 0]
    per_sample = statistics.median(s for _, s in sample_t.calls)
    step_ns = med("step", no_sample)
    native, opt = med("native", no_sample), med("opt", no_sample)
    overhead = step_ns - native - opt
    amort = per_sample / args.resample_every
    step = step_ns + amort
    print(f"lsa_native {ln.__version__}, {ln.num_threads()} threads; d={d} n={n} L={L} "
          f"B={args.batch} float32, softmax, sparse V; Adam + clipping; {args.sampler} K-GP sampler, "
          f"resampled every {args.resample_every} steps; {args.steps} steps, medians")
    print("| part | ms per step | share of the step |")
    print("|---|---|---|")
    for name, v in (("sampling (amortized: per sample / k)", amort), ("native forward+backward", native),
                    ("optimizer (Adam, clipping)", opt), ("Python overhead", overhead)):
        print(f"| {name} | {v * 1e3:.2f} | {100 * v / step:.1f}% |")
    print(f"| **step** | {step * 1e3:.2f} | 100% |")
    print(f"sampling: {per_sample * 1e3:.1f} ms per batch of {args.batch}; everything but native "
          f"fwd+bwd: {100 * (step - native) / step:.1f}% of the step (target <= 25%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
