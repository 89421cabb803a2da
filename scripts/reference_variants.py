"""Time variants of the reference path's energy + forces (1ENH x 64, near native).

sorted-dst: scatter-add into destination-sorted edges (many warps add into one row);
sorted-src: the same symmetric edge set with roles swapped, so the scatter goes into
unsorted rows, as mlcg's radius graph + PyG aggregation does.
priors by advanced indexing: bead gathers as ``pos[:, idx]`` (backward sorts the
indices) instead of ``index_select`` (backward scatter-adds).
tf32 GEMMs: the same step with TF32 tensor-core matrix products allowed.
"""

import statistics
import time

import torch

import workbench.model.geometry as geometry
from workbench.model.native_priors import demo_potential
from workbench.model.potential import Potential
from workbench.neighbors import Graph, NeighborList
from workbench.system import build_system


def timed(fn, repeats=20):
    fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        samples.append(time.perf_counter() - start)
    return 1e3 * statistics.median(samples)


cpu_system = build_system("1enh")
potential = demo_potential(cpu_system).to("cuda")
system = cpu_system.to("cuda")
gen = torch.Generator(device="cuda").manual_seed(0)
noise = torch.randn((64, system.n_beads, 3), generator=gen, device="cuda")
pos = system.native_positions[None] + 0.3 * noise
graph = NeighborList(system.n_beads, 10.0, skin=0.0).update(pos)
swapped = Graph(graph.dst, graph.src, graph.num_nodes)
print(f"edges per replica {graph.num_edges / 64:.0f}")
e1, f1 = potential.energy_and_forces(pos, graph)
e2, f2 = potential.energy_and_forces(pos, swapped)
print("max |dE|", float((e1 - e2).abs().max()), "rel dF", float((f1 - f2).norm() / f1.norm()))
for name, g in (("sorted-dst", graph), ("sorted-src", swapped)):
    fwd = timed(lambda g=g: potential.energy(pos, g))
    both = timed(lambda g=g: potential.energy_and_forces(pos, g))
    print(
        f"{name}: forward {fwd:.2f} ms, energy+forces {both:.2f} ms "
        f"-> {64e3 / both:,.0f} timestep*mol/s bound"
    )

schnet_only = Potential(potential.bead_types, potential.schnet)
priors_only = Potential(potential.bead_types, None, dict(potential.priors))
print(
    f"schnet only: {timed(lambda: schnet_only.energy_and_forces(pos, graph)):.2f} ms; "
    f"priors only: {timed(lambda: priors_only.energy_and_forces(pos, None)):.2f} ms"
)


def advanced_indexing(pos, index, column):
    return pos[:, index[:, column]]


reference_gather = geometry.gather_beads
geometry.gather_beads = advanced_indexing
advanced = timed(lambda: priors_only.energy_and_forces(pos, None))
print(
    f"priors by advanced indexing: {advanced:.2f} ms; "
    f"energy+forces {timed(lambda: potential.energy_and_forces(pos, graph)):.2f} ms"
)
geometry.gather_beads = reference_gather
torch.backends.cuda.matmul.allow_tf32 = True
both = timed(lambda: potential.energy_and_forces(pos, graph))
e3, f3 = potential.energy_and_forces(pos, graph)
print(
    f"tf32 GEMMs: energy+forces {both:.2f} ms -> {64e3 / both:,.0f} timestep*mol/s bound; "
    f"force error vs fp32 {float((f3 - f1).norm() / f1.norm()):.2e} relative RMS"
)
torch.backends.cuda.matmul.allow_tf32 = False
