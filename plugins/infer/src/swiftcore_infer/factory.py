"""Building an engine from the command line's options: the ``--model`` / ``--backend`` / ... options and the
factory they feed, shared by ``swiftcore infer``, ``swiftcore deploy`` (swiftcore-serve), ``swiftcore eval`` and the
Web-UI (through the face: ``from swiftcore_infer import build_engine``).

The click options (:func:`engine_options`) live beside :func:`build_engine` because each option is one of its
keywords: a command passes the parsed values straight through (``build_engine(plugins, **engine_kwargs)``), so the
two change together. Importing this module imports click, never torch: the backend's engine module is imported
only when an engine is built.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import click

from swiftcore.api import SwiftcoreError

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = ["build_engine", "build_head_engine", "engine_options", "split_plugin_options"]


def _parse_engine_options(values: tuple[str, ...]) -> dict[str, Any]:
    """``--engine-option KEY=VALUE`` values as keyword arguments (JSON values, else the bare string)."""
    out: dict[str, Any] = {}
    for item in values:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise SwiftcoreError(f"--engine-option {item!r}: expected KEY=VALUE (e.g. max_model_len=2048)")
        try:
            out[key.replace("-", "_")] = json.loads(raw)
        except ValueError:
            out[key.replace("-", "_")] = raw  # a bare string
    return out


def engine_options(func: Any) -> Any:
    """The options that pick and build an engine, shared by ``infer`` and ``deploy``."""
    options = [
        click.option(
            "--model",
            "model",
            required=True,
            type=click.Path(exists=True, file_okay=False),
            help="Checkpoint directory, a peft LoRA adapter directory (its base read from adapter_config.json) "
            "or, with --adapter, the adapter's base model. A Megatron checkpoint (swiftcore train --engine megatron's "
            "checkpoint-N/mcore, or swiftcore export --to-mcore's output) is exported to a cached HF checkpoint "
            "first, with swiftcore-megatron installed.",
        ),
        click.option(
            "--adapter",
            type=click.Path(exists=True, file_okay=False),
            help="A peft LoRA adapter directory; --model is then its base model (as for export --merge-lora).",
        ),
        click.option(
            "--backend",
            default="transformers",
            show_default=True,
            help="Inference backend: transformers, vllm, sglang (or any a plugin provides).",
        ),
        click.option("--template", help="Chat template (default: the model's). See `swiftcore template list`."),
        click.option("--model-type", help="Force the model spec (NAME or NAME@PLUGIN) instead of reading config.json."),
        click.option(
            "--dtype",
            default="float32",
            show_default=True,
            type=click.Choice(("float32", "bfloat16", "float16", "auto")),
        ),
        click.option("--merge-lora", is_flag=True, help="Merge the adapter into the weights before serving."),
        click.option(
            "--engine-option",
            "engine_option",
            multiple=True,
            metavar="KEY=VALUE",
            help="Backend-specific option, e.g. max_model_len=2048 for vllm (repeatable; JSON values).",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def build_engine(
    plugins: PluginSet,
    *,
    model: str,
    adapter: str | None,
    backend: str,
    template: str | None,
    model_type: str | None,
    dtype: str,
    merge_lora: bool,
    engine_option: tuple[str, ...],
    options: Mapping[str, Any] | None = None,
) -> Any:
    """Build the engine the :func:`engine_options` describe (the backend's probe runs first).

    A ``model`` directory that is no Hugging Face checkpoint goes to the plugins first (a Megatron checkpoint is
    exported to a cached HF one by swiftcore-megatron): :func:`~swiftcore_infer.checkpoints.prepare_model_dir`.
    Then a plugin may pick the template from ``options``, the values of the options plugins added to the command
    (``swiftcore_infer_template``: ``--agent-template hermes`` -> ``olmoe_hermes``).
    """
    from swiftcore_infer.backends import create_engine
    from swiftcore_infer.checkpoints import prepare_model_dir

    model = prepare_model_dir(plugins, model, echo=lambda line: click.echo(line, err=True))  # e.g. Megatron -> HF
    hook = getattr(plugins.pm.hook, "swiftcore_infer_template", None)  # None: swiftcore-infer not loaded
    if hook is not None:
        picked = hook(
            template=template,
            model_dir=model,
            adapter=adapter,
            model_type=model_type,
            options=dict(options or {}),
            plugins=plugins,
        )
        template = picked if picked is not None else template
    engine_kwargs: dict[str, Any] = {
        "adapter": adapter,
        "template": template,
        "model_type": model_type,
        "dtype": dtype,
        "merge_lora": merge_lora,
        **_parse_engine_options(engine_option),
    }
    return create_engine(backend, model, plugins, **engine_kwargs)


def split_plugin_options(kwargs: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(engine keywords, plugin options)``: a command's ``**kwargs`` split into :func:`build_engine`'s keywords and
    the values of the options plugins added to the running command (``swiftcore_addoption``; a command built with
    ``cls=PluginOptionsCommand``), by destination."""
    from swiftcore.api.cli import PLUGIN_OPTIONS

    ctx = click.get_current_context(silent=True)
    dests = {option.dest for option in (ctx.meta.get(PLUGIN_OPTIONS, ()) if ctx is not None else ())}
    engine = {k: v for k, v in kwargs.items() if k not in dests}
    return engine, {k: v for k, v in kwargs.items() if k in dests}


def _refuse_engine_options(engine_kwargs: dict[str, Any], options: Mapping[str, Any]) -> None:
    """Generation-engine options that mean nothing for a head checkpoint are an error, not ignored."""
    given = [f"--{key.replace('_', '-')}" for key, value in options.items() if value not in (None, False, ())]
    given += [
        flag
        for flag, key in (("--adapter", "adapter"), ("--template", "template"), ("--model-type", "model_type"))
        if engine_kwargs.get(key)
    ]
    given += ["--merge-lora"] if engine_kwargs.get("merge_lora") else []
    given += ["--engine-option"] if engine_kwargs.get("engine_option") else []
    if engine_kwargs.get("backend") not in (None, "transformers"):
        given.append(f"--backend {engine_kwargs['backend']}")
    if given:
        raise SwiftcoreError(
            f"{', '.join(given)}: not used for head checkpoints (the head plugin's predictor serves them, "
            "adapters merged); drop the option(s)"
        )


def build_head_engine(
    plugins: PluginSet, task: str | None, engine_kwargs: dict[str, Any], options: Mapping[str, Any] | None = None
) -> Any:
    """The :class:`~swiftcore_infer.heads.HeadEngine` for ``--model``, or None when it is no head checkpoint
    and no ``--task`` was given (a generation model). ``options``: the plugin options given (refused, as the
    generation-engine options are)."""
    from swiftcore_infer.heads import find_head_checkpoint, load_head_engine

    if task is None and find_head_checkpoint(engine_kwargs["model"]) is None:
        return None
    _refuse_engine_options(engine_kwargs, options or {})
    return load_head_engine(engine_kwargs["model"], plugins, task=task, dtype=engine_kwargs.get("dtype", "float32"))
