"""swiftcore-plugin-mimo-v2: spec, tiny checkpoint, loading with plain transformers, LoRA targets, training."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from swiftcore_testing import (
    forward_backward,
    lora_exclude_problems,
    part_problems,
    run_swiftcore,
    special_token_problems,
)
from swiftcore_tiny import make_tiny

import swiftcore
from swiftcore.models import load_model, load_tokenizer, resolve_model_spec

CHAT = (
    "<|im_start|>system\nYou are MiMo, an AI assistant developed by Xiaomi.<|im_end|>\n"
    "<|im_start|>user\nWhat is 2+2? Answer briefly, please.<|im_end|>\n"
    "<|im_start|>assistant\n<think>\n\n</think>\n\n2 + 2 = 4.<|im_end|>\n"
)


@pytest.fixture(scope="session")
def plugins():
    return swiftcore.load_plugins(["mimo_v2", "template_mimo"], env={})


@pytest.fixture(scope="session")
def tiny_dir(plugins, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny(plugins.registry.get("model", "mimo_v2_flash"), tmp_path_factory.mktemp("mimo_v2") / "tiny",
                     seed=0)


def test_plugin_import_does_not_import_torch() -> None:
    code = (
        "import sys, swiftcore_plugin_mimo_v2.plugin as p; p.swiftcore_register_models(); "
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_static_index_lists_the_hooks_specs(plugins) -> None:
    from swiftcore._plugins import discover

    specs = [s for s in plugins.registry.all("model") if s.provider.plugin == "mimo_v2"]
    assert discover()["mimo_v2"].capabilities["model"] == [s.name for s in specs] == ["mimo_v2_flash"]
    assert specs[0].default_template == "mimo_v2"


def test_tiny_config_keeps_the_release_features(tiny_dir: Path) -> None:
    import transformers

    model, info = transformers.MiMoV2FlashForCausalLM.from_pretrained(str(tiny_dir), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert type(transformers.AutoModelForCausalLM.from_pretrained(str(tiny_dir))).__name__ == "MiMoV2FlashForCausalLM"
    config = json.loads((tiny_dir / "config.json").read_text())
    assert config["model_type"] == "mimo_v2_flash"
    assert config["layer_types"] == ["full_attention", "sliding_attention", "sliding_attention", "full_attention"]
    assert config["mlp_layer_types"] == ["dense", "sparse", "sparse", "sparse"]
    assert config["head_dim"] != config["v_head_dim"]
    full, swa = model.model.layers[0].self_attn, model.model.layers[1].self_attn
    assert full.sinks is None and swa.sinks is not None
    assert swa.k_proj.out_features == 2 * full.k_proj.out_features  # the sliding layers' doubled kv heads
    assert full.v_proj.out_features == config["num_key_value_heads"] * config["v_head_dim"]
    assert hasattr(model.model.layers[0].mlp, "gate_proj") and hasattr(model.model.layers[1].mlp, "experts")
    assert sum(p.numel() for p in model.parameters()) < 500_000


def test_resolve_load_and_train_one_step(plugins, tiny_dir: Path) -> None:
    spec = resolve_model_spec(tiny_dir, plugins)
    assert spec.name == "mimo_v2_flash"
    model = load_model(spec, tiny_dir, plugins)
    tokenizer = load_tokenizer(tiny_dir)
    assert part_problems(model, spec) == []
    assert lora_exclude_problems(model, spec) == []
    assert special_token_problems(model.config, tokenizer) == []
    ids = tokenizer(CHAT, return_tensors="pt")["input_ids"]
    assert ids.shape[1] > model.config.sliding_window  # long enough for the window to matter
    assert forward_backward(model, ids) > 0


def test_tokenizer_has_the_real_special_tokens_and_chat_template(plugins, tiny_dir: Path) -> None:
    from transformers import AutoTokenizer

    from swiftcore.template import get_template

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_dir))
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"
    ids = tokenizer(CHAT)["input_ids"]
    for token in ("<|im_start|>", "<|im_end|>", "<think>", "</think>"):
        assert tokenizer.convert_tokens_to_ids(token) in ids
    assert tokenizer.decode(ids) == CHAT
    messages = [{"role": "user", "content": "What is 2+2? Answer briefly, please."},
                {"role": "assistant", "content": "2 + 2 = 4."}]
    assert tokenizer.apply_chat_template(messages, tokenize=False) == CHAT
    assert get_template("mimo_v2", plugins).render({"messages": messages}) == CHAT


def test_routers_are_kept_out_of_lora_and_experts_are_adapted(tiny_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWIFTCORE_")}
    env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    args = ["train", "--model", str(tiny_dir), "--dry-run", "--target-modules", "all-linear",
            "--output-dir", str(out)]
    result = run_swiftcore(*args, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "LoRA adapts 19 linear modules (all-linear):" in result.stdout
    for kind in ("self_attn.q_proj  x4", "self_attn.v_proj  x4", "mlp.gate_proj  x1", "mlp.down_proj  x1"):
        assert f"  model.layers.*.{kind}" in result.stdout
    assert "LoRA adapts 6 fused expert weights (peft target_parameters):" in result.stdout
    assert "  model.layers.*.mlp.experts.gate_up_proj  x3" in result.stdout
    assert "  model.layers.*.mlp.experts.down_proj  x3" in result.stdout
    assert not re.search(r"\.mlp\.gate\s", result.stdout) and "sinks" not in result.stdout
    assert not out.exists()


def test_lora_on_the_demo_data_lowers_the_loss(tiny_dir: Path, tmp_path: Path) -> None:
    import torch
    from swiftcore_tiny import parity_records
    from swiftcore_train import TrainConfig, run_training

    plugins = swiftcore.load_plugins(["mimo_v2", "template_mimo", "train"], env={})
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        records = parity_records(list(range(8)))
        data = tmp_path / "parity_train.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in records))
        cfg = TrainConfig(model=str(tiny_dir), dataset=(str(data),), output_dir=str(tmp_path / "run"), tuner="lora",
                          max_steps=12, batch_size=8, learning_rate=5e-3, logging_steps=1, save_steps=10_000,
                          plot=False)
        result = run_training(cfg, plugins)
    finally:
        torch.set_num_threads(threads)
    rows = [json.loads(line) for line in result.log_file.read_text().splitlines()]
    losses = [row["loss"] for row in rows if "loss" in row]
    assert len(losses) == 12
    print("mimo_v2 demo-data LoRA losses:", [round(x, 3) for x in losses])
    assert losses[-1] < losses[0] / 2, losses


def test_swiftcore_plugins_lists_it() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWIFTCORE_")}
    result = run_swiftcore("plugins", env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "mimo_v2" in result.stdout and "mimo_v2_flash" in result.stdout
