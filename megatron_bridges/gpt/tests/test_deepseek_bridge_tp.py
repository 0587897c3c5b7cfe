"""Tensor parallelism of the DeepSeek-V3 (MLA + MoE) bridge: the shard layout megatron-core's local MLA
spec expects, and float32 logit parity at TP 2 with two gloo processes.

The bit-exact HF -> mcore -> HF round trips at TP 2 / TP 4 live in ``test_gpt_bridge_convert.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from swiftcore_megatron import DEFAULT_TOLERANCE, check_parity_tp, hf_to_mcore, rank_file


def _hf_tensors(hf_dir: Path) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for f in sorted(hf_dir.glob("*.safetensors")):
        out.update(load_file(f))
    return out


def _rank(mcore_dir: Path, tp_rank: int, ep_rank: int, ep: int) -> dict[str, torch.Tensor]:
    return torch.load(rank_file(mcore_dir, tp_rank, ep_rank, ep), weights_only=True)["model"]


def _rows(t: torch.Tensor, r: int, tp: int) -> torch.Tensor:
    """Rank ``r``'s contiguous block of rows."""
    n = t.shape[0] // tp
    return t[r * n:(r + 1) * n]


def _cols(t: torch.Tensor, r: int, tp: int) -> torch.Tensor:
    """Rank ``r``'s contiguous block of columns."""
    n = t.shape[1] // tp
    return t[:, r * n:(r + 1) * n]


def _gate_up(gate: torch.Tensor, up: torch.Tensor, r: int, tp: int) -> torch.Tensor:
    """``linear_fc1`` on rank ``r``: its slice of gate, then its slice of up."""
    return torch.cat([_rows(gate, r, tp), _rows(up, r, tp)])


def test_tp2_ep2_shards_have_the_mla_and_expert_layout(tiny, bridge_for, tmp_path: Path) -> None:
    """Each rank file's MLA and expert tensors, rebuilt from the HF tensors by head and expert index
    (not with the bridge's own rules), with the shapes megatron's column/row-parallel linears allocate."""
    hf = tiny("deepseek_v3")
    bridge = bridge_for(hf)
    tp, ep = 2, 2
    hf_to_mcore(hf, tmp_path / "mcore", bridge, tp=tp, ep=ep)
    w, c = _hf_tensors(hf), bridge.config
    heads, hidden = c["num_attention_heads"], c["hidden_size"]
    nope, rope, v_dim = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    q_lora, kv_lora, inter = c["q_lora_rank"], c["kv_lora_rank"], c["moe_intermediate_size"]
    local_heads, local_experts = heads // tp, c["n_routed_experts"] // ep
    a, s = "model.layers.1.self_attn.", "decoder.layers.1.self_attention."
    m, mm = "model.layers.1.mlp.", "decoder.layers.1.mlp."
    for t in range(tp):
        heads_r = slice(t * local_heads, (t + 1) * local_heads)
        for e in range(ep):
            rank = _rank(tmp_path / "mcore", t, e, ep)
            # Down-projections: column-parallel in the local spec (megatron gathers their outputs).
            assert rank[s + "linear_q_down_proj.weight"].shape == (q_lora // tp, hidden)
            assert torch.equal(rank[s + "linear_q_down_proj.weight"], _rows(w[a + "q_a_proj.weight"], t, tp))
            assert rank[s + "linear_kv_down_proj.weight"].shape == ((kv_lora + rope) // tp, hidden)
            assert torch.equal(rank[s + "linear_kv_down_proj.weight"],
                               _rows(w[a + "kv_a_proj_with_mqa.weight"], t, tp))
            # Up-projections: this rank's whole heads ([nope; rope] per q head, [k_nope; v] per kv head).
            q_up = w[a + "q_b_proj.weight"].view(heads, nope + rope, q_lora)[heads_r].reshape(-1, q_lora)
            assert rank[s + "linear_q_up_proj.weight"].shape == (local_heads * (nope + rope), q_lora)
            assert torch.equal(rank[s + "linear_q_up_proj.weight"], q_up)
            kv_up = w[a + "kv_b_proj.weight"].view(heads, nope + v_dim, kv_lora)[heads_r].reshape(-1, kv_lora)
            assert rank[s + "linear_kv_up_proj.weight"].shape == (local_heads * (nope + v_dim), kv_lora)
            assert torch.equal(rank[s + "linear_kv_up_proj.weight"], kv_up)
            # Output projection: row-parallel over this rank's heads' v channels.
            o = w[a + "o_proj.weight"].view(hidden, heads, v_dim)[:, heads_r].reshape(hidden, -1)
            assert rank[s + "linear_proj.weight"].shape == (hidden, local_heads * v_dim)
            assert torch.equal(rank[s + "linear_proj.weight"], o)
            # Latent norms, router weight and expert bias: whole on every rank.
            assert torch.equal(rank[s + "q_layernorm.weight"], w[a + "q_a_layernorm.weight"])
            assert torch.equal(rank[s + "kv_layernorm.weight"], w[a + "kv_a_layernorm.weight"])
            assert torch.equal(rank[mm + "router.weight"], w[m + "gate.weight"])
            assert torch.equal(rank[mm + "router.expert_bias"], w[m + "gate.e_score_correction_bias"])
            # Routed experts: placed by expert-parallel rank, each split by TP (expert TP = TP).
            placed = {k.split(".local_experts.")[1].split(".")[0] for k in rank if k.startswith(mm + "experts.")}
            assert placed == {str(j) for j in range(local_experts)}
            for j in range(local_experts):
                x, ex = f"{m}experts.{e * local_experts + j}.", f"{mm}experts.local_experts.{j}."
                fc1 = rank[ex + "linear_fc1.weight"]
                assert fc1.shape == (2 * inter // tp, hidden)
                assert torch.equal(fc1, _gate_up(w[x + "gate_proj.weight"], w[x + "up_proj.weight"], t, tp))
                assert torch.equal(rank[ex + "linear_fc2.weight"], _cols(w[x + "down_proj.weight"], t, tp))
            # Shared expert: an ordinary TP-split gated MLP, the same on both expert-parallel ranks.
            sh, msh = m + "shared_experts.", mm + "shared_experts."
            assert torch.equal(rank[msh + "linear_fc1.weight"],
                               _gate_up(w[sh + "gate_proj.weight"], w[sh + "up_proj.weight"], t, tp))
            assert torch.equal(rank[msh + "linear_fc2.weight"], _cols(w[sh + "down_proj.weight"], t, tp))
            # The dense first layer's MLP splits the same way.
            d = "model.layers.0.mlp."
            assert torch.equal(rank["decoder.layers.0.mlp.linear_fc1.weight"],
                               _gate_up(w[d + "gate_proj.weight"], w[d + "up_proj.weight"], t, tp))


@pytest.mark.slow
def test_deepseek_logit_parity_tp2_with_two_gloo_processes(tiny, bridge_for, tmp_path: Path) -> None:
    """The real megatron-core MLA + MoE GPTModel, split over two gloo ranks that each load their own
    rank file, against transformers (float32, max abs <= 1e-5, identical argmax)."""
    hf = tiny("deepseek_v3")
    bridge = bridge_for(hf)
    hf_to_mcore(hf, tmp_path / "mcore", bridge, tp=2)
    report = check_parity_tp(hf, tmp_path / "mcore", bridge, 2)
    assert report.max_abs <= DEFAULT_TOLERANCE, report
    assert report.argmax_agreement == 1.0, report
    assert report.ok and report.positions == 32
