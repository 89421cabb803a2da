"""`workbench analyze`: states, contacts and energy gaps of finished runs."""

import json

import pytest

from workbench.cli import main

TEACHER_RUN = ["run", "--protein", "cln025", "--model", "teacher", "--replicas", "2",
               "--steps", "4", "--save-interval", "2", "--device", "cpu", "--quiet",
               "--no-trajectory"]


@pytest.fixture(scope="module")
def teacher_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("analyze") / "teacher"
    assert main([*TEACHER_RUN, "--out", str(out)]) == 0
    return out


def test_states_prints_a_row_per_run_and_writes_json(teacher_run, tmp_path, capsys):
    capsys.readouterr()
    out = tmp_path / "states.json"
    assert main(["analyze", "states", str(teacher_run), str(teacher_run), "--basin", "0.5,0.3",
                 "--out", str(out)]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if "teacher" in line]
    assert len(rows) == 2 and rows[0].count("|") == 10
    table = json.loads(out.read_text())
    assert [row["replicas"] for row in table] == [2, 2] and "basin_fraction" in table[0]
    assert main(["analyze", "states", str(teacher_run), "--basin", "0.5"]) == 2
    assert "--basin must be HIGH,LOW" in capsys.readouterr().err


def test_contacts_of_a_run_against_itself_differ_nowhere(teacher_run, tmp_path, capsys):
    out = tmp_path / "contacts.json"
    assert main(["analyze", "contacts", str(teacher_run), str(teacher_run), "--protein",
                 "cln025", "--top", "3", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "teacher: 2 structures" in printed and "formed less in teacher" in printed
    rows = json.loads(out.read_text())
    assert rows and all(set(row) == {"contact", "r0", "teacher"} for row in rows)


def test_energy_gaps_of_the_teacher_against_itself(teacher_run, tmp_path, capsys):
    from workbench.model.io import save_potential
    from workbench.system import build_system
    from workbench.teacher import teacher_potential

    model = tmp_path / "teacher.pt"
    save_potential(teacher_potential(build_system("cln025"), None), model)
    out = tmp_path / "gaps.json"
    assert main(["analyze", "energy-gaps", "--protein", "cln025", "--teacher-run",
                 str(teacher_run), "--models", f"self={model}", "--runs",
                 f"native,ends={teacher_run}", "--out", str(out)]) == 0
    assert "| self | +0 (0.00) | +0 (0.00) |" in capsys.readouterr().out
    gaps = json.loads(out.read_text())["gaps"]["self"]
    assert set(gaps) == {"native", "ends"}
    assert main(["analyze", "energy-gaps", "--protein", "cln025", "--teacher-run",
                 str(teacher_run), "--models", ",", "--runs", "native"]) == 2
    assert "--models: no NAME=PATH items" in capsys.readouterr().err
