"""Time variants of the reference path's energy + forces (R replicas near native).

    python scripts/reference_variants.py [PROTEIN] [REPLICAS]     (default 1enh 64)

reference: the reference path as shipped.
sorted-src: the same symmetric edge set with roles swapped, so the scatter goes into
unsorted rows, as mlcg's radius graph + PyG aggregation does.
index_add_: aggregation by ``index_add_`` and source features gathered with
``index_select`` (whose backward is ``index_add_``), instead of the reference's
``scatter_add_`` and ``gather`` over broadcast indices.
index_add_ aggregation: only the aggregation by ``index_add_``.
priors by advanced indexing: bead gathers as ``pos[:, idx]`` (backward sorts the
indices) instead of ``index_select`` (backward scatter-adds).
tf32 GEMMs: TF32 tensor-core matrix products allowed.
"""

import statistics
import sys
import time

import torch

import workbench.model.geometry as geometry
from workbench.model.native_priors import demo_potential
from workbench.model.potential import Potential
from workbench.model.schnet import CFConv
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


def index_add_forward(self, h, rbf, envelope, src, dst):
    w = self.filter_network(rbf) * envelope[:, None]
    messages = self.lin1(h).index_select(0, src) * w
    return self.lin2(messages.new_zeros(h.shape[0], w.shape[1]).index_add_(0, dst, messages))


def index_add_aggregation_forward(self, h, rbf, envelope, src, dst):
    w = self.filter_network(rbf) * envelope[:, None]
    messages = self.lin1(h).gather(0, src[:, None].expand_as(w)) * w
    return self.lin2(messages.new_zeros(h.shape[0], w.shape[1]).index_add_(0, dst, messages))


def advanced_indexing(pos, index, column):
    return pos[:, index[:, column]]


protein = sys.argv[1] if len(sys.argv) > 1 else "1enh"
replicas = int(sys.argv[2]) if len(sys.argv) > 2 else 64
cpu_system = build_system(protein)
potential = demo_potential(cpu_system).to("cuda")
system = cpu_system.to("cuda")
gen = torch.Generator(device="cuda").manual_seed(0)
noise = torch.randn((replicas, system.n_beads, 3), generator=gen, device="cuda")
pos = system.native_positions[None] + 0.3 * noise
graph = NeighborList(system.n_beads, 10.0, skin=0.0).update(pos)
swapped = Graph(graph.dst, graph.src, graph.num_nodes)
print(f"{protein} x {replicas}: edges per replica {graph.num_edges / replicas:.0f}")
e_ref, f_ref = potential.energy_and_forces(pos, graph)
schnet_only = Potential(potential.bead_types, potential.schnet)
priors_only = Potential(potential.bead_types, None, dict(potential.priors))
print(
    f"schnet only: {timed(lambda: schnet_only.energy_and_forces(pos, graph)):.2f} ms; "
    f"priors only: {timed(lambda: priors_only.energy_and_forces(pos, None)):.2f} ms"
)


def report(name, g=graph):
    both = timed(lambda: potential.energy_and_forces(pos, g))
    _, forces = potential.energy_and_forces(pos, g)
    error = float((forces - f_ref).norm() / f_ref.norm())
    print(
        f"{name}: energy+forces {both:.2f} ms -> {replicas * 1e3 / both:,.0f} timestep*mol/s "
        f"bound; forces vs reference {error:.1e} relative RMS"
    )


report("reference")
report("sorted-src", swapped)
shipped_forward = CFConv.forward
CFConv.forward = index_add_forward
report("index_add_")
CFConv.forward = index_add_aggregation_forward
report("index_add_ aggregation")
CFConv.forward = shipped_forward
shipped_gather = geometry.gather_beads
geometry.gather_beads = advanced_indexing
report("priors by advanced indexing")
geometry.gather_beads = shipped_gather
torch.backends.cuda.matmul.allow_tf32 = True
report("tf32 GEMMs")
torch.backends.cuda.matmul.allow_tf32 = False
