"""Tiny OLMoE config and tokenizer for tests and the demo (random weights, CPU-friendly).

Sizes follow the shared notes (notes/tiny_models.md, notes/vllm_cpu.md): head_dim 32 (vLLM's CPU
attention needs at least 32), 4 query heads over 2 key/value heads (OLMoE's q_norm / k_norm widths
then differ, as they would in a GQA variant), 4 experts top-2 so that TP 2 and EP 2 both divide it.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

__all__ = ["SPECIAL_TOKENS", "tiny_olmoe_config", "tiny_olmoe_tokenizer"]

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
VOCAB_SIZE = 512


def _chat_template() -> str:
    return (resources.files("swiftcore_template_olmo") / "official" / "olmoe.jinja").read_text(encoding="utf-8")


def tiny_olmoe_tokenizer(out_dir: str | Path) -> None:
    """Write a tiny OLMoE tokenizer (GPT-NeoX byte-level layout, official chat template) to ``out_dir``.

    Args:
        out_dir: the checkpoint directory being written.
    """
    from swiftcore_tiny import build_tiny_tokenizer

    build_tiny_tokenizer(
        out_dir,
        special_tokens=SPECIAL_TOKENS,
        bos="<|endoftext|>",
        eos="<|endoftext|>",
        pad="<|padding|>",
        non_special=_NON_SPECIAL,
        chat_template=_chat_template(),
        # GPT-NeoX's layout is GPT-2's byte-level BPE (no prefix space), which GPTNeoXTokenizer rebuilds.
        style="bytelevel",
        tokenizer_class="GPTNeoXTokenizer",
        vocab_size=VOCAB_SIZE,
    )


def tiny_olmoe_config(tokenizer: Any = None) -> Any:
    """A tiny ``OlmoeConfig`` (about 0.33 M parameters) matching ``tokenizer``'s vocabulary and ids.

    Args:
        tokenizer: the tiny tokenizer; None uses the builder's layout (specials first, in order).
    """
    from transformers import OlmoeConfig

    if tokenizer is None:
        ids = {token: i for i, token in enumerate(SPECIAL_TOKENS)}
        vocab = VOCAB_SIZE
    else:
        ids = {token: tokenizer.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS}
        vocab = len(tokenizer)
    return OlmoeConfig(
        vocab_size=vocab,
        hidden_size=128,
        intermediate_size=32,  # each expert's width (OLMoE has no dense MLP)
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_experts=4,
        num_experts_per_tok=2,
        norm_topk_prob=False,  # OLMoE's: softmax over all experts, top-k weights not renormalised
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        # OLMoE's config names no BOS id although its chat template renders <|endoftext|> first.
        bos_token_id=None,
        eos_token_id=ids["<|endoftext|>"],
        pad_token_id=ids["<|padding|>"],
    )
