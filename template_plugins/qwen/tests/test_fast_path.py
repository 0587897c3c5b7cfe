"""The encoder's fast path (span boundaries through the Rust encoding) equals the offsets path on the corpus."""

from __future__ import annotations

from typing import Any

import pytest
from swiftcore_testing import compare_fast_and_slow

from swiftcore.template import get_template


@pytest.mark.parametrize("name", ["qwen3", "qwen3_5", "qwen3_asr"])
def test_fast_encode_equals_offsets_path(name: str, plugins: Any, records: list[dict],
                                         tokenizers: dict[str, Any]) -> None:
    compared, failures = compare_fast_and_slow(get_template(name, plugins), tokenizers[name], records)
    assert compared >= 10
    assert not failures, "\n".join(failures[:5])
