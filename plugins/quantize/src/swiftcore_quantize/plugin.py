"""The swiftcore-plugin-quantize plugin: ``swiftcore export --model DIR --to-hf OUT --quantize SCHEME``.

Importing it imports neither torch, transformers nor llm-compressor: they load when an export runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from swiftcore.api import hookimpl
from swiftcore_quantize.schemes import SCHEMES

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

SWIFTCORE_API = "1.5"  # written against plugin API 1.5 (swiftcore_addoption with command="export")


@hookimpl
def swiftcore_addoption(parser: Any) -> None:
    """``swiftcore export``'s quantization options."""
    import click  # the CLI's own dependency, cheap; for the option types

    group = parser.getgroup("quantize", "Quantized export (--to-hf OUT --quantize SCHEME)", command="export")
    group.addoption(
        "--quantize",
        type=click.Choice(list(SCHEMES)),
        default=None,
        help="Quantize an HF checkpoint with llm-compressor into compressed-tensors (vLLM's format), written to "
        "--to-hf OUT: " + "; ".join(f"{s.name}: {s.description}" for s in SCHEMES.values()) + ".",
    )
    group.addoption(
        "--calibration-dataset",
        default=None,
        metavar="DATASET",
        help="Calibration data (a --dataset value), encoded by the model's template as training encodes it; "
        "default: a bundled set of 32 short chats.",
    )
    group.addoption(
        "--calibration-samples",
        default=128,
        type=click.IntRange(min=1),
        help="At most this many calibration samples.",
    )
    group.addoption(
        "--calibration-max-length", default=512, type=click.IntRange(min=8), help="Tokens per calibration sample."
    )
    group.addoption(
        "--ignore",
        multiple=True,
        metavar="MODULE",
        help="Keep this module in full precision (a name, or re:REGEX); repeatable. Always kept: the output head, "
        "and the model spec's routers, vision and audio towers.",
    )
    group.addoption(
        "--group-size",
        default=128,
        type=click.IntRange(min=1),
        help="Input columns per weight scale for the grouped schemes (w4a16, w8a16, awq).",
    )


@hookimpl(tryfirst=True)
def swiftcore_export_checkpoint(
    target: str, model: str, out: str, options: dict[str, Any], plugins: PluginSet
) -> bool | None:
    """Quantize ``model`` into ``out`` when ``--quantize`` is given (with ``--to-hf``); None otherwise.

    Runs before the Megatron conversion (``tryfirst``), which also answers ``--to-hf``: with ``--quantize``
    the input is an HF checkpoint, not a Megatron one.
    """
    scheme = options.get("quantize")
    if not scheme:
        return None
    if target != "hf":
        import click  # a usage error, reported as click reports the command's own (exit code 2)

        raise click.UsageError("--quantize writes with --to-hf OUT (from an HF checkpoint given as --model)")
    from swiftcore_quantize.export import quantize_checkpoint

    quantize_checkpoint(
        model,
        out,
        plugins,
        scheme=scheme,
        ignore=tuple(options.get("ignore") or ()),
        calibration_dataset=options.get("calibration_dataset"),
        num_samples=options.get("calibration_samples", 128),
        max_length=options.get("calibration_max_length", 512),
        group_size=options.get("group_size", 128),
        echo=options.get("echo", print),
    )
    return True
