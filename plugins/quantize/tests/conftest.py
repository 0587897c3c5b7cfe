"""Fixtures of swiftcore-plugin-quantize's tests: tiny checkpoints fully fine-tuned on four made-up facts (so their
greedy answers are known), and their quantized exports, each built once per session."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

# Four short, made-up facts (as tests/test_tiny_lora_learns.py): nothing a random model could guess.
FACTS = [
    ("What is the capital of Zorbia?", "Plimsk."),
    ("Who painted the Blue Moth?", "Anna Verro."),
    ("How many legs has a quib?", "Seven."),
    ("What colour is a tarn fruit?", "Deep violet."),
]
RECORDS = [{"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]} for q, a in FACTS]
# Full fine-tuning, all four facts in each batch: enough for the tiny models to answer every fact greedily.
STEPS, LEARNING_RATE = 40, "3e-3"


@pytest.fixture(scope="session")
def plugins() -> Any:
    """The installed plugins (no SWIFTCORE_PLUGINS from the environment)."""
    import swiftcore

    return swiftcore.load_plugins(env={})


@pytest.fixture(scope="session")
def records() -> list[dict[str, Any]]:
    """The facts as chat records."""
    return RECORDS


@pytest.fixture(scope="session")
def facts_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """:data:`RECORDS` as a chat jsonl (training data, and calibration data for the exports)."""
    path = tmp_path_factory.mktemp("facts") / "facts.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    return path


@pytest.fixture(scope="session")
def trained(tiny_model_dir: Callable[[str], Path], facts_file: Path, tmp_path_factory: pytest.TempPathFactory):
    """``trained("qwen3_5")``: the family's tiny checkpoint after ``swiftcore train --tuner full`` on the facts."""
    from swiftcore_testing import run_cli

    made: dict[str, Path] = {}

    def get(family: str) -> Path:
        if family not in made:
            run = tmp_path_factory.mktemp(f"train-{family}") / "run"
            run_cli(
                "train", "--model", str(tiny_model_dir(family)), "--dataset", str(facts_file),
                "--output-dir", str(run), "--tuner", "full", "--max-steps", str(STEPS),
                "--batch-size", str(len(RECORDS)), "--learning-rate", LEARNING_RATE, "--lr-scheduler", "constant",
                "--save-steps", str(STEPS), "--no-plot", "--seed", "0",
            )  # fmt: skip
            made[family] = run / f"checkpoint-{STEPS}"
        return made[family]

    return get


@pytest.fixture(scope="session")
def exported(trained: Callable[[str], Path], facts_file: Path, tmp_path_factory: pytest.TempPathFactory):
    """``exported("qwen3_5", "w4a16", "--group-size", "16")``: the trained checkpoint after
    ``swiftcore export --to-hf OUT --quantize SCHEME`` (calibrated on the facts), and the command's output."""
    from swiftcore_testing import run_cli

    made: dict[tuple[str, ...], tuple[Path, str]] = {}

    def get(family: str, scheme: str, *extra: str) -> tuple[Path, str]:
        key = (family, scheme, *extra)
        if key not in made:
            out = tmp_path_factory.mktemp(f"q-{family}-{scheme}") / "out"
            text = run_cli(
                "export", "--model", str(trained(family)), "--to-hf", str(out), "--quantize", scheme,
                "--calibration-dataset", str(facts_file), "--calibration-samples", "4", *extra,
            )  # fmt: skip
            made[key] = (out, text)
        return made[key]

    return get
