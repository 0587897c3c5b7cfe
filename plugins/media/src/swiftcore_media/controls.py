"""Per-item media controls: a content part's own bounds on its image's pixels, its clip's length, its video's frames.

A part may carry them next to its value, in training data and in API requests alike (the keys of
``qwen_vl_utils``' messages, where such controls live in the ecosystem)::

    {"type": "image", "image": "cat.png", "max_pixels": 200704}
    {"type": "image_url", "image_url": {"url": "data:..."}, "min_pixels": 3136}
    {"type": "input_audio", "input_audio": {...}, "max_seconds": 30}
    {"type": "video", "video": "clip.mp4", "fps": 1, "max_frames": 16}

- ``max_pixels`` / ``min_pixels``: the image is resized (aspect ratio kept, bicubic) to at most / at least that
  many pixels (width x height) before the family's processor sees it; an image already inside the bounds is
  left as it is. The processor then applies its own rules (patch multiples, its own bounds) as for any image.
- ``max_seconds``: the clip is cut to its first ``max_seconds`` seconds.
- ``fps`` / ``max_frames``: the video is sampled at ``fps`` frames a second of its duration (instead of the family's
  video processor's rate, Qwen3-VL's 2) and to at most ``max_frames`` frames (a whole number, at most the
  processor's own cap), by the processor's own ``sample_frames`` (its ``min_frames`` holds, below ``max_frames``).
  They are applied as the video is decoded (:func:`swiftcore_media.video.load_video`): only those frames are read.

The preparer applies them, so a served request's part and a training row's part with the same controls give the
same tensors. Importing this module does not import PIL or numpy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from swiftcore_media.errors import MediaError

__all__ = ["CONTROLS", "apply_controls", "media_controls"]

#: The controls each media type takes.
CONTROLS: dict[str, tuple[str, ...]] = {
    "image": ("max_pixels", "min_pixels"),
    "audio": ("max_seconds",),
    "video": ("fps", "max_frames"),
}
_ALL = {key for keys in CONTROLS.values() for key in keys}


def media_controls(part: Any, kind: str, what: str) -> dict[str, float]:
    """The controls ``part`` sets for its ``kind`` item, checked.

    Raises:
        MediaError: a control that is not a positive number, one of another media type (``max_seconds`` on an
            image), or ``min_pixels`` above ``max_pixels``.
    """
    if not isinstance(part, Mapping):
        return {}
    controls: dict[str, float] = {}
    for key in sorted(_ALL & set(part)):
        value = part[key]
        if value is None:
            continue
        if key not in CONTROLS.get(kind, ()):
            takes = ", ".join(CONTROLS.get(kind, ())) or "none"
            raise MediaError(f"{what}: {key} does not apply to {kind} (its controls: {takes}); remove it")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise MediaError(f"{what}: {key} must be a positive number, got {value!r}")
        if key == "max_frames" and value != int(value):
            raise MediaError(f"{what}: max_frames must be a whole number of frames, got {value!r}")
        controls[key] = value
    if controls.get("min_pixels", 0) > controls.get("max_pixels", math.inf):
        raise MediaError(f"{what}: min_pixels {controls['min_pixels']} is above max_pixels {controls['max_pixels']}")
    return controls


def apply_controls(item: Any, kind: str, controls: Mapping[str, float], sampling_rate: int) -> Any:
    """``item`` (a PIL image, or a waveform at ``sampling_rate``) within ``controls`` (see the module docstring; a
    video's controls are applied as it is decoded, not here)."""
    if not controls or kind == "video":
        return item
    if kind == "audio":
        return item[: max(1, int(controls["max_seconds"] * sampling_rate))] if "max_seconds" in controls else item
    width, height = item.size
    pixels = width * height
    rounding: Any
    if pixels > controls.get("max_pixels", math.inf):
        scale, rounding = math.sqrt(controls["max_pixels"] / pixels), math.floor
    elif pixels < controls.get("min_pixels", 0):
        scale, rounding = math.sqrt(controls["min_pixels"] / pixels), math.ceil
    else:
        return item
    from PIL import Image

    size = (max(1, rounding(width * scale)), max(1, rounding(height * scale)))
    return item.resize(size, Image.Resampling.BICUBIC)
