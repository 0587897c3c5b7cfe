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


#: A "billion laughs": 339 bytes whose aliases expand to 9**9 strings under a real argument (each level lists
#: the one before nine times).
ALIAS_BOMB = (
    "dataset:\n  - &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]\n"
    + "".join(f"  - &{b} [{','.join([f'*{a}'] * 9)}]\n" for a, b in zip("abcdefg", "bcdefgh", strict=True))
    + f"  - [{','.join(['*h'] * 9)}]\n"
)


def test_a_yaml_alias_bomb_is_refused_before_it_expands(tmp_path) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(ALIAS_BOMB)
    assert len(ALIAS_BOMB) < 400
    with pytest.raises(SwiftcoreError, match=r"bomb\.yaml': its YAML aliases \(\*name\) expand to 4\d{8} values"):
        load_config_file(bomb)
    result = CliRunner().invoke(train, ["--config", str(bomb)], standalone_mode=False)
    assert isinstance(result.exception, SwiftcoreError) and "write the values out" in str(result.exception)
    cycle = tmp_path / "cycle.yaml"
    cycle.write_text("dataset: &a [a.jsonl, *a]\n")
    with pytest.raises(SwiftcoreError, match="expand without end"):
        load_config_file(cycle)
    deep = tmp_path / "deep.yaml"
    deep.write_text("dataset: " + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(SwiftcoreError, match="deep.yaml': nested too deeply"):
        load_config_file(deep)


def test_yaml_aliases_within_the_bound_still_work(tmp_path) -> None:
    config = tmp_path / "ok.yaml"
    config.write_text("model: &m ./m\ndataset: [*m, a.jsonl]\ntarget_modules: &t [q_proj, k_proj]\n")
    assert load_config_file(config) == {
        "model": "./m",
        "dataset": ["./m", "a.jsonl"],
        "target_modules": ["q_proj", "k_proj"],
    }
