"""Test-session set-up shared by every folder.

Without a CUDA device the Triton kernels run under the interpreter, which must be
switched on before Triton is first imported; this file is imported before any test
module, so it is set here.
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
