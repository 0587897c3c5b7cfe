"""Tiny MiMo-V2-Flash config and tokenizer for tests and the demo (random weights, CPU-friendly).

The config is transformers' own ``MiMoV2FlashConfig`` with the release's features kept, only smaller:
full attention on the first and last layer and sliding-window attention (8 tokens, with attention
sinks and twice the kv heads) between them; query/key head size 32 but value head size 16; partial
rotary (the release's 0.334) with the release's two rope thetas; a dense first layer, then MoE layers
with 4 routed experts, top 2, sigmoid scores with the score-correction bias, no shared expert.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from swiftcore_tiny import TinyFamily
    from transformers import MiMoV2FlashConfig

__all__ = ["SPECIAL_TOKENS", "tiny_family", "tiny_mimo_v2_config", "tiny_mimo_v2_tokenizer"]

#: MiMo-V2-Flash's special and control tokens (Qwen2-derived vocabulary), ids 0..n-1 in the tiny one.
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
)
# As in the released tokenizer: reasoning and tool markup stay in decoded text (skip_special_tokens keeps them).
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
# The BPE training text: MiMo's chat skeleton (its default system prompt is rendered into every conversation
# without a system turn, so it must tokenize short) and ordinary text, so short test conversations stay short.
_CHAT = (
    "<|im_start|>system\nYou are MiMo, an AI assistant developed by Xiaomi.<|im_end|>\n"
    "<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n{a}<|im_end|>\n"
)
_CORPUS = (
    *[_CHAT.format(q=q, a=a) for q, a in (
        ("Hello! How are you today?", "I am fine, thank you. What can I help you with?"),
        ("What is the capital of France?", "The capital of France is Paris. Paris is a large city."),
        ("Is 12 even or odd?", "even"),
        ("Is 7 even or odd?", "odd"),
        ("Say alpha again.", "alpha again"),
        ("Translate 'cat' to German.", "Katze"),
        ("What is 2+2?", "2 + 2 = 4."),
        ("Write a haiku about rain.", "Soft rain on the roof"),
    )],
    "The quick brown fox jumps over the lazy dog. The dog was not amused, and the fox ran away.",
    "You are a helpful assistant. Answer the question as well as you can, and think step by step.",
    "Please write a short poem about the sea, the wind and the sun over the water.",
    "The weather today is sunny with a high of 25 degrees and a low of 14 degrees.",
    "A language model predicts the next token. The tokenizer splits text into tokens and ids.",
    "To fine-tune a model, prepare a dataset of conversations, choose a template, and train with LoRA.",
    "The user asked for the time in London. The assistant called a tool to get the current time.",
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nBerlin\n</parameter>\n</function>\n</tool_call>",
    "<tool_response>\nsunny, 25 degrees\n</tool_response>",
    "Once upon a time there was a little girl who lived in a village near the forest.",
    "She went to the market to buy bread, milk, eggs, apples and a bottle of water.",
    "Good night! See you tomorrow. Have a nice day. Thanks a lot. You're welcome. It's fine.",
    "Question: Which planet is known as the red planet? Answer: Mars is known as the red planet.",
    "Alpha, bravo, charlie, delta, echo, foxtrot: the words say each letter clearly over the radio.",
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))\n",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 17*23=391 3.14159",
    "Emoji and Unicode: 🚀 ✨ 🐱 café naïve 你好，世界 Привет Ça va ? Réponds en français.",
)
SLIDING_WINDOW = 8


def tiny_family() -> TinyFamily:
    """MiMo-V2-Flash's tiny checkpoint, as data (about 0.2 M parameters)."""
    # Built on call, not at import: swiftcore-tiny is the [tiny] extra, and the spec's references resolve without it.
    from swiftcore_tiny import VOCAB, TinyFamily, TokenId
    from transformers import MiMoV2FlashConfig
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    return TinyFamily(
        config_class=MiMoV2FlashConfig,
        config={
            "vocab_size": VOCAB,
            "hidden_size": 64,
            "intermediate_size": 128,
            "moe_intermediate_size": 32,
            "num_hidden_layers": 4,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,  # the sliding layers get twice as many, as in the release
            "head_dim": 32,
            "v_head_dim": 16,
            "n_routed_experts": 4,
            "num_experts_per_tok": 2,
            "sliding_window": SLIDING_WINDOW,
            "layer_types": ["full_attention", "sliding_attention", "sliding_attention", "full_attention"],
            "mlp_layer_types": ["dense", "sparse", "sparse", "sparse"],
            # The release's value for its sizes is sqrt(hidden / (heads * v_head_dim)); here that is 1.
            "attention_value_scale": 0.707,
            "max_position_embeddings": 4096,
            "bos_token_id": None,
            "eos_token_id": TokenId("<|im_end|>"),
            "pad_token_id": TokenId("<|endoftext|>"),
        },
        special_tokens=SPECIAL_TOKENS,
        eos="<|im_end|>",
        pad="<|endoftext|>",
        non_special=_NON_SPECIAL,
        chat_template="swiftcore_template_mimo:official/mimo_v2.jinja",
        # The release's layout (a Qwen2 tokenizer): NFC, Qwen2's split regex, byte-level without regex.
        style="split_bytelevel",
        split_regex=PRETOKENIZE_REGEX,
        tokenizer_class="Qwen2Tokenizer",
        corpus=_CORPUS,
    )


def tiny_mimo_v2_tokenizer(out_dir: str | Path) -> None:
    """Write the tiny MiMo-V2-Flash tokenizer (the family's special tokens and chat template) to ``out_dir``."""
    tiny_family().write_tokenizer(out_dir)


def tiny_mimo_v2_config(tokenizer: Any = None) -> MiMoV2FlashConfig:
    """The tiny ``MiMoV2FlashConfig``, its vocabulary and ids from ``tokenizer`` (None: the builder's layout)."""
    return tiny_family().make_config(tokenizer)
