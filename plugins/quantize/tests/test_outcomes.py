"""Quantized exports of a trained tiny Qwen3.5 (``swiftcore export --to-hf OUT --quantize SCHEME``), judged by what a
user ships: plain transformers loads the checkpoint unchanged (compressed-tensors, no missing or unexpected weight),
the modules kept in full precision are bit-identical, the logits stay within a per-scheme tolerance of the
fp32 model's, the greedy answers to the trained facts do not change, and the weights shrink.

Qwen3.5 is the dense family: its vision tower is kept by default (the model spec's parts), its text decoder's
linears are quantized. A tiny model's embeddings and head (kept) are a large share of its bytes, so the size
ratios here are far above a real model's (about 0.28 for w4a16 on a 7B one).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("llmcompressor")

pytestmark = pytest.mark.slow  # one training run and five exports: a few minutes on 2 cores

FAMILY = "qwen3_5"
# The tiny Qwen3.5's hidden size is 64: groups of 16 columns divide every quantized linear.
GROUPED = ("--group-size", "16")
# AWQ's asymmetric zero points are packed eight to an int32 along the output rows; compressed-tensors 0.20.1 cannot
# unpack them when a layer has at most 8 outputs (one word: "self.stride(-1) must be 1 to view Int as Byte"), which
# only the tiny model's linear-attention gates (4 heads) have. Real models have 32 or more heads.
TINY_AWQ = ("--ignore", r"re:.*linear_attn\.in_proj_[ab]$")
EXTRA = {"w4a16": GROUPED, "w8a16": GROUPED, "awq": GROUPED + TINY_AWQ}

#: scheme -> (compressed-tensors format, largest |logit - fp32 logit| / max |fp32 logit|, largest size ratio).
#: Measured on the trained tiny Qwen3.5 (printed with -s): logit bounds about 2x the measured error.
SCHEMES: dict[str, tuple[str, float, float]] = {
    "w8a8-int8": ("int-quantized", 0.025, 0.60),  # measured 0.0107, 0.569
    "w8a16": ("pack-quantized", 0.01, 0.62),  # measured 0.0028, 0.600
    "w4a16": ("pack-quantized", 0.08, 0.55),  # measured 0.0389, 0.526
    "awq": ("pack-quantized", 0.10, 0.56),  # measured 0.0522, 0.534
    "fp8": ("float-quantized", 0.08, 0.60),  # measured 0.0368, 0.569
    "fp8-static": ("float-quantized", 0.07, 0.60),  # measured 0.0349, 0.563
}


@pytest.fixture(scope="module")
def reference(trained: Any, judge: Any) -> dict[str, Any]:
    """The trained fp32 checkpoint's logits and greedy answers, and its tensors."""
    from safetensors.torch import load_file

    checkpoint = trained(FAMILY)
    samples = judge.samples(checkpoint)
    logits, answers = judge.logits_and_answers(judge.plain(checkpoint), samples)
    tensors = load_file(checkpoint / "model.safetensors")
    return {"samples": samples, "logits": logits, "answers": answers, "tensors": tensors}


def test_trained_checkpoint_answers_its_facts(reference: dict[str, Any]) -> None:
    """The reference is a model that learned the task (else "answers unchanged" would prove little): its greedy
    answer tokens are the trained answers."""
    for sample, answer in zip(reference["samples"], reference["answers"]):
        assert answer == [t for t in sample["labels"][1:] if t != -100]


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_quantized_export_keeps_the_trained_model(
    scheme: str, exported: Any, reference: dict[str, Any], judge: Any
) -> None:
    fmt, logit_tolerance, size_bound = SCHEMES[scheme]
    extra = EXTRA.get(scheme, ())
    out, text = exported(FAMILY, scheme, *extra)
    config = json.loads((out / "config.json").read_text())["quantization_config"]
    assert config["quant_method"] == "compressed-tensors" and config["format"] == fmt, config

    model = judge.plain(out)
    # Kept modules: the output head and the vision tower, bit for bit.
    from safetensors.torch import load_file

    written = load_file(out / "model.safetensors")
    kept = [n for n in reference["tensors"] if n.startswith(("lm_head.", "model.visual."))]
    assert kept and all(torch.equal(written[n], reference["tensors"][n]) for n in kept)
    scaled = [n for n in written if "language_model" in n and n.endswith("mlp.down_proj.weight_scale")]
    assert len(scaled) == 4, f"{scheme}: the decoder's linears were not quantized ({scaled})"

    logits, answers = judge.logits_and_answers(model, reference["samples"])
    error = judge.relative_error(logits, reference["logits"])
    report = json.loads((out / "swiftcore_quantize.json").read_text())
    print(f"{scheme}: relative logit error {error:.4f}, size ratio {report['ratio']:.3f}")
    assert error <= logit_tolerance, f"{scheme}: logits moved {error:.4f} of their range (> {logit_tolerance})"
    assert answers == reference["answers"], f"{scheme}: greedy answers changed"
    assert report["ratio"] <= size_bound and report["bytes_after"] == sum(
        f.stat().st_size for f in out.glob("*.safetensors")
    )
    assert f"({report['ratio']:.0%})" in text  # the size reduction is reported to the user
    # What the checkpoint carried for serving (tokenizer, chat template, processor, swiftcore_args.json) came along;
    # its training state (optimizer, scheduler, RNG) did not.
    names = {f.name for f in out.iterdir()}
    assert {"tokenizer.json", "chat_template.jinja", "swiftcore_args.json", "generation_config.json"} <= names
    assert not names & {"optimizer.pt", "scheduler.pt", "trainer_state.json", "training_args.bin"}


def test_a_process_group_in_the_process_does_not_send_a_cpu_export_to_the_accelerator(
    trained: Any, facts_file: Path, tmp_path: Path
) -> None:
    """With a ``torch.distributed`` group initialised (a CPU torchrun; in the suite, an earlier test's megatron
    group), llm-compressor took its distributed path and all-reduced on an accelerator this host lacks
    ("'NoneType' object has no attribute 'type'" in AWQ); a CPU-only export keeps to itself."""
    import torch.distributed as dist
    from swiftcore_testing import free_port, run_cli

    owned = not dist.is_initialized()
    if owned:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        out = tmp_path / "out"
        run_cli(
            "export", "--model", str(trained("qwen3_5")), "--to-hf", str(out), "--quantize", "awq",
            "--calibration-dataset", str(facts_file), "--calibration-samples", "4", *EXTRA["awq"],
        )  # fmt: skip
        assert (out / "config.json").is_file()
    finally:
        if owned:
            dist.destroy_process_group()
