"""``kto``: unpaired rows and pairs both feed KTO; a set of one label kind is refused; the trainer's loss on a
fixed batch equals the KTO paper's (eq. 7-8, as TRL 1.16 computes z_ref); the vowel task is learned."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from swiftcore_data import DataError
from swiftcore_recipe_preference.data import load_unpaired, parse_unpaired
from swiftcore_train import TrainConfig

ROWS = [
    {"messages": [{"role": "user", "content": "say apple"}, {"role": "assistant", "content": "apple"}], "label": True},
    {"prompt": "name a colour", "completion": "a loud noise, very loud", "label": False},
    {"prompt": "count to three", "chosen": "one two three", "rejected": "three"},  # a pair: one of each
    {"prompt": [{"role": "user", "content": "greet me"}], "completion": "hello there, friend", "label": 1},
    {"prompt": "say no", "completion": "yes", "label": 0},
]


def test_labelled_rows_and_pairs_become_examples() -> None:
    examples = [e for i, row in enumerate(ROWS) for e in parse_unpaired(row, f"x.jsonl:{i + 1}")]
    assert [e.label for e in examples] == [True, False, True, False, True, False]
    assert examples[2].reply["content"] == "one two three" and examples[3].reply["content"] == "three"
    assert examples[0].prompt["messages"] == [{"role": "user", "content": "say apple"}]


def test_bad_labels_and_one_sided_sets_are_refused(write_jsonl) -> None:
    with pytest.raises(DataError) as info:
        parse_unpaired({"prompt": "q", "completion": "a", "label": "yes"}, "x.jsonl:4")
    assert (info.value.where, info.value.field) == ("x.jsonl:4", "label")
    path = write_jsonl([ROWS[0], ROWS[3]], name="only_good.jsonl")
    with pytest.raises(DataError, match="all 2 examples are desirable") as info:
        load_unpaired([str(path)])
    assert info.value.field == "label" and str(path) in str(info.value)


def _token_logps(model: Any, prompt: list[int], reply: list[int]) -> Any:
    import torch

    ids = torch.tensor([prompt + reply])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, :-1].float()
    return logits.log_softmax(-1).gather(-1, ids[0, 1:, None])[len(prompt) - 1 :, 0].sum()


def test_kto_loss_equals_the_formula(tmp_path: Path, tiny_model_dir, plugins, write_jsonl) -> None:
    import torch
    from swiftcore_recipe_preference.common import prepare
    from swiftcore_recipe_preference.encoding import encode_kto_examples
    from swiftcore_recipe_preference.kto import build_kto_trainer
    from swiftcore_recipe_preference.options import KTOOptions

    path = write_jsonl(ROWS)
    cfg = TrainConfig(model=str(tiny_model_dir("qwen3_5")), dataset=(str(path),), batch_size=6, recipe="kto")
    prepared = prepare(cfg, plugins, "kto", load=False)
    samples = encode_kto_examples(load_unpaired([str(path)]), prepared.template, prepared.tokenizer, cfg)
    options = KTOOptions(beta=0.4, desirable_weight=1.0, undesirable_weight=1.5)
    trainer = build_kto_trainer(cfg, options, plugins, samples, [], prepared, tmp_path)
    model = trainer.model.eval()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.add_(torch.randn(param.shape, generator=gen) * 0.02)

    def ratio(prompt: list[int], reply: list[int]) -> Any:
        policy = _token_logps(model, prompt, reply)
        with model.disable_adapter():
            return policy - _token_logps(model, prompt, reply)

    n = len(samples)
    ratios = torch.stack([ratio(s["prompt_ids"], s["completion_ids"]) for s in samples])
    # z_ref: the mean log-ratio of each prompt with its batch neighbour's reply (mismatched pairs).
    z_ref = torch.stack([ratio(samples[i]["prompt_ids"], samples[i - 1]["completion_ids"]) for i in range(n)]).mean()
    labels = torch.tensor([s["label"] for s in samples])
    desirable = 1 - torch.sigmoid(options.beta * (ratios[labels] - z_ref))
    undesirable = 1 - torch.sigmoid(options.beta * (z_ref - ratios[~labels]))
    expected = float(torch.cat([options.desirable_weight * desirable, options.undesirable_weight * undesirable]).mean())
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(n)])
    with torch.no_grad():
        got = float(trainer.compute_loss(model, batch))
    print(f"kto: trainer {got:.8f} formula {expected:.8f} |diff| {abs(got - expected):.2e} (z_ref {float(z_ref):.4f})")
    assert abs(float(z_ref)) > 1e-3 and float(ratios.abs().max()) > 1e-2
    assert got == pytest.approx(expected, abs=1e-5)


# qwen3_5, gemma4 (multimodal, its text path), deepseek_v4 (MoE); not qwen3_asr: see test_dpo_learns.py.
@pytest.mark.parametrize("family", ["qwen3_5", "gemma4", "deepseek_v4"])
def test_kto_learns_the_preference(
    family: str, tiny_model_dir, plugins, vowel_task, write_jsonl, tmp_path: Path
) -> None:
    from peft import PeftModel
    from swiftcore_recipe_preference.data import parse_pair
    from swiftcore_recipe_preference.encoding import encode_dpo_pairs
    from swiftcore_recipe_preference.kto import run_kto

    from swiftcore.api.models import load_model, load_tokenizer, resolve_model_spec
    from swiftcore.api.template import get_template

    model_dir = str(tiny_model_dir(family))
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
        recipe="kto",
    )
    held = [parse_pair(row, f"held-out:{i}") for i, row in enumerate(held_rows)]
    samples = encode_dpo_pairs(held, get_template(spec.default_template, plugins), tokenizer, cfg)

    def accuracy(model: Any) -> float:
        wins = [
            float(_token_logps(model, s["prompt_ids"], s["chosen_ids"]))
            > float(_token_logps(model, s["prompt_ids"], s["rejected_ids"]))
            for s in samples
        ]
        return sum(wins) / len(wins)

    before = accuracy(load_model(spec, model_dir, plugins, torch_dtype="float32").eval())
    result = run_kto(cfg, plugins)
    losses = [json.loads(line)["loss"] for line in result.log_file.read_text().splitlines() if '"loss"' in line]
    after = accuracy(
        PeftModel.from_pretrained(
            load_model(spec, model_dir, plugins, torch_dtype="float32"), str(result.last_checkpoint)
        )
    )
    print(f"kto {family}: 30 steps, loss {losses[0]:.3f} -> {losses[-1]:.3f}; held-out {before:.1%} -> {after:.1%}")
    assert 0.25 <= before <= 0.75
    assert after >= 0.9, f"kto {family}: held-out pairwise accuracy only {after:.1%}"
