"""``swiftcore rollout``: serve a policy's rollouts to a trainer in another process or on another machine
(``swiftcore train --rollout-server URL``); the trainer pushes its weights to it before each generation round."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import click

from swiftcore.api.cli import CliState, pass_state, plugin_option

__all__ = ["rollout"]

#: ``swiftcore rollout``'s key variable (the trainer reads it too): ``swiftcore_recipe_rl.rollout_server.KEY_ENV``,
#: spelled here so that ``--help`` imports no server module.
_KEY_ENV = "SWIFTCORE_ROLLOUT_KEY"


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
    help="Address to bind. The default keeps the server on this machine; another address needs a key (whoever has "
    "it can replace the weights).",
)
@click.option("--port", default=8001, show_default=True, type=click.IntRange(0, 65535), help="Port to listen on.")
@click.option(
    "--api-key-file",
    type=click.Path(exists=True, dir_okay=False),
    help=f"Read the key the trainer must send from this file (first line); the trainer takes the same file with "
    f"--rollout-server-key-file. Or set ${_KEY_ENV}.",
)
@click.option(
    "--no-api-key",
    is_flag=True,
    help=f"Serve without a key: anyone on this machine can then replace the weights. Allowed on a loopback --host "
    f"only; without it a key (--api-key-file or ${_KEY_ENV}) is required.",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="NAME",
    help="A Host name accepted on a loopback bind besides localhost/127.0.0.1/[::1] (repeatable; e.g. a tunnel's "
    "name). Other names get HTTP 421 (DNS-rebinding defence).",
)
@click.option(
    "--max-body-mb",
    type=click.FloatRange(min=0, min_open=True),
    help="Largest request body in MiB (one sync bucket, or the largest tensor, which travels alone); a larger one gets "
    "HTTP 413, chunked or not. Default: the checkpoint's largest tensor in float32, at least 64 MiB (the trainer's "
    "--sync-bucket-mb default), plus 1 MiB.",
)
@click.option(
    "--max-requests-per-call",
    default=256,
    show_default=True,
    type=click.IntRange(1),
    help="Most rollout requests in one /rollouts call (the trainer splits a larger round into calls of this size); "
    "more get HTTP 400.",
)
@click.option(
    "--media-root",
    type=click.Path(exists=True, file_okay=False),
    help="Let rollout records name image/audio files under this directory (the dataset's folder), as swiftcore "
    "deploy --media-root: nothing outside it (symlinks and .. resolved first). Default: inline data: values only.",
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
    api_key_file: str | None,
    no_api_key: bool,
    allowed_hosts: tuple[str, ...],
    max_body_mb: float | None,
    max_requests_per_call: int,
    media_root: str | None,
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
    Every route needs the key (--api-key-file or $SWIFTCORE_ROLLOUT_KEY;
    the trainer sends it with --rollout-server-key-file); run without one
    only on this machine, and say so with --no-api-key.

    \b
    Example:
      swiftcore rollout --model ./base --port 8001 --api-key-file rollout.key
      swiftcore train --recipe grpo --model ./base --reward format \\
          --dataset prompts.jsonl --rollout-server http://127.0.0.1:8001 \\
          --rollout-server-key-file rollout.key
    If the server stops, the run stops with the step's checkpoint intact:
    restart this command, then rerun training with --resume-from-checkpoint latest.
    """
    from swiftcore_infer import MediaPolicy
    from swiftcore_serve import is_loopback, resolve_api_key

    from swiftcore_recipe_rl.rollout_server import serve
    from swiftcore_recipe_rl.sync import create_rollout_engine

    logging.basicConfig(level=getattr(logging, log_level.upper()), format="%(levelname)s %(name)s: %(message)s")
    # The key is settled before the model loads: a refused start should take a second, not a minute.
    api_key = resolve_api_key(api_key_file, None, no_api_key, host, env=_KEY_ENV, command="swiftcore rollout")
    plugins = state.plugins(plugin_specs)
    cfg = SimpleNamespace(model=model, model_type=model_type, dtype=dtype)
    # Exactly the colocated engine of `--rollout-engine BACKEND`, on this process's device.
    engine = create_rollout_engine(backend, cfg, plugins, template=template, device=device, flag="--backend")
    shown = f"[{host}]" if ":" in host else host
    guard = "key required" if api_key else "no key"
    click.echo(f"serving rollouts of {engine.spec.name!r} ({engine.backend}, template {engine.template.name}) on "
               f"http://{shown}:{port} ({guard})", err=True)  # fmt: skip
    if not is_loopback(host):
        click.echo(f"note: {host} is reachable from other machines; only clients with the key get in", err=True)
    serve(
        engine,
        host=host,
        port=port,
        log_level=log_level,
        max_body_bytes=int(max_body_mb * 2**20) if max_body_mb is not None else None,
        api_key=api_key,
        allowed_hosts=allowed_hosts,
        media=MediaPolicy(media_root=media_root),
        max_requests=max_requests_per_call,
    )
