"""Fixtures for the qwen templates' tests: the plugins, the corpus and small tokenizers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from swiftcore_testing import build_test_tokenizer, load_records

import swiftcore
from swiftcore.template import get_template, official_chat_template

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="session")
def plugins() -> Any:
    """Only this distribution's plugin (and the core's built-ins)."""
    return swiftcore.load_plugins(["swiftcore-template-qwen"])


@pytest.fixture(scope="session")
def records() -> list[dict]:
    """The reference corpus (a copy of ../shared/reference/conversations.jsonl)."""
    return load_records(DATA / "conversations.jsonl")


@pytest.fixture(scope="session")
def tokenizers(plugins: Any, records: list[dict]) -> dict[str, Any]:
    """name -> a byte-level BPE tokenizer with the template's special tokens and official chat template."""
    out = {}
    for name in ("qwen3", "qwen3_5", "qwen3_asr"):
        tpl = get_template(name, plugins)
        texts = []
        for record in records:
            try:
                texts.append(tpl.render(record))
            except swiftcore.SwiftcoreError:
                pass
        out[name] = build_test_tokenizer(tpl.spec.special_tokens, texts, chat_template=official_chat_template(
            tpl.spec), eos_token="<|im_end|>")
    return out
