"""Write a multimodal processor's ``processor_config.json`` for tiny checkpoints.

transformers' composite processors (``Gemma4Processor``, ``Qwen3VLProcessor``, ...) insist on a video
processor, and video processors need torchvision, which a CPU-only environment cannot have (see
notes/vllm_cpu.md). So tiny checkpoints save the parts that do not need it (image processor, audio
feature extractor) in the same composite file ``ProcessorMixin.save_pretrained`` writes, with
each part serialized by its own ``to_dict()``. ``AutoImageProcessor`` and
``AutoFeatureExtractor`` read their part from it; vLLM finds the processor settings there.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["PROCESSOR_CONFIG", "save_processor_config"]

PROCESSOR_CONFIG = "processor_config.json"


def save_processor_config(out_dir: str | Path, processor_class: str, parts: Mapping[str, Any], **settings: Any) -> Path:
    """Write ``out_dir/processor_config.json`` as ``ProcessorMixin.save_pretrained`` lays it out.

    Args:
        out_dir: the checkpoint directory.
        processor_class: the transformers processor class name, e.g. ``"Gemma4Processor"``.
        parts: attribute name -> sub-processor, e.g. ``{"image_processor": Gemma4ImageProcessorPil()}``.
        **settings: the processor's own settings (e.g. ``image_seq_length=280``).

    Returns:
        The path written.
    """
    config: dict[str, Any] = {name: part.to_dict() for name, part in parts.items()}
    config.update(settings)
    config["processor_class"] = processor_class
    path = Path(out_dir) / PROCESSOR_CONFIG
    path.write_text(json.dumps(_plain(config), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def _plain(value: Any) -> Any:
    """numpy arrays and tuples inside sub-processor dicts -> lists, so the file is plain JSON."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "tolist"):
        return value.tolist()
    return value
