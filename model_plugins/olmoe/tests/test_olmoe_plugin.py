"""swiftcore-plugin-olmoe: spec, tiny checkpoint, loading with plain transformers, LoRA plan, training."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
from swiftcore_testing import (
    forward_backward,
    lora_exclude_problems,
    part_problems,
    run_swiftcore,
    special_token_problems,
)
from swiftcore_tiny import make_tiny, parity_records

from swiftcore.api import load_plugins
from swiftcore.api.models import load_model, load_tokenizer, resolve_model_spec

CONVERSATION = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "The capital of France is Paris."},
]


@pytest.fixture(scope="session")
def plugins():
    return load_plugins(["olmoe"], env={})


@pytest.fixture(scope="session")
def tiny_dir(plugins, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny(plugins.registry.get("model", "olmoe"), tmp_path_factory.mktemp("olmoe") / "tiny", seed=0)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWIFTCORE_")}
    env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    return env


def test_plugin_import_does_not_import_torch() -> None:
    code = (
        "import sys, swiftcore_plugin_olmoe.plugin as p; p.swiftcore_register_models(); "
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_swiftcore_plugins_lists_the_family() -> None:
    result = run_swiftcore("plugins", env=_env(), timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert re.search(r"^olmoe\s+swiftcore-plugin-olmoe\s.*model: olmoe$", result.stdout, re.M), result.stdout
    assert re.search(r"^template_olmo\s+swiftcore-template-olmo\s.*template: olmoe$", result.stdout, re.M)


def test_tiny_checkpoint_loads_with_plain_transformers(tiny_dir: Path) -> None:
    import transformers

    model, info = transformers.AutoModelForCausalLM.from_pretrained(str(tiny_dir), output_loading_info=True)
    assert type(model).__name__ == "OlmoeForCausalLM"
    assert not info["missing_keys"] and not info["unexpected_keys"]
    config = json.loads((tiny_dir / "config.json").read_text())
    # notes/vllm_cpu.md: vLLM's CPU attention needs head_dim >= 32.
    assert (config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]) >= 32
    # OLMoE's q/k norms span all heads (not one head_dim), k_norm only the kv heads.
    attn = model.model.layers[0].self_attn
    assert attn.q_norm.weight.shape[0] == 4 * 32 and attn.k_norm.weight.shape[0] == 2 * 32


def test_resolve_load_and_train_one_step(plugins, tiny_dir: Path) -> None:
    spec = resolve_model_spec(tiny_dir, plugins)
    assert spec.name == "olmoe"
    model = load_model(spec, tiny_dir, plugins)
    tokenizer = load_tokenizer(tiny_dir)
    assert part_problems(model, spec) == []
    assert lora_exclude_problems(model, spec) == []
    assert special_token_problems(model.config, tokenizer) == []
    batch = tokenizer.apply_chat_template(CONVERSATION, return_tensors="pt", return_dict=True)
    assert forward_backward(model, batch["input_ids"]) > 0
    assert model.model.layers[0].mlp.experts.gate_up_proj.grad.abs().sum() > 0


def test_router_is_kept_out_of_lora(plugins, tiny_dir: Path) -> None:
    from transformers import OlmoeForCausalLM

    spec = plugins.registry.get("model", "olmoe")
    model = OlmoeForCausalLM.from_pretrained(str(tiny_dir))
    excluded = {n for n, _ in model.named_modules() if any(re.fullmatch(p, n) for p in spec.lora_exclude_modules)}
    assert excluded == {"model.layers.0.mlp.gate", "model.layers.1.mlp.gate"}


def test_dry_run_adapts_attention_and_experts_never_the_router(tiny_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["train", "--model", str(tiny_dir), "--dry-run", "--target-modules", "all-linear",
            "--output-dir", str(out)]
    result = run_swiftcore(*args, env=_env(), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "LoRA adapts 8 linear modules (all-linear):" in result.stdout
    for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
        assert f"  model.layers.*.self_attn.{proj}  x2" in result.stdout
    assert "LoRA adapts 4 fused expert weights (peft target_parameters):" in result.stdout
    assert "  model.layers.*.mlp.experts.gate_up_proj  x2" in result.stdout
    assert "  model.layers.*.mlp.experts.down_proj  x2" in result.stdout
    assert "mlp.gate " not in result.stdout and "mlp.gate\n" not in result.stdout
    assert not out.exists()


def test_tokenizer_carries_the_official_template(tiny_dir: Path) -> None:
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_dir))
    assert type(tokenizer).__name__ == "GPTNeoXTokenizer"
    official = (resources.files("swiftcore_template_olmo") / "official" / "olmoe.jinja").read_text(encoding="utf-8")
    assert tokenizer.chat_template == official
    text = tokenizer.apply_chat_template(CONVERSATION[:2], tokenize=False, add_generation_prompt=True)
    assert text == ("<|endoftext|><|system|>\nYou are a helpful assistant.\n"
                    "<|user|>\nWhat is the capital of France?\n<|assistant|>\n")
    ids = tokenizer(text)["input_ids"]
    assert ids == Tokenizer.from_file(str(tiny_dir / "tokenizer.json")).encode(text).ids
    assert tokenizer.decode(ids) == text
    assert tokenizer.eos_token == tokenizer.bos_token == "<|endoftext|>" and tokenizer.pad_token == "<|padding|>"


@pytest.mark.parametrize("tuner", ["lora", "full"])
def test_training_on_the_demo_data_lowers_the_loss(tiny_dir: Path, tmp_path: Path, tuner: str) -> None:
    """``swiftcore train`` a few steps on the demo's parity task (``make demo``'s data): the loss falls."""
    data = tmp_path / "parity_train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in parity_records(list(range(10, 74)))))
    out = tmp_path / "run"
    args = ["train", "--model", str(tiny_dir), "--dataset", str(data), "--output-dir", str(out),
            "--tuner", tuner, "--max-steps", "12", "--batch-size", "16", "--learning-rate",
            "1e-2" if tuner == "lora" else "3e-3", "--logging-steps", "1", "--save-steps", "1000", "--no-plot",
            "--seed", "0"]
    result = run_swiftcore(*args, env=_env(), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "logs.jsonl").read_text().splitlines()]
    losses = [row["loss"] for row in rows if "loss" in row]
    assert len(losses) == 12
    print(f"{tuner}: loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    assert sum(losses[-3:]) / 3 < 0.5 * sum(losses[:3]) / 3, losses
