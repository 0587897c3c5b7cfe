"""Float32 logits of the real megatron-core GPTModel (this bridge's layer spec) vs transformers 5.19, on CPU.

Sequence lengths are chosen so each part does real work: 64 tokens give the CSA layer 16 compressed
entries of which its indexer keeps 8; 136 tokens close one 128-token HCA window. The variant
checkpoint has a sliding-window layer, HCA windows of 8 tokens and sigmoid routing.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from swiftcore_megatron import DEFAULT_TOLERANCE, Rule, check_parity, hf_to_mcore, load_mcore_state, sample_tokens


def _tokens(bridge, seq: int):  # type: ignore[no-untyped-def]
    return sample_tokens(int(bridge.get("vocab_size")), seq=seq)


#: The closed 128-token HCA window sums the most terms of any path here. With MKL's AVX-512 kernels (measured
#: on a Sapphire Rapids Xeon, torch 2.13) its largest logit difference is 1.34e-5 for logits up to 5.4 (2.5e-6
#: relative, ~28 float32 ulps); with AVX2 kernels (MKL_ENABLE_INSTRUCTIONS=AVX2, or the CPUs earlier runs had)
#: it is within 1e-5. Summation order, not a mapping error: the negative controls below differ by 2.3 and 4.4,
#: five orders of magnitude above, and every argmax must still agree.
CLOSED_WINDOW_TOLERANCE = 2e-5


def _assert_parity(report, positions: int, tolerance: float = DEFAULT_TOLERANCE) -> None:  # type: ignore[no-untyped-def]
    assert report.max_abs <= tolerance, report
    assert report.argmax_agreement == 1.0, report
    assert report.positions == positions, report


def test_logit_parity_with_the_indexer_selecting(ds4_tiny: Path, bridge, state) -> None:  # type: ignore[no-untyped-def]
    """The full check_parity path (HF loaded fresh): HCA x3 (no window closed yet) and CSA with top-8 of 16."""
    _assert_parity(check_parity(ds4_tiny, bridge, state, input_ids=_tokens(bridge, 64)), 128)


def test_logit_parity_with_a_closed_heavily_compressed_window(ds4_tiny: Path, bridge, state,  # type: ignore[no-untyped-def]
                                                              mcore_parity) -> None:
    _assert_parity(mcore_parity(ds4_tiny, bridge, state, _tokens(bridge, 136)), 272, CLOSED_WINDOW_TOLERANCE)


def test_logit_parity_of_every_attention_type_and_sigmoid_routing(ds4_variant: Path, bridge_for, mcore_parity,  # type: ignore[no-untyped-def]
                                                                  tmp_path: Path) -> None:
    from swiftcore_megatron import read_hf_config

    variant = bridge_for(read_hf_config(ds4_variant))
    assert set(variant.attention_types) == {"sliding_attention", "compressed_sparse_attention",
                                            "heavily_compressed_attention"}
    hf_to_mcore(ds4_variant, tmp_path / "mcore", variant)
    _assert_parity(mcore_parity(ds4_variant, variant, load_mcore_state(tmp_path / "mcore", variant),
                                _tokens(variant, 40)), 80)


def test_model_is_built_from_the_bridge_modules(bridge) -> None:  # type: ignore[no-untyped-def]
    from megatron.core.transformer.moe.moe_layer import MoELayer
    from swiftcore_bridge_deepseek_v4.attention import DeepseekV4Attention
    from swiftcore_bridge_deepseek_v4.hyper import HyperHeadNorm
    from swiftcore_bridge_deepseek_v4.layer import DeepseekV4GPTModel
    from swiftcore_bridge_deepseek_v4.moe import DeepseekV4HashRouter, DeepseekV4Router
    from swiftcore_megatron import init_model_parallel

    init_model_parallel(1, 1)
    model = bridge.build_model()
    assert type(model) is DeepseekV4GPTModel and isinstance(model.decoder.final_layernorm, HyperHeadNorm)
    for layer, mlp_type in zip(model.decoder.layers, bridge.mlp_types, strict=True):
        assert isinstance(layer.self_attention, DeepseekV4Attention) and isinstance(layer.mlp, MoELayer)
        assert type(layer.mlp.router) is (DeepseekV4HashRouter if mlp_type == "hash_moe" else DeepseekV4Router)
    assert model.decoder.layers[3].self_attention.indexer is not None
    assert model.decoder.layers[0].self_attention.indexer is None


def test_backward_reaches_hyper_connections_router_and_compressor(bridge, state) -> None:  # type: ignore[no-untyped-def]
    """The converted model trains: a loss backpropagates into V4's own parameters."""
    from swiftcore_megatron import init_model_parallel, load_into_model

    init_model_parallel(1, 1)
    model = bridge.build_model()
    load_into_model(model, state)
    model.train()
    tokens = _tokens(bridge, 64)
    positions = torch.arange(64).unsqueeze(0).expand_as(tokens)
    loss = model(input_ids=tokens, position_ids=positions, attention_mask=None, labels=tokens).float().mean()
    loss.backward()
    layer = model.decoder.layers[3]
    for param in (layer.attn_hc.fn, layer.mlp.router.weight, layer.self_attention.compressor.linear_kv.weight,
                  layer.self_attention.sinks, model.decoder.final_layernorm.hc_head.fn):
        assert param.grad is not None and param.grad.abs().sum() > 0


def _swapped(rule: Rule, a: str, b: str) -> Rule:
    return dataclasses.replace(rule, hf=tuple(k.replace(a, "\0").replace(b, a).replace("\0", b) for k in rule.hf))


def test_negative_control_swapped_hyper_connections_fail_parity(ds4_tiny: Path, bridge, mcore_parity) -> None:  # type: ignore[no-untyped-def]
    """A bridge mapping ``hc_attn_*`` to the MLP's hyper-connection and ``hc_ffn_*`` to the attention's."""
    from safetensors.torch import load_file

    hf = load_file(ds4_tiny / "model.safetensors")
    wrong = {}
    for rule in bridge.rules():
        if rule.expert is None:
            rule = _swapped(rule, "hc_attn_", "hc_ffn_")
            wrong[rule.mcore] = rule.fuse.to_mcore([hf[k] for k in rule.hf])
        else:
            wrong[rule.mcore_key(bridge.num_experts())] = rule.fuse.to_mcore([hf[k] for k in rule.hf])
    report = mcore_parity(ds4_tiny, bridge, wrong, _tokens(bridge, 64))
    assert not report.ok
    assert report.max_abs > 1e-3, report


def test_negative_control_indexer_ignored_fails_parity(ds4_tiny: Path, bridge, state, mcore_parity,  # type: ignore[no-untyped-def]
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """CSA attending to every closed entry (no top-k selection) must show: the indexer is part of the model."""
    from swiftcore_bridge_deepseek_v4 import attention

    def keep_everything(self, x, q_residual, positions):  # type: ignore[no-untyped-def]
        entries = (x.shape[1] // self.rate)
        every = torch.arange(entries).expand(x.shape[0], x.shape[1], -1)
        return torch.where(attention.closed_entries(positions, self.rate, entries), every, -1)

    monkeypatch.setattr(attention.Indexer, "forward", keep_everything)
    report = mcore_parity(ds4_tiny, bridge, state, _tokens(bridge, 64))
    assert not report.ok
    assert report.max_abs > 1e-4, report
