"""Multimodal training samples: media placeholders expanded by the model's own processor, and batched.

A template renders one short placeholder per image or audio clip (``<|vision_start|><|image_pad|><|vision_end|>``
for Qwen3.5, ``<|image|>`` / ``<|audio|>`` for Gemma 4). The model wants that placeholder repeated once per
embedding its vision or audio tower emits, plus the tensors the tower reads. The family's processor knows
both; this module calls it on each placeholder and splices the result into the encoded sample::

    preparer = prepare_media(spec, model_dir, tokenizer)       # None for a text-only model
    sample = preparer.expand(template.encode(tokenizer, record), record)
    batch = preparer.collate([sample, ...])                    # model(**batch)

Which processor: a family plugin may ship ``<plugin package>.media`` with ``load_processor(model_dir,
tokenizer)`` (Gemma 4 does: transformers' ``Gemma4Processor`` module needs torchvision); otherwise the
processor class named in ``processor_config.json`` is built from its PIL image processor and audio feature
extractor, leaving out the video processor when it cannot be loaded (it needs torchvision, which a CPU-only
environment cannot have; see notes/tiny_models.md). Either way the result is called like a transformers
processor: ``processor(text=..., images=[...], audio=[...], add_special_tokens=False, return_tensors="pt")``.

Importing this module does not import torch, transformers, PIL or numpy.
"""

from __future__ import annotations

import base64
import copy
import importlib
import importlib.util
import io
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from swiftcore.errors import SwiftcoreError

__all__ = [
    "MEDIA_COLUMNS",
    "MediaError",
    "MediaPreparer",
    "has_media",
    "load_audio",
    "load_image",
    "load_media_processor",
    "load_processor_without_video",
    "media_modalities",
    "media_tags_to_parts",
    "media_value",
    "prepare_media",
    "processor_files",
]

log = logging.getLogger("swiftcore.train")

IGNORE_INDEX = -100
#: Media type -> the record column holding the items of parts that carry no value of their own.
MEDIA_COLUMNS = {"image": "images", "audio": "audios", "video": "videos"}
#: Processor outputs that are text-side (handled here) rather than tower inputs.
_TEXT_KEYS = ("input_ids", "attention_mask", "token_type_ids", "mm_token_type_ids", "text_replacement_offsets")
#: ms-swift style inline media tags in string content.
_TAGS = {"image": "<image>", "audio": "<audio>", "video": "<video>"}
#: The media types samples can be trained on (video needs a video processor, i.e. torchvision; not yet).
_TRAINABLE = ("image", "audio")


class MediaError(SwiftcoreError):
    """A media item cannot be loaded, or the model's processor cannot be built or does not fit the template."""


# ---------------------------------------------------------------------------------------------- loading


def prepare_media(spec: Any, model_dir: str | Path, tokenizer: Any) -> MediaPreparer | None:
    """The :class:`MediaPreparer` for a multimodal model, or None for a text-only one.

    Args:
        spec: the model's :class:`~swiftcore.specs.ModelSpec`; ``spec.modalities`` says whether it takes
            images or audio.
        model_dir: the checkpoint directory (its ``processor_config.json`` / preprocessor files).
        tokenizer: the tokenizer the samples were encoded with (the processor gets a copy).

    Returns:
        The preparer, or None when the spec lists no image or audio modality or the checkpoint has no
        processor files (a text-only export of a multimodal family).

    Raises:
        MediaError: the checkpoint has processor files but the processor cannot be built.
    """
    modalities = media_modalities(spec, model_dir)
    if not modalities:
        return None
    processor = load_media_processor(spec, model_dir, tokenizer)
    return MediaPreparer(processor, tokenizer, modalities=modalities, where=str(model_dir))


#: The files a checkpoint needs, besides the tokenizer's, for its processor to be rebuilt.
PROCESSOR_FILES = ("processor_config.json", "preprocessor_config.json")


def _has_processor_files(model_dir: Path) -> bool:
    return any((model_dir / name).is_file() for name in PROCESSOR_FILES)


def media_modalities(spec: Any, model_dir: str | Path) -> tuple[str, ...]:
    """The media a checkpoint's samples may carry: the spec's trainable modalities (``image``, ``audio``) when
    the checkpoint has its processor files, else none (a text-only export of a multimodal family).

    Training (:func:`prepare_media`) and inference decide it alike, so a prompt takes the media training took.
    """
    modalities = tuple(m for m in getattr(spec, "modalities", ()) if m in _TRAINABLE)
    return modalities if modalities and _has_processor_files(Path(model_dir)) else ()


def processor_files(model_dir: str | Path) -> dict[str, str]:
    """File name -> text of ``model_dir``'s processor files (empty for a text-only model).

    A trained checkpoint of a multimodal model needs them next to its weights and tokenizer, or inference
    cannot expand its media placeholders (``swiftcore infer`` / ``deploy`` would refuse images and audio);
    the trainer writes them into every checkpoint.
    """
    model_dir = Path(model_dir)
    return {
        name: (model_dir / name).read_text(encoding="utf-8") for name in PROCESSOR_FILES if (model_dir / name).is_file()
    }


def load_media_processor(spec: Any, model_dir: str | Path, tokenizer: Any) -> Any:
    """The processor that expands ``spec``'s media placeholders (see the module docstring for the order).

    Args:
        spec: the model spec (its provider names the family plugin whose ``media`` module is tried first).
        model_dir: the checkpoint directory.
        tokenizer: the tokenizer; the processor gets a deep copy, because some processors add tokens
            to theirs (``Gemma4Processor`` registers ``<|video|>``).

    Raises:
        MediaError: no processor can be built from ``model_dir``.
    """
    tokenizer = copy.deepcopy(tokenizer)
    family = _family_media_module(spec)
    if family is not None and hasattr(family, "load_processor"):
        log.info("media: processor from %s.load_processor", family.__name__)
        return family.load_processor(str(model_dir), tokenizer)
    return load_processor_without_video(model_dir, tokenizer)


def _family_media_module(spec: Any) -> Any | None:
    """``<package>.media`` of the plugin that provided ``spec`` (by its entry point), if it exists."""
    packages = []
    provider = getattr(spec, "provider", None)
    if provider is not None and provider.distribution:
        try:
            dist = metadata.distribution(provider.distribution)
            packages += [
                ep.value.partition(":")[0].rpartition(".")[0]
                for ep in dist.entry_points
                if ep.group == "swiftcore.plugins"
            ]
        except metadata.PackageNotFoundError:
            pass
    # A plugin loaded from a module or file has no distribution: its lazy references name its package.
    for ref in (spec.loader, spec.tiny_config, spec.model_class):
        module = (ref or "").partition(":")[0]
        if module and not module.startswith("transformers"):
            packages.append(module.rpartition(".")[0])
    for package in dict.fromkeys(p for p in packages if p):
        name = f"{package}.media"
        try:
            found = importlib.util.find_spec(name)
        except ModuleNotFoundError:
            found = None
        if found is not None:
            return importlib.import_module(name)
    return None


def load_processor_without_video(model_dir: str | Path, tokenizer: Any) -> Any:
    """Build the processor class named in ``processor_config.json``, leaving out a video processor that
    cannot be loaded.

    transformers' composite processors insist on every sub-processor; their video processors need
    torchvision. The image processor (PIL backend) and the audio feature extractor do not, and they are
    all that image and audio training needs; the processor's own placeholder expansion
    (``replace_image_token`` / ``replace_audio_token``) and tokenization are then used unchanged.

    Args:
        model_dir: the checkpoint directory.
        tokenizer: the tokenizer the processor tokenizes with.

    Raises:
        MediaError: no processor config, or the class or a sub-processor cannot be loaded.
    """
    import transformers

    model_dir = Path(model_dir)
    settings = _processor_settings(model_dir)
    name = settings.get("processor_class")
    if not name:
        raise MediaError(f"{model_dir}: processor_config.json names no processor_class; re-save the processor")
    try:
        cls = getattr(transformers, name)
    except (AttributeError, ImportError) as exc:
        raise MediaError(
            f"{model_dir}: transformers {transformers.__version__} cannot import processor class {name!r} "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); upgrade transformers, or "
            "install the family plugin that ships a media module for it"
        ) from exc
    parts = {}
    for attribute in cls.get_attributes():
        parts[attribute] = _load_part(attribute, model_dir, tokenizer)
    if any(value is None for value in parts.values()):
        cls = _without_missing_parts(cls)
    processor_dict = {k: v for k, v in settings.items() if k not in parts and k != "processor_class"}
    try:
        return cls.from_args_and_dict(list(parts.values()), processor_dict)
    except (TypeError, ValueError) as exc:
        raise MediaError(f"{model_dir}: cannot build {name} from its parts: {exc}") from exc


def _processor_settings(model_dir: Path) -> dict[str, Any]:
    path = model_dir / "processor_config.json"
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise MediaError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg}); re-save the processor") from exc


def _load_part(attribute: str, model_dir: Path, tokenizer: Any) -> Any:
    """One sub-processor: the tokenizer given, or the Auto class for its modality (None for a video one
    that cannot be loaded)."""
    from transformers import AutoFeatureExtractor, AutoImageProcessor

    if "tokenizer" in attribute:
        return tokenizer
    if "video" in attribute:
        try:
            from transformers import AutoVideoProcessor

            return AutoVideoProcessor.from_pretrained(str(model_dir))
        except (ImportError, OSError, ValueError, AttributeError) as exc:
            log.info("media: no video processor for %s (%s); images and audio only", model_dir, type(exc).__name__)
            return None
    auto = {"image_processor": AutoImageProcessor, "feature_extractor": AutoFeatureExtractor}.get(attribute)
    if auto is None:
        raise MediaError(f"{model_dir}: processor part {attribute!r} is not supported for training yet")
    try:
        return auto.from_pretrained(str(model_dir))
    except (ImportError, OSError, ValueError) as exc:
        raise MediaError(f"{model_dir}: cannot load the processor's {attribute} ({type(exc).__name__}: {exc})") from exc


def _without_missing_parts(cls: type) -> type:
    """A subclass of ``cls`` that accepts None for a sub-processor (the base class type-checks every part)."""

    def check_argument_for_proper_class(self: Any, argument_name: str, argument: Any) -> Any:
        if argument is None:
            return None
        return cls.check_argument_for_proper_class(self, argument_name, argument)

    return type(cls.__name__, (cls,), {"check_argument_for_proper_class": check_argument_for_proper_class})


# ---------------------------------------------------------------------------------------------- media items


def media_value(item: Any, kind: str) -> Any | None:
    """The value a content part carries (path, URL, PIL image, array ...), or None when it has none.

    Understands ``{"type": "image", "image": x}``, OpenAI's ``{"type": "image_url", "image_url": {"url": x}}``
    and ``{"type": "input_audio", "input_audio": {"data": b64, "format": "wav"}}``, and ``audio_url``.
    """
    if not isinstance(item, Mapping):
        return item
    for key in (kind, f"{kind}_url", f"input_{kind}"):
        value = item.get(key)
        if value is None:
            continue
        if isinstance(value, Mapping) and "url" in value:
            return value["url"]
        return value
    return None


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
    import re

    pattern = re.compile("(" + "|".join(re.escape(tag) for tag in _TAGS.values()) + ")")
    kinds = {tag: kind for kind, tag in _TAGS.items()}

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


def _read_source(value: Any, what: str) -> bytes | str | Path:
    """A path, ``file://`` or ``data:`` URL -> a path or the bytes."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, Path):
        return value
    if isinstance(value, str):
        if value.startswith("data:"):
            return base64.b64decode(value.partition(",")[2])
        if value.startswith("file://"):
            return Path(value[len("file://") :])
        if value.startswith(("http://", "https://")):
            raise MediaError(f"{what}: {value!r} is a URL; download it and give its path (training reads local files)")
        return Path(value)
    raise MediaError(f"{what}: cannot read a {type(value).__name__}; give a path, bytes or a decoded object")


def load_image(value: Any, what: str = "image") -> Any:
    """A PIL image (RGB) from a PIL image, path, ``file://`` / ``data:`` URL, bytes, numpy array, or a
    ``{"bytes", "path"}`` dict (a Hugging Face ``Image`` feature).

    Raises:
        MediaError: the file is missing or not an image.
    """
    from PIL import Image

    if isinstance(value, Image.Image):
        return value.convert("RGB")
    if isinstance(value, Mapping):
        value = value.get("bytes") or value.get("path")
    if hasattr(value, "__array__") and not isinstance(value, (str, bytes)):
        import numpy as np

        return Image.fromarray(np.asarray(value)).convert("RGB")
    source = _read_source(value, what)
    try:
        image = Image.open(io.BytesIO(source) if isinstance(source, bytes) else source)
        image.load()
    except FileNotFoundError as exc:
        raise MediaError(f"{what}: file {str(source)!r} not found; fix the path in the dataset") from exc
    except OSError as exc:
        raise MediaError(f"{what}: cannot read {_describe(source)} as an image ({exc})") from exc
    return image.convert("RGB")


def _describe(source: Any) -> str:
    """A file's path, or the size of inline bytes (their repr says nothing to a reader)."""
    return f"the {len(source)} given bytes" if isinstance(source, bytes) else repr(str(source)[:80])


def load_audio(value: Any, sampling_rate: int, what: str = "audio") -> Any:
    """A mono float32 numpy waveform at ``sampling_rate`` Hz.

    Accepts a numpy array (taken to be at ``sampling_rate`` already), a ``{"array", "sampling_rate"}``
    dict (a Hugging Face ``Audio`` feature), OpenAI's ``{"data": base64, "format": "wav"}``, a path or a
    ``file://`` / ``data:`` URL. PCM WAV files are read with the standard library; other formats need
    ``soundfile``.

    Raises:
        MediaError: the file is missing or cannot be decoded.
    """
    import numpy as np

    rate = sampling_rate
    if isinstance(value, Mapping):
        if "array" in value:
            value, rate = value["array"], int(value.get("sampling_rate") or sampling_rate)
        elif "data" in value:
            value = base64.b64decode(value["data"])
        else:
            value = value.get("bytes") or value.get("path")
    if hasattr(value, "__array__") and not isinstance(value, (str, bytes)):
        wave = np.asarray(value, dtype=np.float32)
    else:
        wave, rate = _decode_audio(_read_source(value, what), what)
    if wave.ndim == 2:  # (frames, channels) -> mono
        wave = wave.mean(axis=1)
    if wave.ndim != 1 or wave.size == 0:
        raise MediaError(f"{what}: expected a non-empty mono or (frames, channels) waveform, got shape {wave.shape}")
    return _resample(wave.astype(np.float32), rate, sampling_rate)


def _decode_audio(source: bytes | str | Path, what: str) -> tuple[Any, int]:
    import wave as wavefile

    import numpy as np

    handle = io.BytesIO(source) if isinstance(source, bytes) else source
    try:
        with wavefile.open(handle if isinstance(handle, io.BytesIO) else str(handle), "rb") as wav:
            width, channels, rate = wav.getsampwidth(), wav.getnchannels(), wav.getframerate()
            frames = wav.getnframes()
            raw = wav.readframes(frames)
    except FileNotFoundError as exc:
        raise MediaError(f"{what}: file {str(source)!r} not found; fix the path in the dataset") from exc
    except (wavefile.Error, EOFError) as exc:
        return _decode_with_soundfile(source, what, exc)
    if len(raw) < frames * width * channels:
        raise MediaError(
            f"{what}: truncated WAV: its header says {frames} frames, the data holds "
            f"{len(raw) // max(width * channels, 1)}; send the whole file"
        )
    if width == 1:
        data = (np.frombuffer(raw, np.uint8).astype(np.float32) - 128.0) / 128.0
    elif width in (2, 4):
        dtype = np.int16 if width == 2 else np.int32
        data = np.frombuffer(raw, dtype).astype(np.float32) / float(np.iinfo(dtype).max + 1)
    else:  # 24-bit: sign-extend three little-endian bytes into int32
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
        data = ((b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)) << 8 >> 8).astype(np.float32) / float(1 << 23)
    return data.reshape(-1, channels), rate


def _decode_with_soundfile(source: bytes | str | Path, what: str, wav_error: Exception) -> tuple[Any, int]:
    try:
        import soundfile
    except ImportError:
        raise MediaError(
            f"{what}: {_describe(source)} is not a PCM WAV file ({wav_error}); `pip install soundfile` to read "
            "other formats (FLAC, OGG, float WAV), or convert it to 16-bit WAV"
        ) from None
    try:
        data, rate = soundfile.read(io.BytesIO(source) if isinstance(source, bytes) else str(source), dtype="float32")
    except RuntimeError as exc:
        raise MediaError(f"{what}: cannot decode {_describe(source)} as audio ({exc})") from exc
    return data, int(rate)


def _resample(wave: Any, rate: int, target: int) -> Any:
    """Band-limited resampling: scipy's polyphase filter when installed, else a windowed-sinc low-pass and
    linear interpolation (numpy only)."""
    import numpy as np

    if rate == target:
        return wave
    try:
        from math import gcd

        from scipy.signal import resample_poly

        g = gcd(rate, target)
        return resample_poly(wave, target // g, rate // g).astype(np.float32)
    except ImportError:
        pass
    if target < rate:  # low-pass at the new Nyquist so that downsampling does not alias
        cutoff = target / rate / 2
        taps = np.arange(-32, 33)
        kernel = 2 * cutoff * np.sinc(2 * cutoff * taps) * np.hamming(len(taps))
        wave = np.convolve(wave, kernel / kernel.sum(), mode="same")
    n_out = max(1, round(len(wave) * target / rate))
    return np.interp(np.arange(n_out) * rate / target, np.arange(len(wave)), wave).astype(np.float32)


# ---------------------------------------------------------------------------------------------- the preparer


@dataclass
class MediaPreparer:
    """Expands media placeholders of encoded samples and collates multimodal batches.

    Attributes:
        processor: a transformers-style processor (see :func:`load_media_processor`).
        tokenizer: the tokenizer the samples were encoded with (its pad id pads ``input_ids``).
        modalities: the media types the model takes (``image``, ``audio``).
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
        items: list[tuple[str, Any, str, str]] = []
        has_types = False
        pos = 0
        for index, (m, value) in enumerate(zip(media, values, strict=True)):
            start, end, kind, text = _field(m, "start"), _field(m, "end"), _field(m, "type"), _field(m, "text")
            out_ids += ids[pos:start]
            out_labels += labels[pos:start]
            out_types += [0] * (start - pos)
            item = (kind, value, text or self._span_text(ids, start, end), f"{where}: {kind} {index}")
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
            from swiftcore.template import SampleTooLongError

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

    def media_tensors(self, items: Sequence[tuple[str, Any, str, str]]) -> dict[str, Any]:
        """The processor's tensors for a lazily expanded sample's ``media_items``, concatenated per key."""
        tensors: dict[str, list[Any]] = {}
        for kind, value, text, what in items:
            out = self._process(kind, value, text, what)
            out.pop("input_ids")
            out.pop("mm_token_type_ids", None)
            for key, tensor in out.items():
                tensors.setdefault(key, []).append(tensor)
        return {key: _concat(parts, key) for key, parts in tensors.items()}

    def collate(self, samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Pad the text like :class:`swiftcore.data.PaddingCollator` (right padding) and concatenate the media
        tensors over the batch, in sample order (the order the model meets the placeholders).

        Returns:
            ``input_ids``, ``labels``, ``attention_mask`` (``[B, L]``), ``mm_token_type_ids`` (``[B, L]``, 0 on
            padding) when any sample has it, and each media tensor concatenated along its first dimension
            (other dimensions padded to the longest with 0, or -1 for position ids).
        """
        import torch

        from swiftcore.data import PaddingCollator

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
                    f"{_TAGS[kind]} tags with media_tags_to_parts before encoding)"
                )

    def _span_text(self, ids: list[int], start: int, end: int) -> str:
        return self.tokenizer.decode(ids[start:end], skip_special_tokens=False)

    def _process(self, kind: str, value: Any, text: str, what: str) -> dict[str, Any]:
        """Run the processor on one placeholder and its item; return its output without the text-side
        extras (attention mask, keys the processor itself marks unused)."""
        token = getattr(self.processor, f"{kind}_token", None)
        if not token or token not in text:
            raise MediaError(
                f"{what}: the template's placeholder {text!r} does not contain the processor's {kind} token "
                f"{token!r}; the template does not match the model in {self.where} (pass the model's own --template)"
            )
        if kind == "image":
            item = load_image(value, what)
            kwargs: dict[str, Any] = {"images": [item]}
        else:
            item = load_audio(value, self.sampling_rate, what)
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
            if key not in _TEXT_KEYS and key not in unused and value_out is not None:
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
