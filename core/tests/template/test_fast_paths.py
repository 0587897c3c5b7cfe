"""The encoder's fast paths give exactly what the reference (slow) paths give.

- span boundaries located with ``char_to_token`` on the Rust encoding vs bisecting every token's
  start offset, at every character position of texts that split characters into byte tokens and of
  texts a normaliser changes;
- ``prompt_overlap`` by bisecting candidate cuts vs the longest-common-prefix-then-back-off rule;
- ``strip_pieces``' one-piece shortcut vs the general cut;
- ``encode_batch`` (chunked, threaded, garbage collector paused) vs one sample at a time through the
  offsets path, on the reference corpus, and it leaves the garbage collector as it found it.
"""

from __future__ import annotations

import gc
import json
import random
from pathlib import Path
from typing import Any

import pytest
from swiftcore_testing.templates import OffsetsOnlyTokenizer, build_test_tokenizer, compare_fast_and_slow

from swiftcore.template import JinjaTemplate, Segment
from swiftcore.template import base as template_base
from swiftcore.template.encoding import encoding_locator, starts_locator, tokenize
from swiftcore.template.pieces import media, prompt, strip_pieces, text_of
from swiftcore.template.segments import prompt_overlap

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "conversations.jsonl"
SPECIAL = ("<|im_start|>", "<|im_end|>", "<img>")
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.content is string %}{{ m.content }}{% else %}{% for p in m.content %}"
    "{% if p.type == 'text' %}{{ p.text }}{% else %}<img>{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Byte-split characters (emoji, ZWJ sequences, CJK, combining marks), special tokens glued to text,
# and whitespace runs: the cases where several tokens share a start or a token straddles a boundary.
STRESS = [
    "héllo wörld 👩‍👩‍👧 family 🇫🇷 flag, 漢字かな交じり文, e\u0301 combining, tabs\t\tand  spaces\n\n",
    "<|im_start|>user\n¿Qué tal? 😀😀😀<|im_end|>\n<|im_start|>assistant\n<img><img>ok<|im_end|>",
    "a" * 50 + "🙂" + "b" * 3 + "\u200b" + "末尾",
    "ﬁne ligature, ① circled, ㎏ unit, Ｆｕｌｌｗｉｄｔｈ",  # NFKC changes their length
    "",
    "<|im_end|>",
]


def _corpus_texts() -> list[str]:
    texts = []
    for line in CORPUS.read_text(encoding="utf-8").splitlines():
        for message in json.loads(line)["messages"]:
            if isinstance(message.get("content"), str):
                texts.append(message["content"])
    return texts


@pytest.fixture(scope="module")
def tok() -> Any:
    # A small vocabulary: most non-ASCII characters stay split into byte tokens.
    return build_test_tokenizer(SPECIAL, _corpus_texts()[:40], vocab_size=400, chat_template=CHATML,
                                eos_token="<|im_end|>")


@pytest.fixture(scope="module")
def nfkc_tok() -> Any:
    """A tokenizer whose normaliser changes text (NFKC + lowercase), so offsets map back non-trivially."""
    from tokenizers import normalizers

    tok = build_test_tokenizer(SPECIAL, _corpus_texts()[:40], vocab_size=400)
    tok.backend_tokenizer.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    return tok


@pytest.fixture(scope="module")
def dropping_tok() -> Any:
    """A tokenizer with a whitespace pre-tokenizer: spaces belong to no token (the locator's fallback)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    backend = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.train_from_iterator(_corpus_texts(), trainers.WordPieceTrainer(vocab_size=300, special_tokens=["[UNK]"],
                                                                           show_progress=False))
    return backend


def _every_position(tokenizer: Any, texts: list[str]) -> tuple[int, list[str]]:
    """Compare the two locators at every character position (and one past the end) of every text."""
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    encodings = backend.encode_batch(texts, add_special_tokens=False)
    checked, failures = 0, []
    for text, encoding in zip(texts, encodings, strict=True):
        fast = encoding_locator(encoding)
        slow = starts_locator([s for s, _ in encoding.offsets])
        for char in range(len(text) + 2):
            checked += 1
            if fast(char) != slow(char):
                failures.append(f"{text[:30]!r} at {char}: fast {fast(char)}, bisect {slow(char)}")
    return checked, failures


@pytest.mark.parametrize("which", ["tok", "nfkc_tok", "dropping_tok"])
def test_locator_equals_bisect_at_every_character(which: str, request: pytest.FixtureRequest) -> None:
    tokenizer = request.getfixturevalue(which)
    checked, failures = _every_position(tokenizer, [*STRESS, *_corpus_texts()])
    assert checked > 3000
    assert not failures, "\n".join(failures[:10])


def test_stress_texts_do_split_characters_across_tokens(tok: Any) -> None:
    # Guards the test above: it only means something if tokens share starts.
    encoding = tok.backend_tokenizer.encode(STRESS[0], add_special_tokens=False)
    starts = [s for s, _ in encoding.offsets]
    assert len(starts) > len(set(starts))


class _FakeEncoding:
    """Just the part of ``tokenizers.Encoding`` the locator uses, for offsets no real tokenizer here makes."""

    def __init__(self, offsets: list[tuple[int, int]]) -> None:
        self.offsets = offsets

    def __len__(self) -> int:
        return len(self.offsets)

    def char_to_token(self, char: int) -> int | None:  # the first token holding the character, as Rust does
        return next((i for i, (s, e) in enumerate(self.offsets) if s <= char < e), None)

    def token_to_chars(self, token: int) -> tuple[int, int]:
        return self.offsets[token]


@pytest.mark.parametrize("offsets", [
    [(0, 2), (2, 2), (2, 4), (4, 5)],  # a zero-width token before the one holding character 2
    [(0, 1), (1, 3), (1, 3), (3, 4)],  # two tokens share a multi-character span
    [(0, 1), (2, 3), (5, 6)],  # gaps: characters 1, 3 and 4 belong to no token
    [(1, 2)],  # the text starts with an uncovered character
])
def test_locator_equals_bisect_on_unusual_offsets(offsets: list[tuple[int, int]]) -> None:
    fast = encoding_locator(_FakeEncoding(offsets))
    slow = starts_locator([s for s, _ in offsets])
    assert [fast(c) for c in range(8)] == [slow(c) for c in range(8)]


def test_dropping_tokenizer_does_leave_characters_uncovered(dropping_tok: Any) -> None:
    # Guards the fallback case: a boundary on a character no token covers.
    encoding = dropping_tok.encode("two  words", add_special_tokens=False)
    assert encoding.char_to_token(3) is None


def test_tokenize_fast_and_offsets_paths_agree(tok: Any) -> None:
    texts = [*STRESS, *_corpus_texts()]
    fast = tokenize(tok, texts)
    slow = tokenize(OffsetsOnlyTokenizer(tok), texts)
    for text, (ids_a, loc_a), (ids_b, loc_b) in zip(texts, fast, slow, strict=True):
        assert ids_a == ids_b == tok(text, add_special_tokens=False)["input_ids"]
        assert [loc_a(c) for c in range(len(text) + 1)] == [loc_b(c) for c in range(len(text) + 1)]


def _reference_overlap(turn: str, generation_prompt: str) -> int:
    """The rule as first written: longest common prefix, then back off to a piece boundary."""
    if turn.startswith(generation_prompt):
        return len(generation_prompt)
    common = 0
    while common < min(len(turn), len(generation_prompt)) and turn[common] == generation_prompt[common]:
        common += 1
    for cut in range(common, 0, -1):
        if generation_prompt[cut - 1] in "\n>" or generation_prompt[cut] == "<":
            return cut
    return 0


def test_prompt_overlap_equals_the_reference_rule() -> None:
    rng = random.Random(0)
    prompts = ["<|turn>model\n<|channel>thought\n<channel|>", "<|im_start|>assistant\n<think>\n",
               "<|im_start|>assistant\n<think>\n\n</think>\n\n", "<｜Assistant｜></think>", "a<b>c\n<", "x", ""]
    cases = 0
    for _ in range(20000):
        generation_prompt = rng.choice(prompts)
        keep = rng.randint(0, len(generation_prompt))
        turn = generation_prompt[:keep] + "".join(rng.choice("<|>\nabt") for _ in range(rng.randint(0, 5)))
        assert prompt_overlap(turn, generation_prompt) == _reference_overlap(turn, generation_prompt), (
            turn, generation_prompt)
        cases += 1
    assert cases == 20000


@pytest.mark.parametrize("text", ["  hi  ", "hi", "", "   ", "\nx\n", "a b"])
def test_strip_pieces_one_piece_shortcut_equals_the_general_cut(text: str) -> None:
    one = strip_pieces([prompt(text, 3)])
    # The general cut, forced by an empty media-free second piece that does not change the text.
    general = strip_pieces([prompt(text, 3), prompt("", 3)])
    assert text_of(one) == text_of(general) == text.strip()
    assert all(p.kind == "prompt" and p.message == 3 for p in one)


def test_strip_pieces_keeps_media_whole() -> None:
    pieces = [prompt("  a ", 1), media("<img>", "image", {"image": "x"}, 1), prompt(" ", 1)]
    out = strip_pieces(pieces)
    assert text_of(out) == "a <img>"
    assert out[-1] == Segment("<img>", "media", 1, ("image", {"image": "x"}))


def test_encode_batch_equals_offsets_path_on_the_corpus(tok: Any) -> None:
    records = [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines()]
    template = JinjaTemplate(CHATML)
    compared, failures = compare_fast_and_slow(template, tok, records, loss_policies=("all_assistant", "all"))
    assert compared >= 30
    assert not failures, "\n".join(failures[:5])


def test_chunked_threaded_encode_batch_equals_one_by_one(tok: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    records = [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines()]
    template = JinjaTemplate(CHATML)
    records = [r for r in records if _renders(template, r)] * 3
    monkeypatch.setattr(template_base, "_CHUNK", 7)  # many chunks: exercises the worker-thread pipeline
    batched = template.encode_batch(tok, records)
    one_by_one = [template.encode(OffsetsOnlyTokenizer(tok), r) for r in records]
    assert len(batched) == len(records) > 14
    for a, b in zip(batched, one_by_one, strict=True):
        assert (a.input_ids, a.labels, a.media, a.text) == (b.input_ids, b.labels, b.media, b.text)


def _renders(template: Any, record: dict) -> bool:
    try:
        template.render(record)
    except Exception:
        return False
    return True


@pytest.mark.parametrize("enabled", [True, False])
def test_encode_batch_restores_the_garbage_collector(tok: Any, enabled: bool) -> None:
    seen = []

    class Spy(JinjaTemplate):
        def layout(self, *args: Any, **kwargs: Any) -> Any:
            seen.append(gc.isenabled())
            return super().layout(*args, **kwargs)

    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        Spy(CHATML).encode_batch(tok, [{"messages": [{"role": "user", "content": "hi"}]}])
        assert seen == [False]  # paused while encoding
        assert gc.isenabled() is enabled  # and left as it was
    finally:
        (gc.enable if was else gc.disable)()
