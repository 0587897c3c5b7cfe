"""The quantization schemes of ``swiftcore export --quantize``: each is an llm-compressor recipe that writes a
compressed-tensors checkpoint (the format transformers and vLLM load).

Nothing here imports torch or llm-compressor until :func:`build_recipe` runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from swiftcore.api import SwiftcoreError

__all__ = ["SCHEMES", "Scheme", "build_recipe", "awq_mappings", "get_scheme", "smoothquant_mappings"]


@dataclass(frozen=True)
class Scheme:
    """One ``--quantize`` choice.

    Attributes:
        name: the ``--quantize`` value.
        preset: the compressed-tensors preset the weights (and activations) follow.
        algorithm: ``"gptq"``, ``"smoothquant+gptq"``, ``"awq"``, ``"rtn"`` (round to nearest, no calibration) or
            ``"static"`` (round to nearest, with static activation scales observed on calibration data).
        calibrated: whether the algorithm runs calibration data through the model.
        grouped: whether weights are quantized in groups of ``--group-size`` input columns.
        cpu_note: what running the checkpoint on a CPU machine can and cannot do (said after export).
        description: one line for ``--help``.
    """

    name: str
    preset: str
    algorithm: str
    calibrated: bool
    grouped: bool
    cpu_note: str
    description: str


SCHEMES: dict[str, Scheme] = {
    s.name: s
    for s in (
        Scheme(
            "w8a8-int8", "W8A8", "smoothquant+gptq", True, False,
            "int8 weights and per-token int8 activations: transformers and vLLM's CPU engine run it",
            "int8 weights and activations (SmoothQuant, then GPTQ)",
        ),
        Scheme(
            "w4a16", "W4A16", "gptq", True, True,
            "4-bit weights: transformers runs it (decompressed); vLLM's CPU engine runs dense layers only",
            "4-bit weights in groups, 16-bit activations (GPTQ)",
        ),
        Scheme(
            "awq", "W4A16_ASYM", "awq", True, True,
            "4-bit asymmetric weights: transformers runs it (decompressed); vLLM's CPU engine runs dense layers only",
            "4-bit asymmetric weights in groups (AWQ)",
        ),
        Scheme(
            "w8a16", "W8A16", "gptq", True, True,
            "8-bit weights: transformers runs it (decompressed)",
            "8-bit weights in groups, 16-bit activations (GPTQ)",
        ),
        Scheme(
            "fp8", "FP8_DYNAMIC", "rtn", False, False,
            "FP8 kernels need a GPU (Hopper or newer; vLLM's CPU engine refuses FP8); transformers on a CPU "
            "decompresses it to float; run it with scripts/gpu_check.sh quantize",
            "FP8 weights per channel, dynamic per-token FP8 activations (no calibration)",
        ),
        Scheme(
            "fp8-static", "FP8", "static", True, False,
            "FP8 kernels need a GPU (Hopper or newer; vLLM's CPU engine refuses FP8); transformers on a CPU "
            "decompresses it to float; run it with scripts/gpu_check.sh quantize",
            "FP8 weights per tensor, static per-tensor FP8 activation scales from calibration",
        ),
        Scheme(
            "nvfp4", "NVFP4", "static", True, False,
            "NVFP4 kernels need a Blackwell GPU (vLLM emulates them on Hopper); transformers on a CPU decompresses "
            "it to bfloat16: load it with dtype=torch.bfloat16 (float32 fails at the first matmul)",
            "FP4 (E2M1) weights and activations in groups of 16 with FP8 scales; activation global scales from "
            "calibration",
        ),
        Scheme(
            "nvfp4a16", "NVFP4A16", "rtn", False, False,
            "NVFP4 weight kernels need a GPU (vLLM: Blackwell natively, Marlin on Ampere and Hopper); transformers "
            "on a CPU decompresses it to bfloat16: load it with dtype=torch.bfloat16 (float32 fails at the first "
            "matmul)",
            "FP4 (E2M1) weights in groups of 16 with FP8 scales, 16-bit activations (no calibration)",
        ),
    )
}  # fmt: skip


def get_scheme(name: str) -> Scheme:
    """The :class:`Scheme` called ``name``; a :class:`SwiftcoreError` naming the known ones otherwise."""
    try:
        return SCHEMES[name]
    except KeyError:
        raise SwiftcoreError(f"--quantize {name!r}: unknown scheme; choose one of {', '.join(SCHEMES)}") from None


def _config_groups(scheme: Scheme, group_size: int) -> dict[str, Any]:
    from compressed_tensors.quantization import preset_name_to_scheme

    quant = preset_name_to_scheme(scheme.preset, ["Linear"])
    if scheme.grouped and quant.weights is not None:
        quant.weights.group_size = group_size
    return {"group_0": quant}


def _family_mappings(model: Any, dynamic: dict[str, Any], static: dict[str, Any]) -> list[Any] | None:
    """Layer mappings from llm-compressor's registries (``dynamic``: builders taking the model; ``static``: lists),
    keyed by causal-LM class name, for a ``model`` whose own class is in neither: its family's causal-LM entry, built
    on ``model`` itself. None: llm-compressor's own lookup applies."""
    from transformers import MODEL_FOR_CAUSAL_LM_MAPPING

    name = type(model).__name__
    if name in dynamic or name in static:
        return None
    causal = MODEL_FOR_CAUSAL_LM_MAPPING.get(type(model.config), None)
    if causal is None:
        return None
    if causal.__name__ in dynamic:
        built = dynamic[causal.__name__](model)
        if built is not None:
            return built
    return static.get(causal.__name__)


def smoothquant_mappings(model: Any) -> list[Any] | None:
    """SmoothQuant's layer mappings for ``model`` when llm-compressor would not find them itself: it looks them up
    by the class name of a causal LM (``Qwen3_5ForCausalLM``), so a head checkpoint's backbone
    (``Qwen3_5TextModel``, ``*ForSequenceClassification``) takes its family's causal-LM mappings, built on the
    model itself. None: llm-compressor's own lookup applies (a registered class, or no causal LM for the config).
    """
    from llmcompressor.modifiers.transform.smoothquant.dynamic_mappings import SMOOTHQUANT_DYNAMIC_MAPPING_REGISTRY
    from llmcompressor.modifiers.transform.smoothquant.utils import MAPPINGS_REGISTRY

    return _family_mappings(model, SMOOTHQUANT_DYNAMIC_MAPPING_REGISTRY, MAPPINGS_REGISTRY)


def awq_mappings(model: Any) -> list[Any] | None:
    """AWQ's layer mappings for ``model``, found as :func:`smoothquant_mappings` finds SmoothQuant's."""
    from llmcompressor.modifiers.transform.awq.dynamic_mappings import AWQ_DYNAMIC_MAPPING_REGISTRY
    from llmcompressor.modifiers.transform.awq.mappings import AWQ_MAPPING_REGISTRY

    return _family_mappings(model, AWQ_DYNAMIC_MAPPING_REGISTRY, AWQ_MAPPING_REGISTRY)


def build_recipe(scheme: Scheme, ignore: list[str], group_size: int = 128, model: Any = None) -> list[Any]:
    """The llm-compressor modifiers that apply ``scheme`` to every ``Linear`` not matched by ``ignore``.

    ``ignore`` holds module names or ``re:``-prefixed regexes (llm-compressor's syntax); ``model``, when given, is
    the model the recipe will run on (SmoothQuant's and AWQ's mappings are resolved for it, see
    :func:`smoothquant_mappings`).
    """
    from llmcompressor.modifiers.awq import AWQModifier
    from llmcompressor.modifiers.quantization import GPTQModifier, QuantizationModifier

    groups = _config_groups(scheme, group_size)
    if scheme.algorithm == "gptq":
        return [GPTQModifier(config_groups=groups, ignore=ignore)]
    if scheme.algorithm == "smoothquant+gptq":
        from llmcompressor.modifiers.transform.smoothquant import SmoothQuantModifier

        # 0.8: the strength llm-compressor's W8A8 examples use; moves activation outliers into the weights.
        mappings = smoothquant_mappings(model) if model is not None else None
        smooth = SmoothQuantModifier(smoothing_strength=0.8, mappings=mappings)
        return [smooth, GPTQModifier(config_groups=groups, ignore=ignore)]
    if scheme.algorithm == "awq":
        mappings = awq_mappings(model) if model is not None else None
        return [AWQModifier(config_groups=groups, ignore=ignore, mappings=mappings)]
    return [QuantizationModifier(config_groups=groups, ignore=ignore)]
