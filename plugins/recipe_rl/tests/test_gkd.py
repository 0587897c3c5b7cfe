"""GKD / on-policy distillation: the loss on a fixed batch equals the generalised JSD written from its definition,
and training lowers the student's divergence to the teacher on held-out prompts.

The reference: student and teacher logits from plain forward passes (float64 softmax), then per completion token
``beta KL(p_t || m) + (1 - beta) KL(p_s || m)`` with ``m = (1 - beta) p_s + beta p_t`` (GKD's JSD(beta), Agarwal et
al. 2024), ``beta = 0`` the forward KL(p_t || p_s), ``beta = 1`` the reverse KL(p_s || p_t); summed over completion
tokens and divided by their count. TRL's side is ``SwiftGKDTrainer.compute_loss`` (TRL's chunked divergence).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

LENGTHS = [3, 6, 1, 4]


def completion_logits(model: Any, input_ids: Any, prompt_length: int) -> Any:
    """The logits predicting each completion token (plain forward, no padding in the prompts)."""
    return model(input_ids=input_ids, attention_mask=(input_ids >= 0).long()).logits[:, prompt_length - 1 : -1]


@pytest.mark.parametrize("beta", [0.0, 0.5, 0.9, 1.0])
def test_gkd_loss_equals_the_generalised_jsd(
    gkd_trainer: Any, beta: float, monkeypatch: pytest.MonkeyPatch, generalized_jsd: Any
) -> None:
    import torch

    trainer = gkd_trainer
    monkeypatch.setattr(trainer, "beta", beta)
    torch.manual_seed(0)
    prompt = torch.randint(10, 200, (4, 5))
    completion = torch.randint(10, 200, (4, max(LENGTHS)))
    mask = (torch.arange(max(LENGTHS))[None, :] < torch.tensor(LENGTHS)[:, None]).long()
    inputs = {
        "prompt_ids": prompt,
        "prompt_mask": torch.ones_like(prompt),
        "completion_ids": completion,
        "completion_mask": mask,
        "num_items_in_batch": mask.sum(),
    }
    trainer.model.eval()  # no dropout in either forward
    loss = trainer.compute_loss(trainer.model, inputs)
    ids = torch.cat([prompt, completion], 1)
    with torch.no_grad():
        want = generalized_jsd(
            completion_logits(trainer.model, ids, 5), completion_logits(trainer.teacher_model, ids, 5), mask, beta
        )
    diff = abs(loss.item() - want.item())
    print(f"gkd loss beta={beta}: TRL {loss.item():.6f} reference {want.item():.6f} |diff| {diff:.2e}")
    assert want.item() > 1e-3 and diff < 1e-5


@pytest.mark.parametrize("rollout_engine", ["trainer", "transformers"])
def test_gkd_lowers_the_held_out_divergence_to_the_teacher(
    rollout_engine: str, tiny_dir: Path, teacher_dir: Path, plugins: Any, tmp_path: Path, generalized_jsd: Any
) -> None:
    """The student's completions from TRL's generate, or from swiftcore's transformers engine synced to the student
    (all its weights, ``--tuner full``) before each generation round."""
    import torch
    from swiftcore_recipe_rl.options import GKDOptions
    from swiftcore_recipe_rl.recipe import run_gkd
    from swiftcore_train import TrainConfig

    from swiftcore.api.models import load_model, resolve_model_spec

    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"Tell me about item {i}."}) + "\n" for i in range(16)))
    out = tmp_path / "out"
    steps = 16
    cfg = TrainConfig(
        model=str(tiny_dir), dataset=(str(data),), output_dir=str(out), tuner="full", learning_rate=5e-3,
        lr_scheduler="constant", max_steps=steps, batch_size=4, logging_steps=1, save_steps=steps, seed=0, plot=False,
    )  # fmt: skip
    options = GKDOptions(
        teacher_model=str(teacher_dir), gkd_beta=0.5, max_completion_length=8, rollout_engine=rollout_engine
    )

    def load(path: Path) -> Any:
        return load_model(resolve_model_spec(str(path), plugins), str(path), plugins).eval()

    # Held-out sequences: other prompts, continued by the untrained student (fixed seed).
    student, teacher = load(tiny_dir), load(teacher_dir)
    torch.manual_seed(1)
    held_out = torch.randint(10, 200, (8, 6))
    with torch.no_grad():
        ids = student.generate(held_out, attention_mask=torch.ones_like(held_out), do_sample=True, max_new_tokens=8,
                               min_new_tokens=8, pad_token_id=0)  # fmt: skip
        mask = torch.ones(8, 8, dtype=torch.long)
        teacher_logits = completion_logits(teacher, ids, 6)
        before = generalized_jsd(completion_logits(student, ids, 6), teacher_logits, mask, 0.5).item()

    result = run_gkd(cfg, plugins, options)
    trained = load(result.last_checkpoint)
    with torch.no_grad():
        after = generalized_jsd(completion_logits(trained, ids, 6), teacher_logits, mask, 0.5).item()
    logs = [json.loads(line) for line in (out / "logs.jsonl").read_text().splitlines()]
    losses = [row["loss"] for row in logs if "loss" in row and row.get("step")]
    synced = [row["sync_bytes"] for row in logs if "sync_bytes" in row]
    print(f"gkd ({rollout_engine}): held-out JSD(0.5) to the teacher {before:.4f} -> {after:.4f} in {steps} steps; "
          f"{len(synced)} syncs; train loss {losses}")  # fmt: skip
    assert result.global_step == steps
    if rollout_engine == "transformers":  # the engine generated: it got the student's weights before each round
        assert len(synced) >= steps // 2 and all(b > 0 for b in synced), synced
    assert after < 0.8 * before, (before, after)  # measured: 0.297 -> 0.20 (16 steps)
    assert json.loads((out / "args.json").read_text())["gkd"]["teacher_model"] == str(teacher_dir)
