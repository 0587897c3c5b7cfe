"""The bridge contract: HF -> Megatron-core -> HF round trip and logit parity on a tiny checkpoint.

The tiny HF checkpoint of a bridged ``model_type`` comes from a loaded model spec's ``make_tiny`` when
one claims that type, else from transformers' own config class shrunk with :data:`TINY_SIZES`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["TINY_SIZES", "round_trip_problems", "parity_problems", "tiny_hf_checkpoint"]

#: Sizes that shrink transformers' decoder configs (keys a config does not use are ignored by the model).
TINY_SIZES: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "moe_intermediate_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "vocab_size": 256,
    "num_experts": 4,
    "num_experts_per_tok": 2,
}


def tiny_hf_checkpoint(model_type: str, out_dir: Path, plugins: Any, overrides: dict[str, Any] | None = None) -> Path:
    """A tiny random HF checkpoint of ``model_type`` in ``out_dir``.

    Args:
        model_type: the HF ``model_type`` a bridge converts.
        out_dir: where to write it.
        plugins: the loaded plugins (a model spec claiming ``model_type`` is used first).
        overrides: config values on top of :data:`TINY_SIZES` (only for the transformers fallback).
    """
    from swiftcore.api.models import make_tiny

    for spec in plugins.registry.all("model"):
        if model_type in spec.model_types and spec.tiny_config:
            return make_tiny(spec, out_dir, seed=0)
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(model_type, **{**TINY_SIZES, **(overrides or {})})
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).to(torch.float32)
    # Norms start at exactly 1: perturb them so a dropped or swapped norm mapping cannot pass parity.
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.add_(torch.randn_like(param) * 0.1)
    model.save_pretrained(str(out_dir))
    return out_dir


def _bridge(spec: Any, hf_dir: Path) -> Any:
    from swiftcore_megatron.resolve import make_bridge, read_hf_config

    return make_bridge(spec, read_hf_config(hf_dir))


def round_trip_problems(spec: Any, hf_dir: Path, work: Path) -> list[str]:
    """Convert ``hf_dir`` to Megatron-core and back; every tensor must come back bit-exact."""
    from safetensors.torch import load_file
    from swiftcore_megatron.convert import hf_to_mcore, mcore_to_hf

    bridge = _bridge(spec, hf_dir)
    hf_to_mcore(hf_dir, work / "mcore", bridge, bridge_name=spec.name)
    mcore_to_hf(work / "mcore", work / "back", bridge)
    before = {k: v for f in sorted(hf_dir.glob("*.safetensors")) for k, v in load_file(f).items()}
    after = {k: v for f in sorted((work / "back").glob("*.safetensors")) for k, v in load_file(f).items()}
    problems = []
    if sorted(before) != sorted(after):
        problems.append(
            f"tensor names differ: lost {sorted(set(before) - set(after))[:5]}, "
            f"gained {sorted(set(after) - set(before))[:5]}"
        )
    problems.extend(
        f"{k} changed in the round trip" for k in sorted(set(before) & set(after)) if not before[k].equal(after[k])
    )
    return problems


def parity_problems(spec: Any, hf_dir: Path, work: Path) -> list[str]:
    """The Megatron-core model built by the bridge must give transformers' logits (float32, TP 1)."""
    from swiftcore_megatron.convert import hf_to_mcore, load_mcore_state
    from swiftcore_megatron.parity import check_parity

    bridge = _bridge(spec, hf_dir)
    mcore = work / "mcore-parity"
    hf_to_mcore(hf_dir, mcore, bridge, bridge_name=spec.name)
    report = check_parity(hf_dir, bridge, load_mcore_state(mcore, bridge))
    return [] if report.ok else [f"logits differ: {report}"]
