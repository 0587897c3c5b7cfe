"""One sample path: a record becomes the model's input here, for training, inference and serving alike.

A :class:`SampleEncoder` holds what decides the tokens — the family's template, the tokenizer, the chat
defaults the checkpoint was trained with (``chat_template_kwargs`` such as ``enable_thinking``) and, for a
multimodal model, the media expander the model plugin's spec leads to (swiftcore-media's ``MediaPreparer``,
built from ``ModelSpec.modalities`` and ``ModelSpec.processor``). Training encodes with
:meth:`SampleEncoder.train_samples`, an engine with :meth:`SampleEncoder.prompt`: both prepare the record with
the same :meth:`SampleEncoder.prepare` and render it with the same template, so the prompt a served request
sees is token for token the prompt part of the sample it would have been trained on.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from swiftcore.errors import SwiftcoreError

__all__ = ["ENCODE_CHUNK", "MediaExpander", "SampleEncoder", "media_tags_to_parts"]

log = logging.getLogger("swiftcore.template")

#: Records per ``Template.encode_batch`` call: big, as small Rust tokenizer batch calls cost more CPU per text.
ENCODE_CHUNK = 8192
#: ms-swift style inline media tags in string content.
MEDIA_TAGS = {"image": "<image>", "audio": "<audio>", "video": "<video>"}


class MediaExpander(Protocol):
    """What expands an encoded sample's media placeholders (swiftcore-media's ``MediaPreparer``)."""

    def expand(
        self, encoded: Any, record: Mapping[str, Any], max_length: int | None = None, *, lazy: bool = False
    ) -> dict[str, Any]:
        """``{"input_ids", "labels", ...tower inputs}`` with each placeholder expanded."""


def media_tags_to_parts(record: Mapping[str, Any]) -> dict[str, Any]:
    """Turn ms-swift style ``<image>`` / ``<audio>`` / ``<video>`` tags in string contents into content parts.

    Templates render content parts as the model's placeholders; a tag left in the text would be rendered as
    the literal text ``<image>``. Each tag becomes a part without a value, so it takes the next item of the
    record's ``images`` / ``audios`` / ``videos`` column when expanded. Records without tags come back as a
    shallow copy; text parts of list contents are split the same way.

    Args:
        record: a canonical record.

    Returns:
        A new record (``record`` is not modified).
    """
    pattern = re.compile("(" + "|".join(re.escape(tag) for tag in MEDIA_TAGS.values()) + ")")
    kinds = {tag: kind for kind, tag in MEDIA_TAGS.items()}

    def split(text: str) -> list[dict[str, Any]]:
        parts = []
        for piece in pattern.split(text):
            if piece in kinds:
                parts.append({"type": kinds[piece]})
            elif piece:
                parts.append({"type": "text", "text": piece})
        return parts

    messages = []
    for message in record.get("messages") or []:
        content = message.get("content")
        if isinstance(content, str) and pattern.search(content):
            message = {**message, "content": split(content)}
        elif isinstance(content, list):
            new: list[Any] = []
            for p in content:
                tagged = isinstance(p, Mapping) and p.get("type") == "text" and pattern.search(str(p.get("text", "")))
                new += split(str(p["text"])) if tagged else [p]
            message = {**message, "content": new}
        messages.append(message)
    return {**record, "messages": messages}


@dataclass
class SampleEncoder:
    """Encodes records for one model: its template, tokenizer, chat defaults and media expander.

    Attributes:
        template: the family's :class:`~swiftcore.template.Template`.
        tokenizer: the model's tokenizer.
        media: the media expander for a multimodal checkpoint (None: text only; media parts then fail in the
            template, naming the record).
        chat_defaults: ``chat_template_kwargs`` a record gets unless it sets them itself: a run's
            ``--enable-thinking/--disable-thinking``, a checkpoint's recorded generation defaults.
    """

    template: Any
    tokenizer: Any
    media: MediaExpander | None = None
    chat_defaults: Mapping[str, Any] = field(default_factory=dict)

    def prepare(self, record: Any) -> Any:
        """``record`` as the template renders it: the chat defaults under its own ``chat_template_kwargs``, and
        (for a multimodal model) its ``<image>`` / ``<audio>`` tags made content parts. A new record."""
        if not isinstance(record, Mapping):
            return record  # a list of messages, or something the template will name as wrong
        if self.chat_defaults:
            asked = record.get("chat_template_kwargs")
            record = {
                **record,
                "chat_template_kwargs": {**self.chat_defaults, **(asked if isinstance(asked, Mapping) else {})},
            }
        return media_tags_to_parts(record) if self.media is not None else record

    def prompt(self, record: Any, *, lazy: bool = False) -> tuple[list[int], dict[str, Any] | None]:
        """The prompt of ``record`` with the generation prompt appended: ``(token ids, media tensors)``, the
        tensors None for a prompt without media. ``lazy`` (an engine running the family's processor itself: vLLM)
        keeps the media items instead of tensors, and adds ``placeholder_ids``, the template's ids before expansion.

        Raises:
            TemplateError: the record cannot be rendered.
            MediaError: (from the expander) a media item cannot be read or does not fit the template.
        """
        record = self.prepare(record)
        encoded = self.template.encode(self.tokenizer, record, add_generation_prompt=True)
        if self.media is None or not encoded.media:
            return list(encoded.input_ids), None
        sample = self.media.expand(encoded, record, lazy=lazy)
        sample.pop("labels", None)
        if lazy:
            sample["placeholder_ids"] = list(encoded.input_ids)
        return list(sample.pop("input_ids")), sample

    def encode(self, records: Sequence[Mapping[str, Any]], **options: Any) -> list[Any]:
        """Prepare and encode ``records`` with ``Template.encode_batch`` (``options``: ``loss_policy``,
        ``max_length``, ``truncation``); one :class:`~swiftcore.template.Encoded` (or None, dropped under
        ``truncation="drop"``) per record, in order.

        Raises:
            SwiftcoreError: a record cannot be encoded: the batch is encoded again record by record, so the
                error names the failing record's ``_source`` (file and line).
        """
        return self._encode_prepared([self.prepare(record) for record in records], **options)

    def _encode_prepared(self, prepared: list[Any], **options: Any) -> list[Any]:
        try:
            return list(self.template.encode_batch(self.tokenizer, prepared, **options))
        except SwiftcoreError:
            pass
        out = []
        for record in prepared:
            try:
                out.append(self.template.encode(self.tokenizer, record, **options))
            except SwiftcoreError as exc:
                raise SwiftcoreError(f"{record.get('_source', '?')}: {exc}") from exc
        return out

    def train_samples(
        self,
        records: Sequence[Mapping[str, Any]],
        *,
        loss_policy: str,
        max_length: int,
        truncation: str,
        desc: str = "encoding",
    ) -> list[dict[str, Any]]:
        """Encode records into training samples ``{"input_ids", "labels"}`` (plus the media items, expanded
        lazily, of a multimodal sample); those with no token carrying loss, or too long under
        ``truncation="drop"``, are left out with a warning.

        Records go through :meth:`encode` in chunks of :data:`ENCODE_CHUNK` (a progress bar on large datasets); a
        template with ``training_rounds(record)`` (Gemma 4's tool rounds) trains each record as the records it returns.

        Raises:
            SwiftcoreError: a record cannot be encoded (naming it), or no sample is left.
        """
        from tqdm.auto import tqdm

        options = {"loss_policy": loss_policy, "max_length": max_length, "truncation": truncation}
        samples: list[dict[str, Any]] = []
        no_loss = dropped = 0
        with tqdm(total=len(records), desc=desc, unit="sample", mininterval=1.0, disable=len(records) < 2000) as bar:
            rounds = getattr(self.template, "training_rounds", None) or (lambda record: [record])
            for start in range(0, len(records), ENCODE_CHUNK):
                chunk = [r for record in records[start : start + ENCODE_CHUNK] for r in rounds(self.prepare(record))]
                encoded = self._encode_prepared(chunk, **options)
                for record, enc in zip(chunk, encoded, strict=True):
                    if enc is None:  # truncation="drop"
                        dropped += 1
                    elif all(label == -100 for label in enc.labels):
                        no_loss += 1
                    elif self.media is not None and enc.media:
                        samples.append(self.media.expand(enc, record, max_length=max_length, lazy=True))
                    else:
                        samples.append({"input_ids": list(enc.input_ids), "labels": list(enc.labels)})
                bar.update(len(records[start : start + ENCODE_CHUNK]))
        if dropped:
            log.warning("dropped %d sample(s) longer than --max-length %d", dropped, max_length)
        if no_loss:
            log.warning("skipped %d sample(s) with no token carrying loss", no_loss)
        if not samples:
            raise SwiftcoreError(f"{desc}: no sample left to train on (see the warnings above)")
        return samples
