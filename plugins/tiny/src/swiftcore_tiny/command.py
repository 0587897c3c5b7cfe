"""``swiftcore make-tiny``: write a tiny random checkpoint of a model family."""

from __future__ import annotations

from pathlib import Path

import click

from swiftcore.api.cli import CliState, pass_state, plugin_option

__all__ = ["demo", "make_tiny"]


@click.command("make-tiny")
@click.argument("model_name")
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@plugin_option
@click.option("--seed", type=int, default=0, show_default=True, help="Random seed for the weights.")
@click.option("--force", is_flag=True, help="Replace OUT_DIR if it exists and is not empty.")
@pass_state
def make_tiny(
    state: CliState, model_name: str, out_dir: Path, plugin_specs: tuple[str, ...], seed: int, force: bool
) -> None:
    """Write a tiny random checkpoint of MODEL_NAME (a model spec name, or NAME@PLUGIN) to OUT_DIR.

    The checkpoint has random weights, a real tokenizer with the family's special tokens and
    official chat template, and (for multimodal families) processor files; plain transformers
    loads it with from_pretrained.

    One weight differs from the family's own init: the final norm's gain is raised so that the
    output head can push one logit ~4 nats above log(vocab), as a trained model's can. At a tiny
    width the init's logits can barely move (top logit ~1.3 against log(512) = 6.2), and LoRA,
    which trains neither the norm nor the head, could not learn anything on it.

    \b
    Example:
      swiftcore make-tiny qwen3_5 ./tiny-qwen3_5
    """
    from swiftcore_tiny.checkpoint import describe_checkpoint
    from swiftcore_tiny.checkpoint import make_tiny as write_tiny

    plugins = state.plugins(plugin_specs)
    spec = plugins.registry.get("model", model_name)
    path = write_tiny(spec, out_dir, seed=seed, overwrite=force)
    info = describe_checkpoint(path)
    click.echo(f"Wrote tiny {spec.name!r} from {spec.provider} to {path}")
    click.echo(f"  parameters: {info.parameters:,}")
    click.echo(f"  files: {', '.join(info.files)}")


@click.command(
    "demo",
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []},
)
@click.pass_context
def demo(ctx: click.Context) -> None:
    """``make demo``'s job: a tiny model learns a task and answers held-out questions (``--help`` for options)."""
    from swiftcore_tiny.demo import main

    main(ctx.args)  # the demo's own argparse options (--out, --model, --steps, --tuner)
