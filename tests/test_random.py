"""Native counter-based RNG: Philox4x32-10 words, SIMD log/sin/cos, normal / uniform / gamma streams.

Statistical tests use fixed fresh seeds, z-scores (|z| < 5: a false alarm rate < 1e-6 per check)
and a power check: the same statistic computed against a deliberately wrong model must fail.
"""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

import lsa_native as ln
from lsa_native import _core
from lsa_native.sampling import gammas, normals, philox4x32, uniforms

Z_MAX = 5.0

# Random123 kat_vectors for philox4x32 10: (counter, key (k0, k1), output).
KATS = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF, 0xFFFFFFFF), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


@pytest.mark.parametrize("ctr,key,out", KATS)
def test_philox_known_answer_vectors(ctr, key, out):
    seed = key[0] | (key[1] << 32)
    got = philox4x32(np.array([ctr], dtype=np.uint32), seed)
    assert got.dtype == np.uint32
    assert tuple(int(v) for v in got[0]) == out


def test_philox_matches_randomgen_for_random_keys_and_counters():
    randomgen = pytest.importorskip("randomgen")
    rng = np.random.default_rng(20261126)
    for _ in range(20):
        seed = int(rng.integers(0, 2**63)) * 2 + int(rng.integers(0, 2))
        ctr = rng.integers(0, 2**32, size=4, dtype=np.uint64)
        c = sum(int(v) << (32 * i) for i, v in enumerate(ctr))
        # randomgen increments the 128-bit counter before each block
        g = randomgen.Philox(number=4, width=32, counter=(c - 1) % 2**128, key=seed)
        expected = g.random_raw(4)
        got = philox4x32(ctr.reshape(1, 4), seed)[0]
        np.testing.assert_array_equal(got.astype(np.uint64), expected)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_simd_log_within_one_ulp_of_numpy(dtype):
    rng = np.random.default_rng(11)
    tiny = np.finfo(dtype).tiny
    x = np.concatenate([np.exp(rng.uniform(-80, 80, 50000)), rng.random(50000),
                        [tiny, 1.0, 2.0, 0.5, np.sqrt(2.0), np.finfo(dtype).max]]).astype(dtype)
    out = np.empty_like(x)
    _core.simd_log(x, out)
    ref = np.log(x.astype(np.longdouble))
    err_ulp = np.abs(out - ref) / np.spacing(np.maximum(np.abs(ref), tiny).astype(dtype))
    # fdlibm's method: < 1 ulp; 2 allows the extended-precision reference's own rounding.
    assert err_ulp.max() <= 2.0
    assert out[x == 1.0].item() == 0.0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_simd_sincos_2pi_matches_numpy(dtype):
    rng = np.random.default_rng(12)
    u = np.concatenate([rng.random(100000), np.arange(0, 1.0001, 1 / 64)]).astype(dtype)
    s, c = np.empty_like(u), np.empty_like(u)
    _core.simd_sincos_2pi(u, s, c)
    a = 2 * np.pi * u.astype(np.longdouble)
    eps = np.finfo(dtype).eps
    # absolute error a few eps (values are O(1); the reduction in u is exact)
    assert np.abs(s - np.sin(a)).max() <= 4 * eps
    assert np.abs(c - np.cos(a)).max() <= 4 * eps
    np.testing.assert_array_equal(s[u == 0.25], 1.0)


def _moment_z(x, mean, var, m4):
    """z-scores of the sample mean and sample variance of x under a law with these moments."""
    n = x.size
    zm = (x.mean() - mean) / np.sqrt(var / n)
    zv = (((x - mean) ** 2).mean() - var) / np.sqrt((m4 - var**2) / n)
    return zm, zv


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_normals_moments_ks_and_power(dtype):
    z = normals(2**21, seed=987654321, step=3, prompt=5, dtype=dtype).astype(np.float64)
    zm, zv = _moment_z(z, 0.0, 1.0, 3.0)
    assert abs(zm) < Z_MAX and abs(zv) < Z_MAX
    # skewness and excess kurtosis: sd sqrt(6/n), sqrt(24/n)
    assert abs(stats.skew(z) / np.sqrt(6 / z.size)) < Z_MAX
    assert abs(stats.kurtosis(z) / np.sqrt(24 / z.size)) < Z_MAX
    assert stats.kstest(z, "norm").pvalue > 1e-4
    # power: a 1% error of the scale is caught by the variance z-score and the KS test
    assert abs(_moment_z(z, 0.0, 1.01**2, 3 * 1.01**4)[1]) > Z_MAX
    assert stats.kstest(z, "norm", args=(0, 1.01)).pvalue < 1e-4


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_normal_tails_at_4_and_5_sigma(dtype):
    n_chunks, chunk = 8, 2**22  # 33.6M normals
    c4 = c5 = 0
    for k in range(n_chunks):
        z = np.abs(normals(chunk, seed=4242, prompt=k, dtype=dtype))
        c4 += int((z > 4).sum())
        c5 += int((z > 5).sum())
    n = n_chunks * chunk

    def z_score(count, p):
        return (count - n * p) / np.sqrt(n * p * (1 - p))

    p4, p5 = 2 * stats.norm.sf(4), 2 * stats.norm.sf(5)
    assert abs(z_score(c4, p4)) < Z_MAX
    assert abs(z_score(c5, p5)) < Z_MAX
    # power: the same counts are far from a law with a 5% wider scale
    assert abs(z_score(c5, 2 * stats.norm.sf(5 / 1.05))) > Z_MAX
    assert abs(z_score(c4, 2 * stats.norm.sf(4 / 1.05))) > Z_MAX


def test_adjacent_streams_and_positions_are_uncorrelated():
    n = 2**20
    a = normals(n, seed=77, prompt=0)
    b = normals(n, seed=77, prompt=1)  # adjacent prompt index
    c = normals(n, seed=77, prompt=0, stream=ln.sampling.STREAMS["user"] + 1)  # adjacent stream
    d = normals(n, seed=78, prompt=0)  # adjacent seed
    e = normals(n, seed=77, step=1)  # adjacent step
    for other in (b, c, d, e):
        assert abs(np.corrcoef(a, other)[0, 1] * np.sqrt(n)) < Z_MAX
    # neighbouring positions (lag 1 pairs share a Box–Muller pair: cos/sin, uncorrelated)
    assert abs(np.corrcoef(a[:-1], a[1:])[0, 1] * np.sqrt(n)) < Z_MAX
    assert abs(np.corrcoef(a[:-1] ** 2, a[1:] ** 2)[0, 1] * np.sqrt(n / 2)) < Z_MAX * 2
    # power: a stream mixed with 1% of its neighbour is caught
    mixed = (b + 0.01 * a) / np.sqrt(1.0001)
    assert abs(np.corrcoef(a, mixed)[0, 1] * np.sqrt(n)) > Z_MAX


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_streams_are_positional(dtype):
    z = normals(1000, seed=3, step=9, prompt=2, stream=0x1234, dtype=dtype)
    part = normals(37, seed=3, step=9, prompt=2, stream=0x1234, start=501, dtype=dtype)
    np.testing.assert_array_equal(part, z[501:538])
    u = uniforms(100, seed=3, dtype=dtype)
    np.testing.assert_array_equal(uniforms(10, seed=3, start=45, dtype=dtype), u[45:55])
    assert u.min() > 0 and u.max() < 1


def test_uniforms_ks_and_power():
    u = uniforms(2**20, seed=5)
    assert stats.kstest(u, "uniform").pvalue > 1e-4
    assert stats.kstest(u, "uniform", args=(0, 1.01)).pvalue < 1e-4


@pytest.mark.parametrize("shape", [0.3, 1.0, 2.5, 47.5])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gamma_moments_ks_and_power(shape, dtype):
    g = gammas(200000, shape, seed=31337, dtype=dtype).astype(np.float64)
    assert g.min() > 0
    # Gamma(a): mean a, variance a, fourth central moment 3a² + 6a
    zm, zv = _moment_z(g, shape, shape, 3 * shape**2 + 6 * shape)
    assert abs(zm) < Z_MAX and abs(zv) < Z_MAX
    assert stats.kstest(g, "gamma", args=(shape,)).pvalue > 1e-4
    # power: shape off by 2% fails the KS test
    assert stats.kstest(g, "gamma", args=(shape * 1.02,)).pvalue < 1e-4


@pytest.mark.parametrize("shape", [0.05, 0.7, 1.0, 3.5, 1e4])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gamma_ranges_are_slices_of_one_stream(shape, dtype):
    # The SIMD fill takes 8 (float) / 4 (double) variates per vector and two vectors per call: every
    # length 0..100 from odd starts is the same bits as the slice of one long range.
    full = gammas(300, shape, seed=99, step=4, prompt=6, dtype=dtype)
    assert np.all(full > 0) or shape < 0.1  # float's U^(1/a) may underflow at shape 0.05
    for start in (0, 1, 3, 13, 101):
        for n in range(0, 101):
            part = gammas(n, shape, seed=99, step=4, prompt=6, start=start, dtype=dtype)
            np.testing.assert_array_equal(part, full[start:start + n], err_msg=f"start {start} n {n}")


def test_chi_square_via_gamma():
    k = 7
    x = 2 * gammas(200000, k / 2, seed=8)
    assert stats.kstest(x, "chi2", args=(k,)).pvalue > 1e-4
    assert stats.kstest(x, "chi2", args=(k + 0.2,)).pvalue < 1e-4


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_normals_independent_of_thread_count(dtype):
    before = ln.num_threads()
    try:
        ln.set_num_threads(1)
        a = normals(100003, seed=2**64 - 1, step=2**32 - 1, dtype=dtype)
        ln.set_num_threads(2)
        b = normals(100003, seed=2**64 - 1, step=2**32 - 1, dtype=dtype)
    finally:
        ln.set_num_threads(before)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("bad,exc", [(-1, ValueError), (2**64, ValueError), (1.5, TypeError),
                                     (True, TypeError)])
def test_bad_seed(bad, exc):
    with pytest.raises(exc, match="seed"):
        normals(4, seed=bad)


def test_bad_arguments():
    with pytest.raises(ValueError, match="step"):
        normals(4, step=2**32)
    with pytest.raises(ValueError, match="shape"):
        gammas(4, 0.0)
    with pytest.raises(TypeError, match="dtype"):
        normals(4, dtype=np.int32)
    with pytest.raises(ValueError, match="counters"):
        philox4x32(np.zeros((2, 3), np.uint32), 0)
