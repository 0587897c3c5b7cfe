"""Training configuration: validation, YAML files, and the generated CLI flags."""

from __future__ import annotations

import dataclasses

import pytest
from click.testing import CliRunner
from swiftcore_train.command import train
from swiftcore_train.config import TrainConfig, load_config_file

from swiftcore import SwiftcoreError


def test_validate_lists_every_problem_at_once() -> None:
    cfg = TrainConfig(tuner="qlora", batch_size=0, packing=True, padding_free=True)
    with pytest.raises(SwiftcoreError) as info:
        cfg.validate()
    message = str(info.value)
    for fragment in ("--model", "--dataset", "--tuner: 'qlora'", "--batch-size", "--packing and --padding-free"):
        assert fragment in message


def test_config_file_keys_accept_dashes_and_reject_unknown_with_a_hint(tmp_path) -> None:
    good = tmp_path / "ok.yaml"
    good.write_text("model: ./m\nlora-rank: 4\ndataset: [a.jsonl]\n")
    assert load_config_file(good) == {"model": "./m", "lora_rank": 4, "dataset": ["a.jsonl"]}
    bad = tmp_path / "bad.yaml"
    bad.write_text("lora_rnak: 4\n")
    with pytest.raises(SwiftcoreError, match=r"bad\.yaml.*lora_rnak \(did you mean lora_rank\?\)"):
        load_config_file(bad)
    with pytest.raises(SwiftcoreError, match="no such file"):
        load_config_file(tmp_path / "missing.yaml")


def test_every_config_field_is_a_flag() -> None:
    flags = {opt for param in train.params for opt in param.opts}
    for f in dataclasses.fields(TrainConfig):
        # Filled by the CLI: --plugin, --config, and the options plugins add.
        if f.name not in ("plugins", "config_file", "recipe_options"):
            assert "--" + f.name.replace("_", "-") in flags, f.name
    assert {"--plugin", "--config"} <= flags


def test_cli_reports_invalid_arguments_before_loading_anything(tmp_path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("tuner: full\nbatch-size: 0\n")
    result = CliRunner().invoke(train, ["--config", str(config), "--model", "m"], standalone_mode=False)
    assert isinstance(result.exception, SwiftcoreError)
    assert "--batch-size: must be at least 1" in str(result.exception)
    assert "--dataset" in str(result.exception)
