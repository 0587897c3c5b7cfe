"""Backend look-up: the built-in transformers backend, probes, and clear errors for missing backends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from swiftcore_infer.backends import backend_spec, create_engine, probe_backend
from swiftcore_infer.errors import BackendUnavailableError

from swiftcore import BackendSpec, hookimpl
from swiftcore.errors import UnknownNameError


class _ToyBackends:
    """A plugin object providing backends whose probes refuse (or crash)."""

    SWIFTCORE_API = "1.0"

    @hookimpl
    def swiftcore_register_backends(self) -> list[BackendSpec]:
        return [
            BackendSpec(
                name="refuses",
                factory="swiftcore_infer.transformers_engine:create_engine",
                probe="swiftcore_testing.engines:TINY_QWEN3.upper",
            ),  # returns a non-empty string
            BackendSpec(
                name="crashes", factory="swiftcore_infer.transformers_engine:create_engine", probe="json:dumps"
            ),  # raises TypeError when called without arguments
        ]


def test_transformers_backend_is_this_plugin_s(infer_plugins: Any) -> None:
    spec = backend_spec("transformers", infer_plugins)
    assert spec.provider.distribution == "swiftcore-infer"
    assert probe_backend(spec) is None
    assert {"generate", "stream", "embed", "lora", "update_weights"} == set(spec.capabilities)


def test_create_engine_builds_the_transformers_engine(tiny_qwen3: Path, infer_plugins: Any) -> None:
    engine = create_engine("transformers", tiny_qwen3, infer_plugins, dtype="float32")
    assert engine.backend == "transformers" and engine.template.name == "qwen3"
    assert engine.generate([{"messages": [{"role": "user", "content": "hi"}]}], max_new_tokens=2)[0].ok


def test_unknown_backend_says_what_to_install(infer_plugins: Any, tiny_qwen3: Path) -> None:
    with pytest.raises(UnknownNameError, match=r"'nosuch'.*named like swiftcore-backend-<name>"):
        create_engine("nosuch", tiny_qwen3, infer_plugins)


def test_probes_that_refuse_or_crash_stop_the_engine_with_a_reason(infer_plugins: Any, tiny_qwen3: Path) -> None:
    infer_plugins.add(_ToyBackends(), "toy_backends", explicit=False)
    try:
        assert probe_backend(backend_spec("refuses", infer_plugins)) == "TINY_QWEN3"
        reason = probe_backend(backend_spec("crashes", infer_plugins))
        assert reason is not None and "TypeError" in reason
        with pytest.raises(BackendUnavailableError, match="'refuses'.*cannot run here: TINY_QWEN3"):
            create_engine("refuses", tiny_qwen3, infer_plugins)
    finally:
        infer_plugins.remove("toy_backends")
