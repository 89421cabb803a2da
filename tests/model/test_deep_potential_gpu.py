"""CGDeepPotential's fast paths on a GPU at the benchmark's shape: 1ENH × 16, the default
`DeepPotentialConfig`, native positions plus 0.3 Å of noise. With the tables (in PyTorch,
or read by the fused descriptor kernel) the forces stay within 1e-5 of their RMS of the
model in float64, with 16-bit networks within 1e-3 (fp16) and 1e-2 (bf16). Measured on the
CPU with the tables on 1ENH × 2: 4.4e-7 (FP32), 3.4e-4 (fp16), 3.8e-3 (bf16). Not yet
run on a GPU."""

from __future__ import annotations

import pytest
import torch
from helpers import gpu_force_error

from workbench.model.deep_potential import CGDeepPotential, DeepPotentialConfig
from workbench.model.options import KernelOptions

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("fused", [False, True], ids=["tables", "fused-descriptor"])
@pytest.mark.parametrize("precision, bound", [("fp32", 1e-5), ("fp16", 1e-3),
                                              ("bf16", 1e-2)])
def test_deep_potential_fast_path_force_error_against_float64(fused, precision, bound):
    torch.manual_seed(0)
    options = KernelOptions(tabulated_filter=True, fused_message_passing=fused,
                            mlp_precision=precision)
    err = gpu_force_error(CGDeepPotential(DeepPotentialConfig()), options)
    print(f"{precision} {'fused' if fused else 'tables'}: DP force error {err:.2e} of the RMS")
    assert err <= bound
