"""The ablation of the kernel techniques, defined once: the configurations that
``python -m benchmarks.ablation`` measures, in the order of its table and chart, and the
order in which the workbench's live-switch walk turns the techniques on.

The order is the paper's: the baseline (the PyTorch reference path), each of the flash
engine's four techniques alone, then the techniques added one at a time until every exact
fused technique is on (`all`: the four, then this engine's per-step pair search, fused
Langevin steps and one exact filter per pair), with FP32 MLPs and again with FP16 MLPs,
then each of those with the whole step captured as a CUDA graph. Last, beyond the paper,
this engine's tabulated filters: ``all+tables`` and ``tables+graph`` (the fastest path).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from workbench.model.options import KernelOptions

#: The flash engine's four techniques, in the order the ablation adds them.
PAPER_TECHNIQUES = (
    "fused_radial_basis", "fused_message_passing", "csr_aggregation", "fused_update",
)
#: The cumulative order: the paper's four, then the three that complete ``all``.
CUMULATIVE = (*PAPER_TECHNIQUES, "fused_pair_search", "fused_integrator", "pair_filter")
#: The live-switch walk: the cumulative order, then 16-bit MLPs, captured steps and the
#: tabulated filters. ``mlp_fp16`` stands for ``mlp_precision="fp16"``.
WALK = (*CUMULATIVE, "mlp_fp16", "cuda_graph", "tabulated_filter")

#: The engine's own techniques that the paper's ablation does not have.
BEYOND_PAPER = ("tabulated_filter",)

#: What each step of the ablation or the walk turns on, in a line.
TURNS_ON = {
    "fused_radial_basis": "distance, radial basis and envelope in one kernel (no [E, K] "
                          "basis tensor kept)",
    "fused_message_passing": "filter MLP, message and aggregation of a block in one kernel "
                             "(no edge tensor written)",
    "csr_aggregation": "sums over destination-sorted CSR segments instead of scatter-adds",
    "fused_update": "node layers in Triton kernels (split-weight 3×TF32 products in FP32)",
    "fused_pair_search": "the neighbour graph found afresh each step by Triton passes, "
                         "already in CSR order",
    "fused_integrator": "Langevin steps in two Triton kernels instead of some fifty tensor "
                        "operations",
    "pair_filter": "the exact filter and its derivative once per pair on tensor cores, read "
                   "by the convolution (no GEMM in its backward)",
    "mlp_fp16": "FP16 weights and activations in the filter, update and output MLPs",
    "cuda_graph": "the whole MD step captured once as a CUDA graph and replayed (alone, it "
                  "brings the network's fused message passing)",
    "tabulated_filter": "each block's filter read from a cubic table instead of its MLP",
}

#: Groups of the ablation, in order; the last is beyond the paper.
GROUPS = (
    "baseline", "alone", "cumulative, FP32", "cumulative, FP16", "captured steps",
    "beyond the paper",
)


@dataclass(frozen=True)
class AblationStep:
    """One row of the ablation.

    Attributes
    ----------
    config : str
        `KernelOptions.parse` name, the label of its benchmark record.
    group : str
        One of :data:`GROUPS`.
    step : str
        Short name of the row within its group (``"+csr_aggregation"``).
    paper : bool
        False where a technique of :data:`BEYOND_PAPER` is on (the last group).
    """

    config: str
    group: str
    step: str
    paper: bool = True

    @property
    def options(self) -> KernelOptions:
        """The switches of :attr:`config`."""
        return KernelOptions.parse(self.config)


def _cumulative_config(count: int, suffix: str = "") -> str:
    names = CUMULATIVE[:count]
    base = "all" if count == len(CUMULATIVE) else "+".join(names)
    return base + suffix


def ablation_steps() -> list[AblationStep]:
    """Every row of the ablation in order (see module docstring).

    A configuration may appear in two rows (``fused_radial_basis`` alone is the first
    cumulative row); it is measured once.
    """
    steps = [AblationStep("baseline", "baseline", "baseline")]
    steps += [AblationStep(name, "alone", name) for name in PAPER_TECHNIQUES]
    for suffix, group in (("", "cumulative, FP32"), ("-fp16", "cumulative, FP16")):
        for count, name in enumerate(CUMULATIVE, start=1):
            step = name if count == 1 else f"+{name}"
            if count == len(CUMULATIVE):
                step += " (= all)"
            steps.append(AblationStep(_cumulative_config(count, suffix), group, step))
    steps += [AblationStep("all+graph", "captured steps", "all+graph"),
              AblationStep("all+graph-fp16", "captured steps", "all+graph-fp16")]
    steps += [AblationStep("all+tables", "beyond the paper", "all+tables"),
              AblationStep("tables+graph", "beyond the paper", "tables+graph")]
    return [replace(step, paper=not any(getattr(step.options, name) for name in BEYOND_PAPER))
            for step in steps]


def ablation_configs() -> list[str]:
    """The configurations to measure: those of :func:`ablation_steps`, each once, in order."""
    return list(dict.fromkeys(step.config for step in ablation_steps()))


def walk_stages() -> list[tuple[str, KernelOptions]]:
    """The live-switch walk: ``("baseline", baseline)``, then for each name of :data:`WALK`
    the name and the switches with it and every earlier one on.

    Returns
    -------
    list of (str, KernelOptions)
        ``len(WALK) + 1`` entries.
    """
    stages = [("baseline", KernelOptions.baseline())]
    for name in WALK:
        previous = stages[-1][1]
        if name == "mlp_fp16":
            stages.append((name, replace(previous, mlp_precision="fp16")))
        else:
            stages.append((name, replace(previous, **{name: True})))
    return stages
