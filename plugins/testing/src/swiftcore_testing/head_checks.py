"""The head contract, generic over :class:`~swiftcore.api.HeadSpec`.

A head's ``factory`` is called as ``factory(backbone, spec=spec)`` on a loaded tiny backbone and must
return a ``torch.nn.Module`` whose forward takes ``input_ids`` and ``attention_mask`` and returns a
tensor (or an output with ``logits`` / ``embeddings`` / ``pooler_output``) with one row per input, and
which has ``save_pretrained(dir)``; ``factory.from_pretrained(dir)`` (or the module class's) loads it back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["head_outputs", "pooled_shape_problems", "save_load_problems"]


def _pooled(output: Any) -> Any:
    for attr in ("embeddings", "pooler_output", "logits"):
        value = getattr(output, attr, None)
        if value is not None:
            return value
    return output


def head_outputs(head: Any, input_ids: Any, attention_mask: Any) -> Any:
    """The head's pooled output for one batch (no gradients)."""
    import torch

    head.eval()
    with torch.no_grad():
        return _pooled(head(input_ids=input_ids, attention_mask=attention_mask))


def pooled_shape_problems(head: Any, input_ids: Any, attention_mask: Any) -> list[str]:
    """One pooled row per input, finite values."""
    pooled = head_outputs(head, input_ids, attention_mask)
    problems = []
    if getattr(pooled, "shape", None) is None or pooled.shape[0] != input_ids.shape[0]:
        problems.append(
            f"pooled output shape {getattr(pooled, 'shape', None)} has not one row per input ({input_ids.shape[0]})"
        )
    elif not pooled.isfinite().all():
        problems.append("pooled output is not finite")
    return problems


def save_load_problems(head: Any, factory: Any, input_ids: Any, attention_mask: Any, out_dir: Path) -> list[str]:
    """``save_pretrained`` then ``from_pretrained`` must reproduce the outputs."""
    head.save_pretrained(str(out_dir))
    loader = getattr(factory, "from_pretrained", None) or getattr(type(head), "from_pretrained", None)
    if loader is None:
        return ["neither the factory nor the head class has from_pretrained"]
    again = loader(str(out_dir))
    before, after = head_outputs(head, input_ids, attention_mask), head_outputs(again, input_ids, attention_mask)
    if before.shape != after.shape or not before.allclose(after, atol=1e-5):
        return ["outputs after save_pretrained/from_pretrained differ from before"]
    return []


#: ``HeadSpec.saved_as`` value -> what a directory in that format holds, as its ecosystem's loader reads it.
_FORMAT_MARKS = {
    "sentence-transformers": ("modules.json", None),
    "transformers-sequence-classification": ("config.json", "ForSequenceClassification"),
    "transformers-causal-lm": ("config.json", "ForCausalLM"),
}


def saved_format_problems(out_dir: Path, saved_as: str | None) -> list[str]:
    """A head saved by ``save_pretrained`` is in the format its spec's ``saved_as`` promises: sentence-transformers'
    ``modules.json``, or a ``config.json`` whose architecture is transformers' class of that kind. A format the
    kit does not know (or None) is not checked."""
    import json

    if saved_as not in _FORMAT_MARKS:
        return []
    file, suffix = _FORMAT_MARKS[saved_as]
    path = out_dir / file
    if not path.is_file():
        return [f"HeadSpec.saved_as is {saved_as!r}, but the saved head has no {file} (its ecosystem cannot load it)"]
    if suffix is None:
        return []
    architectures = json.loads(path.read_text(encoding="utf-8")).get("architectures") or []
    if not any(str(a).endswith(suffix) for a in architectures):
        return [
            f"HeadSpec.saved_as is {saved_as!r}, but the saved config.json names architectures {architectures}, "
            f"no transformers *{suffix} class: AutoModel{suffix} would not load it"
        ]
    return []
