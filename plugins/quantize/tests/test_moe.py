"""A quantized mixture-of-experts export says when plain transformers would load its experts wrongly.

With transformers 5.19 and llm-compressor 0.14, the tiny OLMoE exported with ``w4a16`` and its experts kept
(``--ignore 're:.*mlp\\.experts\\..*'``, what vLLM's CPU engine needs) loads in transformers with its fused experts
MISSING, i.e. random: the old export wrote it silently. The export now loads what it wrote and reports it (a warning
naming the fix, and ``transformers_load`` in ``swiftcore_quantize.json``); with the experts quantized the same check
finds every weight in place.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("llmcompressor")

pytestmark = pytest.mark.slow  # two calibrated exports of the tiny OLMoE

KEEP_EXPERTS = ("--ignore", r"re:.*mlp\.experts\..*")


def _export(model: Path, out: Path, *extra: str) -> tuple[dict, str]:
    from swiftcore_testing import run_cli

    text = run_cli(
        "export", "--model", str(model), "--to-hf", str(out), "--quantize", "w4a16",
        "--calibration-samples", "4", "--group-size", "16", *extra,
    )  # fmt: skip
    return json.loads((out / "swiftcore_quantize.json").read_text()), text


def _experts_moved(source: Path, out: Path) -> float:
    """The largest relative change of an expert weight between the source and ``out``, both loaded by transformers."""
    import transformers

    cls = transformers.OlmoeForCausalLM
    before = cls.from_pretrained(str(source), dtype=torch.float32).state_dict()
    after = cls.from_pretrained(str(out), dtype=torch.float32).state_dict()
    names = [n for n in before if ".experts." in n]
    assert names and all(n in after for n in names)
    return max(float((after[n] - before[n]).abs().max() / before[n].abs().max()) for n in names)


def test_kept_experts_that_transformers_loads_as_random_are_reported(
    tiny_model_dir: Callable[[str], Path], tmp_path: Path
) -> None:
    source = tiny_model_dir("olmoe")
    report, text = _export(source, tmp_path / "kept", *KEEP_EXPERTS)
    problem = report["transformers_load"]
    assert "random weights" in problem and "MISSING" in problem and ".experts" in problem, problem
    assert f"WARNING: {problem}" in text and "w4a16" in problem and "--ignore" in problem
    # The finding is real: the experts transformers loads are not the source's (kept experts would be bit-identical).
    moved = _experts_moved(source, tmp_path / "kept")
    print(f"olmoe w4a16, experts kept: transformers' experts differ from the source's by {moved:.2f} of their range")
    assert moved > 0.5

    report, text = _export(source, tmp_path / "quantized")
    assert report["transformers_load"] == "ok" and "WARNING" not in text
