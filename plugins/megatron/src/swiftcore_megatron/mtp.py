"""Multi-token-prediction (MTP) layers on megatron-core's MTP block: a GPTModel that also gives their logits.

DeepSeek-V3-style MTP layers (GLM-5's, MiMo-V2's) predict, at position t, token t + 1 + k for depth k:

    logits_t = lm_head(final_norm(layer(eh_proj(cat[enorm(embed(x_{t+1})), hnorm(h_t)]))))

with ``h_t`` the main model's (or the previous depth's) output after its final norm, the embedding and the output
head shared with the main model, and the rotary position staying t. megatron-core 0.16.1's
``MultiTokenPredictionBlock`` computes exactly that (it fills the embedding of the last position with token 0's).

megatron computes MTP logits only inside its training loss: ``GPTModel``'s forward without labels stops at
``labels.clone()``. :class:`MtpGPTModel` adds the labels-free path, which parity checks and generation need: the
main logits are returned as usual and each depth's logits are kept in ``mtp_logits``. A bridge builds it with
megatron's ``mtp_block_spec`` (``get_gpt_mtp_block_spec``) when its checkpoint has MTP layers.
"""

from __future__ import annotations

from typing import Any

import torch
from megatron.core.models.gpt import GPTModel

from swiftcore_megatron.errors import BridgeError

__all__ = ["MtpGPTModel", "mtp_logits"]


class MtpGPTModel(GPTModel):
    """megatron's GPTModel whose forward without labels also runs the MTP block.

    Attributes:
        mtp_logits: after a labels-free forward, one full-vocabulary ``[batch, seq, vocab]`` tensor per MTP depth
            (gathered over tensor-parallel ranks); position t of depth k predicts token t + 1 + k.
    """

    mtp_logits: list[torch.Tensor]

    def _postprocess(
        self,
        hidden_states: torch.Tensor,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        labels: torch.Tensor | None,
        rotary_pos_emb: Any,
        rotary_pos_cos: Any,
        rotary_pos_sin: Any,
        mtp_in_postprocess: bool | None = None,
        **kwargs: Any,
    ) -> torch.Tensor:
        """GPTModel's post-processing; without labels, the MTP block's logits too (see the class docstring)."""
        if labels is not None or not mtp_in_postprocess:
            return super()._postprocess(
                hidden_states,
                input_ids,
                position_ids,
                labels,
                rotary_pos_emb,
                rotary_pos_cos,
                rotary_pos_sin,
                mtp_in_postprocess,
                **kwargs,
            )
        if kwargs.get("inference_context") is not None:
            raise BridgeError("megatron inference contexts are not supported with MTP layers by MtpGPTModel")
        extra = kwargs.get("extra_block_kwargs") or {}
        hidden = self.mtp(
            input_ids=input_ids,
            position_ids=position_ids,
            hidden_states=hidden_states,
            attention_mask=kwargs.get("attention_mask"),
            inference_params=kwargs.get("inference_params"),
            rotary_pos_emb=rotary_pos_emb,
            rotary_pos_cos=rotary_pos_cos,
            rotary_pos_sin=rotary_pos_sin,
            packed_seq_params=kwargs.get("packed_seq_params"),
            sequence_len_offset=kwargs.get("sequence_len_offset"),
            embedding=self.embedding,
            **extra,
        )
        main, *depths = torch.chunk(hidden, 1 + self.config.mtp_num_layers, dim=0)
        weight = self.shared_embedding_or_output_weight() if self.share_embeddings_and_output_weights else None

        def logits(states: torch.Tensor, gather: bool | None) -> torch.Tensor:
            out, _ = self.output_layer(states, weight=weight, runtime_gather_output=gather)
            return out.transpose(0, 1).contiguous()  # [s, b, v] -> [b, s, v], as GPTModel returns them

        self.mtp_logits = [logits(states, True) for states in depths]
        return logits(main, kwargs.get("runtime_gather_output"))


def mtp_logits(model: MtpGPTModel, input_ids: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The main and the MTP float32 logits of ``model`` on ``input_ids`` (plain positions, no mask), on CPU.

    Returns:
        ``(main [batch, seq, vocab], [one [batch, seq, vocab] per MTP depth])``, full vocabulary on every rank.
    """
    from swiftcore_megatron.runtime import mcore_logits

    main = mcore_logits(model, input_ids)
    return main, [t.float().cpu() for t in model.mtp_logits]
