"""Compile the fused-filter, pair-filter, EGNN edge and envelope, segment-sum, PaiNN message,
Deep Potential descriptor, tabulated, table read, edge-length, pair-search, position-gradient
and packed-linear kernels for sm_90.

Run as a script in a process without ``TRITON_INTERPRET`` (under the interpreter the
kernels are Python functions and cannot be compiled): ``python hopper_compile.py`` prints
one line per compiled variant and exits 0, or fails with the compiler's error. No GPU is
needed. Pointer arguments are marked 16-byte aligned, as the JIT marks the tensors it is
given, so the code is what runs (vectorised loads). ``--resources`` adds each variant's
registers per thread and shared memory (``cuobjdump -res-usage`` on the cubin).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import triton
from triton import language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, compile
from triton.runtime.autotuner import Autotuner

from kernels import tabulated
from kernels.cfconv import _conv_kernel, _length_grad_kernel
from kernels.dp_descriptor import _descriptor_bwd_kernel, _descriptor_fwd_kernel
from kernels.edge_distances import _distance_kernel
from kernels.egnn_edge import _edge_bwd_kernel, _edge_fwd_kernel, _envelope_kernel
from kernels.fused_update import _linear_kernel
from kernels.painn_message import _message_bwd_kernel, _message_fwd_kernel
from kernels.pair_filter import (
    _pair_filter_kernel,
    _pair_flag_kernel,
    _pair_row_kernel,
)
from kernels.pair_search import _count_kernel, _fill_kernel
from kernels.segment_reduce import _pos_grad_kernel, _segment_sum_kernel
from kernels.table_read import _read_bwd_kernel, _read_fwd_kernel

TABLE = {"c01_ptr": "*fp32", "c23_ptr": "*fp16", "scale_ptr": "*fp32", "ptr_ptr": "*i32",
         "perm_ptr": "*i32", "num_nodes": "i32", "num_intervals": "i32", "inv_h": "fp32",
         "cutoff": "fp32", "dist_ptr": "*fp32", "xs_ptr": "*fp32"}
TILES = ({"BLOCK_E": 4}, {"BLOCK_E": 16})
ROWS = {"dist_ptr": "*i32", "c01_ptr": "*fp16", "c23_ptr": "*fp16", "scale_ptr": "*fp16"}
RADIAL = {"pos_ptr": "*fp32", "mu_ptr": "*fp32", "gamma_ptr": "*fp32", "K": "i32",
          "alpha": "fp32", "basis_lower": "fp32", "env_a": "fp32", "env_b": "fp32",
          "env_upper": "fp32", "env_lower": "fp32"}
FILTER = {"w1_ptr": "*fp16", "s1_ptr": "*fp32", "b1_ptr": "*fp32", "s2_ptr": "*fp32",
          "xs_ptr": "*fp32", "feat_ptr": "*fp32", "own_ptr": "*fp32"}
ENVELOPE = dict(EXP_NORMAL=False, ENV_LOWER=False, ENV_IN_BASIS=False, ENV_ON_FILTER=True,
                F=128, KP=64, DT=tl.float16, PREC="tf32")
EGNN = dict(RADIAL, dist_ptr="*fp32", c_ptr="*fp32", dc_ptr="*fp32", xa_ptr="*fp32",
            xb_ptr="*fp32", src_ptr="*i64", ptr_ptr="*i32", perm_ptr="*i32", wr_ptr="*fp32",
            wd_ptr="*fp32", w2t_ptr="*fp32", b2_ptr="*fp32", out_ptr="*fp32", z_ptr="*fp32",
            num_nodes="i32", inv_rc2="fp32")
EGNN_VARIANT = dict(EXP_NORMAL=False, ENV_IN_BASIS=True, ACT="silu", F=64, SORTED=True,
                    KP=32, DT=tl.float32, PREC="tf32x3", BLOCK_E=16)
EGNN_16 = dict(EGNN, wr_ptr="*fp16", w2t_ptr="*fp16")
PAINN = dict(RADIAL, x_ptr="*fp32", vec_ptr="*fp32", src_ptr="*i64", ptr_ptr="*i32",
             perm_ptr="*i32", w_ptr="*fp32", b_ptr="*fp32", c01_ptr="*fp32", c23_ptr="*fp32",
             scale_ptr="*fp32", inv_h="fp32", num_intervals="i32", dq_ptr="*fp32",
             dmu_ptr="*fp32", num_nodes="i32")
PAINN_BWD = dict(PAINN, gq_ptr="*fp32", gmu_ptr="*fp32", dst_ptr="*i64", gx_ptr="*fp32",
                 gvec_ptr="*fp32", v_ptr="*fp32")
PAINN_VARIANT = dict(EXP_NORMAL=True, ENV_LOWER=False, ENV_IN_BASIS=True, ENV_ON_FILTER=True,
                     H=128, KP=64, DT=tl.float32, PREC="tf32x3", TABLE=False, BLOCK_E=16)
PAINN_TABLE = dict(PAINN_VARIANT, KP=16, TABLE=True)  # the filter from its table
DP = {"pos_ptr": "*fp32", "types_ptr": "*i64", "src_ptr": "*i64", "ptr_ptr": "*i32",
      "perm_ptr": "*i32", "c01_ptr": "*fp32", "c23_ptr": "*fp16", "scale_ptr": "*fp32",
      "mean_ptr": "*fp32", "std_ptr": "*fp32", "empty_ptr": "*fp32", "lists_ptr": "*fp32",
      "out_ptr": "*fp32", "ga_ptr": "*fp32", "v_ptr": "*fp32", "num_nodes": "i32",
      "num_types": "i32", "cutoff_smooth": "fp32", "cutoff": "fp32", "lower": "fp32",
      "inv_h": "fp32", "num_intervals": "i32", "inv_nc": "fp32"}
DP_PAIRS = dict(F=25 * 25 * 64, M1=64, ONE_SIDE=False, BLOCK_E=16)  # the default model's
SEGMENTS = {"ptr_ptr": "*i32", "perm_ptr": "*i32", "out_ptr": "*fp32", "F": "i32",
            "scale_ptr": "*fp32"}
KERNELS = {  # name: (kernel, argument types, constexpr variants)
    "fused filter convolution": (
        _conv_kernel,
        dict(RADIAL, **FILTER, other_ptr="*i64", ptr_ptr="*i32", perm_ptr="*i32",
             edge_out_ptr="*fp32", w2_ptr="*fp16", b2_ptr="*fp32", out_ptr="*fp32",
             num_nodes="i32"),
        [dict(ENVELOPE, EDGE_DOT=dot, BLOCK_E=16, PERSISTENT=2 * dot) for dot in (False, True)]),
    "fused filter length gradient": (
        _length_grad_kernel,
        dict(RADIAL, **FILTER, gu_ptr="*fp32", src_ptr="*i64", dst_ptr="*i64",
             order_ptr="*i32", count_ptr="*i32", w2t_ptr="*fp16", g_ptr="*fp32", E="i32"),
        [dict(ENVELOPE, PAIRS=True, BLOCK_E=16, FC=32)]),
    # recomputing (STORE, STORED off) and stored-activation variants
    "EGNN edge forward": (_edge_fwd_kernel, EGNN,
                          [dict(EGNN_VARIANT, STORE=store) for store in (False, True)]),
    "EGNN edge backward": (
        _edge_bwd_kernel,
        dict(EGNN, gu_ptr="*fp32", dst_ptr="*i64", w2_ptr="*fp32", g_ptr="*fp32",
             gz1_ptr="*fp32", gs_ptr="*fp32"),
        [dict(EGNN_VARIANT, BY_DST=by_dst, STORED=stored)
         for by_dst, stored in ((True, False), (False, False), (True, True))]),
    "EGNN edge forward, fp16 operands": (
        _edge_fwd_kernel, dict(EGNN_16, z_ptr="*fp16"),
        [dict(EGNN_VARIANT, DT=tl.float16, STORE=store) for store in (False, True)]),
    "EGNN edge backward, fp16 operands": (
        _edge_bwd_kernel,
        dict(EGNN_16, z_ptr="*fp16", gu_ptr="*fp32", dst_ptr="*i64", w2_ptr="*fp16",
             g_ptr="*fp32", gz1_ptr="*fp16", gs_ptr="*fp32"),
        [dict(EGNN_VARIANT, DT=tl.float16, BY_DST=True, STORED=stored)
         for stored in (False, True)]),
    "EGNN envelope": (
        _envelope_kernel,
        {"dist_ptr": "*fp32", "out_ptr": "*fp32", "E": "i32", "row_stride": "i32",
         "env_a": "fp32", "env_b": "fp32", "env_upper": "fp32", "env_lower": "fp32"},
        [{"ENV_LOWER": False, "BLOCK": 1024}]),
    "segment sums": (_segment_sum_kernel, dict(SEGMENTS, m_ptr="*fp32"),
                     [dict(BLOCK_E=32, BLOCK_F=64, SIGNED=False, SCALED=False)]),
    # 16-bit rows with a scale each (the EGNN stored backward's dL/dz1)
    "segment sums of scaled rows": (_segment_sum_kernel, dict(SEGMENTS, m_ptr="*fp16"),
                                    [dict(BLOCK_E=32, BLOCK_F=64, SIGNED=False, SCALED=True)]),
    "PaiNN message forward": (_message_fwd_kernel, PAINN, [PAINN_VARIANT]),
    "PaiNN message backward": (_message_bwd_kernel, PAINN_BWD, [PAINN_VARIANT]),
    "PaiNN message forward, fp16 operands": (
        _message_fwd_kernel, dict(PAINN, w_ptr="*fp16"), [dict(PAINN_VARIANT, DT=tl.float16)]),
    "PaiNN message backward, fp16 operands": (
        _message_bwd_kernel, dict(PAINN_BWD, w_ptr="*fp16"),
        [dict(PAINN_VARIANT, DT=tl.float16)]),
    "PaiNN message forward, table": (
        _message_fwd_kernel, dict(PAINN, c23_ptr="*fp16"), [PAINN_TABLE]),
    "PaiNN message backward, table": (
        _message_bwd_kernel, dict(PAINN_BWD, c23_ptr="*fp16"), [PAINN_TABLE]),
    "DP descriptor forward": (  # plain, one-side, deepmd-kit's lists (sel)
        _descriptor_fwd_kernel, DP,
        [dict(DP_PAIRS, EMPTY_SLOTS=False), dict(DP_PAIRS, F=25 * 64, ONE_SIDE=True,
                                                 EMPTY_SLOTS=False),
         dict(DP_PAIRS, EMPTY_SLOTS=True)]),
    "DP descriptor backward": (_descriptor_bwd_kernel, DP, [DP_PAIRS]),
    "position gradients": (
        _pos_grad_kernel,
        {"g_ptr": "*fp32", "pos_ptr": "*fp32", "src_ptr": "*i64", "dst_ptr": "*i64",
         "dptr_ptr": "*i32", "dperm_ptr": "*i32", "sptr_ptr": "*i32", "sperm_ptr": "*i32",
         "out_ptr": "*fp32"},
        [dict(VECTORS=v, BLOCK_E=64) for v in (False, True)]),
    "tabulated forward": (
        tabulated._tab_fwd_kernel, dict(TABLE, src_ptr="*i64", out_ptr="*fp32"),
        [dict(t, F=128, FS=tabulated.FORWARD_SLICE, SLOTS_ARE_EDGES=s, ROWS=False)
         for t in TILES for s in (False, True)]),
    "tabulated backward": (
        tabulated._tab_bwd_kernel,
        dict(TABLE, gu_ptr="*fp32", other_ptr="*i64", gxs_ptr="*fp32", g_ptr="*fp32",
             num_edges="i32"),
        [dict(t, F=128, FS=tabulated.BACKWARD_SLICE, SLOTS_ARE_EDGES=s, ROWS=False,
              XS_GRAD=True) for t in TILES for s in (False, True)]
        + [dict(TILES[0], F=128, FS=tabulated.BACKWARD_SLICE, SLOTS_ARE_EDGES=True, ROWS=False,
                XS_GRAD=False)]),
    "pair-row convolution forward": (
        tabulated._tab_fwd_kernel, dict(TABLE, **ROWS, src_ptr="*i64", out_ptr="*fp32"),
        [dict(BLOCK_E=16, F=128, FS=tabulated.FORWARD_SLICE, SLOTS_ARE_EDGES=True, ROWS=True)]),
    "pair-row convolution backward": (
        tabulated._tab_bwd_kernel,
        dict(TABLE, **ROWS, gu_ptr="*fp32", other_ptr="*i64", gxs_ptr="*fp32",
             g_ptr="*fp32", num_edges="i32"),
        [dict(BLOCK_E=16, F=128, FS=tabulated.BACKWARD_SLICE, SLOTS_ARE_EDGES=True,
              ROWS=True, XS_GRAD=True)]),
    "pair filter rows": (
        _pair_filter_kernel,
        dict(RADIAL, **FILTER, dist_ptr="*fp32", edge_ptr="*i32", count_ptr="*i32",
             w2_ptr="*fp16", b2_ptr="*fp32", w_out_ptr="*fp16", dw_out_ptr="*fp16",
             capacity="i32", cutoff="fp32"),
        [dict(ENVELOPE, BLOCK_P=32, NC=128, HC=128), dict(ENVELOPE, BLOCK_P=64, NC=128, HC=32)]),
    "pair layout flags": (
        _pair_flag_kernel,
        {"dst_perm_ptr": "*i32", "src_perm_ptr": "*i32", "live_ptr": "*i32",
         "flag_ptr": "*i32", "E": "i32"},
        [{"BLOCK": 1024}]),
    "pair layout rows": (
        _pair_row_kernel,
        {"dst_perm_ptr": "*i32", "src_perm_ptr": "*i32", "live_ptr": "*i32", "rank_ptr": "*i32",
         "row_ptr": "*i32", "edges_ptr": "*i32", "E": "i32", "capacity": "i32"},
        [dict(REPRESENTATIVES=r, BLOCK=1024) for r in (True, False)]),
    "table read forward": (
        _read_fwd_kernel,
        {"d_ptr": "*fp32", "c_ptr": "*fp32", "w_ptr": "*fp32", "num_edges": "i32",
         "inv_h": "fp32", "intervals": "fp32", "F": "i32"},
        [{"BLOCK_E": 64, "BLOCK_F": 32}]),
    "table read backward": (
        _read_bwd_kernel,
        {"d_ptr": "*fp32", "c_ptr": "*fp32", "gw_ptr": "*fp32", "gd_ptr": "*fp32",
         "num_edges": "i32", "inv_h": "fp32", "intervals": "fp32", "F": "i32"},
        [{"BLOCK_E": 64, "BLOCK_F": 32}]),
    "edge lengths": (
        _distance_kernel,
        {"pos_ptr": "*fp32", "src_ptr": "*i64", "ptr_ptr": "*i32", "perm_ptr": "*i32",
         "out_ptr": "*fp32"},
        [{"BLOCK_E": 64}]),
    "length-gradient row sum": (
        tabulated._row_sum_kernel,
        {"rows_ptr": "*fp32", "out_ptr": "*fp32", "ptr_ptr": "*i32", "num_nodes": "i32",
         "num_rows": "i32", "num_edges": "i32"},
        [dict(SEARCHED=s, BLOCK=1024) for s in (False, True)]),
    "pair count": (
        _count_kernel,
        {"pos_ptr": "*fp32", "allowed_ptr": "*u8", "count_ptr": "*i32", "mask_ptr": "*i32",
         "before_ptr": "*i32", "n": "i32", "words": "i32", "cutoff": "fp32"},
        [{"BLOCK_J": 128}]),
    "pair fill": (
        _fill_kernel,
        {"mask_ptr": "*i32", "before_ptr": "*i32", "ptr_ptr": "*i32", "src_ptr": "*i64",
         "dst_ptr": "*i64", "src_perm_ptr": "*i32", "n": "i32", "words": "i32",
         "num_nodes": "i32", "capacity": "i32"},
        [{"BLOCK_J": 128, "PAD": 256}]),
    "packed linear": (
        _linear_kernel,
        {"a_ptr": "*fp32", "b_ptr": "*fp32", "b_lo_ptr": "*fp32", "kscale_ptr": "*fp32",
         "nscale_ptr": "*fp32", "bias_ptr": "*fp32", "gate_ptr": "*fp32", "res_ptr": "*fp32",
         "out_ptr": "*fp32",
         **dict.fromkeys(("stride_am", "stride_bk", "stride_bn", "stride_gm", "stride_rm",
                          "stride_om", "M", "SIZE_CLASS", "N", "KD"), "i32")},
        [*(dict(ACT_A=t, ACT="tanh", KSCALE=t, ROW_NORM=False, NSCALE=not t, BIAS=True,
                GATE=t, RES=not t, DT=tl.float32, PREC="tf32x3", SPLIT=True, BLOCK_M=64,
                BLOCK_N=128, BLOCK_K=32)
           for t in (False, True)),
         # the tensor-product network's radial MLP in FP32: SiLU on load (forward), SiLU'
         # in the backward epilogue
         *(dict(ACT_A=not g, ACT="silu", KSCALE=False, ROW_NORM=False, NSCALE=False,
                BIAS=not g, GATE=g, RES=False, DT=tl.float32, PREC="tf32x3", SPLIT=True,
                BLOCK_M=64, BLOCK_N=128, BLOCK_K=32)
           for g in (False, True))]),
}


def resource_usage(cubin: bytes) -> str:
    """``REG:.. SHARED:..`` of a cubin, from Triton's bundled ``cuobjdump``."""
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin",
                        "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([tool, "-res-usage", f.name], capture_output=True, text=True,
                             check=True).stdout
    return " ".join(part for line in out.splitlines() if "REG:" in line
                    for part in line.split() if part.split(":")[0] in ("REG", "SHARED"))


def main():
    resources = "--resources" in sys.argv[1:]
    for name, (kernel, types, variants) in KERNELS.items():
        fn = kernel.fn if isinstance(kernel, Autotuner) else kernel  # the jitted function
        for constants in variants:
            signature = {a: "constexpr" if a in constants else types[a] for a in fn.arg_names}
            aligned = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(fn.arg_names)
                       if a not in constants and types[a].startswith("*")}
            compiled = compile(ASTSource(fn, signature, constexprs=constants, attrs=aligned),
                               target=GPUTarget("cuda", 90, 32))
            assert compiled.asm["cubin"], name
            extra = f"  {resource_usage(compiled.asm['cubin'])}" if resources else ""
            print(f"{name} {constants}: sm_90 cubin {len(compiled.asm['cubin'])} bytes{extra}")


if __name__ == "__main__":
    main()
