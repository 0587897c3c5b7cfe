"""On-policy self-distillation (``--recipe opsd``): the teacher is the policy itself, shown privileged context.

OPSD (Zhao et al., 2026, "Self-Distilled Reasoner: On-Policy Self-Distillation for Large Language Models") is
``opd`` with one model in both roles: the student samples a completion of the prompt as it will be asked; the same
model, given the prompt with privileged context the student never sees (the row's reference answer or solution,
``--opsd-context``), scores each sampled token; the token's advantage is ``opd``'s,
:func:`~swiftcore_recipe_rl.losses.kl_advantages`::

    A_t = log p(y_t | x + context, y_<t) - log p(y_t | x, y_<t)     (+ w * A_i with --opd-reward-weight w)

trained with GRPO's loss. The teacher's prompt is the student's with its last user message rewritten by
``--opsd-context-format`` (``{prompt}`` and ``{context}``), encoded by the same template, so both score the
same completion ids. A prompt with images keeps them in the teacher's prompt (the context goes into the message's
text), and the teacher's forward takes the round's pixels with its own prompt ids. This module holds the plan step's
parts: the column check and the teacher prompts; the trainer is :func:`~swiftcore_recipe_rl.trainer.opsd_trainer_class`.
"""

from __future__ import annotations

from typing import Any

from swiftcore.api import SwiftcoreError
from swiftcore_recipe_rl.prompts import MEDIA_COLUMN

__all__ = ["check_context_column", "privileged_record", "teacher_key", "teacher_prompt_ids"]


def check_context_column(rows: list[Any], options: Any, where: str) -> None:
    """Refuse a dataset whose rows lack the ``--opsd-context`` column (checked before any model loads)."""
    name = options.opsd_context
    columns = sorted(rows[0].columns) if rows else []
    if name not in columns:
        raise SwiftcoreError(
            f"--recipe opsd: {where} has no {name!r} column (its columns: {columns or 'none'}); the teacher reads each "
            f"prompt's privileged context from it: add the column, or name another with --opsd-context"
        )


def privileged_record(record: dict[str, Any], context: Any, pattern: str) -> dict[str, Any]:
    """``record`` (a chat record ending with the user turn the policy answers) with that last user message's text
    rewritten as ``pattern.format(prompt=text, context=context)``: the teacher's prompt.

    A message of content parts (a prompt with images) keeps every part, its images included, so the teacher sees the
    image the student sees: the pattern rewrites its last text part, or, in a message without one, makes a new text
    part of ``pattern.format(prompt="", context=context)`` (leading whitespace stripped) appended after the others.

    Raises:
        SwiftcoreError: no user message, or one whose content is neither text nor a list of content parts (naming the
            row's ``file:line``).
    """
    messages = [dict(m) for m in record["messages"]]
    last = next((m for m in reversed(messages) if m.get("role") == "user"), None)
    content = None if last is None else last.get("content")
    if last is not None and isinstance(content, str):
        last["content"] = pattern.format(prompt=content, context=context)
        return {**record, "messages": messages}
    if last is None or not isinstance(content, list) or not all(isinstance(p, dict) for p in content):
        raise SwiftcoreError(
            f"{record.get('_source', 'a prompt')}: --recipe opsd writes the privileged context (--opsd-context-format) "
            "into the prompt's last user message, but it has "
            + ("no user message" if last is None else f"content of type {type(content).__name__}")
            + "; give that message text or a list of content parts"
        )
    parts = [dict(p) for p in content]
    texts = [i for i, p in enumerate(parts) if p.get("type") == "text" and isinstance(p.get("text"), str)]
    if texts:
        parts[texts[-1]]["text"] = pattern.format(prompt=parts[texts[-1]]["text"], context=context)
    else:  # an image alone: the context is the message's only text
        parts.append({"type": "text", "text": pattern.format(prompt="", context=context).lstrip()})
    last["content"] = parts
    return {**record, "messages": messages}


def teacher_key(row: dict[str, Any], column: str) -> tuple[str, str, int]:
    """The key of a dataset row's teacher prompt: its prompt text, its context (two rows may share a prompt) and, in a
    run with image prompts, its :data:`~swiftcore_recipe_rl.prompts.MEDIA_COLUMN` (two rows may share the text and
    differ in their image); -1 in a text-only run."""
    return row["prompt"], str(row[column]), int(row.get(MEDIA_COLUMN, -1))


def teacher_prompt_ids(prompts: Any, codec: Any, options: Any) -> dict[tuple[str, str, int], dict[str, Any]]:
    """:func:`teacher_key` -> the teacher's prompt, for every row of ``prompts``
    (:class:`~swiftcore_recipe_rl.prompts.EncodedPrompts`), encoded by ``codec`` as the student's prompts are:
    ``ids`` (each image's placeholder expanded, as in the student's prompt) and ``types`` (its ``mm_token_type_ids``
    where the processor makes them, else None).

    The teacher's prompt of an image row keeps the row's images (:func:`privileged_record`), so the trainer's teacher
    forward takes the round's pixels as they are.

    Raises:
        SwiftcoreError: a teacher prompt that would carry other images than the student's (e.g. an ``<image>`` tag
            in the context column), naming the row and ``--opsd-context``.
    """
    out: dict[tuple[str, str, int], dict[str, Any]] = {}
    for row in prompts.dataset:
        key = teacher_key(row, options.opsd_context)
        if key in out:
            continue
        index = row.get(MEDIA_COLUMN)
        # an image run keys its records by row: two rows may share a prompt text and differ in their image
        student = prompts.records[row["prompt"]] if index is None else prompts.media[index]["prompt_record"]
        record = privileged_record(student, row[options.opsd_context], options.opsd_context_format)
        what = (f"{student.get('_source', 'a prompt')}: the teacher's prompt (the {options.opsd_context!r} column "
                "written in by --opsd-context-format)")  # fmt: skip
        try:
            _, ids, media = codec.encode_prompt(record)
        except SwiftcoreError as exc:  # e.g. an <image> tag in the context, with no image behind it
            raise SwiftcoreError(f"{what} cannot be encoded: {exc}") from exc
        theirs = None if index is None else prompts.media[index]["media"]
        if _images(media) != _images(theirs):
            raise SwiftcoreError(
                f"{what} carries {len(_images(media))} media item(s), the student's {len(_images(theirs))}; the "
                "teacher scores with the student's pixels, so the context may not add or take images: drop media "
                "tags from --opsd-context's column"
            )
        out[key] = {"ids": list(ids), "types": None if media is None else media.get("mm_token_type_ids")}
    return out


def _images(media: dict[str, Any] | None) -> list[tuple[Any, ...]]:
    """``(kind, value, controls)`` of each media item of an encoded prompt's ``media`` (empty for a text prompt)."""
    items = (media or {}).get("media_items") or ()
    return [(item[0], item[1], item[4]) for item in items]
