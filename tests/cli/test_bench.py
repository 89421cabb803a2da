"""`workbench bench`: options refused before any case runs."""

import pytest

from workbench.cli import main


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--repeats", "0"], "--repeats must be at least 1, got 0"),
        (["--replicas", "4,0"], "--replicas must all be at least 1"),
        (["--replicas", "four"], "--replicas must be a comma list of counts"),
        (["--configs", "baseline,warp_drive"], "--configs: unknown kernel technique"),
        (["--arch", "schnet,transformer"], "--arch must be registered"),
    ],
)
def test_bench_refuses_bad_options_before_running(extra, message, tmp_path, capsys):
    assert main(["bench", "--proteins", "cln025", "--device", "cpu", "--out",
                 str(tmp_path / "b"), *extra]) == 2
    assert message in capsys.readouterr().err and not (tmp_path / "b").exists()
