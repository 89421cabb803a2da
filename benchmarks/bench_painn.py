"""CGPaiNN energy and forces: the fused message kernel against the reference path.

    python -m benchmarks.bench_painn [--protein 1enh] [--replicas 64] [--repeats 20]
        [--device cuda] [--out result.json]

A randomly initialised CGPaiNN (default `PaiNNConfig`: H = 128, K = 64, three blocks, 10 Å)
on the exact graph of the native structure plus 0.3 Å of noise; the same measurements as
`benchmarks.bench_egnn` (one force evaluation on each path, CUDA events, median of
``--repeats`` after a warm-up that autotunes; the fused path's relative RMS force error
against the FP32 and the float64 reference; peak memory). Prints JSON; ``speedup`` is the
figure the fused path's target (at least 5x) is about.
"""

from __future__ import annotations

import torch

from benchmarks.bench_egnn import arguments, compare_paths
from workbench.model.painn import CGPaiNN, PaiNNConfig


def main(argv=None) -> dict:
    args = arguments(__doc__.splitlines()[0], argv)
    torch.manual_seed(0)
    return compare_paths(CGPaiNN(PaiNNConfig()), args)


if __name__ == "__main__":
    main()
