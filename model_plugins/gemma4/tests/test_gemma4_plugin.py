"""swiftcore-plugin-gemma4: spec, tiny checkpoint, loading with plain transformers, text and image steps."""

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
    return swiftcore.load_plugins(["gemma4"], env={})


@pytest.fixture(scope="session")
def tiny_dir(plugins, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny(plugins.registry.get("model", "gemma4"), tmp_path_factory.mktemp("gemma4") / "tiny")


def test_plugin_import_does_not_import_torch() -> None:
    code = (
        "import sys, swiftcore_plugin_gemma4.plugin as p; p.swiftcore_register_models(); "
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_static_index_lists_the_hooks_specs(plugins) -> None:
    from swiftcore._plugins import discover

    specs = [s for s in plugins.registry.all("model") if s.provider.plugin == "gemma4"]
    assert discover()["gemma4"].capabilities["model"] == [s.name for s in specs] == ["gemma4"]
    assert specs[0].default_template == "gemma4"


def test_tiny_checkpoint_loads_with_plain_transformers(tiny_dir: Path) -> None:
    import transformers

    model, info = transformers.Gemma4ForConditionalGeneration.from_pretrained(str(tiny_dir), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert type(transformers.AutoModelForCausalLM.from_pretrained(str(tiny_dir))).__name__ == (
        "Gemma4ForConditionalGeneration"
    )
    # The trap in notes/tiny_models.md: the per-layer input embedding must not have 262,144 rows.
    assert sum(p.numel() for p in model.parameters()) < 2_000_000


def test_resolve_load_and_train_one_step(plugins, tiny_dir: Path) -> None:
    spec = resolve_model_spec(tiny_dir, plugins)
    assert spec.name == "gemma4"
    model = load_model(spec, tiny_dir, plugins)
    tokenizer = load_tokenizer(tiny_dir)
    assert part_problems(model, spec) == []
    assert lora_exclude_problems(model, spec) == []
    assert special_token_problems(model.config, tokenizer) == []
    batch = tokenizer.apply_chat_template(CONVERSATION, return_tensors="pt", return_dict=True)
    assert forward_backward(model, batch["input_ids"]) > 0


def test_image_step_with_the_saved_processor_settings(tiny_dir: Path) -> None:
    import numpy as np
    from PIL import Image
    from transformers import AutoImageProcessor, AutoTokenizer, Gemma4ForConditionalGeneration

    processor = AutoImageProcessor.from_pretrained(str(tiny_dir))
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_dir))
    image = Image.fromarray((np.random.default_rng(0).random((48, 80, 3)) * 255).astype("uint8"))
    pixels = processor(images=[image], return_tensors="pt")
    soft_tokens = int(pixels["num_soft_tokens_per_image"][0])
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe it."}]}]
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    assert "<|image|>" in text
    # What Gemma4Processor does: expand the placeholder to the image's soft tokens.
    text = text.replace("<|image|>", tokenizer.boi_token + tokenizer.image_token * soft_tokens + tokenizer.eoi_token)
    ids = tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
    model = Gemma4ForConditionalGeneration.from_pretrained(str(tiny_dir))
    loss = forward_backward(
        model, ids, pixel_values=pixels["pixel_values"], image_position_ids=pixels["image_position_ids"]
    )
    assert loss > 0
    assert model.model.vision_tower.encoder.layers[0].self_attn.q_proj.linear.weight.grad.abs().sum() > 0


def test_tokenizer_carries_the_official_template(tiny_dir: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_dir))
    assert type(tokenizer).__name__ == "GemmaTokenizer"
    official = (resources.files("swiftcore_template_gemma") / "official" / "gemma4.jinja").read_text(encoding="utf-8")
    assert tokenizer.chat_template == official
    text = tokenizer.apply_chat_template(CONVERSATION[1:2], tokenize=False, add_generation_prompt=True)
    assert (
        text == "<bos><|turn>user\nWhat is the capital of France?<turn|>\n<|turn>model\n<|channel>thought\n<channel|>"
    )
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert ids[:2] == [tokenizer.bos_token_id, tokenizer.convert_tokens_to_ids("<|turn>")]
    assert tokenizer.decode(ids) == text
    # Plain encoding prepends <bos>, as Gemma's tokenizer does.
    assert tokenizer("Hi")["input_ids"][0] == tokenizer.bos_token_id


def test_config_json_has_what_vllm_reads(tiny_dir: Path) -> None:
    config = json.loads((tiny_dir / "config.json").read_text())
    processor = json.loads((tiny_dir / "processor_config.json").read_text())
    assert config["vision_config"]["default_output_length"] == processor["image_seq_length"]
    assert config["text_config"]["head_dim"] >= 32
    assert processor["processor_class"] == "Gemma4Processor"
    assert {"image_processor", "feature_extractor"} <= set(processor)


def test_audio_feature_extractor_is_saved(tiny_dir: Path) -> None:
    import numpy as np
    from transformers import AutoFeatureExtractor

    extractor = AutoFeatureExtractor.from_pretrained(str(tiny_dir))
    features = extractor([np.zeros(16000, dtype="float32")], return_tensors="pt")
    assert features["input_features"].shape[-1] == 128


def test_text_only_export_is_claimed_and_loaded_with_its_class(plugins, tiny_dir: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer, Gemma4ForCausalLM, Gemma4ForConditionalGeneration

    full = Gemma4ForConditionalGeneration.from_pretrained(str(tiny_dir))
    text_only = Gemma4ForCausalLM(full.config.text_config)
    text_only.model.load_state_dict(full.model.language_model.state_dict())
    text_only.save_pretrained(str(tmp_path))
    AutoTokenizer.from_pretrained(str(tiny_dir)).save_pretrained(str(tmp_path))
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "gemma4_text"
    spec = resolve_model_spec(tmp_path, plugins)
    assert spec.name == "gemma4"
    model = load_model(spec, tmp_path, plugins)
    assert type(model).__name__ == "Gemma4ForCausalLM"
    assert forward_backward(model, load_tokenizer(tmp_path)("Hello there", return_tensors="pt")["input_ids"]) > 0


def test_processor_without_torchvision_is_a_clear_error(tiny_dir: Path) -> None:
    import importlib.util

    from swiftcore.errors import SwiftcoreError
    from swiftcore.models import load_processor

    if importlib.util.find_spec("torchvision") is not None:
        assert type(load_processor(tiny_dir)).__name__ == "Gemma4Processor"
        return
    with pytest.raises(SwiftcoreError, match="needs torchvision.*AutoImageProcessor"):
        load_processor(tiny_dir)
