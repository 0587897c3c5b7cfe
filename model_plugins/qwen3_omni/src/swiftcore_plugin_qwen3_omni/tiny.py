"""Tiny Qwen3-Omni (MoE) config and tokenizer for tests and the demo (random weights, CPU-friendly).

Every part of ``Qwen3OmniMoeForConditionalGeneration`` is built, at toy sizes: the thinker (MoE text decoder,
audio encoder, vision encoder), the talker (MoE codec decoder and its code predictor) and Code2Wav. The thinker's
text head_dim is 32 (vLLM's CPU attention needs at least 32; notes/tiny_models.md). The role words ``system``,
``user`` and ``assistant`` must be single tokens (the talker finds the turns by their ids), so the tokenizer's
corpus repeats them. The chat template is ``official/qwen3_omni.jinja`` (Qwen3's, with media placeholders; its
header says where it comes from).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from swiftcore_tiny import TinyFamily
    from transformers import Qwen3OmniMoeConfig

__all__ = [
    "CODEC_CODES",
    "CODEC_VOCAB",
    "SPEAKER",
    "SPECIAL_TOKENS",
    "tiny_family",
    "tiny_qwen3_omni_config",
    "tiny_qwen3_omni_tokenizer",
]

#: Qwen3-Omni's special and control tokens (Qwen3 names, the audio/vision ones, the talker's tts_* ones).
SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|audio_start|>",
    "<|audio_end|>",
    "<|audio_pad|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tts_pad>",
    "<tts_text_bos>",
    "<tts_text_eod>",
    "<tts_text_bos_single>",
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
)
_NON_SPECIAL = ("<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")
# Attribute names Qwen3OmniMoeProcessor reads from the tokenizer.
_NAMED = {
    "audio_token": "<|audio_pad|>",
    "audio_bos_token": "<|audio_start|>",
    "audio_eos_token": "<|audio_end|>",
    "image_token": "<|image_pad|>",
    "video_token": "<|video_pad|>",
    "vision_bos_token": "<|vision_start|>",
    "vision_eos_token": "<|vision_end|>",
}
#: The talker's codec vocabulary: codes 0..CODEC_CODES-1, unused ids, then its control ids in the last 1024 ids
#: (upstream's generate suppresses ``[vocab - 1024, vocab)`` but EOS, so the codes must sit below that range).
CODEC_VOCAB = 1056
CODEC_CODES = 32
_CODEC = {
    "codec_pad_id": 1040,
    "codec_bos_id": 1041,
    "codec_eos_token_id": 1042,
    "codec_nothink_id": 1043,
    "codec_think_bos_id": 1044,
    "codec_think_eos_id": 1045,
}
#: The tiny checkpoint's one voice (``speaker`` of generate) and its codec id.
SPEAKER = "tiny"
SPEAKER_ID = 1050
_ROLES = ("system", "user", "assistant")


def _corpus() -> tuple[str, ...]:
    from swiftcore_tiny import TINY_CORPUS

    # The template writes "<|im_start|>user\n": each role word stands alone, as the split regex cuts it there.
    return (*TINY_CORPUS, *(f"{role}\n" for _ in range(100) for role in _ROLES))


def _config(**kwargs: Any) -> Qwen3OmniMoeConfig:
    from transformers import Qwen3OmniMoeConfig

    return Qwen3OmniMoeConfig(**kwargs)


def tiny_family() -> TinyFamily:
    """Qwen3-Omni's tiny checkpoint, as data."""
    from swiftcore_tiny import VOCAB, TinyFamily, TokenId
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    text = {
        "vocab_size": VOCAB,
        "hidden_size": 64,
        "intermediate_size": 128,
        "moe_intermediate_size": 32,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "max_position_embeddings": 4096,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 1000000.0,
            "mrope_section": [4, 6, 6],
            "mrope_interleaved": True,
        },
    }
    audio = {
        "d_model": 32,
        "encoder_layers": 1,
        "encoder_attention_heads": 2,
        "encoder_ffn_dim": 64,
        "output_dim": 64,
        "num_mel_bins": 128,
        "downsample_hidden_size": 32,
    }
    vision = {
        "depth": 1,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_heads": 2,
        "out_hidden_size": 64,
        "deepstack_visual_indexes": [0],
        "num_position_embeddings": 64,
    }
    talker_text = {
        "vocab_size": CODEC_VOCAB,
        "hidden_size": 64,
        "intermediate_size": 128,
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 32,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 1000000.0,
            "mrope_section": [4, 6, 6],
            "mrope_interleaved": True,
        },
    }
    predictor = {
        "vocab_size": CODEC_CODES,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 1,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "num_code_groups": 4,
    }
    talker = {
        "text_config": talker_text,
        "code_predictor_config": predictor,
        "num_code_groups": 4,
        "thinker_hidden_size": 64,
        "accept_hidden_layer": 1,
        **_CODEC,
        "speaker_id": {SPEAKER: SPEAKER_ID},
        "audio_token_id": TokenId("<|audio_pad|>"),
        "image_token_id": TokenId("<|image_pad|>"),
        "video_token_id": TokenId("<|video_pad|>"),
        "vision_start_token_id": TokenId("<|vision_start|>"),
        "audio_start_token_id": TokenId("<|audio_start|>"),
        # Read by the talker's __init__ but not a field of Qwen3OmniMoeTalkerConfig in transformers 5.19 (the
        # released config.json carries it, as here).
        "spatial_merge_size": 2,
    }
    code2wav = {
        "codebook_size": CODEC_CODES,
        "hidden_size": 32,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_quantizers": 4,
        "upsample_rates": [2, 2],
        "upsampling_ratios": [2],
        "decoder_dim": 32,
        "sliding_window": 8,
    }
    thinker = {
        "text_config": text,
        "audio_config": audio,
        "vision_config": vision,
        "audio_token_id": TokenId("<|audio_pad|>"),
        "image_token_id": TokenId("<|image_pad|>"),
        "video_token_id": TokenId("<|video_pad|>"),
        "audio_start_token_id": TokenId("<|audio_start|>"),
        # Read by the thinker's position ids but not a field of Qwen3OmniMoeThinkerConfig in transformers 5.19.
        "vision_start_token_id": TokenId("<|vision_start|>"),
    }
    return TinyFamily(
        config_class=_config,
        config={
            "thinker_config": thinker,
            "talker_config": talker,
            "code2wav_config": code2wav,
            "im_start_token_id": TokenId("<|im_start|>"),
            "im_end_token_id": TokenId("<|im_end|>"),
            "tts_pad_token_id": TokenId("<tts_pad>"),
            "tts_bos_token_id": TokenId("<tts_text_bos>"),
            "tts_eos_token_id": TokenId("<tts_text_eod>"),
        },
        special_tokens=SPECIAL_TOKENS,
        eos="<|im_end|>",
        pad="<|endoftext|>",
        non_special=_NON_SPECIAL,
        named_tokens=_NAMED,
        chat_template="swiftcore_plugin_qwen3_omni:official/qwen3_omni.jinja",
        style="split_bytelevel",
        split_regex=PRETOKENIZE_REGEX,
        tokenizer_class="Qwen2Tokenizer",
        corpus=_corpus(),
    )


def tiny_qwen3_omni_tokenizer(out_dir: str | Path) -> None:
    """Write the tiny Qwen3-Omni tokenizer (with the packaged chat template) to ``out_dir``."""
    tiny_family().write_tokenizer(out_dir)


def tiny_qwen3_omni_config(tokenizer: Any = None) -> Qwen3OmniMoeConfig:
    """The tiny ``Qwen3OmniMoeConfig``; vocabulary, special ids and role-word ids from ``tokenizer``."""
    config = tiny_family().make_config(tokenizer)
    if tokenizer is not None:
        for role in _ROLES:
            ids = tokenizer.encode(role, add_special_tokens=False)
            if len(ids) != 1:
                from swiftcore.api import SwiftcoreError

                raise SwiftcoreError(f"tiny qwen3_omni tokenizer: role word {role!r} is {len(ids)} tokens, not 1")
            setattr(config, f"{role}_token_id", ids[0])
        config.thinker_config.user_token_id = config.user_token_id
    return config
