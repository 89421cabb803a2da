"""Compile the tabulated and edge-length kernels for sm_90 with Triton's compiler and ptxas.

Run as a script in a process without ``TRITON_INTERPRET`` (under the interpreter the
kernels are Python functions and cannot be compiled): ``python hopper_compile.py`` prints
one line per compiled variant and exits 0, or fails with the compiler's error. No GPU is
needed.
"""

from __future__ import annotations

from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, compile
from triton.runtime.autotuner import Autotuner

from kernels import tabulated
from kernels.edge_distances import _distance_kernel

TABLE = {"c01_ptr": "*fp32", "c23_ptr": "*fp16", "scale_ptr": "*fp32", "ptr_ptr": "*i32",
         "perm_ptr": "*i32", "num_nodes": "i32", "num_intervals": "i32", "inv_h": "fp32",
         "cutoff": "fp32", "dist_ptr": "*fp32", "xs_ptr": "*fp32"}
TILES = ({"BLOCK_E": 4}, {"BLOCK_E": 16})
KERNELS = {  # name: (kernel, argument types, constexpr variants)
    "tabulated forward": (
        tabulated._tab_fwd_kernel, dict(TABLE, src_ptr="*i64", out_ptr="*fp32"),
        [dict(t, F=128, FS=tabulated.FORWARD_SLICE) for t in TILES]),
    "tabulated backward": (
        tabulated._tab_bwd_kernel,
        dict(TABLE, gu_ptr="*fp32", dst_ptr="*i64", gxs_ptr="*fp32", g_ptr="*fp32",
             num_edges="i32"),
        [dict(t, F=128, FS=tabulated.BACKWARD_SLICE) for t in TILES]),
    "edge lengths": (
        _distance_kernel,
        {"pos_ptr": "*fp32", "src_ptr": "*i64", "ptr_ptr": "*i32", "perm_ptr": "*i32",
         "out_ptr": "*fp32"},
        [{"BLOCK_E": 64}]),
}


def main():
    for name, (kernel, types, variants) in KERNELS.items():
        fn = kernel.fn if isinstance(kernel, Autotuner) else kernel  # the jitted function
        for constants in variants:
            signature = {a: "constexpr" if a in constants else types[a] for a in fn.arg_names}
            compiled = compile(ASTSource(fn, signature, constexprs=constants),
                               target=GPUTarget("cuda", 90, 32))
            assert compiled.asm["cubin"], name
            print(f"{name} {constants}: sm_90 cubin {len(compiled.asm['cubin'])} bytes")


if __name__ == "__main__":
    main()
