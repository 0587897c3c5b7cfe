"""Sample conversations the contract renders, encodes, trains on and generates from.

A plugin's own samples (``tests/data/conversations.jsonl`` beside its contract test, or the file its
contract names) come first; the built-in ones below are plain text, so every chat template renders them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["BUILTIN_SAMPLES", "load_samples", "text_only"]

BUILTIN_SAMPLES: tuple[dict[str, Any], ...] = (
    {
        "id": "contract-single",
        "messages": [
            {"role": "user", "content": "What is the capital of France?"},
            {"role": "assistant", "content": "The capital of France is Paris."},
        ],
    },
    {
        "id": "contract-system-multi",
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Say hello."},
            {"role": "assistant", "content": "Hello!"},
            {"role": "user", "content": "Count to three, please."},
            {"role": "assistant", "content": "One, two, three."},
        ],
    },
    {
        "id": "contract-unicode",
        "messages": [
            {"role": "user", "content": "Translate 'cat' to German and add an emoji 🐱."},
            {"role": "assistant", "content": "Katze 🐱"},
        ],
    },
)


def load_samples(path: str | Path | None) -> list[dict[str, Any]]:
    """The records of the JSONL file ``path`` (when it exists) followed by :data:`BUILTIN_SAMPLES`."""
    from swiftcore_testing.templates import load_records

    own = load_records(path) if path is not None and Path(path).is_file() else []
    return [*own, *(dict(r) for r in BUILTIN_SAMPLES)]


def text_only(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records whose messages are all plain strings, without tools (what a tiny model trains on)."""
    return [
        r
        for r in records
        if not r.get("tools")
        and all(isinstance(m.get("content"), str) and set(m) <= {"role", "content"} for m in r["messages"])
    ]
