"""Tiny Gemma 4 config and tokenizer for tests and the demo (random weights, CPU-friendly).

Sizes follow the shared notes (notes/tiny_models.md, notes/vllm_cpu.md): head_dim 32 (vLLM's CPU
attention needs at least 32), ``vocab_size_per_layer_input`` equal to the vocabulary, and
``vision_config.default_output_length`` written to config.json for vLLM.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from swiftcore_tiny import TinyFamily
    from transformers import Gemma4Config

__all__ = ["SPECIAL_TOKENS", "tiny_family", "tiny_gemma4_config", "tiny_gemma4_tokenizer"]

#: Gemma 4's special tokens (the real vocabulary's names). The first five keep Gemma's ids
#: (pad 0, eos 1, bos 2, unk 3, mask 4), which are also Gemma4TextConfig's defaults.
SPECIAL_TOKENS = (
    "<pad>",
    "<eos>",
    "<bos>",
    "<unk>",
    "<mask>",
    "<|turn>",
    "<turn|>",
    "<|think|>",
    "<|channel>",
    "<channel|>",
    "<|tool>",
    "<tool|>",
    "<|tool_call>",
    "<tool_call|>",
    "<|tool_response>",
    "<tool_response|>",
    '<|"|>',
    "<|image>",
    "<image|>",
    "<|image|>",
    "<|audio>",
    "<audio|>",
    "<|audio|>",
    "<|video|>",
)
# Attribute names Gemma4Processor reads from the tokenizer.
_NAMED = {
    "image_token": "<|image|>",
    "boi_token": "<|image>",
    "eoi_token": "<image|>",
    "audio_token": "<|audio|>",
    "boa_token": "<|audio>",
    "eoa_token": "<audio|>",
}
# Soft tokens per image: the processor expands <|image|> to this many, the vision tower emits as many.
IMAGE_SEQ_LENGTH = 280


def tiny_family() -> TinyFamily:
    """Gemma 4's tiny checkpoint, as data (about 1 M parameters)."""
    # Built on call, not at import: swiftcore-tiny is the [tiny] extra, and the spec's references resolve without it.
    from swiftcore_tiny import VOCAB, TinyFamily, TinyProcessor, TokenId
    from transformers import Gemma4AudioFeatureExtractor, Gemma4Config, Gemma4ImageProcessorPil

    text = {
        "vocab_size": VOCAB,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 4,
        # Gemma 4 needs a full-attention last layer (it forces one, with a warning, otherwise).
        "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"],
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "global_head_dim": 32,
        # The default (262,144) would make the per-layer input embedding 269 M parameters.
        "vocab_size_per_layer_input": VOCAB,
        "hidden_size_per_layer_input": 16,
        "max_position_embeddings": 4096,
        "pad_token_id": TokenId("<pad>"),
        "bos_token_id": TokenId("<bos>"),
        # Generation stops at the end of a model turn as well as at <eos>.
        "eos_token_id": [TokenId("<eos>"), TokenId("<turn|>")],
    }
    vision = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "patch_size": 16,
        "pooling_kernel_size": 3,
        # Not a Gemma4VisionConfig field in transformers 5.19, but vLLM's gemma4_mm reads it.
        "default_output_length": IMAGE_SEQ_LENGTH,
    }
    audio = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "output_proj_dims": 64}
    return TinyFamily(
        config_class=Gemma4Config,
        config={
            "text_config": text,
            "vision_config": vision,
            "audio_config": audio,
            "boi_token_id": TokenId("<|image>"),
            "eoi_token_id": TokenId("<image|>"),
            "image_token_id": TokenId("<|image|>"),
            "video_token_id": TokenId("<|video|>"),
            "boa_token_id": TokenId("<|audio>"),
            "eoa_token_index": TokenId("<audio|>"),
            "audio_token_id": TokenId("<|audio|>"),
        },
        special_tokens=SPECIAL_TOKENS,
        eos="<eos>",
        pad="<pad>",
        bos="<bos>",
        unk="<unk>",
        named_tokens=_NAMED,
        chat_template="swiftcore_template_gemma:official/gemma4.jinja",
        # Gemma's layout: spaces become "▁", byte fallback to <0xNN>.
        style="byte_fallback",
        tokenizer_class="GemmaTokenizer",
        add_bos_token=True,
        processor=TinyProcessor(
            "Gemma4Processor",
            {
                "image_processor": Gemma4ImageProcessorPil(
                    patch_size=16, max_soft_tokens=IMAGE_SEQ_LENGTH, pooling_kernel_size=3
                ),
                "feature_extractor": Gemma4AudioFeatureExtractor(),
            },
            {"image_seq_length": IMAGE_SEQ_LENGTH, "audio_seq_length": 750, "audio_ms_per_token": 40},
        ),
    )


def tiny_gemma4_tokenizer(out_dir: str | Path) -> None:
    """Write the tiny Gemma 4 tokenizer (official chat template) and processor settings to ``out_dir``."""
    tiny_family().write_tokenizer(out_dir)


def tiny_gemma4_config(tokenizer: Any = None) -> Gemma4Config:
    """The tiny ``Gemma4Config``, its vocabulary and ids from ``tokenizer`` (None: the builder's layout)."""
    return tiny_family().make_config(tokenizer)
