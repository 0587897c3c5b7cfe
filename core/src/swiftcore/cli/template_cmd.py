"""``swiftcore template``: list, render and encode chat templates.

``render`` writes one JSON line per input record, ``{"id": ..., "text": ...}`` or
``{"id": ..., "error": ...}``, so it can be diffed against another renderer. ``encode`` shows token ids,
labels and a colour-coded view of which tokens carry loss.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from swiftcore.cli.main import CliState, pass_state, plugin_option
from swiftcore.errors import SwiftcoreError

__all__ = ["template"]


@click.group("template")
def template() -> None:
    """List, render and encode chat templates."""


def _read_jsonl(path: Path) -> list[tuple[int, Any]]:
    """``(line number, record)`` per non-empty line; a bad line names the file and line."""
    out = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append((number, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise SwiftcoreError(f"{path}:{number}: not valid JSON ({exc.msg}); each line must be one record") from exc
    return out


def _prompt_only(record: dict) -> dict:
    from swiftcore.template.conversation import generation_record

    return generation_record(record)


@template.command("list")
@plugin_option
@pass_state
def list_templates(state: CliState, plugin_specs: tuple[str, ...]) -> None:
    """List the templates the loaded plugins provide."""
    registry = state.plugins(plugin_specs).registry
    specs = registry.all("template")
    if not specs:
        click.echo("no templates (install a template plugin; `swiftcore plugins` lists what is installed)")
        return
    width = max(len(s.name) for s in specs)
    for spec in specs:
        official = " [official]" if spec.official else ""
        supports = f" (supports: {', '.join(spec.supports)})" if spec.supports else ""
        click.echo(f"{spec.name:<{width}}  {spec.provider.plugin:<18} {spec.description}{official}{supports}")


@template.command("render")
@click.option("--template", "name", required=True, help="Template name (see 'swiftcore template list').")
@click.option(
    "--input",
    "input_path",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="JSONL file of records ({'messages': [...], 'tools'?, 'chat_template_kwargs'?}).",
)
@click.option("--generation-prompt", is_flag=True, help="Drop trailing assistant turns and add the generation prompt.")
@click.option(
    "--tokenizer", "tokenizer_dir", default=None, help="Tokenizer directory (needed by the 'jinja' template)."
)
@plugin_option
@pass_state
def render(
    state: CliState,
    name: str,
    input_path: Path,
    generation_prompt: bool,
    tokenizer_dir: str | None,
    plugin_specs: tuple[str, ...],
) -> None:
    """Render each record; print {"id", "text"} or {"id", "error"} per line."""
    from swiftcore.template import TemplateError, get_template

    tpl = get_template(name, state.plugins(plugin_specs))
    if tokenizer_dir is not None and hasattr(tpl, "from_tokenizer"):
        tpl = tpl.from_tokenizer(_load_tokenizer(tokenizer_dir))
    for number, record in _read_jsonl(input_path):
        record_id = record.get("id", number) if isinstance(record, dict) else number
        try:
            case = _prompt_only(record) if generation_prompt else record
            out = {"id": record_id, "text": tpl.render(case, add_generation_prompt=generation_prompt)}
        except (TemplateError, KeyError, TypeError) as exc:
            out = {"id": record_id, "error": str(exc)}
        click.echo(json.dumps(out, ensure_ascii=False))


def _load_tokenizer(path: str) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as exc:
        raise SwiftcoreError(f"cannot load a tokenizer from {path!r}: {exc}") from exc


@template.command("encode")
@click.option("--template", "name", required=True, help="Template name (see 'swiftcore template list').")
@click.option("--tokenizer", "tokenizer_dir", required=True, help="Tokenizer directory.")
@click.option(
    "--input",
    "input_path",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="JSONL file of records.",
)
@click.option(
    "--loss-policy",
    default="all_assistant",
    show_default=True,
    type=click.Choice(["all_assistant", "last_round", "all"]),
)
@click.option("--max-length", type=int, default=None, help="Longest sample in tokens.")
@click.option(
    "--truncation",
    default="error",
    show_default=True,
    type=click.Choice(["error", "truncate_left", "truncate_right", "drop"]),
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON line per record instead of the colour view.")
@plugin_option
@pass_state
def encode(
    state: CliState,
    name: str,
    tokenizer_dir: str,
    input_path: Path,
    loss_policy: str,
    max_length: int | None,
    truncation: str,
    as_json: bool,
    plugin_specs: tuple[str, ...],
) -> None:
    """Encode each record: ids, labels, and the tokens that carry loss (green)."""
    from swiftcore.template import TemplateError, get_template

    tpl = get_template(name, state.plugins(plugin_specs))
    tokenizer = _load_tokenizer(tokenizer_dir)
    for number, record in _read_jsonl(input_path):
        record_id = record.get("id", number) if isinstance(record, dict) else number
        try:
            enc = tpl.encode(tokenizer, record, loss_policy=loss_policy, max_length=max_length, truncation=truncation)
        except TemplateError as exc:
            click.echo(json.dumps({"id": record_id, "error": str(exc)}, ensure_ascii=False))
            continue
        if enc is None:
            click.echo(json.dumps({"id": record_id, "dropped": True}))
            continue
        if as_json:
            click.echo(json.dumps({"id": record_id, **enc.to_dict()}, ensure_ascii=False))
            continue
        click.echo(
            click.style(
                f"== {record_id}: {len(enc)} tokens, {sum(label != -100 for label in enc.labels)} with loss", bold=True
            )
        )
        click.echo(f"input_ids: {enc.input_ids}")
        click.echo(f"labels:    {enc.labels}")
        click.echo(_colour_view(tokenizer, enc.input_ids, enc.labels))


def _colour_view(tokenizer: Any, ids: list[int], labels: list[int]) -> str:
    """Tokens, green where they carry loss and dim where they do not."""
    parts = []
    for token, label in zip(ids, labels, strict=False):
        text = tokenizer.decode([token])
        parts.append(click.style(text, fg="green", bold=True) if label != -100 else click.style(text, dim=True))
    return "".join(parts)
