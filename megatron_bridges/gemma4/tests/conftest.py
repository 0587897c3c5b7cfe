"""Tiny Gemma 4 checkpoints (made once per session) and their bridge.

Two checkpoints:

- ``gemma4_tiny``: ``swiftcore make-tiny gemma4`` (the multimodal ``Gemma4ForConditionalGeneration``:
  dense text decoder with per-layer inputs, sliding and full layers, vision and audio towers);
- ``gemma4_extras``: a text-only ``Gemma4ForCausalLM`` built from ``Gemma4TextConfig`` with every
  feature the default tiny model leaves off: KV sharing over the last two layers, ``attention_k_eq_v``,
  full layers with their own head size and kv-head count, a 4-token sliding window, double-wide MLPs,
  the MoE block, an untied head and a final logit soft-cap small enough to change the logits.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

S, F = "sliding_attention", "full_attention"

#: The extras model: layers 3 (sliding) and 4 (full) reuse the keys/values of layers 2 and 1.
EXTRAS: dict[str, Any] = dict(
    vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=5, layer_types=[S, F, S, S, F],
    num_attention_heads=4, num_key_value_heads=4, head_dim=32, global_head_dim=64, num_global_key_value_heads=2,
    attention_k_eq_v=True, num_kv_shared_layers=2, use_double_wide_mlp=True, enable_moe_block=True, num_experts=4,
    top_k_experts=2, moe_intermediate_size=32, vocab_size_per_layer_input=256, hidden_size_per_layer_input=16,
    sliding_window=4, final_logit_softcapping=0.5, tie_word_embeddings=False, max_position_embeddings=512,
    pad_token_id=0,
)


def _perturb(hf_dir: Path) -> None:
    """Randomise the tensors HF initialises to constants, so a swapped or dropped mapping cannot hide.

    Norms, layer scalars and the router's scales all start at 1 (q_norm and k_norm, or the many
    per-layer norms, would be interchangeable otherwise).
    """
    import torch
    from safetensors.torch import load_file, save_file

    path = hf_dir / "model.safetensors"
    tensors = load_file(path)
    gen = torch.Generator().manual_seed(7)
    towers = ("model.vision_tower.", "model.audio_tower.", "model.embed_vision.", "model.embed_audio.")
    for key, tensor in tensors.items():
        if not key.startswith(towers) and any(
            part in key for part in ("norm", "layer_scalar", "router.scale", "per_expert_scale")
        ):
            tensors[key] = tensor + 0.3 * torch.randn(tensor.shape, generator=gen)
    save_file(tensors, path, metadata={"format": "pt"})


@pytest.fixture(scope="session")
def gemma4_tiny(tiny_model_dir: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the session's ``make-tiny gemma4`` checkpoint (towers included) with randomised norms and scalars."""
    out = tmp_path_factory.mktemp("gemma4") / "tiny"
    shutil.copytree(tiny_model_dir("gemma4"), out)
    _perturb(out)
    return out


def build_extras(out: Path, **overrides: Any) -> Path:
    """Save a random ``Gemma4ForCausalLM`` of :data:`EXTRAS` (plus ``overrides``) to ``out``, perturbed."""
    import torch
    from transformers import Gemma4ForCausalLM, Gemma4TextConfig

    torch.manual_seed(0)
    Gemma4ForCausalLM(Gemma4TextConfig(**{**EXTRAS, **overrides})).save_pretrained(out)
    _perturb(out)
    return out


@pytest.fixture(scope="session")
def gemma4_extras(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The text-only checkpoint with KV sharing, k-eq-v, MoE, soft-cap ... (see the module docstring)."""
    return build_extras(tmp_path_factory.mktemp("gemma4_extras") / "tiny")


@pytest.fixture(scope="session")
def bridge_for() -> Callable[[dict[str, Any]], Any]:
    """``bridge_for(config)``: the installed bridge for a config.json dict, resolved as ``swiftcore export`` does."""
    from swiftcore_megatron import resolve_bridge

    from swiftcore import load_plugins

    plugins = load_plugins(["bridge_gemma4"])
    return lambda config: resolve_bridge(config, plugins)[1]


@pytest.fixture(scope="session")
def bridge(gemma4_tiny: Path, bridge_for: Callable[[dict[str, Any]], Any]) -> Any:
    """The bridge for :func:`gemma4_tiny`."""
    from swiftcore_megatron import read_hf_config

    return bridge_for(read_hf_config(gemma4_tiny))


@pytest.fixture(scope="session")
def extras_bridge(gemma4_extras: Path, bridge_for: Callable[[dict[str, Any]], Any]) -> Any:
    """The bridge for :func:`gemma4_extras`."""
    from swiftcore_megatron import read_hf_config

    return bridge_for(read_hf_config(gemma4_extras))


@pytest.fixture(scope="session")
def mcore_tp2(gemma4_tiny: Path, bridge: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """:func:`gemma4_tiny` converted at tensor parallel 2."""
    from swiftcore_megatron import hf_to_mcore

    out = tmp_path_factory.mktemp("gemma4_mcore") / "tp2"
    hf_to_mcore(gemma4_tiny, out, bridge, tp=2)
    return out


@pytest.fixture(scope="session")
def extras_mcore_tp2(gemma4_extras: Path, extras_bridge: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """:func:`gemma4_extras` converted at tensor parallel 2."""
    from swiftcore_megatron import hf_to_mcore

    out = tmp_path_factory.mktemp("gemma4_extras_mcore") / "tp2"
    hf_to_mcore(gemma4_extras, out, extras_bridge, tp=2)
    return out
