"""What ``workbench`` reports: usage and settings errors in one line with exit code 2
(``--debug``: their traceback), any other exception as it is; defaults in ``--help``."""

import pytest

import workbench.cli.info
from workbench.cli import main
from workbench.cli.errors import flag
from workbench.settings_error import SettingsError


def test_unknown_command_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        main(["fly"])
    assert info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_settings_errors_name_the_flag(capsys):
    assert main(["run", "--dt", "0", "--device", "cpu"]) == 2
    assert capsys.readouterr().err == "error: --dt must be positive (fs), got 0.0\n"


def test_debug_shows_the_traceback_of_a_settings_error():
    with pytest.raises(SettingsError, match="replicas must be at least 1") as error:
        main(["run", "--replicas", "0", "--debug"])
    assert error.value.field == "replicas"


def test_a_bug_is_not_reported_as_a_usage_error(monkeypatch):
    def broken(args):
        raise ValueError("a bug in the library")

    monkeypatch.setattr(workbench.cli.info, "execute", broken)
    with pytest.raises(ValueError, match="a bug in the library"):
        main(["info"])


def test_settings_errors_show_other_fields_by_their_flags():
    error = SettingsError("sampler_start", "gives the {sampler}'s starts: add {sampler}")
    assert str(error) == "sampler_start gives the sampler's starts: add sampler"
    assert error.describe(flag) == "--sampler-start gives the --sampler's starts: add --sampler"
    assert SettingsError("timestep_fs", ": too long").describe(flag) == "--dt: too long"


@pytest.mark.parametrize("command", ["run", "bench", "train", "validate", "fit-scales"])
def test_help_shows_the_defaults(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "(default: " in out and "--debug" in out
    if command == "run":
        assert "--replicas REPLICAS (default: 8)" in out
        assert "--protein PROTEIN bundled name or PDB file; NAME*N for N copies" in out
        assert "systems.md) (default: cln025)" in out

