"""``swiftcore deploy``: serve a model behind an OpenAI-compatible API."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import click

from swiftcore.cli.infer_cmd import build_engine, build_head_engine, engine_options
from swiftcore.cli.main import CliState, pass_state, plugin_option
from swiftcore.errors import SwiftcoreError

__all__ = ["deploy"]


def _parse_loras(values: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in values:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise SwiftcoreError(f"--lora {item!r}: expected NAME=DIR (the name clients pass as 'model')")
        if not Path(path).is_dir():
            raise SwiftcoreError(f"--lora {item!r}: {path!r} is not a directory")
        if name in out:
            raise SwiftcoreError(f"--lora: the name {name!r} is given twice")
        out[name] = path
    return out


@click.command("deploy")
@engine_options
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to bind. The default keeps the server on this machine; 0.0.0.0 exposes it.",
)
@click.option("--port", default=8000, show_default=True, type=int)
@click.option("--served-model-name", help="The model name clients use (default: the model directory's name).")
@click.option(
    "--lora",
    "loras",
    multiple=True,
    metavar="NAME=DIR",
    help="Serve a LoRA adapter under NAME (repeatable); clients select it with model=NAME.",
)
@click.option(
    "--api-key", envvar="SWIFTCORE_API_KEY", help="Require 'Authorization: Bearer KEY' (or set SWIFTCORE_API_KEY)."
)
@click.option(
    "--max-queue",
    default=64,
    show_default=True,
    type=click.IntRange(1),
    help="Requests that may wait; more get HTTP 429.",
)
@click.option(
    "--max-batch",
    default=16,
    show_default=True,
    type=click.IntRange(1),
    help="Waiting requests served together in one engine call.",
)
@click.option(
    "--default-max-tokens",
    default=256,
    show_default=True,
    type=click.IntRange(1),
    help="max_tokens when a request gives none.",
)
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(("critical", "error", "warning", "info", "debug")),
)
@click.option(
    "--task",
    help="Head task the checkpoint must hold (embedding, classification, reranker, generative_reranker); "
    "default: read from its swiftcore_head.json.",
)
@plugin_option
@pass_state
def deploy(
    state: CliState,
    plugin_specs: tuple[str, ...],
    host: str,
    port: int,
    served_model_name: str | None,
    loras: tuple[str, ...],
    api_key: str | None,
    max_queue: int,
    max_batch: int,
    default_max_tokens: int,
    log_level: str,
    task: str | None,
    **engine_kwargs: Any,
) -> None:
    """Serve a model behind an OpenAI-compatible API (FastAPI + uvicorn).

    \b
    Routes: /health, /v1/models, /v1/chat/completions (streaming, tools,
    chat_template_kwargs such as enable_thinking), /v1/completions, /v1/embeddings.
    A head checkpoint (`swiftcore train --task ...` output) serves its task instead:
    embedding -> /v1/embeddings (dimensions, encoding_format), reranker and
    generative_reranker -> /v1/rerank ({"query", "documents", "top_n", "return_documents"}),
    classification -> /v1/classify ({"input"}); chat to it is a 400 naming its route.

    \b
    Example:
      swiftcore deploy --model ./out/checkpoint-100 --port 8000
      swiftcore deploy --model ./base --lora math=./math-lora --lora code=./code-lora --api-key s3cret
      swiftcore deploy --model ./out-embedding --served-model-name emb
    Then: OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="s3cret")
    """
    from swiftcore.infer.server import ServerConfig, serve

    logging.basicConfig(level=getattr(logging, log_level.upper()), format="%(levelname)s %(name)s: %(message)s")
    adapters = _parse_loras(loras)
    plugins = state.plugins(plugin_specs)
    engine = build_head_engine(plugins, task, engine_kwargs)
    if engine is not None and adapters:
        raise SwiftcoreError("--lora: head checkpoints are served with their adapters merged; drop --lora")
    if engine is None:
        engine = build_engine(plugins, **engine_kwargs)
    name = served_model_name or Path(engine_kwargs["adapter"] or engine_kwargs["model"]).resolve().name
    if name in adapters:
        raise SwiftcoreError(f"--lora {name}=...: the name is the served model's; pick another adapter name")
    config = ServerConfig(
        model_name=name,
        adapters=adapters,
        api_key=api_key,
        max_queue=max_queue,
        max_batch=max_batch,
        default_max_tokens=default_max_tokens,
    )
    if host not in ("127.0.0.1", "localhost", "::1") and not api_key:
        click.echo(f"warning: serving on {host} without --api-key: anyone who can reach it can use it", err=True)
    click.echo(f"serving {name!r} ({engine.backend}) on http://{host}:{port}/v1", err=True)
    try:
        serve(engine, config, host=host, port=port, log_level=log_level)
    finally:
        engine.close()
