"""Bridge look-up by model_type, the export command's argument checks, atomic output directories."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from swiftcore_megatron import BridgeError, BridgeNotFoundError, CheckpointError
from swiftcore_megatron.resolve import find_bridge_spec, make_bridge, read_hf_config

from swiftcore import BridgeSpec, hookimpl
from swiftcore._atomic import atomic_output_dir


class _ToyBridgePlugin:
    SWIFTCORE_API = "1.0"

    @staticmethod
    @hookimpl
    def swiftcore_register_bridges() -> list[BridgeSpec]:
        return [
            BridgeSpec(name="toy", model_types=("toy", "toy2"), factory="swiftcore_megatron.bridge:MegatronBridge"),
            BridgeSpec(
                name="needy",
                model_types=("needy",),
                factory="swiftcore_megatron.bridge:MegatronBridge",
                requires=("swiftcore-no-such-package>=1",),
            ),
        ]


class _OtherToyPlugin:
    SWIFTCORE_API = "1.0"

    @staticmethod
    @hookimpl
    def swiftcore_register_bridges() -> list[BridgeSpec]:
        return [BridgeSpec(name="toy_too", model_types=("toy2",), factory="swiftcore_megatron.bridge:MegatronBridge")]


def test_bridge_found_by_model_type(swiftcore_plugins, register_plugin) -> None:
    register_plugin(_ToyBridgePlugin, name="toy_plugin")
    spec = find_bridge_spec("toy", swiftcore_plugins)
    assert spec.name == "toy" and spec.provider.plugin == "toy_plugin"
    bridge = make_bridge(spec, {"model_type": "toy", "vocab_size": 8})
    assert bridge.get("vocab_size") == 8


def test_no_bridge_names_installed_ones_and_what_to_install(swiftcore_plugins, register_plugin) -> None:
    register_plugin(_ToyBridgePlugin, name="toy_plugin")
    with pytest.raises(BridgeNotFoundError) as info:
        find_bridge_spec("qwen3_5", swiftcore_plugins)
    message = str(info.value)
    assert "model_type 'qwen3_5'" in message
    assert "toy (toy, toy2; toy_plugin)" in message
    assert "swiftcore plugins" in message and "pip install" not in message


def test_two_bridges_for_one_model_type_must_be_picked(swiftcore_plugins, register_plugin) -> None:
    register_plugin(_ToyBridgePlugin, name="toy_plugin")
    register_plugin(_OtherToyPlugin, name="other_plugin")
    with pytest.raises(BridgeError, match="several bridges convert model_type 'toy2': toy@toy_plugin, toy_too@other"):
        find_bridge_spec("toy2", swiftcore_plugins)
    assert find_bridge_spec("toy2", swiftcore_plugins, name="toy_too").provider.plugin == "other_plugin"


def test_unmet_bridge_requirement_says_what_to_install(swiftcore_plugins, register_plugin) -> None:
    register_plugin(_ToyBridgePlugin, name="toy_plugin")
    spec = find_bridge_spec("needy", swiftcore_plugins)
    with pytest.raises(BridgeError, match="pip install 'swiftcore-no-such-package>=1'"):
        make_bridge(spec, {"model_type": "needy"})


def test_bridge_get_names_the_missing_config_field() -> None:
    from swiftcore_megatron import MegatronBridge

    with pytest.raises(BridgeError, match="config.json .model_type 'x'. has no field num_experts / n_routed"):
        MegatronBridge({"model_type": "x"}).get("num_experts", "n_routed")


def test_read_hf_config_errors(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="config.json not found"):
        read_hf_config(tmp_path)
    (tmp_path / "config.json").write_text('{"a": 1,\n oops}')
    with pytest.raises(CheckpointError, match="line 2: not valid JSON"):
        read_hf_config(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8}))
    with pytest.raises(CheckpointError, match="field 'model_type' is missing"):
        read_hf_config(tmp_path)


def test_atomic_output_dir_renames_on_success_and_cleans_on_failure(tmp_path: Path) -> None:
    with atomic_output_dir(tmp_path / "ok") as tmp:
        (tmp / "f").write_text("x")
        assert not (tmp_path / "ok").exists()
    assert (tmp_path / "ok" / "f").read_text() == "x"
    with pytest.raises(RuntimeError), atomic_output_dir(tmp_path / "bad") as tmp:
        (tmp / "f").write_text("x")
        raise RuntimeError("interrupted")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ok"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give exactly one of --to-mcore, --to-hf, --merge-lora"),
        (["--to-mcore", "a", "--to-hf", "b"], "give exactly one of"),
        (["--to-hf", "b", "--tp", "2"], "--tp/--ep apply to --to-mcore"),
    ],
)
def test_export_usage_errors(tmp_path: Path, args: list[str], message: str) -> None:
    from swiftcore.cli.export_cmd import export

    result = CliRunner().invoke(export, ["--model", str(tmp_path), *args])
    assert result.exit_code == 2
    assert message in result.output
