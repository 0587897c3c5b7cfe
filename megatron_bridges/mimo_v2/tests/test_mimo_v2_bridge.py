"""MiMo-V2-Flash bridge: float32 logit parity with transformers at TP1, TP2 and EP2 (gloo on CPU), round trips,
negative controls. Sequences are longer than the tiny model's 8-token sliding window."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file
from swiftcore_bridge_mimo_v2.bridge import GroupedQKV
from swiftcore_megatron import (
    DEFAULT_TOLERANCE,
    BridgeError,
    ParallelismError,
    check_parity,
    check_parity_tp,
    compare_logits,
    hf_to_mcore,
    load_mcore_state,
    mcore_to_hf,
    rank_file,
    sample_tokens,
)

SEQ = 24  # three sliding windows


@pytest.fixture(scope="module")
def state(bridge: Any, mcore_tp2: Path) -> dict[str, torch.Tensor]:
    """The TP-2 checkpoint merged back to one rank, as a TP-1 model loads it."""
    return load_mcore_state(mcore_tp2, bridge)


def _tokens(bridge: Any) -> torch.Tensor:
    return sample_tokens(int(bridge.get("vocab_size")), seq=SEQ)


def test_plugin_and_bridge_modules_import_no_torch_or_megatron() -> None:
    code = (
        "import sys, swiftcore_bridge_mimo_v2.plugin as p, swiftcore_bridge_mimo_v2.bridge; "
        "bad = [m for m in ('torch', 'transformers', 'megatron') if m in sys.modules]; "
        "assert not bad, bad; print(p.SWIFTCORE_API)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1.0"


def test_logit_parity_tp1(mimo_tiny: Path, bridge: Any, state: dict) -> None:
    report = check_parity(mimo_tiny, bridge, state, input_ids=_tokens(bridge))
    print("TP1", report)
    assert report.max_abs <= DEFAULT_TOLERANCE, report
    assert report.argmax_agreement == 1.0 and report.positions == 2 * SEQ, report


def test_logit_parity_tp2_with_two_gloo_processes(mimo_tiny: Path, bridge: Any, mcore_tp2: Path) -> None:
    report = check_parity_tp(mimo_tiny, mcore_tp2, bridge, 2, input_ids=_tokens(bridge))
    print("TP2", report)
    assert report.max_abs <= DEFAULT_TOLERANCE, report
    assert report.argmax_agreement == 1.0 and report.positions == 2 * SEQ, report


def _ep_worker(rank: int, port: int, hf_dir: str, mcore_dir: str, bridge: Any, input_ids: Any,
               result_file: str) -> None:
    """One expert-parallel rank: loads its own rank file (experts 2r, 2r+1) and runs the model."""
    from swiftcore_megatron import hf_logits, init_model_parallel, load_into_model, mcore_logits

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    init_model_parallel(1, 2, rank=rank, world_size=2)
    state = torch.load(rank_file(Path(mcore_dir), 0, rank, 2), map_location="cpu", weights_only=True)["model"]
    model = bridge.build_model(ep=2, params_dtype=torch.float32)
    load_into_model(model, state)
    ours = mcore_logits(model, input_ids)
    if rank == 0:
        report = compare_logits(hf_logits(hf_dir, input_ids), ours, DEFAULT_TOLERANCE)
        Path(result_file).write_text(json.dumps(report.__dict__), encoding="utf-8")
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


def test_logit_parity_ep2_with_two_gloo_processes(mimo_tiny: Path, bridge: Any, mcore_ep2: Path) -> None:
    import torch.multiprocessing as mp
    from swiftcore_megatron import free_port

    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "parity.json"
        mp.spawn(_ep_worker, args=(free_port(), str(mimo_tiny), str(mcore_ep2), bridge, _tokens(bridge), str(result)),
                 nprocs=2, join=True)
        report = json.loads(result.read_text())
    print("EP2", report)
    assert report["max_abs"] <= DEFAULT_TOLERANCE, report
    assert report["argmax_agreement"] == 1.0 and report["positions"] == 2 * SEQ, report


@pytest.mark.parametrize("layout", [{"tp": 2}, {"ep": 2}, {"tp": 2, "ep": 2}])
def test_round_trip_is_bit_exact(mimo_tiny: Path, bridge: Any, tmp_path: Path, layout: dict) -> None:
    hf_to_mcore(mimo_tiny, tmp_path / "mcore", bridge, **layout)
    mcore_to_hf(tmp_path / "mcore", tmp_path / "back", bridge)
    before, after = load_file(mimo_tiny / "model.safetensors"), load_file(tmp_path / "back" / "model.safetensors")
    assert sorted(before) == sorted(after)
    for key, tensor in before.items():
        assert after[key].dtype == tensor.dtype and torch.equal(after[key], tensor), key


def test_layers_have_their_own_kv_heads_window_and_sinks(bridge: Any) -> None:
    from swiftcore_megatron import init_model_parallel

    init_model_parallel(1, 1)
    model = bridge.build_model()
    kinds = []
    for layer in model.decoder.layers:
        attention = layer.self_attention
        kinds.append((attention.groups, attention.facts.sliding_window, hasattr(attention, "softmax_offset")))
    assert kinds == [(2, None, False), (4, 8, True), (4, 8, True), (2, None, False)]
    assert type(model.decoder.layers[0].mlp).__name__ == "MLP"
    assert type(model.decoder.layers[1].mlp).__name__ == "MoELayer"
    thetas = [layer.self_attention.facts.rope_theta for layer in model.decoder.layers]
    assert thetas == [5e6, 1e4, 1e4, 5e6]


class _PlainQKV(GroupedQKV):
    """The likely mistake: ``[q; k; v]`` concatenated instead of interleaved per query group."""

    def to_mcore(self, tensors):  # type: ignore[no-untyped-def]
        return torch.cat(list(tensors), dim=0)


def test_negative_control_plain_qkv_concat_fails_parity(mimo_tiny: Path, bridge: Any, state: dict) -> None:
    hf = load_file(mimo_tiny / "model.safetensors")
    wrong = dict(state)
    for rule in bridge.rules():
        if isinstance(rule.fuse, GroupedQKV):
            wrong[rule.mcore] = _PlainQKV(**dataclasses.asdict(rule.fuse)).to_mcore([hf[k] for k in rule.hf])
    report = check_parity(mimo_tiny, bridge, wrong, input_ids=_tokens(bridge))
    assert not report.ok and report.max_abs > 1e-2, report


@pytest.mark.parametrize("what", ["sinks", "expert_bias"])
def test_negative_control_dropped_sinks_or_expert_bias_fails_parity(mimo_tiny: Path, bridge: Any, state: dict,
                                                                     what: str) -> None:
    suffix = {"sinks": "softmax_offset", "expert_bias": "router.expert_bias"}[what]
    wrong = {k: torch.zeros_like(v) if k.endswith(suffix) else v for k, v in state.items()}
    assert any(k.endswith(suffix) for k in state)
    assert not check_parity(mimo_tiny, bridge, wrong, input_ids=_tokens(bridge)).ok


def test_negative_control_full_attention_window_fails_parity(mimo_tiny: Path, bridge: Any, state: dict) -> None:
    """Treating the sliding layers as full attention must show once the sequence outgrows the window."""

    class NoWindow(type(bridge)):  # type: ignore[misc]
        def layer_facts(self, i):  # type: ignore[no-untyped-def]
            return dataclasses.replace(super().layer_facts(i), sliding_window=None)

    report = check_parity(mimo_tiny, NoWindow(bridge.hf_config), state, input_ids=_tokens(bridge))
    assert not report.ok, report


def test_bad_layouts_and_configs_are_refused(bridge: Any) -> None:
    with pytest.raises(ParallelismError, match="--ep 3"):
        bridge.validate_parallelism(1, 3)
    with pytest.raises(ParallelismError, match="--tp 4"):
        bridge.validate_parallelism(4, 1)  # 2 kv heads on the full layers
    config = dict(bridge.hf_config)
    config["rope_parameters"] = {**config["rope_parameters"],
                                 "full_attention": {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0}}
    with pytest.raises(BridgeError, match="rope_type 'default'"):
        type(bridge)(config).transformer_config()


def test_release_mtp_tensors_are_carried_through(bridge: Any) -> None:
    assert bridge.is_passthrough("model.mtp.layers.0.enorm.weight")
    assert not bridge.is_passthrough("model.layers.0.self_attn.q_proj.weight")


def test_a_config_without_the_defaulted_fields_gets_transformers_defaults(bridge: Any) -> None:
    from transformers import MiMoV2FlashConfig

    config = {k: v for k, v in bridge.hf_config.items()
              if k not in ("layer_types", "mlp_layer_types", "rope_parameters")}
    config["num_hidden_layers"] = 12
    ours = type(bridge)(config)
    theirs = MiMoV2FlashConfig(**{k: v for k, v in config.items() if k not in ("architectures", "model_type")})
    assert ours.layer_types == theirs.layer_types
    assert [ours.is_moe_layer(i) for i in range(12)] == [kind == "sparse" for kind in theirs.mlp_layer_types]
    assert ours.rope("sliding_attention") == theirs.rope_parameters["sliding_attention"]


def test_backward_reaches_sinks_experts_and_router(bridge: Any, state: dict) -> None:
    from swiftcore_megatron import init_model_parallel, load_into_model

    init_model_parallel(1, 1)
    model = bridge.build_model()
    load_into_model(model, state)
    model.train()
    tokens = _tokens(bridge)
    positions = torch.arange(SEQ).unsqueeze(0).expand_as(tokens)
    loss = model(input_ids=tokens, position_ids=positions, attention_mask=None, labels=tokens.roll(-1, 1)).mean()
    loss.backward()
    assert torch.isfinite(loss)
    grads = {n: p.grad for n, p in model.named_parameters()}
    for name in ("decoder.layers.1.self_attention.softmax_offset",
                 "decoder.layers.0.self_attention.linear_qkv.weight",
                 "decoder.layers.1.mlp.router.weight",
                 "decoder.layers.2.mlp.experts.local_experts.0.linear_fc1.weight"):
        assert grads[name] is not None and grads[name].abs().sum() > 0, name
