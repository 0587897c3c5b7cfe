"""``--recipe opd``: on-policy distillation with KL advantages (issue 51, point 3).

- On the fixed batch (real student and teacher models, real token ids), the trainer's per-token advantages equal
  ``log p_teacher - log p_student (+ w * A_i)`` and its loss equals DAPO's clipped token-level loss on them, both
  computed again here in float64 from the two models' log-probs.
- Refusals: no teacher, a teacher whose tokenizer vocabulary differs from the student's, a reward weight without a
  reward, dynamic sampling.

The learning signal (the README's ``opd`` example on the vowel task) is ``test_readme_distillation_learns.py``.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest

#: The task advantages of the fixed batch's 8 completions (2 groups of 4).
TASK_ADVANTAGES = [1.2, -0.4, 0.3, -1.1, 0.8, -0.2, 0.5, -0.9]


@pytest.fixture(scope="module")
def opd_trainer(tiny_dir: Path, teacher_dir: Path, plugins: Any, trainer_factory: Any, tmp_path_factory: Any) -> Any:
    """A ``SwiftOPDTrainer``: the tiny student (LoRA), the seed-1 tiny model as its teacher."""
    from swiftcore.api.models import load_model, resolve_model_spec

    trainer = trainer_factory("opd", tiny_dir, plugins, tmp_path_factory.mktemp("opd"), teacher_model=str(teacher_dir))
    teacher = load_model(resolve_model_spec(str(teacher_dir), plugins), str(teacher_dir), plugins)
    trainer.teacher = teacher.eval().requires_grad_(False)
    return trainer


def batch(fixed_batch: Any) -> dict[str, Any]:
    """The fixed batch with seeded random prompt and completion ids (the tiny vocabulary has 256 tokens)."""
    import torch

    generator = torch.Generator().manual_seed(0)
    base = fixed_batch()
    rows, width = base["completion_ids"].shape
    return fixed_batch(
        prompt_ids=torch.randint(0, 256, (rows, 3), generator=generator),
        completion_ids=torch.randint(0, 256, (rows, width), generator=generator),
        advantages=torch.tensor(TASK_ADVANTAGES),
        num_items_in_batch=base["completion_mask"].sum(),
    )


def reference_logps(model: Any, inputs: dict[str, Any]) -> list[list[float]]:
    """``model``'s float64 log-probs of each completion token (rows cut to their lengths), computed anew."""
    import torch

    model = copy.deepcopy(model).double()
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    prompt = inputs["prompt_ids"].size(1)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attention, use_cache=False).logits.double()
    out = []
    for row, length in enumerate(inputs["completion_mask"].sum(1).tolist()):
        logp = torch.log_softmax(logits[row, prompt - 1 : prompt - 1 + length], dim=-1)
        out.append([logp[t, ids[row, prompt + t]].item() for t in range(length)])
    return out


@pytest.mark.parametrize(
    ("reward_weight", "off_policy", "chunk"),
    [(0.0, False, 0), (0.5, False, 0), (0.0, True, 0), (0.5, False, 3)],
    ids=["pure-on-policy", "reward-weight-0.5", "pure-off-policy", "teacher-scored-by-the-chunked-head"],
)
def test_advantages_and_loss_equal_the_float64_reference(
    opd_trainer: Any,
    fixed_batch: Any,
    monkeypatch: pytest.MonkeyPatch,
    reward_weight: float,
    off_policy: bool,
    chunk: int,
) -> None:
    """``A_t = log p_T(y_t) - log p_S(y_t) + w A_i`` (``p_S`` the policy that sampled, ``pi_old``), and TRL's ``dapo``
    loss on them: ``-1/N sum_{i,t} min(r A, clip(r, 0.8, 1.2) A)``, ``r = pi_theta / pi_old``. Off-policy, ``pi_old``
    is the batch's ``old_per_token_logps`` (the current log-probs shifted by a fixed offset, so the clip binds).
    ``chunk``: the teacher's log-probs from the chunked lm_head, 3 tokens' logits at a time (the recipe's default
    chunk is 1,024; 0: the full logits)."""
    import torch

    trainer = opd_trainer
    monkeypatch.setattr(trainer, "reward_weight", reward_weight)
    monkeypatch.setattr(trainer, "current_gradient_accumulation_steps", 1, raising=False)
    inputs = batch(fixed_batch)
    mask = inputs["completion_mask"]
    lengths = mask.sum(1).tolist()
    student = reference_logps(trainer.model, inputs)
    teacher = reference_logps(trainer.teacher, inputs)
    monkeypatch.setattr(trainer, "loss_chunk_size", chunk, raising=False)
    if chunk:  # the full-logits path cannot be taken: the chunked head must have scored the teacher
        monkeypatch.setattr(trainer.teacher, "forward", lambda *a, **k: pytest.fail("full teacher logits"))
    offsets = [[0.3 * math.sin(1.7 * i + t) for t in range(n)] for i, n in enumerate(lengths)]
    old = student
    if off_policy:
        old = [[s - o for s, o in zip(row, off, strict=True)] for row, off in zip(student, offsets, strict=True)]
        padded = torch.zeros(mask.shape)
        for i, row in enumerate(old):
            padded[i, : len(row)] = torch.tensor(row)
        inputs["old_per_token_logps"] = padded

    trainer.model.train()
    out = trainer.distillation_advantages(dict(inputs))
    want = [
        [t - s + reward_weight * a for t, s in zip(trow, srow, strict=True)]
        for trow, srow, a in zip(teacher, old, TASK_ADVANTAGES, strict=True)
    ]
    got = out["advantages"]
    assert got.shape == mask.shape
    for i, row in enumerate(want):
        assert got[i, : len(row)].tolist() == pytest.approx(row, abs=2e-5)
        assert not got[i, len(row) :].any()  # padding carries no advantage
    assert max(abs(x) for row in want for x in row) > 0.1  # teacher and student disagree: a non-trivial signal

    loss = trainer._compute_loss(trainer.model, out)
    n = sum(lengths)
    terms = []
    for srow, orow, arow in zip(student, old, want, strict=True):
        for s, o, a in zip(srow, orow, arow, strict=True):
            r = math.exp(s - o)
            terms.append(-min(r * a, min(max(r, 0.8), 1.2) * a))
    reference = sum(terms) / n
    print(f"opd w={reward_weight} off_policy={off_policy}: TRL loss {loss.item():.8f} reference {reference:.8f}")
    assert loss.item() == pytest.approx(reference, abs=1e-5)
    if off_policy:  # the clip is exercised on both sides
        ratios = [math.exp(o) for row in offsets for o in row]
        assert min(ratios) < 0.8 and max(ratios) > 1.2


# ------------------------------------------------------------------------------------------------ refusals


def test_options_refuse_what_opd_cannot_run() -> None:
    from swiftcore_recipe_rl.options import OPDOptions

    with pytest.raises(ValueError, match=r"--teacher-model: give the teacher model's directory"):
        OPDOptions()
    with pytest.raises(ValueError, match=r"--opd-reward-weight 0.5: .*--reward NAME"):
        OPDOptions(teacher_model="t", opd_reward_weight=0.5)
    with pytest.raises(ValueError, match=r"--opd-reward-weight: -1 must be"):
        OPDOptions(teacher_model="t", opd_reward_weight=-1)
    with pytest.raises(ValueError, match=r"--dynamic-sampling with --recipe opd"):
        OPDOptions(teacher_model="t", reward=("format",), dynamic_sampling=True)
    assert OPDOptions(teacher_model="t").reward == ()  # pure distillation needs no reward
    assert OPDOptions(teacher_model="t", reward=("format",), opd_reward_weight=0.5).opd_reward_weight == 0.5


def run_opd_cli(tiny_dir: Path, tmp_path: Path, *extra: str) -> str:
    """``swiftcore train --recipe opd`` on one prompt, as a user runs it, expected to fail: its stderr, unwrapped."""
    import os
    import subprocess
    import sys

    data = tmp_path / "prompts.jsonl"
    data.write_text(json.dumps({"prompt": "hi"}) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWIFTCORE_")}
    proc = subprocess.run(
        [sys.executable, "-m", "swiftcore.cli.main", "train", "--recipe", "opd", "--model", str(tiny_dir),
         "--dataset", str(data), "--output-dir", str(tmp_path / "out"), "--max-steps", "1", *extra],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert proc.returncode != 0, proc.stdout[-2000:]
    return " ".join(proc.stderr.split())


def test_the_cli_refuses_a_missing_teacher(tiny_dir: Path, tmp_path: Path) -> None:
    out = run_opd_cli(tiny_dir, tmp_path)
    assert "--teacher-model: give the teacher model's directory" in out


def test_a_teacher_with_another_vocabulary_is_refused_before_training(
    tiny_dir: Path, tmp_path: Path, tiny_model_dir: Any
) -> None:
    """A teacher of another family (its own tokenizer) scores other tokens under the same ids: refused in the plan
    step, naming the option, the sizes and a token the two disagree on; nothing is trained."""
    other = tiny_model_dir("gemma4")
    out = run_opd_cli(tiny_dir, tmp_path, "--teacher-model", str(other))
    assert f"--teacher-model {other}: its tokenizer vocabulary differs from the student's" in out
    assert "use a teacher with the student's tokenizer" in out
    assert not (tmp_path / "out" / "checkpoint-1").exists()
