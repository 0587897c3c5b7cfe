"""swiftcore-plugin-glm5: spec, tiny checkpoint, loading with plain transformers, LoRA plan, training."""

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
    return load_plugins(["glm5"], env={})


@pytest.fixture(scope="session")
def tiny_dir(plugins, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny(plugins.registry.get("model", "glm5"), tmp_path_factory.mktemp("glm5") / "tiny", seed=0)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWIFTCORE_")}
    env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    return env


def test_plugin_import_does_not_import_torch() -> None:
    code = (
        "import sys, swiftcore_plugin_glm5.plugin as p, swiftcore_plugin_glm5.tiny; p.swiftcore_register_models(); "
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_swiftcore_plugins_lists_the_family() -> None:
    result = run_swiftcore("plugins", env=_env(), timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert re.search(r"^glm5\s+swiftcore-plugin-glm5\s.*model: glm5$", result.stdout, re.M), result.stdout
    assert re.search(r"^template_glm\s+swiftcore-template-glm\s.*template: glm5$", result.stdout, re.M)


def test_tiny_checkpoint_keeps_glm5s_features(tiny_dir: Path) -> None:
    """Loads with plain transformers; dense first layer, shared + routed experts, MLA, a DSA indexer per layer."""
    import transformers

    model, info = transformers.AutoModelForCausalLM.from_pretrained(str(tiny_dir), output_loading_info=True)
    assert type(model).__name__ == "GlmMoeDsaForCausalLM"
    assert not info["missing_keys"] and not info["unexpected_keys"]
    config = model.config
    assert config.mlp_layer_types == ["dense", "sparse", "sparse"] and config.indexer_types == ["full"] * 3
    dense, moe = model.model.layers[0], model.model.layers[1]
    assert type(dense.mlp).__name__ == "GlmMoeDsaMLP" and type(moe.mlp).__name__ == "GlmMoeDsaMoE"
    assert moe.mlp.experts.gate_up_proj.shape == (4, 2 * 32, 128)
    assert moe.mlp.shared_experts.gate_proj.out_features == 32
    attn = moe.self_attn
    assert attn.q_a_proj.out_features == 64 and attn.kv_a_proj_with_mqa.out_features == 32 + 16
    assert attn.indexer is not None and attn.indexer.wq_b.out_features == 2 * 32 and config.index_topk == 16
    saved = json.loads((tiny_dir / "generation_config.json").read_text())
    assert saved["eos_token_id"] == [0, 7, 9]  # <|endoftext|>, <|user|>, <|observation|>


def test_resolve_load_and_train_one_step(plugins, tiny_dir: Path) -> None:
    spec = resolve_model_spec(tiny_dir, plugins)
    assert spec.name == "glm5"
    model = load_model(spec, tiny_dir, plugins)
    tokenizer = load_tokenizer(tiny_dir)
    assert part_problems(model, spec) == []
    assert lora_exclude_problems(model, spec) == []
    assert special_token_problems(model.config, tokenizer) == []
    batch = tokenizer.apply_chat_template(CONVERSATION, return_tensors="pt", return_dict=True)
    assert batch["input_ids"].shape[1] > 16  # longer than index_topk: the attention is really sparse
    assert forward_backward(model, batch["input_ids"]) > 0
    assert model.model.layers[1].mlp.experts.gate_up_proj.grad.abs().sum() > 0
    assert model.model.layers[1].self_attn.kv_b_proj.weight.grad.abs().sum() > 0
    # transformers runs the indexer under no_grad: the LM loss does not train it (hence no LoRA there).
    assert model.model.layers[1].self_attn.indexer.wq_b.weight.grad is None


def test_router_and_indexer_are_kept_out_of_lora(plugins, tiny_dir: Path) -> None:
    from transformers import GlmMoeDsaForCausalLM

    spec = plugins.registry.get("model", "glm5")
    model = GlmMoeDsaForCausalLM.from_pretrained(str(tiny_dir))
    excluded = {n for n, _ in model.named_modules() if any(re.fullmatch(p, n) for p in spec.lora_exclude_modules)}
    assert {n for n in excluded if n.endswith("mlp.gate")} == {"model.layers.1.mlp.gate", "model.layers.2.mlp.gate"}
    assert {n for n in excluded if not n.endswith("mlp.gate")} == {
        f"model.layers.{i}.self_attn.indexer{part}" for i in range(3)
        for part in ("", ".wq_b", ".wk", ".k_norm", ".weights_proj")
    }


def test_dry_run_adapts_attention_and_experts_never_the_router(tiny_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["train", "--model", str(tiny_dir), "--dry-run", "--tuner", "lora", "--target-modules",
            "all-linear", "--output-dir", str(out)]
    result = run_swiftcore(*args, env=_env(), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "LoRA adapts 15 linear modules (all-linear):" in result.stdout
    for proj in ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"):
        assert f"  model.layers.*.self_attn.{proj}  x3" in result.stdout
    assert "LoRA adapts 4 fused expert weights (peft target_parameters):" in result.stdout
    assert "  model.layers.*.mlp.experts.gate_up_proj  x2" in result.stdout
    assert "  model.layers.*.mlp.experts.down_proj  x2" in result.stdout
    # peft 0.21's glm_moe_dsa MoE conversion (as for glm4_moe) rewrites gate_proj/up_proj/down_proj targets:
    # the dense MLP and the shared experts cannot be adapted, and the plan says so.
    assert "NOT adapted (peft cannot; see the warning): 9:" in result.stdout
    assert "  model.layers.*.mlp.shared_experts.gate_proj  x2" in result.stdout
    assert "are NOT adapted by LoRA" in result.stderr
    assert "mlp.gate " not in result.stdout and "mlp.gate\n" not in result.stdout and "indexer" not in result.stdout
    assert not out.exists()


def test_tokenizer_carries_the_official_template(tiny_dir: Path) -> None:
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_dir))
    official = (resources.files("swiftcore_template_glm") / "official" / "glm5.jinja").read_text(encoding="utf-8")
    assert tokenizer.chat_template == official
    text = tokenizer.apply_chat_template(CONVERSATION[:2], tokenize=False, add_generation_prompt=True)
    assert text == ("[gMASK]<sop><|system|>You are a helpful assistant.<|user|>What is the capital of France?"
                    "<|assistant|><think>")
    ids = tokenizer(text)["input_ids"]
    assert ids == Tokenizer.from_file(str(tiny_dir / "tokenizer.json")).encode(text).ids
    assert ids[:2] == tokenizer.convert_tokens_to_ids(["[gMASK]", "<sop>"])
    assert tokenizer.decode(ids) == text
    # <think> / tool-call markup survives skip_special_tokens (they are not special in GLM's tokenizer), turns do not.
    reply = "<think>r</think>ok<tool_call>f<arg_key>a</arg_key><arg_value>1</arg_value></tool_call><|user|>"
    assert tokenizer.decode(tokenizer(reply)["input_ids"], skip_special_tokens=True) == reply[: -len("<|user|>")]
    assert tokenizer.eos_token == tokenizer.pad_token == "<|endoftext|>" and tokenizer.bos_token is None


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
