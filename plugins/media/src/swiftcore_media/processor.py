"""Which processor expands a model's media placeholders, and whether a checkpoint takes media at all.

The model plugin's spec decides: ``ModelSpec.modalities`` (``image``, ``audio``) says what the family takes,
and ``ModelSpec.processor`` may name the family's own ``load_processor(model_dir, tokenizer)`` (Gemma 4's: its
transformers processor module needs torchvision). Without one, the processor class named in
``processor_config.json`` is built from its PIL image processor, audio feature extractor and video processor (the
family's transformers one with its torchvision calls replaced, see :mod:`swiftcore_media.video`: torchvision cannot
be installed beside a CPU-only torch). Either way the result is called like a transformers processor:
``processor(text=..., images=[...], audio=[...], videos=[...], add_special_tokens=False, return_tensors="pt")``.
"""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path
from typing import Any

from swiftcore_media.errors import TRAINABLE, MediaError
from swiftcore_media.preparer import MediaPreparer

__all__ = [
    "PROCESSOR_FILES",
    "load_media_processor",
    "load_processor_without_torchvision",
    "media_modalities",
    "prepare_media",
    "processor_files",
]

log = logging.getLogger("swiftcore.media")


def prepare_media(spec: Any, model_dir: str | Path, tokenizer: Any) -> MediaPreparer | None:
    """The :class:`MediaPreparer` for a multimodal model, or None for a text-only one.

    Args:
        spec: the model's :class:`~swiftcore.api.ModelSpec`; ``spec.modalities`` says whether it takes
            images or audio.
        model_dir: the checkpoint directory (its ``processor_config.json`` / preprocessor files).
        tokenizer: the tokenizer the samples were encoded with (the processor gets a copy).

    Returns:
        The preparer, or None when the spec lists no image, audio or video modality or the checkpoint has no
        processor files (a text-only export of a multimodal family).

    Raises:
        MediaError: the checkpoint has processor files but the processor cannot be built.
    """
    modalities = media_modalities(spec, model_dir)
    if not modalities:
        return None
    log.info("media: model %r takes %s (its spec's modalities)", spec.name, " and ".join(modalities))
    processor = load_media_processor(spec, model_dir, tokenizer)
    return MediaPreparer(processor, tokenizer, modalities=modalities, where=str(model_dir))


#: The files a checkpoint needs, besides the tokenizer's, for its processor to be rebuilt.
PROCESSOR_FILES = ("processor_config.json", "preprocessor_config.json", "video_preprocessor_config.json")


def _has_processor_files(model_dir: Path) -> bool:
    return any((model_dir / name).is_file() for name in PROCESSOR_FILES)


def media_modalities(spec: Any, model_dir: str | Path) -> tuple[str, ...]:
    """The media a checkpoint's samples may carry: the spec's trainable modalities (``image``, ``audio``,
    ``video``) when the checkpoint has its processor files, else none (a text-only export of a multimodal family).

    Training (:func:`prepare_media`) and inference decide it alike, so a prompt takes the media training took.
    """
    modalities = tuple(m for m in getattr(spec, "modalities", ()) if m in TRAINABLE)
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
    """The processor that expands ``spec``'s media placeholders: the spec's own ``processor`` loader when it
    names one, else :func:`load_processor_without_torchvision`.

    Args:
        spec: the model spec (``spec.processor``: ``"module:attr"`` of ``load_processor(model_dir, tokenizer)``).
        model_dir: the checkpoint directory.
        tokenizer: the tokenizer; the processor gets a deep copy, because some processors add tokens
            to theirs (Gemma 4's registers ``<|video|>``).

    Raises:
        MediaError: no processor can be built from ``model_dir``.
    """
    tokenizer = copy.deepcopy(tokenizer)
    reference = getattr(spec, "processor", None)
    if reference:
        from swiftcore.api import resolve

        load = resolve(reference, what=f"processor of model {spec.name!r} ({spec.provider})")
        log.info("media: processor from %s", reference)
        return load(str(model_dir), tokenizer)
    return load_processor_without_torchvision(model_dir, tokenizer)


def load_processor_without_torchvision(model_dir: str | Path, tokenizer: Any) -> Any:
    """Build the processor class named in ``processor_config.json`` without torchvision.

    transformers' composite processors insist on every sub-processor; their video processors need
    torchvision. The image processor (PIL backend) and the audio feature extractor do not; the video processor
    is the family's own made torchvision-free (:mod:`swiftcore_media.video`), or left out when transformers has
    none for the family. The processor's own placeholder expansion (``replace_image_token`` /
    ``replace_video_token`` / ``replace_audio_token``) and tokenization are then used unchanged.

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
        parts[attribute] = _load_part(attribute, model_dir, tokenizer, cls)
    if any(value is None or "video" in attribute for attribute, value in parts.items()):
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


def _load_video_part(model_dir: Path, processor_class: type) -> Any:
    """The video processor: transformers' own when it loads (torchvision installed), else the family's made
    torchvision-free (:func:`swiftcore_media.video.load_video_processor`); None when neither can be built."""
    try:
        from transformers import AutoVideoProcessor

        return AutoVideoProcessor.from_pretrained(str(model_dir))
    except (ImportError, OSError, ValueError, AttributeError) as exc:
        log.debug("media: AutoVideoProcessor cannot load %s (%s)", model_dir, type(exc).__name__)
    from swiftcore_media.video import load_video_processor

    try:
        return load_video_processor(model_dir, processor_class)
    except (ImportError, OSError, ValueError, TypeError, AttributeError, MediaError) as exc:
        # Not fatal: images and audio still work; a video item then gets a clear error from the preparer.
        log.warning("media: no video processor for %s (%s: %s); built without it", model_dir, type(exc).__name__, exc)
        return None


def _load_part(attribute: str, model_dir: Path, tokenizer: Any, processor_class: type) -> Any:
    """One sub-processor: the tokenizer given, or the Auto class for its modality (None for a video one
    that cannot be built)."""
    from transformers import AutoFeatureExtractor, AutoImageProcessor

    if "tokenizer" in attribute:
        return tokenizer
    if "video" in attribute:
        return _load_video_part(model_dir, processor_class)
    auto = {"image_processor": AutoImageProcessor, "feature_extractor": AutoFeatureExtractor}.get(attribute)
    if auto is None:
        raise MediaError(f"{model_dir}: processor part {attribute!r} is not supported for training yet")
    try:
        return auto.from_pretrained(str(model_dir))
    except (ImportError, OSError, ValueError) as exc:
        raise MediaError(f"{model_dir}: cannot load the processor's {attribute} ({type(exc).__name__}: {exc})") from exc


def _without_missing_parts(cls: type) -> type:
    """A subclass of ``cls`` that accepts None for a sub-processor, and a video processor of transformers' video
    processor base class (the base class type-checks every part; without torchvision its check of a video part
    fails on the Auto mapping's placeholder, whatever the part)."""

    def check_argument_for_proper_class(self: Any, argument_name: str, argument: Any) -> Any:
        if argument is None:
            return None
        if "video" in argument_name:
            from transformers.video_processing_utils import BaseVideoProcessor

            if isinstance(argument, BaseVideoProcessor):
                return None
        return cls.check_argument_for_proper_class(self, argument_name, argument)  # type: ignore[attr-defined]

    return type(cls.__name__, (cls,), {"check_argument_for_proper_class": check_argument_for_proper_class})
