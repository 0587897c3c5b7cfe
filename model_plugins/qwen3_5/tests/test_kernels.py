"""On a machine without CUDA, no advice to install Qwen3.5's CUDA kernels; one line says why (issue 53)."""

from __future__ import annotations

import subprocess
import sys

import pytest

# A fresh interpreter: transformers gives its advice once per process (warning_once), so a model run earlier in this
# test process would hide it either way.
_SCRIPT = """
import logging, torch
from transformers import Qwen3_5ForCausalLM
from swiftcore_plugin_qwen3_5 import plugin
from swiftcore_plugin_qwen3_5.tiny import tiny_qwen3_5_config

logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
torch.manual_seed(0)
model = Qwen3_5ForCausalLM(tiny_qwen3_5_config().text_config).eval()
with torch.no_grad():  # no post-load hook: export's parity check builds its model without one
    model(input_ids=torch.tensor([[1, 2, 3, 4, 5, 6]]))
    model(input_ids=torch.tensor([[1, 2, 3]]))
print("cuda", torch.cuda.is_available())
"""


@pytest.mark.slow
def test_no_cuda_kernel_advice_on_a_cpu() -> None:
    proc = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    if "cuda True" in proc.stdout:
        pytest.skip("CUDA is available here: the advice is kept")
    assert "is falling back to its reference PyTorch implementation" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.count("fast kernels (causal_conv1d, flash-linear-attention) need CUDA") == 1, proc.stderr
