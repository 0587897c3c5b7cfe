"""Qwen3.5's linear-attention kernels on a machine without CUDA: one line saying so, instead of install advice.

transformers 5.19 logs, at the first forward, that ``causal_conv1d_fn`` and ``chunk_gated_delta_rule`` fall back to
their PyTorch references because ``causal_conv1d`` / ``flash-linear-attention`` are not installed, and advises
installing them. Both are CUDA kernels: on a CPU there is nothing to install, so the advice misleads (issue 53). The
filter :func:`quiet_kernel_advice` puts on transformers' logger drops those records when CUDA is not available and
says once why; with CUDA the advice stays (there the kernels are an order of magnitude faster). It is installed when
the plugin is imported, so every command that runs a Qwen3.5 forward has it (training, serving, export's parity
check); it imports nothing: torch is already loaded when transformers logs from a forward.

When it can be removed: once transformers gives that advice only where the kernels can run.
"""

from __future__ import annotations

import logging

__all__ = ["ADVICE", "KERNEL_LOGGER", "quiet_kernel_advice"]

logger = logging.getLogger("swiftcore.plugins.qwen3_5")

#: The logger of transformers' kernel fallbacks, and the words of its advice.
KERNEL_LOGGER = "transformers.integrations.hub_kernels"
ADVICE = "is falling back to its reference PyTorch implementation"


class _NoCpuKernelAdvice(logging.Filter):
    explained = False

    def filter(self, record: logging.LogRecord) -> bool:
        if ADVICE not in record.getMessage():
            return True
        import torch  # already imported: transformers logs this from a model's forward

        if torch.cuda.is_available():
            return True
        if not self.explained:
            self.explained = True
            logger.info(
                "qwen3_5: linear attention runs on transformers' PyTorch reference path; its fast kernels "
                "(causal_conv1d, flash-linear-attention) need CUDA, so there is nothing to install on this machine"
            )
        return False


_FILTER = _NoCpuKernelAdvice()


def quiet_kernel_advice() -> None:
    """Put the filter on transformers' kernel logger (once; importing this plugin does it)."""
    kernels = logging.getLogger(KERNEL_LOGGER)
    if _FILTER not in kernels.filters:
        kernels.addFilter(_FILTER)
