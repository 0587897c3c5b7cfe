"""``swiftcore rollout``: serve a policy's rollouts to a trainer in another process or on another machine
(``swiftcore train --rollout-server URL``); the trainer pushes its weights to it before each generation round."""

from __future__ import annotations

import ipaddress
import logging
from types import SimpleNamespace

import click

from swiftcore.api.cli import CliState, pass_state, plugin_option

__all__ = ["rollout"]


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@click.command("rollout")
@click.option(
    "--model",
    required=True,
    type=click.Path(exists=True, file_okay=False),
    help="The policy's base checkpoint directory: the trainer's --model (the trainer refuses a server that serves "
    "another checkpoint).",
)
@click.option(
    "--backend",
    default="transformers",
    show_default=True,
    help="Inference backend that generates the rollouts: transformers or vllm (any that can receive weights).",
)
@click.option(
    "--template",
    help="Chat template the prompts are encoded with (default: the model's); must be the trainer's.",
)
@click.option("--model-type", help="Force the model spec (NAME or NAME@PLUGIN) instead of reading config.json.")
@click.option(
    "--dtype",
    default="float32",
    show_default=True,
    type=click.Choice(("float32", "bfloat16", "float16")),
    help="Dtype of the engine's weights (synced tensors are cast to it).",
)
@click.option(
    "--device",
    help="Torch device of the transformers backend's model (default: cuda when available, else cpu); vLLM places "
    "itself.",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to bind. The default keeps the server on this machine; anyone who can reach it can replace the "
    "weights, so expose it (0.0.0.0) on a trusted network only.",
)
@click.option("--port", default=8001, show_default=True, type=click.IntRange(0, 65535), help="Port to listen on.")
@click.option(
    "--max-body-mb",
    default=4096.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Largest request body in MiB (one sync bucket, or the largest tensor, which travels alone); a larger one "
    "gets HTTP 413.",
)
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(("critical", "error", "warning", "info", "debug")),
    help="Log level of the server and its request log.",
)
@plugin_option
@pass_state
def rollout(
    state: CliState,
    plugin_specs: tuple[str, ...],
    model: str,
    backend: str,
    template: str | None,
    model_type: str | None,
    dtype: str,
    device: str | None,
    host: str,
    port: int,
    max_body_mb: float,
    log_level: str,
) -> None:
    """Serve rollouts of a policy to an online-RL trainer (FastAPI + uvicorn).

    \b
    Routes: GET /health (model, backend, template, weight version),
    POST /rollouts (prompt token ids + sampling -> completion ids),
    POST /load_adapter, /update_adapter (LoRA sync), /update_weights
    (full sync, one bucket per call); tensors travel as safetensors bytes.
    Requests run one at a time on the engine, so a sync never interleaves
    a rollout; each sync bumps the weight version.

    \b
    Example:
      swiftcore rollout --model ./base --port 8001
      swiftcore train --recipe grpo --model ./base --reward format \\
          --dataset prompts.jsonl --rollout-server http://127.0.0.1:8001
    If the server stops, the run stops with the step's checkpoint intact:
    restart this command, then rerun training with --resume-from-checkpoint latest.
    """
    from swiftcore_recipe_rl.rollout_server import serve
    from swiftcore_recipe_rl.sync import create_rollout_engine

    logging.basicConfig(level=getattr(logging, log_level.upper()), format="%(levelname)s %(name)s: %(message)s")
    plugins = state.plugins(plugin_specs)
    cfg = SimpleNamespace(model=model, model_type=model_type, dtype=dtype)
    # Exactly the colocated engine of `--rollout-engine BACKEND`, on this process's device.
    engine = create_rollout_engine(backend, cfg, plugins, template=template, device=device, flag="--backend")
    shown = f"[{host}]" if ":" in host else host
    click.echo(f"serving rollouts of {engine.spec.name!r} ({engine.backend}, template {engine.template.name}) on "
               f"http://{shown}:{port}", err=True)  # fmt: skip
    if not _is_loopback(host):
        click.echo(f"note: {host} is reachable from other machines; anyone who reaches it can replace the weights",
                   err=True)  # fmt: skip
    serve(engine, host=host, port=port, log_level=log_level, max_body_bytes=int(max_body_mb * 2**20))
