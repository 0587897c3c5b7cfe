"""LoRA / full tuning of a head model's decoder, with the model spec's targets and exclusions.

Why not :func:`swiftcore_train.tuners.apply_tuner` as is: it wraps the model in peft's causal-LM
wrapper, which needs ``prepare_inputs_for_generation``; a bare decoder (``*TextModel``) has none. The
LoRA config is the same (:func:`swiftcore_train.tuners.lora_config`), with peft's generic wrapper.
"""

from __future__ import annotations

from typing import Any

__all__ = ["apply_head_tuner"]


def apply_head_tuner(decoder: Any, spec: Any, cfg: Any) -> tuple[Any, Any]:
    """Make ``decoder`` trainable as ``cfg.tuner`` says.

    Args:
        decoder: the backbone's text model.
        spec: its :class:`~swiftcore.specs.ModelSpec` (LoRA targets and exclusions).
        cfg: the :class:`~swiftcore_train.config.TrainConfig`.

    Returns:
        ``(decoder, peft_model)``: the decoder to call (LoRA layers injected in place) and the peft
        wrapper (None for full tuning), kept to merge the adapter when saving.
    """
    if cfg.tuner == "full":
        return decoder, None
    from peft import get_peft_model
    from swiftcore_train import lora_config

    # With the decoder given, ``all-linear`` is resolved as for SFT: routers never adapted, fused experts adapted.
    peft_model = get_peft_model(decoder, lora_config(spec, cfg, task_type=None, model=decoder))
    return peft_model.get_base_model(), peft_model
