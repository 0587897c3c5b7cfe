"""OLMoE's q/k RMSNorm as modules megatron-core's attention spec can build.

Why a module of our own: megatron's ``qk_layernorm`` builds its norm with ``hidden_size=head_dim`` and
normalises each head on its own. transformers' ``OlmoeAttention`` applies ``q_norm`` to the whole
projected query (``heads * head_dim`` channels, one RMS over all heads, one weight per channel) and
``k_norm`` likewise to the whole key (``kv_heads * head_dim``), before the heads are split. These modules
take megatron's ``[seq, batch, local heads, head_dim]`` query/key, normalise over all heads with HF's
formula (float32, ``x * rsqrt(mean(x^2) + eps)``, then ``weight * x`` in the input dtype), and under tensor
parallelism all-reduce the sum of squares over the TP group, since each rank holds only its own heads
(its slice of the weight: the bridge column-shards it).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

__all__ = ["OlmoeKNorm", "OlmoeQNorm", "WholeWidthRMSNorm"]


class WholeWidthRMSNorm(torch.nn.Module):
    """RMSNorm over all heads of q (or k) at once; each TP rank holds its heads' slice of the weight.

    Args:
        config: the megatron TransformerConfig (head counts, TP size, parameter dtype).
        hidden_size: megatron passes the head size (``kv_channels``).
        eps: added to the mean square.
    """

    #: The TransformerConfig field counting the heads this norm spans.
    heads_field: ClassVar[str] = "num_attention_heads"

    def __init__(self, config: Any, hidden_size: int, eps: float = 1e-5) -> None:
        super().__init__()
        from megatron.core.tensor_parallel.layers import set_tensor_model_parallel_attributes

        heads = int(getattr(config, self.heads_field))
        self.tp = int(config.tensor_model_parallel_size)
        self.eps = eps
        self.width = heads * hidden_size  # the full (unsharded) normalised width
        self.weight = torch.nn.Parameter(torch.ones(self.width // self.tp, dtype=config.params_dtype))
        # Sharded like a column-parallel output: optimisers and grad-norm code treat it as TP-split.
        set_tensor_model_parallel_attributes(self.weight, is_parallel=True, dim=0, stride=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise ``x`` ``[..., local heads, head_dim]`` over all heads (of every TP rank)."""
        shape = x.shape
        xf = x.reshape(*shape[:-2], -1).float()
        square_sum = xf.pow(2).sum(-1, keepdim=True)
        if self.tp > 1:
            from megatron.core import parallel_state
            from torch.distributed.nn.functional import all_reduce

            # Autograd-aware all-reduce: each rank's gradient reaches every rank's slice.
            square_sum = all_reduce(square_sum, group=parallel_state.get_tensor_model_parallel_group())
        normed = xf * torch.rsqrt(square_sum / self.width + self.eps)
        return (self.weight * normed.to(x.dtype)).reshape(shape)

    def sharded_state_dict(self, prefix: str = "", sharded_offsets: tuple = (), metadata: Any = None) -> Any:
        """Megatron's distributed-checkpoint view: the weight is split on dim 0 over TP ranks."""
        from megatron.core.transformer.utils import make_sharded_tensors_for_checkpoint

        state = self.state_dict(prefix="", keep_vars=True)
        return make_sharded_tensors_for_checkpoint(state, prefix, {"weight": 0}, sharded_offsets)


class OlmoeQNorm(WholeWidthRMSNorm):
    """``q_norm``: all query heads (``num_attention_heads * head_dim``)."""

    heads_field = "num_attention_heads"


class OlmoeKNorm(WholeWidthRMSNorm):
    """``k_norm``: all key/value heads (``num_query_groups * head_dim``)."""

    heads_field = "num_query_groups"
