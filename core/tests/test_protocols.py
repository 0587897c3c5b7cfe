"""The plugin interfaces (``swiftcore.api.protocols``): the core's base classes provide them, and the check the
contract kit runs (``references-conform``) catches an object that does not."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from swiftcore_infer import Engine
from swiftcore_megatron import MegatronBridge

from swiftcore.api.protocols import (
    REFERENCE_PROTOCOLS,
    BridgeProtocol,
    EngineProtocol,
    TemplateProtocol,
    conformance_problems,
    protocol_members,
)
from swiftcore.api.template import Template
from swiftcore.specs import SPEC_KINDS


@pytest.mark.parametrize(
    ("protocol", "base"), [(TemplateProtocol, Template), (EngineProtocol, Engine), (BridgeProtocol, MegatronBridge)]
)
def test_the_base_classes_provide_their_protocol(protocol: type, base: type) -> None:
    assert protocol_members(protocol), protocol
    assert conformance_problems(base, protocol, base.__name__) == []


def test_every_reference_field_has_an_expectation() -> None:
    fields = {(kind, name) for kind, cls in SPEC_KINDS.items() for name in cls._references}
    assert fields == set(REFERENCE_PROTOCOLS)


class _RendersOnly:
    def render(self, record, add_generation_prompt=False):
        return ""


def _run(cfg, plugins, options):
    return None


def _run_two(cfg, plugins):
    return None


def _make_template() -> _RendersOnly:
    return _RendersOnly()


@dataclass
class _Config:
    x: int = 1


def test_what_does_not_conform_is_named() -> None:
    missing = conformance_problems(_RendersOnly, TemplateProtocol, "template 't' factory")
    assert missing and "encode" in missing[0] and "parse_response" in missing[0]
    # A zero-argument factory function is called and its result checked.
    assert "encode" in conformance_problems(_make_template, TemplateProtocol, "f")[0]
    assert conformance_problems(_run, "callable:3", "run") == []
    assert "cannot be called with 3 argument(s)" in conformance_problems(_run_two, "callable:3", "run")[0]
    assert conformance_problems(_Config, "class", "config") == []
    assert "expected a class" in conformance_problems(_Config(), "class", "config")[0]
    assert "expected a callable" in conformance_problems(42, "callable:0", "probe")[0]
