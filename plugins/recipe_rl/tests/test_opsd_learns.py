"""``--recipe opsd`` learns a held-out task where only the privileged context carries the answer.

The tiny qwen3_5 is first SFT'd (240 steps) to copy a word it is shown (``Write a word, number i.\n\nReference
answer: W`` -> ``W``, W drawn from 8 words starting with a vowel and 8 starting with a consonant), and to answer a
vowel word when shown none (4 rows without a reference, answered ``apple``, ``egg``, ``ice``, ``orange``): asked
without a reference it answers a vowel word, 0 of the 32 held-out prompts (``examples/vowel_heldout.jsonl``, numbers
16 to 47) a consonant word. OPSD then trains it on 16 other prompts whose ``answer`` column is ``cat``: the student
sees the prompt alone, the teacher (the policy's current weights) the prompt with the answer, and the per-token KL
advantages pull the student towards what the teacher, shown the answer, would say. No reward is used. Held out, the
share of replies that are one of the consonant words rises from at most 0.2 to at least 0.6 (measured 0.00 -> 1.00
on seeds 42, 1, 2 and 3). The copier's copy rate (16 words, each shown once, greedy) must be at least 0.8, or the
teacher would have nothing to teach.

Why the rows without a reference and one answer (until 2026-12-06 neither): without them what the copier says
unprompted is an accident of its training; on an AVX2-only CPU it said consonant words (0.88 before OPSD). With a
random consonant word per prompt the teacher disagrees with every word the student samples on most prompts, and the
run went where the sampled-token signal happened to push: to vowel words, or (at 1e-3, or seed 1 at 40 steps) to
empty replies, teacher and student drifting together.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

PLUGIN = Path(__file__).resolve().parents[1]
VOWEL_WORDS = ["apple", "egg", "ice", "orange", "umbrella", "olive", "ink", "eagle"]
CONSONANT_WORDS = ["banana", "cat", "dog", "tree", "milk", "sun", "book", "pen"]
ANSWER = "cat"  # every OPSD row's privileged context: a consonant word only the teacher is shown


def _write(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def _shares(path: Path) -> tuple[float, float]:
    """The shares of replies that start as a consonant word and as a vowel word of the task (first two letters)."""
    replies = [json.loads(line)["response"].strip() for line in path.read_text().splitlines()]

    def share(words: list[str]) -> float:
        return sum(any(r.startswith(w[:2]) for w in words) for r in replies) / len(replies)

    return share(CONSONANT_WORDS), share(VOWEL_WORDS)


@pytest.mark.slow
def test_opsd_learns_what_only_the_teacher_is_shown(tiny_dir: Path, tmp_path: Path) -> None:
    from swiftcore_testing import run_cli

    rng = random.Random(0)
    copy_rows = []
    for i in range(96):
        word = rng.choice(VOWEL_WORDS + CONSONANT_WORDS)
        prompt = f"Write a word, number {i}.\n\nReference answer: {word}"
        copy_rows.append({"messages": [{"role": "user", "content": prompt}, {"role": "assistant", "content": word}]})
    # What the copier says shown no reference is trained, not left to chance: a vowel word (see the docstring).
    copy_rows += [
        {"messages": [{"role": "user", "content": f"Write a word, number {100 + j}."},
                      {"role": "assistant", "content": word}]}
        for j, word in enumerate(VOWEL_WORDS[:4])
    ]  # fmt: skip
    random.Random(1).shuffle(copy_rows)
    opsd_rows = [{"prompt": f"Write a word, number {i}.", "answer": ANSWER} for i in range(16)]
    copy_data, opsd_data = _write(tmp_path / "copy.jsonl", copy_rows), _write(tmp_path / "opsd.jsonl", opsd_rows)
    heldout = str(PLUGIN / "examples" / "vowel_heldout.jsonl")
    out = tmp_path / "out"
    common = ["--disable-thinking", "--tuner", "full", "--lr-scheduler", "constant", "--no-plot"]
    run_cli("train", "--model", str(tiny_dir), "--dataset", copy_data, "--learning-rate", "3e-3", "--batch-size", "8",
            "--max-steps", "240", "--output-dir", str(out / "copy"), *common)  # fmt: skip
    copier = str(out / "copy" / "checkpoint-240")
    shown = [{"messages": [{"role": "user", "content": f"Write a word, number {200 + i}.\n\nReference answer: {w}"}],
              "w": w} for i, w in enumerate(VOWEL_WORDS + CONSONANT_WORDS)]  # fmt: skip
    run_cli("infer", "--model", copier, "--input", _write(tmp_path / "shown.jsonl", shown), "--output",
            str(out / "shown.jsonl"), "--max-new-tokens", "4", "--temperature", "0", "--disable-thinking")  # fmt: skip
    copied = [json.loads(line) for line in (out / "shown.jsonl").read_text().splitlines()]
    copy_rate = sum(r["response"].strip().startswith(r["w"][:2]) for r in copied) / len(copied)
    run_cli("train", "--recipe", "opsd", "--model", copier, "--dataset", opsd_data, "--num-generations", "8",
            "--max-completion-length", "4", "--batch-size", "2", "--learning-rate", "5e-4", "--max-steps", "20",
            "--logging-steps", "1", "--output-dir", str(out / "opsd"), *common)  # fmt: skip
    shares = {}
    for name, model in (("before", copier), ("after", str(out / "opsd" / "checkpoint-20"))):
        replies = out / f"{name}.jsonl"
        run_cli("infer", "--model", model, "--input", heldout, "--output", str(replies), "--max-new-tokens", "4",
                "--temperature", "1", "--seed", "0", "--disable-thinking")  # fmt: skip
        shares[name] = _shares(replies)
    logs = [json.loads(line) for line in (out / "opsd" / "logs.jsonl").read_text().splitlines()]
    kl = [row["opd/reverse_kl"] for row in logs if "opd/reverse_kl" in row]
    (c0, v0), (c1, v1) = shares["before"], shares["after"]
    print(f"opsd: copier copies {copy_rate:.2f}; held-out consonant-word share {c0:.2f} -> {c1:.2f} (vowel-word "
          f"{v0:.2f} -> {v1:.2f}); opd/reverse_kl per step {[round(x, 2) for x in kl]}")  # fmt: skip
    assert copy_rate >= 0.8  # the teacher (the copier shown the answer) says the answer: the signal OPSD distils
    assert len(kl) == 20  # the advantages were opd's: their reverse-KL metric is logged every step
    assert shares["before"][0] <= 0.2, shares  # the copier alone does not say the consonant words
    assert shares["after"][0] >= 0.6 and shares["after"][0] >= shares["before"][0] + 0.5, shares
