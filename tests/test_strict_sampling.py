"""Issue 23, family 2 and 8: every sampler's output is checked once (an overflow names the output
and the argument that caused it), degenerate laws and unrepresentable parameters are refused up
front, label_fn output is validated, and the smaller argument checks name their argument."""
import os

import numpy as np
import pytest

from lsa_native import data, lsa
from lsa_native.sampling import KernelGPPrompts, LinearPrompts, NumpyKernelGPPrompts


@pytest.mark.parametrize("make, call, names", [
    (lambda: LinearPrompts(3, 4, covariance_law=("exponential", 1e308)),
     lambda s: s.sample(3, dtype=np.float64), "E .*covariance_law"),
    (lambda: LinearPrompts(3, 4, covariance_law=("exponential", 1e308)),
     lambda s: s.sample_embedding(3, dtype=np.float64), "E .*covariance_law"),
    (lambda: LinearPrompts(3, 4, covariance_law=("exponential", 1e308)),
     lambda s: s.sample_lambdas(3), "lambdas.*covariance_law"),
    (lambda: LinearPrompts(3, 4, 1e76 * np.eye(3)), lambda s: s.sample(3), "E .*Lambda"),
    (lambda: KernelGPPrompts(3, 4, Sigma=1e300 * np.eye(3)), lambda s: s.sample(3), "E .*Sigma"),
    (lambda: NumpyKernelGPPrompts(3, 4, Sigma=1e300 * np.eye(3)), lambda s: s.sample(3), "X.*Sigma"),
])
def test_overflowing_draws_raise_naming_output_and_cause(make, call, names):
    with pytest.raises(FloatingPointError, match=f"overflowed.*{names.split('.*')[1]}") as info:
        call(make())
    assert info.match(names.split(" ")[0].split(".*")[0])


@pytest.mark.parametrize("kwargs, name", [
    (dict(Lambda=1e200 * np.eye(3)), "Lambda"), (dict(noise_std=1e200), "noise_std"),
    (dict(noise_std=1e-50), "noise_std"), (dict(Lambda=1e-100 * np.eye(3)), "Lambda"),
])
def test_float32_unrepresentable_parameters_refused_up_front(kwargs, name):
    spec = LinearPrompts(3, 4, **kwargs)
    with pytest.raises(ValueError, match=f"^{name}: .*float32"):
        spec.sample(2)
    assert np.all(np.isfinite(spec.sample(2, dtype=np.float64).E))  # float64 holds them


def test_numpy_samplers_check_the_cast_outputs():
    with pytest.raises(FloatingPointError, match="y: overflowed float32.*noise_std"):
        data.linear_regression_prompts(np.random.default_rng(0), 2, 3, 4, noise_std=1e300,
                                       dtype=np.float32)
    with pytest.raises(ValueError, match="^X: values overflow float32"):
        data.embed(np.full((1, 2, 3), 1e39), np.ones((1, 2)), np.ones((1, 3)), np.float32)


@pytest.mark.parametrize("law", [("two_point", 0, 0, 0.5), ("two_point", 0, 1, 1),
                                 ("two_point", 1, 0, 0)])
def test_point_mass_at_zero_refused(law):
    with pytest.raises(ValueError, match="covariance_law: two_point.*probability 1"):
        LinearPrompts(3, 4, covariance_law=law)


def test_two_point_with_a_zero_value_still_allowed():
    lam = LinearPrompts(3, 4, covariance_law=("two_point", 0.0, 2.0, 0.5)).sample_lambdas(50)
    assert set(np.unique(lam)) == {0.0, 2.0}


@pytest.mark.parametrize("law, param", [(("gamma", "a", 1.0), "shape"), (("exponential", None), "scale"),
                                        (("uniform", 0.0, 1j), "hi")])
def test_law_parameter_messages_name_the_parameter(law, param):
    with pytest.raises(TypeError, match=f"covariance_law: {law[0]} parameter '{param}'"):
        LinearPrompts(3, 4, covariance_law=law)


@pytest.mark.parametrize("label_fn, error", [
    (lambda z: z[..., None], ValueError), (lambda z: z * np.nan, ValueError),
    (lambda z: z * 1j, TypeError), (lambda z: None, TypeError), (lambda z: z[:1], ValueError),
])
def test_label_fn_output_validated(label_fn, error):
    with pytest.raises(error, match="label_fn"):
        LinearPrompts(3, 4).sample(2, label_fn=label_fn)


def test_label_fn_not_callable_and_query_checked_before_sampling():
    spec = LinearPrompts(3, 4)
    with pytest.raises(TypeError, match="label_fn"):
        spec.sample(2, label_fn=42)
    with pytest.raises(ValueError, match="query"):
        spec.sample(2, query="nope")


def test_label_fn_applied_with_noise_kept():
    spec = LinearPrompts(3, 6, noise_std=0.5, seed=3)
    plain, shifted = spec.sample(4, dtype=np.float64), spec.sample(4, dtype=np.float64, label_fn=np.tanh)
    lin = np.einsum("bnd,bd->bn", plain.X, plain.w)
    np.testing.assert_allclose(shifted.y - np.tanh(lin), plain.y - lin, atol=1e-12)


def test_the_output_check_is_skipped_only_when_the_law_bounds_prove_finiteness():
    # bound of y = d z_max (row scale z_max) + σ z_max; Λ = c I with c just under the float32 limit
    spec = LinearPrompts(3, 4, (1e36) ** 2 * np.eye(3))  # x ~ 1e36·z: labels may overflow float32
    x_max, y_max, lam_max = spec._bounds()
    assert y_max > np.finfo(np.float32).max / 4 and lam_max == 0
    try:
        b = spec.sample(64)
        assert np.all(np.isfinite(b.E))
    except FloatingPointError as e:
        assert "Lambda" in str(e)
    assert LinearPrompts(3, 4)._bounds()[1] < 1e4
    # a law whose λ itself may overflow float32 (the native draw is made in float32) is scanned
    assert LinearPrompts(3, 4, covariance_law=("exponential", 3e37))._bounds()[2] > 3.4e38


@pytest.mark.parametrize("flag", ["yes", None, 1.5])
def test_flags_must_be_bool(flag):
    with pytest.raises(TypeError, match="query_noise"):
        LinearPrompts(3, 4, query_noise=flag)
    with pytest.raises(TypeError, match="return_xi"):
        KernelGPPrompts(3, 4).sample(2, return_xi=flag)


def test_check_covariance_empty_and_split_shape_rank():
    with pytest.raises(ValueError, match="^Sigma: expected a non-empty"):
        data.check_covariance(np.zeros((0, 0)), "Sigma")
    with pytest.raises(ValueError, match="^E: expected a 3-d array"):
        lsa.split_shape(np.zeros((2, 3)))
    assert lsa.split_shape(np.zeros((2, 4, 6))) == (2, 3, 5)


@pytest.mark.skipif(os.environ.get("LSA_NATIVE_SANITIZED") == "1",
                    reason="AddressSanitizer reserves more address space than the cap "
                           "(tools/sanitize_python_suite.sh)")
def test_set_num_threads_under_an_address_space_cap_clamps_with_a_warning():
    """4096 threads' stacks exceed a 3 GiB address space: the pool keeps part of the threads it
    could start, set_num_threads says so (RuntimeWarning, the count in use returned), and native
    calls and allocations afterwards still work — no crash, no bare RuntimeError."""
    import subprocess
    import sys
    import textwrap

    resource = pytest.importorskip("resource")
    code = textwrap.dedent("""
        import warnings, numpy as np, lsa_native as ln
        from lsa_native.sampling import normals
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = ln.set_num_threads(4096)
        assert 1 <= got < 4096 and ln.num_threads() == got, got
        assert any("set_num_threads" in str(w.message) for w in caught), caught
        a = normals(4096 * 2000)          # a parallel call, then a 60 MiB allocation
        assert np.isfinite(a).all()
        assert ln.set_num_threads(2) == 2
        print("ok", got)
    """)
    cap = 3 << 30
    limit = lambda: resource.setrlimit(resource.RLIMIT_AS, (cap, cap))  # noqa: E731
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       preexec_fn=limit, timeout=300)
    assert p.returncode == 0 and p.stdout.startswith("ok"), p.stderr[-2000:]
