"""The DeepSeek-V4 decoder layer (megatron ``TransformerLayer`` with hyper-connections) and the GPTModel around it.

:class:`DeepseekV4TransformerLayer` builds its norms, attention and MoE from the spec like any
megatron layer, adds the two :class:`~swiftcore_bridge_deepseek_v4.hyper.HyperConnection` modules
(``attn_hc``, ``ffn_hc``) and replaces the residual adds by hyper-connection merges.

:class:`DeepseekV4GPTModel` widens the embedding to ``hc_mult`` streams and hands the token ids and
positions to the modules that need them (:mod:`~swiftcore_bridge_deepseek_v4.inputs`). The decoder's
``final_layernorm`` is :class:`~swiftcore_bridge_deepseek_v4.hyper.HyperHeadNorm`, which collapses
the streams, so megatron's output layer and loss see ordinary ``[s, b, hidden]`` states.
"""

from __future__ import annotations

from typing import Any

import torch
from megatron.core.models.gpt import GPTModel
from megatron.core.transformer.transformer_layer import TransformerLayer

from swiftcore_bridge_deepseek_v4.hyper import HyperConnection
from swiftcore_bridge_deepseek_v4.inputs import ForwardInputs, UsesForwardInputs

__all__ = ["DeepseekV4GPTModel", "DeepseekV4TransformerLayer"]


class DeepseekV4TransformerLayer(TransformerLayer):
    """Attention and MoE blocks joined by hyper-connections; hidden states ``[s, b, hc_mult * hidden]``."""

    def __init__(self, config: Any, submodules: Any, layer_number: int = 1, hidden_dropout: float | None = None,
                 pg_collection: Any = None, vp_stage: int | None = None) -> None:
        super().__init__(config, submodules, layer_number=layer_number, hidden_dropout=hidden_dropout,
                         pg_collection=pg_collection, vp_stage=vp_stage)
        self.attn_hc = HyperConnection(config)
        self.ffn_hc = HyperConnection(config)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None,
                **_: Any) -> tuple[torch.Tensor, None]:
        """One layer; returns ``(hidden_states, context)`` like megatron's ``TransformerLayer``."""
        seq, batch = hidden_states.shape[:2]
        streams = hidden_states.view(seq, batch, self.config.hc_mult, self.config.hidden_size)

        post, comb, collapsed = self.attn_hc(streams)
        attention_output, _ = self.self_attention(self.input_layernorm(collapsed), attention_mask=attention_mask)
        streams = HyperConnection.merge(streams, attention_output, post, comb)

        post, comb, collapsed = self.ffn_hc(streams)
        mlp_output, _ = self.mlp(self.pre_mlp_layernorm(collapsed))
        streams = HyperConnection.merge(streams, mlp_output, post, comb)
        return streams.reshape(seq, batch, -1), None


class DeepseekV4GPTModel(GPTModel):
    """megatron's GPTModel with the embedding copied into ``hc_mult`` residual streams.

    Takes GPTModel's arguments; the config is a
    :class:`~swiftcore_bridge_deepseek_v4.config.DeepseekV4TransformerConfig` and the layer spec
    :func:`~swiftcore_bridge_deepseek_v4.spec.deepseek_v4_block_spec`.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.forward_inputs = ForwardInputs()
        for module in self.modules():
            if isinstance(module, UsesForwardInputs):
                module.forward_inputs = self.forward_inputs

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                *args: Any, **kwargs: Any) -> torch.Tensor:
        """GPTModel's forward, with ``input_ids``/``position_ids`` visible to the hash routers and attention."""
        with self.forward_inputs.bound(input_ids, position_ids):
            return super().forward(input_ids, position_ids, attention_mask, *args, **kwargs)

    def _preprocess(self, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """GPTModel's preprocessing, then the ``[s, b, hidden]`` embedding repeated over the streams."""
        output = super()._preprocess(*args, **kwargs)
        decoder_input = output[0]
        if decoder_input is not None:
            seq, batch, hidden = decoder_input.shape
            decoder_input = decoder_input.unsqueeze(2).expand(seq, batch, self.config.hc_mult, hidden)
            decoder_input = decoder_input.reshape(seq, batch, -1)
        return (decoder_input, *output[1:])
