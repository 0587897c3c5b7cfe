"""LoRA adapters: the base model an adapter names, and merging one (``swiftcore export --merge-lora``, which the
core hands to this plugin through the export hook)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from swiftcore_infer.merge import merge_lora

from swiftcore import SwiftcoreError, load_plugins
from swiftcore.models.adapters import base_model_dir


@pytest.fixture(scope="module")
def adapter(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A tiny Qwen3 base (with a tokenizer) and a LoRA adapter with non-zero B matrices."""
    import transformers
    from peft import LoraConfig, get_peft_model
    from tokenizers import Tokenizer, models, pre_tokenizers

    root = tmp_path_factory.mktemp("lora")
    torch.manual_seed(0)
    config = transformers.Qwen3Config(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        vocab_size=256,
        intermediate_size=128,
    )
    transformers.Qwen3ForCausalLM(config).save_pretrained(root / "base")
    vocab = {f"w{i}": i for i in range(255)} | {"<unk>": 255}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>").save_pretrained(root / "base")
    base = transformers.Qwen3ForCausalLM.from_pretrained(root / "base")
    peft_model = get_peft_model(base, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    peft_model.save_pretrained(root / "adapter")
    cfg_file = root / "adapter" / "adapter_config.json"
    cfg = json.loads(cfg_file.read_text())
    cfg["base_model_name_or_path"] = str(root / "base")
    cfg_file.write_text(json.dumps(cfg))
    return root / "base", root / "adapter"


def test_merged_model_matches_base_plus_adapter(adapter: tuple[Path, Path], tmp_path: Path) -> None:
    import transformers
    from peft import PeftModel

    base_dir, adapter_dir = adapter
    out = merge_lora(adapter_dir, tmp_path / "merged", load_plugins(env={}))
    assert (out / "tokenizer.json").is_file() and (out / "config.json").is_file()
    assert not (out / "adapter_config.json").exists()
    tokens = torch.randint(0, 256, (1, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        merged = transformers.AutoModelForCausalLM.from_pretrained(out)
        reference = PeftModel.from_pretrained(transformers.AutoModelForCausalLM.from_pretrained(base_dir), adapter_dir)
        base = transformers.AutoModelForCausalLM.from_pretrained(base_dir)
        got, want, plain = (m(input_ids=tokens).logits for m in (merged, reference, base))
    assert torch.allclose(got, want, atol=1e-5)
    assert not torch.allclose(got, plain, atol=1e-3)  # the adapter really changed the model


def test_base_must_be_a_local_directory(adapter: tuple[Path, Path], tmp_path: Path) -> None:
    import shutil

    _, adapter_dir = adapter
    copy = tmp_path / "adapter"
    shutil.copytree(adapter_dir, copy)
    cfg = json.loads((copy / "adapter_config.json").read_text())
    (copy / "adapter_config.json").write_text(json.dumps({**cfg, "base_model_name_or_path": "Qwen/Qwen3-0.6B"}))
    with pytest.raises(SwiftcoreError, match="'Qwen/Qwen3-0.6B' is not a local model directory"):
        base_model_dir(copy)
    with pytest.raises(SwiftcoreError, match="no LoRA adapter to merge"):
        merge_lora(tmp_path, tmp_path / "merged", load_plugins(env={}))
    assert not (tmp_path / "merged").exists()


def test_merge_lora_via_cli(adapter: tuple[Path, Path], tmp_path: Path) -> None:
    import subprocess
    import sys

    from safetensors.torch import load_file

    _, adapter_dir = adapter
    swiftcore = str(Path(sys.executable).parent / "swiftcore")
    done = subprocess.run(
        [swiftcore, "export", "--model", str(adapter_dir), "--merge-lora", str(tmp_path / "m")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "merged LoRA adapter into its base" in done.stdout
    weights = load_file(tmp_path / "m" / "model.safetensors")
    assert not any("lora" in k for k in weights)
    assert "model.layers.0.self_attn.q_proj.weight" in weights
