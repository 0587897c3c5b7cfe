"""The token ids and positions of the forward pass in progress, for the modules deep in the decoder that need them.

megatron-core hands a transformer layer only hidden states (plus masks and rotary tables). Two parts
of DeepSeek-V4 need more: hash-routed MoE layers pick experts by token id, and the attention rotates
queries, keys and compressed entries by position. :class:`~swiftcore_bridge_deepseek_v4.model.DeepseekV4GPTModel`
fills one :class:`ForwardInputs` for the duration of each forward pass and gives it to every module
that declares it wants it (:class:`UsesForwardInputs`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from swiftcore_megatron import BridgeError

__all__ = ["ForwardInputs", "UsesForwardInputs"]


class ForwardInputs:
    """``input_ids`` and ``position_ids`` (``[batch, seq]``) of the running forward pass."""

    def __init__(self) -> None:
        self.input_ids: torch.Tensor | None = None
        self.position_ids: torch.Tensor | None = None

    @contextmanager
    def bound(self, input_ids: torch.Tensor | None, position_ids: torch.Tensor | None) -> Iterator[None]:
        """Hold the pass's ids and positions while the ``with`` block runs."""
        self.input_ids, self.position_ids = input_ids, position_ids
        try:
            yield
        finally:
            self.input_ids = self.position_ids = None

    def positions(self, batch: int, seq: int, device: torch.device) -> torch.Tensor:
        """``[batch, seq]`` positions: the model's ``position_ids``, or ``0..seq-1`` when none were given."""
        if self.position_ids is None:
            return torch.arange(seq, device=device).unsqueeze(0).expand(batch, -1)
        return self.position_ids.to(device).expand(batch, -1)

    def token_ids(self, what: str) -> torch.Tensor:
        """The ``[batch, seq]`` token ids.

        Raises:
            BridgeError: outside a :class:`~swiftcore_bridge_deepseek_v4.model.DeepseekV4GPTModel` forward.
        """
        if self.input_ids is None:
            raise BridgeError(
                f"{what} needs the token ids of the forward pass; build the model with "
                "DeepseekV4Bridge.build_model (DeepseekV4GPTModel), which passes them, and call it with input_ids"
            )
        return self.input_ids


class UsesForwardInputs:
    """Mixin of modules that read :class:`ForwardInputs` (the model binds one to each at construction)."""

    forward_inputs: ForwardInputs = ForwardInputs()  # replaced per model; this unbound one raises on use
