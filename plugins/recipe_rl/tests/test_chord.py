"""CHORD (Zhang et al., arXiv:2508.11408): ``L = (1 - mu) L_GRPO + mu L_SFT`` on the ``grpo`` recipe.

- the ``mu`` schedule against values worked out by hand at the warmup, the peak, the cosine's middle, the valley and
  after it;
- the trainer's loss on a fixed GRPO batch (fixed log-probs, as ``test_loss_variants.py``) plus expert samples run
  through the tiny model, against ``(1 - mu) L_GRPO + mu L_SFT`` computed here in float64 from the formulas (with and
  without CHORD-phi);
- the options' checks, and the flags refused by the other recipes;
- a short run of the recipe on the toy task: ``chord/mu`` logged per step as scheduled, and the SFT loss on the
  expert data falling.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

# ------------------------------------------------------------------------------------------------ schedule

#: warmup 4 steps to 0.8, then a half cosine over 10 steps to 0.1: (step, mu) worked out by hand.
SCHEDULE = {"warmup_steps": 4, "decay_steps": 10, "peak": 0.8, "valley": 0.1}
HAND = [
    (0, 0.0),  # warmup starts at 0
    (1, 0.2),  # 0.8 * 1/4
    (3, 0.6),  # 0.8 * 3/4
    (4, 0.8),  # the peak: cos(0) = 1
    (9, 0.45),  # the cosine's middle: cos(pi/2) = 0, (0.8 + 0.1) / 2
    (6, 0.1 + 0.35 * (1 + math.cos(math.pi / 5))),  # 2 of 10 decay steps
    (14, 0.1),  # the valley: cos(pi) = -1
    (15, 0.1),
    (1000, 0.1),  # after: stays at the valley
]


@pytest.mark.parametrize(("step", "want"), HAND)
def test_mu_schedule_equals_the_hand_values(step: int, want: float) -> None:
    from swiftcore_recipe_rl.chord import mu_schedule

    assert mu_schedule(step, **SCHEDULE) == pytest.approx(want, abs=1e-12)


def test_mu_schedule_without_warmup_starts_at_the_peak() -> None:
    from swiftcore_recipe_rl.chord import mu_schedule

    assert mu_schedule(0, warmup_steps=0, decay_steps=5, peak=0.9, valley=0.05) == pytest.approx(0.9)
    assert mu_schedule(3, warmup_steps=3, decay_steps=0, peak=0.9, valley=0.05) == 0.05  # no decay: straight down


# ------------------------------------------------------------------------------------------------ fixed batch

LENGTHS = [3, 5, 2, 4, 1, 4, 3, 2]
ADVANTAGES = [0.9, -0.6, 1.3, -1.0, 0.2, 0.7, -0.4, -1.1]
NUM_ITEMS = 2.0 * sum(LENGTHS)
#: expert samples: ids of the tiny vocabulary, -100 over each "prompt", rows of different lengths (padding).
EXPERT = [
    {"input_ids": [11, 12, 13, 14, 15, 16], "labels": [-100, -100, -100, 14, 15, 16]},
    {"input_ids": [21, 22, 23, 24], "labels": [-100, -100, 23, 24]},
    {"input_ids": [31, 32, 33, 34, 35, 36, 37, 38], "labels": [-100, -100, -100, -100, -100, 36, 37, 38]},
]


def logps(offset: float) -> list[list[float]]:
    return [
        [-0.8 - 0.1 * t - 0.07 * i + offset * math.cos(1.3 * i + t) for t in range(n)] for i, n in enumerate(LENGTHS)
    ]


CURRENT, OLD = logps(0.25), logps(0.0)


def options(**method: Any) -> Any:
    from swiftcore_recipe_rl.options import GRPOOptions

    return GRPOOptions(reward=("column",), num_generations=4, max_completion_length=6, **method)


def grpo_and_chord_loss(trainer: Any, monkeypatch: pytest.MonkeyPatch, step: int, **chord: Any) -> Any:
    """The trainer's loss at ``step`` on the fixed GRPO batch (TRL's dapo, eps 0.2, fixed log-probs) with CHORD
    configured from ``chord`` on :data:`EXPERT` (one batch: all of it)."""
    import torch
    import trl
    from swiftcore_recipe_rl.trainer import configure_loss_variants

    width = max(LENGTHS)
    current = torch.zeros(len(LENGTHS), width)
    old = torch.zeros(len(LENGTHS), width)
    for i, (c, o) in enumerate(zip(CURRENT, OLD, strict=True)):
        current[i, : len(c)], old[i, : len(o)] = torch.tensor(c), torch.tensor(o)
    mask = (torch.arange(width)[None, :] < torch.tensor(LENGTHS)[:, None]).long()

    def fixed(self: Any, model: Any, input_ids: Any, attention_mask: Any, keep: int, **kw: Any) -> Any:
        return current, torch.ones_like(current), None

    monkeypatch.setattr(trl.GRPOTrainer, "_get_per_token_logps_and_entropies", fixed)
    settings = {"loss_type": "dapo", "importance_sampling_level": "token", "epsilon_low": 0.2, "epsilon_high": 0.2,
                "beta": 0.0, "current_gradient_accumulation_steps": 1}  # fmt: skip
    for name, value in settings.items():
        monkeypatch.setattr(trainer, name, value, raising=False)
    for name in ("chord", "chord_schedule", "chord_phi"):  # restored after the test
        monkeypatch.setattr(trainer, name, getattr(trainer, name), raising=False)
    monkeypatch.setattr(trainer.state, "global_step", step)
    configure_loss_variants(
        trainer, options(chord_dataset="expert.jsonl", chord_batch_size=len(EXPERT), **chord), chord_samples=EXPERT
    )
    trainer.model.train()
    inputs = {
        "prompt_ids": torch.ones(len(LENGTHS), 3, dtype=torch.long),
        "prompt_mask": torch.ones(len(LENGTHS), 3, dtype=torch.long),
        "completion_ids": torch.ones(len(LENGTHS), width, dtype=torch.long),
        "completion_mask": mask,
        "advantages": torch.tensor(ADVANTAGES),
        "old_per_token_logps": old,
        "num_items_in_batch": torch.tensor(NUM_ITEMS),
    }
    return trainer._compute_loss(trainer.model, inputs)


def reference_grpo() -> float:
    """DAPO's token-level clipped loss (eps 0.2 both sides), summed over tokens / the generation batch's tokens."""
    total = 0.0
    for c, o, a in zip(CURRENT, OLD, ADVANTAGES, strict=True):
        for lp, lo in zip(c, o, strict=True):
            r = math.exp(lp - lo)
            total += -min(r * a, min(max(r, 0.8), 1.2) * a)
    return total / NUM_ITEMS


def reference_sft(model: Any, phi: bool) -> float:
    """The expert samples' token-mean cross-entropy in float64 from the model's logits, each row run alone (no
    padding), ``-log p`` of label ``t`` from the logits at ``t - 1``; with ``phi`` weighted by ``p (1 - p)``."""
    import torch

    total, count = 0.0, 0
    with torch.no_grad():
        for row in EXPERT:
            logits = model(input_ids=torch.tensor([row["input_ids"]])).logits[0].double()
            for t, label in enumerate(row["labels"]):
                if label == -100:
                    continue
                lp = (logits[t - 1, label] - torch.logsumexp(logits[t - 1], dim=0)).item()
                p = math.exp(lp)
                total += -lp * (p * (1 - p) if phi else 1.0)
                count += 1
    return total / count


@pytest.mark.parametrize(
    ("step", "phi", "chunk"), [(1, False, 0), (6, True, 0), (9, False, 0), (20, True, 0), (6, True, 2), (9, False, 2)]
)
def test_the_loss_is_the_mix_of_grpo_and_sft(
    grpo_trainer: Any, monkeypatch: Any, step: int, phi: bool, chunk: int
) -> None:
    """``(1 - mu) L_GRPO + mu L_SFT``, ``mu`` of the step (warmup, cosine, valley), CHORD-phi on and off; ``chunk``:
    the expert batch's log-probs from the chunked lm_head, 2 tokens' logits at a time (0: the full logits)."""
    grpo, sft = reference_grpo(), reference_sft(grpo_trainer.model, phi)
    monkeypatch.setattr(grpo_trainer, "loss_chunk_size", chunk, raising=False)
    if chunk:  # the full-logits path cannot be taken: the chunked head must have scored the expert batch
        monkeypatch.setattr(grpo_trainer.model, "forward", lambda *a, **k: pytest.fail("full expert logits"))
    chord = {"chord_mu_warmup_steps": 4, "chord_mu_decay_steps": 10, "chord_mu_peak": 0.8, "chord_mu_valley": 0.1}
    loss = grpo_and_chord_loss(grpo_trainer, monkeypatch, step, chord_phi=phi, **chord)
    mu = dict(HAND)[step] if step in dict(HAND) else 0.1
    want = (1 - mu) * grpo + mu * sft
    print(f"chord step {step} phi={phi}: mu {mu:.4f} grpo {grpo:.6f} sft {sft:.6f} -> {loss.item():.6f} vs {want:.6f}")
    assert abs(loss.item() - want) < 1e-5
    metrics = grpo_trainer._metrics["train"]
    assert metrics["chord/mu"][-1] == pytest.approx(mu, abs=1e-12)
    assert metrics["chord/sft_loss"][-1] == pytest.approx(sft, abs=1e-5)


def test_mu_zero_skips_the_expert_batch(grpo_trainer: Any, monkeypatch: Any) -> None:
    """At ``mu = 0`` (the warmup's first step) the loss is TRL's alone and no expert batch is taken."""
    from swiftcore_recipe_rl.chord import ExpertBatches

    taken = []
    monkeypatch.setattr(ExpertBatches, "next_batch", lambda *a: taken.append(a))
    loss = grpo_and_chord_loss(grpo_trainer, monkeypatch, 0, chord_mu_warmup_steps=4)
    assert not taken
    assert abs(loss.item() - reference_grpo()) < 1e-6
    assert grpo_trainer._metrics["train"]["chord/mu"][-1] == 0.0


def test_expert_batches_cycle_over_every_sample() -> None:
    from swiftcore_recipe_rl.chord import ExpertBatches

    batches = ExpertBatches(EXPERT, 2, pad_id=0, seed=3)
    seen = [tuple(r["input_ids"]) for _ in range(3) for r in batches.next_rows()]
    assert sorted(seen) == sorted([tuple(r["input_ids"]) for r in EXPERT] * 2)  # two full passes in 6 rows
    batch = batches.collate(EXPERT[:2])
    assert batch["labels"][1].tolist() == [-100, -100, 23, 24, -100, -100]
    assert batch["attention_mask"][1].tolist() == [1, 1, 1, 1, 0, 0]


# ------------------------------------------------------------------------------------------------ options


@pytest.mark.parametrize(
    ("method", "message"),
    [
        ({"chord_dataset": "e.jsonl", "chord_mu_peak": 1.5}, "--chord-mu-peak"),
        ({"chord_dataset": "e.jsonl", "chord_mu_valley": -0.1}, "--chord-mu-valley"),
        ({"chord_dataset": "e.jsonl", "chord_mu_peak": math.nan}, "--chord-mu-peak"),
        ({"chord_dataset": "e.jsonl", "chord_mu_warmup_steps": -1}, "--chord-mu-warmup-steps"),
        ({"chord_dataset": "e.jsonl", "chord_mu_decay_steps": -5}, "--chord-mu-decay-steps"),
        ({"chord_dataset": "e.jsonl", "chord_batch_size": 0}, "--chord-batch-size"),
        ({"chord_mu_peak": 0.5}, "--chord-mu-peak: only read with --chord-dataset"),
        ({"chord_phi": True}, "--chord-phi: only read with --chord-dataset"),
    ],
)
def test_bad_chord_options_are_refused_naming_the_flag(method: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        options(**method)


def test_every_chord_flag_has_help_and_belongs_to_grpo_alone() -> None:
    from dataclasses import fields

    from swiftcore_recipe_rl.options import _HELP, RL_RECIPES

    names = [f.name for f in fields(RL_RECIPES["grpo"]) if f.name.startswith("chord_")]
    assert names == ["chord_dataset", "chord_mu_peak", "chord_mu_valley", "chord_mu_warmup_steps",
                     "chord_mu_decay_steps", "chord_batch_size", "chord_phi"]  # fmt: skip
    assert all(_HELP[name] for name in names)
    for recipe in ("rloo", "reinforce_pp", "gkd"):
        assert not [f.name for f in fields(RL_RECIPES[recipe]) if f.name.startswith("chord_")]


def test_another_recipe_refuses_chord_on_the_command_line(tiny_dir: Path, tmp_path: Path) -> None:
    data = tmp_path / "prompts.jsonl"
    data.write_text(json.dumps({"prompt": "hi"}) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWIFTCORE_")}
    proc = subprocess.run(
        [sys.executable, "-m", "swiftcore.cli.main", "train", "--recipe", "rloo", "--model", str(tiny_dir),
         "--dataset", str(data), "--reward", "format", "--chord-dataset", str(data),
         "--output-dir", str(tmp_path / "out")],
        capture_output=True, text=True, cwd=tmp_path, env={**env, "OMP_NUM_THREADS": "1"}, timeout=300,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "--chord-dataset belongs to recipe 'grpo'" in proc.stderr, proc.stderr[-2000:]


# ------------------------------------------------------------------------------------------------ a run

STEPS = 6
RUN_CHORD = {"chord_mu_warmup_steps": 2, "chord_mu_decay_steps": 3, "chord_mu_peak": 0.9, "chord_mu_valley": 0.3}


def test_a_grpo_run_with_chord_logs_mu_and_learns_the_expert_data(
    tiny_dir: Path, plugins: Any, tmp_path: Path, vowel: Any
) -> None:
    """The toy task with 4 expert replies (all of them in each step's SFT batch): ``chord/mu`` follows the schedule
    step by step, and the SFT loss on the expert data falls."""
    from swiftcore_recipe_rl.chord import mu_schedule
    from swiftcore_recipe_rl.recipe import run

    expert = tmp_path / "expert.jsonl"
    rows = [{"messages": [{"role": "user", "content": f"Write a word, number {i}."},
                          {"role": "assistant", "content": "apple orange apple"}]} for i in range(4)]  # fmt: skip
    expert.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg, method = vowel(
        "grpo", tiny_dir, tmp_path, steps=STEPS, lr=5e-3, prompts=8, chord_dataset=str(expert), chord_batch_size=4,
        **RUN_CHORD,
    )  # fmt: skip
    result = run(cfg, plugins, method)
    logs = [json.loads(line) for line in (tmp_path / "out" / "logs.jsonl").read_text().splitlines()]
    steps = [row for row in logs if "chord/mu" in row]
    schedule = {k.removeprefix("chord_mu_"): v for k, v in RUN_CHORD.items()}  # warmup_steps, ..., valley
    want_mu = [mu_schedule(step, **schedule) for step in range(STEPS)]
    sft = [row["chord/sft_loss"] for row in steps if "chord/sft_loss" in row]
    print(f"chord run: mu {[row['chord/mu'] for row in steps]}, sft loss {sft}")
    assert result.global_step == STEPS
    assert [row["chord/mu"] for row in steps] == pytest.approx(want_mu, abs=1e-6)
    assert "chord/sft_loss" not in steps[0] and len(sft) == STEPS - 1  # mu = 0 at step 0: no expert pass
    # measured (seed 0): 6.92, 3.83, 1.71, 0.62, 0.32 (the loss before each step's update)
    assert all(later < earlier for earlier, later in pairwise(sft)), sft
    assert sft[-1] < 0.2 * sft[0], sft
