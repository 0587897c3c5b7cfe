"""HF -> Megatron-core -> HF through ``swiftcore export`` on checkpoints that ``swiftcore train`` wrote (issue 26).

The bridge tests (``megatron_bridges/*/tests``) round-trip fresh ``make-tiny`` checkpoints. Here the input is
what a user exports: a full fine-tuning checkpoint (``swiftcore train --tuner full``, 2 steps at learning
rate 1e-3, so every trainable tensor, norms included, has moved off its initial value), and for Qwen3.5 also a
LoRA adapter from ``swiftcore train`` merged by ``swiftcore export --merge-lora``. For each:

1. ``swiftcore export --model CKPT --to-mcore MC --check-parity`` (the HF and megatron models run on the same
   tokens; the command fails on a logit mismatch);
2. ``swiftcore export --model MC --to-hf BACK``;
3. every tensor of BACK equals CKPT's bit for bit (same names, dtypes, values), and the logits of BACK and
   CKPT, each loaded with plain transformers, are identical (so ``config.json`` came back complete too).

The CLI runs in-process (click's ``CliRunner``), as in ``test_lora_merge_families.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from swiftcore_testing import run_cli

torch = pytest.importorskip("torch")
pytest.importorskip("megatron.core")

pytestmark = pytest.mark.slow  # several `swiftcore train` / `export` runs: about a minute on 2 cores

# Families with an installed bridge (megatron_bridges/*); a trained full checkpoint of each is round-tripped.
FAMILIES = ["qwen3_5", "gemma4", "deepseek_v4", "qwen3_asr", "mimo_v2_flash", "olmoe", "glm5"]

ROWS = [
    {"messages": [{"role": "user", "content": f"Say {word}."}, {"role": "assistant", "content": f"{word} {word}."}]}
    for word in ("alpha", "bravo", "charlie", "delta")
]


swiftcore_cli = run_cli  # in-process: torch and transformers load once for the module


def train(base: Path, root: Path, tuner: str, steps: int, learning_rate: str) -> Path:
    """``swiftcore train`` on :data:`ROWS`; the last checkpoint directory."""
    data = root / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    swiftcore_cli(
        "train", "--model", str(base), "--dataset", str(data), "--output-dir", str(root / "run"),
        "--tuner", tuner, "--max-steps", str(steps), "--batch-size", str(len(ROWS)),
        "--learning-rate", learning_rate, "--lr-scheduler", "constant", "--max-length", "128",
        "--save-steps", str(steps), "--no-plot", "--seed", "0",
    )  # fmt: skip
    return root / "run" / f"checkpoint-{steps}"


def safetensors_of(model_dir: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    tensors: dict[str, Any] = {}
    for file in sorted(model_dir.glob("*.safetensors")):
        tensors.update(load_file(str(file)))
    assert tensors, f"{model_dir}: no safetensors"
    return tensors


def plain_logits(model_dir: Path, input_ids: Any) -> Any:
    """Logits of the checkpoint loaded with plain transformers (the class its config.json names), float32."""
    import transformers

    config = json.loads((model_dir / "config.json").read_text())
    model = getattr(transformers, config["architectures"][0]).from_pretrained(str(model_dir), dtype=torch.float32)
    with torch.no_grad():
        return model.eval()(input_ids=input_ids, use_cache=False).logits


def assert_round_trip(checkpoint: Path, work: Path, base: Path) -> None:
    """Export ``checkpoint`` to mcore (parity checked) and back; BACK must equal it bit for bit, logits too."""
    mcore, back = work / "mcore", work / "back"
    out = swiftcore_cli("export", "--model", str(checkpoint), "--to-mcore", str(mcore), "--check-parity")
    assert "logit parity OK" in out, out
    swiftcore_cli("export", "--model", str(mcore), "--to-hf", str(back))

    before, after = safetensors_of(checkpoint), safetensors_of(back)
    base_tensors = safetensors_of(base)
    assert sorted(after) == sorted(before)
    for name, tensor in before.items():
        assert after[name].dtype == tensor.dtype, name
        assert torch.equal(after[name], tensor), f"{name} changed in the round trip"
    # The trained checkpoint really differs from its base (else this would be the fresh-checkpoint test again).
    moved = [n for n, t in before.items() if n in base_tensors and not torch.equal(t, base_tensors[n])]
    assert len(moved) >= len(before) // 4, f"only {len(moved)} of {len(before)} tensors moved in training"

    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(str(checkpoint))("Say alpha, then bravo.", add_special_tokens=False)
    input_ids = torch.tensor([ids["input_ids"]])
    got, expected = plain_logits(back, input_ids), plain_logits(checkpoint, input_ids)
    assert torch.equal(got, expected), f"logits differ after the round trip: max |diff| {(got - expected).abs().max()}"


@pytest.mark.parametrize("family", FAMILIES)
def test_trained_full_checkpoint_round_trips_bit_exact(family: str, tiny_model_dir, tmp_path: Path) -> None:
    base = tiny_model_dir(family)
    checkpoint = train(base, tmp_path, "full", steps=2, learning_rate="1e-3")
    assert (checkpoint / "model.safetensors").is_file() and not (checkpoint / "adapter_config.json").exists()
    assert_round_trip(checkpoint, tmp_path, base)


def test_lora_merged_checkpoint_round_trips_bit_exact(tiny_model_dir, tmp_path: Path) -> None:
    base = tiny_model_dir("qwen3_5")
    adapter = train(base, tmp_path, "lora", steps=3, learning_rate="1e-2")
    merged = tmp_path / "merged"
    swiftcore_cli("export", "--model", str(adapter), "--merge-lora", str(merged))
    assert_round_trip(merged, tmp_path, base)
