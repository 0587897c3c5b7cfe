"""The megatron-core layer spec of Qwen3.5, built from local (non-Transformer-Engine) modules.

Two things megatron-core's local spec lacks for Qwen3.5, written here as small modules:

- Qwen3.5's RMSNorms (``input_layernorm``, ``post_attention_layernorm``, ``q_norm``/``k_norm``,
  the final ``norm``) are zero-centred: they scale by ``1 + weight`` (HF ``Qwen3_5RMSNorm``; the
  weights start at 0). megatron-core's torch norm refuses ``layernorm_zero_centered_gamma``, and
  folding the ``+1`` into the stored weight would break the bit-exact round trip (``(w + 1) - 1 != w``
  in floating point), so :class:`ZeroCenteredRMSNorm` keeps HF's weight and formula.
- The gated DeltaNet's output norm is a plain RMSNorm (HF ``Qwen3_5RMSNormGated``, weights start
  at 1; the SiLU gate is applied by megatron's ``GatedDeltaNet``): :class:`RMSNorm`.

megatron-core's :class:`~megatron.core.ssm.gated_delta_net.GatedDeltaNet` itself is used unchanged.
It needs flash-linear-attention (Triton kernels, CUDA only) for its L2 norm and chunked kernel;
without them :func:`use_torch_gated_delta_rule` selects megatron's own PyTorch implementation
(``torch_chunk_gated_delta_rule``, its ``deterministic_mode`` path) and a PyTorch L2 norm with FLA's
formula, which is what runs on a CPU.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from megatron.core.ssm import gated_delta_net
from megatron.core.ssm.gated_delta_net import GatedDeltaNet, GatedDeltaNetSubmodules
from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear
from megatron.core.transformer.spec_utils import ModuleSpec
from megatron.core.transformer.transformer_block import TransformerBlockSubmodules

__all__ = [
    "RMSNorm",
    "ZeroCenteredRMSNorm",
    "needs_torch_gated_delta_rule",
    "qwen3_5_block_spec",
    "torch_l2norm",
    "use_torch_gated_delta_rule",
]


class RMSNorm(torch.nn.Module):
    """RMSNorm computed in float32 like HF's Qwen3.5 norms: ``weight * x / rms(x)``.

    Args:
        config: the megatron TransformerConfig (for ``sequence_parallel``).
        hidden_size: normalised size.
        eps: epsilon added to the mean square.
    """

    #: The value weights start at (HF's init).
    init_value = 1.0

    def __init__(self, config: Any, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.full((hidden_size,), self.init_value, dtype=config.params_dtype))
        # megatron all-reduces the grads of sequence-parallel norm weights across TP ranks.
        self.weight.sequence_parallel = config.sequence_parallel

    def _scale(self) -> torch.Tensor:
        return self.weight.float()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise the last dimension of ``x``; the result has ``x``'s dtype."""
        xf = x.float()
        normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (normed * self._scale()).type_as(x)


class ZeroCenteredRMSNorm(RMSNorm):
    """Qwen3.5's zero-centred RMSNorm: ``(1 + weight) * x / rms(x)``, weights start at 0."""

    init_value = 0.0

    def _scale(self) -> torch.Tensor:
        return 1.0 + self.weight.float()


def torch_l2norm(x: torch.Tensor, dim: int = -1, eps: float = 1e-6) -> torch.Tensor:
    """FLA's ``l2norm`` in PyTorch: ``x / sqrt(sum(x^2) + eps)`` over ``dim``, computed in float32."""
    xf = x.float()
    return (xf * torch.rsqrt((xf * xf).sum(dim=dim, keepdim=True) + eps)).to(x.dtype)


def needs_torch_gated_delta_rule() -> bool:
    """Whether FLA's kernels are unusable here (not installed, or no CUDA for its Triton kernels)."""
    return not gated_delta_net.HAVE_FLA or not torch.cuda.is_available()


def use_torch_gated_delta_rule() -> bool:
    """Let megatron's GatedDeltaNet run without FLA; return True when that fallback is in use.

    ``GatedDeltaNet.__init__`` raises when FLA is not installed although its forward pass has a
    PyTorch path (taken when ``config.deterministic_mode`` is set, see
    :meth:`Qwen3_5Bridge.transformer_config`); that path still calls FLA's ``l2norm``. So, only when
    FLA is unusable, the module's ``HAVE_FLA`` flag is set and ``l2norm`` becomes :func:`torch_l2norm`.
    """
    if not needs_torch_gated_delta_rule():
        return False
    gated_delta_net.HAVE_FLA = True
    gated_delta_net.l2norm = torch_l2norm
    return True


def _gated_delta_net_spec() -> ModuleSpec:
    return ModuleSpec(
        module=GatedDeltaNet,
        submodules=GatedDeltaNetSubmodules(in_proj=ColumnParallelLinear, out_norm=RMSNorm, out_proj=RowParallelLinear),
    )


def qwen3_5_block_spec(
    linear_attention: list[bool], moe: list[bool] | None = None, num_experts: int | None = None
) -> TransformerBlockSubmodules:
    """The decoder block spec: per layer a gated DeltaNet or a gated full attention, then a dense or MoE MLP.

    Args:
        linear_attention: per layer, True for a gated-DeltaNet layer (HF ``layer_types``
            ``"linear_attention"``), False for full attention. The attention output gate itself is
            switched on by ``TransformerConfig.attention_output_gate``.
        moe: per layer, True for routed experts (``qwen3_5_moe``); None: every MLP is dense.
        num_experts: routed experts per MoE layer (needed when ``moe`` has a True).
    """
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.moe_module_specs import get_moe_module_spec

    use_torch_gated_delta_rule()
    attention_layer = get_gpt_layer_local_spec(normalization="RMSNorm", qk_layernorm=True)
    layer = attention_layer.submodules
    layer.input_layernorm = layer.pre_mlp_layernorm = ZeroCenteredRMSNorm
    layer.self_attention.submodules.q_layernorm = ZeroCenteredRMSNorm
    layer.self_attention.submodules.k_layernorm = ZeroCenteredRMSNorm

    delta_layer = copy.deepcopy(attention_layer)
    delta_layer.submodules.self_attention = _gated_delta_net_spec()
    # Transformer Engine fuses the input norm into in_proj: the names a TE checkpoint uses.
    delta_layer.submodules.sharded_state_dict_keys_map = {
        "input_layernorm.": "self_attention.in_proj.layer_norm_",
        "pre_mlp_layernorm.": "mlp.linear_fc1.layer_norm_",
    }
    moe_mlp = get_moe_module_spec(use_te=False, num_experts=num_experts) if moe and any(moe) else None
    specs = []
    for i, linear in enumerate(linear_attention):
        spec = delta_layer if linear else attention_layer
        if moe and moe[i]:
            spec = copy.deepcopy(spec)
            spec.submodules.mlp = moe_mlp
            # An MoE layer has no linear_fc1 for Transformer Engine to fuse its pre-MLP norm into.
            spec.submodules.sharded_state_dict_keys_map = {
                k: v for k, v in spec.submodules.sharded_state_dict_keys_map.items() if k != "pre_mlp_layernorm."
            }
        specs.append(spec)
    return TransformerBlockSubmodules(layer_specs=specs, layer_norm=ZeroCenteredRMSNorm)
