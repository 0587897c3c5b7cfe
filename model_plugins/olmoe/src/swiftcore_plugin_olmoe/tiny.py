"""Tiny OLMoE config and tokenizer for tests and the demo (random weights, CPU-friendly).

Sizes follow the shared notes (notes/tiny_models.md, notes/vllm_cpu.md): head_dim 32 (vLLM's CPU
attention needs at least 32), 4 query heads over 2 key/value heads (OLMoE's q_norm / k_norm widths
then differ, as they would in a GQA variant), 4 experts top-2 so that TP 2 and EP 2 both divide it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from swiftcore_tiny import TinyFamily
    from transformers import OlmoeConfig

__all__ = ["SPECIAL_TOKENS", "tiny_family", "tiny_olmoe_config", "tiny_olmoe_tokenizer"]

#: OLMoE's added tokens (the GPT-NeoX-based OLMo vocabulary with its PII placeholders), ids 0..n-1 here.
#: In the real vocabulary: ``|||IP_ADDRESS|||`` 0, ``<|padding|>`` 1, the two others 50277 and 50278,
#: ``<|endoftext|>`` 50279 (BOS, EOS and the chat template's end of reply).
SPECIAL_TOKENS = (
    "|||IP_ADDRESS|||",
    "<|padding|>",
    "|||EMAIL_ADDRESS|||",
    "|||PHONE_NUMBER|||",
    "<|endoftext|>",
)
# The PII placeholders are ordinary added tokens in the release: decoding keeps them.
_NON_SPECIAL = ("|||IP_ADDRESS|||", "|||EMAIL_ADDRESS|||", "|||PHONE_NUMBER|||")


def tiny_family() -> TinyFamily:
    """OLMoE's tiny checkpoint, as data (about 0.33 M parameters)."""
    # Built on call, not at import: swiftcore-tiny is the [tiny] extra, and the spec's references resolve without it.
    from swiftcore_tiny import VOCAB, TinyFamily, TokenId
    from transformers import OlmoeConfig

    return TinyFamily(
        config_class=OlmoeConfig,
        config={
            "vocab_size": VOCAB,
            "hidden_size": 128,
            "intermediate_size": 32,  # each expert's width (OLMoE has no dense MLP)
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "norm_topk_prob": False,  # OLMoE's: softmax over all experts, top-k weights not renormalised
            "max_position_embeddings": 4096,
            "tie_word_embeddings": False,
            # OLMoE's config names no BOS id although its chat template renders <|endoftext|> first.
            "bos_token_id": None,
            "eos_token_id": TokenId("<|endoftext|>"),
            "pad_token_id": TokenId("<|padding|>"),
        },
        special_tokens=SPECIAL_TOKENS,
        bos="<|endoftext|>",
        eos="<|endoftext|>",
        pad="<|padding|>",
        non_special=_NON_SPECIAL,
        chat_template="swiftcore_template_olmo:official/olmoe.jinja",
        # GPT-NeoX's layout is GPT-2's byte-level BPE (no prefix space), which GPTNeoXTokenizer rebuilds.
        style="bytelevel",
        tokenizer_class="GPTNeoXTokenizer",
    )


def tiny_olmoe_tokenizer(out_dir: str | Path) -> None:
    """Write the tiny OLMoE tokenizer (GPT-NeoX byte-level layout, official chat template) to ``out_dir``."""
    tiny_family().write_tokenizer(out_dir)


def tiny_olmoe_config(tokenizer: Any = None) -> OlmoeConfig:
    """The tiny ``OlmoeConfig``, its vocabulary and ids from ``tokenizer`` (None: the builder's layout)."""
    return tiny_family().make_config(tokenizer)
