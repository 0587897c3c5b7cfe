"""The bridge contract: HF -> Megatron-core -> HF round trip and logit parity on a tiny checkpoint.

The tiny HF checkpoint of a bridged ``model_type`` comes from a loaded model spec's ``make_tiny`` when
one claims that type, else from transformers' own config class shrunk with :data:`TINY_SIZES`. Whatever
its source, both checks run on a perturbed copy (:func:`swiftcore_megatron.perturb.perturb_checkpoint`,
seed :data:`PERTURB_SEED`): a random-init checkpoint holds its norm weights, biases and scalars as
constants and its rope base at the library default, so a bridge that swaps two norms, drops a bias or
ignores ``rope_theta`` would otherwise give transformers' logits exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = ["PERTURB_SEED", "TINY_SIZES", "parity_problems", "round_trip_problems", "tiny_hf_checkpoint"]

#: Sizes that shrink transformers' decoder configs (keys a config does not use are ignored by the model).
TINY_SIZES: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "moe_intermediate_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "vocab_size": 256,
    "num_experts": 4,
    "num_experts_per_tok": 2,
}

#: The noise seed of the perturbed copy both checks run on (fixed: a failure reproduces).
PERTURB_SEED = 0


def tiny_hf_checkpoint(
    model_type: str, out_dir: Path, plugins: PluginSet, overrides: dict[str, Any] | None = None
) -> Path:
    """A tiny random HF checkpoint of ``model_type`` in ``out_dir`` (as written: the checks perturb it).

    Args:
        model_type: the HF ``model_type`` a bridge converts.
        out_dir: where to write it.
        plugins: a loaded plugin set, or several searched in order (a model spec claiming ``model_type``
            with a ``tiny_config`` is used first).
        overrides: config values on top of :data:`TINY_SIZES` (only for the transformers fallback).
    """
    from swiftcore_tiny import make_tiny

    sets = list(plugins) if isinstance(plugins, Sequence) else [plugins]
    for plugin_set in sets:
        for spec in plugin_set.registry.all("model"):
            if model_type in spec.model_types and spec.tiny_config:
                return make_tiny(spec, out_dir, seed=0)
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(model_type, **{**TINY_SIZES, **(overrides or {})})
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).to(torch.float32)
    model.save_pretrained(str(out_dir))
    return out_dir


def _bridge(spec: Any, hf_dir: Path) -> Any:
    from swiftcore_megatron import make_bridge, read_hf_config

    return make_bridge(spec, read_hf_config(hf_dir))


def _perturbed(hf_dir: Path, out_dir: Path, *, weights: bool = True, rope: bool = True) -> Path:
    from swiftcore_megatron import perturb_checkpoint

    return perturb_checkpoint(hf_dir, out_dir, seed=PERTURB_SEED, weights=weights, rope=rope)


def round_trip_problems(spec: Any, hf_dir: Path, work: Path) -> list[str]:
    """Convert a perturbed copy of ``hf_dir`` to Megatron-core and back; every tensor must come back bit-exact."""
    from safetensors.torch import load_file
    from swiftcore_megatron import hf_to_mcore, mcore_to_hf

    hf = _perturbed(hf_dir, work / "hf-perturbed")
    bridge = _bridge(spec, hf)
    hf_to_mcore(hf, work / "mcore", bridge, bridge_name=spec.name)
    mcore_to_hf(work / "mcore", work / "back", bridge)
    before = {k: v for f in sorted(hf.glob("*.safetensors")) for k, v in load_file(f).items()}
    after = {k: v for f in sorted((work / "back").glob("*.safetensors")) for k, v in load_file(f).items()}
    problems = []
    if sorted(before) != sorted(after):
        problems.append(
            f"tensor names differ: lost {sorted(set(before) - set(after))[:5]}, "
            f"gained {sorted(set(after) - set(before))[:5]}"
        )
    problems.extend(
        f"{k} changed in the round trip" for k in sorted(set(before) & set(after)) if not before[k].equal(after[k])
    )
    return problems


def _parity(spec: Any, hf: Path, mcore: Path) -> Any:
    """The :class:`~swiftcore_megatron.parity.ParityReport` of ``spec``'s bridge on checkpoint ``hf``."""
    from swiftcore_megatron import check_parity, hf_to_mcore, load_mcore_state

    bridge = _bridge(spec, hf)
    hf_to_mcore(hf, mcore, bridge, bridge_name=spec.name)
    return check_parity(hf, bridge, load_mcore_state(mcore, bridge))


def parity_problems(spec: Any, hf_dir: Path, work: Path) -> list[str]:
    """The Megatron-core model built by the bridge must give transformers' logits (float32, TP 1) on a
    perturbed copy of ``hf_dir``; when it does not, the checkpoint is re-checked without parts of the
    perturbation to say what the bridge gets wrong (a tensor rule or the rope base)."""
    from swiftcore_megatron import ROPE_FACTOR

    report = _parity(spec, _perturbed(hf_dir, work / "hf-perturbed"), work / "mcore-parity")
    if report.ok:
        return []
    problems = [
        f"{report}, on the kit's perturbed copy of the tiny checkpoint (noise of seed {PERTURB_SEED} on every "
        f"tensor, every rope_theta in config.json times {ROPE_FACTOR})"
    ]
    return problems + [_diagnosis(spec, hf_dir, work)]


def _diagnosis(spec: Any, hf_dir: Path, work: Path) -> str:
    """What the failing parity points at, found by re-checking with less of the perturbation."""
    from swiftcore_megatron import constant_tensors

    weights_only = _perturbed(hf_dir, work / "hf-weights-only", rope=False)
    if _parity(spec, weights_only, work / "mcore-weights-only").ok:
        return (
            "with the checkpoint's own rope bases the logits agree: the bridge does not take the rotary base "
            "from config.json (a hard-coded or default rope_theta); read rope_parameters['rope_theta'] (or "
            "the per-layer-type rope_parameters) from the config"
        )
    if _parity(spec, Path(hf_dir), work / "mcore-as-written").ok:
        constant = constant_tensors(hf_dir)
        shown = ", ".join(constant[:6]) + (f" and {len(constant) - 6} more" if len(constant) > 6 else "")
        return (
            "on the checkpoint as written the logits agree, so a tensor it holds as a constant is mapped to "
            "another tensor's place or dropped (a swapped norm, a lost bias or scale); check the bridge's "
            f"rules for: {shown}"
        )
    return (
        "the logits differ on the checkpoint as written too: check the bridge's tensor rules (fused and "
        "interleaved layouts, transposes) and the config values it reads"
    )
