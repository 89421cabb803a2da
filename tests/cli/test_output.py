"""What the commands print and write: JSON printed and written alike, summary tables."""

import json

from workbench.cli.output import print_json, summary_table


def test_print_json_prints_and_writes_the_same_document(tmp_path, capsys):
    out = tmp_path / "result.json"
    print_json({"a": 1.5, "b": [1, 2]}, str(out))
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(out.read_text()) == {"a": 1.5, "b": [1, 2]}
    print_json({"c": 3})  # no file: printing only
    assert json.loads(capsys.readouterr().out) == {"c": 3}
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]


def test_summary_table_aligns_the_names():
    table = summary_table([("Q", "0.9 mean"), ("throughput", "12 timestep·mol/s")]).splitlines()
    assert table[0] == table[-1] == "-" * len(table[2])
    assert table[1:3] == ["Q          | 0.9 mean", "throughput | 12 timestep·mol/s"]
