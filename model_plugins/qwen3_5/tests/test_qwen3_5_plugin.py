"""swiftcore-plugin-qwen3_5: specs, tiny checkpoints, loading with plain transformers, training step."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
from swiftcore_testing import forward_backward, lora_exclude_problems, part_problems, special_token_problems
from swiftcore_tiny import make_tiny

import swiftcore
from swiftcore.models import load_model, load_tokenizer, resolve_model_spec

CONVERSATION = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "The capital of France is Paris."},
]


@pytest.fixture(scope="session")
def plugins():
    return swiftcore.load_plugins(["qwen3_5"], env={})


@pytest.fixture(scope="session")
def tiny_dirs(plugins, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One tiny checkpoint per spec, built once per session."""
    root = tmp_path_factory.mktemp("qwen3_5")
    return {name: make_tiny(plugins.registry.get("model", name), root / name) for name in ("qwen3_5", "qwen3_5_moe")}


def test_plugin_import_does_not_import_torch() -> None:
    code = (
        "import sys, swiftcore_plugin_qwen3_5.plugin as p; p.swiftcore_register_models(); "
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_static_index_lists_the_hooks_specs(plugins) -> None:
    from swiftcore._plugins import discover

    specs = [s for s in plugins.registry.all("model") if s.provider.plugin == "qwen3_5"]
    assert (
        sorted(discover()["qwen3_5"].capabilities["model"])
        == sorted(s.name for s in specs)
        == [
            "qwen3_5",
            "qwen3_5_moe",
        ]
    )
    assert all(s.default_template == "qwen3_5" for s in specs)


@pytest.mark.parametrize("name", ["qwen3_5", "qwen3_5_moe"])
def test_tiny_checkpoint_loads_with_plain_transformers(name: str, tiny_dirs) -> None:
    import transformers

    directory = str(tiny_dirs[name])
    family = {"qwen3_5": "Qwen3_5ForConditionalGeneration", "qwen3_5_moe": "Qwen3_5MoeForConditionalGeneration"}[name]
    model, info = getattr(transformers, family).from_pretrained(directory, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    text_only = transformers.AutoModelForCausalLM.from_pretrained(directory)
    assert type(text_only).__name__ == family.replace("ForConditionalGeneration", "ForCausalLM")
    # The text-only class reads the same decoder weights.
    key = "layers.3.self_attn.q_proj.weight"
    assert text_only.model.state_dict()[key].equal(model.model.language_model.state_dict()[key])


@pytest.mark.parametrize("name", ["qwen3_5", "qwen3_5_moe"])
def test_resolve_load_and_train_one_step(name: str, plugins, tiny_dirs) -> None:
    directory = tiny_dirs[name]
    spec = resolve_model_spec(directory, plugins)
    assert spec.name == name
    model = load_model(spec, directory, plugins)
    tokenizer = load_tokenizer(directory)
    assert part_problems(model, spec) == []
    assert lora_exclude_problems(model, spec) == []
    assert special_token_problems(model.config, tokenizer) == []
    batch = tokenizer.apply_chat_template(CONVERSATION, return_tensors="pt", return_dict=True)
    assert forward_backward(model, batch["input_ids"]) > 0


def test_moe_routers_are_kept_out_of_lora(plugins, tiny_dirs) -> None:
    import re

    from transformers import Qwen3_5MoeForConditionalGeneration

    spec = plugins.registry.get("model", "qwen3_5_moe")
    model = Qwen3_5MoeForConditionalGeneration.from_pretrained(str(tiny_dirs["qwen3_5_moe"]))
    excluded = {n for n, _ in model.named_modules() if any(re.fullmatch(p, n) for p in spec.lora_exclude_modules)}
    assert "model.language_model.layers.0.mlp.gate" in excluded
    assert "model.language_model.layers.0.mlp.shared_expert_gate" in excluded
    assert "model.visual.blocks.0.attn.qkv" in excluded
    assert "model.language_model.layers.0.mlp.shared_expert.up_proj" not in excluded


def test_tokenizer_carries_the_official_template(tiny_dirs) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_dirs["qwen3_5"]))
    assert type(tokenizer).__name__ == "Qwen3_5Tokenizer"
    official = (resources.files("swiftcore_template_qwen") / "official" / "qwen3_5.jinja").read_text(encoding="utf-8")
    assert tokenizer.chat_template == official
    text = tokenizer.apply_chat_template(CONVERSATION[:2], tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n<think>\n"
    )
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.decode(ids) == text
    assert ids.count(tokenizer.convert_tokens_to_ids("<|im_start|>")) == 3
    assert tokenizer.eos_token == "<|im_end|>"


def test_image_processor_settings_are_saved(tiny_dirs) -> None:
    from transformers import AutoImageProcessor

    processor = AutoImageProcessor.from_pretrained(str(tiny_dirs["qwen3_5"]))
    config = json.loads((tiny_dirs["qwen3_5"] / "config.json").read_text())
    assert processor.patch_size == config["vision_config"]["patch_size"] == 16
    assert processor.merge_size == config["vision_config"]["spatial_merge_size"] == 2


def test_vllm_constraints_hold_in_config_json(tiny_dirs) -> None:
    text = json.loads((tiny_dirs["qwen3_5"] / "config.json").read_text())["text_config"]
    # notes/vllm_cpu.md: CPU attention needs head_dim >= 32, GDN kernels need linear head dim 64 or 128.
    assert text["head_dim"] >= 32
    assert text["linear_key_head_dim"] == text["linear_value_head_dim"] == 64


def test_text_only_export_is_claimed_and_loaded_with_its_class(plugins, tiny_dirs, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(str(tiny_dirs["qwen3_5"])).save_pretrained(str(tmp_path))
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == ["Qwen3_5ForCausalLM"]
    spec = resolve_model_spec(tmp_path, plugins)
    assert spec.name == "qwen3_5"
    assert type(load_model(spec, tmp_path, plugins)).__name__ == "Qwen3_5ForCausalLM"
