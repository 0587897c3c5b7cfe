"""Fixtures for the mimo template's tests: the plugins, the corpus and a small tokenizer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from swiftcore_testing import build_test_tokenizer, load_records

import swiftcore
from swiftcore.template import get_template, official_chat_template

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="session", autouse=True)
def _hub_offline() -> Iterator[None]:
    """Set ``HF_HUB_OFFLINE=1`` for the session, so a stray Hub lookup fails instead of waiting on the network."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        yield


@pytest.fixture(scope="session")
def plugins() -> Any:
    """Only this distribution's plugin (and the core's built-ins)."""
    return swiftcore.load_plugins(["swiftcore-template-mimo"])


@pytest.fixture(scope="session")
def records() -> list[dict]:
    """The reference corpus (a copy of template_plugins/qwen/tests/data/conversations.jsonl) and
    MiMo's own cases (mimo_cases.jsonl: thinking on/off, default system prompt, tools with a system turn)."""
    return load_records(DATA / "conversations.jsonl") + load_records(DATA / "mimo_cases.jsonl")


@pytest.fixture(scope="session")
def tokenizer(plugins: Any, records: list[dict]) -> Any:
    """A byte-level BPE tokenizer with the template's special tokens and the official chat template."""
    tpl = get_template("mimo_v2", plugins)
    texts = []
    for record in records:
        try:
            texts.append(tpl.render(record))
        except swiftcore.SwiftcoreError:
            pass
    return build_test_tokenizer(tpl.spec.special_tokens, texts, chat_template=official_chat_template(tpl.spec),
                                eos_token="<|im_end|>")
