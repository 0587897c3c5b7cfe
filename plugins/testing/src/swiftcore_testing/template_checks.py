"""Template checks that do not take the template's word for it.

The byte comparison with a template's own official Jinja (:func:`swiftcore_testing.model_checks.official_problems`)
proves nothing about a template that declares none, and the train/serve rule compares the template with
itself. These checks compare it with what was made without it, or with what any rendering must hold:

- :func:`kept_message_problems`: every system prompt and reply of a sample is in its rendering;
- :func:`stop_word_problems`, :func:`stop_token_problems`: every trained reply ends where inference stops;
- :func:`tokenizer_template_problems`: the rendering equals the tokenizer's own chat template, rendered by
  transformers' ``apply_chat_template`` (what other servers prompt the exported model with);
- :func:`reference_problems`: the rendering equals reference renderings stored with the plugin's tests.

Each returns a list of readable problems (empty when the template passes).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from swiftcore_testing.samples import text_only

__all__ = [
    "REFERENCE_FILE",
    "generation_stop_ids",
    "kept_message_problems",
    "load_reference",
    "reference_problems",
    "reference_templates",
    "stop_token_problems",
    "stop_word_problems",
    "tokenizer_template_problems",
]

#: The reference renderings a contract reads by default, beside its test module: one JSON object a line,
#: ``{"id": SAMPLE_ID, "mode": "full" | "prompt", "text": RENDERING}`` and optionally ``"template": NAME``
#: (without it, the row is for every template the contract checks).
REFERENCE_FILE = "data/conversations_expected.jsonl"


def _where(record: Mapping[str, Any]) -> str:
    return f"sample {record.get('id', '?')}"


def _first_difference(expected: str, got: str) -> str:
    """Where two renderings part, with a little context on each side."""
    at = next((i for i, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b), min(len(expected), len(got)))
    start = max(0, at - 40)
    return f"from character {at}: expected {expected[start : at + 40]!r}, got {got[start : at + 40]!r}"


def kept_message_problems(template: Any, records: list[dict[str, Any]]) -> list[str]:
    """Every system prompt and assistant reply of the plain-text samples is in the template's full rendering,
    in order (stripped of surrounding space; a reply's reasoning may go, as official templates drop past
    reasoning). User text is not required: a speech template renders the user's audio, not text."""
    from swiftcore.api.template import TemplateError, split_reasoning

    problems = []
    for record in text_only(records):
        try:
            text = template.render(record)
        except TemplateError:
            continue  # a refusal is template-renders' business
        position = 0
        for index, message in enumerate(record["messages"]):
            role, content = message.get("role"), message.get("content")
            if role not in ("system", "assistant") or not isinstance(content, str):
                continue
            wanted = split_reasoning(content, *template.reasoning_markers)[1] if role == "assistant" else content
            wanted = wanted.strip()
            if not wanted:
                continue
            found = text.find(wanted, position)
            if found < 0:
                hint = (
                    "; a template that cannot render a system prompt must raise TemplateError saying so, as "
                    "official templates do, not drop it"
                    if role == "system"
                    else ""
                )
                problems.append(
                    f"{_where(record)}: the {role} message {index} ({wanted[:60]!r}) is not in the rendering "
                    f"{text[:200]!r}: the template drops it{hint}"
                )
                break
            position = found + len(wanted)
    return problems


def _loss_runs(input_ids: list[int], labels: list[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    previous = False
    for token, label in zip(input_ids, labels, strict=False):
        if label != -100:
            if not previous:
                runs.append([])
            runs[-1].append(token)
        previous = label != -100
    return runs


def _without_trailing_space(run: list[int], tokenizer: Any) -> list[int]:
    """``run`` less the whitespace tokens it ends with (a trained newline after the stop token is harmless)."""
    end = len(run)
    while end and not tokenizer.decode(run[end - 1 : end]).strip():
        end -= 1
    return run[:end]


def stop_word_problems(template: Any, tokenizer: Any, records: list[dict[str, Any]]) -> list[str]:
    """Each trained reply of the plain-text samples (each run of loss-carrying tokens) ends with one of the
    template's ``stop_words``, the last reply included: a model trained on a reply that just ends never
    learns to stop."""
    from swiftcore.api.template import TemplateError

    stops = tuple(template.stop_words)
    if not stops:
        return [f"template {template.name!r} declares no stop_words, so inference cannot tell where a reply ends"]
    problems = []
    for record in text_only(records):
        try:
            enc = template.encode(tokenizer, record)
        except TemplateError:
            continue
        for run in _loss_runs(enc.input_ids, enc.labels):
            text = tokenizer.decode(_without_trailing_space(run, tokenizer))
            if not text.endswith(stops):
                problems.append(
                    f"{_where(record)}: a trained reply ends {text[-60:]!r}, with none of the template's stop words "
                    f"{list(stops)}: a model trained on it never learns to stop; end every assistant turn, the "
                    "last one too, with an end-of-turn token in training (the encoder appends a stop word to a last "
                    "reply that has none when it is one token: declare it in the template's special_tokens)"
                )
    return problems


def generation_stop_ids(model_dir: str | Path) -> set[int]:
    """The token ids generation stops at for the checkpoint in ``model_dir``: its generation config's
    ``eos_token_id`` (``config.json``'s, or its text config's, without a ``generation_config.json``)."""
    directory = Path(model_dir)
    found: Any = None
    generation = directory / "generation_config.json"
    if generation.is_file():
        found = json.loads(generation.read_text(encoding="utf-8")).get("eos_token_id")
    if found is None and (directory / "config.json").is_file():
        config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
        found = config.get("eos_token_id", (config.get("text_config") or {}).get("eos_token_id"))
    if found is None:
        return set()
    return {int(i) for i in (found if isinstance(found, list) else [found])}


def stop_token_problems(
    template: Any, tokenizer: Any, model_dir: str | Path, records: list[dict[str, Any]]
) -> list[str]:
    """Each trained reply of the plain-text samples ends with a token the checkpoint's generation config
    stops at (:func:`generation_stop_ids`), the last reply included."""
    from swiftcore.api.template import TemplateError

    stop_ids = generation_stop_ids(model_dir)
    if not stop_ids:
        return [f"{model_dir}: no eos_token_id in generation_config.json or config.json, so generation never stops"]
    stop_tokens = sorted(str(tokenizer.convert_ids_to_tokens(i)) for i in stop_ids)
    problems = []
    for record in text_only(records):
        try:
            enc = template.encode(tokenizer, record)
        except TemplateError:
            continue
        for run in _loss_runs(enc.input_ids, enc.labels):
            ids = _without_trailing_space(run, tokenizer)
            if not ids or ids[-1] not in stop_ids:
                problems.append(
                    f"{_where(record)}: a trained reply ends {tokenizer.decode(ids[-8:])!r}, not with a token the "
                    f"generation config stops at ({stop_tokens}): a model trained on it never learns to stop; end "
                    "every trained reply, the last one too, with one of those tokens"
                )
    return problems


def tokenizer_template_problems(template: Any, tokenizer: Any, records: Iterable[Mapping[str, Any]]) -> list[str]:
    """Differences between the template and the tokenizer's own ``chat_template`` rendered by transformers'
    ``apply_chat_template``, on every sample in full and as a generation prompt.

    The messages are the normalised record's (swiftcore's record format, e.g. content parts, is what the
    template reads too); both sides refusing a sample is agreement. Empty when the tokenizer has no chat
    template.
    """
    from swiftcore.api.template import TemplateError, generation_record, normalize_record

    if not isinstance(getattr(tokenizer, "chat_template", None), str):
        return []
    problems = []
    for record in records:
        for prompt in (False, True):
            case = generation_record(record) if prompt else dict(record)
            where = f"{_where(record)} ({'generation prompt' if prompt else 'full'})"
            try:
                conv = normalize_record(case)
                expected, refused = (
                    tokenizer.apply_chat_template(
                        conv.messages, tools=conv.tools, add_generation_prompt=prompt, tokenize=False, **conv.kwargs
                    ),
                    None,
                )
            except Exception as exc:  # whatever the chat template raises
                expected, refused = None, f"{type(exc).__name__}: {exc}"
            try:
                got, error = template.render(case, add_generation_prompt=prompt), None
            except TemplateError as exc:
                got, error = None, str(exc)
            if refused and error:
                continue
            if refused or error or expected != got:
                if isinstance(expected, str) and isinstance(got, str):
                    detail = _first_difference(expected, got)
                else:
                    detail = (
                        f"the tokenizer's chat template gives {expected!r} ({refused or 'rendered'}), "
                        f"the template {got!r} ({error or 'rendered'})"
                    )
                problems.append(f"{where}: differs from the tokenizer's own chat template {detail}")
    return problems


def load_reference(path: str | Path | None) -> list[dict[str, Any]]:
    """The reference renderings in ``path`` (see :data:`REFERENCE_FILE`); empty when there is no such file."""
    if path is None or not Path(path).is_file():
        return []
    rows = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    for number, row in enumerate(rows, 1):
        if not isinstance(row, dict) or not {"id", "mode", "text"} <= set(row) or row["mode"] not in ("full", "prompt"):
            raise ValueError(
                f"{path}, line {number}: a reference rendering is "
                '{"id": SAMPLE_ID, "mode": "full" or "prompt", "text": RENDERING} (optionally "template": NAME)'
            )
    return rows


def reference_templates(rows: list[dict[str, Any]]) -> set[str] | None:
    """The template names the rows are for; None when a row is for every template."""
    if any("template" not in row for row in rows):
        return None
    return {row["template"] for row in rows}


def reference_problems(
    template: Any, name: str, rows: list[dict[str, Any]], records: list[dict[str, Any]]
) -> list[str]:
    """Differences between the template (called ``name``) and the reference renderings ``rows`` of ``records``.

    A row's ``mode`` ``prompt`` is the sample less its trailing replies, rendered with the generation prompt.
    """
    from swiftcore.api.template import TemplateError, generation_record

    by_id = {record.get("id"): record for record in records}
    problems = []
    for row in rows:
        if row.get("template", name) != name:
            continue
        record = by_id.get(row["id"])
        if record is None:
            problems.append(f"reference rendering {row['id']!r} ({row['mode']}) names no sample conversation")
            continue
        prompt = row["mode"] == "prompt"
        where = f"{_where(record)} ({'generation prompt' if prompt else 'full'})"
        try:
            got = template.render(generation_record(record) if prompt else record, add_generation_prompt=prompt)
        except TemplateError as exc:
            problems.append(f"{where}: the template raised {exc}, the reference rendering is {row['text'][:120]!r}")
            continue
        if got != row["text"]:
            problems.append(f"{where}: differs from the reference rendering {_first_difference(row['text'], got)}")
    return problems
