"""Fixtures shared by the megatron engine's tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    """24 chats asking for a sum, the same wording each time (a model learns it within 10 steps)."""
    path = tmp_path_factory.mktemp("data") / "train.jsonl"
    rows = [
        {
            "messages": [
                {"role": "user", "content": f"What is {i} plus {2 * i + 1}?"},
                {"role": "assistant", "content": f"{i} plus {2 * i + 1} is {3 * i + 1}."},
            ]
        }
        for i in range(24)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
