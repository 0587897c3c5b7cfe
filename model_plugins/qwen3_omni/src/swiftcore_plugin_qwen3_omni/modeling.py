"""Loading Qwen3-Omni: the whole model for make-tiny, its thinker for training and inference.

Upstream's ``Qwen3OmniMoeForConditionalGeneration`` has no ``forward``: it is a container of the thinker, the
talker and Code2Wav with a ``generate`` that chains them. Training a text reply trains the thinker, which
transformers loads straight from a whole-model checkpoint (``Qwen3OmniMoeThinkerConfig`` reads the
``thinker_config`` of ``config.json``, the weights drop their ``thinker.`` prefix).
"""

from __future__ import annotations

from typing import Any

import transformers

from swiftcore.api import SwiftcoreError

__all__ = ["Qwen3OmniMoeForConditionalGeneration", "load_thinker"]


class Qwen3OmniMoeForConditionalGeneration(transformers.Qwen3OmniMoeForConditionalGeneration):
    """Upstream's class as make-tiny builds it; ``config.json`` names upstream's class, which plain transformers loads.

    Two diffs, both for random weights only:

    - the talker's MoE experts and routers are initialised (normal, ``initializer_range``): upstream's
      ``_init_weights`` (transformers 5.19) covers the thinker's but not the talker's, whose experts keep
      ``torch.empty``'s memory -- denormals on one run, NaN on another, so a tiny checkpoint was not reproducible;
    - ``get_output_embeddings``/``get_decoder`` answer with the thinker's (upstream returns None and the container),
      so make-tiny can raise the final norm's gain as it does for every family.
    """

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        if getattr(self, "has_talker", False):
            import torch
            from transformers.models.qwen3_omni_moe import modeling_qwen3_omni_moe as upstream

            std = self.config.talker_config.initializer_range
            with torch.no_grad():
                for module in self.talker.modules():
                    if isinstance(module, upstream.Qwen3OmniMoeTalkerTextSparseMoeBlock):
                        module.experts.gate_up_proj.normal_(0.0, std)
                        module.experts.down_proj.normal_(0.0, std)
                        module.gate.weight.normal_(0.0, std)

    def get_output_embeddings(self) -> Any:
        """The thinker's ``lm_head``."""
        return self.thinker.lm_head

    def get_decoder(self) -> Any:
        """The thinker's text decoder (which holds the final ``norm``)."""
        return self.thinker.model


def load_thinker(model_dir: str, *, spec: Any = None, torch_dtype: Any = None, **kwargs: Any) -> Any:
    """Load the thinker of the checkpoint in ``model_dir`` (a whole Qwen3-Omni or a thinker-only one).

    Args:
        model_dir: the checkpoint directory.
        spec: the model spec (unused; the loader contract passes it).
        torch_dtype: the dtype for ``from_pretrained``.
        **kwargs: passed to ``from_pretrained``.

    Raises:
        SwiftcoreError: weights of the thinker are missing from the checkpoint.
    """
    from transformers.utils import logging as hf_logging

    cls = transformers.Qwen3OmniMoeThinkerForConditionalGeneration
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the talker's and Code2Wav's weights are expected to be left out: no report
    try:
        model, info = cls.from_pretrained(model_dir, dtype=torch_dtype, output_loading_info=True, **kwargs)
    finally:
        hf_logging.set_verbosity(level)
    if missing := sorted(info["missing_keys"]):
        raise SwiftcoreError(
            f"{model_dir}: {len(missing)} thinker weight(s) are not in its weight files ({', '.join(missing[:6])}); "
            "copy the whole checkpoint (every file model.safetensors.index.json names)"
        )
    return model
