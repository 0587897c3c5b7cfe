"""Media in samples: decoding images and audio, and the processor step training and inference share.

An engine or recipe that takes images or audio uses these so that a served prompt's media are prepared exactly
as in training (the model plugin's spec declares the modalities; its processor files decide whether a
checkpoint takes them).
"""

from __future__ import annotations

from swiftcore.train.media import (
    MediaError,
    MediaPreparer,
    has_media,
    load_audio,
    load_image,
    load_processor_without_video,
    media_modalities,
    media_tags_to_parts,
    media_value,
    prepare_media,
    processor_files,
)

__all__ = [
    "MediaError",
    "MediaPreparer",
    "has_media",
    "load_audio",
    "load_image",
    "load_processor_without_video",
    "media_modalities",
    "media_tags_to_parts",
    "media_value",
    "prepare_media",
    "processor_files",
]
