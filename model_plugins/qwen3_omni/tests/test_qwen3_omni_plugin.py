"""swiftcore-plugin-qwen3-omni: spec, tiny checkpoint, template, the talker's input and loss, speech out."""

from __future__ import annotations

import subprocess
import sys
from importlib import resources
from pathlib import Path

CONVERSATION = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "the quick brown fox"},
    {"role": "assistant", "content": "jumps over the lazy dog"},
]


def test_plugin_import_does_not_import_torch() -> None:
    code = (
        "import sys, swiftcore_plugin_qwen3_omni.plugin as p; p.swiftcore_register_models(); "
        "p.swiftcore_register_commands(); print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_tiny_checkpoint_loads_with_plain_transformers(tiny_dir: Path) -> None:
    import transformers

    model, info = transformers.Qwen3OmniMoeForConditionalGeneration.from_pretrained(
        str(tiny_dir), output_loading_info=True
    )
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert model.has_talker and type(model).__module__.startswith("transformers.")
    config = transformers.AutoConfig.from_pretrained(str(tiny_dir))
    assert config.architectures == ["Qwen3OmniMoeForConditionalGeneration"]
    assert sum(p.numel() for p in model.parameters()) < 2_000_000
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tiny_dir))
    # The talker finds the turns by the ids of the role words: each is one token of the tiny vocabulary.
    for role in ("system", "user", "assistant"):
        assert tokenizer.encode(role) == [getattr(config, f"{role}_token_id")]
    assert tokenizer.convert_ids_to_tokens(config.tts_pad_token_id) == "<tts_pad>"


def test_training_and_inference_load_the_thinker(plugins, tiny_dir: Path) -> None:
    from swiftcore_testing import forward_backward, lora_exclude_problems, part_problems

    from swiftcore.models import load_model, load_tokenizer, resolve_model_spec

    spec = resolve_model_spec(tiny_dir, plugins)
    model = load_model(spec, tiny_dir, plugins)
    assert type(model).__name__ == "Qwen3OmniMoeThinkerForConditionalGeneration"
    assert part_problems(model, spec) == [] and lora_exclude_problems(model, spec) == []
    ids = load_tokenizer(tiny_dir)("the quick brown fox", return_tensors="pt")["input_ids"]
    assert forward_backward(model, ids) > 0


def test_tokenizer_template_is_qwen3s_for_text_and_renders_media(tiny_dir: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_dir))
    packaged = resources.files("swiftcore_plugin_qwen3_omni") / "official" / "qwen3_omni.jinja"
    assert tokenizer.chat_template == packaged.read_text(encoding="utf-8")
    qwen3 = (resources.files("swiftcore_template_qwen") / "official" / "qwen3.jinja").read_text(encoding="utf-8")
    ours = tokenizer.apply_chat_template(CONVERSATION, tokenize=False)
    assert ours == tokenizer.apply_chat_template(CONVERSATION, tokenize=False, chat_template=qwen3)
    media = [{"role": "user", "content": [{"type": "audio", "audio": "a.wav"}, {"type": "text", "text": "hi"}]}]
    text = tokenizer.apply_chat_template(media, tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\n<|audio_start|><|audio_pad|><|audio_end|>hi<|im_end|>\n<|im_start|>assistant\n"


def test_make_tiny_is_reproducible_and_finite(plugins, tiny_dir: Path, tmp_path: Path) -> None:
    """Upstream leaves the talker's MoE experts as torch.empty memory; the plugin initialises them, so the same
    seed gives the same, finite weights."""
    import torch
    from safetensors.torch import load_file
    from swiftcore_tiny import make_tiny

    again = make_tiny(plugins.registry.get("model", "qwen3_omni_moe"), tmp_path / "again")
    first, second = load_file(str(tiny_dir / "model.safetensors")), load_file(str(again / "model.safetensors"))
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)
    assert all(torch.isfinite(t).all() for t in first.values())
    assert float(first["talker.model.layers.0.mlp.experts.gate_up_proj"].std()) > 0.01
