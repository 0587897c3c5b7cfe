"""``swiftcore train``: run a training recipe (``--recipe``, default ``sft``) on any model a plugin provides.

The core options are generated from :class:`swiftcore_train.config.TrainConfig`, so the YAML file given to
``--config`` and the flags can never drift apart: every key of the file is a flag name. Plugins add their
own options with the ``swiftcore_addoption`` hook (see :mod:`swiftcore.options`); like pytest, which reads
``-p`` before building its parser, this command reads ``--plugin`` first, loads the plugins, asks them
for their options, and only then parses the command line.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import subprocess
import sys
from typing import Any

import click

from swiftcore.api.cli import (
    PLUGIN_OPTIONS,
    CliState,
    PluginOptionsCommand,
    pass_state,
    plugin_args,
    plugin_option,
    with_provider,
)
from swiftcore_train.config import (
    DEFAULT_ENGINE,
    LOSS_POLICIES,
    TRUNCATION,
    TUNERS,
    TrainConfig,
    load_config_file,
    recipe_for,
)
from swiftcore_train.distributed import finish_ranks
from swiftcore_train.run import is_main_process

__all__ = ["train"]

_HELP: dict[str, str] = {
    "model": "Local model directory (a save_pretrained checkpoint, e.g. from `swiftcore make-tiny`).",
    "dataset": "Training data: FILE.jsonl|json|parquet[#RATIO] or hf:NAME[:SPLIT][#RATIO]; repeatable (mixed).",
    "output_dir": "Where checkpoints, logs.jsonl, loss.png and args.json are written.",
    "model_type": "Force the model spec (NAME or NAME@PLUGIN) instead of reading config.json.",
    "template": "Chat template (default: the model's). See `swiftcore template list`.",
    "tuner": "full: train every (unfrozen) weight; lora: train a peft LoRA adapter.",
    "lora_rank": "LoRA rank r.",
    "lora_alpha": "LoRA alpha (scale = alpha / r).",
    "lora_dropout": "LoRA dropout.",
    "target_modules": "LoRA target modules (repeatable; default: the model spec's, usually all-linear).",
    "lora_exclude_modules": "Modules LoRA leaves alone (repeatable): a module name or dotted suffix (mlp.gate), "
    "or a full-match regex; on top of the model spec's exclusions.",
    "dry_run": "Print what LoRA adapts (module names by pattern) and the trainable parameter count, then exit "
    "without training or writing the output directory (no --dataset needed).",
    "freeze_vision": "Freeze the vision tower.",
    "freeze_audio": "Freeze the audio tower.",
    "freeze_projector": "Freeze the multimodal projector.",
    "val_dataset": "Validation data (repeatable); else --split-ratio of the training data is held out.",
    "split_ratio": "Fraction of the training data held out for validation when no --val-dataset is given.",
    "max_length": "Maximum tokens per sample (and per packed row).",
    "truncation": f"What to do with longer samples: {', '.join(TRUNCATION)}.",
    "packing": "Pack several samples into each row (padding-free, exact per-sample attention).",
    "padding_free": "Concatenate each batch into one row without padding.",
    "loss_policy": f"Which tokens carry loss: {', '.join(LOSS_POLICIES)}.",
    "enable_thinking": "Default for chat_template_kwargs.enable_thinking (a sample's own value wins).",
    "skip_bad_rows": "Skip (and count) dataset rows that fail validation instead of stopping.",
    "learning_rate": "Peak learning rate.",
    "lr_scheduler": "Learning-rate schedule (transformers names: cosine, linear, constant, ...).",
    "warmup_ratio": "Fraction of steps for linear warm-up.",
    "weight_decay": "AdamW weight decay.",
    "max_grad_norm": "Gradient clipping norm.",
    "num_train_epochs": "Epochs (ignored when --max-steps is set).",
    "max_steps": "Total optimiser steps (overrides epochs when > 0).",
    "batch_size": "Samples (or packed rows) per device per step.",
    "gradient_accumulation_steps": "Micro-batches per optimiser step.",
    "gradient_checkpointing": "Trade compute for memory.",
    "fsdp": "Shard parameters, gradients and optimizer state over the --nproc-per-node processes with torch's FSDP2 "
    "(fully_shard, through accelerate); checkpoints are sharded and also hold the full model for transformers.",
    "fsdp_offload": "With --fsdp: keep the shards on the CPU between uses (less accelerator memory, slower).",
    "deepspeed": "DeepSpeed ZeRO over the --nproc-per-node processes: zero2, zero3 (a generated config) or FILE.json "
    '(your config, checked; sizes may be "auto"). Needs the deepspeed package: '
    "pip install 'swiftcore-train[deepspeed]'.",
    "dtype": "Training precision: float32, bfloat16 (autocast), float16.",
    "seed": "Random seed (model init of new heads, data order, dropout).",
    "logging_steps": "Log every N steps (logs.jsonl, progress bar).",
    "save_steps": "Save a checkpoint every N steps (and at the end).",
    "eval_steps": "Evaluate every N steps (default: once at the end when there is validation data).",
    "save_total_limit": "Keep at most N checkpoints.",
    "resume_from_checkpoint": "Resume: 'latest' or a checkpoint directory.",
    "overwrite_output_dir": "Reuse a non-empty --output-dir: remove what an earlier swiftcore run wrote there "
    "(its checkpoints, logs, plot), never anything else and never an input of this run.",
    "plot": "Write loss.png at the end.",
    "task": "What the model is trained for: causal_lm (SFT), or the name of a task recipe (`swiftcore recipes`: the "
    "heads plugin's classification, embedding, reranker, generative_reranker).",
    "recipe": "Training recipe (see `swiftcore recipes`): sft by default; --task NAME alone picks the recipe NAME.",
    "engine": "What the recipe trains on: transformers (default), or an engine a plugin adds, e.g. megatron "
    "(swiftcore-train-megatron: megatron-core with --tp/--ep, launched by torchrun).",
}
_CHOICES = {
    "tuner": TUNERS,
    "loss_policy": LOSS_POLICIES,
    "truncation": TRUNCATION,
    "dtype": ("float32", "bfloat16", "float16"),
}


def _load_config(ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if value:
        plugin_keys = tuple(o.dest for o in ctx.meta.get(PLUGIN_OPTIONS, ()))
        ctx.default_map = {**(ctx.default_map or {}), **load_config_file(value, extra_keys=plugin_keys)}
        ctx.meta["swiftcore.config_file"] = value  # an input of the run: never removed from its output dir
    return value


def _options(func: Any) -> Any:
    for f in reversed(dataclasses.fields(TrainConfig)):
        if f.name in ("plugins", "config_file", "recipe_options"):
            continue
        flag = "--" + f.name.replace("_", "-")
        default = f.default
        kwargs: dict[str, Any] = {"help": _HELP[f.name], "show_default": default not in (None, (), "")}
        if f.name == "enable_thinking":
            func = click.option(
                "--enable-thinking/--disable-thinking", "enable_thinking", default=None, help=_HELP[f.name]
            )(func)
            continue
        if isinstance(default, bool):
            func = click.option(f"{flag}/--no-{f.name.replace('_', '-')}", f.name, default=default, **kwargs)(func)
            continue
        if isinstance(default, tuple):
            func = click.option(flag, f.name, multiple=True, **kwargs)(func)
            continue
        if f.name in _CHOICES:
            kwargs["type"] = click.Choice(_CHOICES[f.name])
        elif isinstance(default, float):
            kwargs["type"] = float
        elif isinstance(default, int):
            kwargs["type"] = int
        elif f.name in ("eval_steps", "save_total_limit"):
            kwargs["type"] = int
        func = click.option(flag, f.name, default=default, **kwargs)(func)
    return func


_ARGS = "swiftcore.train.args"  # ctx.meta key: the arguments this invocation was given


class TrainCommand(PluginOptionsCommand):
    """``swiftcore train`` with the options the loaded plugins add (``swiftcore_addoption``): the plugin set is the one
    ``--plugin`` chooses plus the plugin providing the recipe asked for."""

    def plugin_set(self, state: CliState, args: list[str]) -> Any:
        """The chosen plugins and the provider of the recipe ``args`` ask for."""
        return state.plugins(with_provider(state, plugin_args(args), "recipe", _recipe_arg(args)))

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # Kept for --nproc-per-node, which starts the ranks with these arguments, and for --help, which shows the
        # options of the recipe they ask for.
        ctx.meta[_ARGS] = list(args)
        return super().parse_args(ctx, args)

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        """The command's parameters; in ``--help``, only the plugin options of the recipe the arguments ask for
        (``--recipe grpo --help`` shows grpo's, not every recipe's): the others stay, hidden, to refuse them."""
        params = super().get_params(ctx)
        recipe = _recipe_arg(ctx.meta.get(_ARGS, []))
        foreign = {o.dest for o in ctx.meta.get(PLUGIN_OPTIONS, ()) if not o.applies_to(recipe)}
        for param in params:
            if param.name in foreign and isinstance(param, click.Option):
                param.hidden = True
        return params


def _recipe_arg(args: list[str]) -> str:
    """The recipe ``args`` ask for (``--recipe``, else ``--task``, else ``sft``), read before parsing so the
    plugin providing it loads with the chosen plugin set (a ``--config`` file's recipe is seen after loading)."""
    values = {"--recipe": "sft", "--task": "causal_lm", "--engine": DEFAULT_ENGINE}
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if flag in values:
            if eq:
                values[flag] = value
            elif i + 1 < len(args):
                values[flag] = args[i + 1]
    return recipe_for(values["--task"], values["--recipe"], values["--engine"])


def _recipe_options(ctx: click.Context, options: dict[str, Any], recipe: str) -> dict[str, Any]:
    """Split the plugin options out of ``options``: the values this recipe reads (untagged options and its
    own), after refusing an option of another recipe that was given."""
    out: dict[str, Any] = {}
    for option in ctx.meta.get(PLUGIN_OPTIONS, ()):
        value = options.pop(option.dest)
        given = ctx.get_parameter_source(option.dest) not in (None, click.core.ParameterSource.DEFAULT)
        if not option.applies_to(recipe):
            if given:
                which = " or ".join(repr(r) for r in option.recipes)
                raise click.UsageError(
                    f"{option.flags[0]} belongs to recipe {which} (plugin {option.plugin}); this run "
                    f"uses --recipe {recipe}. Add --recipe {option.recipes[0]}, or drop the option."
                )
            continue
        out[option.dest] = list(value) if isinstance(value, tuple) else value
    return out


@click.command("train", cls=TrainCommand)
@click.option(
    "--config",
    type=click.Path(dir_okay=False),
    is_eager=True,
    expose_value=False,
    callback=_load_config,
    help="YAML file of arguments (keys are the flag names); flags override it.",
)
@_options
@click.option(
    "--nproc-per-node",
    type=click.IntRange(min=1),
    default=None,
    help="Start N training processes on this machine (data parallel; with --engine megatron, --tp/--pp/--ep ranks) "
    "through torchrun's launcher, torch.distributed.run: no torchrun command line needed. Gloo on a CPU, NCCL on "
    "GPUs. Under a torchrun you start yourself, leave it out.",
)
@click.option(
    "--nnodes",
    type=click.IntRange(min=1),
    default=None,
    help="Train over this many machines (multi-node): run the same command on every machine, each with its "
    "--node-rank and one --rdzv-endpoint; each starts --nproc-per-node processes (default 1) through torchrun's "
    "c10d rendezvous. World size = nnodes x nproc-per-node.",
)
@click.option(
    "--node-rank",
    type=click.IntRange(min=0),
    default=None,
    help="With --nnodes: this machine's index, 0 to nnodes-1 (torchrun's --node-rank).",
)
@click.option(
    "--rdzv-endpoint",
    default=None,
    metavar="HOST:PORT",
    help="With --nnodes: the rendezvous address every machine can reach, e.g. node 0's address and a free port "
    "(torchrun's --rdzv-endpoint, c10d backend); the same on every machine.",
)
@plugin_option
@pass_state
def train(
    state: CliState,
    plugin_specs: tuple[str, ...],
    nproc_per_node: int | None,
    nnodes: int | None,
    node_rank: int | None,
    rdzv_endpoint: str | None,
    **options: Any,
) -> None:
    """Train a model with a recipe: supervised fine-tuning (sft, the default) with full weights or LoRA,
    an lm_head (--task), or any recipe a plugin adds (`swiftcore recipes` lists them).

    \b
    Example:
      swiftcore make-tiny qwen3_5 ./tiny
      swiftcore train --model ./tiny --dataset data.jsonl --tuner lora --max-steps 50

    `swiftcore train --nproc-per-node N ...` trains on N processes (it starts torchrun's launcher; the command also
    runs unchanged under a torchrun you start); add `--nnodes M --node-rank I --rdzv-endpoint HOST:PORT` on each of
    M machines to train over all of them. Options marked [recipe NAME] come from plugins and apply to that
    recipe only; the help shows the chosen recipe's (`swiftcore train --recipe grpo --help`).
    """
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    ctx = click.get_current_context()
    options["recipe"] = recipe_for(options["task"], options["recipe"], options["engine"])
    recipe_options = _recipe_options(ctx, options, options["recipe"])
    for key, value in options.items():
        if isinstance(value, list):
            options[key] = tuple(value)
    cfg = TrainConfig(**options, recipe_options=recipe_options)
    cfg.config_file = ctx.meta.get("swiftcore.config_file")
    cfg.validate()
    plugins = state.plugins(plugin_specs)
    cfg.plugins = tuple(plugins.resolved_specs)
    if cfg.dry_run:
        from swiftcore_train.tuners import dry_run

        click.echo(dry_run(cfg, plugins))
        return
    nodes = _nodes(nnodes, node_rank, rdzv_endpoint)
    if cfg.fsdp or cfg.deepspeed:
        from swiftcore_train.distributed import check_launch

        # Before torchrun starts anything: a sharded run on one process, a bad --deepspeed FILE, a missing package.
        launched = (nproc_per_node or 1) * (nnodes or 1) if nodes or nproc_per_node else None
        check_launch(cfg, launched or int(os.environ.get("WORLD_SIZE", "1")))
    if nodes or (nproc_per_node is not None and nproc_per_node > 1):
        _launch(nproc_per_node or 1, ctx.meta[_ARGS], nodes)
        return

    from swiftcore_train.dispatch import run_training

    result = run_training(cfg, plugins)
    finish_ranks()
    if not is_main_process():
        return  # every rank trained; rank 0 reports, once
    click.echo(f"trained {result.global_step} steps on {result.train_samples} samples; final loss {result.final_loss}")
    click.echo(f"checkpoint: {result.last_checkpoint}")
    click.echo(f"log:        {result.log_file}")
    if result.plot_file:
        click.echo(f"loss plot:  {result.plot_file}")
    if result.eval_accuracy is not None:
        click.echo(f"eval:       eval_accuracy {result.eval_accuracy:.4f} (last evaluation)")
    if result.best_checkpoint is not None:
        click.echo(f"best:       {result.best_checkpoint} ({result.best_value:.4f})")


#: The launcher's own options, left out of the arguments the ranks get.
_LAUNCH_OPTIONS = ("--nproc-per-node", "--nnodes", "--node-rank", "--rdzv-endpoint")


def _nodes(nnodes: int | None, node_rank: int | None, endpoint: str | None) -> list[str]:
    """torchrun's multi-node arguments for ``--nnodes/--node-rank/--rdzv-endpoint`` (none without ``--nnodes``).

    Raises:
        click.UsageError: one of the three is missing or out of range, or the endpoint is not ``HOST:PORT``.
    """
    if nnodes is None:
        if node_rank is not None or endpoint is not None:
            raise click.UsageError("--node-rank and --rdzv-endpoint go with --nnodes N (training over N machines)")
        return []
    if node_rank is None or endpoint is None:
        raise click.UsageError(
            f"--nnodes {nnodes}: give every machine its --node-rank (0 to {nnodes - 1}) and the same --rdzv-endpoint "
            "HOST:PORT (node 0's address and a free port)"
        )
    if node_rank >= nnodes:
        raise click.UsageError(f"--node-rank {node_rank}: with --nnodes {nnodes} it is 0 to {nnodes - 1}")
    host, _, port = endpoint.rpartition(":")
    if not host or not port.isdigit():
        raise click.UsageError(f"--rdzv-endpoint {endpoint!r}: expected HOST:PORT, e.g. 10.0.0.1:29500")
    return [f"--nnodes={nnodes}", f"--node-rank={node_rank}", "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}",
            "--rdzv-id=swiftcore-train"]  # fmt: skip


def _launch(nproc: int, args: list[str], nodes: list[str] | None = None) -> None:
    """Run ``swiftcore train ARGS`` (without the launcher's options) on ``nproc`` ranks under torch.distributed.run,
    the launcher behind ``torchrun``; the ranks load the plugins this process resolved (``SWIFTCORE_PLUGINS``).

    Args:
        nproc: processes on this machine.
        args: this command's arguments.
        nodes: torchrun's multi-node arguments (:func:`_nodes`); none: this machine alone.

    Raises:
        click.UsageError: this process is already a rank of a torchrun launch.
        SystemExit: with the launcher's exit status, when a rank failed (torchrun has printed which and why).
    """
    if "TORCHELASTIC_RUN_ID" in os.environ or "LOCAL_RANK" in os.environ:
        raise click.UsageError(
            "--nproc-per-node and --nnodes start torchrun themselves, and this process already is a torchrun rank: "
            "drop them, or run `swiftcore train --nproc-per-node N ...` without torchrun"
        )
    rest, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in _LAUNCH_OPTIONS:
            skip = True
        elif not arg.startswith(tuple(f"{o}=" for o in _LAUNCH_OPTIONS)):
            rest.append(arg)
    # --standalone: a rendezvous on a free local port, so two launches on one machine do not collide.
    # With --nnodes: torchrun's c10d rendezvous at the endpoint every machine names.
    rendezvous = nodes or ["--standalone"]
    launcher = [sys.executable, "-m", "torch.distributed.run", *rendezvous, f"--nproc-per-node={nproc}"]
    # The ranks run this environment's console script, as the web-UI's subprocesses do: `-m` would put the working
    # directory on their sys.path, where a .py file or a folder (a `tiny/` checkpoint) could shadow a module or a
    # plugin name. Without the script (a --user install), `-m`: a checkpoint folder is never taken for a plugin.
    script = shutil.which("swiftcore", path=os.path.dirname(sys.executable))
    command = [*launcher, *([script] if script else ["-m", "swiftcore.cli.main"]), "train", *rest]
    logging.getLogger("swiftcore.train").info("launch: %s", " ".join(command))
    status = subprocess.run(command, check=False).returncode
    if status:
        raise SystemExit(status)
