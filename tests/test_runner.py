"""The run's throughput meter (warm-up excluded from the rate, and reported apart), the
process settings of a CPU run, and the network a run's architecture chooses."""

from __future__ import annotations

import sys
from dataclasses import replace

import pytest
import torch
from helpers import needs_e3nn

from workbench.cli.errors import flag
from workbench.md import NeighborSettings
from workbench.model.native_priors import demo_potential
from workbench.model.options import KernelOptions
from workbench.runner import (
    DEFAULT_THREADS,
    DEMO_MODEL,
    ONE_THREAD_BELOW,
    RunSettings,
    ThroughputMeter,
    choose_potential,
    configure_cpu_process,
    copies_notice,
    cpu_threads,
    keep_freed_memory,
    prepare_run,
)
from workbench.settings_error import SettingsError
from workbench.system import build_system
from workbench.system.copies import replicate_system


def test_meter_reports_the_first_chunk_apart_from_the_steady_rate():
    meter = ThroughputMeter(replicas=4, timestep_fs=4.0, device=torch.device("cpu"))
    meter.record(100, 5.0)  # compilation and capture in the first chunk
    assert meter.warmup_overhead_s() is None  # nothing to compare it with yet
    assert meter.timestep_mol_per_s() == pytest.approx(400 / 5.0)
    meter.record(100, 1.0)
    meter.record(300, 3.0)
    assert meter.timestep_mol_per_s() == pytest.approx(4 * 400 / 4.0)
    assert meter.timestep_mol_per_s(skip_warmup=False) == pytest.approx(4 * 500 / 9.0)
    assert meter.warmup_overhead_s() == pytest.approx(4.0)
    meter.chunks[0] = (100, 0.5)  # a first chunk faster than the rest: no overhead
    assert meter.warmup_overhead_s() == 0.0


def test_cpu_threads_respects_the_allowed_cores():
    assert 1 <= cpu_threads() <= DEFAULT_THREADS


def test_a_small_run_keeps_one_thread_unless_the_user_sets_them(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert cpu_threads(beads=ONE_THREAD_BELOW - 1) == 1
    assert cpu_threads(beads=ONE_THREAD_BELOW) == cpu_threads()
    monkeypatch.setenv("OMP_NUM_THREADS", str(DEFAULT_THREADS))
    assert cpu_threads(beads=8) == cpu_threads()


def test_freed_memory_is_kept_on_glibc():
    kept = keep_freed_memory()
    assert kept or not sys.platform.startswith("linux")


def test_configure_sets_the_threads_of_the_run(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    threads = torch.get_num_threads()
    try:
        configure_cpu_process(beads=392)
        assert torch.get_num_threads() == 1
        configure_cpu_process()
        assert torch.get_num_threads() == cpu_threads() <= DEFAULT_THREADS
    finally:
        torch.set_num_threads(threads)


# -- the network of a run ------------------------------------------------------------------


@pytest.mark.parametrize(("architecture", "name"),
                         [("schnet", "CGSchNet"), ("painn", "CGPaiNN"), ("egnn", "CGEGNN"),
                          ("dp", "CGDeepPotential"),
                          pytest.param("nequip", "CGTensorProduct", marks=needs_e3nn)])
def test_the_demo_model_is_a_network_of_the_chosen_architecture(architecture, name):
    settings = RunSettings(protein="cln025", replicas=2, steps=1, device="cpu",
                           model=DEMO_MODEL, architecture=architecture)
    prepared = prepare_run(settings)
    potential = prepared.simulation.potential
    assert potential.architecture == architecture and not potential.metadata["trained"]
    assert set(potential.priors) == set(demo_potential(prepared.system).priors)
    assert any(f"random {name} weights" in notice for notice in prepared.notices)
    prepared.advance(1)


def test_the_tp_backend_reaches_the_network_or_says_why_not():
    pytest.importorskip("e3nn")
    settings = RunSettings(protein="cln025", replicas=2, steps=1, device="cpu",
                           model=DEMO_MODEL, architecture="nequip",
                           tp_backend="openequivariance")
    prepared = prepare_run(settings)
    assert prepared.simulation.potential.network.backend == "e3nn"
    assert prepared.settings.tp_backend == "e3nn"  # recorded as what runs
    [notice] = [n for n in prepared.notices if "backend" in n]
    assert notice.startswith("Tensor-product backend 'openequivariance' unavailable (")
    assert "CUDA device" in notice and notice.endswith("the e3nn reference path runs.")
    prepared.advance(1)
    other = prepare_run(replace(settings, architecture="egnn", tp_backend="cuequivariance"))
    assert any("applies to the nequip network only; this run's is egnn" in n
               for n in other.notices)
    assert not any("backend" in n for n in prepare_run(
        replace(settings, tp_backend="e3nn")).notices)
    with pytest.raises(SettingsError, match="tp_backend must be one of e3nn, openequivariance"):
        RunSettings(tp_backend="flash")


def test_an_unknown_architecture_is_refused_by_name():
    with pytest.raises(SettingsError, match="architecture must be one of schnet, painn, egnn"):
        RunSettings(architecture="transformer")
    with pytest.raises(SettingsError, match="architecture must be one of"):
        RunSettings(architecture="priors")  # an attribute of Potential, not a network


def test_a_model_file_of_another_architecture_is_refused(tmp_path):
    from workbench.model.io import save_potential

    path = save_potential(demo_potential(build_system("cln025"), architecture="egnn"),
                          tmp_path / "egnn.pt")
    settings = RunSettings(protein="cln025", replicas=2, device="cpu", model=str(path),
                           architecture="schnet")
    with pytest.raises(SettingsError, match="holds a 'egnn' network") as error:
        prepare_run(settings)
    assert error.value.field == "architecture"
    assert "set --arch to 'egnn'" in error.value.describe(flag)
    for architecture in ("egnn", None):  # named, or taken from the file
        prepared = prepare_run(replace(settings, architecture=architecture))
        assert prepared.simulation.potential.architecture == "egnn"


def test_the_shipped_schnet_model_gives_way_to_the_demo_model_of_another_architecture():
    # 2JOF ships a CGSchNet model only (CLN025 also ships a PaiNN, which a painn run takes)
    potential, notice = choose_potential(build_system("2jof"), None, "painn")
    assert potential.architecture == "painn" and "is a 'schnet' network" in notice


# -- systems of several copies ------------------------------------------------------------
def test_a_run_of_copies_says_what_its_metrics_mean_and_what_is_off():
    settings = RunSettings(protein="cln025*2", mapping="ca", replicas=1, steps=1, device="cpu",
                           options=KernelOptions(fused_pair_search=True, cuda_graph=True),
                           neighbors=NeighborSettings(cell_list_above=0))
    prepared = prepare_run(settings)
    notices = " ".join(prepared.notices)
    assert ("2 copies of cln025 in one system (20 beads): priors act within each copy, the "
            "network acts across copies; RMSD is the mean of each copy's own") in notices
    assert "Neighbour search: a cell list (20 beads per replica, above 0;" in notices
    assert ("fused_pair_search off: the system has 20 beads per replica, above the 0 up to "
            "which the neighbour search uses dense n × n blocks") in notices
    assert "cuda_graph off: the system has 20 beads per replica" in notices
    assert not settings.options.fused_pair_search and not settings.options.cuda_graph
    prepared.advance(1)
    assert not prepared.simulation.frozen.any()


def test_copies_closer_than_the_cutoff_are_named():
    close = replicate_system(build_system("cln025"), 2, gap=5.0)
    notice = copies_notice(close, demo_potential(close), skin=2.0)
    assert "neighbouring copies start within its cutoff plus skin (12 Å)" in notice
    assert copies_notice(build_system("cln025"), demo_potential(build_system("cln025")),
                         2.0) is None
