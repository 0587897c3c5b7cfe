"""Float32 logits of the real megatron-core GPTModel (this bridge's spec) vs transformers' OLMoE, on CPU:
TP 1, TP 2 (two gloo processes) and EP 2 (two gloo processes, each with its own experts)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file
from swiftcore_megatron import (
    DEFAULT_TOLERANCE,
    BridgeError,
    ParallelismError,
    check_parity,
    check_parity_tp,
    compare_logits,
    free_port,
    hf_logits,
    load_mcore_state,
    mcore_to_hf,
    sample_tokens,
)


def _report(report: Any, what: str) -> None:
    print(f"{what}: {report}")
    assert report.max_abs <= DEFAULT_TOLERANCE, report
    assert report.argmax_agreement == 1.0, report


@pytest.mark.parametrize("seq", [16, 48])
def test_logit_parity_tp1(olmoe_hf: Path, bridge: Any, mcore_tp1: Path, seq: int) -> None:
    tokens = sample_tokens(int(bridge.get("vocab_size")), seq=seq)
    report = check_parity(olmoe_hf, bridge, load_mcore_state(mcore_tp1, bridge), input_ids=tokens)
    _report(report, f"TP1 seq {seq}")
    assert report.positions == 2 * seq


@pytest.mark.slow
def test_logit_parity_tp2_with_two_gloo_processes(olmoe_hf: Path, bridge: Any, mcore_tp2: Path) -> None:
    report = check_parity_tp(olmoe_hf, mcore_tp2, bridge, 2)
    _report(report, "TP2")
    assert report.positions == 32


def _run_ranks(mode: str, tp: int, ep: int, hf: Path, mcore: Path, inputs: dict[str, Any], work: Path) -> Path:
    """Run ``tests/mcore_rank.py`` as ``tp * ep`` local gloo processes; returns the output path stem."""
    torch.save(inputs, work / "inputs.pt")
    script, port, out = str(Path(__file__).with_name("mcore_rank.py")), str(free_port()), work / f"{mode}.pt"
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")}
    env["OMP_NUM_THREADS"] = "1"
    args = [mode, "{rank}", str(tp), str(ep), port, str(hf), str(mcore), str(work / "inputs.pt"), str(out)]
    ranks = [subprocess.Popen([sys.executable, script, *(a.format(rank=r) for a in args)], env=env,
                              stderr=subprocess.PIPE, text=True) for r in range(tp * ep)]
    errors = [p.communicate(timeout=300)[1] for p in ranks]
    assert all(p.returncode == 0 for p in ranks), "\n".join(e[-2000:] for e in errors)
    return out


@pytest.mark.slow
def test_logit_parity_ep2_with_two_gloo_processes(olmoe_hf: Path, bridge: Any, mcore_ep2: Path,
                                                  tmp_path: Path) -> None:
    """Each rank runs its two experts from its own EP rank file; tokens are all-gathered between them."""
    tokens = sample_tokens(int(bridge.get("vocab_size")))
    out = _run_ranks("logits", 1, 2, olmoe_hf, mcore_ep2, {"tokens": tokens}, tmp_path)
    report = compare_logits(hf_logits(olmoe_hf, tokens), torch.load(out))
    _report(report, "EP2")
    assert report.positions == 32


@pytest.mark.slow
def test_qk_norm_gradients_at_tp2_match_transformers(olmoe_hf: Path, bridge: Any, mcore_tp2: Path,
                                                     tmp_path: Path) -> None:
    """The TP all-reduce inside the whole-width norm carries gradients: each rank's q/k norm weight gradient is
    its slice of transformers' (same loss, ``sum(logits * w)``)."""
    from transformers import OlmoeForCausalLM

    tokens = sample_tokens(int(bridge.get("vocab_size")), seq=8)
    weights = torch.randn(*tokens.shape, int(bridge.get("vocab_size")), generator=torch.Generator().manual_seed(2))
    out = _run_ranks("grads", 2, 1, olmoe_hf, mcore_tp2, {"tokens": tokens, "weights": weights}, tmp_path)
    hf = OlmoeForCausalLM.from_pretrained(str(olmoe_hf), dtype=torch.float32)
    (hf(input_ids=tokens).logits * weights).sum().backward()
    shards = [torch.load(f"{out}.{rank}") for rank in range(2)]
    for layer in range(2):
        for hf_name, mcore_name in (("q_norm", "q_layernorm"), ("k_norm", "k_layernorm")):
            want = getattr(hf.model.layers[layer].self_attn, hf_name).weight.grad
            key = f"decoder.layers.{layer}.self_attention.{mcore_name}.weight"
            got = torch.cat([shard[key] for shard in shards])
            assert torch.allclose(got, want, rtol=1e-4, atol=1e-5), (key, (got - want).abs().max())


def test_round_trip_is_bit_exact_from_tp2_and_ep2(olmoe_hf: Path, bridge: Any, mcore_tp2: Path, mcore_ep2: Path,
                                                  tmp_path: Path) -> None:
    original = load_file(olmoe_hf / "model.safetensors")
    for name, mcore in (("tp2", mcore_tp2), ("ep2", mcore_ep2)):
        mcore_to_hf(mcore, tmp_path / name, bridge)
        back = load_file(tmp_path / name / "model.safetensors")
        assert back.keys() == original.keys(), name
        assert all(torch.equal(back[k], original[k]) for k in original), name


def test_q_and_k_norm_weights_are_split_with_their_heads(bridge: Any, mcore_tp2: Path) -> None:
    from swiftcore_megatron import rank_file

    shards = [torch.load(rank_file(mcore_tp2, r, 0, 1), weights_only=True)["model"] for r in range(2)]
    key = "decoder.layers.0.self_attention.{}_layernorm.weight"
    assert [s[key.format("q")].shape[0] for s in shards] == [64, 64]  # 4 heads x 32 over 2 ranks
    assert [s[key.format("k")].shape[0] for s in shards] == [32, 32]  # 2 kv heads x 32 over 2 ranks


def test_negative_control_per_head_qk_norm_fails_parity(olmoe_hf: Path, bridge: Any, mcore_tp1: Path) -> None:
    """megatron's own qk_layernorm semantics (one RMS per head) with the same weights: visibly wrong."""
    from swiftcore_bridge_olmoe.norm import OlmoeKNorm, OlmoeQNorm

    def per_head(self: Any, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight.reshape(x.shape[-2], x.shape[-1]) * normed).to(x.dtype)

    class PerHeadQ(OlmoeQNorm):
        forward = per_head

    class PerHeadK(OlmoeKNorm):
        forward = per_head

    class PerHeadBridge(type(bridge)):  # type: ignore[misc]
        def layer_spec(self, config: Any) -> Any:
            spec = super().layer_spec(config)
            for layer in spec.layer_specs:
                attention = layer.submodules.self_attention.submodules
                attention.q_layernorm, attention.k_layernorm = PerHeadQ, PerHeadK
            return spec

    report = check_parity(olmoe_hf, PerHeadBridge(bridge.hf_config), load_mcore_state(mcore_tp1, bridge))
    assert not report.ok and report.max_abs > 1e-2, report


def test_config_the_bridge_cannot_reproduce_is_refused(bridge: Any) -> None:
    with pytest.raises(BridgeError, match="clip_qkv=8.0"):
        type(bridge)({**bridge.hf_config, "clip_qkv": 8.0}).transformer_config()
    with pytest.raises(BridgeError, match="head_dim=64"):
        _ = type(bridge)({**bridge.hf_config, "head_dim": 64}).head_dim
    with pytest.raises(ParallelismError, match="num_key_value_heads=2"):
        bridge.validate_parallelism(4, 1)
    with pytest.raises(ParallelismError, match="4 experts"):
        bridge.validate_parallelism(1, 3)


def test_expert_width_is_intermediate_size(bridge: Any) -> None:
    config = bridge.transformer_config(tp=1, ep=1)
    assert config.moe_ffn_hidden_size == 32 and config.num_moe_experts == 4 and config.moe_router_topk == 2
    assert config.moe_router_pre_softmax  # norm_topk_prob False: softmax over all experts, then top-k
    assert config.qk_layernorm and config.moe_layer_freq == [1, 1]
