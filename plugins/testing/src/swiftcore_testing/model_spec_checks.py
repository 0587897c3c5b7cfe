"""Checks a model plugin's spec must pass on a real (tiny) model: shared by every plugin's tests (the model
plugins' own tests and the contract's ``model-make-tiny-loads`` rule, :mod:`swiftcore_testing.model_checks`).

Each check returns a list of problems (empty when all is well), so a test can assert on it and a
contract runner can report every problem at once. Importing this module imports no torch or transformers.
"""

from __future__ import annotations

import math
import re
from typing import Any

__all__ = ["forward_backward", "lora_exclude_problems", "part_problems", "special_token_problems"]


def part_problems(model: Any, spec: Any) -> list[str]:
    """Every prefix in ``spec.parts`` must name a module of ``model``; language model parts must be non-empty."""
    names = {name for name, _ in model.named_modules()}
    problems = []
    for part in ("language_model", "vision_tower", "audio_tower", "projector", "lm_head"):
        for prefix in getattr(spec.parts, part):
            if prefix not in names:
                problems.append(f"parts.{part}: {prefix!r} is not a module of {type(model).__name__}")
    if not spec.parts.language_model:
        problems.append("parts.language_model is empty")
    modalities = set(spec.modalities)
    if "image" in modalities and not spec.parts.vision_tower:
        problems.append("the model takes images but parts.vision_tower is empty")
    if "audio" in modalities and not spec.parts.audio_tower:
        problems.append("the model takes audio but parts.audio_tower is empty")
    return problems


def lora_exclude_problems(model: Any, spec: Any) -> list[str]:
    """Each ``lora_exclude_modules`` regex must full-match some module, and none may exclude the decoder's attention."""
    names = [name for name, _ in model.named_modules() if name]
    problems = []
    patterns = []
    for pattern in spec.lora_exclude_modules:
        try:
            compiled = re.compile(pattern)
        except re.error as exc:
            problems.append(f"lora_exclude_modules: {pattern!r} is not a regex: {exc}")
            continue
        patterns.append(compiled)
        if not any(compiled.fullmatch(name) for name in names):
            problems.append(f"lora_exclude_modules: {pattern!r} matches no module of {type(model).__name__}")
    decoder = tuple(spec.parts.language_model)
    attention = [n for n in names if n.startswith(decoder) and n.endswith(("q_proj", "o_proj", "q_a_proj"))]
    if not attention:
        problems.append(f"no attention projection found under {decoder!r}; check parts.language_model")
    excluded = [n for n in attention if any(p.fullmatch(n) for p in patterns)]
    if excluded:
        problems.append(f"lora_exclude_modules exclude the decoder's attention, e.g. {excluded[0]!r}")
    return problems


def special_token_problems(config: Any, tokenizer: Any) -> list[str]:
    """The config's vocabulary must cover the tokenizer, and its ``*_token_id`` fields must be real tokens."""
    problems = []
    text_config = config.get_text_config()
    if text_config.vocab_size < len(tokenizer):
        problems.append(f"vocab_size {text_config.vocab_size} < tokenizer size {len(tokenizer)}")
    for cfg in {id(config): config, id(text_config): text_config}.values():
        for key, value in cfg.to_dict().items():
            if not key.endswith(("_token_id", "_token_index")) or value is None:
                continue
            for token_id in value if isinstance(value, (list, tuple)) else [value]:
                if not 0 <= token_id < len(tokenizer):
                    problems.append(f"{key}={token_id} is outside the tokenizer's {len(tokenizer)} tokens")
    return problems


def forward_backward(model: Any, input_ids: Any, **inputs: Any) -> float:
    """Run one training step's forward and backward pass; return the loss.

    Raises:
        AssertionError: the loss is not finite, or no parameter received a finite, non-zero gradient.
    """
    model.train()
    model.zero_grad(set_to_none=True)
    out = model(input_ids=input_ids, labels=input_ids, **inputs)
    loss = out.loss
    if not math.isfinite(loss.item()):
        raise AssertionError(f"loss is not finite: {loss.item()}")
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not grads or not all(g.isfinite().all() for g in grads) or not any(g.abs().sum() > 0 for g in grads):
        raise AssertionError("backward produced no finite, non-zero gradients")
    return float(loss.item())
