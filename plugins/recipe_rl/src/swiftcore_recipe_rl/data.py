"""Prompt rows for online RL: read, normalise to chat records, and check before any model is loaded.

A row is a prompt and whatever columns its rewards read::

    {"prompt": "What is 2+3?", "answer": "5"}
    {"prompt": [{"role": "system", "content": "..."}, {"role": "user", "content": "..."}], "answer": "5"}
    {"messages": [{"role": "user", "content": "..."}, {"role": "assistant", "content": "a reference reply"}]}

``prompt`` (a string: one user turn; or a list of messages) or ``messages`` (a trailing assistant turn, the
reference reply of an SFT row, is dropped: the policy writes its own). ``tools``, ``chat_template_kwargs`` and
``system`` travel with the prompt as in SFT rows. Every other column is passed to the reward functions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["RESERVED_COLUMNS", "PromptRow", "load_prompt_rows", "refuse_tool_prompts"]

#: Columns that shape the prompt itself; the rest are the rewards'.
_PROMPT_KEYS = ("prompt", "messages", "tools", "chat_template_kwargs", "system")
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
                extras = {k: row[k] for k in ("tools", "chat_template_kwargs") if k in row}
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
