"""Tiny DeepSeek-V4 config and tokenizer for tests and the demo (random weights, CPU-friendly).

Sizes follow notes/tiny_models.md: 4 routed experts top-2, head_dim 32, a small sparse-attention
indexer (2 heads of 16, top-8) and an 8-token sliding window, so short test sequences exercise it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["SPECIAL_TOKENS", "tiny_deepseek_v4_config", "tiny_deepseek_v4_tokenizer"]

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
VOCAB_SIZE = 512


def tiny_deepseek_v4_tokenizer(out_dir: str | Path) -> None:
    """Write a tiny DeepSeek-V4 tokenizer to ``out_dir`` (no chat template: the release has none).

    Args:
        out_dir: the checkpoint directory being written.
    """
    from swiftcore_tiny import build_tiny_tokenizer

    build_tiny_tokenizer(
        out_dir,
        special_tokens=SPECIAL_TOKENS,
        bos="<｜begin▁of▁sentence｜>",
        eos="<｜end▁of▁sentence｜>",
        pad="<｜▁pad▁｜>",
        non_special=_NON_SPECIAL,
        style="bytelevel",
        vocab_size=VOCAB_SIZE,
    )


def tiny_deepseek_v4_config(tokenizer: Any = None) -> Any:
    """A tiny ``DeepseekV4Config`` (about 0.35 M parameters) matching ``tokenizer``'s vocabulary and ids.

    Args:
        tokenizer: the tiny tokenizer; None uses the builder's layout.
    """
    from transformers import DeepseekV4Config

    if tokenizer is None:
        ids = {token: i for i, token in enumerate(SPECIAL_TOKENS)}
        vocab = VOCAB_SIZE
    else:
        ids = {token: tokenizer.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS}
        vocab = len(tokenizer)
    return DeepseekV4Config(
        vocab_size=vocab,
        hidden_size=64,
        moe_intermediate_size=32,
        num_hidden_layers=4,
        num_attention_heads=4,
        head_dim=32,
        q_lora_rank=32,
        n_routed_experts=4,
        num_experts_per_tok=2,
        o_groups=2,
        o_lora_rank=32,
        index_n_heads=2,
        index_head_dim=16,
        index_topk=8,
        sliding_window=8,
        max_position_embeddings=4096,
        bos_token_id=ids["<｜begin▁of▁sentence｜>"],
        eos_token_id=ids["<｜end▁of▁sentence｜>"],
        pad_token_id=ids["<｜▁pad▁｜>"],
    )
