"""The op registry: every op has a Triton and a reference implementation, same signature."""

import inspect

import kernels
from kernels import OPS, get_op, triton_available


def test_registry_pairs_have_same_signature():
    assert set(OPS) >= {"build_csr", "radial_basis", "segment_sum", "edge_grad_to_positions",
                        "cfconv", "linear", "tanh_linear"}
    for op in OPS.values():
        a = list(inspect.signature(op.triton).parameters)
        b = list(inspect.signature(op.reference).parameters)
        assert a == b, op.name


def test_get_op():
    assert triton_available()
    assert get_op("cfconv") is kernels.cfconv
    assert get_op("cfconv", use_triton=False) is OPS["cfconv"].reference


def test_kernels_never_imports_workbench():
    import pathlib

    for path in pathlib.Path(kernels.__file__).parent.glob("*.py"):
        for line in path.read_text().splitlines():
            words = line.split()
            assert not (words[:1] in (["import"], ["from"]) and "workbench" in line), path
