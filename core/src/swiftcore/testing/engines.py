"""Test helpers for inference backends: a tiny generic Qwen3 checkpoint, a trained LoRA adapter, a server thread.

The public home of :mod:`swiftcore.infer.testing` for plugins' tests (plugins import ``swiftcore.api`` and
``swiftcore.testing`` only); the code moves here when the inference engine leaves the core.
"""

from __future__ import annotations

from swiftcore.infer.testing import (
    TINY_QWEN3,
    ServerThread,
    make_tiny_qwen3,
    plugins_with_tiny_qwen3,
    train_tiny_lora,
)

__all__ = ["TINY_QWEN3", "ServerThread", "make_tiny_qwen3", "plugins_with_tiny_qwen3", "train_tiny_lora"]
