"""The encoder's fast path (span boundaries through the Rust encoding) equals the offsets path on the corpus."""

from __future__ import annotations

from pathlib import Path

from swiftcore_testing import build_test_tokenizer, compare_fast_and_slow, load_records

import swiftcore
from swiftcore.template import get_template

DATA = Path(__file__).parent / "data"


def test_fast_encode_equals_offsets_path() -> None:
    tpl = get_template("gemma4", swiftcore.load_plugins(["swiftcore-template-gemma"]))
    records = load_records(DATA / "conversations.jsonl")
    tok = build_test_tokenizer(tpl.spec.special_tokens, [tpl.render(r) for r in records], eos_token="<turn|>")
    compared, failures = compare_fast_and_slow(tpl, tok, records)
    assert compared >= 10
    assert not failures, "\n".join(failures[:5])
