"""DeepSeek-V4's MoE routers for megatron-core's ``MoELayer``: top-k with ``sqrt(softplus)`` scores, and hash routing.

Both score every expert with ``sqrt(softplus(logit))`` (``scoring_func: sqrtsoftplus``; ``sigmoid``
also works) and weight the chosen experts by their scores renormalised to sum to 1, times
``routed_scaling_factor``. They differ in which experts are chosen:

- :class:`DeepseekV4Router` (``moe`` layers): the top-k of ``score + expert_bias``, the bias being
  HF's ``e_score_correction_bias`` (megatron's aux-loss-free ``expert_bias``, updated by megatron's
  training loop like DeepSeek-V3's);
- :class:`DeepseekV4HashRouter` (``hash_moe`` layers): a fixed table ``tid2eid[token id]``
  (``[vocab, top_k]``); the token ids come from :class:`~swiftcore_bridge_deepseek_v4.inputs.ForwardInputs`.
  A token whose table row names an expert twice gets that expert with both weights, as in HF.

megatron's ``topk_routing_with_score_function`` knows softmax and sigmoid only, so the routers
override :meth:`TopKRouter.routing`. Auxiliary load-balancing losses are off (V4 balances by bias).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from megatron.core.transformer.moe.router import TopKRouter
from swiftcore_megatron import BridgeError

from swiftcore_bridge_deepseek_v4.inputs import UsesForwardInputs

__all__ = ["DeepseekV4HashRouter", "DeepseekV4Router"]


class DeepseekV4Router(TopKRouter):
    """Top-k routing on ``sqrt(softplus)`` (or sigmoid) scores plus ``expert_bias``."""

    def __init__(self, config: Any, pg_collection: Any = None) -> None:
        super().__init__(config=config, pg_collection=pg_collection)
        if config.router_score_function not in ("sqrtsoftplus", "sigmoid"):
            raise BridgeError(
                f"config.json scoring_func={config.router_score_function!r}: the DeepSeek-V4 bridge routes with "
                "'sqrtsoftplus' or 'sigmoid'"
            )

    def scores(self, logits: torch.Tensor) -> torch.Tensor:
        """Per-expert scores of ``[tokens, experts]`` logits."""
        if self.config.router_score_function == "sigmoid":
            return torch.sigmoid(logits)
        return F.softplus(logits).sqrt()

    def select(self, scores: torch.Tensor) -> torch.Tensor:
        """``[tokens, top_k]`` expert indices."""
        return torch.topk(scores + self.expert_bias, self.topk, dim=-1, sorted=False).indices

    def routing(self, logits: torch.Tensor,
                padding_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``probs`` and boolean ``routing_map``, both ``[tokens, experts]`` (megatron's layout)."""
        logits = logits.view(-1, self.config.num_moe_experts)
        scores = self.scores(logits)
        indices = self.select(scores)
        weights = scores.gather(1, indices)
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20) * self.config.moe_router_topk_scaling_factor
        probs = torch.zeros_like(scores).scatter_add(1, indices, weights)
        routing_map = torch.zeros_like(scores, dtype=torch.bool).scatter(1, indices, True)
        if self.enable_expert_bias:  # megatron's aux-loss-free balancing counts tokens per expert (training only)
            mask = None if padding_mask is None else padding_mask.reshape(-1)
            self._apply_expert_bias(routing_map, padding_mask=mask)
        return probs, routing_map


class DeepseekV4HashRouter(DeepseekV4Router, UsesForwardInputs):
    """Experts chosen by the token id (``tid2eid`` buffer, ``[vocab, top_k]``); no bias to balance."""

    def __init__(self, config: Any, pg_collection: Any = None) -> None:
        super().__init__(config=config, pg_collection=pg_collection)
        # The choice is a fixed table: nothing for megatron's bias update to balance.
        for name in ("expert_bias", "local_tokens_per_expert"):
            self._buffers.pop(name, None)
        self.expert_bias = self.local_tokens_per_expert = None
        self.enable_expert_bias = False
        self.register_buffer("tid2eid", torch.zeros(config.hash_vocab_size, self.topk, dtype=torch.long))

    def select(self, scores: torch.Tensor) -> torch.Tensor:
        """The table rows of the tokens, in megatron's token order (sequence-major)."""
        ids = self.forward_inputs.token_ids("a DeepSeek-V4 hash-routed MoE layer")
        return self.tid2eid[ids.transpose(0, 1).reshape(-1).to(self.tid2eid.device)].long()
