"""Tiny random HF checkpoints (built once per session with transformers) for the GPT bridge tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

#: The shapes the issue asks for: hidden 64, 2 layers, 4 heads / 2 kv heads, head_dim 32, vocab 256.
COMMON: dict[str, Any] = dict(
    hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
    vocab_size=256, intermediate_size=128,
)
MOE: dict[str, Any] = dict(moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2)

#: name -> (transformers config class, model class, config kwargs)
TINY: dict[str, tuple[str, str, dict[str, Any]]] = {
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {}),
    "qwen3_tied": ("Qwen3Config", "Qwen3ForCausalLM", {"tie_word_embeddings": True, "rope_theta": 500000.0}),
    "llama": ("LlamaConfig", "LlamaForCausalLM", {"rms_norm_eps": 1e-5}),
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", {**MOE, "norm_topk_prob": True}),
    # First layer dense (mlp_only_layers), softmax-then-top-k routing (norm_topk_prob False).
    "qwen3_moe_mixed": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", {**MOE, "norm_topk_prob": False,
                                                                 "mlp_only_layers": [0]}),
    # MLA + sigmoid group-top-k MoE with a shared expert; layer 0 dense. head_dim is the rope part in HF.
    "deepseek_v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM", {
        "num_key_value_heads": 4, "head_dim": 16, "moe_intermediate_size": 32, "n_routed_experts": 4,
        "n_shared_experts": 1, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1, "first_k_dense_replace": 1,
        "kv_lora_rank": 32, "q_lora_rank": 48, "qk_rope_head_dim": 16, "qk_nope_head_dim": 32, "v_head_dim": 32,
    }),
}


def _build_tiny(name: str, out: Path, *, dtype: str = "float32", max_shard_size: str | None = None) -> Path:
    """Save a random-init tiny model ``name`` (see :data:`TINY`) with save_pretrained."""
    import torch
    import transformers

    config_cls, model_cls, extra = TINY[name]
    config = getattr(transformers, config_cls)(**{**COMMON, **extra})
    torch.manual_seed(sum(map(ord, name)))
    model = getattr(transformers, model_cls)(config).to(getattr(torch, dtype))
    # Norm weights start at 1.0 and router biases at 0.0 in HF init: randomise them so a swapped or
    # dropped mapping cannot hide.
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if "norm" in pname:
                p.add_(torch.randn_like(p) * 0.1)
        for bname, b in model.named_buffers():
            if "e_score_correction_bias" in bname:
                b.copy_(torch.randn_like(b) * 0.1)
    kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
    model.save_pretrained(out, **kwargs)
    return out


@pytest.fixture(scope="session")
def build_tiny() -> Callable[..., Path]:
    """``build_tiny(name, out, dtype=..., max_shard_size=...)``: a fresh tiny checkpoint (not cached)."""
    return _build_tiny


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``tiny(name)`` -> the directory of that tiny checkpoint, built on first use and kept for the session."""
    built: dict[str, Path] = {}
    root = tmp_path_factory.mktemp("tiny_gpt")

    def get(name: str) -> Path:
        if name not in built:
            built[name] = _build_tiny(name, root / name)
        return built[name]

    return get


@pytest.fixture(scope="session")
def bridge_for() -> Callable[[Path], Any]:
    """``bridge_for(hf_dir)``: the installed bridge resolved from the directory's config.json."""
    from swiftcore_megatron import read_hf_config, resolve_bridge

    from swiftcore import load_plugins

    plugins = load_plugins(["bridge_gpt"])
    return lambda hf_dir: resolve_bridge(read_hf_config(hf_dir), plugins)[1]
