"""NVFP4 exports of the trained tiny Qwen3.5 (``swiftcore export --to-hf OUT --quantize nvfp4`` and ``nvfp4a16``),
judged on a CPU as test_outcomes.py judges the other schemes: plain transformers loads the checkpoint unchanged
(compressed-tensors' ``nvfp4-pack-quantized`` format), the kept modules are bit-identical, the logits stay within a
stated tolerance of the fp32 model's, the greedy answers to the trained facts do not change, and the weights shrink.

One difference: compressed-tensors 0.20.1 decompresses FP4 weights to bfloat16, so a float32 load fails at the first
matmul (``expected m1 and m2 to have the same dtype, but got: float != c10::BFloat16``) and ``.float()`` is refused
on a quantized model; the export is loaded with ``dtype=torch.bfloat16``, as a user on a CPU loads it. Its logits
are compared with the fp32 model's; the same fp32 checkpoint loaded in bfloat16 is measured too, to show how much of
the error is bfloat16's. Running NVFP4 kernels needs a GPU (see the scheme's note); this is the checkpoint's
correctness, not its speed.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("llmcompressor")

pytestmark = pytest.mark.slow  # one training run (shared with test_outcomes.py in a session) and two exports

FAMILY = "qwen3_5"

#: scheme -> (largest |logit - fp32 logit| / max |fp32 logit|, largest size ratio), on the trained tiny Qwen3.5
#: loaded in bfloat16 (printed with -s; the unquantized checkpoint loaded in bfloat16: 0.0052); logit bounds about 2x
#: the measured error.
SCHEMES: dict[str, tuple[float, float]] = {
    "nvfp4": (0.25, 0.52),  # measured 0.1268, 0.500
    "nvfp4a16": (0.16, 0.52),  # measured 0.0788, 0.499
}


@pytest.fixture(scope="module")
def reference(trained: Any, judge: Any) -> dict[str, Any]:
    """The trained checkpoint's fp32 logits and greedy answers (checked to be the trained answers), its tensors, and
    the relative logit error of the same checkpoint loaded in bfloat16 (the floor a bfloat16 load starts from)."""
    from safetensors.torch import load_file

    checkpoint = trained(FAMILY)
    samples = judge.samples(checkpoint)
    logits, answers = judge.logits_and_answers(judge.plain(checkpoint), samples)
    for sample, answer in zip(samples, answers, strict=True):
        assert answer == [t for t in sample["labels"][1:] if t != -100]  # a model that learned its facts
    bf16_logits, bf16_answers = judge.logits_and_answers(judge.plain(checkpoint, torch.bfloat16), samples)
    bf16_error = judge.relative_error(bf16_logits, logits)
    print(f"unquantized, bfloat16: relative logit error {bf16_error:.4f}")
    assert bf16_answers == answers
    return {
        "samples": samples,
        "logits": logits,
        "answers": answers,
        "tensors": load_file(checkpoint / "model.safetensors"),
        "bf16_error": bf16_error,
    }


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_nvfp4_export_loads_on_cpu_and_keeps_the_trained_model(
    scheme: str, exported: Any, reference: dict[str, Any], judge: Any
) -> None:
    """The export's config is compressed-tensors NVFP4 (FP4 weights in groups of 16; ``nvfp4`` also FP4
    activations); transformers loads it on the CPU in bfloat16 with no missing weight; the head and vision tower are
    written bit for bit, the decoder's linears packed; the logits within the scheme's bound of fp32's and further from
    them than the unquantized bfloat16 load's (the quantization is really applied); greedy answers unchanged;
    smaller."""
    from safetensors.torch import load_file

    logit_tolerance, size_bound = SCHEMES[scheme]
    out, text = exported(FAMILY, scheme)
    config = json.loads((out / "config.json").read_text())["quantization_config"]
    assert config["quant_method"] == "compressed-tensors" and config["format"] == "nvfp4-pack-quantized", config
    weights = next(iter(config["config_groups"].values()))["weights"]
    assert weights["num_bits"] == 4 and weights["type"] == "float" and weights["group_size"] == 16, weights

    model = judge.plain(out, torch.bfloat16)
    written = load_file(out / "model.safetensors")
    kept = [n for n in reference["tensors"] if n.startswith(("lm_head.", "model.visual."))]
    assert kept and all(torch.equal(written[n], reference["tensors"][n]) for n in kept)
    packed = [n for n in written if "language_model" in n and n.endswith("mlp.down_proj.weight_packed")]
    assert len(packed) == 4, f"{scheme}: the decoder's linears were not quantized ({sorted(written)[:20]})"

    logits, answers = judge.logits_and_answers(model, reference["samples"])
    error = judge.relative_error(logits, reference["logits"])
    report = json.loads((out / "swiftcore_quantize.json").read_text())
    print(f"{scheme}: relative logit error {error:.4f} (bfloat16 alone {reference['bf16_error']:.4f}), "
          f"size ratio {report['ratio']:.3f}")  # fmt: skip
    assert reference["bf16_error"] < error <= logit_tolerance, (scheme, error, reference["bf16_error"])
    assert answers == reference["answers"], f"{scheme}: greedy answers changed"
    assert report["ratio"] <= size_bound
    assert f"({report['ratio']:.0%})" in text
