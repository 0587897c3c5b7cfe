"""``--recipe kto`` without ``--batch-size`` trains with the recipe's default batch (8), not ``swiftcore train``'s
default of 1, which its KL estimate cannot use; a batch of 1 that was asked for (flag or ``--config`` file) is
still refused, with a message that says what to do."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from click.testing import CliRunner

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _kto(tiny: Path, out: Path, *extra: str) -> list[str]:
    """``swiftcore train --recipe kto`` on the example pairs, one step."""
    return ["train", "--recipe", "kto", "--model", str(tiny), "--dataset", str(EXAMPLES / "vowels.jsonl"),
            "--output-dir", str(out), "--max-steps", "1", "--no-plot", *extra]  # fmt: skip


def _invoke(args: list[str]) -> object:
    from swiftcore.api.cli import cli

    return CliRunner().invoke(cli, args, env={"SWIFTCORE_PLUGINS": None, "SWIFTCORE_PLUGINS_STRICT": None})


def test_kto_without_batch_size_trains_with_the_recipe_default(
    tiny_model_dir, run_cli, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "kto"
    with caplog.at_level(logging.INFO, logger="swiftcore.preference"):
        output = run_cli(*_kto(tiny_model_dir("qwen3_5"), out))
    assert "trained 1 steps" in output, output
    assert json.loads((out / "args.json").read_text())["swiftcore_args"]["batch_size"] == 8
    said = [r.getMessage() for r in caplog.records if "--batch-size not given" in r.getMessage()]
    assert said and "8 rows a batch" in said[0], caplog.text


def test_kto_given_batch_size_is_kept(tiny_model_dir, run_cli, tmp_path: Path) -> None:
    out = tmp_path / "kto"
    run_cli(*_kto(tiny_model_dir("qwen3_5"), out, "--batch-size", "3"))
    assert json.loads((out / "args.json").read_text())["swiftcore_args"]["batch_size"] == 3


@pytest.mark.parametrize("where", ["flag", "config"])
def test_kto_batch_of_one_asked_for_is_refused(tiny_model_dir, tmp_path: Path, where: str) -> None:
    extra = ["--batch-size", "1"]
    if where == "config":
        (tmp_path / "run.yaml").write_text("batch_size: 1\n")
        extra = ["--config", str(tmp_path / "run.yaml")]
    result = _invoke(_kto(tiny_model_dir("qwen3_5"), tmp_path / "kto", *extra))
    assert result.exit_code != 0
    message = str(result.exception) + result.output
    assert "--batch-size 1" in message and "leave --batch-size out" in message, message
    assert not (tmp_path / "kto" / "checkpoint-1").exists()


def test_outside_the_command_the_config_value_is_the_callers() -> None:
    from swiftcore_recipe_preference.kto import batch_size_given, kto_batch_size
    from swiftcore_train import TrainConfig

    cfg = TrainConfig(model="m", dataset=("d",), recipe="kto")
    assert batch_size_given() and kto_batch_size(cfg) is cfg  # from Python: batch_size=1 is refused later, not changed
