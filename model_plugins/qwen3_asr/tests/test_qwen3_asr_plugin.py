"""swiftcore-plugin-qwen3-asr: spec, tiny checkpoint with its processor, text and audio training steps."""

from __future__ import annotations

import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
from swiftcore_testing import forward_backward, lora_exclude_problems, part_problems, special_token_problems
from swiftcore_tiny import make_tiny

import swiftcore
from swiftcore.models import load_model, load_processor, load_tokenizer, resolve_model_spec

ASR_CONVERSATION = [
    {"role": "system", "content": ""},
    {"role": "user", "content": [{"type": "audio"}]},
    {"role": "assistant", "content": "good morning, everyone"},
]


@pytest.fixture(scope="session")
def plugins():
    return swiftcore.load_plugins(["qwen3_asr"], env={})


@pytest.fixture(scope="session")
def tiny_dir(plugins, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny(plugins.registry.get("model", "qwen3_asr"), tmp_path_factory.mktemp("qwen3_asr") / "tiny")


def test_plugin_import_does_not_import_torch() -> None:
    code = (
        "import sys, swiftcore_plugin_qwen3_asr.plugin as p; p.swiftcore_register_models(); "
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_static_index_lists_the_hooks_specs(plugins) -> None:
    from swiftcore._plugins import discover

    specs = [s for s in plugins.registry.all("model") if s.provider.plugin == "qwen3_asr"]
    assert discover()["qwen3_asr"].capabilities["model"] == [s.name for s in specs] == ["qwen3_asr"]
    assert specs[0].tasks == ("asr", "causal_lm")
    assert specs[0].modalities == ("text", "audio")


def test_tiny_checkpoint_loads_with_plain_transformers(tiny_dir: Path) -> None:
    import transformers

    _, info = transformers.Qwen3ASRForConditionalGeneration.from_pretrained(str(tiny_dir), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    # transformers 5.19 maps qwen3_asr to no AutoModelForCausalLM class; the family class is the way in.
    with pytest.raises(ValueError, match="Unrecognized configuration class"):
        transformers.AutoModelForCausalLM.from_pretrained(str(tiny_dir))


def test_resolve_load_and_train_on_text(plugins, tiny_dir: Path) -> None:
    spec = resolve_model_spec(tiny_dir, plugins)
    assert spec.name == "qwen3_asr"
    model = load_model(spec, tiny_dir, plugins)
    tokenizer = load_tokenizer(tiny_dir)
    assert part_problems(model, spec) == []
    assert lora_exclude_problems(model, spec) == []
    assert special_token_problems(model.config, tokenizer) == []
    ids = tokenizer("good morning, everyone", return_tensors="pt")["input_ids"]
    assert forward_backward(model, ids) > 0


def test_audio_step_through_the_saved_processor(plugins, tiny_dir: Path) -> None:
    import numpy as np

    processor = load_processor(tiny_dir)
    assert type(processor).__name__ == "Qwen3ASRProcessor"
    text = processor.apply_chat_template(ASR_CONVERSATION, tokenize=False)
    assert "<|audio_start|><|audio_pad|><|audio_end|>" in text
    audio = np.random.default_rng(0).standard_normal(16000).astype("float32") * 0.1
    inputs = processor(text=[text], audio=[audio], return_tensors="pt")
    ids = inputs.pop("input_ids")
    audio_tokens = int((ids == processor.audio_token_id).sum())
    assert audio_tokens > 1  # the placeholder was expanded to the audio's length
    model = load_model(resolve_model_spec(tiny_dir, plugins), tiny_dir, plugins)
    assert forward_backward(model, ids, **inputs) > 0
    assert model.model.audio_tower.conv2d1.weight.grad.abs().sum() > 0


def test_tokenizer_carries_the_official_template(tiny_dir: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_dir))
    assert type(tokenizer).__name__ == "Qwen2Tokenizer"
    official = (resources.files("swiftcore_template_qwen") / "official" / "qwen3_asr.jinja").read_text(encoding="utf-8")
    assert tokenizer.chat_template == official
    text = tokenizer.apply_chat_template(ASR_CONVERSATION, tokenize=False)
    assert text == (
        "<|im_start|>system\n<|im_end|>\n<|im_start|>user\n<|audio_start|><|audio_pad|><|audio_end|><|im_end|>\n"
        "<|im_start|>assistant\ngood morning, everyone<|im_end|>\n"
    )
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text
