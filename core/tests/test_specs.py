"""Spec dataclasses: frozen, validated, and errors that name the field."""

from __future__ import annotations

import dataclasses

import pytest

from swiftcore import (
    BackendSpec,
    BridgeSpec,
    CommandSpec,
    HeadSpec,
    ModelParts,
    ModelSpec,
    Provider,
    SpecError,
    TemplateSpec,
)


def test_model_spec_is_frozen_and_keeps_defaults() -> None:
    spec = ModelSpec(name="qwen3_5", model_types=("qwen3_5",), model_class="transformers:AutoModelForCausalLM")
    assert spec.lora_target_modules == ("all-linear",)
    assert spec.parts == ModelParts()
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.name = "other"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"name": "Bad Name", "model_types": ("x",), "model_class": "a:b"}, "name"),
        ({"name": "x@y", "model_types": ("x",), "model_class": "a:b"}, "name"),
        ({"name": "x", "model_class": "a:b"}, "model_types"),
        ({"name": "x", "model_types": ("x",)}, "model_class"),
        ({"name": "x", "model_types": ("x",), "model_class": "not a reference"}, "model_class"),
        ({"name": "x", "model_types": ["x"], "model_class": "a:b"}, "model_types"),
        ({"name": "x", "model_types": ("x",), "model_class": "a:b", "requires": ("torch>>2",)}, "requires"),
        ({"name": "x", "model_types": ("x",), "model_class": "a:b", "tasks": ("dance",)}, "tasks"),
        ({"name": "x", "model_types": ("x",), "model_class": "a:b", "parts": {"vision_tower": ()}}, "parts"),
        ({"name": "x", "model_types": ("x",), "model_class": "a:b", "demo": True}, "demo"),  # not makeable tiny
        ({"name": "x", "model_types": ("x",), "model_class": "a:b", "demo": "yes"}, "demo"),
    ],
)
def test_model_spec_validation_names_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(SpecError) as info:
        ModelSpec(**kwargs)
    assert info.value.field == field
    assert f"field {field!r}" in str(info.value)


@pytest.mark.parametrize(
    ("cls", "kwargs", "field"),
    [
        (TemplateSpec, {"name": "t"}, "factory"),
        (TemplateSpec, {"name": "t", "factory": "a:b", "supports": ("telepathy",)}, "supports"),
        (HeadSpec, {"name": "h", "task": "segmentation", "factory": "a:b"}, "task"),
        (HeadSpec, {"name": "h", "task": "embedding", "factory": "a:b", "pooling": ("max",)}, "pooling"),
        (BridgeSpec, {"name": "b", "factory": "a:B"}, "model_types"),
        (BackendSpec, {"name": "vllm", "factory": "a:b", "capabilities": ("fly",)}, "capabilities"),
        (BackendSpec, {"name": "vllm", "factory": "a:b", "probe": "nope"}, "probe"),
        (CommandSpec, {"name": "hello"}, "target"),
    ],
)
def test_other_specs_validate(cls: type, kwargs: dict, field: str) -> None:
    with pytest.raises(SpecError) as info:
        cls(**kwargs)
    assert info.value.field == field


def test_with_provider_returns_a_stamped_copy() -> None:
    spec = TemplateSpec(name="t", factory="a:b")
    stamped = spec.with_provider(Provider("acme", "swiftcore-plugin-acme", "0.3.1"))
    assert spec.provider is None
    assert stamped.provider == Provider("acme", "swiftcore-plugin-acme", "0.3.1")
    assert str(stamped.provider) == "acme (swiftcore-plugin-acme 0.3.1)"
    assert stamped == spec  # the provider does not take part in equality
