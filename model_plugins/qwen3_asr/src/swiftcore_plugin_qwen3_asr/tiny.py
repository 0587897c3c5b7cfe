"""Tiny Qwen3-ASR config, tokenizer and processor for tests and the demo (random weights, CPU-friendly).

Sizes follow the shared notes (notes/tiny_models.md, notes/vllm_cpu.md): text head_dim 32 (vLLM's CPU
attention needs at least 32); the audio encoder keeps the real 128 mel bins so the real feature
extractor feeds it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from swiftcore_tiny import TinyFamily
    from transformers import Qwen3ASRConfig

__all__ = ["SPECIAL_TOKENS", "tiny_family", "tiny_qwen3_asr_config", "tiny_qwen3_asr_tokenizer"]

#: Qwen3-ASR's special and control tokens (Qwen3 names plus the audio ones), ids 0..n-1 in the tiny one.
SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|audio_start|>",
    "<|audio_end|>",
    "<|audio_pad|>",
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    # The forced aligner's timestamp class token (config.timestamp_token_id).
    "<timestamp>",
    "<asr_text>",
)
# <asr_text> separates the detected language from the transcript; it stays in decoded text for parsing.
_NON_SPECIAL = ("<think>", "</think>", "<tool_call>", "</tool_call>", "<asr_text>")
# Attribute names Qwen3ASRProcessor reads from the tokenizer.
_NAMED = {
    "audio_token": "<|audio_pad|>",
    "audio_bos_token": "<|audio_start|>",
    "audio_eos_token": "<|audio_end|>",
}


def tiny_family() -> TinyFamily:
    """Qwen3-ASR's tiny checkpoint, as data, with its processor as a hook (:func:`_save_processor`)."""
    # Built on call, not at import: swiftcore-tiny is the [tiny] extra, and the spec's references resolve without it.
    from swiftcore_tiny import VOCAB, TinyFamily, TokenId
    from transformers import Qwen3ASRConfig
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    text = {
        "vocab_size": VOCAB,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": True,  # as Qwen3ASRConfig's default
    }
    audio = {
        "d_model": 32,
        "encoder_layers": 1,
        "encoder_attention_heads": 2,
        "encoder_ffn_dim": 64,
        "output_dim": 64,  # the text hidden size
        "num_mel_bins": 128,
        "downsample_hidden_size": 32,  # the default (480) alone would be 4 M parameters of convolutions
        # At the default 0.02 the three stride-2 convolutions shrink the features ~1000x, the sinusoidal
        # positions then swamp them and every clip comes out of the tower the same (to 4 digits): a frozen
        # tower (training's default) would hear nothing. At 0.2 clips stay apart (relative distance ~0.8),
        # as a real pretrained tower keeps them.
        "initializer_range": 0.2,
    }
    return TinyFamily(
        config_class=Qwen3ASRConfig,
        config={
            "text_config": text,
            "audio_config": audio,
            "audio_token_id": TokenId("<|audio_pad|>"),
            "timestamp_token_id": TokenId("<timestamp>"),
            "pad_token_id": TokenId("<|endoftext|>"),
            "eos_token_id": [TokenId("<|endoftext|>"), TokenId("<|im_end|>")],
        },
        special_tokens=SPECIAL_TOKENS,
        eos="<|im_end|>",
        pad="<|endoftext|>",
        non_special=_NON_SPECIAL,
        named_tokens=_NAMED,
        chat_template="swiftcore_template_qwen:official/qwen3_asr.jinja",
        # The Qwen2/Qwen3 layout: NFC, the Qwen2 split regex, byte-level without regex.
        style="split_bytelevel",
        split_regex=PRETOKENIZE_REGEX,
        tokenizer_class="Qwen2Tokenizer",
        processor=_save_processor,
    )


def _save_processor(out_dir: Path, tokenizer: Any) -> None:
    """The family's processor hook: the real ``Qwen3ASRProcessor``, built around the tokenizer just written."""
    from transformers import Qwen3ASRFeatureExtractor, Qwen3ASRProcessor

    # Qwen3ASRProcessor needs no video processor, so the real processor is saved as is (not as data: it takes
    # the tokenizer and its chat template, and writes its own files).
    processor = Qwen3ASRProcessor(
        feature_extractor=Qwen3ASRFeatureExtractor(), tokenizer=tokenizer, chat_template=tokenizer.chat_template
    )
    processor.save_pretrained(str(out_dir))


def tiny_qwen3_asr_tokenizer(out_dir: str | Path) -> None:
    """Write the tiny Qwen3-ASR tokenizer (official chat template) and its processor to ``out_dir``."""
    tiny_family().write_tokenizer(out_dir)


def tiny_qwen3_asr_config(tokenizer: Any = None) -> Qwen3ASRConfig:
    """The tiny ``Qwen3ASRConfig``, its vocabulary and ids from ``tokenizer`` (None: the builder's layout)."""
    return tiny_family().make_config(tokenizer)
