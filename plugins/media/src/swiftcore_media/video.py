"""Video items: decoded with PyAV, sampled, resized and patched by the family's own transformers video processor.

transformers' video processors (``Qwen3VLVideoProcessor`` ...) sit on its torchvision backend, and torchvision cannot
be installed beside a CPU-only torch. (A family whose video processor module imports torchvision at import time,
Qwen2-VL's, keeps no video part.) Everything that decides what the model
sees stays transformers' own: frame sampling (``sample_frames``: the processor's ``fps``, ``min_frames``,
``max_frames``), the target size (``smart_resize`` with the processor's ``size`` as min/max pixels, temporal and
spatial factors), patching into temporal patches (``patchify``), the grid (``video_grid_thw``), and the processor's
prompt expansion with per-frame-group timestamps (``replace_video_token``). Only the three torchvision calls
underneath are replaced (see :func:`torchvision_free`): the per-frame resize (PIL, bicubic, as the image
processor's PIL backend does), the grayscale-to-RGB conversion and the normalization (plain torch arithmetic).
Decoding is transformers' ``read_video_pyav``; the bounds are checked on its header before a frame is decoded.

Importing this module imports neither PyAV nor torch nor transformers.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from swiftcore_media.errors import MediaError, MediaLimitError

__all__ = ["MAX_FRAMES", "MAX_FRAME_PIXELS", "MAX_SECONDS", "load_video", "load_video_processor", "torchvision_free"]

#: Longest video read by default (seconds, from its header): decoding walks every frame up to the last sampled one.
MAX_SECONDS = 600.0
#: Largest frame read by default (width x height, from its header): 4K.
MAX_FRAME_PIXELS = 3840 * 2160
#: At most this many frames are sampled, whatever the processor's own ``max_frames`` (Qwen3-VL's is 768): the
#: decoded frames are held in memory before the processor scales them down (64 frames of 1080p is 400 MB).
MAX_FRAMES = 64

log = logging.getLogger("swiftcore.media")


def load_video(
    value: Any,
    processor: Any,
    what: str = "video",
    *,
    max_seconds: float | None = MAX_SECONDS,
    max_pixels: int | None = MAX_FRAME_PIXELS,
    fps: float | None = None,
    max_frames: int | None = None,
) -> tuple[Any, Any]:
    """Decode the frames ``processor`` samples from a video file.

    Args:
        value: a path, ``file://`` / ``data:`` URL, bytes, or a ``{"bytes", "path"}`` dict (a Hugging Face
            ``Video`` feature stores one).
        processor: the family's video processor (:func:`load_video_processor`); its ``sample_frames`` picks the
            frames from the header's frame count and rate.
        what: names the item in errors.
        max_seconds: refuse a longer video (its header's frame count / frame rate), before decoding.
        max_pixels: refuse larger frames (width x height from the header), before decoding.
        fps: sample this many frames a second instead of the processor's rate (a part's ``fps`` control).
        max_frames: sample at most this many frames (a part's ``max_frames`` control; at most the processor's
            ``max_frames``).

    Returns:
        ``(frames, metadata)``: a uint8 ``[frames, height, width, 3]`` RGB array and transformers'
        ``VideoMetadata`` (``fps``, ``frames_indices``: the sampled frames' indices, which the prompt's
        timestamps are computed from).

    Raises:
        MediaError: the file is missing, not a video, or its header gives no frame count.
        MediaLimitError: the video is over ``max_seconds`` or its frames over ``max_pixels``.
    """
    from swiftcore_media.items import _describe, _read_source

    sampler = _sampler(processor, what, fps, max_frames)

    if isinstance(value, Mapping):
        value = value.get("bytes") or value.get("path")
    source = _read_source(value, what)
    try:
        import av
        from transformers.video_utils import read_video_pyav
    except ImportError as exc:
        raise MediaError(f"{what}: reading video needs PyAV; `pip install av` ({exc})") from exc

    def sample_indices(metadata: Any, **kwargs: Any) -> Any:
        # Called by read_video_pyav with the header's numbers, before any frame is decoded.
        frames, fps = metadata.total_num_frames, metadata.fps
        if not frames or not fps:
            raise MediaError(
                f"{what}: its header gives {frames} frames at {fps} fps; re-encode it (e.g. `ffmpeg -i IN OUT.mp4`) "
                "so that the container records its frame count"
            )
        if max_seconds is not None and frames / fps > max_seconds:
            raise MediaLimitError(what, f"{frames / fps:.1f} s of video", f"{max_seconds:g} s")
        if max_pixels is not None and metadata.width * metadata.height > max_pixels:
            raise MediaLimitError(
                what, f"{metadata.width}x{metadata.height} pixels per frame", f"{max_pixels} pixels per frame"
            )
        return sampler.sample_frames(metadata)

    handle = io.BytesIO(source) if isinstance(source, bytes) else str(source)
    try:
        frames, metadata = read_video_pyav(handle, sample_indices)
    except MediaError:
        raise
    except FileNotFoundError as exc:
        raise MediaError(f"{what}: file {str(source)!r} not found; fix the path in the dataset") from exc
    except (av.error.FFmpegError, IndexError, ValueError) as exc:  # IndexError: a container with no video stream
        raise MediaError(f"{what}: cannot read {_describe(source)} as a video ({type(exc).__name__}: {exc})") from exc
    if len(frames) != len(metadata.frames_indices):  # the stream held fewer frames than its header said
        raise MediaError(
            f"{what}: {_describe(source)} decoded to {len(frames)} of the {len(metadata.frames_indices)} frames its "
            "header promises; the file is truncated or its header wrong, re-encode it"
        )
    return frames, metadata


def _sampler(processor: Any, what: str, fps: float | None, max_frames: int | None) -> Any:
    """``processor``, or a copy of it sampling at ``fps`` and to at most ``max_frames`` frames: its own
    ``sample_frames`` then does the rest (the rounding, ``min_frames``, the indices), as for any video."""
    if fps is None and max_frames is None:
        return processor
    if max_frames is not None and max_frames > processor.max_frames:
        raise MediaError(
            f"{what}: max_frames {max_frames:g} is above the {processor.max_frames} frames this model's video "
            "processor samples at most; ask for fewer"
        )
    import copy

    sampler = copy.copy(processor)  # a shallow copy: the settings are numbers, the shared processor stays as it is
    sampler.fps = fps if fps is not None else processor.fps
    sampler.max_frames = int(max_frames) if max_frames is not None else processor.max_frames
    return sampler


def load_video_processor(model_dir: str | Path, processor_class: type) -> Any | None:
    """The family's transformers video processor, made torchvision-free (:func:`torchvision_free`), or None when
    transformers has none for ``processor_class``.

    Its settings come from where transformers' ``AutoVideoProcessor`` reads them (the ``video_processor`` entry of
    ``processor_config.json``, else ``video_preprocessor_config.json``, else ``preprocessor_config.json``); its class
    is the one they name (``video_processor_type``), else the one in ``processor_class``'s own model package
    (``Qwen3VLProcessor`` -> ``Qwen3VLVideoProcessor``), which is what ``AutoVideoProcessor`` would pick for the
    family. ``max_frames`` is capped at :data:`MAX_FRAMES`.
    """
    import importlib

    import transformers

    module_name = processor_class.__module__.rsplit(".", 1)
    video_module = f"{module_name[0]}.{module_name[1].replace('processing_', 'video_processing_', 1)}"
    try:
        module = importlib.import_module(video_module)
    except ImportError:
        return None
    classes = [
        v
        for k, v in vars(module).items()
        if k.endswith("VideoProcessor") and isinstance(v, type) and v.__module__ == module.__name__
    ]
    if not classes:
        return None
    cls: Any = classes[0]
    try:
        settings, _ = cls.get_video_processor_dict(str(model_dir), local_files_only=True)
    except OSError:
        settings = _geometry_of_image_processor(Path(model_dir))
        log.info(
            "media: %s has no video processor settings; %s's defaults, with the image processor's patch geometry",
            model_dir,
            cls.__name__,
        )
    named = settings.get("video_processor_type")
    if named and named != cls.__name__:
        # Without torchvision, transformers' top-level name is a placeholder; its module holds the class itself.
        where = getattr(getattr(transformers, named, None), "__module__", None)
        cls = getattr(importlib.import_module(where), named, None) if where else None
        if not isinstance(cls, type) or type(cls).__name__ == "DummyObject":
            raise MediaError(f"{model_dir}: transformers {transformers.__version__} has no video processor {named!r}")
    # The image processor's own keys (when its file is the fallback) are not the video processor's settings.
    settings = {k: v for k, v in settings.items() if not k.startswith("image_processor")}
    processor = torchvision_free(cls).from_dict(settings)
    processor.max_frames = min(int(processor.max_frames or MAX_FRAMES), MAX_FRAMES)
    return processor


#: The image processor's settings a video processor shares: they describe the vision tower both feed.
_GEOMETRY = ("patch_size", "temporal_patch_size", "merge_size", "image_mean", "image_std")


def _geometry_of_image_processor(model_dir: Path) -> dict[str, Any]:
    """The tower's geometry from the image processor's settings (a checkpoint saved without its video processor:
    transformers' ``AutoVideoProcessor`` refuses it, yet the tower's patches are the images')."""
    import json

    nested = model_dir / "processor_config.json"
    settings: dict[str, Any] = {}
    if nested.is_file():
        settings = json.loads(nested.read_text(encoding="utf-8")).get("image_processor") or {}
    if not settings and (model_dir / "preprocessor_config.json").is_file():
        settings = json.loads((model_dir / "preprocessor_config.json").read_text(encoding="utf-8"))
    return {k: settings[k] for k in _GEOMETRY if k in settings}


def torchvision_free(cls: type) -> Any:
    """``cls`` (a transformers video processor) with its torchvision backend's resize, grayscale conversion and
    normalization done by PIL and torch instead.

    The replacements sit right below ``cls`` in the method order (a base class of the returned class placed after
    ``cls``), so ``cls``'s own ``resize`` (which computes the target size) calls them as it would call torchvision's.
    """
    from transformers.video_processing_utils import BaseVideoProcessor

    class _PilVideoOps(BaseVideoProcessor):
        """Replaces the torchvision calls of transformers' ``TorchvisionBackend`` (nothing else)."""

        def resize(self, image: Any, size: Any, resample: Any = None, **kwargs: Any) -> Any:
            """Resize ``[..., C, H, W]`` uint8 frames to ``size.height x size.width`` with PIL (bicubic by default)."""
            import numpy as np
            import torch
            from PIL import Image

            if not (size.height and size.width):
                raise MediaError(f"{cls.__name__}: resizing to {size} needs torchvision; only height x width is done")
            method = Image.Resampling(int(resample)) if resample is not None else Image.Resampling.BICUBIC
            flat = image.reshape(-1, *image.shape[-3:]).permute(0, 2, 3, 1).contiguous().numpy()
            resized = [
                np.asarray(Image.fromarray(frame).resize((size.width, size.height), method)).reshape(
                    size.height, size.width, -1
                )
                for frame in flat
            ]
            out = torch.from_numpy(np.stack(resized)).permute(0, 3, 1, 2)
            return out.reshape(*image.shape[:-2], size.height, size.width).contiguous()

        def convert_to_rgb(self, video: Any) -> Any:
            """Repeat a single channel to three (PyAV decodes to RGB already; arrays may come grey)."""
            return video.repeat_interleave(3, dim=-3) if video.shape[-3] == 1 else video

        def normalize(self, image: Any, mean: Any, std: Any, inplace: bool = False, **kwargs: Any) -> Any:
            """``(image - mean) / std`` per channel (channels at dim -3)."""
            import torch

            mean = torch.as_tensor(mean, dtype=image.dtype).reshape(-1, 1, 1)
            std = torch.as_tensor(std, dtype=image.dtype).reshape(-1, 1, 1)
            return (image - mean) / std

    return type(cls.__name__, (cls, _PilVideoOps), {"__module__": __name__})
