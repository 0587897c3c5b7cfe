"""Prompt rows for online RL: read, normalise to chat records, and check before any model is loaded.

A row is a prompt and whatever columns its rewards read::

    {"prompt": "What is 2+3?", "answer": "5"}
    {"prompt": [{"role": "system", "content": "..."}, {"role": "user", "content": "..."}], "answer": "5"}
    {"messages": [{"role": "user", "content": "..."}, {"role": "assistant", "content": "a reference reply"}]}

``prompt`` (a string: one user turn; or a list of messages) or ``messages`` (a trailing assistant turn, the
reference reply of an SFT row, is dropped: the policy writes its own). ``tools``, ``chat_template_kwargs`` and
``system`` travel with the prompt as in SFT rows, and so do the media columns ``images`` / ``audios`` / ``videos``
(the items of ``<image>`` tags and value-less ``{"type": "image"}`` parts). Every other column is passed to the
reward functions.

A prompt may carry images (``{"type": "image", "image": PATH}`` parts, as swiftcore datasets write them): the
``grpo``, ``rloo``, ``reinforce_pp``, ``opd``, ``opsd`` and ``gkd`` recipes encode them as ``swiftcore infer`` does and
the policy sees their pixels in generation and in the loss, and a distillation teacher in its scores
(:func:`refuse_media_prompts` names the combinations that cannot, before any model loads).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "RESERVED_COLUMNS",
    "PromptRow",
    "load_prompt_rows",
    "media_parts",
    "refuse_media_prompts",
    "refuse_tool_prompts",
]

#: The columns whose items a record's media tags and value-less media parts take, in order (SFT rows' names).
_MEDIA_COLUMNS = ("images", "audios", "videos")
#: The recipes whose trainer feeds a prompt's images to the policy (trainer.py's ``ImagePrompts``: TRL's GRPO and
#: RLOO trainers; REINFORCE++ and on-policy distillation on GRPO's, an ``opd`` teacher scoring with the same pixels and
#: ``opsd``'s (the policy shown the privileged prompt, its images kept) too; ``gkd`` on TRL's DistillationTrainer,
#: whose student and teacher forwards both take the round's pixels).
IMAGE_RECIPES = ("grpo", "rloo", "reinforce_pp", "opd", "opsd", "gkd")
#: The rollout engines image prompts generate with: TRL's own generation, and swiftcore's transformers engine (each
#: row's record sent with its images, trainer.py's ``EngineRollouts``).
IMAGE_ROLLOUT_ENGINES = ("trainer", "transformers")
#: Columns that shape the prompt itself; the rest are the rewards'.
_PROMPT_KEYS = ("prompt", "messages", "tools", "chat_template_kwargs", "system", *_MEDIA_COLUMNS)
#: Keywords every reward function gets from the recipe: a dataset column may not take one of these names.
RESERVED_COLUMNS = ("prompts", "completions", "completion_ids", "options", "completion", "records")


@dataclass
class PromptRow:
    """One prompt: its chat record (what the template encodes) and the columns its rewards read.

    Attributes:
        record: the canonical chat record, ending with the turn the policy answers.
        columns: the row's other columns, by name.
        where: ``file:line`` of the row.
    """

    record: dict[str, Any]
    columns: dict[str, Any] = field(default_factory=dict)
    where: str = "?"


def _messages(row: dict[str, Any], where: str) -> list[dict[str, Any]]:
    from swiftcore_data import DataError

    prompt = row.get("prompt", row.get("messages"))
    if isinstance(prompt, str):
        messages = [{"role": "user", "content": prompt}]
    elif isinstance(prompt, list) and prompt:
        messages = [dict(m) if isinstance(m, dict) else m for m in prompt]
    else:
        raise DataError(where, "prompt", "give 'prompt' (a string or a list of messages) or 'messages'")
    if "prompt" not in row:  # an SFT-style row: its last assistant turn is a reference reply, not the prompt
        while messages and isinstance(messages[-1], dict) and messages[-1].get("role") == "assistant":
            messages.pop()
    if not messages or not isinstance(messages[-1], dict) or messages[-1].get("role") not in ("user", "tool"):
        raise DataError(where, "prompt", "the prompt must end with a user (or tool) turn for the policy to answer")
    if isinstance(row.get("system"), str) and messages[0].get("role") != "system":
        messages.insert(0, {"role": "system", "content": row["system"]})
    return messages


def load_prompt_rows(sources: tuple[str, ...] | list[str], *, skip_bad_rows: bool = False) -> list[PromptRow]:
    """Every row of ``sources`` (``--dataset`` values) as a :class:`PromptRow`.

    Raises:
        DataError: a row that is no prompt (naming its file and line), unless ``skip_bad_rows``; or no row at all.
        SwiftcoreError: rows whose reward columns differ (a reward would get a column for some rows only).
    """
    import logging

    from swiftcore_data import DataError, iter_rows, normalize_record, parse_dataset_arg

    from swiftcore.api import SwiftcoreError

    log = logging.getLogger("swiftcore.rl")
    rows: list[PromptRow] = []
    skipped = 0
    for source in sources:
        for where, row in iter_rows(parse_dataset_arg(source)):
            try:
                if isinstance(row, Exception):
                    raise row
                if not isinstance(row, dict):
                    raise DataError(where, None, f"expected a JSON object, got {type(row).__name__}")
                extras = {k: row[k] for k in ("tools", "chat_template_kwargs", *_MEDIA_COLUMNS) if k in row}
                record = normalize_record({"messages": _messages(row, where), **extras}, where, require_assistant=False)
            except DataError:
                if not skip_bad_rows:
                    raise
                skipped += 1
                continue
            columns = {k: v for k, v in row.items() if k not in _PROMPT_KEYS and not k.startswith("_")}
            rows.append(PromptRow(record=record, columns=columns, where=where))
    if skipped:
        log.warning("skipped %d bad row(s) (--skip-bad-rows)", skipped)
    if not rows:
        raise SwiftcoreError(f"--dataset {', '.join(sources)}: no prompt row to train on")
    names = set(rows[0].columns)
    clash = sorted(names & set(RESERVED_COLUMNS))
    if clash:
        raise SwiftcoreError(
            f"{rows[0].where}: column(s) {', '.join(map(repr, clash))} would shadow what every reward function is "
            f"passed ({', '.join(RESERVED_COLUMNS)}); rename them"
        )
    for row in rows:
        if set(row.columns) != names:
            raise SwiftcoreError(
                f"{row.where}: columns {sorted(row.columns)} differ from the first row's {sorted(names)}; every row "
                "must carry the same reward columns"
            )
    return rows


def refuse_tool_prompts(rows: list[PromptRow], template: str, plugins: Any = None) -> None:
    """Refuse prompt rows that offer tools or hold tool turns when ``template`` has no tool format, as the ``sft``
    recipe refuses them: its official chat template renders none of them, so the policy would be prompted without
    the tools (and a tool turn as nothing) while its rewards read them.

    Args:
        rows: the run's prompt rows (:func:`load_prompt_rows`).
        template: the name of the template the prompts are encoded with.
        plugins: the loaded plugins (None: the run's set, as the CLI exported it); read only when a row is a tool
            row.

    Raises:
        DataError: naming the first offending rows (file:line), the template and ``--agent-template``.
    """
    from swiftcore_data import is_tool_row, refuse_tool_rows

    if not any(is_tool_row(r.record) for r in rows):
        return
    from swiftcore.api import load_plugins

    spec = (plugins or load_plugins()).registry.get("template", template)
    if spec.official and "tools" not in spec.supports:  # OLMoE, Qwen3-ASR: no tool format
        refuse_tool_rows([{**r.record, "_source": r.where} for r in rows], spec.name)


def media_parts(record: dict[str, Any]) -> list[tuple[str, str]]:
    """``(where, media type)`` of each media item a prompt record carries: its media content parts (``image``,
    ``audio``, ``video``, an ``image_url`` ...), its ``<image>`` / ``<audio>`` / ``<video>`` tags (with a media
    column) and the items of its media columns; empty for a text prompt."""
    from swiftcore.api.template import media_tags_to_parts, media_type

    found = []
    # tags are media only with a media column to take their items from (else a prompt may quote "<image>" as text)
    tagged = media_tags_to_parts(record) if any(record.get(c) for c in _MEDIA_COLUMNS) else record
    for i, message in enumerate(tagged.get("messages") or []):
        content = message.get("content") if isinstance(message, dict) else None
        for j, part in enumerate(content if isinstance(content, list) else ()):
            kind = media_type(part) if isinstance(part, dict) and part.get("type") != "text" else None
            if kind is not None:
                found.append((f"messages[{i}].content[{j}]", kind))
    for column in _MEDIA_COLUMNS:
        items = record.get(column)
        if isinstance(items, list) and items:
            found.append((f"{column} ({len(items)} item(s))", column[:-1]))
    return found


def refuse_media_prompts(
    rows: list[PromptRow], recipe: str, options: Any, spec: Any, *, engine: str = "transformers"
) -> bool:
    """Whether the run's prompts carry media; refuse those it cannot train on, before any model loads.

    Prompts with images train with the :data:`IMAGE_RECIPES` and the :data:`IMAGE_ROLLOUT_ENGINES` on a model whose
    spec takes images, on the default training engine: the other recipes, another ``engine`` (``--engine megatron``'s
    ``grpo`` / ``gkd`` loops feed no pixels), the vLLM engine, a rollout server, Ray, asynchronous or speculative
    rollouts, multi-turn environments and the refill of ``--dapo-max-resample`` would drop or cannot regroup the
    pixels (or are not tested with them), so they are refused, naming the option and the first such row; so are audio
    and video, which no recipe here feeds yet.

    Raises:
        SwiftcoreError: the first unsupported combination (the row's ``file:line``, the option, what to do).
    """
    from swiftcore.api import SwiftcoreError

    media = [(row, found) for row in rows if (found := media_parts(row.record))]
    if not media:
        return False
    row, found = media[0]
    first = f"{row.where}: {found[0][0]} is {'an' if found[0][1] == 'image' else 'a'} {found[0][1]}"
    count = f"{len(media)} prompt(s) carry media"
    kinds = sorted({kind for _, parts in media for _, kind in parts})
    if kinds != ["image"]:
        other = next((r, f) for r, parts in media for f in parts if f[1] != "image")
        raise SwiftcoreError(
            f"{other[0].where}: {other[1][0]} is {other[1][1]}: the {recipe} recipe trains on image prompts only so "
            "far (audio and video are not fed to the policy); drop those rows or their media"
        )
    takes = tuple(getattr(spec, "modalities", ()) or ())
    if "image" not in takes:
        raise SwiftcoreError(
            f"{first}, but model {spec.name!r} ({spec.provider}) takes no images (its modalities: "
            f"{', '.join(takes) or 'text'}); use a vision model (e.g. qwen3_5) or drop the images from --dataset"
        )
    what = f"{first} ({count})"
    refusals = [
        (
            recipe not in IMAGE_RECIPES,
            f"--recipe {recipe}",
            f"train image prompts with --recipe {' / '.join(IMAGE_RECIPES)}",
        ),
        (engine != "transformers", f"--engine {engine}", "drop --engine (the default transformers engine feeds them)"),
        (
            getattr(options, "rollout_engine", "trainer") not in IMAGE_ROLLOUT_ENGINES,
            f"--rollout-engine {getattr(options, 'rollout_engine', '')}",
            f"use --rollout-engine {' or '.join(IMAGE_ROLLOUT_ENGINES)} (TRL's generation on the policy, the "
            "default, or the transformers engine, which encode the images as served)",
        ),
        (bool(getattr(options, "async_rollouts", False)), "--async-rollouts", "drop --async-rollouts"),
        (bool(getattr(options, "rollout_draft", "")), "--rollout-draft", "drop --rollout-draft"),
        (bool(getattr(options, "environment", "")), "--environment", "drop --environment (single-turn rollouts)"),
        (
            bool(getattr(options, "dapo_max_resample", 0)),
            f"--dapo-max-resample {getattr(options, 'dapo_max_resample', 0)}",
            "use --dapo-max-resample 0 (the filter form of --dynamic-sampling takes images)",
        ),
    ]
    for refused, option, fix in refusals:
        if refused:
            raise SwiftcoreError(
                f"{what}: {option} does not take image prompts yet (the pixels would not reach the policy); {fix}"
            )
    return True
