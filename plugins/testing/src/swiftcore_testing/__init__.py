"""swiftcore's test-kit for plugin authors and for swiftcore's own tests: the ``swiftcore-testing`` distribution.

Installing it registers it as a pytest plugin (entry point ``pytest11``, as pytest's own plugins are), so its
fixtures are there in every test run of that environment; importing it is cheap (no torch, no transformers).
A plugin author installs it next to their plugin (``pip install swiftcore-testing``), as a test dependency.

Contract tests (a plugin's own test file subclasses this in one line)::

    from swiftcore_testing import PluginContract

    class TestAcme(PluginContract):
        plugin = "acme"

Fixtures:
    swiftcore_plugins: a fresh :class:`~swiftcore.api.plugins.Plugins` holding only swiftcore's
        built-ins: no installed plugin leaks into the test.
    register_plugin: ``register_plugin(obj, name="x")`` adds a plugin object to ``swiftcore_plugins``
        for one test and removes it afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from swiftcore.api import lazy_exports
from swiftcore.api.plugins import ENV_PLUGINS, PluginInfo, Plugins, load_plugins

__all__ = [
    "ADD_TOOL",
    "COLOURS",
    "COLOUR_ANSWERS",
    "COLOUR_CHOICE",
    "RULES",
    "TOOL_PAIRS",
    "PluginContract",
    "ServerThread",
    "build_test_tokenizer",
    "check_labels",
    "check_batch_streams_logprobs_only_where_asked",
    "check_live_stream_logprobs",
    "check_train_serve_prefix",
    "colour_image",
    "colour_turns",
    "compare_fast_and_slow",
    "compare_with_official",
    "deploy_process",
    "failure_report",
    "forward_backward",
    "free_port",
    "generation_record",
    "grey_video",
    "held_out_accuracy",
    "isolated_plugins",
    "load_records",
    "lora_exclude_problems",
    "loss_runs",
    "make_tiny_qwen3",
    "pairwise_accuracy",
    "part_problems",
    "plain_completion_logits",
    "plugins_with_tiny_qwen3",
    "register_plugin",
    "registered",
    "run_cli",
    "run_swiftcore",
    "start_swiftcore",
    "sampled_logprobs",
    "special_token_problems",
    "swiftcore_plugins",
    "tool_question",
    "tool_rows",
    "train_tiny_lora",
    "user_env",
    "write_jsonl",
]


def isolated_plugins() -> Plugins:
    """A plugin set with swiftcore's built-ins only (``SWIFTCORE_PLUGINS`` set to empty)."""
    return load_plugins(env={ENV_PLUGINS: ""})


@contextmanager
def registered(plugins: Plugins, plugin: object, name: str, **provider: Any) -> Iterator[PluginInfo]:
    """Register ``plugin`` in ``plugins`` as ``name`` for the ``with`` block, then remove it.

    Args:
        plugins: the plugin set to add to.
        plugin: a module, class or instance with ``@hookimpl`` functions and ``SWIFTCORE_API``.
        name: the plugin name its specs are attributed to.
        **provider: ``distribution=`` / ``version=`` / ``explicit=`` as for :meth:`Plugins.add`.
    """
    info = plugins.add(plugin, name, **provider)
    try:
        yield info
    finally:
        plugins.remove(name)


@pytest.fixture
def swiftcore_plugins() -> Plugins:
    """A fresh plugin set holding only swiftcore's built-ins."""
    return isolated_plugins()


@pytest.fixture
def register_plugin(swiftcore_plugins: Plugins) -> Iterator[Callable[..., PluginInfo]]:
    """A function ``register(plugin, name="test_plugin", **provider)`` whose plugins are removed after the test."""
    added: list[str] = []

    def register(plugin: object, name: str = "test_plugin", **provider: Any) -> PluginInfo:
        info = swiftcore_plugins.add(plugin, name, **provider)
        added.append(name)
        return info

    yield register
    for name in reversed(added):
        if name in swiftcore_plugins.infos:
            swiftcore_plugins.remove(name)


# The contract and the helpers live in their own modules, imported on first use so the fixtures above stay cheap.
_WHERE = {
    "run_cli": "cli",
    "run_swiftcore": "forked",
    "start_swiftcore": "forked",
    "PluginContract": "contract",
    "ServerThread": "engines",
    "make_tiny_qwen3": "engines",
    "plugins_with_tiny_qwen3": "engines",
    "sampled_logprobs": "engines",
    "check_live_stream_logprobs": "engines",
    "check_batch_streams_logprobs_only_where_asked": "engines",
    "train_tiny_lora": "engines",
    "forward_backward": "model_spec_checks",
    "lora_exclude_problems": "model_spec_checks",
    "part_problems": "model_spec_checks",
    "special_token_problems": "model_spec_checks",
    "deploy_process": "processes",
    "failure_report": "processes",
    "free_port": "processes",
    "user_env": "processes",
    "RULES": "rules",
    "build_test_tokenizer": "templates",
    "check_labels": "templates",
    "check_train_serve_prefix": "templates",
    "compare_fast_and_slow": "templates",
    "compare_with_official": "templates",
    "generation_record": "templates",
    "load_records": "templates",
    "loss_runs": "templates",
    **dict.fromkeys(("ADD_TOOL", "TOOL_PAIRS", "tool_question", "tool_rows"), "tool_tasks"),
    **dict.fromkeys(
        (
            "COLOURS",
            "COLOUR_ANSWERS",
            "COLOUR_CHOICE",
            "colour_image",
            "colour_turns",
            "grey_video",
            "held_out_accuracy",
            "plain_completion_logits",
            "write_jsonl",
        ),
        "media_tasks",
    ),
    "pairwise_accuracy": "preference_checks",
}
__getattr__ = lazy_exports(__name__, _WHERE)
