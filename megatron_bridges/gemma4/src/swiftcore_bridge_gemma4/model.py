"""The megatron-core GPTModel of Gemma 4's text decoder: embedding scale, per-layer inputs, logit soft-cap.

:class:`Gemma4GPTModel` is megatron-core's ``GPTModel`` (embedding, decoder block, final norm, output
layer, loss) with what Gemma 4 adds around the decoder (transformers 5.19 ``Gemma4TextModel``,
``Gemma4ForConditionalGeneration``):

- the token embedding is multiplied by ``sqrt(hidden_size)`` (the output layer, tied or not, is not);
- per-layer input embeddings (PLE, :class:`Gemma4PerLayerEmbedding`): a second token embedding
  ``[vocab_ple, layers * ple]`` times ``sqrt(ple)``, plus a projection of the scaled token
  embedding (``* hidden^-0.5``, RMSNorm over each layer's slice), averaged as ``(a + b) / sqrt(2)``;
  layer ``i`` reads slice ``i`` (see :mod:`~swiftcore_bridge_gemma4.layer`);
- final logit soft-capping ``cap * tanh(logits / cap)``, applied to the output layer's result (so
  the loss megatron computes sees capped logits, as HF's does);
- the multimodal checkpoint's image/video/audio placeholder tokens embed as the pad token
  (``Gemma4Model.forward`` does this before scattering media features in; on text-only input the
  language model sees pad there); the pad token's embedding rows never train (HF's ``padding_idx``).

Rotary tables are per layer type, so the model has no global rotary embedding
(``position_embedding_type="none"``); the attention layers compute theirs from the positions the
model hands them in the per-forward :class:`~swiftcore_bridge_gemma4.attention.Gemma4ForwardState`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from megatron.core.models.gpt import GPTModel
from megatron.core.tensor_parallel import ColumnParallelLinear, VocabParallelEmbedding
from megatron.core.transformer.module import MegatronModule
from megatron.core.utils import get_tensor_model_parallel_group_if_none

from swiftcore_bridge_gemma4.attention import Gemma4ForwardState
from swiftcore_bridge_gemma4.norm import Gemma4RMSNorm

__all__ = ["Gemma4GPTModel", "Gemma4PerLayerEmbedding"]


def _no_pad_gradient(embedded: torch.Tensor, ids: torch.Tensor, pad_token_id: int) -> torch.Tensor:
    """``embedded`` ``[seq, batch, ...]`` with no gradient flowing back to the pad token's row.

    HF's Gemma 4 embeddings are ``nn.Embedding(..., padding_idx=pad_token_id)``: the pad row is looked up (pad tokens,
    and media placeholders on text-only input) but never trained. megatron's ``VocabParallelEmbedding`` has no
    ``padding_idx``, so without this the row would train, and a zero pad row through the RMSNorm that follows gets a
    gradient of order ``1/sqrt(eps)``.
    """
    pad = (ids == pad_token_id).transpose(0, 1).reshape(*embedded.shape[:2], *(1,) * (embedded.dim() - 2))
    return torch.where(pad, embedded.detach(), embedded)


class Gemma4PerLayerEmbedding(MegatronModule):
    """Per-layer input embeddings (HF ``embed_tokens_per_layer``, ``per_layer_model_projection``, its norm).

    Weights: ``embed_tokens.weight`` ``[vocab_ple, layers * ple]`` (vocabulary-parallel),
    ``model_projection.weight`` ``[layers * ple, hidden]`` (column-parallel, gathered),
    ``projection_norm.weight`` ``[ple]``.

    Args:
        config: the megatron TransformerConfig.
        vocab_size: HF ``vocab_size_per_layer_input``.
        num_layers: decoder layers.
        size: HF ``hidden_size_per_layer_input``.
        pad_token_id: the row that never trains (HF's ``padding_idx``).
    """

    def __init__(self, config: Any, vocab_size: int, num_layers: int, size: int, pad_token_id: int = 0) -> None:
        super().__init__(config=config)
        self.num_layers, self.size, self.pad_token_id = num_layers, size, pad_token_id
        tp_group = get_tensor_model_parallel_group_if_none(None)
        self.embed_tokens = VocabParallelEmbedding(vocab_size, num_layers * size, init_method=config.init_method,
                                                   config=config, tp_group=tp_group)
        self.model_projection = ColumnParallelLinear(
            config.hidden_size, num_layers * size, config=config, init_method=config.init_method, bias=False,
            gather_output=True, skip_bias_add=True, tp_group=tp_group,
        )
        self.projection_norm = Gemma4RMSNorm(config, size, eps=config.layernorm_epsilon)

    def forward(self, input_ids: torch.Tensor, embeddings: torch.Tensor) -> torch.Tensor:
        """``[seq, batch, layers, size]`` from ids ``[batch, seq]`` and scaled embeddings ``[seq, batch, hidden]``."""
        s, b = embeddings.shape[0], embeddings.shape[1]
        tokens = _no_pad_gradient(self.embed_tokens(input_ids).transpose(0, 1), input_ids, self.pad_token_id)
        tokens = tokens * torch.tensor(self.size**0.5, dtype=tokens.dtype)
        projected, _ = self.model_projection(embeddings)
        projected = self.projection_norm((projected * self.config.hidden_size**-0.5).reshape(s, b, self.num_layers,
                                                                                              self.size))
        return (projected + tokens.reshape(s, b, self.num_layers, self.size)) * 2.0**-0.5


class Gemma4GPTModel(GPTModel):
    """megatron-core ``GPTModel`` with Gemma 4's embedding scale, per-layer inputs and logit soft-cap.

    Args:
        config: the megatron TransformerConfig.
        transformer_layer_spec: the decoder block spec (:func:`~swiftcore_bridge_gemma4.layer.gemma4_block_spec`).
        vocab_size: token vocabulary.
        max_sequence_length: longest sequence.
        per_layer_input_size: HF ``hidden_size_per_layer_input`` (0: no per-layer inputs).
        per_layer_vocab_size: HF ``vocab_size_per_layer_input``.
        final_logit_softcapping: the cap, or None.
        placeholder_token_ids: media placeholder ids embedded as ``pad_token_id``.
        pad_token_id: the pad token.
        **kwargs: the rest of ``GPTModel``'s arguments (``pre_process``, ``post_process``,
            ``share_embeddings_and_output_weights``, ...); ``position_embedding_type`` is ``"none"``.
    """

    def __init__(self, config: Any, transformer_layer_spec: Any, vocab_size: int, max_sequence_length: int, *,
                 per_layer_input_size: int = 0, per_layer_vocab_size: int = 0,
                 final_logit_softcapping: float | None = None, placeholder_token_ids: Sequence[int] = (),
                 pad_token_id: int = 0, **kwargs: Any) -> None:
        super().__init__(config=config, transformer_layer_spec=transformer_layer_spec, vocab_size=vocab_size,
                         max_sequence_length=max_sequence_length, position_embedding_type="none", **kwargs)
        self.final_logit_softcapping = final_logit_softcapping
        self.placeholder_token_ids = tuple(placeholder_token_ids)
        self.pad_token_id = pad_token_id
        self.per_layer_input_size = per_layer_input_size
        if self.pre_process and per_layer_input_size:
            self.per_layer_embedding = Gemma4PerLayerEmbedding(config, per_layer_vocab_size, config.num_layers,
                                                               per_layer_input_size, pad_token_id)
        if self.post_process and final_logit_softcapping:
            # A hook keeps output_layer's parameters and names megatron's own; it caps before the loss.
            self.output_layer.register_forward_hook(self._softcap_hook)

    def _softcap_hook(self, module: Any, inputs: Any, output: tuple[torch.Tensor, Any]) -> tuple[torch.Tensor, Any]:
        logits, bias = output
        cap = self.final_logit_softcapping
        return torch.tanh(logits / cap) * cap, bias

    def text_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        """``input_ids`` with media placeholder tokens replaced by the pad token (as HF's multimodal model does)."""
        if not self.placeholder_token_ids:
            return input_ids
        placeholders = torch.tensor(self.placeholder_token_ids, device=input_ids.device)
        return torch.where(torch.isin(input_ids, placeholders), self.pad_token_id, input_ids)

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor | None, attention_mask: Any,
                decoder_input: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                extra_block_kwargs: dict | None = None, **kwargs: Any) -> torch.Tensor:
        """GPTModel's forward with Gemma 4's embedding and the per-forward state for the layers.

        Returns what ``GPTModel.forward`` returns: logits ``[batch, seq, vocab/tp]``, or the loss when
        ``labels`` are given.

        Raises:
            ValueError: with a ``decoder_input`` and per-layer inputs (they need the token ids), or
                on a pipeline stage other than the first (the per-layer inputs do not travel between stages).
        """
        if not self.pre_process:
            raise ValueError("Gemma4GPTModel does not support pipeline parallelism yet (per-layer inputs)")
        if position_ids is None:
            position_ids = torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
        state = Gemma4ForwardState(positions=position_ids)
        ids = self.text_ids(input_ids)
        if decoder_input is None:
            embedded = _no_pad_gradient(self.embedding(input_ids=ids, position_ids=None), ids, self.pad_token_id)
            decoder_input = embedded * torch.tensor(self.config.hidden_size**0.5, dtype=embedded.dtype)
        elif self.per_layer_input_size:
            raise ValueError("Gemma4GPTModel computes per-layer inputs from input_ids; do not pass decoder_input")
        if self.per_layer_input_size:
            state.per_layer_inputs = self.per_layer_embedding(ids, decoder_input)
        return super().forward(input_ids, position_ids, attention_mask, decoder_input=decoder_input, labels=labels,
                               extra_block_kwargs={**(extra_block_kwargs or {}), "context": state}, **kwargs)
