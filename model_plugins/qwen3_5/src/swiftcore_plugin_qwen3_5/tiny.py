"""Tiny Qwen3.5 configs and tokenizer for tests and the demo (random weights, CPU-friendly).

Sizes follow the shared notes (notes/tiny_models.md, notes/vllm_cpu.md): attention head_dim 32 and
linear-attention key/value head dim 64, the smallest sizes vLLM's CPU kernels accept.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from swiftcore_tiny import TinyFamily
    from transformers import Qwen3_5Config, Qwen3_5MoeConfig

__all__ = [
    "SPECIAL_TOKENS",
    "tiny_family",
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


def tiny_family(moe: bool = False) -> TinyFamily:
    """Qwen3.5's tiny checkpoint, as data: dense (about 0.6 M parameters) or MoE (4 routed experts, top-2, one shared).

    Args:
        moe: describe ``Qwen3_5MoeConfig``'s checkpoint instead of ``Qwen3_5Config``'s (same tokenizer and processor).
    """
    # Built on call, not at import: swiftcore-tiny is the [tiny] extra, and the spec's references resolve without it.
    from swiftcore_tiny import VOCAB, TinyFamily, TinyProcessor, TokenId
    from transformers import Qwen2VLImageProcessorPil, Qwen3_5Config, Qwen3_5MoeConfig
    from transformers.models.qwen3_5.tokenization_qwen3_5 import PRETOKENIZE_REGEX

    text: dict[str, Any] = {
        "vocab_size": VOCAB,
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
        "eos_token_id": TokenId("<|im_end|>"),
        "pad_token_id": TokenId("<|endoftext|>"),
    }
    if moe:
        text.update(moe_intermediate_size=32, shared_expert_intermediate_size=32, num_experts=4, num_experts_per_tok=2)
    else:
        text.update(intermediate_size=128)
    vision = {
        "depth": 1,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_heads": 2,
        "out_hidden_size": 64,  # the text hidden size
        "patch_size": 16,
        "temporal_patch_size": 2,
        "spatial_merge_size": 2,
    }
    # The PIL image processor (no torchvision needed) with Qwen3.5's released settings; the video
    # processor needs torchvision, so it is left out (see swiftcore_tiny.processor).
    image_processor = Qwen2VLImageProcessorPil(
        patch_size=16, temporal_patch_size=2, merge_size=2, image_mean=[0.5] * 3, image_std=[0.5] * 3
    )
    return TinyFamily(
        config_class=Qwen3_5MoeConfig if moe else Qwen3_5Config,
        config={
            "text_config": text,
            "vision_config": vision,
            "image_token_id": TokenId("<|image_pad|>"),
            "video_token_id": TokenId("<|video_pad|>"),
            "vision_start_token_id": TokenId("<|vision_start|>"),
            "vision_end_token_id": TokenId("<|vision_end|>"),
        },
        special_tokens=SPECIAL_TOKENS,
        eos="<|im_end|>",
        pad="<|endoftext|>",
        non_special=_NON_SPECIAL,
        named_tokens=_NAMED,
        chat_template="swiftcore_template_qwen:official/qwen3_5.jinja",
        # Qwen3.5's layout: NFC, its split regex (transformers' own, so the layout cannot drift from
        # the Qwen3_5Tokenizer that AutoTokenizer rebuilds), byte-level without regex.
        style="split_bytelevel",
        split_regex=PRETOKENIZE_REGEX,
        tokenizer_class="Qwen3_5Tokenizer",
        processor=TinyProcessor("Qwen3VLProcessor", {"image_processor": image_processor}),
    )


def tiny_qwen3_5_tokenizer(out_dir: str | Path) -> None:
    """Write the tiny Qwen3.5 tokenizer (official chat template) and image processor to ``out_dir``."""
    tiny_family().write_tokenizer(out_dir)


def tiny_qwen3_5_config(tokenizer: Any = None) -> Qwen3_5Config:
    """The tiny ``Qwen3_5Config``, its vocabulary and ids from ``tokenizer`` (None: the builder's layout)."""
    return tiny_family().make_config(tokenizer)


def tiny_qwen3_5_moe_config(tokenizer: Any = None) -> Qwen3_5MoeConfig:
    """The tiny ``Qwen3_5MoeConfig``, its vocabulary and ids from ``tokenizer`` (None: the builder's layout)."""
    return tiny_family(moe=True).make_config(tokenizer)
