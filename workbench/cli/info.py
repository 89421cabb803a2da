"""``workbench info``: the device, the versions and which force paths are available."""

from __future__ import annotations

import platform

import torch

from workbench.cli.output import summary_table
from workbench.cli.parser import command_parser


def add_parser(subparsers) -> None:
    """``workbench info``."""
    command_parser(subparsers, "info", "device, versions and available paths").set_defaults(
        execute=execute
    )


def _version(module: str) -> str:
    try:
        mod = __import__(module)
    except ImportError:
        return "not installed"
    return getattr(mod, "__version__", "installed")


def execute(args) -> int:
    """Body of ``workbench info``."""
    from kernels import triton_available

    cuda = torch.cuda.is_available()
    rows = [
        ("python", platform.python_version()),
        ("torch", torch.__version__),
        ("triton", _version("triton")),
        ("numpy", _version("numpy")),
        ("mdtraj", _version("mdtraj")),
        ("device", torch.cuda.get_device_name(0) if cuda else "CPU only (no CUDA GPU found)"),
        ("reference path", "available (PyTorch)"),
        ("fused Triton path", "available" if triton_available() else "unavailable (needs a GPU)"),
    ]
    print(summary_table(rows))
    return 0

