"""What left the core in plugin API 1.2 fails with the instruction of where it went, not a bare import error."""

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

    with pytest.raises(ImportError, match=rf"from swiftcore_infer import {name}"):
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
