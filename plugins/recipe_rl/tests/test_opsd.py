"""``--recipe opsd``: on-policy self-distillation, ``opd`` whose teacher is the policy itself shown the row's
privileged context (here the ``answer`` column).

- On a batch the trainer really generates (tiny model, LoRA moved off its start so ``current`` and ``initial``
  differ), the per-token advantages equal ``log p(y_t | prompt + context) - log p(y_t | prompt)`` computed here
  again in float64, each sequence alone, with the teacher prompt written from the row as ``--opsd-context-format``
  says; the teacher sees the context (the advantages are far from 0, which a teacher shown the student's prompt
  would give), and TRL's on-policy ``dapo`` loss equals ``-1/N sum A_t``.
- Refusals: a ``--teacher-model``, a format without ``{context}``, a dataset without the context column.

The learning signal on a held-out task is ``test_opsd_learns.py``.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

ANSWERS = ["a", "e"]


@pytest.fixture(scope="module")
def opsd(tiny_dir: Path, plugins: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``(trainer, encoded prompts, codec, the base model in float64)``: a ``SwiftOPSDTrainer`` on the tiny model
    (LoRA, B moved off 0), two prompts whose ``answer`` column the teacher sees, groups of 4, completions of up to 6
    tokens."""
    import torch
    from datasets import Dataset
    from swiftcore_recipe_rl.data import PromptRow
    from swiftcore_recipe_rl.execute import no_reward
    from swiftcore_recipe_rl.opsd import teacher_prompt_ids
    from swiftcore_recipe_rl.options import OPSDOptions
    from swiftcore_recipe_rl.prompts import encode_prompts
    from swiftcore_recipe_rl.recipe import opd_config
    from swiftcore_recipe_rl.rollout import PromptCodec
    from swiftcore_recipe_rl.trainer import trainer_class
    from swiftcore_train import TrainConfig, apply_tuner

    from swiftcore.api.models import load_model, load_tokenizer, resolve_model_spec
    from swiftcore.api.template import get_template

    spec = resolve_model_spec(str(tiny_dir), plugins)
    tokenizer = load_tokenizer(str(tiny_dir))
    tokenizer.padding_side = "left"
    codec = PromptCodec(get_template(spec.default_template, plugins), tokenizer)
    out = tmp_path_factory.mktemp("opsd")
    cfg = TrainConfig(model=str(tiny_dir), dataset=("unused",), output_dir=str(out), batch_size=2, seed=0)
    options = OPSDOptions(num_generations=4, max_completion_length=6)
    rows = [
        PromptRow(record={"messages": [{"role": "user", "content": f"Say a letter, number {i}."}]},
                  columns={"answer": answer}, where=f"row {i}")
        for i, answer in enumerate(ANSWERS)
    ]  # fmt: skip
    encoded = encode_prompts(rows, codec, cfg, options)
    model = apply_tuner(load_model(spec, str(tiny_dir), plugins), spec, cfg)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.add_(torch.randn(param.shape, generator=gen) * 0.05)
    trainer = trainer_class("opsd")(
        model=model,
        reward_funcs=[no_reward],
        args=opd_config(cfg, options, out, reward_names=[]),
        train_dataset=Dataset.from_list(encoded.dataset),
        processing_class=tokenizer,
    )
    trainer.prompt_ids = encoded.ids
    trainer.teacher_prompt_ids = teacher_prompt_ids(encoded, codec, options)
    trainer.context_column = options.opsd_context
    base = load_model(spec, str(tiny_dir), plugins).double().eval()  # the initial policy, loaded anew
    return trainer, encoded, codec, base


def _logps(model: Any, prompt: list[int], completion: list[int], temperature: float) -> list[float]:
    """float64 log-probs of ``completion`` after ``prompt``, the sequence scored alone."""
    import torch

    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(input_ids=ids, use_cache=False).logits[0].double() / temperature
    logp = torch.log_softmax(logits[len(prompt) - 1 : len(prompt) - 1 + len(completion)], dim=-1)
    return [logp[t, completion[t]].item() for t in range(len(completion))]


@pytest.mark.parametrize("mode", ["current", "initial"])
def test_advantages_and_loss_equal_the_float64_reference(opsd: Any, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    from swiftcore_recipe_rl.opsd import privileged_record

    trainer, encoded, codec, base = opsd
    monkeypatch.setattr(trainer, "teacher_mode", mode)
    monkeypatch.setattr(trainer, "current_gradient_accumulation_steps", 1, raising=False)
    trainer.model.train()
    inputs = [row for row in encoded.dataset for _ in range(4)]
    out = trainer._generate_and_score_completions([dict(r) for r in inputs])

    reference = copy.deepcopy(trainer.model).double().eval()
    temperature = trainer.temperature
    got, mask = out["advantages"], out["completion_mask"]
    want_all, blind_all = [], []
    for i, row in enumerate(inputs):
        n = int(mask[i].sum())
        completion = out["completion_ids"][i, :n].tolist()
        student_prompt = list(encoded.ids[row["prompt"]])
        record = privileged_record(
            encoded.records[row["prompt"]], row["answer"], "{prompt}\n\nReference answer: {context}"
        )
        teacher_prompt = list(codec.encode(record)[1])
        student = _logps(reference, student_prompt, completion, temperature)
        if mode == "initial":  # the starting weights: the checkpoint, without the (moved) adapter
            teacher = _logps(base, teacher_prompt, completion, temperature)
            blind = _logps(base, student_prompt, completion, temperature)
        else:
            teacher, blind = _logps(reference, teacher_prompt, completion, temperature), student
        want = [t - s for t, s in zip(teacher, student, strict=True)]
        assert got[i, :n].tolist() == pytest.approx(want, abs=5e-5), (mode, i)
        assert not got[i, n:].any()  # padding carries no advantage
        want_all += want
        blind_all += [b - s for b, s in zip(blind, student, strict=True)]
    # the teacher saw the context: a teacher shown the student's prompt would give other advantages (0 for current)
    assert max(abs(w - b) for w, b in zip(want_all, blind_all, strict=True)) > 0.05

    loss = trainer._compute_loss(trainer.model, out)
    reference_loss = -sum(want_all) / len(want_all)  # on-policy: r = 1, so each token's term is -A_t
    print(f"opsd {mode}: TRL loss {loss.item():.8f} reference {reference_loss:.8f}, {len(want_all)} tokens")
    assert loss.item() == pytest.approx(reference_loss, abs=1e-5)


def test_options_and_data_refusals(tmp_path: Path) -> None:
    from swiftcore_recipe_rl.data import PromptRow
    from swiftcore_recipe_rl.opsd import check_context_column
    from swiftcore_recipe_rl.options import OPSDOptions

    from swiftcore.api import SwiftcoreError

    with pytest.raises(ValueError, match=r"--teacher-model 't' with --recipe opsd: the teacher is the policy itself"):
        OPSDOptions(teacher_model="t")
    with pytest.raises(ValueError, match=r"--opsd-context-format '\{prompt\}': has no \{context\}"):
        OPSDOptions(opsd_context_format="{prompt}")
    with pytest.raises(ValueError, match=r"--opsd-teacher: 'frozen' is not one of current, initial"):
        OPSDOptions(opsd_teacher="frozen")
    rows = [PromptRow(record={"messages": []}, columns={"solution": "x"}, where="r")]
    with pytest.raises(SwiftcoreError, match=r"data.jsonl has no 'answer' column .*--opsd-context"):
        check_context_column(rows, OPSDOptions(), "data.jsonl")
    check_context_column(rows, OPSDOptions(opsd_context="solution"), "data.jsonl")
