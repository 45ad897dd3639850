"""``lsa-native reproduce``: bad arguments fail at once with exit code 2; a run writes its outputs."""
import json

import pytest

from lsa_native import cli


@pytest.mark.parametrize("argv, message", [
    (["reproduce", "zfb-nope"], "unknown reproduction id"),
    (["reproduce", "zfb-thm42", "--set", "samples=-5"], "samples"),
    (["reproduce", "zfb-thm42", "--set", "nope=1"], "no size"),
    (["reproduce", "zfb-thm42", "--set", "samples"], "NAME=VALUE"),
    (["reproduce", "zfb-thm42", "--seed", "-1"], "seed"),
    (["reproduce", "zfb-thm42", "--out", "/proc/forbidden/out"], "cannot write"),
    (["reproduce", "all", "--set", "samples=5"], "not 'all'"),
    (["reproduce", "zfb-thm42", "--threads", "-1"], "--threads"),
])
def test_bad_arguments_exit_2(argv, message, capsys, tmp_path):
    if "--out" not in argv:
        argv = argv + ["--out", str(tmp_path)]
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err


def test_unreachable_scheduler_exit_2(capsys, tmp_path):
    pytest.importorskip("dask.distributed")
    assert cli.main(["reproduce", "zfb-thm42", "--out", str(tmp_path),
                     "--scheduler", "tcp://127.0.0.1:9"]) == 2
    assert "cannot reach Dask scheduler" in capsys.readouterr().err


def test_reproduce_one_writes_table_and_index(tmp_path, capsys):
    rc = cli.main(["reproduce", "zfb-shifts", "--out", str(tmp_path), "--quiet",
                   "--set", "samples=4000", "--set", "noise=1.0", "--set", "query_scale=0.5,2",
                   "--set", "covariate_scale=1,4"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "| zfb-shifts | PASS |" in out
    res = json.loads((tmp_path / "zfb-shifts_result.json").read_text())
    assert res["params"]["query_scale"] == [0.5, 2.0] and res["passed"]
    index = (tmp_path / "index.md").read_text()
    assert "![zfb-shifts](zfb-shifts_figure.png)" in index


PROP31 = ["reproduce", "ccs-prop31", "--quiet", "--set", "batch=64", "--set", "layers=2"]


def test_out_refuses_another_configuration_unless_force(tmp_path, capsys):
    out = ["--out", str(tmp_path)]
    assert cli.main(PROP31 + out) == 0
    assert cli.main(PROP31 + out) == 0  # the same configuration again: allowed
    first = (tmp_path / "ccs-prop31_result.json").read_text()
    capsys.readouterr()
    assert cli.main(PROP31 + out + ["--set", "context=7"]) == 2
    err = capsys.readouterr().err
    assert "another ccs-prop31 run" in err and "context 20 -> 7" in err and "--force" in err
    assert (tmp_path / "ccs-prop31_result.json").read_text() == first  # untouched
    assert cli.main(PROP31 + out + ["--seed", "3"]) == 2  # the seed is part of the configuration
    assert cli.main(PROP31 + out + ["--full"]) == 2
    assert cli.main(PROP31 + out + ["--set", "context=7", "--force"]) == 0
    assert json.loads((tmp_path / "ccs-prop31_result.json").read_text())["params"]["context"] == 7


def test_out_refuses_committed_outputs(tmp_path, capsys):
    import shutil
    import subprocess

    if shutil.which("git") is None:
        pytest.skip("git not installed")
    out = ["--out", str(tmp_path)]
    assert cli.main(PROP31 + out) == 0
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "ccs-prop31_result.json"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "outputs"], check=True)
    capsys.readouterr()
    assert cli.main(PROP31 + out) == 2  # even the same configuration: committed files are kept
    assert "committed outputs of ccs-prop31" in capsys.readouterr().err
    assert cli.main(PROP31 + out + ["--force"]) == 0


def test_python_api_refuses_too(tmp_path):
    from lsa_native import experiments
    from lsa_native.experiments._common import OutputExists

    experiments.ccs_prop31(tmp_path, batch=64, layers=2)
    with pytest.raises(OutputExists, match="layers 2 -> 3"):
        experiments.ccs_prop31(tmp_path, batch=64, layers=3)
    assert experiments.ccs_prop31(tmp_path, batch=64, layers=3, force=True).passed


def test_threads_sets_the_native_thread_count(tmp_path, capsys):
    import lsa_native

    before = lsa_native.num_threads()
    try:
        assert cli.main(["reproduce", "ccs-prop31", "--out", str(tmp_path), "--quiet", "--threads", "1"]) == 0
        assert lsa_native.num_threads() == 1
    finally:
        lsa_native.set_num_threads(0)
    assert lsa_native.num_threads() == before


def test_list_prints_both_pass_conditions_and_the_ccs_schedules(capsys):
    """`lsa-native list`: per id its claim, the quick and the full pass condition (the paper's
    claim as stated, issue 19) and sizes; for a CCS training its schedule at both sizes."""
    from lsa_native import experiments

    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    for i, e in experiments.REGISTRY.items():
        block = out.split(f"{i}: ", 1)[1]
        assert f"pass (quick): {e.condition}" in block and f"pass (full):  {e.condition_full}" in block
    fig3 = out.split("ccs-fig3-5-6: ", 1)[1]
    assert "below 0.05" in fig3.split("pass (full):", 1)[1].split("\n", 1)[0]
    assert "training (full):  Adam" in fig3 and "at most 20000 steps" in fig3
