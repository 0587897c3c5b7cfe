"""``--recipe mpo`` (Mixed Preference Optimization): TRL's DPOTrainer with ``0.8·sigmoid + 0.2·bco_pair + 1.0·sft``.

- On a fixed batch the recipe's trainer loss equals the MPO formula computed here in float64 from log-probs scored
  independently (each sequence alone, ordinary forward), and equals the weighted sum of the same trainer's loss with
  one loss type at a time; the formula with the weights swapped (0.2 sigmoid + 0.8 bco_pair) is far from it, so
  the comparison would catch a mix-up of the weights.
- The README's MPO command, run as written through the CLI, lifts held-out pairwise accuracy on the vowel task
  from the untrained 50% to at least 80%.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from swiftcore_train import TrainConfig

PLUGIN = Path(__file__).resolve().parents[1]
ROWS = [
    {"prompt": "say apple", "chosen": "apple apple", "rejected": "pear"},
    {"prompt": "name a colour", "chosen": "blue", "rejected": "a loud noise, very loud"},
    {"prompt": "count to three", "chosen": "one two three", "rejected": "three"},
    {"prompt": "greet me", "chosen": "hello there, friend", "rejected": "go away"},
]
BETA = 0.3


def test_options_default_to_mpo_and_validate() -> None:
    from swiftcore_recipe_preference.options import MPOOptions

    default = MPOOptions()
    assert (default.loss_type, default.loss_weights) == (("sigmoid", "bco_pair", "sft"), (0.8, 0.2, 1.0))
    assert default.beta == 0.1
    assert MPOOptions(loss_weights=["0.5", "0.5", "1"]).loss_weights == (0.5, 0.5, 1.0)
    assert MPOOptions(loss_type="sigmoid,sft").loss_weights == ()  # other losses: 1 each, as in dpo
    with pytest.raises(ValueError, match="--loss-weights: 2 weight"):
        MPOOptions(loss_weights=["1", "1"])


def _token_logps(model: Any, samples: list[dict], key: str) -> list[Any]:
    """Per reply token log-probs (float64), each sequence scored alone with the model's ordinary forward."""
    import torch

    out = []
    for s in samples:
        ids = torch.tensor([s["prompt_ids"] + s[key]])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, :-1].double()
        out.append(logits.log_softmax(-1).gather(-1, ids[0, 1:, None])[len(s["prompt_ids"]) - 1 :, 0])
    return out


def _mpo_formula(pol: dict, ref: dict, weights: tuple[float, float, float]) -> float:
    import torch
    import torch.nn.functional as F

    chosen = torch.stack([t.sum() for t in pol["chosen_ids"]]) - torch.stack([t.sum() for t in ref["chosen_ids"]])
    rejected = torch.stack([t.sum() for t in pol["rejected_ids"]]) - torch.stack([t.sum() for t in ref["rejected_ids"]])
    sigmoid = -F.logsigmoid(BETA * (chosen - rejected)).mean()  # DPO, Rafailov et al. eq. 7
    bco_pair = (-F.logsigmoid(BETA * chosen) - F.logsigmoid(-BETA * rejected)).mean()  # BCO on each reply's ratio
    sft = -torch.cat(pol["chosen_ids"]).mean()  # NLL per chosen token
    return float(weights[0] * sigmoid + weights[1] * bco_pair + weights[2] * sft)


def test_loss_equals_the_mpo_formula(tmp_path: Path, tiny_model_dir, plugins, write_jsonl) -> None:
    import torch
    from swiftcore_recipe_preference.common import prepare
    from swiftcore_recipe_preference.dpo import build_dpo_trainer
    from swiftcore_recipe_preference.encoding import encode_dpo_pairs
    from swiftcore_recipe_preference.options import MPOOptions

    cfg = TrainConfig(
        model=str(tiny_model_dir("qwen3_5")),
        dataset=(str(write_jsonl(ROWS)),),
        output_dir=str(tmp_path / "out"),
        tuner="lora",
        batch_size=len(ROWS),
        plot=False,
        recipe="mpo",
    )
    prepared = prepare(cfg, plugins, "mpo")
    samples = encode_dpo_pairs(prepared.train, prepared.template, prepared.tokenizer, cfg)
    trainer = build_dpo_trainer(cfg, MPOOptions(beta=BETA), plugins, samples, [], prepared, tmp_path)
    assert (trainer.loss_types, trainer.loss_weights) == (["sigmoid", "bco_pair", "sft"], [0.8, 0.2, 1.0])
    model = trainer.model.eval()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():  # move the policy away from the reference (LoRA B = 0 makes every log-ratio 0)
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.add_(torch.randn(param.shape, generator=gen) * 0.02)
    pol = {k: _token_logps(model, samples, k) for k in ("chosen_ids", "rejected_ids")}
    with model.disable_adapter():
        ref = {k: _token_logps(model, samples, k) for k in ("chosen_ids", "rejected_ids")}
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(len(samples))])

    def trainer_loss(types: list[str], weights: list[float]) -> float:
        trainer.loss_types, trainer.loss_weights = types, weights
        with torch.no_grad():
            return float(trainer.compute_loss(trainer.model, batch))

    got = trainer_loss(["sigmoid", "bco_pair", "sft"], [0.8, 0.2, 1.0])
    each = {t: trainer_loss([t], [1.0]) for t in ("sigmoid", "bco_pair", "sft")}
    expected = _mpo_formula(pol, ref, (0.8, 0.2, 1.0))
    swapped = _mpo_formula(pol, ref, (0.2, 0.8, 1.0))
    print(f"mpo: trainer {got:.8f} float64 formula {expected:.8f} |diff| {abs(got - expected):.2e}; each {each}; "
          f"weights swapped {swapped:.6f}")  # fmt: skip
    assert got == pytest.approx(expected, abs=1e-5)
    assert got == pytest.approx(0.8 * each["sigmoid"] + 0.2 * each["bco_pair"] + 1.0 * each["sft"], abs=1e-6)
    assert abs(swapped - got) > 1e-2  # a swap of the preference and quality weights would fail the check above


def _readme_command() -> list[str]:
    section = (PLUGIN / "README.md").read_text(encoding="utf-8").split("\n## MPO\n", 1)[1].split("\n## ", 1)[0]
    (command,) = re.findall(r"`(swiftcore train --recipe mpo [^`]+)`", section)
    return shlex.split(command)


def _accuracy(model: Any, pairs: list[dict]) -> float:
    """Share of pairs whose chosen reply has the higher summed log-prob."""
    logp = {k: [float(t.sum()) for t in _token_logps(model, pairs, k)] for k in ("chosen_ids", "rejected_ids")}
    return sum(c > r for c, r in zip(logp["chosen_ids"], logp["rejected_ids"], strict=True)) / len(pairs)


@pytest.mark.slow
def test_readme_mpo_command_learns(
    tiny_model_dir, plugins, run_cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from peft import PeftModel
    from swiftcore_recipe_preference.data import parse_pair
    from swiftcore_recipe_preference.encoding import encode_dpo_pairs

    from swiftcore.api.models import load_model, load_tokenizer, resolve_model_spec
    from swiftcore.api.template import get_template

    argv = _readme_command()
    assert argv[argv.index("--model") + 1] == "./tiny"
    assert argv[argv.index("--dataset") + 1] == "plugins/recipe_preference/examples/vowels.jsonl"
    model_dir = tiny_model_dir("qwen3_5")
    (tmp_path / "tiny").symlink_to(model_dir)
    (tmp_path / "plugins" / "recipe_preference").mkdir(parents=True)
    (tmp_path / "plugins" / "recipe_preference" / "examples").symlink_to(PLUGIN / "examples")
    lines = (PLUGIN / "examples" / "vowels_heldout.jsonl").read_text().splitlines()
    pairs = [parse_pair(json.loads(line), f"vowels_heldout.jsonl:{i + 1}") for i, line in enumerate(lines)]
    spec = resolve_model_spec(str(model_dir), plugins)
    cfg = TrainConfig(model=str(model_dir), dataset=("x",), recipe="mpo")
    pairs = encode_dpo_pairs(pairs, get_template(spec.default_template, plugins), load_tokenizer(str(model_dir)), cfg)
    before = _accuracy(load_model(spec, str(model_dir), plugins, torch_dtype="float32").eval(), pairs)

    monkeypatch.chdir(tmp_path)
    run_cli(*argv[1:])

    out = tmp_path / argv[argv.index("--output-dir") + 1]
    record = json.loads((out / "args.json").read_text())
    assert record["preference"]["recipe"] == "mpo", record["preference"]
    assert record["preference"]["loss_type"] == ["sigmoid", "bco_pair", "sft"], record["preference"]
    assert record["preference"]["loss_weights"] == [0.8, 0.2, 1.0], record["preference"]
    checkpoint = max(out.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1]))
    base = load_model(spec, str(model_dir), plugins, torch_dtype="float32")
    after = _accuracy(PeftModel.from_pretrained(base, str(checkpoint)).eval(), pairs)
    print(f"mpo: README command, held-out pairwise accuracy {before:.1%} -> {after:.1%} ({len(pairs)} pairs)")
    assert after > before and after >= 0.8, f"mpo did not learn: {before:.1%} -> {after:.1%}"
