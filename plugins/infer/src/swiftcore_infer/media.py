"""Images, audio and video at inference: the training sample path, run up to the generation prompt.

A chat record with media is encoded exactly as training encodes it (:func:`swiftcore_train.run.encode_records`):
``<image>`` / ``<audio>`` tags become content parts when the record has ``images`` / ``audios`` columns
(:func:`~swiftcore_media.media_tags_to_parts`), the template renders one placeholder per part, and the
family's processor expands each placeholder and makes the towers' tensors
(:meth:`~swiftcore_media.MediaPreparer.expand`). The engine then hands the backend a :class:`Prompt`:
the token ids (a plain list, so everything that reads prompt ids keeps working) and the media tensors.

Each media value is decoded first, on the thread that encodes prompts (never the server's event loop), by
:func:`decode_media`, so that a bad item fails with a message naming its part (``messages[0].content[1]
(input_audio): ...``), and the decoded value is what the preparer gets (the same pixels and waveform). A video is
decoded here too when a server's policy holds it to its limits (:func:`swiftcore_media.load_video`, with the
family's video processor picking the frames), and the preparer takes those frames as they are.

:func:`openai_media_parts` is the server's side: OpenAI content parts (``image_url`` with a data URL,
``input_audio``, ``video_url``) become the canonical parts templates read, and remote URLs and local paths are refused.

Importing this module does not import torch, transformers, PIL or numpy.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swiftcore_infer.errors import InvalidRequestError

__all__ = [
    "AUDIO_FORMATS",
    "PLURAL",
    "MediaPolicy",
    "Prompt",
    "decode_media",
    "media_kinds",
    "openai_media_parts",
    "strip_media_values",
]

#: The ``input_audio.format`` values the server takes (WAV is read by the standard library; MP3 and FLAC
#: by ``soundfile``).
AUDIO_FORMATS = ("wav", "mp3", "flac")
#: The record columns holding media items for parts (or tags) that carry no value of their own.
_COLUMNS = {"images": "image", "audios": "audio", "videos": "video"}


@dataclass(frozen=True)
class MediaPolicy:
    """What a server takes from API requests' media, and how much (``swiftcore deploy`` options).

    Attributes:
        media_root: local paths and ``file://`` URLs are read only from files under this directory (after
            resolving symlinks and ``..``); None refuses every local path (the default).
        allow_remote: fetch ``http(s)://`` URLs (with :attr:`remote_timeout`, at most :attr:`max_item_bytes`);
            off by default: a server fetching what clients name is a server clients can point at its network.
        max_items: media items (images, audio clips, videos) in one request.
        max_item_bytes: encoded bytes of one item (inline data, file or download).
        max_image_pixels: decoded pixels (width x height) of one image.
        max_audio_seconds: decoded length of one audio clip.
        max_video_seconds: length of one video (its header's frame count / frame rate); at most
            ``swiftcore_media.video.MAX_SECONDS`` (600), which the preparer holds every video to.
        max_video_frame_pixels: width x height of one video's frames (from its header); at most
            ``swiftcore_media.video.MAX_FRAME_PIXELS`` (3840 x 2160).
        remote_timeout: seconds a remote fetch may take.
    """

    media_root: str | None = None
    allow_remote: bool = False
    max_items: int = 8
    max_item_bytes: int = 20 * 2**20
    max_image_pixels: int = 4096 * 4096
    max_audio_seconds: float = 600.0
    max_video_seconds: float = 600.0
    max_video_frame_pixels: int = 3840 * 2160
    remote_timeout: float = 10.0

    def over(self, limit: str, got: str, allowed: str, option: str) -> InvalidRequestError:
        """The 400 for a request over one of these limits, naming it and the option that sets it."""
        return InvalidRequestError(
            f"{got}, over this server's limit of {allowed} ({limit}; the server sets it with {option})",
            param="messages",
        )

    def local_file(self, value: str, what: str) -> Path:
        """The file under :attr:`media_root` that ``value`` (a path or ``file://`` URL) names, resolved.

        Raises:
            InvalidRequestError: no media root, a path outside it (``..``, an absolute path elsewhere, a
                symlink pointing out), a NUL character in it, a missing file, or one over :attr:`max_item_bytes`.
        """
        if self.media_root is None:
            raise InvalidRequestError(
                f"{what}: got a local file path; the API takes no local files or URLs other than data: URLs "
                "(a server started with --media-root DIR reads files under DIR): send it inline as a base64 "
                "data: URL",
                param="messages",
            )
        if "\x00" in value:  # the OS refuses such a name (ValueError deep in resolve(): a 500)
            raise InvalidRequestError(
                f"{what}: the path {value[:80]!r} holds a NUL character; no file can be named so", param="messages"
            )
        root = Path(self.media_root).resolve()
        raw = Path(value.removeprefix("file://"))
        path = (raw if raw.is_absolute() else root / raw).resolve()
        if not path.is_relative_to(root):
            raise InvalidRequestError(
                f"{what}: {value!r} is outside this server's media root; name a file under it (relative paths are "
                "read from the root)",
                param="messages",
            )
        if not path.is_file():
            raise InvalidRequestError(f"{what}: {value!r} is not a file under this server's media root")
        size = path.stat().st_size
        if size > self.max_item_bytes:
            raise self.over("bytes per item", f"{what}: {size} bytes", f"{self.max_item_bytes}", "--max-media-mb")
        return path

    def fetch(self, url: str, what: str) -> bytes:
        """The bytes at ``url`` (http/https), read with :attr:`remote_timeout`, at most :attr:`max_item_bytes`.

        Raises:
            InvalidRequestError: the fetch fails, times out, answers an error status, or is too large.
        """
        import urllib.error
        import urllib.request

        try:  # the caller passes http(s) URLs only; urllib's redirects stay on http(s)/ftp
            with urllib.request.urlopen(url, timeout=self.remote_timeout) as response:
                data = response.read(self.max_item_bytes + 1)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise InvalidRequestError(f"{what}: cannot fetch {url!r} ({exc})", param="messages") from None
        if len(data) > self.max_item_bytes:
            raise self.over("bytes per item", f"{what}: more than {self.max_item_bytes} bytes at {url!r}",
                            f"{self.max_item_bytes}", "--max-media-mb")  # fmt: skip
        return data

    def over_item(self, kind: str, got: str) -> InvalidRequestError:
        """The 400 for an image over :attr:`max_image_pixels`, a clip over :attr:`max_audio_seconds`, or a video
        over :attr:`max_video_seconds` or :attr:`max_video_frame_pixels` (``got`` says which: pixels or seconds)."""
        if kind == "video" and "pixels" in got:
            return self.over("pixels per video frame", got, f"{self.max_video_frame_pixels} pixels",
                             "--max-video-frame-pixels")  # fmt: skip
        if kind == "video":
            return self.over("video seconds", got, f"{self.max_video_seconds:g} s", "--max-video-seconds")
        if kind == "image":
            return self.over("pixels per image", got, f"{self.max_image_pixels} pixels", "--max-image-pixels")
        return self.over("audio seconds", got, f"{self.max_audio_seconds:g} s", "--max-audio-seconds")

    def check_decoded(self, value: Any, kind: str, what: str, sampling_rate: int) -> None:
        """Refuse a decoded image over :attr:`max_image_pixels` or a clip over :attr:`max_audio_seconds`."""
        if kind == "image" and value.width * value.height > self.max_image_pixels:
            raise self.over_item(kind, f"{what}: {value.width}x{value.height} pixels")
        if kind == "audio":
            seconds = len(value["array"]) / sampling_rate
            if seconds > self.max_audio_seconds:
                raise self.over_item(kind, f"{what}: {seconds:.1f} s of audio")


class Prompt(list):
    """Prompt token ids (a ``list[int]``, each media placeholder expanded as in training) plus the media the
    model reads with them: the processor's tensors, or for an engine that runs the processor itself the items.

    Attributes:
        media: the processor's tensors (``pixel_values``, ``image_grid_thw``, ``input_features`` ...) and
            ``mm_token_type_ids`` (a list, one per prompt token) when the processor makes them; exactly
            what training's :meth:`~swiftcore_media.MediaPreparer.collate` puts next to ``input_ids``. Without
            tensors (the engine asked for :attr:`items`) only ``mm_token_type_ids``.
        items: ``(media type, value)`` per placeholder, in prompt order: the PIL image or the waveform
            (``{"array", "sampling_rate"}``) training's processor gets for it (after the part's media controls);
            empty unless the engine asked for them (``Engine.media_as_items``).
        placeholder_ids: with :attr:`items`, the template's ids before expansion (one placeholder per item):
            what an engine that expands placeholders itself (vLLM) must be given.
    """

    def __init__(
        self,
        ids: Any = (),
        media: Mapping[str, Any] | None = None,
        *,
        items: Sequence[tuple[str, Any]] = (),
        placeholder_ids: Sequence[int] | None = None,
    ) -> None:
        super().__init__(ids)
        self.media: dict[str, Any] = dict(media or {})
        self.items: tuple[tuple[str, Any], ...] = tuple(items)
        self.placeholder_ids: list[int] | None = list(placeholder_ids) if placeholder_ids is not None else None


def _parts(record: Mapping[str, Any]) -> list[tuple[int, int, Mapping[str, Any], str]]:
    """``(message, part, part dict, media type)`` for every media content part of ``record``."""
    from swiftcore.api.template import media_type

    out: list[tuple[int, int, Mapping[str, Any], str]] = []
    messages = record.get("messages")
    if not isinstance(messages, list):
        return out  # the template says what is wrong with it
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, Mapping) else None
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            if isinstance(part, Mapping) and part.get("type") != "text":
                kind = media_type(part)
                if kind is not None:
                    out.append((i, j, part, kind))
    return out


def _copied_messages(record: Mapping[str, Any]) -> Any:
    messages = record.get("messages")
    return [dict(m) if isinstance(m, Mapping) else m for m in messages] if isinstance(messages, list) else messages


def media_kinds(record: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(where, media type)`` for each media item of ``record``: its content parts and column items."""
    found = [(f"messages[{i}].content[{j}]", kind) for i, j, _, kind in _parts(record)]
    for column, kind in _COLUMNS.items():
        items = record.get(column)
        if isinstance(items, list):
            found += [(f"{column}[{k}]", kind) for k in range(len(items))]
    return found


def _b64(data: Any, what: str) -> bytes:
    if not isinstance(data, str):
        raise InvalidRequestError(f"{what}: the media data must be a base64 string, got {type(data).__name__}")
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidRequestError(f"{what}: the media data is not valid base64 ({exc})") from None


def _inline(value: Any, what: str) -> Any:
    """A ``data:`` URL or ``{"data": base64}`` -> its bytes (checked base64); anything else unchanged."""
    if isinstance(value, str) and value.startswith("data:"):
        header, comma, data = value.partition(",")
        if not comma or not header.endswith(";base64"):
            raise InvalidRequestError(f"{what}: a data URL must be data:<type>;base64,<data>")
        return _b64(data, what)
    if isinstance(value, Mapping) and "data" in value and "array" not in value:
        return _b64(value["data"], what)
    return value


def decode_media(
    record: Mapping[str, Any],
    sampling_rate: int,
    where: str = "",
    policy: MediaPolicy | None = None,
    video_processor: Any = None,
) -> dict[str, Any]:
    """``record`` with each media value decoded (PIL images, ``{"array", "sampling_rate"}`` waveforms), and each
    video read through under ``policy``.

    The decoded values are what :meth:`~swiftcore_media.MediaPreparer.expand` would have loaded
    itself (:func:`~swiftcore_media.load_image`, :func:`~swiftcore_media.load_audio`; loading a
    loaded value again changes nothing), so the tensors are the training path's; decoding them here first
    names the part that cannot be read.

    Args:
        record: a chat record (content parts, and ``images`` / ``audios`` columns).
        sampling_rate: the audio feature extractor's rate.
        where: prefixes the part in messages (``record 'q1': ``).
        policy: a server's :class:`MediaPolicy` (remote URLs it allows are fetched here, and decoded items are
            held to its limits); None for local callers (``swiftcore infer``), who read files as training does.
        video_processor: the family's video processor (the preparer's ``processor.video_processor``): with a
            ``policy``, each video is decoded by :func:`swiftcore_media.load_video` (the frames it samples) within
            the policy's video limits, and the part then carries its ``(frames, metadata)``, which the preparer
            takes as they are. Without a policy videos pass unread (the preparer reads them, as training does).

    Raises:
        InvalidRequestError: an item is not an image / audio clip / video, is truncated, not valid base64, or
            over a limit of ``policy``; a video under a policy for a model whose processor reads no video.
    """
    from swiftcore_media import MediaError, MediaLimitError, load_audio, load_image, media_value

    # The server's limits are checked on each file's header, before it is decoded (a 0.5 MB PNG can hold
    # 13000x13000 pixels, a few KB of FLAC hours of silence), and again on the decoded value.
    max_pixels = None if policy is None else policy.max_image_pixels
    max_seconds = None if policy is None else policy.max_audio_seconds

    def load(value: Any, kind: str, what: str, controls: Mapping[str, Any] | None = None) -> Any:
        try:
            value = _inline(value, what)
            if policy is not None and isinstance(value, str) and value.startswith(("http://", "https://")):
                value = policy.fetch(value, what)  # only URLs the server allowed get this far
            decoded = value
            if kind == "video" and policy is not None:
                decoded = _read_video(value, what, policy, video_processor, controls or {})
            elif kind == "image":
                decoded = load_image(value, what, max_pixels=max_pixels)
            elif kind == "audio":
                wave = load_audio(value, sampling_rate, what, max_seconds=max_seconds)
                decoded = {"array": wave, "sampling_rate": sampling_rate}
            if policy is not None and kind in ("image", "audio"):
                policy.check_decoded(decoded, kind, what, sampling_rate)
            return decoded
        except InvalidRequestError:
            raise
        except MediaLimitError as exc:
            assert policy is not None  # only a policy sets bounds
            raise policy.over_item(kind, f"{what}: {exc.shown}") from None
        except MediaError as exc:
            raise InvalidRequestError(str(exc), param="messages") from None
        except Exception as exc:  # a decoder's own error on bad bytes: still the request's fault
            raise InvalidRequestError(
                f"{what}: cannot decode it as {_ARTICLE.get(kind, kind)} ({type(exc).__name__}: {exc})",
                param="messages",
            ) from None

    messages = _copied_messages(record)
    for i, j, part, kind in _parts(record):
        value = media_value(part, kind)
        if value is None:
            continue
        what = f"{where}messages[{i}].content[{j}] ({part.get('_from') or part.get('type') or kind})"
        content = list(messages[i]["content"])
        controls = _controls(part)
        content[j] = {"type": kind, kind: load(value, kind, what, controls), **controls}
        messages[i]["content"] = content
    out = {**record, "messages": messages}
    for column, kind in _COLUMNS.items():
        items = record.get(column)
        if isinstance(items, list) and kind != "video":
            out[column] = [load(item, kind, f"{where}{column}[{k}]") for k, item in enumerate(items)]
    return out


def _read_video(
    value: Any, what: str, policy: MediaPolicy, video_processor: Any, controls: Mapping[str, Any]
) -> tuple[Any, Any]:
    """Decode the frames the model would see of one video within ``policy``'s video limits (checked on its header
    before a frame is decoded) and its part's ``controls`` (``fps``, ``max_frames``): ``(frames, metadata)`` as
    :func:`swiftcore_media.load_video` returns them, which the preparer takes as they are (decoded once).

    Raises:
        InvalidRequestError: the model's processor reads no video.
        MediaError, MediaLimitError: from :func:`swiftcore_media.load_video` (the caller turns them into 400s).
    """
    from swiftcore_media import load_video

    if video_processor is None:
        raise InvalidRequestError(
            f"{what}: this model's processor has no video processor (transformers has none for its family, or its "
            "settings could not be read: see the server's log); remove the video",
            param="messages",
        )
    return load_video(
        value,
        video_processor,
        what,
        max_seconds=policy.max_video_seconds,
        max_pixels=policy.max_video_frame_pixels,
        fps=controls.get("fps"),
        max_frames=controls.get("max_frames"),
    )


def strip_media_values(record: Mapping[str, Any]) -> dict[str, Any]:
    """``record`` without its media values (for counting the characters of its text only)."""
    messages = _copied_messages(record)
    for i, j, _part, kind in _parts(record):
        content = list(messages[i]["content"])
        content[j] = {"type": kind}
        messages[i]["content"] = content
    return {k: v for k, v in record.items() if k not in _COLUMNS} | {"messages": messages}


_ARTICLE = {"image": "an image", "audio": "audio", "video": "a video"}
#: How messages name a media type in the plural ("does not accept images").
PLURAL = {"image": "images", "audio": "audio", "video": "videos"}


def openai_media_parts(
    record: Mapping[str, Any], accepted: tuple[str, ...], model: str, policy: MediaPolicy | None = None
) -> dict[str, Any]:
    """The server's translation of OpenAI content parts into the parts templates read, with its policy.

    - ``{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}`` ->
      ``{"type": "image", "image": url}``;
    - ``{"type": "input_audio", "input_audio": {"data": base64, "format": "wav" | "mp3" | "flac"}}`` ->
      ``{"type": "audio", "audio": {"data": ..., "format": ...}}``;
    - ``{"type": "video_url", "video_url": {"url": "data:video/mp4;base64,..."}}`` ->
      ``{"type": "video", "video": url}``;
    - swiftcore's own ``{"type": "image" | "audio" | "video", ...}`` parts pass when their value is inline;
    - a part's media controls (``max_pixels``, ``min_pixels``, ``max_seconds``: :mod:`swiftcore_media.controls`)
      are kept, within the server's limits.

    Only cheap checks run here (on the event loop); the data is decoded (and fetched) later by
    :func:`decode_media`, on the thread that encodes prompts.

    Args:
        record: the chat record built from the request body.
        accepted: the media types the served model takes (``Engine.media_modalities``).
        model: the served model's name, for messages.
        policy: the server's :class:`MediaPolicy` (default: no local files, no remote URLs, default limits).

    Raises:
        InvalidRequestError: an http(s) URL (unless ``policy.allow_remote``), a local path or ``file://`` URL
            (unless under ``policy.media_root``), more items or inline bytes than the policy allows, a media
            type the model does not take, or a malformed part; the message names the part.
    """
    policy = policy or MediaPolicy()
    messages = _copied_messages(record)
    items = media_kinds(record)
    if len(items) > policy.max_items:
        raise policy.over("media items per request", f"{len(items)} media items", str(policy.max_items),
                          "--max-media-per-request")  # fmt: skip
    for i, j, part, kind in _parts(record):
        where = f"messages[{i}].content[{j}]"
        shape = part.get("type") or kind
        param = f"messages.{i}.content.{j}"
        if kind not in accepted:
            takes = f"it takes {', '.join(accepted)} only" if accepted else "it is a text-only model"
            raise InvalidRequestError(
                f"{where} ({shape}): model {model!r} does not accept {PLURAL[kind]} ({takes}); remove the {shape} part",
                param=param,
            )
        if shape == "input_audio":
            audio = part.get("input_audio")
            if not isinstance(audio, Mapping) or not isinstance(audio.get("data"), str):
                raise InvalidRequestError(
                    f"{where} (input_audio): expected {{'input_audio': {{'data': <base64>, 'format': 'wav'}}}}",
                    param=param,
                )
            fmt = audio.get("format")
            if fmt not in AUDIO_FORMATS:
                raise InvalidRequestError(
                    f"{where} (input_audio): format {fmt!r} is not one of {', '.join(AUDIO_FORMATS)}", param=param
                )
            value: Any = {"data": audio["data"], "format": fmt}
            _check_inline_size(audio["data"], f"{where} (input_audio)", policy)
        else:
            from swiftcore_media import media_value

            value = media_value(part, kind)
            if isinstance(value, str) and value.startswith(("http://", "https://")):
                if not policy.allow_remote:
                    raise InvalidRequestError(
                        f"{where} ({shape}): remote media is off on this server (it fetches no URLs; a server "
                        f"started with --allow-remote-media does); send {_ARTICLE[kind]} inline as a base64 data: URL",
                        param=param,
                    )
            elif isinstance(value, str) and value.startswith("data:"):
                _check_inline_size(value.partition(",")[2], f"{where} ({shape})", policy)
            elif isinstance(value, str):
                value = policy.local_file(value, f"{where} ({shape})")
            else:
                raise InvalidRequestError(
                    f"{where} ({shape}): got a {type(value).__name__}; send {_ARTICLE[kind]} inline as a base64 "
                    "data: URL",
                    param=param,
                )
        _check_controls(part, kind, f"{where} ({shape})", param, policy)
        content = list(messages[i]["content"])
        # "_from" keeps the client's part type for error messages (decode_media drops it).
        content[j] = {"type": kind, kind: value, **_controls(part), **({"_from": shape} if shape != kind else {})}
        messages[i]["content"] = content
    return {**record, "messages": messages}


def _controls(part: Mapping[str, Any]) -> dict[str, Any]:
    """The part's media controls (``max_pixels`` ...: :mod:`swiftcore_media.controls`), to keep on a rebuilt part."""
    from swiftcore_media import CONTROLS

    return {k: part[k] for keys in CONTROLS.values() for k in keys if k in part}


def _check_controls(part: Mapping[str, Any], kind: str, what: str, param: str, policy: MediaPolicy) -> None:
    """Refuse a part's controls that are malformed, or that ask for more than the server's limits allow."""
    from swiftcore_media import MediaError, media_controls

    try:
        controls = media_controls(part, kind, what)
    except MediaError as exc:
        raise InvalidRequestError(str(exc), param=param) from None
    for key in ("max_pixels", "min_pixels"):
        if controls.get(key, 0) > policy.max_image_pixels:
            raise policy.over("pixels per image", f"{what}: {key} {controls[key]:g}",
                              f"{policy.max_image_pixels} pixels", "--max-image-pixels")  # fmt: skip
    if controls.get("max_seconds", 0) > policy.max_audio_seconds:
        raise policy.over("audio seconds", f"{what}: max_seconds {controls['max_seconds']:g}",
                          f"{policy.max_audio_seconds:g} s", "--max-audio-seconds")  # fmt: skip


def _check_inline_size(data: str, what: str, policy: MediaPolicy) -> None:
    """Refuse base64 data that decodes to more than ``policy.max_item_bytes`` (its length says, undecoded)."""
    size = len(data) * 3 // 4
    if size > policy.max_item_bytes:
        raise policy.over("bytes per item", f"{what}: about {size} bytes", str(policy.max_item_bytes),
                          "--max-media-mb")  # fmt: skip
