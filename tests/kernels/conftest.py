"""Kernel tests: the Triton kernels run under the interpreter when no CUDA device exists
(``TRITON_INTERPRET`` is set by the root ``tests/conftest.py``, before Triton is imported).
Full-size tests are marked ``gpu`` and skipped without CUDA.
"""

import os

import pytest
import torch

from kernels import triton_available


def pytest_collection_modifyitems(config, items):
    here = os.path.dirname(__file__)
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    skip_triton = pytest.mark.skip(
        reason="Triton cannot run: not installed, or imported before TRITON_INTERPRET was set")
    for item in items:
        if not str(item.fspath).startswith(here):
            continue
        if "gpu" in item.keywords and not torch.cuda.is_available():
            item.add_marker(skip_gpu)
        elif not triton_available():
            item.add_marker(skip_triton)


@pytest.fixture
def device():
    return "cuda" if torch.cuda.is_available() else "cpu"
