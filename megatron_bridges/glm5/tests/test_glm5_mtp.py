"""GLM-5's MTP layer as megatron-core MTP layers: its logits against the layer rebuilt from transformers' modules.

transformers has no GLM-5 MTP head, so the reference is built here from transformers' own pieces, following the
definition megatron trains with (``swiftcore_megatron.mtp``): the main model's final-normed hidden state
``h_t`` and the next token's embedding go through ``enorm`` / ``hnorm`` and ``eh_proj``, then through the MTP layer
run as a one-layer ``GlmMoeDsaForCausalLM`` whose layer 0 holds the MTP layer's tensors, whose final norm is
``shared_head.norm`` and whose embedding and head are the main model's. Negative controls show the reference
tells the plausible mistakes apart.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file
from swiftcore_megatron import (
    DEFAULT_TOLERANCE,
    BridgeError,
    CheckpointError,
    ParallelismError,
    compare_logits,
    hf_logits,
    hf_to_mcore,
    load_mcore_state,
    load_one_layer,
    mcore_mtp_logits,
    mcore_to_hf,
    mtp_reference_logits,
    one_layer_state,
    sample_tokens,
)


def mtp_reference(
    hf_dir: Path, tokens: torch.Tensor, *, concat: str = "eh", pre_norm: bool = False, mask_first: bool = False
) -> torch.Tensor:
    """The MTP layer's float32 logits from transformers' modules (see the module docstring).

    The keywords make the negative controls: ``concat="he"`` swaps the concatenation, ``pre_norm`` feeds the hidden
    state before the model's final norm, ``mask_first`` zeroes position 0's embedding (vLLM's proposer does).
    """
    return mtp_reference_logits(hf_dir, tokens, _one_layer, concat=concat, pre_norm=pre_norm, mask_first=mask_first)


def _one_layer(config: dict[str, Any], tensors: dict[str, torch.Tensor], prefix: str) -> Any:
    """The MTP layer as a one-layer ``GlmMoeDsaForCausalLM`` (an MoE layer with its own indexer), whose final norm is
    ``shared_head.norm``."""
    from transformers import GlmMoeDsaForCausalLM

    one = {
        **config,
        "num_hidden_layers": 1,
        "first_k_dense_replace": 0,
        "mlp_layer_types": ["sparse"],
        "indexer_types": ["full"],
        "layer_types": config["layer_types"][-1:],
    }
    state = one_layer_state(tensors, prefix, final_norm="shared_head.norm", drop=("shared_head.", "embed_tokens."))
    layer = load_one_layer(GlmMoeDsaForCausalLM, one, state)
    assert layer.model.layers[0].mlp.experts.gate_up_proj.shape[0] == config["n_routed_experts"]
    return layer


def _ok(report: Any, what: str) -> None:
    print(f"{what}: {report}")
    assert report.max_abs <= DEFAULT_TOLERANCE and report.argmax_agreement == 1.0, report


@pytest.fixture(scope="module")
def tp1_logits(glm5_mtp_hf: Path, mtp_bridge: Any, mtp_tp1: Path) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """TP-1 megatron logits (main, MTP) at 16 and 48 tokens."""
    logits = {}
    for seq in (16, 48):
        main, (depth,) = mcore_mtp_logits(mtp_bridge, mtp_tp1, sample_tokens(256, seq=seq))
        logits[seq] = main, depth
    return logits


@pytest.mark.parametrize("seq", [16, 48])
def test_mtp_logits_equal_the_reference_at_tp1(glm5_mtp_hf: Path, tp1_logits: dict, seq: int) -> None:
    """16 tokens: the indexers keep every key; 48 (above index_topk 16): the MTP layer's own indexer selects."""
    tokens = sample_tokens(256, seq=seq)
    main, depth = tp1_logits[seq]
    _ok(compare_logits(hf_logits(glm5_mtp_hf, tokens), main), f"main TP1 seq {seq}")
    _ok(compare_logits(mtp_reference(glm5_mtp_hf, tokens), depth), f"MTP TP1 seq {seq}")


@pytest.mark.parametrize("control", ["concat swapped", "hidden state before the final norm", "position 0 masked"])
def test_negative_controls_fail_against_megatron(glm5_mtp_hf: Path, tp1_logits: dict, control: str) -> None:
    """Each plausible mistake in the MTP definition is far from megatron's logits: the reference is discriminative."""
    kwargs = {
        "concat swapped": {"concat": "he"},
        "hidden state before the final norm": {"pre_norm": True},
        "position 0 masked": {"mask_first": True},
    }[control]
    report = compare_logits(mtp_reference(glm5_mtp_hf, sample_tokens(256, seq=48), **kwargs), tp1_logits[48][1])
    print(f"{control}: {report}")
    assert report.max_abs > 1e-3, report


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["tp2", "ep2"])
def test_mtp_logits_with_two_gloo_processes(
    glm5_mtp_hf: Path, mtp_tp2: Path, mtp_ep2: Path, layout: str, tmp_path: Path, run_ranks: Any
) -> None:
    """TP 2 (MLA, eh_proj and the vocabulary split) and EP 2 (two experts per rank, the MTP layer's included)."""
    tokens = sample_tokens(256, seq=48)
    tp, ep, mcore = (2, 1, mtp_tp2) if layout == "tp2" else (1, 2, mtp_ep2)
    result = run_ranks(tp, ep, glm5_mtp_hf, mcore, tokens, tmp_path, "mtp")
    _ok(compare_logits(hf_logits(glm5_mtp_hf, tokens), result["main"]), f"main {layout}")
    _ok(compare_logits(mtp_reference(glm5_mtp_hf, tokens), result["mtp"][0]), f"MTP {layout}")


def test_round_trip_is_bit_exact_from_tp2_and_ep2(
    glm5_mtp_hf: Path, mtp_bridge: Any, mtp_tp2: Path, mtp_ep2: Path, tmp_path: Path
) -> None:
    """Every tensor comes back, the MTP layer's and its embedding / head copies included; nothing is carried."""
    original = load_file(glm5_mtp_hf / "model.safetensors")
    assert "model.layers.3.eh_proj.weight" in original and "model.layers.3.mlp.experts.0.up_proj.weight" in original
    assert not any(mtp_bridge.is_passthrough(k) for k in original)
    for name, mcore in (("tp2", mtp_tp2), ("ep2", mtp_ep2)):
        mcore_to_hf(mcore, tmp_path / name, mtp_bridge)
        back = load_file(tmp_path / name / "model.safetensors")
        assert back.keys() == original.keys(), name
        assert all(torch.equal(back[k], original[k]) for k in original), name


def test_mtp_shards_over_tp(mtp_tp2: Path) -> None:
    from swiftcore_megatron import rank_file

    shards = [torch.load(rank_file(mtp_tp2, r, 0, 1), weights_only=True)["model"] for r in range(2)]
    m = "mtp.layers.0."
    assert [s[m + "eh_proj.weight"].shape for s in shards] == [(64, 256), (64, 256)]  # column-parallel
    for name in (
        "enorm.weight",
        "hnorm.weight",
        "final_layernorm.weight",
        "transformer_layer.self_attention.core_attention.indexer.linear_wk.weight",
    ):
        assert torch.equal(shards[0][m + name], shards[1][m + name]), name
    assert not torch.equal(shards[0][m + "eh_proj.weight"], shards[1][m + "eh_proj.weight"])


def test_differing_embedding_copy_is_refused(glm5_mtp_hf: Path, mtp_bridge: Any, tmp_path: Path) -> None:
    """megatron shares one embedding: a checkpoint whose MTP copy differs would lose it, so it is refused."""
    hf = tmp_path / "hf"
    shutil.copytree(glm5_mtp_hf, hf)
    tensors = load_file(hf / "model.safetensors")
    tensors["model.layers.3.embed_tokens.weight"] = tensors["model.layers.3.embed_tokens.weight"] + 1
    save_file(tensors, hf / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(Exception, match="equal copies"):
        hf_to_mcore(hf, tmp_path / "mcore", mtp_bridge)
    assert not (tmp_path / "mcore").exists()


def test_checkpoint_saved_without_its_mtp_layer_gets_told_what_to_do(
    glm5_mtp_hf: Path, mtp_bridge: Any, tmp_path: Path
) -> None:
    """transformers drops the MTP layer on load: a model it saved says num_nextn_predict_layers=1 but has none."""
    hf = tmp_path / "hf"
    shutil.copytree(glm5_mtp_hf, hf)
    tensors = load_file(hf / "model.safetensors")
    save_file(
        {k: v for k, v in tensors.items() if not k.startswith("model.layers.3.")},
        hf / "model.safetensors",
        metadata={"format": "pt"},
    )
    with pytest.raises(CheckpointError, match="set num_nextn_predict_layers to 0"):
        hf_to_mcore(hf, tmp_path / "mcore", mtp_bridge)


def test_unsupported_mtp_configs_are_refused(mtp_bridge: Any) -> None:
    cls, config = type(mtp_bridge), mtp_bridge.hf_config
    with pytest.raises(BridgeError, match="num_nextn_predict_layers=2"):
        cls({**config, "num_nextn_predict_layers": 2}).transformer_config()
    odd = {**config, "hidden_size": 129}  # TP 2 divides every other width of the tiny model
    cls({**odd, "num_nextn_predict_layers": 0}).validate_parallelism(2, 1)
    with pytest.raises(ParallelismError, match="hidden_size=129"):
        cls(odd).validate_parallelism(2, 1)


def test_config_without_mtp_keeps_the_layers_carried(bridge: Any, mtp_bridge: Any) -> None:
    """Without num_nextn_predict_layers the bridge builds no MTP block and maps no MTP tensor (as before)."""
    assert bridge.mtp_layers == 0 and mtp_bridge.mtp_layers == 1
    assert not any(r.mcore.startswith("mtp.") for r in bridge.rules())
    assert bridge.is_passthrough("model.layers.3.eh_proj.weight")
    assert not mtp_bridge.is_passthrough("model.layers.3.eh_proj.weight")
    assert mtp_bridge.is_passthrough("model.layers.4.eh_proj.weight")
    assert mtp_bridge.transformer_config().mtp_num_layers == 1 and bridge.transformer_config().mtp_num_layers is None


def test_megatron_training_adds_the_masked_mtp_loss_to_the_gradients(mtp_bridge: Any, mtp_tp1: Path) -> None:
    """`swiftcore train --engine megatron`'s loss on an MTP model: the main loss is what it reports, and the gradients
    are those of main + 0.1 x the MTP layer's next-next-token loss, both over the label tokens only (prompt and padding
    excluded), both divided by the step's label-token count; checked against the labels-free MTP logits."""
    engine = pytest.importorskip("swiftcore_train_megatron.engine")
    import torch.nn.functional as F
    from swiftcore_megatron import init_model_parallel, load_into_model

    init_model_parallel(1, 1)
    model = engine.build_model(mtp_bridge, tp=1, ep=1)
    load_into_model(model, {k: v.float() for k, v in load_mcore_state(mtp_tp1, mtp_bridge).items()})
    model.train()
    ids = sample_tokens(256, batch=1, seq=20, seed=3)[0].tolist()
    samples = [
        {"input_ids": ids, "labels": [-100] * 8 + ids[8:]},  # a prompt of 8 tokens carries no loss
        {"input_ids": ids[:14], "labels": [-100] * 5 + ids[5:14]},
    ]  # shorter: right-padded in the batch
    tokens = engine.label_tokens(samples)
    engine.scale_mtp_loss(tokens)
    loss = engine.micro_batch_loss(model, samples, pad_token_id=0)
    (loss / tokens).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)

    # The reference: the same model without labels, its main and MTP logits, the losses written out.
    input_ids = torch.tensor([ids, ids[:14] + [0] * 6])
    hf_labels = torch.tensor([samples[0]["labels"], samples[1]["labels"] + [-100] * 6])
    labels = torch.full_like(hf_labels, -100)
    labels[:, :-1] = hf_labels[:, 1:]  # position t predicts token t+1
    positions = torch.arange(20).unsqueeze(0).expand(2, 20)
    from swiftcore_megatron import eager_on_cpu

    with eager_on_cpu():
        main = model(input_ids=input_ids, position_ids=positions, attention_mask=None)
    (mtp,) = model.mtp_logits

    def summed(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=-100, reduction="sum"
        )

    main_loss = summed(main, labels)
    mtp_loss = summed(mtp[:, :-1], labels[:, 1:])  # position t of the MTP layer predicts token t+2
    assert abs(float(main_loss) - float(loss)) < 1e-4 * float(loss)
    ((main_loss + mtp_bridge.transformer_config().mtp_loss_scaling_factor * mtp_loss) / tokens).backward()
    assert model.config.mtp_loss_scaling_factor == 0.1 and grads.keys() == {
        n for n, p in model.named_parameters() if p.grad is not None
    }
    assert any(n.startswith("mtp.") for n in grads) and grads["mtp.layers.0.eh_proj.weight"].abs().sum() > 0
    for name, param in model.named_parameters():
        if name in grads:
            torch.testing.assert_close(grads[name], param.grad, rtol=1e-4, atol=1e-6, msg=name)
