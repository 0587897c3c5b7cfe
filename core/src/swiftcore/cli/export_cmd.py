"""``swiftcore export``: convert checkpoints (HF <-> Megatron-core through a bridge plugin, merge LoRA).

The bridge is chosen by the checkpoint's ``config.json`` ``model_type`` among the installed bridge
plugins (``--bridge NAME`` overrides). torch and megatron are imported only once a conversion runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from swiftcore.cli.main import CliState, pass_state, plugin_option
from swiftcore.errors import SwiftcoreError

__all__ = ["export"]


def _size(value: str) -> int:
    """``5GB`` / ``500MB`` / ``1048576`` -> bytes."""
    units = {"KB": 1024, "MB": 1024**2, "GB": 1024**3, "TB": 1024**4}
    text = value.strip().upper()
    for unit, factor in units.items():
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * factor)
    return int(text)


def _bridge(state: CliState, plugin_specs: tuple[str, ...], hf_config: dict[str, Any], name: str | None) -> Any:
    from swiftcore.megatron.resolve import resolve_bridge

    spec, bridge = resolve_bridge(hf_config, state.plugins(plugin_specs), name)
    click.echo(f"bridge: {spec.name} ({spec.provider})")
    return spec, bridge


@click.command("export")
@click.option(
    "--model",
    "model",
    required=True,
    type=click.Path(exists=True, file_okay=False),
    help="Input: an HF save_pretrained dir (--to-mcore), a Megatron checkpoint (--to-hf), "
    "or for --merge-lora a peft adapter dir (its base read from adapter_config.json) or, with --adapter, the base.",
)
@click.option(
    "--adapter",
    type=click.Path(exists=True, file_okay=False),
    help="With --merge-lora: the peft LoRA adapter directory; --model is then its base model "
    "(as for infer and deploy).",
)
@click.option("--to-mcore", "to_mcore", type=click.Path(), help="Write a Megatron-core checkpoint here.")
@click.option("--to-hf", "to_hf", type=click.Path(), help="Write a Hugging Face checkpoint here.")
@click.option(
    "--merge-lora",
    "merge_lora",
    type=click.Path(),
    help="Merge the LoRA adapter into its base model and write the full model here.",
)
@click.option("--tp", default=1, show_default=True, type=click.IntRange(min=1), help="Tensor-parallel size.")
@click.option("--ep", default=1, show_default=True, type=click.IntRange(min=1), help="Expert-parallel size.")
@click.option(
    "--bridge",
    "bridge_name",
    default=None,
    metavar="NAME[@PLUGIN]",
    help="Use this bridge instead of the one matching config.json's model_type.",
)
@click.option(
    "--check-parity",
    is_flag=True,
    help="Run the HF and Megatron models on the same tokens in float32 and compare logits.",
)
@click.option("--max-shard-size", default="5GB", show_default=True, help="Largest safetensors shard (--to-hf).")
@plugin_option
@pass_state
def export(
    state: CliState,
    plugin_specs: tuple[str, ...],
    model: str,
    adapter: str | None,
    to_mcore: str | None,
    to_hf: str | None,
    merge_lora: str | None,
    tp: int,
    ep: int,
    bridge_name: str | None,
    check_parity: bool,
    max_shard_size: str,
) -> None:
    """Convert checkpoints: HF -> Megatron-core, Megatron-core -> HF, or merge a LoRA adapter.

    \b
    Examples:
      swiftcore export --model ./qwen3 --to-mcore ./mcore --tp 2 --check-parity
      swiftcore export --model ./mcore --to-hf ./qwen3-back
      swiftcore export --model ./out/checkpoint-100 --merge-lora ./merged
      swiftcore export --model ./base --adapter ./out/checkpoint-100 --merge-lora ./merged

    Outputs are written atomically: a failed conversion leaves no output directory.
    """
    chosen = [
        flag for flag, value in (("--to-mcore", to_mcore), ("--to-hf", to_hf), ("--merge-lora", merge_lora)) if value
    ]
    if len(chosen) != 1:
        raise click.UsageError("give exactly one of --to-mcore, --to-hf, --merge-lora")
    if adapter and not merge_lora:
        raise click.UsageError("--adapter goes with --merge-lora (the adapter to merge into --model)")
    if merge_lora:
        from swiftcore.models.adapters import merge_lora as do_merge

        out = do_merge(model, merge_lora, state.plugins(plugin_specs), adapter=adapter)
        click.echo(f"merged LoRA adapter into its base: {out}")
        return
    if to_mcore:
        from swiftcore.models.manifest import read_manifest, warn_mismatches

        # A swiftcore checkpoint's manifest: warn when it was trained with other plugin versions.
        warn_mismatches(read_manifest(model), state.plugins(plugin_specs))
        _to_mcore(state, plugin_specs, Path(model), Path(to_mcore), tp, ep, bridge_name, check_parity)
    else:
        if tp != 1 or ep != 1:
            raise click.UsageError("--tp/--ep apply to --to-mcore; --to-hf reads the layout from the checkpoint")
        _to_hf(state, plugin_specs, Path(model), Path(to_hf or ""), bridge_name, check_parity, _size(max_shard_size))


def _to_mcore(
    state: CliState,
    plugin_specs: tuple[str, ...],
    model: Path,
    out: Path,
    tp: int,
    ep: int,
    bridge_name: str | None,
    check_parity: bool,
) -> None:
    from swiftcore.megatron.convert import hf_to_mcore
    from swiftcore.megatron.resolve import read_hf_config

    spec, bridge = _bridge(state, plugin_specs, read_hf_config(model), bridge_name)
    if ep > 1 and "ep" not in spec.parallelism:
        raise SwiftcoreError(f"bridge {spec.name!r} does not support expert parallelism (--ep); use --ep 1")
    result = hf_to_mcore(model, out, bridge, tp=tp, ep=ep, bridge_name=spec.name)
    _report(result)
    if check_parity and tp > 1 and ep == 1:
        from swiftcore.megatron.parity import check_parity_tp

        _verdict(check_parity_tp(model, out, bridge, tp))
    elif check_parity:
        from swiftcore.megatron.convert import load_mcore_state

        _parity(model, bridge, load_mcore_state(out, bridge))


def _to_hf(
    state: CliState,
    plugin_specs: tuple[str, ...],
    mcore: Path,
    out: Path,
    bridge_name: str | None,
    check_parity: bool,
    max_shard_bytes: int,
) -> None:
    from swiftcore.megatron.checkpoint import HF_SUBDIR, read_metadata
    from swiftcore.megatron.convert import mcore_to_hf
    from swiftcore.megatron.resolve import read_hf_config

    meta = read_metadata(mcore)
    _, bridge = _bridge(state, plugin_specs, read_hf_config(mcore / HF_SUBDIR), bridge_name or None)
    result = mcore_to_hf(mcore, out, bridge, max_shard_bytes=max_shard_bytes)
    _report(result)
    click.echo(f"(from tp={meta['tp']}, ep={meta['ep']})")
    if check_parity:
        from swiftcore.megatron.convert import load_mcore_state

        _parity(out, bridge, load_mcore_state(mcore, bridge))


def _report(result: Any) -> None:
    mb = result.bytes / 1024**2
    click.echo(
        f"wrote {result.out_dir}: {result.tensors} tensors, {mb:.1f} MB in {result.seconds:.2f} s "
        f"({', '.join(result.files[:4])}{' ...' if len(result.files) > 4 else ''})"
    )


def _parity(hf_dir: Path, bridge: Any, mcore_state: dict[str, Any]) -> None:
    from swiftcore.megatron.parity import check_parity

    _verdict(check_parity(hf_dir, bridge, mcore_state))


def _verdict(report: Any) -> None:
    click.echo(str(report))
    if not report.ok:
        raise SwiftcoreError(
            f"{report}. The converted checkpoint was written but does not reproduce the HF model; "
            "report this with the bridge name and config.json"
        )
