"""The ``rm`` recipe: TRL's RewardTrainer with the Bradley-Terry loss, on pairs encoded by swiftcore's template.

- on a fixed batch, the trainer's loss equals ``mean(-log σ(r_c - r_r))`` of scores computed here, each
  sequence alone (no padding), to 1e-5;
- on the vowel task the held-out ranking accuracy (score chosen > rejected) rises from ~50% to >= 90%;
- every checkpoint loads with ``AutoModelForSequenceClassification`` (one label) and scores as trained.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from swiftcore_train import TrainConfig

STEPS = 30


def _cfg(model_dir: str, data: Path, out: Path, **kwargs: Any) -> TrainConfig:
    return TrainConfig(
        model=model_dir,
        dataset=(str(data),),
        output_dir=str(out),
        plot=False,
        recipe="rm",
        save_steps=10_000,
        **kwargs,
    )


def _scores(model: Any, samples: list[dict], key: str) -> Any:
    import torch

    with torch.no_grad():
        return torch.stack([model(input_ids=torch.tensor([s[key]])).logits[0, 0].float() for s in samples])


def _accuracy(model: Any, samples: list[dict]) -> float:
    return float((_scores(model, samples, "chosen_ids") > _scores(model, samples, "rejected_ids")).float().mean())


def _held_out(rows: list[dict], model_dir: str, plugins: Any, cfg: TrainConfig) -> list[dict]:
    from swiftcore_recipe_preference.data import parse_pair
    from swiftcore_recipe_preference.encoding import encode_rm_pairs

    from swiftcore.api.models import load_tokenizer, resolve_model_spec
    from swiftcore.api.template import get_template

    template = get_template(resolve_model_spec(model_dir, plugins).default_template, plugins)
    pairs = [parse_pair(row, f"held-out:{i}") for i, row in enumerate(rows)]
    return encode_rm_pairs(pairs, template, load_tokenizer(model_dir), cfg)


@pytest.mark.parametrize("tuner", ["lora", "full"])
def test_rm_loss_is_bradley_terry(tuner: str, tiny_model_dir, plugins, vowel_task, write_jsonl, tmp_path: Path):
    import torch
    import torch.nn.functional as F
    from swiftcore_recipe_preference.common import prepare
    from swiftcore_recipe_preference.encoding import encode_rm_pairs
    from swiftcore_recipe_preference.options import RMOptions
    from swiftcore_recipe_preference.rm import build_reward_trainer

    from swiftcore.api.models import load_tokenizer

    model_dir = str(tiny_model_dir("qwen3_5"))
    rows, _ = vowel_task(load_tokenizer(model_dir), n_train=6)
    rows[0]["rejected_response"] += " a e"  # unequal lengths, so the batch is padded
    cfg = _cfg(model_dir, write_jsonl(rows), tmp_path / "out", tuner=tuner, batch_size=len(rows))
    prepared = prepare(cfg, plugins, "rm")
    samples = encode_rm_pairs(prepared.train, prepared.template, prepared.tokenizer, cfg)
    trainer = build_reward_trainer(cfg, RMOptions(), samples, [], prepared, tmp_path)
    model = trainer.model.eval()
    chosen, rejected = _scores(model, samples, "chosen_ids"), _scores(model, samples, "rejected_ids")
    expected = float(-F.logsigmoid(chosen - rejected).mean())
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(len(samples))])
    with torch.no_grad():
        got = float(trainer.compute_loss(model, batch))
    print(f"rm {tuner}: trainer {got:.8f} formula {expected:.8f} |diff| {abs(got - expected):.2e}")
    assert float((chosen - rejected).abs().max()) > 1e-3
    assert got == pytest.approx(expected, abs=1e-5)


def test_rm_learns_and_saves_a_sequence_classifier(tiny_model_dir, plugins, vowel_task, write_jsonl, tmp_path: Path):
    import torch
    from swiftcore_recipe_preference.rm import run_rm
    from transformers import AutoModelForSequenceClassification

    from swiftcore.api.models import load_tokenizer

    model_dir = str(tiny_model_dir("qwen3_5"))
    train_rows, held_rows = vowel_task(load_tokenizer(model_dir))
    cfg = _cfg(
        model_dir,
        write_jsonl(train_rows),
        tmp_path / "run",
        tuner="lora",
        max_steps=STEPS,
        batch_size=8,
        learning_rate=2e-3,
        lr_scheduler="constant",
        logging_steps=5,
    )
    samples = _held_out(held_rows, model_dir, plugins, cfg)
    torch.manual_seed(cfg.seed)  # the recipe's score-layer init, as the untrained model
    before = _accuracy(AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=1).eval(), samples)

    result = run_rm(cfg, plugins)
    saved = AutoModelForSequenceClassification.from_pretrained(str(result.last_checkpoint)).eval()
    after = _accuracy(saved, samples)
    print(f"rm: {STEPS} steps, held-out ranking accuracy {before:.1%} -> {after:.1%} ({len(samples)} pairs)")
    assert saved.config.num_labels == 1
    assert not (result.last_checkpoint / "adapter_config.json").exists()  # merged: no peft needed
    assert (result.last_checkpoint / "swiftcore_args.json").is_file()
    assert 0.25 <= before <= 0.75, f"the untrained reward model should be near chance, got {before:.1%}"
    assert after >= 0.9, f"held-out ranking accuracy only {after:.1%}"


def test_a_family_without_a_sequence_classifier_is_refused(tiny_model_dir, plugins, write_jsonl, tmp_path: Path):
    from swiftcore_recipe_preference.rm import run_rm

    from swiftcore.api import SwiftcoreError

    rows = [{"prompt": "q", "chosen": "good", "rejected": "bad"}] * 2
    cfg = _cfg(str(tiny_model_dir("gemma4")), write_jsonl(rows), tmp_path / "out", max_steps=1)
    with pytest.raises(SwiftcoreError, match="no sequence-classification model for 'gemma4'"):
        run_rm(cfg, plugins)
    assert not (tmp_path / "out").exists()  # refused before the output directory is touched
