"""Float32 logits of the real megatron-core GPTModel (this bridge's MLA + DSA spec) vs transformers' GLM-5, on
CPU: TP 1, TP 2 (two gloo processes) and EP 2 (two gloo processes, each with its own experts); sequences longer
than ``index_topk`` so that the indexer's selection decides the attention."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file
from swiftcore_megatron import (
    DEFAULT_TOLERANCE,
    BridgeError,
    ParallelismError,
    check_parity,
    check_parity_tp,
    compare_logits,
    hf_logits,
    hf_to_mcore,
    load_mcore_state,
    mcore_to_hf,
    sample_tokens,
)


def _report(report: Any, what: str) -> None:
    print(f"{what}: {report}")
    assert report.max_abs <= DEFAULT_TOLERANCE, report
    assert report.argmax_agreement == 1.0, report


@pytest.mark.parametrize("seq", [16, 48])
def test_logit_parity_tp1(glm5_hf: Path, bridge: Any, mcore_tp1: Path, seq: int) -> None:
    """16 tokens: the indexer keeps every key (dense MLA); 48: each late query keeps 16 of up to 48."""
    tokens = sample_tokens(int(bridge.get("vocab_size")), seq=seq)
    report = check_parity(glm5_hf, bridge, load_mcore_state(mcore_tp1, bridge), input_ids=tokens)
    _report(report, f"TP1 seq {seq}")
    assert report.positions == 2 * seq


@pytest.mark.slow
def test_logit_parity_tp2_with_two_gloo_processes(glm5_hf: Path, bridge: Any, mcore_tp2: Path) -> None:
    tokens = sample_tokens(int(bridge.get("vocab_size")), seq=48)
    report = check_parity_tp(glm5_hf, mcore_tp2, bridge, 2, input_ids=tokens)
    _report(report, "TP2")
    assert report.positions == 96


@pytest.mark.slow
def test_logit_parity_ep2_with_two_gloo_processes(glm5_hf: Path, bridge: Any, mcore_ep2: Path, tmp_path: Path,
                                                  run_ranks: Any) -> None:
    """Each rank runs its two experts from its own EP rank file; tokens are all-gathered between them."""
    tokens = sample_tokens(int(bridge.get("vocab_size")), seq=48)
    report = compare_logits(hf_logits(glm5_hf, tokens), run_ranks(1, 2, glm5_hf, mcore_ep2, tokens, tmp_path))
    _report(report, "EP2")
    assert report.positions == 96


@pytest.mark.slow
def test_megatron_training_steps_lower_the_loss_and_leave_the_indexer_alone(glm5_hf: Path, mcore_tp1: Path,
                                                                            tmp_path: Path, run_ranks: Any) -> None:
    """Four Adam steps of the LM loss in megatron (train mode, DSA): the loss falls; MLA, experts and router get
    gradients, the indexer none (DSAttention detaches its inputs; its KL loss is off, as transformers trains it)."""
    tokens = sample_tokens(256, seq=48)
    result = run_ranks(1, 1, glm5_hf, mcore_tp1, tokens, tmp_path, "train")
    losses, grads = result["losses"], result["grads"]
    assert losses[-1] < losses[0], losses
    s = "decoder.layers.1.self_attention."
    assert grads[s + "linear_kv_up_proj.weight"] and grads[s + "q_layernorm.weight"]
    assert grads["decoder.layers.1.mlp.experts.local_experts.0.linear_fc1.weight"]
    assert not any(v for k, v in grads.items() if ".indexer." in k)


def test_round_trip_is_bit_exact_from_tp2_and_ep2(glm5_hf: Path, bridge: Any, mcore_tp2: Path, mcore_ep2: Path,
                                                  tmp_path: Path) -> None:
    original = load_file(glm5_hf / "model.safetensors")
    assert any(".indexer.k_norm.bias" in k for k in original) and any("e_score_correction_bias" in k for k in original)
    for name, mcore in (("tp2", mcore_tp2), ("ep2", mcore_ep2)):
        mcore_to_hf(mcore, tmp_path / name, bridge)
        back = load_file(tmp_path / name / "model.safetensors")
        assert back.keys() == original.keys(), name
        assert all(torch.equal(back[k], original[k]) for k in original), name


def test_indexer_is_replicated_and_mla_split_over_tp(bridge: Any, mcore_tp2: Path) -> None:
    from swiftcore_megatron import rank_file

    shards = [torch.load(rank_file(mcore_tp2, r, 0, 1), weights_only=True)["model"] for r in range(2)]
    s = "decoder.layers.1.self_attention."
    for name in ("linear_wq_b.weight", "linear_wk.weight", "k_norm.weight", "k_norm.bias",
                 "linear_weights_proj.weight"):
        key = s + "core_attention.indexer." + name
        assert torch.equal(shards[0][key], shards[1][key]), key
    assert shards[0][s + "core_attention.indexer.linear_wq_b.weight"].shape == (2 * 32, 64)
    assert [x[s + "linear_q_up_proj.weight"].shape[0] for x in shards] == [2 * 48, 2 * 48]  # 2 of 4 heads each


def test_negative_control_dense_attention_fails_parity_on_long_inputs(glm5_hf: Path, bridge: Any,
                                                                      mcore_tp1: Path) -> None:
    """The same weights with the indexer keeping every key (plain MLA): right at 16 tokens, wrong at 48."""
    class DenseBridge(type(bridge)):  # type: ignore[misc]
        def transformer_config(self, **kwargs: Any) -> Any:
            config = super().transformer_config(**kwargs)
            config.dsa_indexer_topk = 10**6
            return config

    dense, state = DenseBridge(bridge.hf_config), load_mcore_state(mcore_tp1, bridge)
    assert check_parity(glm5_hf, dense, state, input_ids=sample_tokens(256, seq=16)).ok
    report = check_parity(glm5_hf, dense, state, input_ids=sample_tokens(256, seq=48))
    assert not report.ok and report.max_abs > 1e-3, report


def test_negative_control_megatrons_indexer_rope_layout_fails_parity(glm5_hf: Path, bridge: Any,
                                                                     mcore_tp1: Path) -> None:
    """megatron's DSAIndexer rotates the *last* qk_rope_head_dim channels; GLM-5 the first: wrong keys kept."""
    from megatron.core.transformer.experimental_attention_variant.dsa import DSAIndexer
    from swiftcore_bridge_glm5 import indexer

    class RopeLast(indexer.GlmIndexer):
        _apply_rope = DSAIndexer._apply_rope

    class RopeLastBridge(type(bridge)):  # type: ignore[misc]
        def layer_spec(self, config: Any) -> Any:
            spec = super().layer_spec(config)
            for layer in spec.layer_specs:
                layer.submodules.self_attention.submodules.core_attention.submodules.indexer.module = RopeLast
            return spec

    report = check_parity(glm5_hf, RopeLastBridge(bridge.hf_config), load_mcore_state(mcore_tp1, bridge),
                          input_ids=sample_tokens(256, seq=48))
    assert not report.ok and report.max_abs > 1e-3, report


def test_mtp_layer_tensors_are_carried_through(glm5_hf: Path, bridge: Any, tmp_path: Path) -> None:
    """A release checkpoint's MTP layer (``model.layers.{num_hidden_layers}.*``, which transformers drops) survives
    HF -> mcore -> HF unchanged; it is not converted (no HF MTP head exists to check Megatron MTP layers against)."""
    import shutil

    hf = tmp_path / "hf"
    shutil.copytree(glm5_hf, hf)
    tensors = load_file(hf / "model.safetensors")
    mtp = {"model.layers.3.eh_proj.weight": torch.randn(128, 256), "model.layers.3.enorm.weight": torch.ones(128)}
    save_file({**tensors, **mtp}, hf / "model.safetensors", metadata={"format": "pt"})
    assert bridge.is_passthrough("model.layers.3.eh_proj.weight") and not bridge.is_passthrough("model.layers.2.a")
    hf_to_mcore(hf, tmp_path / "mcore", bridge, tp=1, ep=1)
    mcore_to_hf(tmp_path / "mcore", tmp_path / "back", bridge)
    back = {}
    for f in (tmp_path / "back").rglob("*.safetensors"):
        back.update(load_file(f))
    assert all(torch.equal(back[k], v) for k, v in mtp.items())


def test_config_the_bridge_cannot_reproduce_is_refused(bridge: Any) -> None:
    cls, config = type(bridge), bridge.hf_config
    with pytest.raises(BridgeError, match=r"indexer_types marks layers \[2\] 'shared'"):
        cls({**config, "indexer_types": ["full", "full", "shared"]}).transformer_config()
    with pytest.raises(BridgeError, match="mlp_layer_types"):
        cls({**config, "mlp_layer_types": ["dense", "sparse", "dense"]}).transformer_config()
    with pytest.raises(BridgeError, match="rope_type='yarn'"):
        cls({**config, "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e6}}).transformer_config()
    with pytest.raises(ParallelismError):
        bridge.validate_parallelism(3, 1)
    with pytest.raises(ParallelismError, match="4 experts"):
        bridge.validate_parallelism(1, 3)


def test_transformer_config_uses_megatrons_dsa_variant(bridge: Any) -> None:
    config = bridge.transformer_config(tp=1, ep=1)
    assert config.experimental_attention_variant == "dsa" and config.multi_latent_attention
    assert (config.dsa_indexer_n_heads, config.dsa_indexer_head_dim, config.dsa_indexer_topk) == (2, 32, 16)
    assert config.moe_router_score_function == "sigmoid" and config.moe_router_topk_scaling_factor == 2.5
    assert config.moe_layer_freq == [0, 1, 1] and config.moe_shared_expert_intermediate_size == 32
