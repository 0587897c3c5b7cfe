"""The plugin's face: a light import, ``swiftcore export --help`` listing the schemes, the default modules kept in
full precision (from the model spec), and the refusals, each naming what to do instead."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from swiftcore_testing import run_cli


def test_importing_the_plugin_imports_no_heavy_library() -> None:
    code = (
        "import sys, swiftcore_quantize, swiftcore_quantize.plugin, swiftcore_quantize.schemes;"
        "print([m for m in ('torch', 'transformers', 'llmcompressor', 'compressed_tensors', 'datasets')"
        " if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_export_help_lists_every_scheme() -> None:
    from swiftcore_quantize.schemes import SCHEMES

    text = run_cli("export", "--help")
    assert all(name in text for name in SCHEMES) and "--calibration-dataset" in text and "--ignore" in text


def _kept(patterns: list[str], name: str) -> bool:
    # llm-compressor's matching: a plain name is exact, "re:" is re.match (anchored at the start).
    return any(re.match(p[3:], name) if p.startswith("re:") else p == name for p in patterns)


@pytest.mark.parametrize(
    ("family", "kept", "quantized"),
    [
        ("olmoe", ["lm_head", "model.layers.0.mlp.gate"], ["model.layers.0.mlp.experts.0.gate_proj",
                                                            "model.layers.0.self_attn.q_proj"]),
        ("qwen3_5", ["lm_head", "model.visual.blocks.0.attn.qkv", "model.visual.merger.linear_fc1"],
         ["model.language_model.layers.0.mlp.gate_proj", "model.language_model.layers.3.self_attn.q_proj"]),
        ("gemma4", ["model.vision_tower.encoder.layers.0.self_attn.q_proj.linear",
                    "model.audio_tower.output_proj", "model.embed_vision.embedding_projection"],
         ["model.language_model.layers.0.self_attn.q_proj"]),
    ],
)  # fmt: skip
def test_default_ignore_keeps_head_routers_and_towers(
    family: str, kept: list[str], quantized: list[str], plugins: Any
) -> None:
    from swiftcore_quantize.export import default_ignore

    patterns = default_ignore(plugins.registry.get("model", family))
    assert all(_kept(patterns, n) for n in kept), (patterns, kept)
    # The router regex (".*\.mlp\.gate") must not swallow every "mlp.gate_proj".
    assert not any(_kept(patterns, n) for n in quantized), (patterns, quantized)


def _export(*args: str) -> tuple[int, str]:
    """``swiftcore export ARGS`` in-process: the exit code, and what the user reads (output, or the error that the
    console script prints as ``Error: ...``)."""
    from click.testing import CliRunner

    from swiftcore.api.cli import cli

    result = CliRunner().invoke(cli, ["export", *args], env={"SWIFTCORE_PLUGINS": None})
    return result.exit_code, result.output + str(result.exception or "")


def test_refuses_a_lora_adapter_saying_merge_first(tmp_path: Path) -> None:
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    code, text = _export("--model", str(adapter), "--to-hf", str(tmp_path / "out"), "--quantize", "fp8")
    assert code != 0 and "--merge-lora" in text and not (tmp_path / "out").exists()


def test_refuses_a_megatron_checkpoint_saying_convert_first(tmp_path: Path) -> None:
    (tmp_path / "mcore").mkdir()
    code, text = _export("--model", str(tmp_path / "mcore"), "--to-hf", str(tmp_path / "out"), "--quantize", "w4a16")
    assert code != 0 and "no config.json" in text and "--to-hf first" in text


def test_refuses_an_already_quantized_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "q").mkdir()
    (tmp_path / "q" / "config.json").write_text(json.dumps({"quantization_config": {"quant_method": "gptq"}}))
    code, text = _export("--model", str(tmp_path / "q"), "--to-hf", str(tmp_path / "out"), "--quantize", "w4a16")
    assert code != 0 and "already quantized (gptq)" in text


def test_quantize_goes_with_to_hf(tiny_model_dir: Any, tmp_path: Path) -> None:
    model = str(tiny_model_dir("olmoe"))
    code, text = _export("--model", model, "--merge-lora", str(tmp_path / "o"), "--quantize", "fp8")
    assert code == 2 and "--quantize writes with --to-hf" in text


@pytest.mark.slow
def test_group_size_that_does_not_divide_is_refused_naming_the_layers(tiny_model_dir: Any, tmp_path: Path) -> None:
    """The tiny Qwen3.5's linears have 64 input columns: the default group of 128 cannot apply."""
    pytest.importorskip("llmcompressor")
    out = tmp_path / "out"
    code, text = _export(
        "--model", str(tiny_model_dir("qwen3_5")), "--to-hf", str(out), "--quantize", "w4a16",
        "--calibration-samples", "2",
    )  # fmt: skip
    assert code != 0, text
    assert "model.language_model.layers.0.mlp.gate_proj (columns=64, group_size=128)" in text
    assert "--group-size" in text and not out.exists()


def test_refuses_a_head_checkpoint_of_an_unknown_format(tmp_path: Path) -> None:
    head = tmp_path / "head"
    head.mkdir()
    (head / "config.json").write_text(json.dumps({"model_type": "qwen3_5_text"}))
    (head / "swiftcore_head.json").write_text(json.dumps({"task": "embedding", "format": "onnx"}))
    code, text = _export("--model", str(head), "--to-hf", str(tmp_path / "out"), "--quantize", "w4a16")
    assert code != 0 and "head format 'onnx'" in text and "cannot be quantized" in text


def test_a_head_keeps_its_score_layer() -> None:
    """A classification or reranker head saved as ``*ForSequenceClassification`` keeps ``score`` in full precision;
    one saved as decoder + ``score.safetensors`` keeps that file as it is."""
    from swiftcore_quantize.heads import head_ignore, head_kept_files

    seq = {"task": "classification", "format": "transformers-sequence-classification"}
    (pattern,) = head_ignore(seq)
    assert pattern.startswith("re:") and re.match(pattern[3:], "score") and not re.match(pattern[3:], "scores_proj")
    assert head_kept_files({"task": "reranker", "format": "swiftcore-score"}) == ("score.safetensors",)
    assert head_ignore({"task": "embedding", "format": "sentence-transformers"}) == []


def test_smoothquant_finds_the_family_mappings_for_a_head_backbone(tiny_model_dir: Any) -> None:
    """llm-compressor looks SmoothQuant's mappings up by causal-LM class name; a head's backbone
    (``Qwen3_5TextModel``) took the defaults, which match Qwen3.5's linear-attention norms too and fail ("must match
    a single smooth layer"). It now takes Qwen3.5's: only the full-attention layers' norms smooth q/k/v."""
    pytest.importorskip("llmcompressor")
    import torch
    import transformers
    from swiftcore_quantize.schemes import awq_mappings, smoothquant_mappings

    config = transformers.AutoConfig.from_pretrained(tiny_model_dir("qwen3_5")).text_config
    with torch.device("meta"):
        backbone = transformers.Qwen3_5TextModel(config)
    attention, mlp = smoothquant_mappings(backbone)
    full = [str(i) for i, kind in enumerate(config.layer_types) if kind == "full_attention"]
    assert full and attention.smooth_layers == rf"re:.*layers\.({'|'.join(full)})\.input_layernorm$"
    assert mlp.balance_layers == [r"re:.*mlp\.gate_proj$", r"re:.*mlp\.up_proj$"]
    # AWQ's lookup is the same (its defaults fail alike: "AWQ needs to match a single smoothlayer").
    smooth = [m.smooth_layer for m in awq_mappings(backbone)]
    assert not any(s == "re:.*input_layernorm$" for s in smooth) and any(full[0] in s for s in smooth), smooth
    with torch.device("meta"):  # a class llm-compressor knows itself: left to it
        assert smoothquant_mappings(transformers.Qwen3_5ForCausalLM(config)) is None
