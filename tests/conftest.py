"""Shared fixtures of the test suite."""
from __future__ import annotations

import pytest
import torch

# ---------------------------------------------------------------------------------------------
# Devices (issue 30 part 4): a kernel test that takes a ``device`` argument runs on the CPU and, where torch
# sees a GPU, on it too; the GPU cases carry "cuda" in their test id, so `pytest -k cuda` selects them all
# (what `make bench-gpu` runs first).
# ---------------------------------------------------------------------------------------------
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    """``"cpu"``, then ``"cuda"`` when torch sees a GPU."""
    return request.param
