"""Model resolution: explicit type, args file, hook, config.json, and the errors users see."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from swiftcore import ModelSpec, hookimpl
from swiftcore.models import (
    AmbiguousModelError,
    MissingConfigError,
    ModelResolutionError,
    UnknownModelTypeError,
    resolve_model_spec,
)


def _spec(name: str, model_types: tuple[str, ...] = (), architectures: tuple[str, ...] = ()) -> ModelSpec:
    return ModelSpec(
        name=name,
        model_types=model_types,
        architectures=architectures,
        model_class="transformers:AutoModelForCausalLM",
    )


class _Plugin:
    """A plugin object whose specs are given per instance (pluggy accepts instances)."""

    SWIFTCORE_API = "1.0"

    def __init__(self, *specs: ModelSpec, answer: str | None = None) -> None:
        self._specs = list(specs)
        self._answer = answer

    @hookimpl
    def swiftcore_register_models(self) -> list[ModelSpec]:
        return self._specs

    @hookimpl
    def swiftcore_resolve_model(self, model_dir: str, hf_config: dict, candidates: list) -> str | None:
        return self._answer


def _checkpoint(tmp_path: Path, config: dict | None = None, args: dict | None = None) -> Path:
    directory = tmp_path / "ckpt"
    directory.mkdir()
    if config is not None:
        (directory / "config.json").write_text(json.dumps(config))
    if args is not None:
        (directory / "swiftcore_args.json").write_text(json.dumps(args))
    return directory


@pytest.fixture
def zoo(swiftcore_plugins, register_plugin):
    """Two plugins: 'alpha' claims model_type alpha; 'beta' claims beta and the BetaForCausalLM architecture."""
    register_plugin(_Plugin(_spec("alpha", ("alpha",), ("AlphaForCausalLM",))), name="plug_a")
    register_plugin(_Plugin(_spec("beta", ("beta", "beta_text"), ("BetaForCausalLM",))), name="plug_b")
    return swiftcore_plugins


def test_config_model_type_matches_claiming_spec(zoo, tmp_path: Path) -> None:
    directory = _checkpoint(tmp_path, {"model_type": "beta_text", "architectures": ["Whatever"]})
    spec = resolve_model_spec(directory, zoo)
    assert (spec.name, spec.provider.plugin) == ("beta", "plug_b")


def test_config_architectures_when_model_type_unclaimed(zoo, tmp_path: Path) -> None:
    directory = _checkpoint(tmp_path, {"model_type": "custom", "architectures": ["AlphaForCausalLM"]})
    assert resolve_model_spec(directory, zoo).name == "alpha"


def test_explicit_model_type_wins_over_config(zoo, tmp_path: Path) -> None:
    directory = _checkpoint(tmp_path, {"model_type": "alpha"})
    assert resolve_model_spec(directory, zoo, model_type="beta").name == "beta"
    # An HF model_type is accepted too, and so is name@plugin.
    assert resolve_model_spec(directory, zoo, model_type="beta_text").name == "beta"
    assert resolve_model_spec(directory, zoo, model_type="beta@plug_b").provider.plugin == "plug_b"


def test_args_file_wins_over_config(zoo, tmp_path: Path) -> None:
    directory = _checkpoint(tmp_path, {"model_type": "alpha"}, args={"model_type": "beta", "lr": 1e-4})
    assert resolve_model_spec(directory, zoo).name == "beta"


def test_hook_answers_before_config(zoo, register_plugin, tmp_path: Path) -> None:
    register_plugin(_Plugin(answer="beta"), name="resolver")
    directory = _checkpoint(tmp_path, {"model_type": "alpha"})
    assert resolve_model_spec(directory, zoo).name == "beta"


def test_every_step_is_logged(zoo, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    directory = _checkpoint(tmp_path, {"model_type": "alpha"})
    with caplog.at_level(logging.DEBUG, logger="swiftcore.models"):
        resolve_model_spec(directory, zoo)
    text = caplog.text
    assert "no swiftcore_args.json" in text
    assert "swiftcore_resolve_model hook" in text
    assert "config.json matched model 'alpha'" in text


def test_two_plugins_claiming_one_model_type_is_an_error_naming_both(zoo, register_plugin, tmp_path: Path) -> None:
    register_plugin(
        _Plugin(_spec("alpha_community", ("alpha",))), name="plug_c", distribution="alpha-community", version="0.0.1"
    )
    directory = _checkpoint(tmp_path, {"model_type": "alpha"})
    with pytest.raises(AmbiguousModelError) as err:
        resolve_model_spec(directory, zoo)
    message = str(err.value)
    assert "'alpha' from plug_a" in message
    assert "'alpha_community' from plug_c (alpha-community 0.0.1)" in message
    assert "--model-type" in message
    # Architectures narrow the candidates: only 'alpha' claims AlphaForCausalLM.
    (directory / "config.json").write_text(json.dumps({"model_type": "alpha", "architectures": ["AlphaForCausalLM"]}))
    assert resolve_model_spec(directory, zoo).name == "alpha"


def test_same_spec_name_from_two_plugins_is_ambiguous_until_picked(zoo, register_plugin, tmp_path: Path) -> None:
    register_plugin(_Plugin(_spec("beta", ("beta",))), name="plug_fork")
    directory = _checkpoint(tmp_path, {"model_type": "alpha"})
    with pytest.raises(AmbiguousModelError, match="plug_b.*plug_fork|plug_fork.*plug_b"):
        resolve_model_spec(directory, zoo, model_type="beta")
    assert resolve_model_spec(directory, zoo, model_type="beta@plug_fork").provider.plugin == "plug_fork"


def test_unknown_model_type_names_the_plugin_to_install(zoo, tmp_path: Path) -> None:
    directory = _checkpoint(tmp_path, {"model_type": "gemma9", "architectures": ["Gemma9ForCausalLM"]})
    with pytest.raises(UnknownModelTypeError) as err:
        resolve_model_spec(directory, zoo)
    assert "model_type 'gemma9'" in str(err.value)
    assert "swiftcore-plugin-<family>" in str(err.value) and "pip install" not in str(err.value)
    assert str(directory / "config.json") in str(err.value)


def test_unknown_explicit_type_names_the_plugin_to_install(zoo, tmp_path: Path) -> None:
    directory = _checkpoint(tmp_path, {"model_type": "alpha"})
    with pytest.raises(UnknownModelTypeError, match=r"qwen3_asr.*swiftcore-plugin-<family>"):
        resolve_model_spec(directory, zoo, model_type="qwen3_asr")


def test_missing_config_json_names_the_path(zoo, tmp_path: Path) -> None:
    directory = _checkpoint(tmp_path)
    with pytest.raises(MissingConfigError) as err:
        resolve_model_spec(directory, zoo)
    assert str(directory / "config.json") in str(err.value)
    assert "does not exist" in str(err.value)


def test_missing_directory_is_a_clear_error(zoo, tmp_path: Path) -> None:
    with pytest.raises(MissingConfigError, match="does not exist"):
        resolve_model_spec(tmp_path / "nope", zoo)


def test_broken_args_file_names_the_file(zoo, tmp_path: Path) -> None:
    directory = _checkpoint(tmp_path, {"model_type": "alpha"})
    (directory / "swiftcore_args.json").write_text("{not json")
    with pytest.raises(ModelResolutionError, match="swiftcore_args.json: not valid JSON"):
        resolve_model_spec(directory, zoo)
