"""The thinker as a family: ``swiftcore train`` (LoRA) then ``swiftcore infer`` answer held-out questions.

The task: a user turn of three filler words and a key, ``yes`` or ``no``; the reply is ``good`` or ``bad`` by the
key. The held-out questions are filler combinations training never saw, so right answers mean the key was learned,
not the rows. The untrained tiny model answers none right (random weights).
"""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest
from swiftcore_testing import run_swiftcore, user_env

FILLER = ["the", "quick", "brown", "fox", "lazy", "dog", "sun", "water", "city", "model", "data", "tree"]
STEPS = 30


def _cli(*args: str) -> subprocess.CompletedProcess:
    proc = run_swiftcore(*args, timeout=900, env=user_env())
    assert proc.returncode == 0, f"swiftcore {args[0]} failed:\n{proc.stderr[-3000:]}"
    return proc


def _rows(count: int, rng: random.Random, avoid: set[str] = frozenset()) -> list[dict]:
    rows = []
    while len(rows) < count:
        key = ("yes", "no")[len(rows) % 2]
        question = " ".join(rng.sample(FILLER, 3)) + " " + key
        if question not in avoid:
            reply = "good" if key == "yes" else "bad"
            rows.append({"messages": [{"role": "user", "content": question}, {"role": "assistant", "content": reply}]})
    return rows


def _accuracy(model: Path, questions: Path, out: Path) -> float:
    _cli("infer", "--model", str(model), "--input", str(questions), "--output", str(out), "--max-new-tokens", "4")
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    return sum(row["response"].strip() == row["labels"] for row in rows) / len(rows)


@pytest.mark.slow
def test_lora_on_the_thinker_learns_a_held_out_task(tiny_dir: Path, tmp_path: Path) -> None:
    rng = random.Random(0)
    train = _rows(32, rng)
    held_out = _rows(16, rng, avoid={row["messages"][0]["content"] for row in train})
    for name, rows in (("train", train), ("held_out", held_out)):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")

    before = _accuracy(tiny_dir, tmp_path / "held_out.jsonl", tmp_path / "before.jsonl")
    _cli(
        "train",
        "--model",
        str(tiny_dir),
        "--dataset",
        str(tmp_path / "train.jsonl"),
        "--tuner",
        "lora",
        "--learning-rate",
        "1e-2",
        "--batch-size",
        "8",
        "--max-steps",
        str(STEPS),
        "--save-steps",
        str(STEPS),
        "--logging-steps",
        "5",
        "--max-length",
        "128",
        "--no-plot",
        "--output-dir",
        str(tmp_path / "run"),
    )
    checkpoint = tmp_path / "run" / f"checkpoint-{STEPS}"
    assert (checkpoint / "adapter_model.safetensors").is_file()
    after = _accuracy(checkpoint, tmp_path / "held_out.jsonl", tmp_path / "after.jsonl")
    print(f"held-out accuracy {before:.2f} -> {after:.2f}")
    assert before <= 0.25 and after >= 0.9
