"""A prompt record with its media inlined, as an OpenAI-compatible server takes it: each image an ``image_url`` part
with a ``data:`` URL, each audio clip an ``input_audio`` part (base64).

Files named by the record are read here, by the process that has them (the trainer), so the server needs no access to
the trainer's disk: ``opd``'s served teacher (``--teacher-server``) and the rollout server (``--rollout-server``) take
a row's media this way.

Importing this module imports neither torch nor PIL.
"""

from __future__ import annotations

import base64
import mimetypes
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from swiftcore.api import SwiftcoreError

__all__ = ["MEDIA_COLUMNS", "has_media", "inline_media"]

#: A record's media columns: the items its value-less ``{"type": KIND}`` parts take, in order.
MEDIA_COLUMNS = {"image": "images", "audio": "audios", "video": "videos"}
#: The per-item media controls a part may carry (``swiftcore_media.controls``); the server applies them.
_CONTROLS = {"image": ("max_pixels", "min_pixels"), "audio": ("max_seconds",)}
#: Audio formats ``swiftcore deploy`` (and OpenAI) take in an ``input_audio`` part, by file suffix / MIME subtype.
_AUDIO_FORMATS = {"wav": "wav", "x-wav": "wav", "wave": "wav", "mp3": "mp3", "mpeg": "mp3", "flac": "flac"}
#: The first bytes of the image formats a data URL is labelled with when the bytes come without a file name.
_IMAGE_MAGIC = ((b"\x89PNG", "png"), (b"\xff\xd8", "jpeg"), (b"GIF8", "gif"), (b"RIFF", "webp"), (b"BM", "bmp"))


def _read(value: Any, where: str, flag: str, receiver: str) -> tuple[bytes, str]:
    """The bytes of a media value that names or holds a file (path, ``file://`` URL, bytes, a ``{"bytes", "path"}``
    dict, a PIL image), and the file's suffix (lower case, no dot; "" when unknown)."""
    if isinstance(value, Mapping) and ("bytes" in value or "path" in value):
        if value.get("bytes"):
            return bytes(value["bytes"]), Path(str(value.get("path") or "")).suffix.lower().lstrip(".")
        value = value.get("path")
    if isinstance(value, bytes | bytearray):
        return bytes(value), ""
    if hasattr(value, "save") and hasattr(value, "size"):  # a decoded PIL image (a datasets Image feature)
        import io

        buffer = io.BytesIO()
        value.save(buffer, format="PNG")
        return buffer.getvalue(), "png"
    if isinstance(value, str | Path):
        path = Path(str(value)[len("file://") :] if str(value).startswith("file://") else value)
        try:
            return path.read_bytes(), path.suffix.lower().lstrip(".")
        except OSError as exc:
            raise SwiftcoreError(
                f"{flag}: {where}: cannot read {str(path)!r} ({exc}); fix the path in the dataset "
                "(relative paths are read from the working directory)"
            ) from exc
    raise SwiftcoreError(
        f"{flag}: {where}: cannot send a {type(value).__name__} to {receiver}; give the item as a path, "
        "a data: URL or bytes"
    )


def _image_part(value: Any, where: str, flag: str, receiver: str) -> dict[str, Any]:
    """An OpenAI ``image_url`` part: a ``data:`` URL as given, an ``http(s)`` URL as given (the server fetches it
    only when it allows remote media), anything else read and inlined as a base64 ``data:`` URL."""
    if isinstance(value, str) and value.startswith(("data:", "http://", "https://")):
        return {"type": "image_url", "image_url": {"url": value}}
    data, suffix = _read(value, where, flag, receiver)
    kind = next((name for magic, name in _IMAGE_MAGIC if data.startswith(magic)), None)
    mime = f"image/{kind}" if kind else (mimetypes.types_map.get(f".{suffix}") or "image/png")
    url = f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
    return {"type": "image_url", "image_url": {"url": url}}


def _audio_part(value: Any, where: str, flag: str, receiver: str) -> dict[str, Any]:
    """An OpenAI ``input_audio`` part (base64 data and its ``format``: wav, mp3 or flac)."""
    if isinstance(value, Mapping) and "data" in value:
        return {"type": "input_audio", "input_audio": {"data": value["data"], "format": value.get("format", "wav")}}
    if isinstance(value, Mapping) and "array" in value:
        raise SwiftcoreError(
            f"{flag}: {where}: a decoded waveform cannot be sent to {receiver}; give the clip as a WAV, "
            "MP3 or FLAC file (a path or a data: URL)"
        )
    if isinstance(value, str) and value.startswith("data:"):
        header, _, data = value.partition(",")
        subtype = header[len("data:") :].split(";")[0].partition("/")[2]
        fmt = _AUDIO_FORMATS.get(subtype)
        if fmt is None or ";base64" not in header:
            raise SwiftcoreError(f"{flag}: {where}: a data: URL of {header[5:]!r}; {receiver} takes base64 "
                                 "WAV, MP3 or FLAC (audio/wav, audio/mpeg, audio/flac)")  # fmt: skip
        return {"type": "input_audio", "input_audio": {"data": data, "format": fmt}}
    if isinstance(value, str) and value.startswith(("http://", "https://")):
        raise SwiftcoreError(f"{flag}: {where}: an audio URL cannot be sent as input_audio; download it "
                             "and give its path")  # fmt: skip
    data, suffix = _read(value, where, flag, receiver)
    fmt = _AUDIO_FORMATS.get(suffix) or ("wav" if data.startswith(b"RIFF") else "flac" if data[:4] == b"fLaC" else None)
    if fmt is None:
        raise SwiftcoreError(f"{flag}: {where}: cannot tell the audio format of {suffix or 'the bytes'!r}; "
                             "give a .wav, .mp3 or .flac file")  # fmt: skip
    return {"type": "input_audio", "input_audio": {"data": base64.b64encode(data).decode("ascii"), "format": fmt}}


def inline_media(record: Mapping[str, Any], flag: str, receiver: str, video_fix: str) -> dict[str, Any]:
    """The ``/v1/chat/completions`` fields of a prompt record: its ``messages`` with each image an OpenAI
    ``image_url`` part and each audio clip an ``input_audio`` part (files read and inlined as base64; ``<image>`` /
    ``<audio>`` tags and value-less parts take the items of the record's ``images`` / ``audios`` columns, in order, as
    training does), a part's media controls (``max_pixels``, ``min_pixels``, ``max_seconds``) kept, and the record's
    ``tools`` and ``chat_template_kwargs``.

    Raises:
        SwiftcoreError: a video (no OpenAI part carries one), an item that cannot be read or sent, or more tagged
            parts than column items (naming the part and ``flag``).
    """
    from swiftcore.api.template import media_tags_to_parts, media_type

    record = media_tags_to_parts(record)
    columns = {kind: iter(record.get(column) or ()) for kind, column in MEDIA_COLUMNS.items()}
    messages = []
    for i, message in enumerate(record.get("messages") or []):
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, list):
            parts = []
            for j, part in enumerate(content):
                kind = media_type(part) if isinstance(part, Mapping) and part.get("type") != "text" else None
                if kind is None:
                    parts.append(part)
                    continue
                where = f"messages[{i}].content[{j}] ({kind})"
                if kind not in ("image", "audio"):
                    raise SwiftcoreError(f"{flag}: {where}: {receiver} takes images and audio only; {video_fix}")
                value = next((part[k] for k in (kind, f"{kind}_url", f"input_{kind}") if part.get(k) is not None), None)
                if isinstance(value, Mapping) and "url" in value:
                    value = value["url"]
                if value is None:
                    value = next(columns[kind], None)
                    if value is None:
                        raise SwiftcoreError(f"{flag}: {where} has no value and the record's "
                                             f"{MEDIA_COLUMNS[kind]!r} column has no item left")  # fmt: skip
                out = (_image_part if kind == "image" else _audio_part)(value, where, flag, receiver)
                parts.append({**out, **{k: part[k] for k in _CONTROLS[kind] if k in part}})
            message = {**message, "content": parts}
        messages.append(dict(message))
    body: dict[str, Any] = {"messages": messages}
    for key in ("tools", "chat_template_kwargs"):
        if record.get(key):
            body[key] = record[key]
    return body


def has_media(record: Mapping[str, Any] | None) -> bool:
    """Whether a prompt record carries images or audio (parts, tags or media columns)."""
    if not record:
        return False
    from swiftcore.api.template import media_tags_to_parts, media_type

    if any(record.get(column) for column in MEDIA_COLUMNS.values()):
        return True
    for message in media_tags_to_parts(record).get("messages") or []:
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, list) and any(
            isinstance(p, Mapping) and p.get("type") != "text" and media_type(p) for p in content
        ):
            return True
    return False
