"""``swiftcore infer``: run a model on a JSONL file of conversations, or chat with it interactively.

The command only: the options that pick an engine and the factory that builds it are
:mod:`swiftcore_infer.factory`'s, shared with ``deploy``, ``eval`` and the Web-UI.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import click

from swiftcore.api import SwiftcoreError
from swiftcore.api.cli import CliState, PluginOptionsCommand, pass_state, plugin_option
from swiftcore_infer.factory import build_engine, build_head_engine, engine_options, split_plugin_options

__all__ = ["DRAFT_HELP", "infer", "run_head", "with_draft"]

#: ``--draft``'s help, the same for ``infer`` and ``deploy``.
DRAFT_HELP = (
    "A draft model directory (e.g. `swiftcore train --recipe eagle3` output) for speculative decoding; the answers "
    "are the model's own. transformers: decoded by the plugin that recognises the draft (swiftcore_speculative_decoder "
    "hook), greedy or sampled (temperature, top-k, top-p, seed; repetition penalty refused); vllm: passed as its "
    "speculative_config. Proposals per step: the draft's "
    "own, or --engine-option num_speculative_tokens=K. The acceptance is printed at the end."
)


def with_draft(engine_kwargs: dict[str, Any], draft: str | None) -> dict[str, Any]:
    """``engine_kwargs`` with ``--draft DIR`` handed to the backend as its ``draft`` keyword (as ``--engine-option
    draft=DIR`` would)."""
    if draft is None:
        return engine_kwargs
    option = f"draft={json.dumps(str(Path(draft).resolve()))}"
    return {**engine_kwargs, "engine_option": (*engine_kwargs.get("engine_option", ()), option)}


def _split_reference(record: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """A record whose last message is the assistant's answer (training data): ask without it."""
    messages = record.get("messages")
    if (
        isinstance(messages, list)
        and messages
        and isinstance(messages[-1], dict)
        and messages[-1].get("role") == "assistant"
    ):
        return {**record, "messages": messages[:-1]}, messages[-1].get("content")
    return record, None


def _read_located(path: Path, expected: str) -> list[tuple[str, dict[str, Any] | None, str | None]]:
    """``(file:line, record, error)`` per non-empty line; a line that is not a JSON object is an error of its own."""
    out: list[tuple[str, dict[str, Any] | None, str | None]] = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                value = json.loads(line)
            except ValueError as exc:
                out.append((where, None, f"{where}: not valid JSON ({exc})"))
                continue
            if not isinstance(value, dict):
                out.append((where, None, f"{where}: expected a JSON object {expected}"))
            else:
                out.append((where, value, None))
    return out


def _read_jsonl(path: Path) -> list[tuple[dict[str, Any] | None, str | None]]:
    """``(record, error)`` per non-empty line; a line that is not a JSON object is an error of its own."""
    return [(record, error) for _, record, error in _read_located(path, "with 'messages'")]


def _output_row(
    record: dict[str, Any] | None, reference: str | None, generation: Any, error: str | None
) -> dict[str, Any]:
    row: dict[str, Any] = dict(record or {})
    if reference is not None:
        row["labels"] = reference
    if error is not None or (generation is not None and generation.error is not None):
        row["error"] = error or generation.error
        return row
    row.update(
        {
            "response": generation.content,
            "reasoning_content": generation.reasoning_content,
            "tool_calls": generation.tool_calls or None,
            "finish_reason": generation.finish_reason,
            "usage": {"prompt_tokens": generation.prompt_tokens, "completion_tokens": generation.completion_tokens},
        }
    )
    return row


def run_file(
    engine: Any,
    input_path: Path,
    output_path: Path,
    *,
    sampling: Any,
    batch_size: int,
    enable_thinking: bool | None,
    progress: bool = True,
) -> tuple[int, int]:
    """Answer every record of ``input_path`` into ``output_path``; return ``(answered, failed)``."""
    from tqdm import tqdm

    from swiftcore_infer.types import Request

    rows = _read_jsonl(input_path)
    output_path.parent.mkdir(parents=True, exist_ok=True)
    answered = failed = 0
    chunk = max(batch_size * 4, 1)  # written as it goes, so a long run's output is usable early
    with (
        output_path.open("w", encoding="utf-8") as out,
        tqdm(total=len(rows), desc="infer", unit="req", disable=not progress) as bar,
    ):
        for start in range(0, len(rows), chunk):
            part = rows[start : start + chunk]
            jobs: list[tuple[int, dict[str, Any], str | None]] = []
            requests = []
            for i, (record, _error) in enumerate(part):
                if record is None:
                    continue
                asked, reference = _split_reference(record)
                if enable_thinking is not None:
                    kwargs = {"enable_thinking": enable_thinking, **(asked.get("chat_template_kwargs") or {})}
                    asked = {**asked, "chat_template_kwargs": kwargs}
                jobs.append((i, record, reference))
                requests.append(Request(record=asked, sampling=sampling, request_id=str(record.get("id", start + i))))
            generations = engine.generate_requests(requests, batch_size=batch_size) if requests else []
            by_index = {i: (record, reference, g) for (i, record, reference), g in zip(jobs, generations, strict=True)}
            for i, (record, error) in enumerate(part):
                if i in by_index:
                    record, reference, generation = by_index[i]
                    row = _output_row(record, reference, generation, None)
                else:
                    row = _output_row(None, None, None, error)
                failed += "error" in row
                answered += "error" not in row
                out.write(json.dumps(row, ensure_ascii=False) + "\n")
            out.flush()
            bar.update(len(part))
    return answered, failed


def media_question(
    images: tuple[str, ...],
    audios: tuple[str, ...],
    text: str | None,
    system: str | None,
    enable_thinking: bool | None,
) -> dict[str, Any]:
    """The record of a ``--image`` / ``--audio`` question: one user turn of media parts (then the text), as a
    training row writes it."""
    parts: list[dict[str, Any]] = [{"type": "image", "image": str(Path(p).resolve())} for p in images]
    parts += [{"type": "audio", "audio": str(Path(p).resolve())} for p in audios]
    if text:
        parts.append({"type": "text", "text": text})
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    record: dict[str, Any] = {"messages": [*messages, {"role": "user", "content": parts}]}
    if enable_thinking is not None:
        record["chat_template_kwargs"] = {"enable_thinking": enable_thinking}
    return record


def chat_loop(engine: Any, *, sampling: Any, enable_thinking: bool | None, system: str | None) -> None:
    """An interactive chat on the terminal (``/clear`` forgets the history, ``/exit`` or Ctrl-D quits)."""
    from swiftcore_infer.types import Request

    history: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    click.echo(
        f"Chatting with {engine.base_dir} ({engine.backend}, template {engine.template.name}). "
        "/clear resets, /exit quits."
    )
    while True:
        try:
            text = click.prompt("user", prompt_suffix="> ")
        except (click.exceptions.Abort, EOFError):
            click.echo()
            return
        if text.strip() in ("/exit", "/quit"):
            return
        if text.strip() == "/clear":
            history = history[:1] if system else []
            continue
        history.append({"role": "user", "content": text})
        record: dict[str, Any] = {"messages": list(history)}
        if enable_thinking is not None:
            record["chat_template_kwargs"] = {"enable_thinking": enable_thinking}
        request = Request(record=record, sampling=sampling)
        click.echo("assistant> ", nl=False)
        final = None
        if "stream" in engine.capabilities:
            for delta in engine.stream(request):
                click.echo(delta.text, nl=False)
                final = delta.final or final
        else:
            final = engine.generate_requests([request])[0]
            click.echo(final.text, nl=False)
        click.echo()
        if final is None or final.error:
            history.pop()
            click.echo(f"error: {final.error if final else 'no reply'}", err=True)
            continue
        history.append({"role": "assistant", "content": final.content})


_HEAD_INPUT = {
    "embedding": "{'text': ...}",
    "classification": "{'text': ...}",
    "reranker": "{'query': ..., 'documents': [...]}",
    "generative_reranker": "{'query': ..., 'documents': [...]}",
}


def _flag_rows(
    texts: tuple[str, ...], query: str | None, docs: tuple[str, ...]
) -> list[tuple[str, dict[str, Any] | None, str | None]]:
    if query is not None or docs:
        if query is None or not docs:
            raise click.UsageError("--query and --doc go together: one --query and at least one --doc")
        return [("--query", {"query": query, "documents": list(docs)}, None)]
    return [(f"--text #{i + 1}", {"text": t}, None) for i, t in enumerate(texts)]


def run_head(
    engine: Any,
    *,
    input_path: str | None,
    output_path: str | None,
    texts: tuple[str, ...],
    query: str | None,
    docs: tuple[str, ...],
    dimensions: int | None,
    batch_size: int,
) -> None:
    """``swiftcore infer`` on a head checkpoint: rows from ``--input`` or the flags, JSON lines out."""
    from swiftcore_infer.head_rows import head_result_rows

    task = engine.head_task
    if input_path is not None and (texts or query or docs):
        raise click.UsageError("give either --input or --text / --query + --doc, not both")
    if dimensions is not None and task != "embedding":
        raise click.UsageError(f"--dimensions is for embedding models; this is a {task} model")
    if input_path is None:
        rows = _flag_rows(texts, query, docs)
        if not rows:
            raise click.UsageError(
                f"this is a {task} model: give --input FILE.jsonl of {_HEAD_INPUT.get(task, 'rows')} rows, "
                + ("or --query Q --doc D1 --doc D2" if task in ("reranker", "generative_reranker") else "or --text")
            )
    else:
        rows = _read_located(Path(input_path), _HEAD_INPUT.get(task, ""))
    results = head_result_rows(engine, rows, dimensions=dimensions, chunk=max(batch_size * 4, 1))
    failed = 0
    if output_path is None and input_path is None:
        for row in results:
            failed += "error" in row
            click.echo(json.dumps(row, ensure_ascii=False))
    else:
        target = Path(output_path) if output_path else Path(str(input_path)).with_suffix(".out.jsonl")
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("w", encoding="utf-8") as out:
            for row in results:
                failed += "error" in row
                out.write(json.dumps(row, ensure_ascii=False) + "\n")
        click.echo(f"answered {len(rows) - failed}, failed {failed} ({task}): {target}")
    if failed:
        click.echo(f"{failed} row(s) failed; their 'error' field says why", err=True)


@click.command("infer", cls=PluginOptionsCommand)  # plugins add options (swiftcore_addoption, command="infer")
@engine_options
@click.option(
    "--input",
    "input_path",
    type=click.Path(exists=True, dir_okay=False),
    help="JSONL of records in the training 'messages' format; omit for an interactive chat.",
)
@click.option(
    "--output",
    "output_path",
    type=click.Path(dir_okay=False),
    help="Where to write the answers (default: INPUT with .out.jsonl).",
)
@click.option("--draft", type=click.Path(exists=True, file_okay=False), help=DRAFT_HELP)
@click.option("--max-new-tokens", default=256, show_default=True, type=int)
@click.option("--temperature", default=0.0, show_default=True, type=float, help="0 = greedy.")
@click.option("--top-p", default=1.0, show_default=True, type=float)
@click.option("--top-k", default=0, show_default=True, type=int, help="0 = no top-k.")
@click.option("--seed", type=int, help="Random seed for sampling.")
@click.option("--stop", multiple=True, help="Extra stop string (repeatable).")
@click.option("--batch-size", default=8, show_default=True, type=int)
@click.option(
    "--enable-thinking/--disable-thinking",
    "enable_thinking",
    default=None,
    help="Default chat_template_kwargs.enable_thinking (a record's own value wins).",
)
@click.option("--system", help="System prompt for the interactive chat (or the --image / --audio question).")
@click.option(
    "--image",
    "images",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False),
    help="Ask one question about this image (repeatable); the answer is printed as a JSON line.",
)
@click.option(
    "--audio",
    "audios",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False),
    help="Ask one question about this audio clip, e.g. transcribe it with an ASR model (repeatable).",
)
@click.option("--prompt", "prompt_text", help="The question's text for --image / --audio (optional for ASR).")
@click.option(
    "--task",
    help="Head task: embedding, classification, reranker, generative_reranker (default: read from a head "
    "checkpoint's swiftcore_head.json; a different value is an error).",
)
@click.option("--text", "texts", multiple=True, help="Head models: a text to embed or classify (repeatable).")
@click.option("--query", help="Rerankers: the query the --doc documents are ranked for.")
@click.option("--doc", "docs", multiple=True, help="Rerankers: a document to rank (repeatable).")
@click.option(
    "--dimensions",
    type=click.IntRange(1),
    help="Embedding models: keep the first N components, renormalised (Matryoshka).",
)
@plugin_option
@pass_state
def infer(
    state: CliState,
    plugin_specs: tuple[str, ...],
    input_path: str | None,
    output_path: str | None,
    draft: str | None,
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    top_k: int,
    seed: int | None,
    stop: tuple[str, ...],
    batch_size: int,
    enable_thinking: bool | None,
    system: str | None,
    images: tuple[str, ...],
    audios: tuple[str, ...],
    prompt_text: str | None,
    task: str | None,
    texts: tuple[str, ...],
    query: str | None,
    docs: tuple[str, ...],
    dimensions: int | None,
    **engine_kwargs: Any,
) -> None:
    """Answer each conversation of a JSONL file, or chat interactively; or run a head model.

    \b
    Each output line is the input record plus "response", "reasoning_content", "tool_calls",
    "finish_reason" and "usage" (token counts), or "error" for a record that failed (the others
    are still answered). A record whose last message is the assistant's is asked without it,
    and that answer is kept as "labels".

    \b
    Head checkpoints (`swiftcore train --task ...` output, or one checkpoint-N in it) are
    recognised by their swiftcore_head.json. Input rows, from --input FILE.jsonl or flags:
      embedding, classification        {"text": ...}              or --text T (repeatable)
      reranker, generative_reranker    {"query": ..., "documents": [...]}  or --query Q --doc D ...
    Output JSON lines (to --output, INPUT.out.jsonl, or stdout for flags) add "embedding";
    "label", "label_id", "probabilities" (multi-label: "labels"; regression: "value"); or
    "results": [{"index", "score", "document"}] most relevant first. A bad row gets "error".

    \b
    Example:
      swiftcore infer --model ./out/checkpoint-100 --input prompts.jsonl --output answers.jsonl
      swiftcore infer --model ./tiny --backend vllm --input prompts.jsonl
      swiftcore infer --model ./out/checkpoint-100 --draft ./draft-run/checkpoint-2000 --input prompts.jsonl
      swiftcore infer --model ./tiny            # interactive chat
      swiftcore infer --model ./asr-out --audio clip.wav        # one question with media
      swiftcore infer --model ./emb-out --text "a cat" --text "a dog" --dimensions 64
      swiftcore infer --model ./rr-out --query "pets" --doc "a cat" --doc "tax law"
    """
    from swiftcore_infer.types import Request, SamplingParams

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if batch_size < 1:
        raise click.BadParameter("must be >= 1", param_hint="--batch-size")
    sampling = SamplingParams(
        max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, top_k=top_k, seed=seed, stop=tuple(stop)
    )
    plugins = state.plugins(plugin_specs)
    engine_kwargs, options = split_plugin_options(engine_kwargs)
    head = build_head_engine(plugins, task, engine_kwargs, options)
    if head is not None and draft is not None:
        raise click.UsageError("--draft is for generation models; this is a head checkpoint (swiftcore_head.json)")
    if head is not None:
        run_head(
            head,
            input_path=input_path,
            output_path=output_path,
            texts=texts,
            query=query,
            docs=docs,
            dimensions=dimensions,
            batch_size=batch_size,
        )
        return
    if texts or query or docs or dimensions:
        raise click.UsageError(
            "--text, --query, --doc and --dimensions are for head checkpoints (swiftcore_head.json); "
            f"{engine_kwargs['model']} is a generation model: use --input or the interactive chat"
        )
    if (images or audios or prompt_text) and input_path is not None:
        raise click.UsageError(
            "--image, --audio and --prompt ask one question; rows of --input carry their own media "
            "(content parts or 'images' / 'audios' columns, as in training data)"
        )
    if prompt_text and not (images or audios):
        raise click.UsageError("--prompt goes with --image or --audio (for a text question use the chat or --input)")
    engine = build_engine(plugins, **with_draft(engine_kwargs, draft), options=options)
    try:
        if images or audios:
            record = media_question(images, audios, prompt_text, system, enable_thinking)
            row = _output_row(
                record, None, engine.generate_requests([Request(record=record, sampling=sampling)])[0], None
            )
            if output_path:
                Path(output_path).parent.mkdir(parents=True, exist_ok=True)
                Path(output_path).write_text(json.dumps(row, ensure_ascii=False) + "\n", encoding="utf-8")
            else:
                click.echo(json.dumps(row, ensure_ascii=False))
            if "error" in row:
                raise SwiftcoreError(row["error"])
            return
        if input_path is None:
            chat_loop(engine, sampling=sampling, enable_thinking=enable_thinking, system=system)
            return
        source = Path(input_path)
        target = Path(output_path) if output_path else source.with_suffix(".out.jsonl")
        answered, failed = run_file(
            engine, source, target, sampling=sampling, batch_size=batch_size, enable_thinking=enable_thinking
        )
        click.echo(f"answered {answered}, failed {failed}: {target}")
        summary = getattr(engine, "speculative_summary", None)
        if draft is not None and callable(summary) and summary():
            click.echo(summary(), err=True)
        if failed:
            click.echo(f"{failed} record(s) failed; their 'error' field says why", err=True)
    finally:
        engine.close()
