"""Every notebook runs headless in short mode, and the committed copies are up to date."""

import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

FOLDER = Path(__file__).resolve().parents[2] / "notebooks"
sys.path.insert(0, str(FOLDER))
from build_notebooks import NOTEBOOKS, build  # noqa: E402


def test_committed_notebooks_match_the_builder(tmp_path):
    for path in build(tmp_path):
        committed = nbformat.read(FOLDER / path.name, as_version=4)
        fresh = nbformat.read(path, as_version=4)
        assert [c.source for c in committed.cells] == [c.source for c in fresh.cells], (
            f"{path.name} is stale: run python notebooks/build_notebooks.py"
        )


@pytest.mark.parametrize("name", list(NOTEBOOKS))
def test_notebook_runs_in_short_mode(name, monkeypatch, tmp_path):
    monkeypatch.setenv("WORKBENCH_SHORT", "1")
    monkeypatch.setenv("PYTHONWARNINGS", "ignore")
    # as a user without a GPU runs them: no Triton interpreter (the test session's
    # conftest turns it on for the kernel tests; it would run the fused paths' kernels as
    # Python, a minute per step), so fused techniques fall back and say so
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.chdir(tmp_path)
    notebook = nbformat.read(FOLDER / name, as_version=4)
    client = nbclient.NotebookClient(
        notebook,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
    errors = [
        output
        for cell in notebook.cells
        for output in cell.get("outputs", [])
        if output.output_type == "error"
    ]
    assert not errors
