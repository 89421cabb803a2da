"""`workbench info`: versions and the device, one row each."""

import re

import torch

from workbench.cli import main


def test_info_prints_versions(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert re.search(rf"^torch\s+\| {re.escape(torch.__version__)}$", out, re.MULTILINE), out
    assert re.search(r"^python\s+\| 3\.", out, re.MULTILINE)
    assert re.search(r"^device\s+\| ", out, re.MULTILINE)
