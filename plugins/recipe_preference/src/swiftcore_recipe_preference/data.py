"""Preference rows -> :class:`Pair`: one prompt conversation, a chosen and a rejected assistant reply.

Accepted row shapes (jsonl / json / parquet / HF datasets, read with swiftcore's readers):

- ms-swift: ``{"messages": [..., {"role": "assistant", "content": CHOSEN}], "rejected_response": REJECTED}``
  (the last assistant turn is the chosen reply; ``rejected_response`` is a string or an assistant message).
- TRL conversational, implicit prompt: ``{"chosen": [msgs..., assistant], "rejected": [msgs..., assistant]}``
  (both lists share the prompt turns; only the last, assistant, turn differs).
- TRL / OpenAI-style, explicit prompt: ``{"prompt": [msgs...] | str, "chosen": [assistant] | str,
  "rejected": [assistant] | str}`` (a string prompt is one user turn, a string reply one assistant turn).

KTO also takes unpaired rows: ms-swift's ``{"messages": [..., assistant], "label": true|false}`` or TRL's
``{"prompt", "completion", "label"}``; a preference pair there counts as one desirable and one undesirable reply.

``tools``, ``chat_template_kwargs`` and ``system`` travel with the prompt as in SFT rows. Every problem is a
:class:`~swiftcore_data.DataError` naming the file, line and field, raised before any model is loaded.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from swiftcore_data import DataError, iter_rows, normalize_record, parse_dataset_arg

__all__ = ["Example", "Pair", "load_pairs", "load_unpaired", "parse_pair", "parse_unpaired", "split_pairs"]

log = logging.getLogger("swiftcore.preference")

#: Row keys that belong to the prompt record (copied to both the chosen and the rejected conversation).
_EXTRAS = ("tools", "chat_template_kwargs", "system", "images", "audios", "videos", "id")


@dataclass
class Pair:
    """One validated preference pair.

    Attributes:
        prompt: the canonical prompt record (``messages`` without the reply, plus tools / kwargs / media).
        chosen: the preferred assistant message.
        rejected: the dispreferred assistant message.
        where: ``file:line`` of the row.
    """

    prompt: dict[str, Any]
    chosen: dict[str, Any]
    rejected: dict[str, Any]
    where: str

    def record(self, reply: dict[str, Any]) -> dict[str, Any]:
        """The canonical record ``prompt + reply`` a template encodes (``_source`` names the row)."""
        return {**self.prompt, "messages": [*self.prompt["messages"], reply], "_source": self.where}


def _reply(value: Any, where: str, field: str) -> dict[str, Any]:
    """A reply given as text, one assistant message, or a one-message list -> the assistant message."""
    if isinstance(value, str):
        if not value.strip():
            raise DataError(where, field, "empty reply; a preference pair needs two non-empty replies")
        return {"role": "assistant", "content": value}
    if isinstance(value, Sequence) and not isinstance(value, str):
        if len(value) != 1:
            raise DataError(
                where,
                field,
                f"expected one assistant message after the prompt, got {len(value)}; only single-turn replies "
                "are compared",
            )
        value = value[0]
        field = f"{field}[0]"
    if not isinstance(value, Mapping) or value.get("role", "assistant") != "assistant":
        raise DataError(where, field, f"expected an assistant message or text, got {value!r:.80}")
    return {"role": "assistant", **dict(value)}


def _split_conversations(chosen: Any, rejected: Any, where: str) -> tuple[list, Any, Any]:
    """TRL's implicit-prompt rows: the shared leading turns are the prompt, the last turns the replies."""
    for field, value in (("chosen", chosen), ("rejected", rejected)):
        if not isinstance(value, list) or not value:
            raise DataError(where, field, f"expected a non-empty list of messages, got {value!r:.80}")
        last = value[-1]
        if not isinstance(last, Mapping) or last.get("role") != "assistant":
            raise DataError(where, f"{field}[{len(value) - 1}]", "the last message must be the assistant's reply")
    if list(chosen[:-1]) != list(rejected[:-1]):
        raise DataError(
            where,
            "rejected",
            "its prompt turns differ from those of 'chosen'; both lists must share every turn but the last",
        )
    return list(chosen[:-1]), chosen[-1], rejected[-1]


def parse_pair(row: Any, where: str) -> Pair:
    """Validate one row and return its :class:`Pair`.

    Raises:
        DataError: the row is no preference row, lacks the rejected reply, has identical replies, or its
            prompt conversation fails swiftcore's usual checks (roles, tool calls, media); the message names
            ``where`` and the field.
    """
    if not isinstance(row, Mapping):
        raise DataError(where, None, f"expected a JSON object per row, got {type(row).__name__}")
    extras = {k: row[k] for k in _EXTRAS if row.get(k) is not None}
    if row.get("messages") is not None:
        messages = row["messages"]
        if not isinstance(messages, list) or not messages:
            raise DataError(where, "messages", "expected a non-empty list of messages")
        if not isinstance(messages[-1], Mapping) or messages[-1].get("role") != "assistant":
            raise DataError(
                where, f"messages[{len(messages) - 1}]", "the last message must be the chosen assistant reply"
            )
        if row.get("rejected_response") is None:
            raise DataError(
                where,
                "rejected_response",
                "missing; a preference row needs the rejected reply beside the chosen one (the last assistant message)",
                reason="missing rejected reply",
            )
        prompt, chosen = list(messages[:-1]), _reply(messages[-1], where, f"messages[{len(messages) - 1}]")
        rejected_field = "rejected_response"
        rejected = _reply(row["rejected_response"], where, rejected_field)
    elif row.get("chosen") is not None or row.get("rejected") is not None:
        for field in ("chosen", "rejected"):
            if row.get(field) is None:
                raise DataError(
                    where,
                    field,
                    "missing; a preference row needs both 'chosen' and 'rejected'",
                    reason=f"missing {field} reply",
                )
        rejected_field = "rejected"
        if row.get("prompt") is None:
            prompt, chosen, rejected = _split_conversations(row["chosen"], row["rejected"], where)
            chosen = _reply(chosen, where, "chosen")
            rejected = _reply(rejected, where, "rejected")
        else:
            value = row["prompt"]
            prompt = [{"role": "user", "content": value}] if isinstance(value, str) else value
            if not isinstance(prompt, list) or not prompt:
                raise DataError(where, "prompt", "expected text or a non-empty list of messages")
            chosen = _reply(row["chosen"], where, "chosen")
            rejected = _reply(row["rejected"], where, "rejected")
    else:
        raise DataError(
            where,
            None,
            f"not a preference row (columns: {', '.join(map(str, row)) or 'none'}); expected 'messages' + "
            "'rejected_response', 'chosen' + 'rejected', or 'prompt' + 'chosen' + 'rejected'",
            reason="not a preference row",
        )
    if _same(chosen, rejected):
        raise DataError(
            where,
            rejected_field,
            "identical to the chosen reply; a pair must prefer one reply over a different one",
            reason="identical replies",
        )
    # The prompt + chosen conversation goes through swiftcore's own row checks (roles, tool calls, media
    # placeholders), so a bad prompt is reported exactly as an SFT row would be.
    record = normalize_record({"messages": [*prompt, chosen], **extras}, where)
    record.pop("_source", None)
    chosen = record["messages"].pop()
    return Pair(prompt=record, chosen=chosen, rejected=rejected, where=where)


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two replies say the same thing (same content and reasoning; whitespace at the ends ignored)."""

    def key(m: Mapping[str, Any]) -> tuple:
        """What a reply says: its content, reasoning and tool calls."""
        content = m.get("content")
        content = content.strip() if isinstance(content, str) else repr(content)
        reasoning = m.get("reasoning_content") or m.get("reasoning") or ""
        return content, str(reasoning).strip(), repr(m.get("tool_calls"))

    return key(a) == key(b)


def load_pairs(sources: Iterable[str], *, skip_bad_rows: bool = False) -> list[Pair]:
    """Read and validate every row of the ``--dataset`` arguments ``sources``.

    Args:
        sources: dataset arguments (paths, ``hf:`` names), as ``--dataset`` takes them.
        skip_bad_rows: log and drop bad rows instead of raising on the first.

    Raises:
        DataError: the first bad row (unless ``skip_bad_rows``), or no pair at all.
    """
    pairs: list[Pair] = []
    skipped: dict[str, int] = {}
    first: dict[str, str] = {}
    for source in sources:
        for where, row in iter_rows(parse_dataset_arg(source)):
            try:
                if isinstance(row, DataError):
                    raise row
                pairs.append(parse_pair(row, where))
            except DataError as exc:
                if not skip_bad_rows:
                    raise
                skipped[exc.reason] = skipped.get(exc.reason, 0) + 1
                first.setdefault(exc.reason, str(exc))
    for reason, count in skipped.items():
        log.warning("skipped %d row(s): %s (e.g. %s)", count, reason, first[reason])
    if not pairs:
        raise DataError(", ".join(sources) or "--dataset", None, "no preference pair to train on")
    return pairs


def split_pairs(pairs: list[Any], ratio: float, seed: int) -> tuple[list[Any], list[Any]]:
    """``(train, val)``: a seeded random ``ratio`` of the pairs held out (at least one when ``ratio > 0``)."""
    if ratio <= 0 or len(pairs) < 2:
        return pairs, []
    order = list(range(len(pairs)))
    random.Random(seed).shuffle(order)
    n_val = min(len(pairs) - 1, max(1, round(len(pairs) * ratio)))
    held = set(order[:n_val])
    return [p for i, p in enumerate(pairs) if i not in held], [p for i, p in enumerate(pairs) if i in held]


@dataclass
class Example:
    """One validated unpaired example (KTO): a prompt, one assistant reply, and whether it is desirable.

    Attributes:
        prompt: the canonical prompt record.
        reply: the assistant message.
        label: True for a desirable reply, False for an undesirable one.
        where: ``file:line`` of the row.
    """

    prompt: dict[str, Any]
    reply: dict[str, Any]
    label: bool
    where: str

    def record(self) -> dict[str, Any]:
        """The canonical record ``prompt + reply`` a template encodes."""
        return {**self.prompt, "messages": [*self.prompt["messages"], self.reply], "_source": self.where}


def _label(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise DataError(where, "label", f"expected true or false (desirable or not), got {value!r}", reason="bad label")


def parse_unpaired(row: Any, where: str) -> list[Example]:
    """One row -> its KTO examples: a labelled row gives one, a preference pair two (chosen desirable, rejected not).

    Labelled rows: ms-swift's ``{"messages": [..., assistant], "label": true}`` or TRL's ``{"prompt",
    "completion", "label"}`` (text or messages).

    Raises:
        DataError: a bad label, a missing reply, or any problem :func:`parse_pair` reports for pairs.
    """
    if not isinstance(row, Mapping) or row.get("label") is None:
        pair = parse_pair(row, where)
        return [Example(pair.prompt, pair.chosen, True, where), Example(pair.prompt, pair.rejected, False, where)]
    label = _label(row["label"], where)
    extras = {k: row[k] for k in _EXTRAS if row.get(k) is not None}
    if row.get("messages") is not None:
        messages = row["messages"]
        if not isinstance(messages, list) or not messages or not isinstance(messages[-1], Mapping):
            raise DataError(where, "messages", "expected a non-empty list of messages")
        if messages[-1].get("role") != "assistant":
            raise DataError(where, f"messages[{len(messages) - 1}]", "the last message must be the assistant reply")
        prompt, reply = list(messages[:-1]), _reply(messages[-1], where, f"messages[{len(messages) - 1}]")
    elif row.get("completion") is not None and row.get("prompt") is not None:
        value = row["prompt"]
        prompt = [{"role": "user", "content": value}] if isinstance(value, str) else value
        if not isinstance(prompt, list) or not prompt:
            raise DataError(where, "prompt", "expected text or a non-empty list of messages")
        reply = _reply(row["completion"], where, "completion")
    else:
        raise DataError(
            where,
            None,
            "a labelled row needs 'messages' (the last turn is the reply) or 'prompt' + 'completion'",
            reason="not a KTO row",
        )
    record = normalize_record({"messages": [*prompt, reply], **extras}, where)
    record.pop("_source", None)
    reply = record["messages"].pop()
    return [Example(prompt=record, reply=reply, label=label, where=where)]


def load_unpaired(sources: Iterable[str], *, skip_bad_rows: bool = False) -> list[Example]:
    """Read the KTO examples of ``sources`` (labelled rows and preference pairs alike).

    Raises:
        DataError: a bad row (unless ``skip_bad_rows``), or labels all of one kind (KTO weighs desirable
            against undesirable replies and needs both).
    """
    examples: list[Example] = []
    skipped = 0
    for source in sources:
        for where, row in iter_rows(parse_dataset_arg(source)):
            try:
                if isinstance(row, DataError):
                    raise row
                examples.extend(parse_unpaired(row, where))
            except DataError as exc:
                if not skip_bad_rows:
                    raise
                skipped += 1
                log.warning("skipped %s", exc)
    names = ", ".join(sources) or "--dataset"
    if not examples:
        raise DataError(names, None, "no example to train on")
    desirable = sum(e.label for e in examples)
    if desirable in (0, len(examples)):
        kind = "desirable (label true)" if desirable else "undesirable (label false)"
        raise DataError(
            names,
            "label",
            f"all {len(examples)} examples are {kind}; KTO needs both desirable and undesirable replies",
            reason="labels of one kind",
        )
    return examples
