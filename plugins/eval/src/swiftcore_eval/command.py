"""``swiftcore eval``: a benchmark's accuracy, measured through an OpenAI-compatible endpoint by EvalScope."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import click

from swiftcore.api import SwiftcoreError
from swiftcore.api.cli import CliState, PluginOptionsCommand, pass_state, plugin_option

__all__ = ["API_KEY_ENV", "eval_command", "resolve_api_key"]

#: The environment variable that may hold the server's API key (the one ``swiftcore deploy`` reads).
API_KEY_ENV = "SWIFTCORE_API_KEY"
#: Engine options: they build the in-process server's engine, so they go with --model only.
_ENGINE_FLAGS = {
    "adapter": "--adapter",
    "backend": "--backend",
    "template": "--template",
    "model_type": "--model-type",
    "dtype": "--dtype",
    "merge_lora": "--merge-lora",
    "engine_option": "--engine-option",
}
_ENGINE_DEFAULTS: dict[str, Any] = {
    "adapter": None,
    "backend": "transformers",
    "template": None,
    "model_type": None,
    "dtype": "float32",
    "merge_lora": False,
    "engine_option": (),
}
#: How many wrong answers the summary shows.
SHOWN_MISSES = 3


def resolve_api_key(key_file: str | None, key: str | None) -> str | None:
    """The key to send: --api-key-file or --api-key (one of them), else ``$SWIFTCORE_API_KEY``, else None.

    Raises:
        SwiftcoreError: both options given, or the key file is unreadable or empty.
    """
    if key_file is not None and key is not None:
        raise SwiftcoreError("--api-key-file and --api-key both give the key: keep one")
    if key_file is not None:
        try:
            lines = Path(key_file).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise SwiftcoreError(f"--api-key-file {key_file}: cannot read it ({exc})") from exc
        value = lines[0].strip() if lines else ""
        if not value:
            raise SwiftcoreError(f"--api-key-file {key_file}: the first line is empty")
        return value
    if key is not None:
        if not key.strip():
            raise SwiftcoreError("--api-key is empty")
        return key.strip()
    env = os.environ.get(API_KEY_ENV, "").strip()
    return env or None


def _check_target(
    api_url: str | None,
    model: str | None,
    engine: dict[str, Any],
    key_given: list[str],
    options: dict[str, Any] | None = None,
) -> None:
    """Exactly one of --api-url and --model, and only the options that go with it (``options``: the values of the
    options plugins added, e.g. ``--agent-template``, which build the in-process engine too)."""
    if (api_url is None) == (model is None):
        both = ", not both" if api_url is not None else ""
        raise click.UsageError(
            "give the model to evaluate: --api-url URL (a running OpenAI-compatible server, e.g. `swiftcore "
            f"deploy`) or --model DIR (served in this process for the evaluation){both}"
        )
    if api_url is not None:
        given = [flag for key, flag in _ENGINE_FLAGS.items() if engine[key] != _ENGINE_DEFAULTS[key]]
        given += [f"--{k.replace('_', '-')}" for k, value in (options or {}).items() if value not in (None, False, ())]
        if given:
            raise click.UsageError(
                f"{', '.join(given)}: with --model only (they build the in-process server's engine); the server "
                "at --api-url serves its own model"
            )
    elif key_given:
        raise click.UsageError(
            f"{', '.join(key_given)}: with --api-url only (the key of that server); the in-process server of "
            "--model makes its own"
        )


def _shown(text: str, width: int = 40) -> str:
    return repr(text if len(text) <= width else text[: width - 3] + "...")


def _report(result: Any, echo: Any) -> None:
    echo(f"accuracy: {result.accuracy:.1%} ({result.correct}/{result.total} exact matches) in {result.seconds:.1f} s")
    misses = [s for s in result.samples if not s.correct][:SHOWN_MISSES]
    for sample in misses:
        echo(f"  MISS line {sample.line}: {_shown(sample.question)} -> {_shown(sample.answer)} "
             f"(expected {_shown(sample.expected)})")  # fmt: skip
    echo(f"results: {result.output_dir} (summary.json, samples.jsonl; EvalScope's reports/, reviews/, predictions/)")


@click.command("eval", cls=PluginOptionsCommand)  # plugins add options (swiftcore_addoption, command="eval")
@click.option(
    "--dataset",
    required=True,
    metavar="FILE|NAME",
    help="The benchmark: a local JSONL file, one record per line, either the training format "
    '{"messages": [..., {"role": "assistant", "content": ANSWER}]} (the last message is the reference answer, '
    'the rest is asked; an optional "tools" list of OpenAI function tools is offered with it) or '
    '{"question": ..., "answer": ...} (optional "system"); or the name of a dataset '
    "shipped with this plugin: parity (the held-out questions of `make demo`). Nothing is downloaded.",
)
@click.option(
    "--api-url",
    metavar="URL",
    help="Evaluate the model behind this OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1 of "
    "`swiftcore deploy` (a bare http://HOST:PORT gets /v1). Give this or --model.",
)
@click.option(
    "--model",
    type=click.Path(exists=True, file_okay=False),
    help="Evaluate this checkpoint (or peft LoRA adapter) directory instead: it is served in this process, by "
    "the server `swiftcore deploy` runs, on a free loopback port, and asked over HTTP like --api-url.",
)
@click.option(
    "--adapter",
    type=click.Path(exists=True, file_okay=False),
    help="With --model: a peft LoRA adapter directory; --model is then its base model.",
)
@click.option(
    "--backend",
    default="transformers",
    show_default=True,
    help="With --model: the inference backend (transformers, vllm, sglang, or any a plugin provides).",
)
@click.option("--template", help="With --model: the chat template (default: the model's).")
@click.option("--model-type", help="With --model: force the model spec (NAME or NAME@PLUGIN).")
@click.option(
    "--dtype",
    default="float32",
    show_default=True,
    type=click.Choice(("float32", "bfloat16", "float16", "auto")),
    help="With --model: the weights' dtype.",
)
@click.option("--merge-lora", is_flag=True, help="With --model: merge the adapter into the weights before serving.")
@click.option(
    "--engine-option",
    "engine_option",
    multiple=True,
    metavar="KEY=VALUE",
    help="With --model: a backend-specific option, e.g. max_model_len=2048 for vllm (repeatable; JSON values).",
)
@click.option(
    "--model-name",
    metavar="NAME",
    help="The model name the requests carry. --api-url: default the first model the server lists "
    "(GET /v1/models); name a LoRA adapter the server serves to evaluate it. --model: the name it is served "
    "under (default: the directory's name).",
)
@click.option(
    "--api-key-file",
    type=click.Path(exists=True, dir_okay=False),
    help=f"With --api-url: read the server's API key from this file (first line). Default: ${API_KEY_ENV}, "
    "else no key.",
)
@click.option(
    "--api-key",
    help=f"With --api-url: the server's API key on the command line (other users see it in `ps`: prefer "
    f"--api-key-file or ${API_KEY_ENV}).",
)
@click.option(
    "--limit",
    type=click.IntRange(1),
    metavar="N",
    help="Ask only the first N records (the whole file is still checked).",
)
@click.option(
    "--max-tokens", default=64, show_default=True, type=click.IntRange(1), help="The longest reply, in tokens."
)
@click.option(
    "--temperature",
    default=0.0,
    show_default=True,
    type=click.FloatRange(0.0),
    help="Sampling temperature; 0 is greedy decoding (reproducible accuracy).",
)
@click.option("--seed", type=int, help="Sampling seed sent with every request (matters when --temperature > 0).")
@click.option(
    "--enable-thinking/--disable-thinking",
    "enable_thinking",
    default=None,
    help="Send chat_template_kwargs.enable_thinking with every request. Default: neither, so the server "
    "prompts the model as it was trained (swiftcore checkpoints record it).",
)
@click.option(
    "--concurrency",
    default=8,
    show_default=True,
    type=click.IntRange(1),
    help="Requests in flight at once (the server batches them).",
)
@click.option(
    "--timeout",
    default=300.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds one request may take; a failed request is retried twice, then the evaluation fails.",
)
@click.option(
    "--output",
    default="eval-out",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Folder for the results: each run writes a new OUTPUT/YYYYmmdd_HHMMSS/ holding summary.json, "
    "samples.jsonl (each question, expected and given answer, correct or not), the checked dataset.jsonl "
    "and EvalScope's configs/, predictions/, reviews/, reports/ and logs/.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print the summary as one JSON object on stdout (the rest on stderr)."
)
@click.option(
    "--verbose", is_flag=True, help="Show EvalScope's INFO log (it is always in OUTPUT/.../logs/eval_log.log)."
)
@plugin_option
@pass_state
def eval_command(
    state: CliState,
    plugin_specs: tuple[str, ...],
    dataset: str,
    api_url: str | None,
    model: str | None,
    model_name: str | None,
    api_key_file: str | None,
    api_key: str | None,
    limit: int | None,
    max_tokens: int,
    temperature: float,
    seed: int | None,
    enable_thinking: bool | None,
    concurrency: int,
    timeout: float,
    output: str,
    as_json: bool,
    verbose: bool,
    **engine: Any,
) -> None:
    """Measure a model's accuracy on a benchmark, asked through an OpenAI-compatible API by EvalScope.

    \b
    Every question of --dataset is sent as a chat completion (EvalScope's
    openai_api model, the openai client) to the served model. A reply is
    correct on an exact match: it equals the reference answer, ignoring
    case and surrounding whitespace (EvalScope's acc metric). Accuracy is
    the fraction of questions answered correctly. A bad dataset line is an
    error naming FILE:LINE, before anything is asked.

    \b
    Example:
      swiftcore deploy --model ./out/checkpoint-160 --port 8000 --no-api-key
      swiftcore eval --api-url http://127.0.0.1:8000/v1 --dataset parity
      swiftcore eval --model ./out/checkpoint-160 --dataset questions.jsonl --limit 100
    """
    from swiftcore_eval.dataset import read_dataset, resolve_dataset
    from swiftcore_eval.runner import GenerationSettings, check_evalscope, endpoint_models, normalize_api_url, run_eval

    echo = (lambda msg: click.echo(msg, err=True)) if as_json else click.echo
    key_given = [flag for flag, value in (("--api-key-file", api_key_file), ("--api-key", api_key)) if value]
    from swiftcore_infer import split_plugin_options

    engine, options = split_plugin_options(engine)  # e.g. --agent-template: read by swiftcore_infer_template
    _check_target(api_url, model, engine, key_given, options)
    records = read_dataset(resolve_dataset(dataset), limit=limit)
    check_evalscope()  # before a model loads: a missing install should cost a second, not a minute
    generation = GenerationSettings(
        max_tokens=max_tokens, temperature=temperature, seed=seed, enable_thinking=enable_thinking, timeout=timeout
    )
    common = {"output": output, "dataset": dataset, "generation": generation, "concurrency": concurrency,
              "verbose": verbose}  # fmt: skip

    if api_url is not None:
        url = normalize_api_url(api_url)
        key = resolve_api_key(api_key_file, api_key)
        served = endpoint_models(url, key or "EMPTY")
        if model_name is None:
            if not served:
                raise SwiftcoreError(f"{url}/models lists no model: name one with --model-name")
            model_name = served[0]
        elif model_name not in served:
            raise SwiftcoreError(f"--model-name {model_name!r}: {url} serves {', '.join(served) or 'nothing'}")
        echo(f"eval: {len(records)} questions of {dataset} -> {model_name!r} at {url}")
        result = run_eval(records, api_url=url, model_name=model_name, api_key=key or "EMPTY", **common)
    else:
        from swiftcore_infer import build_engine

        from swiftcore_eval.server import serve_in_process

        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
        plugins = state.plugins(plugin_specs)
        built = build_engine(plugins, model=model, **engine, options=options)
        name = model_name or Path(engine["adapter"] or model).resolve().name
        try:
            with serve_in_process(built, name) as server:
                echo(f"eval: {len(records)} questions of {dataset} -> {name!r} ({built.backend}, served in-process "
                     f"at {server.api_url})")  # fmt: skip
                result = run_eval(records, api_url=server.api_url, model_name=name, api_key=server.api_key, **common)
        finally:
            built.close()
    _report(result, echo)
    if as_json:
        click.echo(json.dumps(result.summary()))
