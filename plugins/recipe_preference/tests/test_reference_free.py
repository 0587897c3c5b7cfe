"""``cpo``, ``simpo``, ``orpo``: the loss TRL's trainers report on a fixed batch equals the papers' formulas (as
TRL 1.16 implements them, see :mod:`swiftcore_recipe_preference.reference_free`) on log-probs computed here,
each sequence alone; and each method learns the vowel task (held-out accuracy from ~50% to >= 90%)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from swiftcore_train import TrainConfig

ROWS = [
    {"prompt": "say apple", "chosen": "apple apple", "rejected": "pear"},
    {"prompt": "name a colour", "chosen": "blue", "rejected": "a loud noise, very loud"},
    {"prompt": "count to three", "chosen": "one two three", "rejected": "three"},
    {"prompt": "greet me", "chosen": "hello there, friend", "rejected": "go away"},
]


def _options(method: str) -> Any:
    from swiftcore_recipe_preference.options import CPOOptions, ORPOOptions, SimPOOptions

    return {
        "cpo": CPOOptions(beta=0.3, cpo_alpha=0.7),
        "simpo": SimPOOptions(beta=2.0, simpo_gamma=0.4),
        "orpo": ORPOOptions(beta=0.2),
    }[method]


def _token_logps(model: Any, prompt: list[int], reply: list[int]) -> Any:
    """Log-probs of every next token of ``prompt + reply`` (position i predicts token i + 1)."""
    import torch

    ids = torch.tensor([prompt + reply])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, :-1].float()
    return logits.log_softmax(-1).gather(-1, ids[0, 1:, None])[:, 0]


def _formula(method: str, options: Any, model: Any, samples: list[dict]) -> float:
    import torch
    import torch.nn.functional as F

    reply = {"chosen": [], "rejected": []}
    full_chosen = []  # every next-token log-prob of prompt + chosen (ORPO's NLL term)
    for s in samples:
        n_prompt = len(s["prompt_ids"])
        for side in reply:
            logps = _token_logps(model, s["prompt_ids"], s[f"{side}_ids"])
            reply[side].append(logps[n_prompt - 1 :])
            if side == "chosen":
                full_chosen.append(logps)
    total = {side: torch.stack([lp.sum() for lp in lps]) for side, lps in reply.items()}
    mean = {side: torch.stack([lp.mean() for lp in lps]) for side, lps in reply.items()}
    beta = options.beta
    if method == "cpo":  # CPO eq. 3 + alpha * NLL (token mean over the batch's chosen replies)
        nll = -torch.cat(reply["chosen"]).mean()
        return float(-F.logsigmoid(beta * (total["chosen"] - total["rejected"])).mean() + options.cpo_alpha * nll)
    if method == "simpo":  # SimPO eq. 6
        margin = beta * (mean["chosen"] - mean["rejected"]) - options.simpo_gamma
        return float(-F.logsigmoid(margin).mean())
    assert method == "orpo"  # ORPO eq. 6-7

    def log_odds(avg: Any) -> Any:
        return avg - torch.log1p(-torch.exp(avg))

    ratio = F.logsigmoid(log_odds(mean["chosen"]) - log_odds(mean["rejected"]))
    nll = -torch.cat(full_chosen).mean()
    return float(nll - beta * ratio.mean())


@pytest.mark.parametrize("method", ["cpo", "simpo", "orpo"])
def test_loss_equals_the_formula(method: str, tmp_path: Path, tiny_model_dir, plugins, write_jsonl) -> None:
    import torch
    from swiftcore_recipe_preference.common import prepare
    from swiftcore_recipe_preference.encoding import encode_dpo_pairs
    from swiftcore_recipe_preference.reference_free import build_reference_free_trainer

    cfg = TrainConfig(
        model=str(tiny_model_dir("qwen3_5")),
        dataset=(str(write_jsonl(ROWS)),),
        output_dir=str(tmp_path / "out"),
        batch_size=len(ROWS),
        plot=False,
        recipe=method,
    )
    prepared = prepare(cfg, plugins, method)
    samples = encode_dpo_pairs(prepared.train, prepared.template, prepared.tokenizer, cfg)
    options = _options(method)
    trainer = build_reference_free_trainer(method, cfg, options, plugins, samples, [], prepared, tmp_path)
    model = trainer.model.eval()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():  # move the policy off its initial point, so every term is non-trivial
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.add_(torch.randn(param.shape, generator=gen) * 0.02)
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(len(samples))])
    with torch.no_grad():
        got = float(trainer.compute_loss(model, batch))
    expected = _formula(method, options, model, samples)
    print(f"{method}: trainer {got:.8f} formula {expected:.8f} |diff| {abs(got - expected):.2e}")
    assert got == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize("method", ["cpo", "simpo", "orpo"])
def test_method_learns_the_preference(method: str, tiny_model_dir, plugins, vowel_task, write_jsonl, tmp_path: Path):
    from peft import PeftModel
    from swiftcore_recipe_preference import reference_free
    from swiftcore_recipe_preference.data import parse_pair
    from swiftcore_recipe_preference.encoding import encode_dpo_pairs

    from swiftcore.api.models import load_model, load_tokenizer, resolve_model_spec
    from swiftcore.api.template import get_template

    model_dir = str(tiny_model_dir("qwen3_5"))
    spec = resolve_model_spec(model_dir, plugins)
    tokenizer = load_tokenizer(model_dir)
    train_rows, held_rows = vowel_task(tokenizer)
    cfg = TrainConfig(
        model=model_dir,
        dataset=(str(write_jsonl(train_rows)),),
        output_dir=str(tmp_path / "run"),
        max_steps=30,
        batch_size=8,
        learning_rate=2e-3,
        lr_scheduler="constant",
        logging_steps=5,
        save_steps=10_000,
        plot=False,
        recipe=method,
    )
    held = [parse_pair(row, f"held-out:{i}") for i, row in enumerate(held_rows)]
    samples = encode_dpo_pairs(held, get_template(spec.default_template, plugins), tokenizer, cfg)

    def accuracy(model: Any) -> float:
        wins = [
            float(_token_logps(model, s["prompt_ids"], s["chosen_ids"])[len(s["prompt_ids"]) - 1 :].sum())
            > float(_token_logps(model, s["prompt_ids"], s["rejected_ids"])[len(s["prompt_ids"]) - 1 :].sum())
            for s in samples
        ]
        return sum(wins) / len(wins)

    before = accuracy(load_model(spec, model_dir, plugins, torch_dtype="float32").eval())
    # ORPO's odds-ratio term is a small addition to its SFT term at the paper's lambda = 0.1; weigh it more here.
    options = {"orpo": {"beta": 0.5}}.get(method)
    result = getattr(reference_free, f"run_{method}")(cfg, plugins, options)
    losses = [json.loads(line)["loss"] for line in result.log_file.read_text().splitlines() if '"loss"' in line]
    base = load_model(spec, model_dir, plugins, torch_dtype="float32")
    after = accuracy(PeftModel.from_pretrained(base, str(result.last_checkpoint)).eval())
    print(f"{method}: 30 steps, loss {losses[0]:.3f} -> {losses[-1]:.3f}; held-out {before:.1%} -> {after:.1%}")
    assert 0.25 <= before <= 0.75
    assert after >= 0.9, f"{method}: held-out pairwise accuracy only {after:.1%}"
