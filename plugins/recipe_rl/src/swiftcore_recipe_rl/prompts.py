"""A run's prompts encoded once, before any model loads: the TRL dataset rows, each prompt's template ids, the record
a rollout engine encodes and the record the rewards get (:func:`encode_prompts`, part of the run's plan).

Importing this module imports neither torch nor TRL.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MEDIA_COLUMN", "EncodedPrompts", "encode_prompts", "reward_record"]

#: The dataset column that, in a run whose prompts carry images, gives each row its entry of
#: :attr:`EncodedPrompts.media`: two rows that differ only in their image have the same prompt text, so the text
#: cannot key their pixels. The trainer takes it out of the batch before the rewards see it.
MEDIA_COLUMN = "_swiftcore_prompt"

log = logging.getLogger("swiftcore.rl")


@dataclass
class EncodedPrompts:
    """A run's prompts as the trainer, the rollout engine, the rewards and the episode loop need them; plain data
    (picklable: the Ray executor receives it with the plan).

    Attributes:
        dataset: the TRL dataset rows: ``prompt`` (the template-encoded text) and the reward columns.
        ids: prompt text -> its template ids.
        records: prompt text -> the prompt record (what a rollout engine encodes).
        reward_records: prompt text -> the record the rewards get (:func:`reward_record`).
        environment_rows: with ``--environment``, prompt text -> the row its environment's ``reset`` got (the
            episode loop resets each episode's environment on it); empty without.
        media: with image prompts, one entry per dataset row (its :data:`MEDIA_COLUMN`): ``ids`` (the template
            ids, each image's placeholder expanded), ``media`` (the lazily expanded media:
            :meth:`~swiftcore_recipe_rl.rollout.PromptCodec.encode_prompt`; None for a text row), ``record``
            (the record its rewards get) and ``prompt_record`` (the record as the policy is prompted with it: what
            a teacher server is sent); empty for a text-only run.
    """

    dataset: list[dict[str, Any]] = field(default_factory=list)
    ids: dict[str, list[int]] = field(default_factory=dict)
    records: dict[str, dict] = field(default_factory=dict)
    reward_records: dict[str, dict] = field(default_factory=dict)
    environment_rows: dict[str, dict] = field(default_factory=dict)
    media: list[dict[str, Any]] = field(default_factory=list)


def reward_record(record: dict, own: Any, cfg: Any) -> dict:
    """``record`` (a prompt record as the policy is prompted with it) as the rewards get it: without the run's
    ``--enable-thinking/--disable-thinking`` default, which :func:`encode_prompts` added under the row's own
    ``chat_template_kwargs`` (``own``: the row's, kept; what an environment's ``reset`` set itself is kept too).

    That default is how the policy is prompted; a reward that renders the conversation for a model of its own (the
    ``reward_model``) applies that model's defaults, and the row's own kwargs on top of them."""
    if cfg.enable_thinking is None or (isinstance(own, dict) and "enable_thinking" in own):
        return record
    kwargs = dict(record.get("chat_template_kwargs") or {})
    if kwargs.get("enable_thinking", None) is not cfg.enable_thinking:  # the environment's own choice: kept
        return record
    del kwargs["enable_thinking"]
    out = {k: v for k, v in record.items() if k != "chat_template_kwargs"}
    return {**out, "chat_template_kwargs": kwargs} if kwargs else out


def encode_prompts(rows: list, codec: Any, cfg: Any, options: Any, episodes: Any = None) -> EncodedPrompts:
    """Every prompt row encoded by the family's template (``codec``: a
    :class:`~swiftcore_recipe_rl.rollout.PromptCodec`) and checked against the length budget.

    With ``episodes`` (an :class:`~swiftcore_recipe_rl.episodes.EpisodeRollout`) each prompt is what its
    environment's ``reset`` returns for the row.

    Raises:
        DataError: tool rows for a template with no tool format (:func:`~swiftcore_recipe_rl.data.refuse_tool_prompts`).
        SwiftcoreError: a prompt longer than ``--max-length`` minus ``--max-completion-length`` (unless
            ``--truncation drop``), or no prompt left.
    """
    from swiftcore.api import SwiftcoreError
    from swiftcore_recipe_rl.data import refuse_tool_prompts

    refuse_tool_prompts(rows, codec.template.name)  # a template with no tool format would show none of them
    room = cfg.max_length - options.max_completion_length
    out = EncodedPrompts()
    dropped = 0
    entries: list[dict[str, Any]] = []
    for row in rows:
        record = source = row.record
        if cfg.enable_thinking is not None:  # --enable-thinking/--disable-thinking: the default, a row's own wins
            kwargs = dict(record.get("chat_template_kwargs") or {})
            kwargs.setdefault("enable_thinking", cfg.enable_thinking)
            record = source = {**record, "chat_template_kwargs": kwargs}
        if episodes is not None:  # the prompt is the environment's (its tools shown), checked here like any other
            _, record = episodes.reset({**source, **row.columns})
        text, ids, media = codec.encode_prompt(record)  # images: their placeholders expanded, as infer has them
        if len(ids) > room:
            if cfg.truncation == "drop":
                dropped += 1
                continue
            raise SwiftcoreError(
                f"{row.where}: the prompt has {len(ids)} tokens; with --max-completion-length "
                f"{options.max_completion_length} that exceeds --max-length {cfg.max_length}: raise --max-length, "
                "shorten the prompt, or pass --truncation drop"
            )
        rewarded = reward_record(record, row.record.get("chat_template_kwargs"), cfg)
        out.ids[text] = ids
        out.records[text] = record
        out.reward_records[text] = rewarded
        if episodes is not None:
            out.environment_rows[text] = source
        out.dataset.append({"prompt": text, **row.columns})
        entries.append({"ids": ids, "media": media, "record": rewarded, "prompt_record": record})
    if any(entry["media"] is not None for entry in entries):  # rows whose text may repeat: each keyed by its row
        out.media = entries
        for index, row_out in enumerate(out.dataset):
            row_out[MEDIA_COLUMN] = index
        log.info("%d of %d prompts carry images", sum(e["media"] is not None for e in entries), len(entries))
    if dropped:
        log.warning("dropped %d prompt(s) longer than --max-length minus --max-completion-length", dropped)
    if not out.dataset:
        raise SwiftcoreError("no prompt left to train on (see the warning above)")
    return out
