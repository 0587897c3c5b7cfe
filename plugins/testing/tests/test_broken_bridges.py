"""The contract catches bridges that a random-init tiny checkpoint hides: swapped norms, swapped q/k norms,
a rope base not read from config.json.

Each broken bridge is what a bridge author could write (a subclass of a working bridge), registered in
memory. The GPT ones convert the plain Qwen3 checkpoint that an in-memory model plugin's ``make_tiny``
writes; the Qwen3.5 one converts the installed Qwen3.5 model plugin's (``swiftcore make-tiny qwen3_5``). On
those checkpoints as written, norms are constants (ones; zeros for Qwen3.5's zero-centred norms) and the
rope base is transformers' default, so every broken bridge here gives transformers' logits exactly: the
contract's parity check passed them on such checkpoints until it perturbed a copy.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from swiftcore_testing.rules import ContractViolation

from swiftcore.api import BridgeSpec, ModelSpec, hookimpl

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("megatron") is None or importlib.util.find_spec("swiftcore_bridge_gpt") is None,
    reason="needs megatron-core and swiftcore-bridge-gpt",
)
#: The Qwen3.5 case needs its bridge and its model plugin (whose make_tiny the contract converts).
HAS_QWEN3_5 = all(importlib.util.find_spec(m) for m in ("swiftcore_bridge_qwen3_5", "swiftcore_plugin_qwen3_5"))

MODULE = "kit_broken_bridges"


def tiny_qwen3_config() -> Any:
    """A two-layer Qwen3 with q/k norms; every other value is transformers' default (rope_theta 10000)."""
    from transformers import Qwen3Config

    return Qwen3Config(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        vocab_size=256,
    )


def _swapped(rules: list[Any], a: str, b: str) -> list[Any]:
    """``rules`` with the HF sources of mcore tensors ``a`` and ``b`` exchanged."""
    sources = {r.mcore: r.hf for r in rules}
    swap = {a: sources[b], b: sources[a]}
    return [dataclasses.replace(r, hf=swap[r.mcore]) if r.mcore in swap else r for r in rules]


def _swapping_norms(base: type) -> type:
    """``base`` with each layer's input_layernorm and post_attention_layernorm mapped to each other's place."""

    class SwappedNorms(base):  # type: ignore[misc, valid-type]
        def rules(self) -> list[Any]:
            rules = super().rules()
            for i in range(self.num_layers):
                layer = f"decoder.layers.{i}."
                rules = _swapped(rules, layer + "input_layernorm.weight", layer + "pre_mlp_layernorm.weight")
            return rules

    return SwappedNorms


def _bridge_classes() -> dict[str, type]:
    """The working GPT bridge and the broken subclasses, by class name."""
    from swiftcore_bridge_gpt import GPTBridge

    SwappedNorms = _swapping_norms(GPTBridge)

    class SwappedQKNorms(GPTBridge):
        """q_norm mapped to k_layernorm and k_norm to q_layernorm."""

        def rules(self) -> list[Any]:
            rules = super().rules()
            for i in range(self.num_layers):
                attention = f"decoder.layers.{i}.self_attention."
                rules = _swapped(rules, attention + "q_layernorm.weight", attention + "k_layernorm.weight")
            return rules

    class DefaultRopeTheta(GPTBridge):
        """The rotary base hard-coded to the usual default instead of read from config.json."""

        def rope_theta(self) -> float:
            return 10000.0

    classes = {c.__name__: c for c in (GPTBridge, SwappedNorms, SwappedQKNorms, DefaultRopeTheta)}
    if HAS_QWEN3_5:
        from swiftcore.api import load_plugins, resolve

        Qwen3_5Bridge = resolve(load_plugins(env={}).registry.get("bridge", "qwen3_5").factory)

        classes["Qwen35SwappedNorms"] = _swapping_norms(Qwen3_5Bridge)
    return classes


class ModelPlugin:
    """A model plugin claiming ``qwen3``, so that the contract's tiny checkpoint is its ``make_tiny``'s."""

    SWIFTCORE_API = "1.0"

    @hookimpl
    def swiftcore_register_models(self) -> list[ModelSpec]:
        return [
            ModelSpec(
                name="kit_qwen3",
                model_types=("qwen3",),
                model_class="transformers:Qwen3ForCausalLM",
                tiny_config=f"{MODULE}:tiny_qwen3_config",
            )
        ]


class BridgePlugin:
    """One bridge spec per class of :func:`_bridge_classes`, named ``kit_<class>``."""

    SWIFTCORE_API = "1.0"

    @hookimpl
    def swiftcore_register_bridges(self) -> list[BridgeSpec]:
        return [
            BridgeSpec(
                name=f"kit_{name.lower()}",
                model_types=("qwen3_5",) if name.startswith("Qwen35") else ("qwen3",),
                factory=f"{MODULE}:{name}",
            )
            for name in _bridge_classes()
        ]


@pytest.fixture
def bridges(swiftcore_plugins: Any, register_plugin: Callable[..., Any], memory_module: Callable[..., Any]) -> Any:
    """The plugin set holding the model plugin and the bridges (``kit_bridges``)."""
    memory_module(MODULE, tiny_qwen3_config=tiny_qwen3_config, **_bridge_classes())
    register_plugin(ModelPlugin(), "kit_model")
    register_plugin(BridgePlugin(), "kit_bridges")
    return swiftcore_plugins


def test_the_working_bridge_passes_on_the_perturbed_checkpoint(bridges: Any, contract_for: Any, tmp_path: Path) -> None:
    """No false alarm: the perturbation (noise on every tensor, rope bases moved) keeps a correct bridge exact."""
    contract = contract_for("kit_bridges")
    contract.test_bridge_logit_parity("kit_gptbridge", bridges, tmp_path / "parity")
    contract.test_bridge_round_trip("kit_gptbridge", bridges, tmp_path / "round-trip")


@pytest.mark.parametrize(
    ("bridge", "says"),
    [
        (
            "kit_swappednorms",
            "a tensor it holds as a constant is mapped to another tensor's place or dropped",
        ),
        (
            "kit_swappedqknorms",
            "a tensor it holds as a constant is mapped to another tensor's place or dropped",
        ),
        ("kit_defaultropetheta", "the bridge does not take the rotary base from config.json"),
        pytest.param(
            "kit_qwen35swappednorms",
            "a tensor it holds as a constant is mapped to another tensor's place or dropped",
            marks=pytest.mark.skipif(not HAS_QWEN3_5, reason="needs the Qwen3.5 bridge and model plugins"),
        ),
    ],
    ids=["swapped-norms", "swapped-qk-norms", "default-rope-theta", "qwen3_5-make-tiny-swapped-norms"],
)
def test_broken_bridge_fails_logit_parity_saying_what_is_wrong(
    bridges: Any, contract_for: Any, tmp_path: Path, bridge: str, says: str
) -> None:
    with pytest.raises(ContractViolation) as caught:
        contract_for("kit_bridges").test_bridge_logit_parity(bridge, bridges, tmp_path)
    message = str(caught.value)
    assert message.startswith("contract rule 'bridge-logit-parity' broken"), message
    assert "logit parity FAILED" in message and says in message, message
    if "constant" in says:
        # The author is pointed at the tensors the tiny checkpoint held as constants: the norms among them.
        assert "layers.0.input_layernorm.weight" in message, message
