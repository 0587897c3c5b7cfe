"""``swiftcore export``: convert checkpoints (HF <-> Megatron-core, merge LoRA), all through plugins.

The command parses the options and calls the ``swiftcore_export_checkpoint`` hook: ``--to-mcore`` / ``--to-hf``
are ``swiftcore-megatron``'s (which every Megatron bridge plugin requires), ``--merge-lora`` is
``swiftcore-infer``'s, so the core holds no conversion code. torch and megatron load only once one runs.
"""

from __future__ import annotations

from typing import Any

import click

from swiftcore.cli.main import CliState, PluginOptionsCommand, pass_state, plugin_option
from swiftcore.errors import SwiftcoreError

__all__ = ["export"]


@click.command("export", cls=PluginOptionsCommand)
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
    **plugin_options: Any,
) -> None:
    """Convert checkpoints: HF -> Megatron-core, Megatron-core -> HF, or merge a LoRA adapter.

    \b
    Examples:
      swiftcore export --model ./qwen3 --to-mcore ./mcore --tp 2 --check-parity
      swiftcore export --model ./mcore --to-hf ./qwen3-back
      swiftcore export --model ./out/checkpoint-100 --merge-lora ./merged
      swiftcore export --model ./base --adapter ./out/checkpoint-100 --merge-lora ./merged

    Outputs are written atomically: a failed conversion leaves no output directory. The plugin that converts
    adds its own options (swiftcore-megatron: --tp, --ep, --bridge, --check-parity, --max-shard-size).
    """
    chosen = [
        flag for flag, value in (("--to-mcore", to_mcore), ("--to-hf", to_hf), ("--merge-lora", merge_lora)) if value
    ]
    if len(chosen) != 1:
        raise click.UsageError("give exactly one of --to-mcore, --to-hf, --merge-lora")
    if adapter and not merge_lora:
        raise click.UsageError("--adapter goes with --merge-lora (the adapter to merge into --model)")
    plugins = state.plugins(plugin_specs)
    if to_mcore:
        from swiftcore.models.manifest import read_manifest, warn_mismatches

        # A swiftcore checkpoint's manifest: warn when it was trained with other plugin versions.
        warn_mismatches(read_manifest(model), plugins)
    target, out = ("mcore", to_mcore) if to_mcore else ("merged", merge_lora) if merge_lora else ("hf", to_hf or "")
    options = {"adapter": adapter, **plugin_options, "echo": click.echo}
    done = plugins.pm.hook.swiftcore_export_checkpoint(
        target=target, model=model, out=out, options=options, plugins=plugins
    )
    if not done:
        flag, dist = (
            ("--merge-lora", "swiftcore-infer") if target == "merged" else (f"--to-{target}", "swiftcore-megatron")
        )
        raise SwiftcoreError(
            f"no installed plugin converts checkpoints for {flag}: it is the {dist} plugin's (pip install {dist}); "
            "`swiftcore plugins` lists what is installed"
        )
