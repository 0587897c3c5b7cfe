"""The swiftcore-megatron plugin: ``swiftcore export --to-mcore`` / ``--to-hf`` through the installed bridges."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from swiftcore.api import hookimpl

SWIFTCORE_API = "1.5"  # written against plugin API 1.5: the package face uses swiftcore.api.lazy_exports

#: The ``--to-*`` targets of ``swiftcore export`` this plugin converts to.
TARGETS = ("mcore", "hf")


@hookimpl
def swiftcore_export_checkpoint(
    target: str, model: str, out: str, options: dict[str, Any], plugins: Any
) -> bool | None:
    """Convert ``model`` to ``target`` (``"mcore"`` or ``"hf"``) at ``out``; None for targets not ours.

    ``options`` holds ``tp``, ``ep``, ``bridge``, ``check_parity``, ``max_shard_bytes`` and ``echo`` (how to
    print), as the core's ``export`` command parsed them.
    """
    if target not in TARGETS:
        return None
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
            max_shard_bytes=options.get("max_shard_bytes", 5 * 1024**3),
            echo=echo,
        )
    return True
