"""Float32 logits of the real megatron-core GPTModel (this bridge's layer spec) vs transformers, on CPU.

transformers runs its default attention (SDPA); the megatron model's attention dispatches the same
way (see ``Gemma4Attention._core_attention``). 40 tokens cross the extras model's 4-token sliding
window and the KV-shared layers; every negative control must fail the same check.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from swiftcore_bridge_gemma4.mapping import QK
from swiftcore_megatron import (
    DEFAULT_TOLERANCE,
    QKV,
    Rule,
    check_parity,
    check_parity_tp,
    load_mcore_state,
    sample_tokens,
)


@pytest.fixture(scope="module")
def state(bridge, mcore_tp2: Path) -> dict[str, torch.Tensor]:  # type: ignore[no-untyped-def]
    """The tiny model's TP-2 checkpoint merged back to one rank, as a TP-1 model loads it."""
    return load_mcore_state(mcore_tp2, bridge)


@pytest.fixture(scope="module")
def extras_state(extras_bridge, extras_mcore_tp2: Path) -> dict[str, torch.Tensor]:  # type: ignore[no-untyped-def]
    return load_mcore_state(extras_mcore_tp2, extras_bridge)


def _assert_parity(report, positions: int) -> None:  # type: ignore[no-untyped-def]
    assert report.max_abs <= DEFAULT_TOLERANCE, report
    assert report.argmax_agreement == 1.0, report
    assert report.positions == positions, report


@pytest.mark.parametrize("seq", [16, 40])
def test_logit_parity_tp1(gemma4_tiny: Path, bridge, state, seq: int) -> None:  # type: ignore[no-untyped-def]
    tokens = sample_tokens(int(bridge.get("vocab_size")), seq=seq)
    _assert_parity(check_parity(gemma4_tiny, bridge, state, input_ids=tokens), 2 * seq)


@pytest.mark.parametrize("seq", [16, 40])
def test_extras_logit_parity_tp1(gemma4_extras: Path, extras_bridge, extras_state, seq: int) -> None:  # type: ignore[no-untyped-def]
    """KV sharing, k = v, per-layer head sizes, sliding window 4, double-wide MLP, MoE block, soft-cap, untied head."""
    tokens = sample_tokens(int(extras_bridge.get("vocab_size")), seq=seq, seed=1)
    _assert_parity(check_parity(gemma4_extras, extras_bridge, extras_state, input_ids=tokens), 2 * seq)


def test_media_placeholder_tokens_embed_as_pad(gemma4_tiny: Path, bridge, state) -> None:  # type: ignore[no-untyped-def]
    """HF's multimodal model embeds image/video/audio placeholders as pad when no media is given: so does ours."""
    tokens = sample_tokens(int(bridge.get("vocab_size")))
    placeholders = bridge.placeholder_token_ids()
    tokens[:, 3:3 + len(placeholders)] = torch.tensor(placeholders)
    _assert_parity(check_parity(gemma4_tiny, bridge, state, input_ids=tokens), 32)

    class NoRemap(type(bridge)):  # type: ignore[misc]
        def placeholder_token_ids(self):  # type: ignore[no-untyped-def]
            return ()

    assert not check_parity(gemma4_tiny, NoRemap(bridge.hf_config), state, input_ids=tokens).ok


def test_model_is_built_from_the_gemma4_spec(extras_bridge) -> None:  # type: ignore[no-untyped-def]
    from swiftcore_bridge_gemma4.attention import Gemma4Attention
    from swiftcore_bridge_gemma4.layer import Gemma4DecoderLayer
    from swiftcore_bridge_gemma4.model import Gemma4GPTModel
    from swiftcore_megatron import init_model_parallel

    init_model_parallel(1, 1)
    model = extras_bridge.build_model()
    assert type(model) is Gemma4GPTModel and model.final_logit_softcapping == 0.5
    for layer, facts in zip(model.decoder.layers, extras_bridge.facts, strict=True):
        assert type(layer) is Gemma4DecoderLayer and type(layer.self_attention) is Gemma4Attention
        assert layer.self_attention.facts is facts
        assert hasattr(layer.self_attention, "linear_q") == facts.kv_shared
    assert model.config.softmax_scale == 1.0


def test_megatron_loss_sees_capped_logits_and_trains(gemma4_extras: Path, extras_bridge, extras_state) -> None:  # type: ignore[no-untyped-def]
    """megatron's per-token loss is the cross-entropy of HF's (soft-capped) logits; gradients reach Gemma's parts."""
    from swiftcore_megatron import hf_logits, init_model_parallel, load_into_model

    tokens = sample_tokens(int(extras_bridge.get("vocab_size")), seq=12, seed=3)
    labels = torch.roll(tokens, -1, dims=1)
    init_model_parallel(1, 1)
    model = extras_bridge.build_model()
    load_into_model(model, extras_state)
    positions = torch.arange(tokens.shape[1]).expand_as(tokens)
    loss = model(input_ids=tokens, position_ids=positions, attention_mask=None, labels=labels)  # [batch, seq]
    reference = hf_logits(gemma4_extras, tokens)
    expected = torch.nn.functional.cross_entropy(reference.transpose(1, 2), labels, reduction="none")
    assert (loss.detach() - expected).abs().max() <= DEFAULT_TOLERANCE
    loss.mean().backward()
    grads = dict(model.named_parameters())
    for name in ("per_layer_embedding.embed_tokens.weight", "decoder.layers.0.moe.router.per_expert_scale",
                 "decoder.layers.1.self_attention.linear_qkv.weight", "decoder.layers.4.self_attention.linear_q.weight",
                 "decoder.layers.2.per_layer_projection.weight"):
        assert grads[name].grad is not None and grads[name].grad.abs().sum() > 0, name


def _hf_gradients_as_mcore(model_class, hf_dir: Path, bridge, tokens, labels, out: Path) -> dict[str, torch.Tensor]:  # type: ignore[no-untyped-def]
    """One backward of the transformers model (mean cross-entropy), its gradients in the mcore layout.

    The gradients are written as a checkpoint of the model's own shape and converted by the bridge: the rules that
    place weights (fused QKV, interleaving, splits) place gradients the same way, being linear.
    """
    import shutil

    from safetensors.torch import save_file
    from swiftcore_megatron import hf_to_mcore

    model = model_class.from_pretrained(hf_dir, dtype=torch.float32)
    logits = model(input_ids=tokens).logits.float()
    torch.nn.functional.cross_entropy(logits.transpose(1, 2), labels).backward()
    named = dict(model.named_parameters())
    grads = {}
    for key, tensor in load_file(hf_dir / "model.safetensors").items():
        grad = named[key].grad if key in named else None  # the towers: no gradient from text
        grads[key] = torch.zeros_like(tensor, dtype=torch.float32) if grad is None else grad.float().contiguous()
    shutil.copytree(hf_dir, out / "grads")
    save_file(grads, out / "grads" / "model.safetensors", metadata={"format": "pt"})
    hf_to_mcore(out / "grads", out / "mcore", bridge)
    return load_mcore_state(out / "mcore", bridge)


def test_gradients_equal_transformers_with_pad_and_placeholder_tokens(gemma4_tiny: Path, bridge, state, tmp_path: Path,
                                                                      plain_class) -> None:  # type: ignore[no-untyped-def]
    """One backward through the mcore model gives every parameter the gradient transformers gives it.

    The tokens hold the pad token and the image/video placeholders (which embed as pad): HF's embeddings have
    ``padding_idx``, so the pad row gets no gradient; without that rule in the mcore model its row trained, and the
    engine's Gemma 4 losses drifted from the transformers engine's.
    """
    from swiftcore_megatron import init_model_parallel, load_into_model

    tokens = sample_tokens(int(bridge.get("vocab_size")), seq=24, seed=4)
    tokens[:, 3] = int(bridge.get("pad_token_id", default=0) or 0)
    config = json.loads((gemma4_tiny / "config.json").read_text())
    tokens[0, 5], tokens[1, 7] = config["image_token_id"], config["video_token_id"]
    labels = torch.roll(tokens, -1, dims=1)
    expected = _hf_gradients_as_mcore(plain_class("gemma4"), gemma4_tiny, bridge, tokens, labels, tmp_path)

    init_model_parallel(1, 1)
    model = bridge.build_model(params_dtype=torch.float32)
    load_into_model(model, state)
    positions = torch.arange(tokens.shape[1]).expand_as(tokens)
    model(input_ids=tokens, position_ids=positions, attention_mask=None, labels=labels).mean().backward()
    params = dict(model.named_parameters())
    assert set(params) <= set(expected), "every mcore parameter has an HF gradient to compare with"
    for name, param in params.items():
        grad = torch.zeros_like(param) if param.grad is None else param.grad
        scale = float(expected[name].abs().max()) or 1.0
        assert float((grad - expected[name]).abs().max()) <= 1e-5 * scale, name


# ---------------------------------------------------------------------------- negative controls


def _refused(hf_dir: Path, bridge, state, **kwargs) -> None:  # type: ignore[no-untyped-def]
    report = check_parity(hf_dir, bridge, state, **kwargs)
    assert not report.ok, report
    assert report.max_abs > 1e-3, report


def _wrong(state: dict, hf_dir: Path, bridge, kind: type, wrong_fuse) -> dict:  # type: ignore[no-untyped-def]
    """``state`` with every rule fused by ``kind`` re-made by ``wrong_fuse`` (a plausible mistake)."""
    hf = load_file(hf_dir / "model.safetensors")
    out = dict(state)
    changed = 0
    for rule in bridge.rules():
        if type(rule.fuse) is kind:
            out[rule.mcore] = wrong_fuse(rule, [hf[k] for k in rule.hf])
            assert not torch.equal(out[rule.mcore], state[rule.mcore])
            changed += 1
    assert changed
    return out


def _plain_concat(rule: Rule, tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat(tensors)


def test_negative_control_qkv_without_group_interleave_fails(gemma4_tiny: Path, bridge, state) -> None:  # type: ignore[no-untyped-def]
    _refused(gemma4_tiny, bridge, _wrong(state, gemma4_tiny, bridge, QKV, _plain_concat))


def test_negative_control_k_eq_v_qk_without_group_interleave_fails(gemma4_extras: Path, extras_bridge,
                                                                   extras_state) -> None:  # type: ignore[no-untyped-def]
    _refused(gemma4_extras, extras_bridge, _wrong(extras_state, gemma4_extras, extras_bridge, QK, _plain_concat))


def test_negative_control_swapped_moe_norms_fail(gemma4_extras: Path, extras_bridge, extras_state) -> None:  # type: ignore[no-untyped-def]
    """pre_feedforward_layernorm_2 and post_feedforward_layernorm_1 mapped to each other's place."""
    wrong = dict(extras_state)
    for i in range(extras_bridge.num_layers):
        a, b = f"decoder.layers.{i}.pre_moe_layernorm.weight", f"decoder.layers.{i}.post_dense_mlp_layernorm.weight"
        wrong[a], wrong[b] = extras_state[b], extras_state[a]
    _refused(gemma4_extras, extras_bridge, wrong)


def test_negative_control_without_logit_softcap_fails(gemma4_extras: Path, extras_bridge, extras_state) -> None:  # type: ignore[no-untyped-def]
    class NoCap(type(extras_bridge)):  # type: ignore[misc]
        def model_kwargs(self):  # type: ignore[no-untyped-def]
            return {**super().model_kwargs(), "final_logit_softcapping": None}

    _refused(gemma4_extras, NoCap(extras_bridge.hf_config), extras_state)


def test_negative_control_full_layers_rotating_every_pair_fails(gemma4_extras: Path, extras_bridge,
                                                                extras_state) -> None:  # type: ignore[no-untyped-def]
    """Proportional rope rotates a quarter of the pairs; rotating all of them (plain rope) must show."""
    class PlainRope(type(extras_bridge)):  # type: ignore[misc]
        @property
        def facts(self):  # type: ignore[no-untyped-def]
            return [dataclasses.replace(f, rope=dataclasses.replace(f.rope, kind="default"))
                    for f in super().facts]

    _refused(gemma4_extras, PlainRope(extras_bridge.hf_config), extras_state)


def test_negative_control_kv_shared_from_the_first_layer_of_its_type_fails(gemma4_extras: Path, extras_bridge,
                                                                           extras_state) -> None:  # type: ignore[no-untyped-def]
    """Layer 3 must reuse the keys/values of layer 2 (the last sliding layer before the shared ones), not layer 0."""
    class FirstSource(type(extras_bridge)):  # type: ignore[misc]
        @property
        def facts(self):  # type: ignore[no-untyped-def]
            facts = super().facts
            assert (facts[2].stores_kv, facts[3].kv_source) == (True, 2)
            replace = dataclasses.replace
            return [replace(facts[0], stores_kv=True), facts[1], replace(facts[2], stores_kv=False),
                    replace(facts[3], kv_source=0), facts[4]]

    _refused(gemma4_extras, FirstSource(extras_bridge.hf_config), extras_state,
             input_ids=sample_tokens(int(extras_bridge.get("vocab_size")), seq=16, seed=1))


@pytest.mark.slow
def test_extras_logit_parity_tp2_with_two_gloo_processes(gemma4_extras: Path, extras_bridge,
                                                         extras_mcore_tp2: Path) -> None:  # type: ignore[no-untyped-def]
    """Heads, MLP and expert widths, per-layer gates and both vocabularies split over two ranks."""
    tokens = sample_tokens(int(extras_bridge.get("vocab_size")), seq=24, seed=2)
    _assert_parity(check_parity_tp(gemma4_extras, extras_mcore_tp2, extras_bridge, 2, input_ids=tokens), 48)
