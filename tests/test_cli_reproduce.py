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
