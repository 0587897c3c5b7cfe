"""The shared tiny-tokenizer builder: real layouts, stable special-token ids, agreement between loaders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from swiftcore_tiny import build_tiny_tokenizer

# The family's pieces, as its plugin's tiny.py passes them: the core knows layouts, not families.
from transformers.models.qwen3_5.tokenization_qwen3_5 import PRETOKENIZE_REGEX as QWEN3_5_REGEX

from swiftcore.errors import SwiftcoreError

TEXTS = ("Hello, world! How are you today?", "Café naïve 你好 😀  two  spaces\n\nnew line", "x = 1 + 2  # 2026")
QWEN_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<|image_pad|>")
GEMMA_SPECIALS = ("<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<|turn>", "<turn|>", "<|image|>")
TEMPLATE = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("qwen_tok")
    build_tiny_tokenizer(
        out,
        special_tokens=QWEN_SPECIALS,
        eos="<|im_end|>",
        pad="<|endoftext|>",
        non_special=("<think>", "</think>"),
        named_tokens={"image_token": "<|image_pad|>"},
        chat_template=TEMPLATE,
        style="split_bytelevel",
        split_regex=QWEN3_5_REGEX,
        tokenizer_class="Qwen3_5Tokenizer",
        vocab_size=400,
    )
    return out


@pytest.fixture(scope="module")
def gemma_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gemma_tok")
    build_tiny_tokenizer(
        out,
        special_tokens=GEMMA_SPECIALS,
        eos="<eos>",
        pad="<pad>",
        bos="<bos>",
        unk="<unk>",
        style="byte_fallback",
        tokenizer_class="GemmaTokenizer",
        vocab_size=450,
        add_bos_token=True,
    )
    return out


def _loaders(directory: Path):
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    return (
        AutoTokenizer.from_pretrained(str(directory)),
        PreTrainedTokenizerFast.from_pretrained(str(directory)),
        Tokenizer.from_file(str(directory / "tokenizer.json")),
    )


@pytest.mark.parametrize("which", ["qwen_dir", "gemma_dir"])
def test_auto_fast_and_raw_tokenizers_agree(which: str, request: pytest.FixtureRequest) -> None:
    auto, fast, raw = _loaders(request.getfixturevalue(which))
    for text in TEXTS:
        ids = auto(text)["input_ids"]
        assert ids == fast(text)["input_ids"] == raw.encode(text).ids
        assert auto.decode(ids, skip_special_tokens=True) == text
        # A trained BPE merges: ordinary text needs fewer tokens than it has UTF-8 bytes.
        assert len(ids) < len(text.encode("utf-8"))


def test_qwen_layout_is_what_transformers_rebuilds(qwen_dir: Path) -> None:
    auto, _, _ = _loaders(qwen_dir)
    assert type(auto).__name__ == "Qwen3_5Tokenizer"
    assert [auto.convert_tokens_to_ids(t) for t in QWEN_SPECIALS] == list(range(len(QWEN_SPECIALS)))
    assert (auto.eos_token, auto.pad_token, auto.bos_token) == ("<|im_end|>", "<|endoftext|>", None)
    assert auto.image_token == "<|image_pad|>"
    assert len(auto) == 400
    # Non-special control tokens survive skip_special_tokens; special ones do not.
    ids = auto("a<think>b</think><|im_end|>")["input_ids"]
    assert auto.decode(ids, skip_special_tokens=True) == "a<think>b</think>"


def test_chat_template_is_saved(qwen_dir: Path) -> None:
    auto, _, _ = _loaders(qwen_dir)
    text = auto.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False)
    assert text == "<|im_start|>user\nHi<|im_end|>\n"


def test_gemma_layout_has_byte_fallback_and_bos(gemma_dir: Path) -> None:
    auto, _, _ = _loaders(gemma_dir)
    assert type(auto).__name__ == "GemmaTokenizer"
    assert (auto.pad_token_id, auto.eos_token_id, auto.bos_token_id, auto.unk_token_id) == (0, 1, 2, 3)
    assert auto.convert_tokens_to_ids("<0x41>") == len(GEMMA_SPECIALS) + 0x41
    ids = auto("ok ✈")["input_ids"]  # a character outside the learned alphabet is spelled in bytes
    assert ids[0] == 2
    assert auto.convert_ids_to_tokens(ids[-3:]) == ["<0xE2>", "<0x9C>", "<0x88>"]
    assert auto.decode(ids, skip_special_tokens=True) == "ok ✈"


def test_training_is_reproducible(tmp_path: Path, gemma_dir: Path) -> None:
    again = tmp_path / "again"
    build_tiny_tokenizer(
        again,
        special_tokens=GEMMA_SPECIALS,
        eos="<eos>",
        pad="<pad>",
        bos="<bos>",
        unk="<unk>",
        style="byte_fallback",
        tokenizer_class="GemmaTokenizer",
        vocab_size=450,
        add_bos_token=True,
    )
    assert json.loads((again / "tokenizer.json").read_text()) == json.loads((gemma_dir / "tokenizer.json").read_text())


def test_named_token_must_be_a_special_token(tmp_path: Path) -> None:
    with pytest.raises(SwiftcoreError, match="image_token='<img>' not in special_tokens"):
        build_tiny_tokenizer(tmp_path, special_tokens=("<eos>",), eos="<eos>", named_tokens={"image_token": "<img>"})


def test_vocabulary_must_hold_the_byte_alphabet(tmp_path: Path) -> None:
    with pytest.raises(SwiftcoreError, match="too small"):
        build_tiny_tokenizer(tmp_path, special_tokens=("<eos>",), eos="<eos>", vocab_size=256)


def test_split_regex_goes_with_the_split_style_only(tmp_path: Path) -> None:
    with pytest.raises(SwiftcoreError, match="split_regex is required by style 'split_bytelevel'"):
        build_tiny_tokenizer(tmp_path, special_tokens=("<eos>",), eos="<eos>", style="split_bytelevel")
    with pytest.raises(SwiftcoreError, match="split_regex is required by style 'split_bytelevel' and only by it"):
        build_tiny_tokenizer(tmp_path, special_tokens=("<eos>",), eos="<eos>", split_regex=r"\s+")


def test_byte_fallback_needs_an_unk_token(tmp_path: Path) -> None:
    with pytest.raises(SwiftcoreError, match="style 'byte_fallback' needs an unk token"):
        build_tiny_tokenizer(tmp_path, special_tokens=("<eos>",), eos="<eos>", style="byte_fallback", vocab_size=450)


def test_unknown_style(tmp_path: Path) -> None:
    with pytest.raises(SwiftcoreError, match="unknown style 'sentencepiece'"):
        build_tiny_tokenizer(tmp_path, special_tokens=("<eos>",), eos="<eos>", style="sentencepiece")
