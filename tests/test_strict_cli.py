"""Issue 23, family 4: every bad CLI argument exits 2 with a message naming the flag, before any
work (no reproduction starts: the run would print "running")."""
import pytest

from lsa_native import cli


@pytest.mark.parametrize("argv, message", [
    (["reproduce", "zfb-thm41", "--seed", "18446744073709551616"], "--seed"),
    (["reproduce", "zfb-thm41", "--seed", str(2**32)], "--seed"),
    (["reproduce", "zfb-thm41", "--set", "context=100000"], "--set context"),
    (["reproduce", "zfb-thm41", "--set", "batch=1000000000000"], "--set batch"),
    (["reproduce", "zfb-thm41", "--set", "steps=1e3"], "--set steps: expected an integer"),
    (["reproduce", "zfb-thm41", "--set", "lr=x"], "--set lr: expected a number"),
    (["reproduce", "zfb-thm41", "--set", "lr=nan"], "--set lr"),
    (["reproduce", "zfb-thm41", "--set", "batch=1000000", "--set", "context=2000"], "values"),
    (["reproduce", "zfb-thm42", "--set", "contexts=10,100000"], "--set contexts"),
    (["reproduce", "ccs-fig2", "--set", "depths=1,100000"], "--set depths"),
    (["reproduce", "zfb-thm41", "--workers", "100000"], "--workers"),
    (["reproduce", "zfb-thm41", "--out", ""], "--out"),
])
def test_reproduce_bad_arguments_exit_2_before_work(argv, message, capsys, tmp_path):
    if "--out" not in argv:
        argv = argv + ["--out", str(tmp_path)]
    assert cli.main(argv) == 2
    out = capsys.readouterr()
    assert message in out.err and "running" not in out.out


def test_unwritable_out_names_the_flag(capsys):
    assert cli.main(["reproduce", "zfb-thm41", "--out", "/proc/forbidden/out"]) == 2
    assert "--out: cannot write" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--context", "100000"], "--context"), (["--batch", "1000000000000"], "--batch"),
    (["--seed", "18446744073709551616"], "--seed"), (["--lr", "1e9"], "--lr"),
    (["--flow-time", "1e300"], "--flow-time"), (["--flow-time", "-1"], "--flow-time"),
    (["--plot", "/proc/nope/x.png"], "--plot"), (["--plot", "/"], "--plot"),
    (["--plot", ""], "--plot"),
])
def test_demo_bad_arguments_exit_2_before_the_run(argv, message, capsys):
    assert cli.main(["demo", "--quiet", *argv]) == 2
    out = capsys.readouterr()
    assert message in out.err and "demo" not in out.out


def test_plot_probe_leaves_no_file(tmp_path, monkeypatch, capsys):
    target = tmp_path / "fig.png"
    cli._check_writable(str(target), "--plot")
    assert not target.exists()
    target.write_bytes(b"keep")
    cli._check_writable(str(target), "--plot")
    assert target.read_bytes() == b"keep"


def test_bounds_accept_the_full_sizes():
    from lsa_native import experiments

    for entry in experiments.REGISTRY.values():
        cli._check_bounds(entry, dict(entry.full), full=True)


def test_bounds_allow_larger_than_paper_sizes_within_memory():
    from lsa_native import experiments

    reg = experiments.REGISTRY
    cli._check_bounds(reg["zfb-random-cov"], {"slope_samples": 2_000_000}, full=True)  # chunked
    cli._check_bounds(reg["zfb-thm41"], {"batch": 100_000, "steps": 100_000}, full=False)
    with pytest.raises(ValueError, match="--set batch, --set context"):
        cli._check_bounds(reg["zfb-thm41"], {"batch": 1_000_000, "context": 2000}, full=False)
