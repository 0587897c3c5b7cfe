"""swiftcore-plugin-deepseek-v4: spec, tiny checkpoint, loading with plain transformers, training step."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from swiftcore_testing import forward_backward, lora_exclude_problems, part_problems, special_token_problems
from swiftcore_tiny import make_tiny

import swiftcore
from swiftcore.models import load_model, load_tokenizer, resolve_model_spec

# DeepSeek-V4's chat mode, as its encoding description spells it (reference/deepseek_v4_encoding).
CHAT = (
    "<｜begin▁of▁sentence｜>You are a helpful assistant."
    "<｜User｜>What is 2+2?<｜Assistant｜></think>2 + 2 = 4.<｜end▁of▁sentence｜>"
)


@pytest.fixture(scope="session")
def plugins():
    return swiftcore.load_plugins(["deepseek_v4"], env={})


@pytest.fixture(scope="session")
def tiny_dir(plugins, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny(plugins.registry.get("model", "deepseek_v4"), tmp_path_factory.mktemp("deepseek_v4") / "tiny")


def test_plugin_import_does_not_import_torch() -> None:
    code = (
        "import sys, swiftcore_plugin_deepseek_v4.plugin as p; p.swiftcore_register_models(); "
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_static_index_lists_the_hooks_specs(plugins) -> None:
    from swiftcore._plugins import discover

    specs = [s for s in plugins.registry.all("model") if s.provider.plugin == "deepseek_v4"]
    assert discover()["deepseek_v4"].capabilities["model"] == [s.name for s in specs] == ["deepseek_v4"]
    assert specs[0].default_template == "deepseek_v4"


def test_tiny_checkpoint_loads_with_plain_transformers(tiny_dir: Path) -> None:
    import transformers

    _, info = transformers.DeepseekV4ForCausalLM.from_pretrained(str(tiny_dir), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    auto = transformers.AutoModelForCausalLM.from_pretrained(str(tiny_dir))
    assert type(auto).__name__ == "DeepseekV4ForCausalLM"
    assert json.loads((tiny_dir / "config.json").read_text())["n_routed_experts"] == 4


def test_resolve_load_and_train_one_step(plugins, tiny_dir: Path) -> None:
    spec = resolve_model_spec(tiny_dir, plugins)
    assert spec.name == "deepseek_v4"
    model = load_model(spec, tiny_dir, plugins)
    tokenizer = load_tokenizer(tiny_dir)
    assert part_problems(model, spec) == []
    assert lora_exclude_problems(model, spec) == []
    assert special_token_problems(model.config, tokenizer) == []
    ids = tokenizer(CHAT, return_tensors="pt")["input_ids"]
    assert ids.shape[1] > model.config.sliding_window  # long enough to reach the compressed attention
    assert forward_backward(model, ids) > 0


def test_routers_compressor_and_indexer_are_kept_out_of_lora(plugins, tiny_dir: Path) -> None:
    from transformers import DeepseekV4ForCausalLM

    spec = plugins.registry.get("model", "deepseek_v4")
    model = DeepseekV4ForCausalLM.from_pretrained(str(tiny_dir))
    names = [n for n, _ in model.named_modules()]
    excluded = {n for n in names if any(re.fullmatch(p, n) for p in spec.lora_exclude_modules)}
    assert "model.layers.0.mlp.gate" in excluded
    assert "model.layers.0.self_attn.compressor.kv_proj" in excluded
    assert "model.layers.0.self_attn.kv_proj" not in excluded
    assert "model.layers.0.mlp.shared_experts.up_proj" not in excluded


def test_tokenizer_has_the_real_special_tokens(tiny_dir: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_dir))
    assert tokenizer.bos_token == "<｜begin▁of▁sentence｜>"
    assert tokenizer.eos_token == "<｜end▁of▁sentence｜>"
    ids = tokenizer(CHAT)["input_ids"]
    for token in ("<｜User｜>", "<｜Assistant｜>", "</think>"):
        assert tokenizer.convert_tokens_to_ids(token) in ids
    assert tokenizer.decode(ids) == CHAT
    # Reasoning markup stays in decoded text; turn markers do not.
    assert (
        tokenizer.decode(ids, skip_special_tokens=True) == "You are a helpful assistant.What is 2+2?</think>2 + 2 = 4."
    )
