"""``HeadSpec.saved_as`` is read: the kit's ``head-save-load`` rule checks a saved head is in the promised format."""

from __future__ import annotations

import json
from pathlib import Path

from swiftcore_testing.head_checks import saved_format_problems


def _saved(tmp_path: Path, architectures: list[str], *, modules: bool = False) -> Path:
    (tmp_path / "config.json").write_text(json.dumps({"architectures": architectures}))
    if modules:
        (tmp_path / "modules.json").write_text("[]")
    return tmp_path


def test_a_head_saved_in_its_promised_format_passes(tmp_path: Path) -> None:
    out = _saved(tmp_path, ["Qwen3ForSequenceClassification"])
    assert saved_format_problems(out, "transformers-sequence-classification") == []
    assert saved_format_problems(out, None) == []  # nothing promised, nothing checked
    assert saved_format_problems(out, "swiftcore-score") == []  # a format the kit does not know


def test_a_head_saved_otherwise_than_promised_is_named(tmp_path: Path) -> None:
    out = _saved(tmp_path, ["Qwen3ForCausalLM"])
    (problem,) = saved_format_problems(out, "transformers-sequence-classification")
    assert "Qwen3ForCausalLM" in problem and "AutoModelForSequenceClassification would not load it" in problem
    (problem,) = saved_format_problems(out, "sentence-transformers")
    assert "no modules.json" in problem
    assert saved_format_problems(_saved(tmp_path, [], modules=True), "sentence-transformers") == []
