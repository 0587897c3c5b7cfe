"""The quantization schemes of ``swiftcore export --quantize``: each is an llm-compressor recipe that writes a
compressed-tensors checkpoint (the format transformers and vLLM load).

Nothing here imports torch or llm-compressor until :func:`build_recipe` runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from swiftcore.api import SwiftcoreError

__all__ = ["SCHEMES", "Scheme", "build_recipe", "get_scheme"]


@dataclass(frozen=True)
class Scheme:
    """One ``--quantize`` choice.

    Attributes:
        name: the ``--quantize`` value.
        preset: the compressed-tensors preset the weights (and activations) follow.
        algorithm: ``"gptq"``, ``"smoothquant+gptq"``, ``"awq"`` or ``"rtn"`` (round to nearest, no calibration).
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


def build_recipe(scheme: Scheme, ignore: list[str], group_size: int = 128) -> list[Any]:
    """The llm-compressor modifiers that apply ``scheme`` to every ``Linear`` not matched by ``ignore``.

    ``ignore`` holds module names or ``re:``-prefixed regexes (llm-compressor's syntax).
    """
    from llmcompressor.modifiers.awq import AWQModifier
    from llmcompressor.modifiers.quantization import GPTQModifier, QuantizationModifier

    groups = _config_groups(scheme, group_size)
    if scheme.algorithm == "gptq":
        return [GPTQModifier(config_groups=groups, ignore=ignore)]
    if scheme.algorithm == "smoothquant+gptq":
        from llmcompressor.modifiers.transform.smoothquant import SmoothQuantModifier

        # 0.8: the strength llm-compressor's W8A8 examples use; moves activation outliers into the weights.
        return [SmoothQuantModifier(smoothing_strength=0.8), GPTQModifier(config_groups=groups, ignore=ignore)]
    if scheme.algorithm == "awq":
        return [AWQModifier(config_groups=groups, ignore=ignore)]
    return [QuantizationModifier(config_groups=groups, ignore=ignore)]
