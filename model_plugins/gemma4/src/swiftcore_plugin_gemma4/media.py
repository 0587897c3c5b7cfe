"""Gemma 4's processor for image and audio samples (``ModelSpec.processor`` of the gemma4 spec).

transformers' ``Gemma4Processor`` lives in a module that imports its torchvision image processor, so it
cannot even be imported where torchvision is absent (every CPU-only environment, see
notes/tiny_models.md). Its image and audio parts do not need torchvision: ``Gemma4ImageProcessorPil`` and
``Gemma4AudioFeatureExtractor``. :class:`Gemma4MediaProcessor` puts them together with the processor's
placeholder expansion (``replace_image_token`` / ``replace_audio_token`` of transformers 5.19's
``Gemma4Processor``), and is used only when the real class cannot be imported.

Importing this module imports neither torch nor transformers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["Gemma4MediaProcessor", "load_processor"]


def load_processor(model_dir: str | Path, tokenizer: Any) -> Any:
    """The processor for ``model_dir``: transformers' ``Gemma4Processor`` (its video processor left out when it
    cannot be loaded) where it imports, else :class:`Gemma4MediaProcessor`.

    Args:
        model_dir: the checkpoint directory (``processor_config.json``).
        tokenizer: the tokenizer (a copy the processor may modify).
    """
    import transformers
    from swiftcore_media import load_processor_without_torchvision

    try:
        transformers.Gemma4Processor  # noqa: B018 - only checks that the module imports (it needs torchvision)
    except ImportError:
        return Gemma4MediaProcessor.from_pretrained(model_dir, tokenizer)
    return load_processor_without_torchvision(model_dir, tokenizer)


class Gemma4MediaProcessor:
    """``Gemma4Processor`` for images and audio, without a video processor.

    Called like the real processor: ``processor(text=..., images=[...], audio=[...], add_special_tokens=False,
    return_tensors="pt")`` returns ``input_ids`` with each ``<|image|>`` / ``<|audio|>`` replaced by
    ``<|image>`` + N soft tokens + ``<image|>`` (N from the image processor) or ``<|audio>`` + N + ``<audio|>``
    (N from the feature mask after the audio tower's two stride-2 convolutions), ``mm_token_type_ids``, and
    the image processor's / feature extractor's tensors.

    Args:
        image_processor: a ``Gemma4ImageProcessorPil``.
        feature_extractor: a ``Gemma4AudioFeatureExtractor``.
        tokenizer: the tokenizer, with Gemma 4's named media tokens (``image_token``, ``boi_token`` ...).
        image_seq_length: the processor setting of the same name (kept for parity; the image processor's
            ``num_soft_tokens_per_image`` decides the count).
        audio_seq_length: the largest number of audio soft tokens per clip.
    """

    #: Image processor outputs that only size the placeholder (as in ``Gemma4Processor``).
    unused_input_names = ("num_soft_tokens_per_image", "num_soft_tokens_per_video")

    def __init__(
        self,
        image_processor: Any,
        feature_extractor: Any,
        tokenizer: Any,
        image_seq_length: int = 280,
        audio_seq_length: int = 750,
    ) -> None:
        self.image_processor = image_processor
        self.feature_extractor = feature_extractor
        self.tokenizer = tokenizer
        self.image_seq_length = image_seq_length
        self.audio_seq_length = audio_seq_length
        for name in ("image_token", "boi_token", "eoi_token", "audio_token", "boa_token", "eoa_token"):
            setattr(self, name, getattr(tokenizer, name, None))
        self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token) if self.image_token else None
        self.audio_token_id = tokenizer.convert_tokens_to_ids(self.audio_token) if self.audio_token else None

    @classmethod
    def from_pretrained(cls, model_dir: str | Path, tokenizer: Any) -> Gemma4MediaProcessor:
        """Load the PIL image processor and the feature extractor from ``model_dir`` (settings from its
        ``processor_config.json``)."""
        from transformers import AutoFeatureExtractor, AutoImageProcessor

        path = Path(model_dir) / "processor_config.json"
        settings = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        return cls(
            AutoImageProcessor.from_pretrained(str(model_dir)),
            AutoFeatureExtractor.from_pretrained(str(model_dir)),
            tokenizer,
            image_seq_length=int(settings.get("image_seq_length", 280)),
            audio_seq_length=int(settings.get("audio_seq_length", 750)),
        )

    def replace_image_token(self, image_inputs: Any, image_idx: int) -> str:
        """The text an ``<|image|>`` becomes (``Gemma4Processor.replace_image_token``)."""
        count = int(image_inputs["num_soft_tokens_per_image"][image_idx])
        return f"{self.boi_token}{self.image_token * count}{self.eoi_token}"

    def replace_audio_token(self, audio_inputs: Any, audio_idx: int) -> str:
        """The text an ``<|audio|>`` becomes (``Gemma4Processor.replace_audio_token``): one soft token per
        valid frame left after two stride-2, kernel-3, padding-1 convolutions, capped at ``audio_seq_length``."""
        mask = audio_inputs["input_features_mask"][audio_idx]
        length = len(mask)
        for _ in range(2):
            length = (length + 2 - 3) // 2 + 1
            mask = mask[::2][:length]
        count = min(int(mask.sum()), self.audio_seq_length)
        return f"{self.boa_token}{self.audio_token * count}{self.eoa_token}"

    def __call__(
        self,
        text: str,
        images: list[Any] | None = None,
        audio: list[Any] | None = None,
        add_special_tokens: bool = False,
        return_tensors: str | None = "pt",
        sampling_rate: int | None = None,
        **_: Any,
    ) -> dict[str, Any]:
        """Expand the media tokens of ``text`` in order and tokenize it (see the class docstring)."""
        out: dict[str, Any] = {}
        replacements: dict[str, list[str]] = {}
        if images:
            processed = self.image_processor(images, return_tensors="pt")
            replacements[self.image_token] = [self.replace_image_token(processed, i) for i in range(len(images))]
            out.update(processed)
        if audio:
            rate = sampling_rate or self.feature_extractor.sampling_rate
            processed = self.feature_extractor(audio, sampling_rate=rate, return_tensors="pt")
            replacements[self.audio_token] = [self.replace_audio_token(processed, i) for i in range(len(audio))]
            out.update(processed)
        text = _replace_in_order(text, replacements)
        ids = self.tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"]
        out["input_ids"] = [ids]
        out["mm_token_type_ids"] = [
            [1 if t == self.image_token_id else 3 if t == self.audio_token_id else 0 for t in ids]
        ]
        if return_tensors == "pt":
            import torch

            out["input_ids"] = torch.tensor(out["input_ids"], dtype=torch.long)
            out["mm_token_type_ids"] = torch.tensor(out["mm_token_type_ids"], dtype=torch.long)
        return out


def _replace_in_order(text: str, replacements: dict[str, list[str]]) -> str:
    """Replace the i-th occurrence of each token with its i-th replacement, left to right."""
    import re

    if not replacements:
        return text
    pattern = re.compile("|".join(re.escape(token) for token in replacements))
    iters = {token: iter(values) for token, values in replacements.items()}

    def sub(match: re.Match[str]) -> str:
        replacement = next(iters[match.group(0)], None)
        if replacement is None:
            raise ValueError(f"more {match.group(0)} tokens in the text than items given")
        return replacement

    return pattern.sub(sub, text)
