"""Tiny DeepSeek-V4 config and tokenizer for tests and the demo (random weights, CPU-friendly).

Sizes follow notes/tiny_models.md: 4 routed experts top-2, head_dim 32, a small sparse-attention
indexer (2 heads of 16, top-8) and an 8-token sliding window, so short test sequences exercise it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from swiftcore_tiny import TinyFamily
    from transformers import DeepseekV4Config

__all__ = ["SPECIAL_TOKENS", "tiny_deepseek_v4_config", "tiny_deepseek_v4_tokenizer", "tiny_family"]

#: DeepSeek-V4's special tokens, as its encoding description names them (fullwidth bars and ▁).
SPECIAL_TOKENS = (
    "<｜begin▁of▁sentence｜>",
    "<｜end▁of▁sentence｜>",
    "<｜▁pad▁｜>",
    "<｜User｜>",
    "<｜Assistant｜>",
    "<｜latest_reminder｜>",
    "<｜action｜>",
    # Quick-instruction tokens of the encoding (the template may emit them).
    "<｜query｜>",
    "<｜authority｜>",
    "<｜domain｜>",
    "<｜title｜>",
    "<｜read_url｜>",
    "<think>",
    "</think>",
    "｜DSML｜",
    "<tool_result>",
    "</tool_result>",
)
# Reasoning and tool markup stay in decoded text, so parsers can find them.
_NON_SPECIAL = ("<think>", "</think>", "｜DSML｜", "<tool_result>", "</tool_result>")


def tiny_family() -> TinyFamily:
    """DeepSeek-V4's tiny checkpoint, as data (about 0.35 M parameters; no chat template: the release has none)."""
    # Built on call, not at import: swiftcore-tiny is the [tiny] extra, and the spec's references resolve without it.
    from swiftcore_tiny import VOCAB, TinyFamily, TokenId
    from transformers import DeepseekV4Config

    return TinyFamily(
        config_class=DeepseekV4Config,
        config={
            "vocab_size": VOCAB,
            "hidden_size": 64,
            "moe_intermediate_size": 32,
            "num_hidden_layers": 4,
            "num_attention_heads": 4,
            "head_dim": 32,
            "q_lora_rank": 32,
            "n_routed_experts": 4,
            "num_experts_per_tok": 2,
            "o_groups": 2,
            "o_lora_rank": 32,
            "index_n_heads": 2,
            "index_head_dim": 16,
            "index_topk": 8,
            "sliding_window": 8,
            "max_position_embeddings": 4096,
            "bos_token_id": TokenId("<｜begin▁of▁sentence｜>"),
            "eos_token_id": TokenId("<｜end▁of▁sentence｜>"),
            "pad_token_id": TokenId("<｜▁pad▁｜>"),
        },
        special_tokens=SPECIAL_TOKENS,
        bos="<｜begin▁of▁sentence｜>",
        eos="<｜end▁of▁sentence｜>",
        pad="<｜▁pad▁｜>",
        non_special=_NON_SPECIAL,
        style="bytelevel",
    )


def tiny_deepseek_v4_tokenizer(out_dir: str | Path) -> None:
    """Write the tiny DeepSeek-V4 tokenizer (byte-level BPE, the encoding's special tokens) to ``out_dir``."""
    tiny_family().write_tokenizer(out_dir)


def tiny_deepseek_v4_config(tokenizer: Any = None) -> DeepseekV4Config:
    """The tiny ``DeepseekV4Config``, its vocabulary and ids from ``tokenizer`` (None: the builder's layout)."""
    return tiny_family().make_config(tokenizer)
