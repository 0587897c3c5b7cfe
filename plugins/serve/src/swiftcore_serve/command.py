"""``swiftcore deploy``: serve a model behind an OpenAI-compatible API."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import click
from swiftcore_infer import build_engine, build_head_engine, engine_options, split_plugin_options

from swiftcore.api import SwiftcoreError
from swiftcore.api.cli import CliState, PluginOptionsCommand, pass_state, plugin_option

__all__ = ["API_KEY_ENV", "deploy"]

#: The environment variable that may hold the API key (not visible in `ps`, unlike --api-key).
API_KEY_ENV = "SWIFTCORE_API_KEY"


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


def default_served_name(model: Path) -> str:
    """The name clients use when ``--served-model-name`` is not given: the model directory's name, or for a Megatron
    engine checkpoint's ``checkpoint-N/mcore`` shards, ``checkpoint-N``: the name its HF checkpoint is served under."""
    path = model.resolve()
    if path.name == "mcore" and (path / "swiftcore_mcore.json").is_file():
        return path.parent.name
    return path.name


@click.command("deploy", cls=PluginOptionsCommand)  # plugins add options (swiftcore_addoption, command="deploy")
@engine_options
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to bind. The default keeps the server on this machine; 0.0.0.0 exposes it.",
)
@click.option("--port", default=8000, show_default=True, type=int)
@click.option(
    "--served-model-name",
    help="The model name clients use (default: the model directory's name; checkpoint-N for its mcore/ shards).",
)
@click.option(
    "--draft",
    type=click.Path(exists=True, file_okay=False),
    help="A draft model directory for speculative decoding (as for `swiftcore infer --draft`). transformers: "
    "greedy and sampled requests (temperature, top_p, top_k, seed; repetition_penalty gets HTTP 400); the "
    "acceptance is logged at --log-level info. vllm: its "
    "speculative_config.",
)
@click.option(
    "--lora",
    "loras",
    multiple=True,
    metavar="NAME=DIR",
    help="Serve a LoRA adapter under NAME (repeatable); clients select it with model=NAME.",
)
@click.option(
    "--api-key-file",
    type=click.Path(exists=True, dir_okay=False),
    help="Read the API key clients must send ('Authorization: Bearer KEY') from this file (first line).",
)
@click.option(
    "--api-key",
    help=f"The API key on the command line (other users see it in `ps`: prefer --api-key-file or {API_KEY_ENV}).",
)
@click.option(
    "--no-api-key",
    is_flag=True,
    help=f"Serve without a key. Allowed on a loopback --host only. Without it, a key (--api-key-file, "
    f"{API_KEY_ENV} or --api-key) is required.",
)
@click.option(
    "--max-queue",
    default=64,
    show_default=True,
    type=click.IntRange(1),
    help="Requests that may wait for the engine; more get HTTP 429 with Retry-After.",
)
@click.option(
    "--max-body-mb",
    default=32.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Largest request body in MiB; a larger one gets HTTP 413 before it is read.",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="NAME",
    help="A Host name accepted on a loopback bind besides localhost/127.0.0.1/[::1] (repeatable; e.g. the name "
    "a reverse proxy forwards). Other names get HTTP 421 (DNS-rebinding defence).",
)
@click.option(
    "--media-root",
    type=click.Path(exists=True, file_okay=False),
    help="Let requests name image/audio files (paths or file:// URLs) under this directory; nothing outside it "
    "(symlinks and .. resolved first). Default: no local files, inline data: URLs only.",
)
@click.option(
    "--allow-remote-media",
    is_flag=True,
    help="Fetch http(s) image/audio URLs named in requests. Off by default: the server would fetch from its own "
    "network whatever a client names.",
)
@click.option(
    "--max-media-per-request",
    default=8,
    show_default=True,
    type=click.IntRange(0),
    help="Images, audio clips and videos in one request; more get HTTP 400.",
)
@click.option(
    "--max-media-mb",
    default=20.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Encoded size of one image, clip or video in MiB (inline, file or download); larger gets HTTP 400.",
)
@click.option(
    "--max-image-pixels",
    default=4096 * 4096,
    show_default=True,
    type=click.IntRange(1),
    help="Decoded width x height of one image; larger gets HTTP 400.",
)
@click.option(
    "--max-audio-seconds",
    default=600.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Decoded length of one audio clip; longer gets HTTP 400.",
)
@click.option(
    "--max-video-seconds",
    default=600.0,
    show_default=True,
    # 600: the media library's own bound on every video (swiftcore_media.video.MAX_SECONDS).
    type=click.FloatRange(min=0, max=600.0, min_open=True),
    help="Length of one video (from its header, before decoding; at most 600); longer gets HTTP 400.",
)
@click.option(
    "--max-video-frame-pixels",
    default=3840 * 2160,
    show_default=True,
    # 3840x2160: the media library's own bound (swiftcore_media.video.MAX_FRAME_PIXELS).
    type=click.IntRange(1, 3840 * 2160),
    help="Width x height of one video's frames (from its header; at most 3840x2160); larger gets HTTP 400.",
)
@click.option(
    "--media-workers",
    default=2,
    show_default=True,
    type=click.IntRange(0),
    help="Threads that decode requests' images, audio and video (and run the processor) before they queue for the "
    "engine, so text requests do not wait behind that work (0: on the engine's thread).",
)
@click.option("--docs", is_flag=True, help="Serve /docs, /redoc and /openapi.json (they need the key too).")
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
    draft: str | None,
    loras: tuple[str, ...],
    api_key_file: str | None,
    api_key: str | None,
    no_api_key: bool,
    max_queue: int,
    max_body_mb: float,
    allowed_hosts: tuple[str, ...],
    media_root: str | None,
    allow_remote_media: bool,
    max_media_per_request: int,
    max_media_mb: float,
    max_image_pixels: int,
    max_audio_seconds: float,
    max_video_seconds: float,
    max_video_frame_pixels: int,
    media_workers: int,
    docs: bool,
    max_batch: int,
    default_max_tokens: int,
    log_level: str,
    task: str | None,
    **engine_kwargs: Any,
) -> None:
    """Serve a model behind an OpenAI-compatible API (FastAPI + uvicorn).

    \b
    Routes: /health, /v1/models, /v1/chat/completions (streaming, tools,
    chat_template_kwargs such as enable_thinking), /v1/completions, /v1/embeddings,
    /v1/audio/transcriptions (a model that takes audio, e.g. Qwen3-ASR: multipart
    file=CLIP model=NAME, response_format json | text | verbose_json),
    /v1/audio/speech (a model whose plugin gives it a voice, e.g. Qwen3-Omni: JSON
    model, input, voice, response_format wav | pcm | flac | mp3).
    A head checkpoint (`swiftcore train --task ...` output) serves its task instead:
    embedding -> /v1/embeddings (dimensions, encoding_format), reranker and
    generative_reranker -> /v1/rerank ({"query", "documents", "top_n", "return_documents"}),
    classification -> /v1/classify ({"input"}); chat to it is a 400 naming its route.

    \b
    Every route but /health needs the API key; run without one only on this
    machine, and say so with --no-api-key.

    \b
    Example:
      swiftcore deploy --model ./out/checkpoint-100 --port 8000 --no-api-key
      swiftcore deploy --model ./base --lora math=./math-lora --lora code=./code-lora --api-key-file key.txt
      SWIFTCORE_API_KEY=s3cret swiftcore deploy --model ./out-embedding --served-model-name emb
    Then: OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="s3cret")
    """
    from swiftcore_infer import MediaPolicy

    from swiftcore_serve import ServerConfig, serve
    from swiftcore_serve.guard import is_loopback
    from swiftcore_serve.keys import resolve_api_key

    logging.basicConfig(level=getattr(logging, log_level.upper()), format="%(levelname)s %(name)s: %(message)s")
    adapters = _parse_loras(loras)
    # The key is settled before the model loads: a refused start should take a second, not a minute.
    api_key = resolve_api_key(api_key_file, api_key, no_api_key, host, env=API_KEY_ENV)
    plugins = state.plugins(plugin_specs)
    # The plugins' options (swiftcore_addoption, command="deploy") go to build_engine's `options`, as infer's do.
    engine_kwargs, options = split_plugin_options(engine_kwargs)
    engine = build_head_engine(plugins, task, engine_kwargs, options)
    if engine is not None and adapters:
        raise SwiftcoreError("--lora: head checkpoints are served with their adapters merged; drop --lora")
    if engine is not None and draft is not None:
        raise SwiftcoreError("--draft is for generation models; this is a head checkpoint (swiftcore_head.json)")
    if engine is None:
        if draft is not None:  # the backend's `draft` keyword, as --engine-option draft=DIR gives it
            engine_kwargs["engine_option"] = (
                *engine_kwargs["engine_option"],
                f"draft={json.dumps(str(Path(draft).resolve()))}",
            )
        engine = build_engine(plugins, **engine_kwargs, options=options)
    name = served_model_name or default_served_name(Path(engine_kwargs["adapter"] or engine_kwargs["model"]))
    if name in adapters:
        raise SwiftcoreError(f"--lora {name}=...: the name is the served model's; pick another adapter name")
    config = ServerConfig(
        model_name=name,
        adapters=adapters,
        api_key=api_key,
        max_queue=max_queue,
        max_batch=max_batch,
        default_max_tokens=default_max_tokens,
        max_body_bytes=int(max_body_mb * 2**20),
        docs=docs,
        allowed_hosts=allowed_hosts,
        media=MediaPolicy(
            media_root=media_root,
            allow_remote=allow_remote_media,
            max_items=max_media_per_request,
            max_item_bytes=int(max_media_mb * 2**20),
            max_image_pixels=max_image_pixels,
            max_audio_seconds=max_audio_seconds,
            max_video_seconds=max_video_seconds,
            max_video_frame_pixels=max_video_frame_pixels,
        ),
        media_workers=media_workers,
    )
    shown = f"[{host}]" if ":" in host else host
    guard = "API key required" if api_key else "no API key"
    click.echo(f"serving {name!r} ({engine.backend}) on http://{shown}:{port}/v1 ({guard})", err=True)
    if not is_loopback(host):
        click.echo(f"note: {host} is reachable from other machines; only clients with the key get in", err=True)
    try:
        serve(engine, config, host=host, port=port, log_level=log_level)
    finally:
        engine.close()
