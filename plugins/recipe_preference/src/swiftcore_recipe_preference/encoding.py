"""Encode preference pairs with the family's own swiftcore template (never TRL's chat-template tokenisation).

Each pair is encoded twice by the run's ``SampleEncoder`` with ``loss_policy="last_round"``: once as
prompt + chosen, once as prompt + rejected. The last run of tokens carrying loss is exactly the reply SFT would
train (reply text and end-of-turn token), and everything before it is the prompt. So the formatting
(thinking blocks, BOS, generation header) is the family's, token for token, as in SFT and at inference.

A prompt that ends in tool rounds (``user``, ``assistant`` calls, ``tool`` results, then the compared reply) is
encoded as the last of the template's ``training_rounds`` (Gemma 4's: the earlier rounds rendered as serving renders
them, where the call's empty thought channel is gone), as SFT trains that round; the earlier rounds' own loss runs
are prompt here. So the prompt is token for token what serving renders for that point of the conversation
(``tests/test_preference_prompts_match_serving.py``).

- DPO samples: ``{"prompt_ids", "chosen_ids", "rejected_ids"}`` (TRL's pre-tokenised preference columns);
  the template's trailing text after the end-of-turn token (a newline) carries no loss in SFT and is left
  out here too.
- RM samples: ``{"chosen_ids", "rejected_ids"}``, each the whole rendered conversation, as a sequence
  classifier scores it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from swiftcore_data import DataError

from swiftcore_recipe_preference.data import Pair

__all__ = ["PairMedia", "encode_dpo_pairs", "encode_kto_examples", "encode_rm_pairs", "split_reply"]

log = logging.getLogger("swiftcore.preference")

_MEDIA = ("images", "audios", "videos")


def split_reply(input_ids: Sequence[int], labels: Sequence[int], where: str) -> tuple[list[int], list[int]]:
    """``(prompt_ids, reply_ids)`` of one encoded conversation: the reply is the last run of loss-carrying tokens;
    everything before it (earlier tool-call rounds after the last user message included) is the prompt.

    Raises:
        DataError: no token carries loss.
    """
    last = next((i for i in range(len(labels) - 1, -1, -1) if labels[i] != -100), None)
    if last is None:
        raise DataError(where, None, "the reply encodes to no token (is it empty after the template?)")
    first = last
    while first > 0 and labels[first - 1] != -100:
        first -= 1
    return list(input_ids[:first]), list(input_ids[first : last + 1])


class PairMedia:
    """The media of DPO pairs on a multimodal model: the model's media preparer and each pair's media items.

    A pair's images are the prompt's, the same for its chosen and its rejected sequence. Samples hold an index
    into :attr:`items` (``media_index``, -1 for a text-only pair), so the dataset stays plain token lists; the
    processor runs per batch, in :meth:`collator`, as SFT runs it (one image's patches are megabytes).
    """

    def __init__(self, preparer: Any) -> None:
        self.preparer = preparer
        self.items: list[Any] = []

    def collator(self, text_collator: Any) -> Any:
        """A collator that adds the media tensors of every row to what ``text_collator`` (TRL's
        ``DataCollatorForPreference``: rows ``[chosen..., rejected...]``, right-padded) makes of the ids."""

        def collate(examples: list[dict[str, Any]]) -> dict[str, Any]:
            batch = text_collator(examples)
            rows = []
            for key in ("chosen_ids", "rejected_ids"):
                for e in examples:
                    ids = list(e["prompt_ids"]) + list(e[key])
                    row: dict[str, Any] = {"input_ids": ids, "labels": [-100] * len(ids)}
                    if e.get("media_index", -1) >= 0:
                        row["media_items"] = self.items[e["media_index"]]
                    if e.get("prompt_mm_types"):
                        row["mm_token_type_ids"] = list(e["prompt_mm_types"]) + [0] * len(e[key])
                    rows.append(row)
            media = self.preparer.collate(rows)  # pads like TRL's collator: same rows, same length
            batch.update({k: v for k, v in media.items() if k not in ("input_ids", "labels", "attention_mask")})
            return batch

        return collate


def _records(pairs: Sequence[Pair], media: Any = None) -> list[dict[str, Any]]:
    """Chosen and rejected records, interleaved."""
    out = []
    for pair in pairs:
        if media is None and any(pair.prompt.get(k) for k in _MEDIA):
            raise DataError(
                pair.where,
                "images",
                "image / audio / video preference pairs need a multimodal model (dpo on Qwen3.5 or Gemma 4); "
                "this model, or this recipe, takes text only",
            )
        out += [pair.record(reply) for reply in (pair.chosen, pair.rejected)]
    return out


def _encode_last_reply(
    records: Sequence[dict[str, Any]], template: Any, tokenizer: Any, cfg: Any, media: Any = None
) -> list[Any]:
    """Each record encoded by the run's :class:`~swiftcore.api.template.SampleEncoder` (the sample path SFT and
    inference share; ``--enable-thinking`` as each record's default), loss on its last reply; a template error
    names the row. With ``media`` (a preparer), each sample with media comes back expanded (lazily: its
    ``media_items``), a dict as SFT's samples are."""
    from swiftcore_train import sample_encoder

    encoder = sample_encoder(template, tokenizer, cfg, media.preparer if media is not None else None)
    # the last round of a reply after tool rounds, as SFT trains it (SampleEncoder.train_samples)
    rounds = getattr(template, "training_rounds", None) or (lambda record: [record])
    prepared = [rounds(encoder.prepare(r))[-1] for r in records]
    if media is None:
        return encoder.encode(prepared, loss_policy="last_round")
    return [
        media.preparer.expand(enc, record, lazy=True) if enc.media else enc
        for enc, record in zip(encoder.encode(prepared, loss_policy="last_round"), prepared, strict=True)
    ]


def _encode(pairs: Sequence[Pair], template: Any, tokenizer: Any, cfg: Any, media: Any = None) -> list[tuple[Any, Any]]:
    """``(chosen, rejected)`` encoded per pair; a template error names the row."""
    encoded = _encode_last_reply(_records(pairs, media), template, tokenizer, cfg, media)
    return list(zip(encoded[0::2], encoded[1::2], strict=True))


def _ids_labels(encoded: Any) -> tuple[list[int], list[int]]:
    if isinstance(encoded, dict):
        return encoded["input_ids"], encoded["labels"]
    return encoded.input_ids, encoded.labels


def _fits(n_tokens: int, pair: Any, cfg: Any) -> bool:
    """Whether a sequence of ``n_tokens`` fits ``--max-length``; ``--truncation`` says what to do otherwise.

    ``error`` raises, ``drop`` drops the pair; ``truncate_right`` / ``truncate_left`` keep it and let the
    collator cut it (TRL's ``keep_start`` / ``keep_end``).
    """
    if n_tokens <= cfg.max_length:
        return True
    if cfg.truncation == "error":
        raise DataError(
            pair.where,
            None,
            f"{n_tokens} tokens, longer than --max-length {cfg.max_length}; raise it, or pass --truncation "
            "drop / truncate_right",
            reason="too long",
        )
    return cfg.truncation != "drop"


def encode_dpo_pairs(
    pairs: Sequence[Pair], template: Any, tokenizer: Any, cfg: Any, media: PairMedia | None = None
) -> list[dict[str, Any]]:
    """DPO samples ``{"prompt_ids", "chosen_ids", "rejected_ids"}``, one per pair (too-long pairs per
    ``--truncation``). With ``media`` (a multimodal model), pairs may carry images in the prompt: their
    samples add ``media_index`` (into ``media.items``) and, when the processor makes them, the prompt's
    ``prompt_mm_types``; the prompt ids hold the expanded media placeholders.

    Raises:
        DataError: the template renders the prompt differently before the two replies (the pair would not
            compare two continuations of one prompt), or a pair is too long with ``--truncation error``.
    """
    samples = []
    for pair, (chosen, rejected) in zip(pairs, _encode(pairs, template, tokenizer, cfg, media), strict=True):
        prompt_c, chosen_ids = split_reply(*_ids_labels(chosen), pair.where)
        prompt_r, rejected_ids = split_reply(*_ids_labels(rejected), pair.where)
        if prompt_c != prompt_r:
            raise DataError(
                pair.where,
                None,
                "the template renders the prompt differently before the chosen and the rejected reply (e.g. one "
                "reply has reasoning, the other not); give both replies the same thinking mode",
                reason="prompt differs",
            )
        if _fits(len(prompt_c) + max(len(chosen_ids), len(rejected_ids)), pair, cfg):
            sample: dict[str, Any] = {"prompt_ids": prompt_c, "chosen_ids": chosen_ids, "rejected_ids": rejected_ids}
            if media is not None:
                sample["media_index"] = -1
                if isinstance(chosen, dict) and chosen.get("media_items"):
                    sample["media_index"] = len(media.items)
                    media.items.append(chosen["media_items"])
                types = chosen.get("mm_token_type_ids") if isinstance(chosen, dict) else None
                sample["prompt_mm_types"] = list(types[: len(prompt_c)]) if types else []
            samples.append(sample)
    _report(len(pairs), len(samples), cfg)
    return samples


def encode_rm_pairs(pairs: Sequence[Pair], template: Any, tokenizer: Any, cfg: Any) -> list[dict[str, list[int]]]:
    """Reward-model samples ``{"chosen_ids", "rejected_ids"}``: each whole rendered conversation.

    Too-long pairs follow ``--truncation`` (cut sequences keep their start: ``truncate_right``; the
    score then reads the last kept token).
    """
    samples = []
    for pair, (chosen, rejected) in zip(pairs, _encode(pairs, template, tokenizer, cfg), strict=True):
        split_reply(chosen.input_ids, chosen.labels, pair.where)  # a reply must encode to tokens
        split_reply(rejected.input_ids, rejected.labels, pair.where)
        chosen_ids, rejected_ids = list(chosen.input_ids), list(rejected.input_ids)
        if _fits(max(len(chosen_ids), len(rejected_ids)), pair, cfg):
            if cfg.truncation == "truncate_left":
                chosen_ids, rejected_ids = chosen_ids[-cfg.max_length :], rejected_ids[-cfg.max_length :]
            else:
                chosen_ids, rejected_ids = chosen_ids[: cfg.max_length], rejected_ids[: cfg.max_length]
            samples.append({"chosen_ids": chosen_ids, "rejected_ids": rejected_ids})
    _report(len(pairs), len(samples), cfg)
    return samples


def _report(n_pairs: int, n_kept: int, cfg: Any) -> None:
    if n_kept < n_pairs:
        log.warning("dropped %d pair(s) longer than --max-length %d", n_pairs - n_kept, cfg.max_length)
    if not n_kept:
        from swiftcore.api import SwiftcoreError

        raise SwiftcoreError("no preference pair left to train on (see the warnings above)")


def encode_kto_examples(examples: Sequence[Any], template: Any, tokenizer: Any, cfg: Any) -> list[dict[str, Any]]:
    """KTO samples ``{"prompt_ids", "completion_ids", "label"}`` (TRL's pre-tokenised unpaired columns)."""
    for example in examples:
        if any(example.prompt.get(k) for k in _MEDIA):
            raise DataError(example.where, "images", "image / audio / video examples are not supported yet")
    encoded = _encode_last_reply([example.record() for example in examples], template, tokenizer, cfg)
    samples = []
    for example, enc in zip(examples, encoded, strict=True):
        prompt_ids, completion_ids = split_reply(enc.input_ids, enc.labels, example.where)
        if _fits(len(prompt_ids) + len(completion_ids), example, cfg):
            samples.append({"prompt_ids": prompt_ids, "completion_ids": completion_ids, "label": example.label})
    _report(len(examples), len(samples), cfg)
    return samples
