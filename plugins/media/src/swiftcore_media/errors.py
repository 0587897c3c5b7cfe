"""The media error, and the names of the media a sample may carry."""

from __future__ import annotations

from swiftcore.api import SwiftcoreError

__all__ = ["IGNORE_INDEX", "MEDIA_COLUMNS", "MediaError", "MediaLimitError", "TAGS", "TEXT_KEYS", "TRAINABLE"]

IGNORE_INDEX = -100
#: Media type -> the record column holding the items of parts that carry no value of their own.
MEDIA_COLUMNS = {"image": "images", "audio": "audios", "video": "videos"}
#: Processor outputs that are text-side (handled here) rather than tower inputs.
TEXT_KEYS = ("input_ids", "attention_mask", "token_type_ids", "mm_token_type_ids", "text_replacement_offsets")
#: ms-swift style inline media tags in string content.
TAGS = {"image": "<image>", "audio": "<audio>", "video": "<video>"}
#: The media types samples can be trained on (a model takes those of them its spec's ``modalities`` list).
TRAINABLE = ("image", "audio", "video")


class MediaError(SwiftcoreError):
    """A media item cannot be loaded, or the model's processor cannot be built or does not fit the template."""


class MediaLimitError(MediaError):
    """A media item is over a bound its caller set (``max_pixels``, ``max_seconds`` of
    :func:`~swiftcore_media.load_image` / :func:`~swiftcore_media.load_audio`), found from its header, before
    it was decoded.

    Attributes:
        what: the item, as the caller named it.
        shown: its size as a reader reads it (``"13000x13000 pixels"``, ``"3600.0 s of audio"``).
    """

    def __init__(self, what: str, shown: str, limit: str) -> None:
        super().__init__(f"{what}: {shown}, over the limit of {limit}")
        self.what, self.shown = what, shown
