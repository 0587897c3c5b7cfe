"""Tiny GLM-5 config and tokenizer for tests and the demo (random weights, CPU-friendly).

The config keeps every feature of ``GlmMoeDsaConfig`` that GLM-5 uses: MLA attention (low-rank query and
key/value, a decoupled rotary slice), the DSA lightning indexer on every layer (``index_topk`` 16, so that
sequences longer than 16 tokens are really sparse), a dense first layer, then MoE layers with one shared
expert and 4 routed experts top-2 (sigmoid scores, correction bias, ``routed_scaling_factor``), so that TP 2
and EP 2 both divide it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from swiftcore_tiny import TinyFamily
    from transformers import GlmMoeDsaConfig

__all__ = ["SPECIAL_TOKENS", "tiny_family", "tiny_glm5_config", "tiny_glm5_tokenizer"]

#: GLM-4.5 / GLM-5's added tokens, in their real order (ids 151329.. in GLM-4.5; 0..n-1 here).
SPECIAL_TOKENS = (
    "<|endoftext|>",
    "[MASK]",
    "[gMASK]",
    "[sMASK]",
    "<sop>",
    "<eop>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|observation|>",
    "<|begin_of_image|>",
    "<|end_of_image|>",
    "<|begin_of_video|>",
    "<|end_of_video|>",
    "<|begin_of_audio|>",
    "<|end_of_audio|>",
    "<|begin_of_transcription|>",
    "<|end_of_transcription|>",
    "<|code_prefix|>",
    "<|code_middle|>",
    "<|code_suffix|>",
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<arg_key>",
    "</arg_key>",
    "<arg_value>",
    "</arg_value>",
    "/nothink",
    "<|begin_of_box|>",
    "<|end_of_box|>",
    "<|image|>",
    "<|video|>",
)
#: Added tokens the release does not mark special: decoding keeps them (reasoning and tool-call markup).
_NON_SPECIAL = ("<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
                "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "/nothink", "<|begin_of_box|>",
                "<|end_of_box|>")
#: Generation stops at the end of text, or where the next user turn or a tool result would start.
_STOPS = ("<|endoftext|>", "<|user|>", "<|observation|>")


def tiny_family() -> TinyFamily:
    """GLM-5's tiny checkpoint, as data (about 0.5 M parameters)."""
    # Built on call, not at import: swiftcore-tiny is the [tiny] extra, and the spec's references resolve without it.
    from swiftcore_tiny import VOCAB, TinyFamily, TokenId
    from transformers import GlmMoeDsaConfig

    return TinyFamily(
        config_class=GlmMoeDsaConfig,
        config={
            "vocab_size": VOCAB,
            "hidden_size": 128,
            "intermediate_size": 128,  # the dense layer's MLP
            "moe_intermediate_size": 32,  # each routed expert's and the shared expert's width
            "num_hidden_layers": 3,
            "first_k_dense_replace": 1,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
            "q_lora_rank": 64,
            "kv_lora_rank": 32,
            "qk_nope_head_dim": 32,
            "qk_rope_head_dim": 16,
            "v_head_dim": 32,
            "index_n_heads": 2,
            "index_head_dim": 32,
            "index_topk": 16,
            "n_routed_experts": 4,
            "num_experts_per_tok": 2,
            "n_shared_experts": 1,
            "n_group": 1,
            "topk_group": 1,
            "routed_scaling_factor": 2.5,
            "norm_topk_prob": True,
            "max_position_embeddings": 4096,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1_000_000.0},
            "tie_word_embeddings": False,
            # GLM's config names no BOS: the chat template writes [gMASK]<sop> itself.
            "bos_token_id": None,
            "eos_token_id": [TokenId(token) for token in _STOPS],
            "pad_token_id": TokenId("<|endoftext|>"),
        },
        special_tokens=SPECIAL_TOKENS,
        eos="<|endoftext|>",
        pad="<|endoftext|>",
        non_special=_NON_SPECIAL,
        chat_template="swiftcore_template_glm:official/glm5.jinja",
        style="bytelevel",
    )


def tiny_glm5_tokenizer(out_dir: str | Path) -> None:
    """Write the tiny GLM-5 tokenizer (byte-level BPE, GLM's added tokens, official chat template) to ``out_dir``."""
    tiny_family().write_tokenizer(out_dir)


def tiny_glm5_config(tokenizer: Any = None) -> GlmMoeDsaConfig:
    """The tiny ``GlmMoeDsaConfig``, its vocabulary and ids from ``tokenizer`` (None: the builder's layout)."""
    return tiny_family().make_config(tokenizer)
