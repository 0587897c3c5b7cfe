"""Media in samples, for training and serving alike (distribution ``swiftcore-media``).

- :mod:`swiftcore_media.items`: the value a content part carries, decoding images (PIL) and audio (WAV by the
  standard library, other formats by soundfile) from paths, URLs, bytes.
- :mod:`swiftcore_media.video`: decoding video (PyAV) into the frames the family's transformers video processor
  samples, and that processor made to run without torchvision.
- :mod:`swiftcore_media.processor`: whether a checkpoint takes media (the model spec's ``modalities`` and its
  processor files) and which processor expands its placeholders (the spec's ``processor``, else the class
  ``processor_config.json`` names, its video part made torchvision-free).
- :mod:`swiftcore_media.controls`: a content part's own bounds on its item (``max_pixels``, ``min_pixels``,
  ``max_seconds``), applied before the processor.
- :mod:`swiftcore_media.preparer`: :class:`MediaPreparer`, which expands an encoded sample's placeholders with
  that processor and collates multimodal batches.

The training runtime (swiftcore-train) and the inference engine (swiftcore-infer) both prepare media here, so a
served prompt's media are exactly what training saw. Importing this package imports no torch, transformers,
PIL, numpy or PyAV.
"""

from swiftcore.api.template import media_tags_to_parts  # the core's: one sample path (SampleEncoder) uses it
from swiftcore_media.controls import CONTROLS, apply_controls, media_controls
from swiftcore_media.errors import MEDIA_COLUMNS, MediaError, MediaLimitError
from swiftcore_media.items import load_audio, load_image, media_value
from swiftcore_media.preparer import MediaPreparer, has_media
from swiftcore_media.processor import (
    load_media_processor,
    load_processor_without_torchvision,
    media_modalities,
    prepare_media,
    processor_files,
)
from swiftcore_media.video import load_video, load_video_processor

__all__ = [
    "CONTROLS",
    "MEDIA_COLUMNS",
    "MediaError",
    "MediaLimitError",
    "MediaPreparer",
    "apply_controls",
    "has_media",
    "load_audio",
    "load_image",
    "load_media_processor",
    "load_video",
    "load_video_processor",
    "load_processor_without_torchvision",
    "media_controls",
    "media_modalities",
    "media_tags_to_parts",
    "media_value",
    "prepare_media",
    "processor_files",
]
