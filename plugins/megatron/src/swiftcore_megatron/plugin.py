"""The swiftcore-megatron plugin: ``swiftcore export --to-mcore`` / ``--to-hf`` through the installed bridges, and
``swiftcore infer`` / ``deploy`` / ``eval`` of a Megatron checkpoint (exported to a cached HF one first)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swiftcore.api import SwiftcoreError, hookimpl

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

SWIFTCORE_API = "1.5"  # written against plugin API 1.5: the package face uses swiftcore.api.lazy_exports

#: The ``--to-*`` targets of ``swiftcore export`` this plugin converts to.
TARGETS = ("mcore", "hf")


@hookimpl
def swiftcore_addoption(parser: Any) -> None:
    """``swiftcore export``'s conversion options: the parallel layout to write, the bridge, the parity check."""
    import click  # the CLI's own dependency, cheap; for the option types

    group = parser.getgroup("megatron", "Megatron-core conversion (--to-mcore, --to-hf)", command="export")
    group.addoption("--tp", default=1, type=click.IntRange(min=1), help="Tensor-parallel size (--to-mcore).")
    group.addoption("--ep", default=1, type=click.IntRange(min=1), help="Expert-parallel size (--to-mcore).")
    group.addoption(
        "--bridge",
        default=None,
        metavar="NAME[@PLUGIN]",
        help="Use this bridge, not the one config.json's model_type names.",
    )
    group.addoption(
        "--check-parity",
        is_flag=True,
        help="Run the HF and Megatron models on the same tokens in float32 and compare logits.",
    )
    group.addoption("--max-shard-size", default="5GB", help="Largest safetensors shard (--to-hf): 5GB, 500MB or bytes.")


def shard_bytes(value: str) -> int:
    """``5GB`` / ``500MB`` / ``1048576`` -> bytes (``--max-shard-size``)."""
    units = {"KB": 1024, "MB": 1024**2, "GB": 1024**3, "TB": 1024**4}
    text = str(value).strip().upper()
    try:
        for unit, factor in units.items():
            if text.endswith(unit):
                return int(float(text[: -len(unit)]) * factor)
        return int(text)
    except ValueError:
        raise SwiftcoreError(f"--max-shard-size {value!r}: give a size such as 5GB, 500MB or a byte count") from None


@hookimpl
def swiftcore_export_checkpoint(
    target: str, model: str, out: str, options: dict[str, Any], plugins: PluginSet
) -> bool | None:
    """Convert ``model`` to ``target`` (``"mcore"`` or ``"hf"``) at ``out``; None for targets not ours.

    ``options`` holds this plugin's export options (``tp``, ``ep``, ``bridge``, ``check_parity``,
    ``max_shard_size``) and ``echo`` (how to print), as the core's ``export`` command parsed them.
    """
    if target not in TARGETS:
        return None
    if target == "hf" and (options.get("tp", 1) != 1 or options.get("ep", 1) != 1):
        import click  # a usage error, reported as click reports the command's own (exit code 2)

        raise click.UsageError("--tp/--ep apply to --to-mcore; --to-hf reads the layout from the checkpoint")
    from swiftcore_megatron.export import export_to_hf, export_to_mcore

    echo = options.get("echo", print)
    if target == "mcore":
        export_to_mcore(
            Path(model),
            Path(out),
            plugins,
            tp=options.get("tp", 1),
            ep=options.get("ep", 1),
            bridge_name=options.get("bridge"),
            check_parity=options.get("check_parity", False),
            echo=echo,
        )
    else:
        export_to_hf(
            Path(model),
            Path(out),
            plugins,
            bridge_name=options.get("bridge"),
            check_parity=options.get("check_parity", False),
            max_shard_bytes=shard_bytes(options.get("max_shard_size", "5GB")),
            echo=echo,
        )
    return True


# optionalhook: swiftcore-infer declares the hook; without it installed this plugin still loads (export only).
@hookimpl(optionalhook=True)
def swiftcore_infer_prepare_checkpoint(model_dir: str, plugins: PluginSet, echo: Callable[[str], None]) -> str | None:
    """A Megatron checkpoint given to ``infer`` / ``deploy`` / ``eval --model``: its HF export, made into the cache
    once and reused while the checkpoint is unchanged (:mod:`swiftcore_megatron.serving`); None for other
    directories."""
    from swiftcore_megatron.serving import prepare_for_serving

    return prepare_for_serving(model_dir, plugins, echo)
