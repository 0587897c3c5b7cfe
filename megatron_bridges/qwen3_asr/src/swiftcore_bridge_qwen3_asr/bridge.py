"""Qwen3-ASR: the dense GPT bridge applied to ``model.language_model``; tower and projector passed through."""

from __future__ import annotations

from typing import Any

from swiftcore_bridge_gpt import GPTBridge
from swiftcore_megatron import BridgeError

__all__ = ["Qwen3ASRBridge"]


class Qwen3ASRBridge(GPTBridge):
    """Qwen3-ASR (``qwen3_asr``): a Qwen3 decoder under ``model.language_model``, an audio tower beside it."""

    model_types = ("qwen3_asr",)
    hf_prefix = "model.language_model."
    passthrough_prefixes = ("model.audio_tower.", "model.multi_modal_projector.")

    def select_config(self, hf_config: dict[str, Any]) -> dict[str, Any]:
        """The ``text_config`` (a Qwen3 config), with the top level's head tying.

        Raises:
            BridgeError: when config.json has no ``text_config``.
        """
        text = hf_config.get("text_config")
        if not isinstance(text, dict):
            raise BridgeError("config.json (model_type 'qwen3_asr') has no 'text_config' object")
        tied = hf_config.get("tie_word_embeddings", text.get("tie_word_embeddings", False))
        return {**text, "model_type": "qwen3", "tie_word_embeddings": tied}
