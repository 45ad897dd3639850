"""lsa_native.train as strict as the rest of the API (issue 23): every divergence is TrainingDiverged
with its step, last checkpoint and a learning-rate hint; every fit argument is checked once, before
any step, with a message naming it; user callables' outputs are checked; a full disk in a run
directory names the file and leaves no partial file (simulated: no real disk is filled)."""
from __future__ import annotations

import errno
import json
import os

import numpy as np
import pytest

from lsa_native import data, lsa, sampling, train
from lsa_native import kernel_attention as ka
from lsa_native.train import optim, rundir


def quad(theta, step):
    return float(theta @ theta), 2 * theta


def enospc():
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def stray_temporaries(path):
    return sorted(p.name for p in path.iterdir() if ".tmp" in p.name)


# ---- divergence: one exception for every source ---------------------------------------------------

def _lsa(dtype, fused, seed):
    spec = (sampling.LinearPrompts(2, 5, seed=seed) if fused else
            train.LinearPromptsNumpy(2, 5, seed=seed))
    return train.LSAObjective(0.5 * np.eye(3), 0.5 * np.eye(3), dtype=dtype), \
        train.Prompts(spec, batch=16, dtype=dtype)


def _kernel_attention(dtype, fused, seed):
    p0 = ka.KernelAttentionParams.gaussian(np.random.default_rng(seed), 2, 2, activations="softmax")
    return train.KernelAttentionObjective(p0), \
        train.Prompts(sampling.KernelGPPrompts(2, 5, "exp", seed=seed), batch=16, dtype=dtype)


def _population(dtype, fused, seed):
    return train.PopulationObjective(0.5 * np.eye(3), 0.5 * np.eye(3), 5, Lambda=np.eye(2)), None


@pytest.mark.parametrize("make, dtype, fused", [
    (_lsa, np.float32, True), (_lsa, np.float64, True), (_lsa, np.float32, False),
    (_lsa, np.float64, False), (_kernel_attention, np.float32, None),
    (_kernel_attention, np.float64, None), (_population, None, None)])
@pytest.mark.parametrize("lr", [1e4, 1e40])
def test_native_divergence_is_training_diverged(tmp_path, rng, make, dtype, fused, lr):
    """A learning rate far too large, whatever the first sign (a native overflow, parameters past
    the float32 range, a non-finite loss or update): TrainingDiverged, no warning (warnings are
    errors here), the step, the last checkpoint and the learning rate."""
    objective, source = make(dtype, fused, int(rng.integers(2**31)))
    k = 2
    with pytest.raises(train.TrainingDiverged, match="lower the learning rate") as e:
        train.fit(objective, "sgd", lr=lr, steps=60, data=source, run_dir=tmp_path,
                  checkpoint_every=k, progress=False)
    err = e.value
    assert err.step >= 1 and err.lr == lr and f"step {err.step}:" in str(err)
    expected = (err.step // k) * k  # checkpoints after steps k, 2k, ...
    assert (err.checkpoint is None) == (expected == 0)
    if expected:
        assert err.checkpoint.name == f"ckpt_{expected:09d}.npz" and err.checkpoint.exists()
    assert np.all(np.isfinite(err.theta))
    # Rows of the steps before (and of the step itself when its update was what failed).
    assert err.history.step[:err.step] == list(range(err.step)) and len(err.history) <= err.step + 1
    assert not isinstance(err.__cause__, train.TrainingDiverged)


def test_native_overflow_becomes_training_diverged_with_its_cause():
    def overflows_at_3(theta, step):
        if step == 3:
            raise FloatingPointError("loss: overflowed to non-finite values from finite inputs")
        return quad(theta, step)

    with pytest.raises(train.TrainingDiverged, match=r"step 3: loss: overflowed.*lr = 0\.1") as e:
        train.fit(overflows_at_3, "sgd", lr=0.1, theta0=np.ones(2), steps=9, progress=False)
    assert isinstance(e.value.__cause__, FloatingPointError) and e.value.lr == 0.1


def test_float32_range_is_divergence_after_updates_but_bad_input_at_the_start():
    spec = sampling.LinearPrompts(2, 5, seed=3)
    source = train.Prompts(spec, batch=8, dtype=np.float32)
    with pytest.raises(train.TrainingDiverged, match="float32 range") as e:
        train.fit(train.LSAObjective(np.eye(3), np.eye(3)), "sgd", lr=1e40, steps=5, data=source,
                  progress=False)
    assert isinstance(e.value.__cause__, ValueError) and e.value.step >= 1
    with pytest.raises(ValueError, match="W_pv: values overflow float32") as e:  # not divergence
        train.fit(train.LSAObjective(1e39 * np.eye(3), np.eye(3)), "sgd", lr=1e-3, steps=5,
                  data=source, progress=False)
    assert not isinstance(e.value, train.TrainingDiverged)


def test_overflow_at_the_initial_parameters_blames_them_not_the_learning_rate():
    source = train.Prompts(sampling.LinearPrompts(2, 5, seed=4), batch=8, dtype=np.float64)
    with pytest.raises(train.TrainingDiverged, match="step 0: .*initial parameters.*theta0") as e:
        train.fit(train.LSAObjective(1e200 * np.eye(3), 1e200 * np.eye(3)), "sgd", lr=1e-3,
                  steps=5, data=source, progress=False)
    assert e.value.step == 0 and e.value.lr is None and "lower the learning rate" not in str(e.value)


def test_non_finite_update_is_divergence_with_the_parameters_before_it():
    # Adam with eps = 0 at a zero gradient: m̂ / √v̂ = 0/0.
    with pytest.raises(train.TrainingDiverged, match=r"step 0: the update gave non-finite "
                                                     r"parameters.*eps > 0") as e:
        train.fit(quad, "adam", lr=0.1, eps=0, theta0=np.zeros(3), steps=4, progress=False)
    np.testing.assert_array_equal(e.value.theta, np.zeros(3))
    assert e.value.lr == 0.1
    # SGD whose step overflows float64 from a finite gradient: no RuntimeWarning, divergence.
    big = lambda th, k: (1.0, np.full(2, 1e300))
    with pytest.raises(train.TrainingDiverged, match="step 0: the update gave non-finite") as e:
        train.fit(big, "sgd", lr=1e10, theta0=np.ones(2), steps=3, progress=False)
    np.testing.assert_array_equal(e.value.theta, np.ones(2))


def test_numpy_overflow_in_a_callable_objective_is_divergence_not_a_warning():
    # θ·θ overflows at step 1 (numpy would warn; warnings are errors in this suite).
    with pytest.raises(train.TrainingDiverged, match="step 1: non-finite loss .inf.*lr = 1e\\+200"):
        train.fit(quad, "sgd", lr=1e200, theta0=np.ones(2), steps=3, progress=False)


def test_non_finite_heldout_loss_is_divergence():
    obj = train.CallableObjective(quad, np.ones(2),
                                  eval_fn=lambda th, b: np.inf if b == "late" and th[0] < 0.5 else 1.0)
    with pytest.raises(train.TrainingDiverged, match="non-finite held-out loss"):
        train.fit(obj, "sgd", lr=0.1, steps=20, eval_data="late", eval_every=1, progress=False)


def test_grad_norm_of_a_huge_finite_gradient_is_finite_and_exact(rng):
    g = rng.standard_normal(7)
    assert optim.grad_norm(g) == pytest.approx(float(np.linalg.norm(g)), rel=1e-15)
    assert optim.grad_norm(1e300 * g) == pytest.approx(1e300 * float(np.linalg.norm(g)), rel=1e-14)
    res = train.fit(lambda th, k: (1.0, 1e300 * g), "sgd", lr=1e-300, theta0=np.zeros(7), steps=2,
                    progress=False)
    np.testing.assert_allclose(res.history["grad_norm"], 1e300 * np.linalg.norm(g), rtol=1e-14)


# ---- fit's arguments: checked once, before any step -----------------------------------------------

class Spy:
    """A callable objective that counts its calls (bad arguments must stop fit before the first)."""

    def __init__(self):
        self.calls = 0

    def __call__(self, theta, step):
        self.calls += 1
        return quad(theta, step)


def _lsa_setup(d=2):
    W = 0.3 * np.eye(d + 1)
    return train.LSAObjective(W, W), train.Prompts(train.LinearPromptsNumpy(d, 4, seed=1), batch=8)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"metrics": 3}, TypeError, "metrics: expected a dict"),
    ({"metrics": {1: len}}, TypeError, "metrics: expected string names"),
    ({"metrics": {"loss": len}}, ValueError, r"metrics\['loss'\]: a column fit writes itself"),
    ({"callbacks": [1]}, TypeError, r"callbacks\[0\]: expected a callable"),
    ({"callbacks": 5}, TypeError, "callbacks: expected a callable"),
    ({"run_dir": 123}, TypeError, "run_dir: expected a directory path"),
    ({"run_dir": b"runs"}, TypeError, "run_dir: expected a directory path"),
    ({"eval_data": "x", "bayes_loss": float("nan")}, ValueError, "bayes_loss: expected a finite"),
    ({"eval_data": "x", "bayes_loss": np.inf}, ValueError, "bayes_loss: expected a finite"),
    ({"eval_data": "x", "bayes_loss": -0.5}, ValueError, "bayes_loss: expected a finite number >= 0"),
    ({"eval_data": "x", "bayes_loss": "a"}, TypeError, "bayes_loss: expected a real number"),
    ({"eval_every": 2}, TypeError, "eval_data, eval_every: CallableObjective has no held-out "
                                   "evaluation .pass eval_fn="),
    ({"resume": "no", "run_dir": "r"}, TypeError, "resume: expected True or False"),
    ({"progress": "no"}, TypeError, "progress: expected True or False"),
    ({"desc": 3}, TypeError, "desc: expected a string"),
    ({"target": np.ones(3) + 1j}, TypeError, "target: expected a real-valued array"),
])
def test_bad_fit_arguments_fail_before_the_first_step(tmp_path, monkeypatch, kwargs, error, match):
    monkeypatch.chdir(tmp_path)
    spy = Spy()
    eval_fn = (lambda th, b: 1.0) if "eval_data" in kwargs else None
    with pytest.raises(error, match=match):
        train.fit(train.CallableObjective(spy, np.ones(3), eval_fn=eval_fn), "sgd", lr=0.1,
                  steps=3, **{"progress": False, **kwargs})
    assert spy.calls == 0 and list(tmp_path.iterdir()) == []


def test_eval_data_sources():
    """A PromptBatch, a FixedPrompts or a Prompts source (its first batch, fixed) all give the
    held-out loss of that batch; a sampler spec or a generator source is refused by name."""
    objective, source = _lsa_setup()
    spec = train.LinearPromptsNumpy(2, 4, seed=9)
    held = train.Prompts(spec, batch=12)
    batch = spec.sample(batch=12, step=0)
    W = 0.3 * np.eye(3)
    expected0 = lsa.loss_and_grad(batch.E, batch.y_q, W, W)[0]
    losses = []
    for ev in (batch, train.FixedPrompts(batch), held):
        res = train.fit(objective, "sgd", lr=0.05, steps=4, data=source, eval_data=ev,
                        eval_every=2, progress=False)
        losses.append(res.history["eval_loss"])
    assert losses[0][0] == expected0
    for other in losses[1:]:
        np.testing.assert_array_equal(other, losses[0])
    with pytest.raises(TypeError, match=r"eval_data: .*LinearPromptsNumpy .*train\.heldout"):
        train.fit(objective, "sgd", lr=0.05, steps=2, data=source, eval_data=spec, progress=False)
    gen = train.GeneratorPrompts(lambda r: batch, np.random.default_rng(0))
    with pytest.raises(TypeError, match="eval_data: .*GeneratorPrompts"):
        train.fit(objective, "sgd", lr=0.05, steps=2, data=source, eval_data=gen, progress=False)


def test_prompts_eval_data_resumes(tmp_path):
    objective, source = _lsa_setup()
    held = train.Prompts(train.LinearPromptsNumpy(2, 4, seed=9), batch=12)
    run = lambda steps, resume: train.fit(objective, "sgd", lr=0.05, steps=steps, data=source,
                                          eval_data=held, eval_every=2, run_dir=tmp_path,
                                          checkpoint_every=2, resume=resume, progress=False)
    run(4, False)
    again = run(6, True)
    full = train.fit(objective, "sgd", lr=0.05, steps=6, data=source, eval_data=held, eval_every=2,
                     progress=False)
    np.testing.assert_array_equal(again.history["eval_loss"], full.history["eval_loss"])


@pytest.mark.parametrize("d_data, d_eval, name", [(3, 2, "data"), (2, 3, "eval_data")])
def test_prompts_of_another_dimension_are_named_with_both_dims(d_data, d_eval, name):
    objective, _ = _lsa_setup(2)
    make = lambda d: data.linear_regression_prompts(np.random.default_rng(0), 4, d, 5)
    for wrap in (lambda b: b, train.FixedPrompts):
        with pytest.raises(ValueError, match=f"^{name}: prompts of dimension d = 3, the model has d = 2"):
            train.fit(objective, "sgd", lr=0.1, steps=2, data=wrap(make(d_data)),
                      eval_data=make(d_eval), progress=False)
    with pytest.raises(ValueError, match="^data: prompts of dimension d = 3, the model has d = 2"):
        train.fit(objective, "sgd", lr=0.1, steps=2, progress=False,
                  data=train.Prompts(sampling.LinearPrompts(3, 5, seed=0), batch=4))


def test_metrics_accept_one_callable_and_refuse_values_that_are_not_real():
    res = train.fit(quad, "sgd", lr=0.1, theta0=np.ones(3), steps=3, progress=False,
                    metrics=lambda th: float(th[0]))
    np.testing.assert_allclose(res.history["metric"], [1.0, 0.8, 0.64, 0.512], rtol=1e-15)
    for bad, what in ((None, "NoneType"), ("a", "str"), (1 + 2j, "complex"),
                      (np.ones(2) + 1j, "complex128"), ([None], "object")):
        with pytest.raises(TypeError, match=rf"^metrics\['m'\]: .*{what}"):
            train.fit(quad, "sgd", lr=0.1, theta0=np.ones(3), steps=3, progress=False,
                      metrics={"m": lambda th, v=bad: v})
    with pytest.raises(TypeError, match=r"^metrics\['m'\]\['x'\]: expected a real number"):
        train.fit(quad, "sgd", lr=0.1, theta0=np.ones(3), steps=3, progress=False,
                  metrics={"m": lambda th: {"x": None}})
    with pytest.raises(ValueError, match=r"^metrics\['m'\]\['lr'\]: .*column fit writes itself"):
        train.fit(quad, "sgd", lr=0.1, theta0=np.ones(3), steps=3, progress=False,
                  metrics={"m": lambda th: {"lr": 1.0}})


@pytest.mark.parametrize("out, error, match", [
    ((None, np.ones(2)), TypeError, "the loss .*expected a real number, got NoneType"),
    (("1.0", np.ones(2)), TypeError, "the loss .*got str"),
    ((1j, np.ones(2)), TypeError, "the loss .*got complex"),
    ((np.ones(2), np.ones(2)), TypeError, r"the loss .*an array of shape \(2,\)"),
    ((1.0, np.ones(2) + 1j), TypeError, "the gradient .*complex128"),
    ((1.0, None), TypeError, "the gradient .*object"),
    ((1.0, [[1.0], [1.0, 2.0]]), TypeError, "the gradient .*expected a real array"),
    ((1.0, np.ones(3)), ValueError, "the gradient has 3 values, θ has 2"),
])
def test_callable_objective_outputs_are_checked(out, error, match):
    with pytest.raises(error, match="^objective: " + match):
        train.fit(lambda th, k: out, "sgd", lr=0.1, theta0=np.ones(2), steps=2, progress=False)


def test_eval_fn_output_is_checked():
    obj = train.CallableObjective(quad, np.ones(2), eval_fn=lambda th, b: "low")
    with pytest.raises(TypeError, match="^eval_fn: the held-out loss .*got str"):
        train.fit(obj, "sgd", lr=0.1, steps=2, eval_data=0, progress=False)
    with pytest.raises(TypeError, match="^eval_fn: expected a callable"):
        train.CallableObjective(quad, np.ones(2), eval_fn=3)
    with pytest.raises(TypeError, match="^theta0: expected a real-valued array"):
        train.CallableObjective(quad, np.ones(2) + 1j)


def test_callbacks_none_is_no_callback():
    res = train.fit(quad, "sgd", lr=0.1, theta0=np.ones(2), steps=3, callbacks=None, progress=False)
    assert res.steps == 3 and not res.stopped


# ---- schedule and optimizer parameters --------------------------------------------------------------

SCHEDULE_NUMBERS = ["gamma", "step_size", "total_steps", "min_factor", "warmup_steps"]
OPTIMIZER_NUMBERS = {train.SGD: ["lr", "momentum", "dampening", "weight_decay", "clip_norm"],
                     train.Adam: ["lr", "eps", "weight_decay", "clip_norm"],
                     train.AdamW: ["lr", "eps", "weight_decay", "clip_norm"]}


@pytest.mark.parametrize("bad", ["a", 1 + 1j, [0.5], None, float("nan")])
def test_every_schedule_and_optimizer_number_is_named(bad):
    cases = [(lambda n=n: train.Schedule("cosine", **{n: bad}), n) for n in SCHEDULE_NUMBERS]
    cases += [(lambda c=c, n=n: c(**{n: bad}), n) for c, names in OPTIMIZER_NUMBERS.items()
              for n in names if not (n == "clip_norm" and bad is None)]  # clip_norm=None: off
    cases += [(lambda i=i: train.Adam(betas=tuple(bad if j == i else 0.9 for j in range(2))),
               rf"betas\[{i}\]") for i in range(2)]
    cases += [(lambda n=n: train.make_schedule("step", **{n: bad}), n) for n in ("gamma", "step_size")]
    for make, name in cases:
        with pytest.raises((TypeError, ValueError), match=f"^{name}: expected") as e:
            make()
        assert "could not convert" not in str(e.value)


def test_flags_and_kinds_are_checked():
    with pytest.raises(TypeError, match="^nesterov: expected True or False"):
        train.SGD(lr=0.1, momentum=0.9, nesterov="no")
    with pytest.raises(TypeError, match="^amsgrad: expected True or False"):
        train.Adam(amsgrad="no")
    with pytest.raises(TypeError, match="^schedule: expected a kind name"):
        train.Schedule(3)
    with pytest.raises(TypeError, match="^optimizer: expected an Optimizer"):
        train.make_optimizer(3)
    assert train.SGD(lr=0.1, momentum=0.9, nesterov=np.bool_(True)).nesterov is True


# ---- a full disk in a run directory ---------------------------------------------------------------

def test_full_disk_at_a_checkpoint_names_it_and_keeps_the_older_ones(tmp_path, monkeypatch):
    run = lambda steps, resume=False: train.fit(
        quad, "adam", lr=0.1, theta0=np.arange(1.0, 4.0), steps=steps, run_dir=tmp_path,
        checkpoint_every=2, keep_checkpoints=5, resume=resume, progress=False)
    real_savez, calls = np.savez, []

    def savez_until_the_disk_fills(f, **arrays):
        calls.append(1)
        if len(calls) == 3:  # the checkpoint of step 6: a partial zip, then ENOSPC
            f.write(b"PK\x03\x04 partial")
            raise enospc()
        return real_savez(f, **arrays)

    monkeypatch.setattr(np, "savez", savez_until_the_disk_fills)
    with pytest.raises(OSError, match=r"checkpoint of step 6.*No space left.*ckpt_000000006\.npz") as e:
        run(10)
    assert e.value.errno == errno.ENOSPC and e.value.filename.endswith("ckpt_000000006.npz")
    assert stray_temporaries(tmp_path) == []
    assert [p.name for p in sorted(tmp_path.glob("ckpt_*"))] == ["ckpt_000000002.npz",
                                                                 "ckpt_000000004.npz"]
    monkeypatch.setattr(np, "savez", real_savez)
    resumed = run(10, resume=True)  # from step 4, intact
    full = train.fit(quad, "adam", lr=0.1, theta0=np.arange(1.0, 4.0), steps=10, progress=False)
    np.testing.assert_array_equal(resumed.theta, full.theta)
    np.testing.assert_array_equal(resumed.history["loss"], full.history["loss"])


@pytest.mark.parametrize("name, what", [("config.json", "the run configuration"),
                                        ("history.csv", "the history table"),
                                        ("ckpt_000000003.npz", "the checkpoint of step 3")])
def test_full_disk_at_the_rename_names_the_file(tmp_path, monkeypatch, name, what):
    real_replace = os.replace

    def replace(src, dst):
        if str(dst).endswith(name):
            raise enospc()
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(OSError, match=f"run_dir: writing {what} failed .No space left") as e:
        train.fit(quad, "sgd", lr=0.1, theta0=np.ones(2), steps=3, run_dir=tmp_path,
                  progress=False)
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(tmp_path / name)
    assert stray_temporaries(tmp_path) == [] and not (tmp_path / name).exists()


def test_full_disk_in_a_history_row_cuts_it_off(tmp_path):
    path = tmp_path / "history.jsonl"
    log = rundir.HistoryLog(path)
    log.append({"step": 0, "loss": 1.0})

    class FillsUp:  # writes part of the row, then the disk is full
        def __init__(self, f):
            self.f = f

        def write(self, b):
            self.f.write(bytes(b[:5]))
            raise enospc()

        def __getattr__(self, name):
            return getattr(self.f, name)

    log._file = FillsUp(log._file)
    with pytest.raises(OSError, match=r"history row of step 1.*No space left.*history\.jsonl") as e:
        log.append({"step": 1, "loss": 0.5})
    log.close()
    assert e.value.errno == errno.ENOSPC
    assert [json.loads(line) for line in path.read_text().splitlines()] == [{"step": 0, "loss": 1.0}]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_history_on_a_full_device(tmp_path):
    (tmp_path / "history.jsonl").symlink_to("/dev/full")
    with pytest.raises(OSError, match=r"history row of step 0.*history\.jsonl") as e:
        train.fit(quad, "sgd", lr=0.1, theta0=np.ones(2), steps=3, run_dir=tmp_path, progress=False)
    assert e.value.errno == errno.ENOSPC
