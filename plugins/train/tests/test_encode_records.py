"""``encode_records``: chunked ``encode_batch`` gives what per-record ``encode`` gives; errors name file:line."""

from __future__ import annotations

import pytest
from swiftcore_train.config import TrainConfig
from swiftcore_train.run import ENCODE_CHUNK, encode_records

import swiftcore
from swiftcore.errors import SwiftcoreError


@pytest.fixture(scope="module")
def qwen(tiny_model_dir):
    from swiftcore.models import load_tokenizer
    from swiftcore.template import get_template

    plugins = swiftcore.load_plugins()
    model_dir = tiny_model_dir("qwen3_5")
    return get_template("qwen3_5", plugins), load_tokenizer(str(model_dir)), model_dir


def _records(n: int) -> list[dict]:
    return [
        {
            "messages": [
                {"role": "user", "content": f"question {i} " * (1 + i % 7)},
                {"role": "assistant", "content": f"answer {i}"},
            ],
            "_source": f"train.jsonl:{i + 1}",
        }
        for i in range(n)
    ]


def test_chunks_equal_record_by_record_encoding(qwen) -> None:
    template, tokenizer, model_dir = qwen
    cfg = TrainConfig(model=str(model_dir), dataset=("unused.jsonl",), max_length=64, truncation="drop")
    records = _records(ENCODE_CHUNK + 37)  # more than one chunk
    samples = encode_records(records, template, tokenizer, cfg)
    expected = [template.encode(tokenizer, r, max_length=64, truncation="drop") for r in records]
    kept = [{"input_ids": list(e.input_ids), "labels": list(e.labels)} for e in expected if e is not None]
    assert 0 < len(kept) < len(records)  # some dropped as too long, the rest kept in order
    assert samples == kept


def test_a_bad_record_in_a_later_chunk_is_named_by_file_and_line(qwen) -> None:
    template, tokenizer, model_dir = qwen
    cfg = TrainConfig(model=str(model_dir), dataset=("unused.jsonl",), max_length=64, truncation="error")
    records = _records(ENCODE_CHUNK + 10)
    short = [r for r in records if len(template.encode(tokenizer, r).input_ids) <= 64]
    bad = {
        "messages": [{"role": "user", "content": "long " * 200}, {"role": "assistant", "content": "x"}],
        "_source": "train.jsonl:999",
    }
    with pytest.raises(SwiftcoreError, match=r"^train\.jsonl:999: .*64"):
        encode_records([*short[:ENCODE_CHUNK], bad, *short[ENCODE_CHUNK:]], template, tokenizer, cfg)
