"""Throughput benchmarks following docs/benchmark-protocol.md.

Per configuration: a fresh simulation, warm-up steps (compilation, autotuning,
allocator growth) excluded, then ``repeats`` timed windows of ``steps`` whole
MD steps (neighbour list, forces, integrator); the median window gives
timestep·mol/s (a system of several copies of a protein, ``1enh*372``, is one molecule;
``bead_steps_per_s`` is the rate times the beads of one replica). ``neighbor_search`` says
how edges were found (``dense``, ``cell-list`` above `workbench.neighbors.CELL_LIST_ABOVE`
beads, or ``triton``). ``architecture`` records the network (``schnet``, ``painn``, ``egnn``,
``nequip``, ``dp``; None for a prior-only model), ``force_path`` what evaluated the forces
(``reference``, ``triton``, or ``pytorch-tables`` where a CPU asks a CGSchNet for
``tabulated_filter``; a network is on ``triton`` only with one of its own kernels on,
`workbench.model.force_paths.force_path`) and, on a CPU, ``threads`` PyTorch's intra-op
threads. The records of a network with run-time backends (`workbench.runner.NETWORK_BACKENDS`)
carry the backend that ran and the one asked for: a tensor-product network's
``tp_backend`` (its convolution backend; e3nn where the one asked for cannot run here) and
``tp_backend_requested``, a Deep Potential's ``dp_backend`` (``engine``, or ``deepmd``:
deepmd-kit's own model of the same weights; the engine where deepmd-kit cannot run) and
``dp_backend_requested``, with ``tp_backend_notice`` / ``dp_backend_notice`` saying why
where the run was told something about it (a backend that could not run, the engine's
techniques that deepmd-kit's model switched off).
Peak memory is ``torch.cuda.max_memory_allocated``
over the timed windows (``peak_memory_gb``) and over set-up and warm-up, graph capture included
(``peak_memory_setup_gb``, what a GPU must hold to start the run). The step-time
breakdown times the neighbour-list update, the energy (forward) and the energy plus
forces (forward + backward) on the same state; the integrator's share is the remainder
of the whole step.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path

import torch

from workbench.files import atomic_write_text
from workbench.model.architectures import ARCHITECTURES, RESERVED_NAMES
from workbench.model.force_paths import force_path
from workbench.model.options import KernelOptions
from workbench.runner import (
    DEMO_MODEL,
    NETWORK_BACKENDS,
    RunSettings,
    prepare_run,
    resolve_device,
)
from workbench.settings_error import SettingsError
from workbench.units import ns_per_day


@dataclass
class BenchCase:
    """One benchmark configuration (``architecture``: the network, see
    `RunSettings.architecture`; ``tp_backend``, ``dp_backend``: the backend of a network
    that has them, `workbench.runner.NETWORK_BACKENDS`, as the `RunSettings` fields of
    the same names; None for the default; ``network_config``: config keys of the demo
    model's network, `RunSettings.network`)."""

    protein: str
    replicas: int
    label: str
    options: KernelOptions = field(default_factory=KernelOptions)
    model: str | None = DEMO_MODEL
    architecture: str = "schnet"
    tp_backend: str | None = None
    dp_backend: str | None = None
    network_config: dict | None = None

    @property
    def model_label(self) -> str:
        """The model as a record names it: ``"shipped"`` for None, the demo model with the
        network keys it was given (``demo {"irreps": "32x0e + 32x1o"}``), else the file."""
        if self.model is None:
            return "shipped"
        if self.network_config:
            return f"{self.model} {json.dumps(self.network_config, sort_keys=True)}"
        return self.model

    @property
    def backend(self) -> str | None:
        """The backend asked for the case's network, None for the default or a network
        without backends."""
        backends = NETWORK_BACKENDS.get(self.architecture)
        return None if backends is None else getattr(self, backends.setting)

    @property
    def network(self) -> str:
        """The network and the backend asked for (`network_name`)."""
        return network_name(self.architecture, self.backend)


@dataclass(frozen=True)
class BenchProtocol:
    """How every case is timed: ``warmup`` steps untimed, then ``repeats`` windows of
    ``steps`` steps, the median window counted."""

    steps: int = 200
    warmup: int = 30
    repeats: int = 3

    def __post_init__(self):
        for name, least in (("steps", 1), ("warmup", 0), ("repeats", 1)):
            if getattr(self, name) < least:
                raise SettingsError(name, f"must be at least {least}, got {getattr(self, name)}")


def bench_cases(
    proteins: list[str], replicas: list[int], configs: list[str], model: str | None = DEMO_MODEL,
    architectures: tuple[str, ...] = ("schnet",), tp_backends: tuple[str, ...] | None = None,
    dp_backends: tuple[str, ...] | None = None, network_config: dict | None = None,
) -> list[BenchCase]:
    """Every architecture × backend × protein × replica count × configuration, a
    configuration being a `KernelOptions.parse` name (``tables+graph``, ``all-fp16``);
    ``model`` None: each protein's shipped model of the architecture
    (`workbench.models.shipped_model_file`; the demo model of an architecture none ships
    of).

    Parameters
    ----------
    tp_backends, dp_backends : tuple of str, optional
        The backends each configuration of the network that has them
        (`workbench.runner.NETWORK_BACKENDS`: ``nequip``'s convolution backends,
        `workbench.model.tensor_product.TP_BACKENDS`; ``dp``'s evaluators,
        `workbench.model.deep_potential.DP_BACKENDS`) runs with, one case each; None: its
        default backend, the case naming none. The other networks run once.
    network_config : dict, optional
        Config keys of the demo model's network (`RunSettings.network`), for every case.

    Raises
    ------
    SettingsError
        A replica count below 1, an architecture that is not registered, an unknown
        backend, backends of a network that is not among the architectures, or a
        ``network_config`` that is not a config of every architecture or is given with a
        model file.
    ValueError
        A configuration name that `KernelOptions.parse` does not know.
    """
    if not all(r >= 1 for r in replicas):
        raise SettingsError("replicas", f"must all be at least 1, got {replicas}")
    unknown = [a for a in architectures if a not in ARCHITECTURES or a in RESERVED_NAMES]
    if unknown or not architectures:
        raise SettingsError("architecture", f"must be registered ({', '.join(ARCHITECTURES)}), "
                            f"got {list(unknown or architectures)}")
    asked = {"tp_backend": tp_backends, "dp_backend": dp_backends}
    for architecture, backends in NETWORK_BACKENDS.items():
        chosen = asked[backends.setting]
        if chosen is None:
            continue
        unknown = [b for b in chosen if b not in backends.choices]
        if unknown or not chosen:
            raise SettingsError(backends.setting, f"must be a comma list of "
                                f"{', '.join(backends.choices)}, got {list(unknown or chosen)}")
        if architecture not in architectures:
            raise SettingsError(backends.setting, f"sets the {backends.role} of the "
                                f"{architecture} network only; add {architecture} to --arch "
                                f"(got {', '.join(architectures)})")

    def cases_of(architecture: str) -> list[dict]:
        """The backend fields of each case of ``architecture``."""
        backends = NETWORK_BACKENDS.get(architecture)
        chosen = None if backends is None else asked[backends.setting]
        return [{backends.setting: b} for b in chosen] if chosen else [{}]

    if network_config is not None:
        for architecture in architectures:  # refused before anything runs
            RunSettings(model=model, architecture=architecture, network=network_config)
    options = {config: KernelOptions.parse(config) for config in configs}
    return [BenchCase(p, r, c, replace(options[c]), model, a, network_config=network_config,
                      **backend)
            for a in architectures for backend in cases_of(a)
            for p in proteins for r in replicas for c in configs]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time(fn, device: torch.device, repeats: int) -> float:
    """Median seconds of ``fn()`` over ``repeats`` calls after one warm-up call."""
    fn()
    samples = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def step_breakdown(sim, repeats: int = 20) -> dict[str, float]:
    """Milliseconds per step spent in each phase (see module docstring)."""
    device = sim.device
    pos = sim.positions
    nl = sim.neighbor_list
    potential, options = sim.potential, sim.options

    def neighbours():
        if nl is not None:
            nl.update(pos)

    def forward():
        with torch.no_grad():
            potential.energy(pos, sim.graph, options)

    def forward_backward():
        potential.energy_and_forces(pos, sim.graph, options)

    def whole_step():
        sim.step(1)

    t_nl = _time(neighbours, device, repeats)
    t_fwd = _time(forward, device, repeats)
    t_fb = _time(forward_backward, device, repeats)
    t_step = _time(whole_step, device, repeats)
    return {
        "neighbor_list_ms": 1e3 * t_nl,
        "forward_ms": 1e3 * t_fwd,
        "backward_ms": 1e3 * max(t_fb - t_fwd, 0.0),
        "integrator_ms": 1e3 * max(t_step - t_fb - t_nl, 0.0),
        "step_ms": 1e3 * t_step,
    }


def profile_table(sim, steps: int = 5, rows: int = 15) -> str:
    """Top device kernels of ``steps`` whole MD steps (torch.profiler), as a text table."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if sim.device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    sim.step(1)
    with profile(activities=activities) as prof:
        sim.step(steps)
        _sync(sim.device)
    sort = "cuda_time_total" if sim.device.type == "cuda" else "cpu_time_total"
    return prof.key_averages().table(sort_by=sort, row_limit=rows)


#: Host calls that put work on the GPU (kernels, graphs, copies, fills).
LAUNCH_CALLS = frozenset({
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
    "cudaGraphLaunch", "cudaMemcpyAsync", "cudaMemsetAsync",
})


def launches_per_step(sim, steps: int = 20) -> dict[str, float]:
    """Host launch calls and device kernels per MD step, counted by torch.profiler.

    A captured step shows about one ``cudaGraphLaunch`` per step (plus the copies in
    and out of the chunk), however many kernels run inside the graph.
    """
    from torch.profiler import ProfilerActivity, profile

    sim.step(1)  # capture (if on) outside the window
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        sim.step(steps)
        _sync(sim.device)
    events = prof.events()
    host = sum(1 for e in events if e.name in LAUNCH_CALLS)
    kernels = sum(
        1 for e in events
        if e.device_type == torch.autograd.DeviceType.CUDA and "memcpy" not in e.name.lower()
        and "memset" not in e.name.lower()
    )
    return {"host_launches_per_step": host / steps, "kernels_per_step": kernels / steps}


def run_case(
    case: BenchCase,
    device: str = "auto",
    steps: int = 200,
    warmup: int = 30,
    repeats: int = 3,
    breakdown: bool = False,
    timestep_fs: float = 4.0,
    profile: bool = False,
    launches: bool = False,
) -> dict:
    """Benchmark one case; returns a JSON-able record."""
    settings = RunSettings(
        protein=case.protein,
        model=case.model,
        architecture=case.architecture,
        replicas=case.replicas,
        steps=steps,
        timestep_fs=timestep_fs,
        device=device,
        options=case.options,
        network=case.network_config,
        **{b.setting: getattr(case, b.setting) or b.default for b in NETWORK_BACKENDS.values()},
    )
    target, _ = resolve_device(device)
    if target.type == "cuda":
        torch.cuda.reset_peak_memory_stats(target)
    prepared = prepare_run(settings)
    sim = prepared.simulation
    dev = sim.device
    sim.step(warmup)
    _sync(dev)
    setup_peak = None
    if dev.type == "cuda":
        setup_peak = torch.cuda.max_memory_allocated(dev) / 1e9
        torch.cuda.reset_peak_memory_stats(dev)
    windows = []
    for _ in range(repeats):
        _sync(dev)
        start = time.perf_counter()
        sim.step(steps)
        _sync(dev)
        windows.append(steps * case.replicas / (time.perf_counter() - start))
    rate = statistics.median(windows)
    record = {
        "protein": prepared.system.name,
        "beads": prepared.system.n_beads,
        "replicas": case.replicas,
        "label": case.label,
        "model": case.model_label,
        **({"network_config": case.network_config} if case.network_config else {}),
        "architecture": sim.potential.architecture,
        "options": case.options.to_dict(),
        "timestep_mol_per_s": rate,
        "windows": windows,
        "ns_per_day": ns_per_day(rate, timestep_fs),
        "peak_memory_gb": torch.cuda.max_memory_allocated(dev) / 1e9
        if dev.type == "cuda"
        else None,
        "peak_memory_setup_gb": setup_peak,
        "bead_steps_per_s": rate * prepared.system.n_beads,
        "neighbor_search": neighbor_search(sim),
        "edges_per_replica": _edges_within_cutoff(sim) / case.replicas,
        "frozen_replicas": len(sim.frozen_report()),
        "force_path": force_path(sim.potential.network, dev, sim.options),
        "threads": torch.get_num_threads() if dev.type == "cpu" else None,
    }
    backends = NETWORK_BACKENDS.get(sim.potential.architecture)
    if backends is not None:
        # what ran (prepare_run keeps the default where the backend asked for cannot run)
        setting = backends.setting
        record[setting] = getattr(prepared.settings, setting)
        record[f"{setting}_requested"] = getattr(case, setting) or backends.default
        if setting in prepared.backend_notices:
            record[f"{setting}_notice"] = prepared.backend_notices[setting]
    if launches and dev.type == "cuda":
        record["launches"] = launches_per_step(sim)
    if breakdown:
        record["breakdown"] = step_breakdown(sim)
    if profile:
        record["profile"] = profile_table(sim)
    del sim, prepared
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return record


def neighbor_search(sim) -> str | None:
    """How the run finds its edges: ``"triton"`` (the Triton pair search), ``"dense"``
    (dense distance blocks) or ``"cell-list"`` (`workbench.neighbors.cell_list_pairs`);
    None without a network."""
    if sim.neighbor_list is None:
        return None
    if sim.searches_pairs():
        return "triton"
    return "dense" if sim.neighbor_list.dense else "cell-list"


def _edges_within_cutoff(sim) -> int:
    """Directed edges with ``d < cutoff`` now (padding and skin slots not counted)."""
    if sim.neighbor_list is None:
        return 0
    return sim.neighbor_list.update(sim.positions, exact=True).num_edges


def environment() -> dict:
    """Device, versions and date of a benchmark run."""
    import platform

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    cuda = torch.cuda.is_available()
    return {
        "date": date.today().isoformat(),
        "gpu": torch.cuda.get_device_name(0) if cuda else None,
        "torch": torch.__version__,
        "triton": triton_version,
        "python": platform.python_version(),
    }


def network_name(architecture: str, backend: str | None = None,
                 requested: str | None = None) -> str:
    """A network with its backend (`workbench.runner.NETWORK_BACKENDS`):
    ``"nequip/openequivariance"``, ``"dp/deepmd"``; the architecture alone for no backend
    or the engine's own path (``"dp"``), and the backend ``requested`` where another ran
    (``"nequip/e3nn (asked openequivariance)"``, ``"dp (asked deepmd)"``)."""
    backends = NETWORK_BACKENDS.get(architecture)
    if backends is None or backend is None:
        return architecture
    name = architecture if backend == backends.unnamed else f"{architecture}/{backend}"
    return name + (f" (asked {requested})" if requested not in (None, backend) else "")


def requested_backend(record: dict) -> str | None:
    """The backend a record's network was asked to run with (``tp_backend_requested``,
    ``dp_backend_requested``; the network's default for a record written before it had
    backends), None for a network without backends."""
    backends = NETWORK_BACKENDS.get(record.get("architecture", "schnet"))
    return None if backends is None else record.get(f"{backends.setting}_requested",
                                                    backends.default)


def network_label(record: dict) -> str:
    """The network of a record: its ``architecture``, ``"schnet"`` for a record without one
    (written before records named it), ``"–"`` for a prior-only model; with the backend
    that ran and the one asked for (`network_name`)."""
    architecture = record.get("architecture", "schnet")
    if architecture is None:
        return "–"
    backends = NETWORK_BACKENDS.get(architecture)
    ran = None if backends is None else record.get(backends.setting)
    return network_name(architecture, ran, requested_backend(record))


def markdown_table(records: list[dict]) -> str:
    """Markdown table of benchmark records."""
    head = (
        "| protein | beads | replicas | network | config | timestep·mol/s | ns/day | peak GB | "
        "edges/replica | launches/step (host, kernels) |\n|---|---|---|---|---|---|---|---|---|---|"
    )
    rows = []
    for r in records:
        peak = "–" if r["peak_memory_gb"] is None else f"{r['peak_memory_gb']:.2f}"
        edges = "–" if r["edges_per_replica"] is None else f"{r['edges_per_replica']:,.0f}"
        launches = r.get("launches")
        launches = (
            f"{launches['host_launches_per_step']:,.1f}, {launches['kernels_per_step']:,.0f}"
            if launches else "–"
        )
        label = r["label"]
        if r.get("force_path") == "pytorch-tables":
            threads = r["threads"]
            label += " (PyTorch tables" + (
                f", {threads} thread{'s' * (threads != 1)})" if threads else ")")
        rows.append(
            f"| {r['protein']} | {r['beads']} | {r['replicas']} | {network_label(r)} | {label} | "
            f"{r['timestep_mol_per_s']:,.0f} | {r['ns_per_day']:,.1f} | {peak} | {edges} | "
            f"{launches} |"
        )
    return "\n".join([head, *rows])


def write_results(records: list[dict], out: str | Path, command: str,
                  unfinished: int = 0) -> tuple[Path, Path]:
    """Write ``bench.json`` and ``bench.md`` into ``out`` (each replaced whole, atomically);
    returns both paths.

    ``unfinished``: cases of the command not run yet. The benchmark writes both files after
    every case, so a run stopped part-way (a time limit, a lost machine) keeps the cases
    it finished; until the last case ``bench.json`` carries ``"unfinished"`` with that
    count and ``bench.md`` says so.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    env = environment()
    payload = {"environment": env, "command": command, "records": records}
    if unfinished:
        payload["unfinished"] = unfinished
    json_path = out / "bench.json"
    md_path = out / "bench.md"
    atomic_write_text(json_path, json.dumps(payload, indent=2))
    note = (f"**Not finished**: {unfinished} case(s) of the command had not run when this "
            "was written.\n\n" if unfinished else "")
    atomic_write_text(
        md_path,
        f"GPU: {env['gpu'] or 'CPU'} · torch {env['torch']} · triton {env['triton']} · "
        f"{env['date']}\n\nCommand: `{command}`\n\n{note}{markdown_table(records)}\n"
    )
    return json_path, md_path
