"""``swiftcore export --to-mcore`` / ``--to-hf``: the conversion, run for the core's ``export`` command.

The core's ``export`` command parses the options and calls the ``swiftcore_export_checkpoint`` hook; this
module is what the hook runs. The bridge is chosen by the checkpoint's ``config.json`` ``model_type`` among
the installed bridge plugins (``--bridge NAME`` overrides). torch and megatron are imported only once a
conversion runs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swiftcore.api import SwiftcoreError

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = ["export_to_hf", "export_to_mcore"]

Echo = Callable[[str], None]


def _bridge(plugins: PluginSet, hf_config: dict[str, Any], name: str | None, echo: Echo) -> tuple[Any, Any]:
    from swiftcore_megatron.resolve import resolve_bridge

    spec, bridge = resolve_bridge(hf_config, plugins, name)
    echo(f"bridge: {spec.name} ({spec.provider})")
    return spec, bridge


def export_to_mcore(
    model: Path,
    out: Path,
    plugins: PluginSet,
    *,
    tp: int = 1,
    ep: int = 1,
    bridge_name: str | None = None,
    check_parity: bool = False,
    echo: Echo = print,
) -> None:
    """Convert the HF checkpoint ``model`` into a Megatron-core checkpoint at ``out`` (tp x ep shards).

    Raises:
        SwiftcoreError: the bridge does not support ``--ep``, or ``check_parity`` finds other logits.
    """
    from swiftcore_megatron.convert import hf_to_mcore
    from swiftcore_megatron.resolve import read_hf_config

    spec, bridge = _bridge(plugins, read_hf_config(model), bridge_name, echo)
    if ep > 1 and "ep" not in spec.parallelism:
        raise SwiftcoreError(f"bridge {spec.name!r} does not support expert parallelism (--ep); use --ep 1")
    result = hf_to_mcore(model, out, bridge, tp=tp, ep=ep, bridge_name=spec.name)
    _report(result, echo)
    if check_parity and tp > 1 and ep == 1:
        from swiftcore_megatron.parity import check_parity_tp

        _verdict(check_parity_tp(model, out, bridge, tp), echo)
    elif check_parity:
        from swiftcore_megatron.convert import load_mcore_state

        _parity(model, bridge, load_mcore_state(out, bridge), echo)


def export_to_hf(
    mcore: Path,
    out: Path,
    plugins: PluginSet,
    *,
    bridge_name: str | None = None,
    check_parity: bool = False,
    max_shard_bytes: int = 5 * 1024**3,
    echo: Echo = print,
) -> None:
    """Convert the Megatron-core checkpoint ``mcore`` (any tp/ep layout) back into an HF checkpoint at ``out``."""
    from swiftcore_megatron.checkpoint import HF_SUBDIR, read_metadata
    from swiftcore_megatron.convert import mcore_to_hf
    from swiftcore_megatron.resolve import read_hf_config

    meta = read_metadata(mcore)
    _, bridge = _bridge(plugins, read_hf_config(mcore / HF_SUBDIR), bridge_name or None, echo)
    result = mcore_to_hf(mcore, out, bridge, max_shard_bytes=max_shard_bytes)
    _report(result, echo)
    echo(f"(from tp={meta['tp']}, ep={meta['ep']})")
    if check_parity:
        from swiftcore_megatron.convert import load_mcore_state

        _parity(out, bridge, load_mcore_state(mcore, bridge), echo)


def _report(result: Any, echo: Echo) -> None:
    mb = result.bytes / 1024**2
    echo(
        f"wrote {result.out_dir}: {result.tensors} tensors, {mb:.1f} MB in {result.seconds:.2f} s "
        f"({', '.join(result.files[:4])}{' ...' if len(result.files) > 4 else ''})"
    )


def _parity(hf_dir: Path, bridge: Any, mcore_state: dict[str, Any], echo: Echo) -> None:
    from swiftcore_megatron.parity import check_parity

    _verdict(check_parity(hf_dir, bridge, mcore_state), echo)


def _verdict(report: Any, echo: Echo) -> None:
    echo(str(report))
    if not report.ok:
        raise SwiftcoreError(
            f"{report}. The converted checkpoint was written but does not reproduce the HF model; "
            "report this with the bridge name and config.json"
        )
