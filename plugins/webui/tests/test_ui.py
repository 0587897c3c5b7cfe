"""What the page's buttons do (:class:`swiftcore_webui.ui.WebUI`), without a browser: every path is confined to the
root before anything runs, and the listings come from the loaded plugins and the CLI."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from swiftcore_webui.paths import PathRefused, Root
from swiftcore_webui.ui import TrainSettings, WebUI, default_output, parse_json_output


@pytest.fixture(scope="module")
def plugins() -> Any:
    from swiftcore.api.plugins import load_plugins

    return load_plugins(env={})


@pytest.fixture
def ui(tmp_path: Path, plugins: Any) -> Iterator[WebUI]:
    root = tmp_path / "root"
    (root / "model").mkdir(parents=True)
    (root / "model" / "config.json").write_text(json.dumps({"model_type": "qwen3_5"}))
    (root / "data.jsonl").write_text("{}\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "data.jsonl").write_text("{}\n")
    (root / "escape").symlink_to(tmp_path / "outside")
    web = WebUI(Root.at(root), plugins)
    yield web
    web.shutdown()
    assert not web.workdir.exists()


def _settings(**changes: Any) -> TrainSettings:
    return TrainSettings(**{"model": "model", "dataset": "data.jsonl", "output_dir": "runs/a", **changes})


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"model": "../outside"}, "model folder '../outside' resolves outside the root"),
        ({"model": "escape"}, "resolves outside the root"),
        ({"model": "missing"}, "does not exist under the root"),
        ({"dataset": "escape/data.jsonl"}, "dataset 'escape/data.jsonl' resolves outside the root"),
        ({"dataset": "/etc/hostname"}, "resolves outside the root"),
        ({"dataset": "model"}, "is a folder; a file is needed"),
        ({"output_dir": "escape/run"}, "output folder 'escape/run' resolves outside the root"),
        ({"output_dir": "."}, "not the root itself"),
        ({"output_dir": "model"}, "is not empty"),
        ({"tuner": "qlora"}, "full or lora"),
        ({"max_steps": 0}, "max steps: at least 1"),
        ({"learning_rate": 0.0}, "above 0"),
        ({"eval_every": 5}, "choose the questions to score"),
        ({"eval_every": -1}, "0 \\(off\\) or a number of steps"),
        ({"eval_every": 5, "eval_dataset": "escape/data.jsonl"}, "eval questions 'escape/data.jsonl' resolves outside"),
        ({"eval_every": 5, "eval_dataset": "missing.jsonl"}, "does not exist under the root"),
    ],
)
def test_training_refuses_before_starting_anything(ui: WebUI, changes: dict, message: str) -> None:
    with pytest.raises((PathRefused, ValueError), match=message):
        ui.start_training(_settings(**changes))
    assert ui.train_run is None


def test_make_tiny_and_export_refuse_paths_outside(ui: WebUI, tmp_path: Path) -> None:
    with pytest.raises(PathRefused, match="resolves outside the root"):
        ui.make_tiny("qwen3_5", "escape/tiny")
    with pytest.raises(PathRefused, match="not the root itself"):
        ui.make_tiny("qwen3_5", ".")
    with pytest.raises(ValueError, match="family 'nope': pick one of"):
        ui.make_tiny("nope", "tiny")
    with pytest.raises(PathRefused, match="has no adapter_config.json"):
        ui.merge_lora("model", "merged")
    # A LoRA checkpoint inside whose base model (adapter_config.json) lies outside the root.
    (tmp_path / "outside" / "base").mkdir()
    (tmp_path / "outside" / "base" / "config.json").write_text(json.dumps({"model_type": "qwen3_5"}))
    adapter = ui.root.path / "lora"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(
        json.dumps({"peft_type": "LORA", "base_model_name_or_path": str(tmp_path / "outside" / "base")})
    )
    with pytest.raises(PathRefused, match=r"its base model \(adapter_config.json\) .* resolves outside the root"):
        ui.merge_lora("lora", "merged")
    with pytest.raises(PathRefused, match=r"its base model \(adapter_config.json\) .* resolves outside the root"):
        ui.load_model("lora")
    with pytest.raises(PathRefused, match="resolves outside the root"):
        ui.load_model("escape")
    (adapter / "adapter_config.json").write_text(
        json.dumps({"peft_type": "LORA", "base_model_name_or_path": str(ui.root.path / "model")})
    )
    with pytest.raises(PathRefused, match="output folder 'model' exists"):
        ui.merge_lora("lora", "model")


def test_families_and_tiny_families_come_from_the_plugins(ui: WebUI) -> None:
    rows = {row["family"]: row for row in ui.families()}
    assert {"qwen3_5", "gemma4", "qwen3_asr"} <= set(rows)
    assert rows["gemma4"]["modalities"] == "text, image, audio"
    assert rows["qwen3_5"]["make-tiny"] == "yes"
    tiny = ui.tiny_families()
    assert tiny[0] == "qwen3_5"  # the demo's family first (ModelSpec.demo)
    assert set(tiny) == {name for name, row in rows.items() if row["make-tiny"] == "yes"}


def test_plugins_table_is_the_cli_listing(ui: WebUI) -> None:
    rows = {row["name"]: row for row in ui.plugins_table()}
    assert rows["webui"]["distribution"] == "swiftcore-webui"
    assert rows["webui"]["provides"] == "command: web-ui"
    assert "model: qwen3_5" in rows["qwen3_5"]["provides"]


def test_parse_json_output_skips_log_lines() -> None:
    assert parse_json_output('warning: x {not json}\n{"a": {"b": 1}}\n') == {"a": {"b": 1}}
    assert parse_json_output("no json here") is None


def test_default_output_picks_a_free_name(ui: WebUI) -> None:
    assert default_output(ui.root, "model") == "model-2"
    assert default_output(ui.root, "runs/run") == "runs/run"


def test_evaluation_during_training_adds_the_train_options(ui: WebUI) -> None:
    """A form that evaluates every N steps runs ``swiftcore train --eval-every N --eval-dataset FILE --best-metric
    eval_accuracy``; the default form evaluates nothing."""
    plain = ui.start_training(_settings())
    plain.job.stop()
    assert "--eval-every" not in plain.job.args
    run = ui.start_training(_settings(output_dir="runs/b", eval_every=5, eval_dataset="data.jsonl"))
    run.job.stop()
    args = run.job.args
    at = args.index("--eval-every")
    assert args[at : at + 6] == [
        "--eval-every", "5", "--eval-dataset", str(ui.root.path / "data.jsonl"), "--best-metric", "eval_accuracy",
    ]  # fmt: skip
