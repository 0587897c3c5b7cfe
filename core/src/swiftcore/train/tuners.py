"""Tuners: full fine-tuning or LoRA (peft), with the model spec deciding what is frozen and what LoRA skips."""

from __future__ import annotations

import logging
import re
from typing import Any

from swiftcore.specs import ModelSpec
from swiftcore.train.config import TrainConfig

__all__ = ["apply_tuner", "freeze_parts", "lora_config", "trainable_summary"]

log = logging.getLogger("swiftcore.train")


def _matches(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def freeze_parts(model: Any, spec: ModelSpec, cfg: TrainConfig) -> list[str]:
    """Freeze the vision tower / audio tower / projector as the flags ask; returns the frozen prefixes."""
    frozen: list[str] = []
    for flag, prefixes in (
        (cfg.freeze_vision, spec.parts.vision_tower),
        (cfg.freeze_audio, spec.parts.audio_tower),
        (cfg.freeze_projector, spec.parts.projector),
    ):
        if flag and prefixes:
            frozen.extend(prefixes)
    if frozen:
        for name, param in model.named_parameters():
            if _matches(name, tuple(frozen)):
                param.requires_grad_(False)
    return frozen


def _lora_exclude_regex(spec: ModelSpec, cfg: TrainConfig) -> str | None:
    patterns = list(spec.lora_exclude_modules)
    # Frozen towers stay out of LoRA too: adapters on a frozen encoder would train it after all.
    for flag, prefixes in (
        (cfg.freeze_vision, spec.parts.vision_tower),
        (cfg.freeze_audio, spec.parts.audio_tower),
        (cfg.freeze_projector, spec.parts.projector),
    ):
        if flag:
            patterns.extend(re.escape(p) + r"(\..*)?" for p in prefixes)
    patterns.extend(re.escape(p) + r"(\..*)?" for p in spec.parts.lm_head)
    if not patterns:
        return None
    return r"^(" + "|".join(f"(?:{p})" for p in patterns) + r")$"


def lora_config(spec: ModelSpec, cfg: TrainConfig, *, task_type: str | None = "CAUSAL_LM") -> Any:
    """The peft ``LoraConfig`` for ``spec`` under ``cfg``: rank, alpha, targets, and the spec's exclusions.

    Args:
        spec: the model spec (default targets, modules kept out of LoRA, frozen parts).
        cfg: the training config (rank, alpha, dropout, ``--target-modules``, freeze flags).
        task_type: peft's task type; None for a bare decoder wrapped by a head (no generation wrapper).
    """
    from peft import LoraConfig

    targets = cfg.target_modules or spec.lora_target_modules
    target: str | list[str] = "all-linear" if tuple(targets) == ("all-linear",) else list(targets)
    return LoraConfig(
        r=cfg.lora_rank,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=target,
        exclude_modules=_lora_exclude_regex(spec, cfg),
        task_type=task_type,
    )


def apply_tuner(model: Any, spec: ModelSpec, cfg: TrainConfig) -> Any:
    """Return the model ready to train: parts frozen per flags; wrapped in a peft LoRA model for ``lora``."""
    freeze_parts(model, spec, cfg)
    if cfg.tuner == "full":
        return model
    from peft import get_peft_model

    return get_peft_model(model, lora_config(spec, cfg))


def trainable_summary(model: Any) -> str:
    """``trainable 1,234 / 56,789 parameters (2.17%)``."""
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return f"trainable {trainable:,} / {total:,} parameters ({100.0 * trainable / max(total, 1):.2f}%)"
