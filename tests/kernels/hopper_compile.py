"""Compile the tabulated kernels for sm_90 with Triton's compiler and bundled ptxas.

Run as a script in a process without ``TRITON_INTERPRET`` (under the interpreter the
kernels are Python functions and cannot be compiled): ``python hopper_compile.py`` prints
one line per compiled variant and exits 0, or fails with the compiler's error. No GPU is
needed.
"""

from __future__ import annotations

from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, compile

from kernels import tabulated

TABLE = {"c01_ptr": "*fp32", "c23_ptr": "*fp16", "scale_ptr": "*fp32", "ptr_ptr": "*i32",
         "perm_ptr": "*i32", "num_nodes": "i32", "num_intervals": "i32", "inv_h": "fp32",
         "cutoff": "fp32", "dist_ptr": "*fp32", "xs_ptr": "*fp32"}
KERNELS = {
    "forward": (tabulated._tab_fwd_kernel, dict(TABLE, src_ptr="*i64", out_ptr="*fp32"),
                tabulated.FORWARD_SLICE),
    "backward": (tabulated._tab_bwd_kernel,
                 dict(TABLE, gu_ptr="*fp32", dst_ptr="*i64", gxs_ptr="*fp32", g_ptr="*fp32",
                      num_edges="i32"), tabulated.BACKWARD_SLICE),
}


def main():
    for name, (kernel, types, feature_slice) in KERNELS.items():
        fn = kernel.fn  # the jitted function under the autotuner
        for block_e in (4, 16):
            constants = {"F": 128, "FS": feature_slice, "BLOCK_E": block_e}
            signature = {a: "constexpr" if a in constants else types[a] for a in fn.arg_names}
            compiled = compile(ASTSource(fn, signature, constexprs=constants),
                               target=GPUTarget("cuda", 90, 32))
            assert compiled.asm["cubin"], name
            print(f"{name} BLOCK_E={block_e}: sm_90 cubin {len(compiled.asm['cubin'])} bytes")


if __name__ == "__main__":
    main()
