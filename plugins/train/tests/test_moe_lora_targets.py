"""``all-linear`` LoRA on MoE families adapts what the user means (issue 16).

peft 0.21 rewrites ``all-linear`` per architecture: on the tiny checkpoints here it never adapted the fused
3D expert weights (Qwen3.5-MoE, DeepSeek-V4, Gemma 4 MoE), adapted Gemma 4's router (``router.proj``), and
the exclusions were the spec's only. Now ``all-linear`` adapts attention, dense MLPs, shared experts and the
experts (fused weights through peft's ``target_parameters``, which works on CPU for each family below),
never a router or gate, and honours ``--lora-exclude-modules``. Each test asserts the exact set of adapted
module kinds (block indices as ``*``), on the model peft actually wrapped.
"""

from __future__ import annotations

import importlib
import os
import re
from pathlib import Path
from typing import Any

import pytest
from swiftcore_testing import run_swiftcore

from swiftcore.api import ModelSpec

ATTENTION = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"}
FUSED = {"mlp.experts.gate_up_proj", "mlp.experts.down_proj"}


@pytest.fixture(scope="module")
def plugins() -> Any:
    from swiftcore.api import load_plugins

    return load_plugins()


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory: pytest.TempPathFactory, plugins: Any) -> Any:
    from swiftcore_tiny import make_tiny

    root = tmp_path_factory.mktemp("moe")
    made: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in made:
            made[name] = make_tiny(plugins.registry.get("model", name), root / name, seed=0)
        return made[name]

    return get


def _model(spec: ModelSpec, model_dir: Path, **text_config: Any) -> Any:
    """A random model of ``spec``'s class with the tiny checkpoint's config (``text_config`` overrides)."""
    import torch
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(model_dir))
    for key, value in text_config.items():
        setattr(getattr(config, "text_config", config), key, value)
    module, name = spec.model_class.split(":")
    torch.manual_seed(0)
    return getattr(importlib.import_module(module), name)(config)


def _cfg(model_dir: Any = "x", **kwargs: Any) -> Any:
    from swiftcore_train.config import TrainConfig

    return TrainConfig(model=str(model_dir), dataset=("x",), tuner="lora", lora_rank=4, lora_alpha=8, **kwargs)


def _adapted(peft_model: Any, lang: str) -> set[str]:
    """The adapted kinds under the language model ``lang.``: each LoRA layer's module name (a parameter
    wrapper's with its parameter) less ``lang.layers.N.``."""
    kinds = set()
    for name, module in peft_model.named_modules():
        if not hasattr(module, "lora_A"):
            continue
        name = name.removeprefix("base_model.model.").replace(".base_layer", "")
        if getattr(module, "parameter_name", None):
            name = f"{name}.{module.parameter_name}"
        assert name.startswith(lang + "."), name
        kinds.add(re.sub(r"^layers\.\d+\.", "", name.removeprefix(lang + ".")))
    return kinds


def _tune(model: Any, spec: ModelSpec, cfg: Any) -> Any:
    from swiftcore_train.tuners import apply_tuner

    return apply_tuner(model, spec, cfg)


def _trains(peft_model: Any) -> None:
    """One forward/backward on CPU: finite loss, a gradient on every LoRA B (A's is zero while B is)."""
    import torch

    ids = torch.randint(0, 100, (1, 8))
    loss = peft_model(input_ids=ids, labels=ids).loss
    loss.backward()
    assert torch.isfinite(loss)
    b = [(n, p.grad) for n, p in peft_model.named_parameters() if "lora_B" in n]
    assert b and all(g is not None for _, g in b), [n for n, g in b if g is None]
    assert any("experts" in n and g.abs().sum() > 0 for n, g in b)


def test_qwen3_5_moe_all_linear(plugins: Any, tiny_dirs: Any) -> None:
    spec = plugins.registry.get("model", "qwen3_5_moe")
    model_dir = tiny_dirs("qwen3_5_moe")
    tuned = _tune(_model(spec, model_dir), spec, _cfg(model_dir))
    linear_attn = {f"linear_attn.{p}" for p in ("in_proj_qkv", "in_proj_z", "in_proj_a", "in_proj_b", "out_proj")}
    shared = {"mlp.shared_expert.gate_proj", "mlp.shared_expert.up_proj", "mlp.shared_expert.down_proj"}
    kinds = _adapted(tuned, "model.language_model")
    assert kinds == ATTENTION | linear_attn | shared | FUSED
    assert not {"mlp.gate", "mlp.shared_expert_gate"} & kinds  # the router and the shared-expert gate
    _trains(tuned)


def test_a_qwen3_5_moe_adapter_reloads_with_peft(plugins: Any, tiny_dirs: Any, tmp_path: Path) -> None:
    """The adapter (fused expert weights included) loads back with plain peft, and merges, to the same logits."""
    import torch
    from peft import PeftModel

    spec = plugins.registry.get("model", "qwen3_5_moe")
    model_dir = tiny_dirs("qwen3_5_moe")
    tuned = _tune(_model(spec, model_dir), spec, _cfg(model_dir))
    with torch.no_grad():
        for name, param in tuned.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.1)
    ids = torch.randint(0, 100, (1, 8))
    tuned.eval()
    with torch.no_grad():
        expected = tuned(input_ids=ids).logits
    tuned.save_pretrained(str(tmp_path / "adapter"))
    reloaded = PeftModel.from_pretrained(_model(spec, model_dir), str(tmp_path / "adapter")).eval()
    with torch.no_grad():
        assert torch.allclose(reloaded(input_ids=ids).logits, expected, atol=1e-5)
        merged = reloaded.merge_and_unload()  # what `swiftcore export --merge-lora` does
        assert torch.allclose(merged(input_ids=ids).logits, expected, atol=1e-5)


def test_deepseek_v4_all_linear(plugins: Any, tiny_dirs: Any) -> None:
    spec = plugins.registry.get("model", "deepseek_v4")
    model_dir = tiny_dirs("deepseek_v4")
    tuned = _tune(_model(spec, model_dir), spec, _cfg(model_dir))
    attention = {"self_attn.q_a_proj", "self_attn.q_b_proj", "self_attn.kv_proj", "self_attn.o_b_proj"}
    shared = {"mlp.shared_experts.gate_proj", "mlp.shared_experts.up_proj", "mlp.shared_experts.down_proj"}
    # The hash router (mlp.gate), the compressor, the indexer and the grouped o_a_proj are kept out by the spec.
    assert _adapted(tuned, "model") == attention | shared | FUSED
    _trains(tuned)


def test_gemma4_moe_all_linear_leaves_the_router_alone(plugins: Any, tiny_dirs: Any) -> None:
    """Gemma 4's MoE layers (the 26B-A4B form: a dense MLP beside the experts) on the tiny config, MoE on."""
    spec = plugins.registry.get("model", "gemma4")
    moe = {"enable_moe_block": True, "num_experts": 4, "top_k_experts": 2, "moe_intermediate_size": 16}
    model = _model(spec, tiny_dirs("gemma4"), **moe)
    tuned = _tune(model, spec, _cfg(tiny_dirs("gemma4")))
    dense = {"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}
    per_layer = {"per_layer_input_gate", "per_layer_projection", "per_layer_model_projection"}
    kinds = _adapted(tuned, "model.language_model")
    assert kinds == ATTENTION | dense | per_layer | {"experts.gate_up_proj", "experts.down_proj"}
    assert "router.proj" not in kinds  # peft's all-linear adapted it
    _trains(tuned)


def test_glm4_moe_like_all_linear_never_adapts_the_router_and_warns_what_peft_drops(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A glm4_moe model (first layer dense, then shared experts + experts) under a spec with no exclusions: the
    router is left alone by the rule itself. peft 0.21 rewrites every target named gate_proj/up_proj/down_proj
    on this type to the fused experts, when training and again when loading the adapter, so the dense MLP and
    shared-expert linears cannot be adapted: the warning says so (peft's own all-linear adapted the router)."""
    import torch
    from transformers import Glm4MoeConfig, Glm4MoeForCausalLM

    config = Glm4MoeConfig(
        vocab_size=128, hidden_size=32, intermediate_size=64, moe_intermediate_size=16, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, n_routed_experts=4, num_experts_per_tok=2,
        n_shared_experts=1, first_k_dense_replace=1,
    )  # fmt: skip
    torch.manual_seed(0)
    spec = ModelSpec(name="glm4_moe_like", model_types=("glm4_moe",), model_class="transformers:Glm4MoeForCausalLM")
    with caplog.at_level("WARNING", logger="swiftcore.train"):
        tuned = _tune(Glm4MoeForCausalLM(config), spec, _cfg())
    kinds = _adapted(tuned, "model")
    assert kinds == ATTENTION | FUSED
    assert "mlp.gate" not in kinds and "mlp.gate.weight" not in kinds
    assert "are NOT adapted by LoRA" in caplog.text and "model.layers.N.mlp.shared_experts.down_proj" in caplog.text
    _trains(tuned)


def test_lora_exclude_modules_is_honoured(plugins: Any, tiny_dirs: Any) -> None:
    spec = plugins.registry.get("model", "qwen3_5_moe")
    model_dir = tiny_dirs("qwen3_5_moe")
    cfg = _cfg(model_dir, lora_exclude_modules=("shared_expert.down_proj", r".*\.linear_attn\..*", "experts"))
    kinds = _adapted(_tune(_model(spec, model_dir), spec, cfg), "model.language_model")
    assert kinds == ATTENTION | {"mlp.shared_expert.gate_proj", "mlp.shared_expert.up_proj"}


def test_lora_dropout_with_fused_experts_is_a_clear_error(plugins: Any, tiny_dirs: Any) -> None:
    """peft's parameter LoRA has no dropout: said up front, with both ways out (it raised a bare ValueError)."""
    from swiftcore.errors import SwiftcoreError

    spec = plugins.registry.get("model", "qwen3_5_moe")
    model_dir = tiny_dirs("qwen3_5_moe")
    with pytest.raises(SwiftcoreError, match=r"--lora-dropout 0.1: peft cannot apply dropout to the fused expert"):
        _tune(_model(spec, model_dir), spec, _cfg(model_dir, lora_dropout=0.1))
    kinds = _adapted(
        _tune(_model(spec, model_dir), spec, _cfg(model_dir, lora_dropout=0.1, lora_exclude_modules=("experts",))),
        "model.language_model",
    )
    assert not FUSED & kinds


def test_dry_run_prints_the_plan_and_writes_nothing(plugins: Any, tiny_dirs: Any, tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWIFTCORE_")}
    env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    args = ["train", "--model", str(tiny_dirs("qwen3_5_moe")), "--dry-run", "--output-dir", str(out)]
    args += ["--lora-exclude-modules", "shared_expert.down_proj"]
    result = run_swiftcore(*args, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "LoRA adapts 27 linear modules (all-linear):" in result.stdout
    assert "shared_expert.down_proj" not in result.stdout
    assert "  model.language_model.layers.*.mlp.shared_expert.gate_proj  x4" in result.stdout
    assert "LoRA adapts 8 fused expert weights (peft target_parameters):" in result.stdout
    assert "  model.language_model.layers.*.mlp.experts.gate_up_proj  x4" in result.stdout
    assert re.search(r"trainable [\d,]+ / [\d,]+ parameters", result.stdout)
    assert ".mlp.gate " not in result.stdout
    assert not out.exists()
