"""MiMo-V2's first MTP layer as a megatron-core MTP layer: its logits against the layer rebuilt from transformers'
modules, at TP 1, TP 2 and EP 2 (gloo processes), float32.

transformers has no MiMo-V2 MTP head, so the reference is built from transformers' own pieces with the definition
megatron trains with (``swiftcore_megatron.mtp``): the main model's final-normed hidden state ``h_t`` and the next
token's embedding go through ``enorm`` / ``hnorm`` and ``eh_proj``, then through the MTP layer run as a one-layer
``MiMoV2FlashForCausalLM`` (a sliding-window layer with sinks and a dense MLP) whose final norm is the MTP layer's
``final_layernorm`` and whose embedding and head are the main model's. Negative controls show it tells the
plausible mistakes apart.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file
from swiftcore_megatron import (
    DEFAULT_TOLERANCE,
    compare_logits,
    hf_logits,
    hf_to_mcore,
    load_one_layer,
    mcore_mtp_logits,
    mcore_to_hf,
    mtp_reference_logits,
    one_layer_state,
    rank_file,
    sample_tokens,
)

SEQ = 24  # three sliding windows
MTP = "model.mtp.layers.0."


def mtp_reference(hf_dir: Path, tokens: torch.Tensor, *, concat: str = "eh", window: bool = True) -> torch.Tensor:
    """The MTP layer's float32 logits from transformers' modules (see the module docstring); ``concat="he"`` swaps
    the concatenation and ``window=False`` runs the layer as a full-attention one (the negative controls)."""
    return mtp_reference_logits(hf_dir, tokens, functools.partial(_one_layer, window=window), prefix=MTP, concat=concat)


def _one_layer(config: dict[str, Any], tensors: dict[str, torch.Tensor], prefix: str, *, window: bool) -> Any:
    """The MTP layer as a one-layer ``MiMoV2FlashForCausalLM`` (sliding-window with sinks, or full attention without
    them, and a dense MLP), whose final norm is the MTP layer's ``final_layernorm``."""
    from transformers import MiMoV2FlashForCausalLM

    kind = "sliding_attention" if window else "full_attention"
    one = {k: v for k, v in config.items() if k not in ("architectures", "transformers_version")}
    one.update(num_hidden_layers=1, layer_types=[kind], mlp_layer_types=["dense"])
    renames = {"pre_mlp_layernorm": "post_attention_layernorm"}
    state = one_layer_state(tensors, prefix, final_norm="final_layernorm", renames=renames)
    if not window:
        state = {k: v for k, v in state.items() if "attention_sink_bias" not in k}
        state["model.layers.0.self_attn.k_proj.weight"] = state["model.layers.0.self_attn.k_proj.weight"][: 32 * 2]
        state["model.layers.0.self_attn.v_proj.weight"] = state["model.layers.0.self_attn.v_proj.weight"][: 16 * 2]
    return load_one_layer(MiMoV2FlashForCausalLM, one, state)


def _tokens() -> torch.Tensor:
    return sample_tokens(256, seq=SEQ)


def _worker(rank: int, tp: int, ep: int, port: int, mcore_dir: str, bridge: Any, tokens: Any, out: str) -> None:
    """One rank: loads its own rank file, runs the model, rank 0 saves the main and MTP logits."""
    from swiftcore_megatron import init_model_parallel, load_into_model, mtp_logits

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    init_model_parallel(tp, ep, rank=rank, world_size=tp * ep)
    state = torch.load(rank_file(Path(mcore_dir), rank % tp, rank // tp, ep), map_location="cpu", weights_only=True)
    model = bridge.build_model(tp=tp, ep=ep, params_dtype=torch.float32)
    load_into_model(model, state["model"])
    main, depths = mtp_logits(model, tokens)
    if rank == 0:
        torch.save({"main": main, "mtp": depths}, out)
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


def _run(mcore: Path, bridge: Any, tp: int, ep: int) -> dict[str, Any]:
    import torch.multiprocessing as mp
    from swiftcore_megatron import free_port

    if tp * ep == 1:
        main, depths = mcore_mtp_logits(bridge, mcore, _tokens())
        return {"main": main, "mtp": depths}
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "logits.pt")
        mp.spawn(_worker, args=(tp, ep, free_port(), str(mcore), bridge, _tokens(), out), nprocs=tp * ep, join=True)
        return torch.load(out)


@pytest.fixture(scope="module")
def converted(mimo_mtp: Path, mtp_bridge: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """:func:`mimo_mtp` at TP 1, TP 2 and EP 2."""
    root = tmp_path_factory.mktemp("mimo_mtp_mcore")
    layouts = {"tp1": (1, 1), "tp2": (2, 1), "ep2": (1, 2)}
    for name, (tp, ep) in layouts.items():
        hf_to_mcore(mimo_mtp, root / name, mtp_bridge, tp=tp, ep=ep)
    return {name: root / name for name in layouts}


@pytest.fixture(scope="module")
def tp1(converted: dict[str, Path], mtp_bridge: Any) -> dict[str, Any]:
    return _run(converted["tp1"], mtp_bridge, 1, 1)


def _ok(report: Any, what: str) -> None:
    print(f"{what}: {report}")
    assert report.max_abs <= DEFAULT_TOLERANCE and report.argmax_agreement == 1.0, report


def test_mtp_logits_equal_the_reference_at_tp1(mimo_mtp: Path, tp1: dict[str, Any]) -> None:
    _ok(compare_logits(hf_logits(mimo_mtp, _tokens()), tp1["main"]), "main TP1")
    _ok(compare_logits(mtp_reference(mimo_mtp, _tokens()), tp1["mtp"][0]), "MTP TP1")


@pytest.mark.parametrize("control", ["concat swapped", "full attention (no window, no sinks)"])
def test_negative_controls_fail_against_megatron(mimo_mtp: Path, tp1: dict[str, Any], control: str) -> None:
    kwargs = {"concat swapped": {"concat": "he"}, "full attention (no window, no sinks)": {"window": False}}[control]
    report = compare_logits(mtp_reference(mimo_mtp, _tokens(), **kwargs), tp1["mtp"][0])
    print(f"{control}: {report}")
    assert report.max_abs > 1e-3, report


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["tp2", "ep2"])
def test_mtp_logits_with_two_gloo_processes(mimo_mtp: Path, mtp_bridge: Any, converted: dict, layout: str) -> None:
    tp, ep = (2, 1) if layout == "tp2" else (1, 2)
    result = _run(converted[layout], mtp_bridge, tp, ep)
    _ok(compare_logits(hf_logits(mimo_mtp, _tokens()), result["main"]), f"main {layout}")
    _ok(compare_logits(mtp_reference(mimo_mtp, _tokens()), result["mtp"][0]), f"MTP {layout}")


def test_round_trip_is_bit_exact_and_only_other_mtp_layers_are_carried(
    mimo_mtp: Path, mtp_bridge: Any, converted: dict, tmp_path: Path
) -> None:
    hf = tmp_path / "hf"
    shutil.copytree(mimo_mtp, hf)
    tensors = load_file(hf / "model.safetensors")
    second = {"model.mtp.layers.1.enorm.weight": torch.randn(64)}  # a later MTP layer: carried, not built
    save_file({**tensors, **second}, hf / "model.safetensors", metadata={"format": "pt"})
    assert not mtp_bridge.is_passthrough(MTP + "eh_proj.weight")
    assert mtp_bridge.is_passthrough("model.mtp.layers.1.enorm.weight")
    hf_to_mcore(hf, tmp_path / "mcore", mtp_bridge, tp=2, ep=2)
    mcore_to_hf(tmp_path / "mcore", tmp_path / "back", mtp_bridge)
    back: dict[str, torch.Tensor] = {}
    for f in (tmp_path / "back").rglob("*.safetensors"):
        back.update(load_file(f))
    original = {**tensors, **second}
    assert back.keys() == original.keys()
    assert all(torch.equal(back[k], original[k]) for k in original)


def test_without_the_config_field_every_mtp_tensor_is_carried(bridge: Any, mtp_bridge: Any) -> None:
    assert bridge.mtp_layers == 0 and mtp_bridge.mtp_layers == 1
    assert bridge.is_passthrough(MTP + "eh_proj.weight")
    assert not any(r.mcore.startswith("mtp.") for r in bridge.rules())
    assert {r.hf[0] for r in mtp_bridge.rules() if r.mcore.startswith("mtp.")} >= {
        MTP + "pre_mlp_layernorm.weight",
        MTP + "self_attn.attention_sink_bias",
        MTP + "final_layernorm.weight",
    }
