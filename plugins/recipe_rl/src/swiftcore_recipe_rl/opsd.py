"""On-policy self-distillation (``--recipe opsd``): the teacher is the policy itself, shown privileged context.

OPSD (Zhao et al., 2026, "Self-Distilled Reasoner: On-Policy Self-Distillation for Large Language Models") is
``opd`` with one model in both roles: the student samples a completion of the prompt as it will be asked; the same
model, given the prompt with privileged context the student never sees (the row's reference answer or solution,
``--opsd-context``), scores each sampled token; the token's advantage is ``opd``'s,
:func:`~swiftcore_recipe_rl.losses.kl_advantages`::

    A_t = log p(y_t | x + context, y_<t) - log p(y_t | x, y_<t)     (+ w * A_i with --opd-reward-weight w)

trained with GRPO's loss. The teacher's prompt is the student's with its last user message rewritten by
``--opsd-context-format`` (``{prompt}`` and ``{context}``), encoded by the same template, so both score the
same completion ids. This module holds the plan step's parts: the column check and the teacher prompts; the trainer
is :func:`~swiftcore_recipe_rl.trainer.opsd_trainer_class`.
"""

from __future__ import annotations

from typing import Any

from swiftcore.api import SwiftcoreError

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
    rewritten as ``pattern.format(prompt=text, context=context)``: the teacher's prompt."""
    messages = [dict(m) for m in record["messages"]]
    last = next((m for m in reversed(messages) if m.get("role") == "user"), None)
    if last is None or not isinstance(last.get("content"), str):
        raise SwiftcoreError(
            "--recipe opsd: a prompt's last user message is not text; the privileged context is written into it "
            "(--opsd-context-format), so prompts with images or structured content are not supported yet"
        )
    last["content"] = pattern.format(prompt=last["content"], context=context)
    return {**record, "messages": messages}


def teacher_key(row: dict[str, Any], column: str) -> tuple[str, str]:
    """The key of a dataset row's teacher prompt: its prompt text and its context (two rows may share a prompt)."""
    return row["prompt"], str(row[column])


def teacher_prompt_ids(prompts: Any, codec: Any, options: Any) -> dict[tuple[str, str], list[int]]:
    """:func:`teacher_key` -> the teacher's prompt ids, for every row of ``prompts``
    (:class:`~swiftcore_recipe_rl.prompts.EncodedPrompts`), encoded by ``codec`` as the student's prompts are."""
    out: dict[tuple[str, str], list[int]] = {}
    for row in prompts.dataset:
        context = row[options.opsd_context]
        record = privileged_record(prompts.records[row["prompt"]], context, options.opsd_context_format)
        out[teacher_key(row, options.opsd_context)] = list(codec.encode(record)[1])
    return out
