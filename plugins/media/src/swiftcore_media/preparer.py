"""The preparer: media placeholders of an encoded sample expanded by the model's processor, and batching.

A template renders one short placeholder per image or audio clip (``<|vision_start|><|image_pad|><|vision_end|>``
for one family, ``<|image|>`` / ``<|audio|>`` for another). The model wants that placeholder repeated once per
embedding its vision or audio tower emits, plus the tensors the tower reads. The family's processor knows
both; the preparer calls it on each placeholder and splices the result into the encoded sample::

    preparer = prepare_media(spec, model_dir, tokenizer)       # None for a text-only model
    sample = preparer.expand(template.encode(tokenizer, record), record)
    batch = preparer.collate([sample, ...])                    # model(**batch)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from swiftcore_media.controls import apply_controls, media_controls
from swiftcore_media.errors import IGNORE_INDEX, MEDIA_COLUMNS, TAGS, TEXT_KEYS, MediaError
from swiftcore_media.items import load_audio, load_image, media_value

__all__ = ["MediaPreparer", "has_media"]


@dataclass
class MediaPreparer:
    """Expands media placeholders of encoded samples and collates multimodal batches.

    Attributes:
        processor: a transformers-style processor (see :func:`load_media_processor`).
        tokenizer: the tokenizer the samples were encoded with (its pad id pads ``input_ids``).
        modalities: the media types the model takes (``image``, ``audio``, ``video``).
        where: names the checkpoint in error messages.
    """

    processor: Any
    tokenizer: Any
    modalities: tuple[str, ...] = ("image", "audio")
    where: str = "model"

    @property
    def sampling_rate(self) -> int:
        """The audio feature extractor's sampling rate (16 kHz when the processor has none)."""
        extractor = getattr(self.processor, "feature_extractor", None)
        return int(getattr(extractor, "sampling_rate", None) or 16_000)

    def expand(
        self, encoded: Any, record: Mapping[str, Any], max_length: int | None = None, *, lazy: bool = False
    ) -> dict[str, Any]:
        """Replace each media placeholder by the processor's expansion and add the towers' inputs.

        Args:
            encoded: the :class:`~swiftcore.template.Encoded` sample of ``record`` (or its ``to_dict()``).
            record: the record; media parts without a value of their own take the next item of its
                ``images`` / ``audios`` column, in order.
            max_length: when given, an expanded sample longer than this raises ``SampleTooLongError``.
            lazy: keep the media items (``media_items``) instead of their tensors; :meth:`collate` runs the
                processor again for each batch. A whole dataset's pixel tensors rarely fit in memory (one
                Gemma 4 image is 7.7 MB of float32 patches), so a trainer should expand lazily.

        Returns:
            ``input_ids`` and ``labels`` (lists; -100 on every media token), ``mm_token_type_ids`` (list,
            when the processor makes them) and the processor's tensors per media type concatenated over
            the sample's items (``pixel_values``, ``image_grid_thw`` / ``image_position_ids``,
            ``input_features``, ``input_features_mask`` ...), or with ``lazy`` the items instead.

        Raises:
            MediaError: a media type the model does not take, an item that cannot be loaded, more
                placeholders than column items, or a processor output that does not fit the placeholder.
        """
        ids, labels, media = _unpack(encoded)
        where = str(record.get("_source") or (f"record {record['id']!r}" if record.get("id") is not None else "record"))
        values = self._values(media, record, where)
        out_ids: list[int] = []
        out_labels: list[int] = []
        out_types: list[int] = []
        tensors: dict[str, list[Any]] = {}
        items: list[tuple[str, Any, str, str, dict[str, float]]] = []
        has_types = False
        pos = 0
        for index, (m, value) in enumerate(zip(media, values, strict=True)):
            start, end, kind, text = _field(m, "start"), _field(m, "end"), _field(m, "type"), _field(m, "text")
            out_ids += ids[pos:start]
            out_labels += labels[pos:start]
            out_types += [0] * (start - pos)
            what = f"{where}: {kind} {index}"
            # The part's own bounds on its item (max_pixels, max_seconds ...: swiftcore_media.controls).
            controls = media_controls(_field(m, "item"), kind, what)
            item = (kind, value, text or self._span_text(ids, start, end), what, controls)
            items.append(item)
            expanded = self._process(*item)
            span = [int(t) for t in expanded.pop("input_ids")]
            out_ids += span
            out_labels += [IGNORE_INDEX] * len(span)
            span_types = expanded.pop("mm_token_type_ids", None)
            has_types = has_types or span_types is not None
            out_types += span_types if span_types is not None else [0] * len(span)
            for key, value_tensor in expanded.items():
                tensors.setdefault(key, []).append(value_tensor)
            pos = end
        out_ids += ids[pos:]
        out_labels += labels[pos:]
        out_types += [0] * (len(ids) - pos)
        if max_length is not None and len(out_ids) > max_length:
            from swiftcore.api.template import SampleTooLongError

            raise SampleTooLongError(
                f"{where}: {len(out_ids)} tokens after expanding its media is longer than max_length={max_length}; "
                "raise max_length or use smaller images / shorter audio"
            )
        sample: dict[str, Any] = {"input_ids": out_ids, "labels": out_labels}
        if has_types:
            sample["mm_token_type_ids"] = out_types
        if lazy and media:
            sample["media_items"] = items
            return sample
        for key, parts in tensors.items():
            sample[key] = _concat(parts, key)
        return sample

    def item_inputs(self, items: Sequence[tuple[str, Any, str, str, dict[str, float]]]) -> list[tuple[str, Any]]:
        """``(media type, value)`` for each of a lazily expanded sample's ``media_items``: the very image (PIL,
        within its part's controls) or waveform (``{"array", "sampling_rate"}`` at :attr:`sampling_rate`) the
        processor is given for it, for an engine that runs the family's processor itself (vLLM)."""
        out: list[tuple[str, Any]] = []
        for kind, value, _text, what, controls in items:
            if kind == "video":
                raise MediaError(
                    f"{what}: this inference engine runs the model's processor itself, and swiftcore does not hand "
                    "it videos yet; use --backend transformers for video"
                )
            item = self._item(kind, value, what, controls)
            out.append((kind, item if kind == "image" else {"array": item, "sampling_rate": self.sampling_rate}))
        return out

    def media_tensors(self, items: Sequence[tuple[str, Any, str, str, dict[str, float]]]) -> dict[str, Any]:
        """The processor's tensors for a lazily expanded sample's ``media_items``, concatenated per key."""
        tensors: dict[str, list[Any]] = {}
        for item in items:
            out = self._process(*item)
            out.pop("input_ids")
            out.pop("mm_token_type_ids", None)
            for key, tensor in out.items():
                tensors.setdefault(key, []).append(tensor)
        return {key: _concat(parts, key) for key, parts in tensors.items()}

    def collate(self, samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Pad the text like :class:`swiftcore_data.PaddingCollator` (right padding) and concatenate the media
        tensors over the batch, in sample order (the order the model meets the placeholders).

        Returns:
            ``input_ids``, ``labels``, ``attention_mask`` (``[B, L]``), ``mm_token_type_ids`` (``[B, L]``, 0 on
            padding) when any sample has it, and each media tensor concatenated along its first dimension
            (other dimensions padded to the longest with 0, or -1 for position ids).
        """
        import torch
        from swiftcore_data import PaddingCollator

        pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        batch = PaddingCollator(pad_id)([{"input_ids": s["input_ids"], "labels": s.get("labels")} for s in samples])
        length = batch["input_ids"].shape[1]
        if any("mm_token_type_ids" in s for s in samples):
            rows = []
            for s in samples:
                types = list(s.get("mm_token_type_ids") or [0] * len(s["input_ids"]))
                rows.append(types + [0] * (length - len(types)))
            batch["mm_token_type_ids"] = torch.tensor(rows, dtype=torch.long)
        # Lazily expanded samples get their tensors now, in sample order like the eager ones.
        samples = [{**s, **self.media_tensors(s["media_items"])} if s.get("media_items") else s for s in samples]
        skip = ("input_ids", "labels", "mm_token_type_ids", "media_items", "length")
        keys = dict.fromkeys(k for s in samples for k in s if k not in skip)
        for key in keys:
            parts = [torch.as_tensor(s[key]) for s in samples if s.get(key) is not None]
            batch[key] = _concat(parts, key)
        return batch

    # -------------------------------------------------------------------------------------- helpers

    def _values(self, media: Sequence[Any], record: Mapping[str, Any], where: str) -> list[Any]:
        """Each placeholder's media value: its own, or the next item of the record's column."""
        columns = {kind: iter(record.get(column) or ()) for kind, column in MEDIA_COLUMNS.items()}
        values = []
        for index, m in enumerate(media):
            kind = _field(m, "type")
            if kind not in self.modalities:
                raise MediaError(
                    f"{where}: {kind} {index}: model in {self.where} takes {', '.join(self.modalities)} only; "
                    f"remove the {kind} or choose a model that takes it"
                )
            value = media_value(_field(m, "item"), kind)
            if value is None:
                value = next(columns[kind], None)
            if value is None:
                raise MediaError(
                    f"{where}: {kind} {index} has no value and the {MEDIA_COLUMNS[kind]!r} column has no item left; "
                    f"give the part a {kind!r} value or add the item to {MEDIA_COLUMNS[kind]!r}"
                )
            values.append(value)
        self._check_columns_used(columns, where)
        return values

    @staticmethod
    def _check_columns_used(columns: dict[str, Any], where: str) -> None:
        """Refuse column items no placeholder took: they would silently not be trained on."""
        for kind, items in columns.items():
            left = sum(1 for _ in items)
            if left:
                column = MEDIA_COLUMNS[kind]
                raise MediaError(
                    f"{where}: {left} item(s) of the {column!r} column have no {kind} placeholder in the rendered "
                    f"sample; give each one a content part {{'type': '{kind}'}} (convert ms-swift style "
                    f"{TAGS[kind]} tags with media_tags_to_parts before encoding)"
                )

    def _item(self, kind: str, value: Any, what: str, controls: Mapping[str, float] | None) -> Any:
        """One item as the processor takes it: a PIL image or a waveform at :attr:`sampling_rate`, within
        ``controls``, or a video's frames sampled within them and their metadata
        (:func:`swiftcore_media.video.load_video`; a ``(frames, metadata)`` pair it returned, e.g. a server's early
        decode under its limits and the part's controls, is taken as it is)."""
        if kind == "video" and isinstance(value, tuple) and len(value) == 2 and hasattr(value[1], "frames_indices"):
            return value
        if kind == "video":
            video_processor = getattr(self.processor, "video_processor", None)
            if video_processor is None:
                raise MediaError(
                    f"{what}: the processor of the model in {self.where} has no video processor (transformers has "
                    "none for its family, or its settings could not be read: see the log); remove the video"
                )
            from swiftcore_media.video import load_video

            sampling = controls or {}
            frames = sampling.get("max_frames")  # a whole number (media_controls checks it), held as a float
            max_frames = None if frames is None else int(frames)
            return load_video(value, video_processor, what, fps=sampling.get("fps"), max_frames=max_frames)
        if kind == "image":
            return apply_controls(load_image(value, what), kind, controls or {}, self.sampling_rate)
        return apply_controls(load_audio(value, self.sampling_rate, what), kind, controls or {}, self.sampling_rate)

    def _span_text(self, ids: list[int], start: int, end: int) -> str:
        return self.tokenizer.decode(ids[start:end], skip_special_tokens=False)

    def _process(
        self, kind: str, value: Any, text: str, what: str, controls: Mapping[str, float] | None = None
    ) -> dict[str, Any]:
        """Run the processor on one placeholder and its item (within the part's ``controls``); return its output
        without the text-side extras (attention mask, keys the processor itself marks unused)."""
        token = getattr(self.processor, f"{kind}_token", None)
        if not token or token not in text:
            raise MediaError(
                f"{what}: the template's placeholder {text!r} does not contain the processor's {kind} token "
                f"{token!r}; the template does not match the model in {self.where} (pass the model's own --template)"
            )
        item = self._item(kind, value, what, controls)
        if kind == "image":
            kwargs: dict[str, Any] = {"images": [item]}
        elif kind == "video":
            # Frames sampled at decoding; the metadata carries their indices and the rate, which the processor
            # turns into the prompt's per-frame-group timestamps.
            frames, metadata = item
            kwargs = {"videos": [frames], "video_metadata": [metadata], "do_sample_frames": False}
        else:
            kwargs = {"audio": [item], "sampling_rate": self.sampling_rate}
        try:
            out = self.processor(text=text, add_special_tokens=False, return_tensors="pt", **kwargs)
        except (ValueError, TypeError, RuntimeError) as exc:
            raise MediaError(f"{what}: the processor failed on it: {exc}") from exc
        unused = set(getattr(self.processor, "unused_input_names", ()) or ())
        result: dict[str, Any] = {"input_ids": out["input_ids"][0].tolist()}
        # Only processors that make mm_token_type_ids have models that read them (M-RoPE, bidirectional
        # vision attention); others (Qwen3-ASR) would get an unexpected keyword.
        if out.get("mm_token_type_ids") is not None:
            result["mm_token_type_ids"] = [int(t) for t in out["mm_token_type_ids"][0]]
        for key, value_out in out.items():
            # video_metadata: the processor's own record of the frames it was given, not a model input.
            if key not in TEXT_KEYS and key not in unused and value_out is not None and key != "video_metadata":
                result[key] = value_out
        return result


def has_media(sample: Mapping[str, Any]) -> bool:
    """Whether an expanded sample carries media inputs (anything besides ``input_ids`` and ``labels``).

    The trainer uses it to pick :meth:`MediaPreparer.collate` over the text collators, and to refuse packing
    (packed rows would need per-sample media offsets and position ids, which are not implemented).
    """
    return any(key not in ("input_ids", "labels", "length") for key in sample)


def _field(media: Any, name: str) -> Any:
    return media[name] if isinstance(media, Mapping) else getattr(media, name, None)


def _unpack(encoded: Any) -> tuple[list[int], list[int], list[Any]]:
    if isinstance(encoded, Mapping):
        ids, labels, media = encoded["input_ids"], encoded.get("labels"), encoded.get("media") or []
    else:
        ids, labels, media = encoded.input_ids, encoded.labels, encoded.media
    ids = [int(t) for t in ids]
    labels = [int(t) for t in labels] if labels is not None else [IGNORE_INDEX] * len(ids)
    media = sorted(media, key=lambda m: _field(m, "start"))
    last = 0
    for m in media:
        if _field(m, "start") < last or _field(m, "end") > len(ids):
            span = f"{_field(m, 'start')}..{_field(m, 'end')}"
            raise MediaError(f"media placeholders overlap or run past the sample (tokens {span}); re-encode the record")
        last = _field(m, "end")
    return ids, labels, media


def _concat(parts: list[Any], key: str) -> Any:
    """Concatenate tensors along dim 0, padding the other dimensions to the largest (0, or -1 for
    position ids, whose -1 marks padding patches)."""
    import torch

    parts = [torch.as_tensor(p) for p in parts]
    if len(parts) == 1:
        return parts[0]
    if parts[0].dim() == 0:
        return torch.stack(parts)
    shape = [max(p.shape[d] for p in parts) for d in range(1, parts[0].dim())]
    pad_value = -1 if key.endswith("position_ids") else 0
    padded = []
    for p in parts:
        if list(p.shape[1:]) != shape:
            full = torch.full((p.shape[0], *shape), pad_value, dtype=p.dtype)
            full[(slice(None), *(slice(0, s) for s in p.shape[1:]))] = p
            p = full
        padded.append(p)
    return torch.cat(padded, dim=0)
