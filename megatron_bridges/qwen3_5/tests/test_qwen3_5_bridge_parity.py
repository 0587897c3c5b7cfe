"""Float32 logits of the real megatron-core GPTModel (this bridge's layer spec) vs transformers, on CPU.

The gated-DeltaNet layers are megatron-core's own ``GatedDeltaNet``; on a CPU it runs megatron's
PyTorch gated delta rule (no FLA), transformers its PyTorch fallback.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from swiftcore_bridge_qwen3_5.mapping import GatedQKV
from swiftcore_megatron import DEFAULT_TOLERANCE, check_parity, check_parity_tp, load_mcore_state, sample_tokens


@pytest.fixture(scope="module")
def state(bridge, mcore_tp2: Path) -> dict[str, torch.Tensor]:  # type: ignore[no-untyped-def]
    """The TP-2 checkpoint merged back to one rank, as a TP-1 model loads it."""
    return load_mcore_state(mcore_tp2, bridge)


# 80 tokens cross the 64-token chunks of both gated-delta-rule implementations (the recurrent state
# carried between chunks is then part of the comparison).
@pytest.mark.parametrize("seq", [16, 80])
def test_logit_parity_tp1(qwen3_5_tiny: Path, bridge, state, seq: int) -> None:  # type: ignore[no-untyped-def]
    tokens = sample_tokens(int(bridge.get("vocab_size")), seq=seq)
    report = check_parity(qwen3_5_tiny, bridge, state, input_ids=tokens)
    assert report.max_abs <= DEFAULT_TOLERANCE, report
    assert report.argmax_agreement == 1.0, report
    assert report.positions == 2 * seq


def test_model_has_a_gated_delta_net_or_gated_attention_per_layer_type(bridge) -> None:  # type: ignore[no-untyped-def]
    from megatron.core.ssm.gated_delta_net import GatedDeltaNet
    from megatron.core.transformer.attention import SelfAttention
    from swiftcore_megatron import init_model_parallel

    init_model_parallel(1, 1)
    model = bridge.build_model()
    for layer, kind in zip(model.decoder.layers, bridge.layer_types, strict=True):
        expected = GatedDeltaNet if kind == "linear_attention" else SelfAttention
        assert type(layer.self_attention) is expected
    assert model.config.attention_output_gate
    # Partial rotary: a quarter of each 32-channel head rotates, 4 frequencies.
    assert model.rotary_pos_emb.inv_freq.numel() == int(bridge.head_dim * 0.25) // 2 == 4


class _HalvesGatedQKV(GatedQKV):
    """The likely mistake: ``q_proj`` read as ``[all queries; all gates]`` instead of query/gate per head."""

    def to_mcore(self, tensors):  # type: ignore[no-untyped-def]
        q_gate, k, v = tensors
        query, gate = q_gate.chunk(2)
        per_head = torch.stack([query.reshape(self.num_heads, -1, *query.shape[1:]),
                                gate.reshape(self.num_heads, -1, *gate.shape[1:])], dim=1)
        return super().to_mcore([per_head.reshape(q_gate.shape), k, v])


def test_negative_control_query_gate_layout_fails_parity(qwen3_5_tiny: Path, bridge, state) -> None:  # type: ignore[no-untyped-def]
    hf = load_file(qwen3_5_tiny / "model.safetensors")
    wrong_state = dict(state)
    for rule in bridge.rules():
        if isinstance(rule.fuse, GatedQKV):
            wrong = dataclasses.replace(rule, fuse=_HalvesGatedQKV(**dataclasses.asdict(rule.fuse)))
            wrong_state[rule.mcore] = wrong.fuse.to_mcore([hf[k] for k in rule.hf])
            assert not torch.equal(wrong_state[rule.mcore], state[rule.mcore])
    report = check_parity(qwen3_5_tiny, bridge, wrong_state)
    assert not report.ok
    assert report.max_abs > 1e-2, report


def test_negative_control_plain_rmsnorm_fails_parity(qwen3_5_tiny: Path, bridge, state) -> None:  # type: ignore[no-untyped-def]
    """Qwen3.5's norms scale by ``1 + weight``: a plain RMSNorm in the spec loads the same weights but is wrong."""
    from swiftcore_bridge_qwen3_5 import modules

    class PlainNormBridge(type(bridge)):  # type: ignore[misc]
        def layer_spec(self, config):  # type: ignore[no-untyped-def]
            spec = super().layer_spec(config)
            spec.layer_norm = modules.RMSNorm
            for layer in spec.layer_specs:
                layer.submodules.input_layernorm = layer.submodules.pre_mlp_layernorm = modules.RMSNorm
            return spec

    report = check_parity(qwen3_5_tiny, PlainNormBridge(bridge.hf_config), state)
    assert not report.ok
    assert report.max_abs > 1e-2, report


@pytest.mark.slow
def test_logit_parity_tp2_with_two_gloo_processes(qwen3_5_tiny: Path, bridge, mcore_tp2: Path) -> None:  # type: ignore[no-untyped-def]
    report = check_parity_tp(qwen3_5_tiny, mcore_tp2, bridge, 2)
    assert report.max_abs <= DEFAULT_TOLERANCE, report
    assert report.argmax_agreement == 1.0 and report.positions == 32, report
