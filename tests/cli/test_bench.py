"""`workbench bench`: options refused before any case runs."""

import json

import pytest
from helpers import needs_e3nn

from workbench.cli import main


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--repeats", "0"], "--repeats must be at least 1, got 0"),
        (["--replicas", "4,0"], "--replicas must all be at least 1"),
        (["--replicas", "four"], "--replicas must be a comma list of counts"),
        (["--configs", "baseline,warp_drive"], "--configs: unknown kernel technique"),
        (["--arch", "schnet,transformer"], "--arch must be registered"),
        (["--tp-backend", "openequivariance"],
         "--tp-backend sets the convolution backend of the nequip network only; add nequip "
         "to --arch"),
        (["--arch", "nequip", "--tp-backend", "e3nn,flash"],
         "--tp-backend must be a comma list of e3nn, openequivariance, cuequivariance"),
        (["--arch", "schnet,nequip", "--dp-backend", "deepmd"],
         "--dp-backend sets the evaluator of the dp network only; add dp to --arch"),
        (["--arch", "dp", "--dp-backend", "engine,tf"],
         "--dp-backend must be a comma list of engine, deepmd"),
        (["--arch", "nequip", "--network", "{hidden: 64}"],
         "network is not a nequip config: unknown NequIP config keys: ['hidden']"),
        (["--arch", "nequip", "--network", "[32]"], "--network must be a mapping"),
        (["--model", "shipped", "--network", "{hidden: 64}"],
         "network sets the demo model's network only"),
    ],
)
def test_bench_refuses_bad_options_before_running(extra, message, tmp_path, capsys):
    assert main(["bench", "--proteins", "cln025", "--device", "cpu", "--out",
                 str(tmp_path / "b"), *extra]) == 2
    assert message in capsys.readouterr().err and not (tmp_path / "b").exists()


def test_a_bench_stopped_part_way_keeps_the_cases_it_finished(tmp_path, monkeypatch, capsys):
    """A time limit or a lost machine ends the command during its third case: the files
    hold the first two, and say that one case had not run."""
    from workbench import benchmark

    real = benchmark.run_case
    calls = []

    def run_case(case, *args, **kwargs):
        calls.append(case.label)
        if len(calls) == 3:
            raise KeyboardInterrupt  # what SIGINT or a killed step looks like from here
        return real(case, *args, **kwargs)

    monkeypatch.setattr(benchmark, "run_case", run_case)
    out = tmp_path / "b"
    with pytest.raises(KeyboardInterrupt):
        main(["bench", "--proteins", "cln025", "--replicas", "2", "--configs",
              "baseline,fused_integrator,fused_update", "--steps", "1", "--warmup", "0",
              "--repeats", "1", "--device", "cpu", "--out", str(out)])
    payload = json.loads((out / "bench.json").read_text())
    assert [r["label"] for r in payload["records"]] == ["baseline", "fused_integrator"]
    assert payload["unfinished"] == 1
    assert "**Not finished**: 1 case(s) of the command had not run" in (
        out / "bench.md").read_text()
    # the finished command writes no count
    assert main(["bench", "--proteins", "cln025", "--replicas", "2", "--configs", "baseline",
                 "--steps", "1", "--warmup", "0", "--repeats", "1", "--device", "cpu",
                 "--out", str(tmp_path / "c")]) == 0
    assert "unfinished" not in json.loads((tmp_path / "c" / "bench.json").read_text())


@needs_e3nn
def test_bench_runs_each_backend_of_nequip_and_records_what_ran(tmp_path, capsys):
    out = tmp_path / "b"
    assert main(["bench", "--proteins", "cln025", "--replicas", "2", "--arch", "nequip",
                 "--tp-backend", "e3nn, openequivariance", "--steps", "1", "--warmup", "0",
                 "--repeats", "1", "--device", "cpu", "--out", str(out)]) == 0
    records = json.loads((out / "bench.json").read_text())["records"]
    assert [(r["tp_backend_requested"], r["tp_backend"]) for r in records] == [
        ("e3nn", "e3nn"), ("openequivariance", "e3nn")]  # no CUDA device: e3nn ran
    table = (out / "bench.md").read_text()
    assert "| nequip/e3nn | baseline |" in table
    assert "| nequip/e3nn (asked openequivariance) | baseline |" in table
    assert "nequip/e3nn (asked openequivariance) baseline (reference)" in capsys.readouterr().out


def test_bench_sizes_the_demo_network_and_names_it_with_the_model(tmp_path):
    """``--network``: the demo model with a recipe's sizes (here smaller ones), kept apart
    from the plain demo model's records."""
    out = tmp_path / "b"
    network = "{irreps: 8x0e + 8x1o, radial_width: 8, blocks: 1}"
    assert main(["bench", "--proteins", "cln025", "--replicas", "1", "--arch", "nequip",
                 "--network", network, "--steps", "1", "--warmup", "0", "--repeats", "1",
                 "--device", "cpu", "--out", str(out)]) == 0
    [record] = json.loads((out / "bench.json").read_text())["records"]
    keys = {"irreps": "8x0e + 8x1o", "radial_width": 8, "blocks": 1}
    assert record["network_config"] == keys
    assert record["model"] == 'demo {"blocks": 1, "irreps": "8x0e + 8x1o", "radial_width": 8}'
    from workbench.runner import RunSettings, prepare_run

    settings = RunSettings(protein="cln025", replicas=1, steps=1, device="cpu", model="demo",
                           architecture="nequip", network=keys)
    config = prepare_run(settings).simulation.potential.network.config
    assert (config.irreps, config.radial_width, config.blocks) == ("8x0e + 8x1o", 8, 1)


def test_bench_races_deepmd_kit_against_the_engine_on_the_demo_model(tmp_path, capsys):
    pytest.importorskip("deepmd.pt.model.model", reason="needs deepmd-kit's PyTorch backend")
    out = tmp_path / "b"
    assert main(["bench", "--proteins", "cln025", "--replicas", "2", "--arch", "dp",
                 "--dp-backend", "engine,deepmd", "--configs", "baseline,tabulated_filter",
                 "--steps", "2", "--warmup", "0", "--repeats", "1", "--device", "cpu",
                 "--out", str(out)]) == 0
    records = json.loads((out / "bench.json").read_text())["records"]
    assert [(r["label"], r["dp_backend_requested"], r["dp_backend"]) for r in records] == [
        ("baseline", "engine", "engine"), ("tabulated_filter", "engine", "engine"),
        ("baseline", "deepmd", "deepmd"), ("tabulated_filter", "deepmd", "deepmd")]
    assert records[1]["options"]["tabulated_filter"] and "dp_backend_notice" not in records[2]
    # deepmd-kit's model has no tables: the record says they were off
    assert not records[3]["options"]["tabulated_filter"]
    assert "tabulated_filter is switched off" in records[3]["dp_backend_notice"]
    table = (out / "bench.md").read_text()
    assert "| cln025 | 49 | 2 | dp | baseline |" in table
    assert "| cln025 | 49 | 2 | dp/deepmd | baseline |" in table
    assert "dp/deepmd baseline (reference)" in capsys.readouterr().out


def test_bench_of_a_system_of_copies_records_its_size_and_search(tmp_path, capsys):
    out = tmp_path / "b"
    assert main(["bench", "--proteins", "cln025*8", "--replicas", "1", "--arch", "schnet,dp",
                 "--configs", "baseline", "--steps", "1", "--warmup", "0", "--repeats", "1",
                 "--device", "cpu", "--out", str(out)]) == 0
    records = json.loads((out / "bench.json").read_text())["records"]
    assert [(r["protein"], r["beads"], r["architecture"], r["neighbor_search"])
            for r in records] == [("cln025*8", 392, "schnet", "dense"),
                                  ("cln025*8", 392, "dp", "dense")]
    for record in records:
        assert record["bead_steps_per_s"] == pytest.approx(392 * record["timestep_mol_per_s"])
    assert "| cln025*8 | 392 | 1 | dp | baseline |" in (out / "bench.md").read_text()
