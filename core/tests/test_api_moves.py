"""What left the core in plugin API 1.2 and 1.3 fails with the instruction of where it went, not a bare import error."""

from __future__ import annotations

import importlib
import sys

import pytest


def test_the_megatron_api_module_names_its_new_distribution() -> None:
    sys.modules.pop("swiftcore.api.megatron", None)
    with pytest.raises(ImportError, match=r"swiftcore-megatron .*from swiftcore_megatron import MegatronBridge"):
        importlib.import_module("swiftcore.api.megatron")


@pytest.mark.parametrize("name", ["Engine", "TransformersEngine"])
def test_the_engines_name_their_new_distribution(name: str) -> None:
    import swiftcore.api.infer as api_infer

    with pytest.raises(ImportError, match=rf"moved to swiftcore_infer\.{name}"):
        getattr(api_infer, name)
    with pytest.raises(AttributeError):
        api_infer.NotAThing  # noqa: B018 - other names stay plain attribute errors


def test_what_moved_is_where_the_message_says() -> None:
    from swiftcore_infer import Engine, TransformersEngine
    from swiftcore_megatron import COLUMN, MegatronBridge, Rule

    assert issubclass(TransformersEngine, Engine) and MegatronBridge and Rule and COLUMN


def test_importing_the_whole_api_imports_no_heavy_module() -> None:
    """Every ``swiftcore.api`` module is light: a plugin's option or spec module may import any of them."""
    import subprocess

    code = (
        "import importlib, pkgutil, sys\n"
        "import swiftcore.api as api\n"
        "for m in pkgutil.iter_modules(api.__path__):\n"
        "    if m.name != 'megatron':  # the moved-module notice: it raises on import\n"
        "        importlib.import_module('swiftcore.api.' + m.name)\n"
        "print(sorted(h for h in ('torch', 'transformers', 'megatron') if h in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("module", "name", "new_home"),
    [
        ("swiftcore.api.train", "SwiftTrainer", "swiftcore_train.trainer"),
        ("swiftcore.api.train", "start_run", "swiftcore_train.run"),
        ("swiftcore.api.train", "apply_tuner", "swiftcore_train.tuners"),
        ("swiftcore.api.train", "TrainConfig", "swiftcore_train.config"),
        ("swiftcore.api.train", "TrainResult", "swiftcore_train.config"),
        ("swiftcore.api.train", "run_training", "swiftcore_train.dispatch"),
        ("swiftcore.api.train", "load_rewards", "swiftcore_train.rewards"),
        ("swiftcore.api.infer", "Request", "swiftcore_infer.types"),
        ("swiftcore.api.infer", "create_engine", "swiftcore_infer.backends"),
        ("swiftcore.api.data", "load_records", "swiftcore_data"),
        ("swiftcore.api.models", "wrap_forward", "swiftcore_data.packed_layers"),
        ("swiftcore.api.media", "prepare_media", "swiftcore_media"),
        ("swiftcore.api.models", "load_processor_without_video", "swiftcore_media"),
        ("swiftcore.api.models", "make_tiny", "swiftcore_tiny"),
        ("swiftcore.api.models", "build_tiny_tokenizer", "swiftcore_tiny"),
        ("swiftcore.api.models", "part_problems", "swiftcore_testing.model_spec_checks"),
        ("swiftcore.api.models", "special_token_problems", "swiftcore_testing.model_spec_checks"),
    ],
)
def test_names_that_moved_in_api_1_3_say_where(module: str, name: str, new_home: str) -> None:
    """The training runtime and command (config, dispatch, rewards), the media processing and the tiny-checkpoint
    builders left the core in 1.3."""
    api_module = importlib.import_module(module)
    with pytest.raises(ImportError, match=rf"moved to {new_home}\.{name}"):
        getattr(api_module, name)
    assert getattr(importlib.import_module(new_home), name)  # and it is there
