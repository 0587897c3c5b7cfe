"""``--padding-free`` DPO and KTO: a batch run as one packed row gives the padded batch's loss and gradients.

On a fixed batch of different-length pairs the trainer's loss (and every trainable gradient) with
``padding_free=True`` equals the padded run's to 1e-5 in fp32, for a family with linear attention (Qwen3.5,
whose recurrent layers the family plugin patches for packed rows) and one with sliding-window attention
(Gemma 4). The policy is moved off the reference first, so the log-ratios are not trivially zero.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from swiftcore_train import TrainConfig

PAIRS = [
    {"prompt": "say apple", "chosen": "apple apple", "rejected": "pear"},
    {"prompt": "name a colour, any colour you like", "chosen": "blue", "rejected": "a loud noise, very loud"},
    {"prompt": "count to three", "chosen": "one two three", "rejected": "three"},
]
UNPAIRED = [
    {"prompt": "say apple", "completion": "apple", "label": True},
    {"prompt": "name a colour, any colour you like", "completion": "a loud noise, very loud", "label": False},
    {"prompt": "count", "completion": "one two three", "label": True},
    {"prompt": "say no", "completion": "yes", "label": False},
]


def _trainer(recipe: str, family: str, padding_free: bool, tmp_path: Path, tiny_model_dir, plugins, write_jsonl):
    import torch
    from swiftcore_recipe_preference.common import prepare

    rows = PAIRS if recipe == "dpo" else UNPAIRED
    cfg = TrainConfig(
        model=str(tiny_model_dir(family)),
        dataset=(str(write_jsonl(rows)),),
        output_dir=str(tmp_path / "out"),
        tuner="lora",
        batch_size=len(rows),
        plot=False,
        recipe=recipe,
        padding_free=padding_free,
    )
    if recipe == "dpo":
        from swiftcore_recipe_preference.dpo import build_dpo_trainer
        from swiftcore_recipe_preference.encoding import encode_dpo_pairs
        from swiftcore_recipe_preference.options import DPOOptions

        prepared = prepare(cfg, plugins, "dpo")
        samples = encode_dpo_pairs(prepared.train, prepared.template, prepared.tokenizer, cfg)
        trainer = build_dpo_trainer(cfg, DPOOptions(beta=0.3), plugins, samples, [], prepared, tmp_path)
    else:
        from swiftcore_recipe_preference.data import load_unpaired
        from swiftcore_recipe_preference.encoding import encode_kto_examples
        from swiftcore_recipe_preference.kto import build_kto_trainer
        from swiftcore_recipe_preference.options import KTOOptions

        prepared = prepare(cfg, plugins, "kto", load=False)
        samples = encode_kto_examples(load_unpaired(list(cfg.dataset)), prepared.template, prepared.tokenizer, cfg)
        trainer = build_kto_trainer(cfg, KTOOptions(beta=0.4), plugins, samples, [], prepared, tmp_path)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in trainer.model.named_parameters():
            if "lora_B" in name:
                param.add_(torch.randn(param.shape, generator=gen) * 0.05)
    return trainer, samples


def _loss_and_grads(trainer: Any, samples: list[dict]) -> tuple[float, dict[str, Any]]:
    model = trainer.model.eval()  # no dropout; the loss path is the training one
    model.zero_grad()
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(len(samples))])
    loss = trainer.compute_loss(model, batch)
    loss.backward()
    return float(loss.detach()), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


#: Largest gradient difference, relative to the largest gradient. Gemma 4 scales attention scores by 1 (q/k norms
#: instead of 1/sqrt(d)), where float32 sdpa's own error is ~2.5e-5 of its gradients (measured against float64,
#: the masked and the causal kernel alike); the padded batch runs sdpa under a mask, the packed row each sample's
#: span causally (swiftcore_data.packed_attention), so their roundings differ by that much (2.4e-5 and 3.1e-5
#: seen). A leak between samples differs by orders of magnitude more.
GRADIENT_TOLERANCE = {"qwen3_5": 1e-5, "gemma4": 1e-4}


@pytest.mark.parametrize("recipe", ["dpo", "kto"])
@pytest.mark.parametrize("family", ["qwen3_5", "gemma4"])
def test_padding_free_loss_and_gradients_equal_the_padded_batch(
    recipe: str, family: str, tmp_path: Path, tiny_model_dir, plugins, write_jsonl
) -> None:
    padded, samples = _trainer(recipe, family, False, tmp_path / "padded", tiny_model_dir, plugins, write_jsonl)
    packed, _ = _trainer(recipe, family, True, tmp_path / "packed", tiny_model_dir, plugins, write_jsonl)
    lengths = {len(s["prompt_ids"]) + len(s.get("chosen_ids", s.get("completion_ids", []))) for s in samples}
    assert len(lengths) > 1  # the padded batch really pads
    want, want_grads = _loss_and_grads(padded, samples)
    got, got_grads = _loss_and_grads(packed, samples)
    # Gradients: the largest difference against the largest gradient (a few reach ~1, summed over many tokens).
    scale = max(float(g.abs().max()) for g in want_grads.values())
    worst = max(float((got_grads[n] - g).abs().max()) for n, g in want_grads.items()) / scale
    print(f"{recipe} {family}: padded {want:.8f} padding-free {got:.8f} |diff| {abs(got - want):.2e}, grad {worst:.1e}")
    assert got == pytest.approx(want, abs=1e-5)
    assert want_grads.keys() == got_grads.keys() and worst <= GRADIENT_TOLERANCE[family]


def test_padding_free_runs_one_packed_row(tmp_path: Path, tiny_model_dir, plugins, write_jsonl) -> None:
    """The model really sees one row with restarting positions, not the padded batch."""
    trainer, samples = _trainer("dpo", "qwen3_5", True, tmp_path, tiny_model_dir, plugins, write_jsonl)
    seen: list[tuple[int, ...]] = []
    backbone = trainer.model.get_base_model().model
    handle = backbone.register_forward_pre_hook(
        lambda _m, _a, kw: seen.append(tuple(kw["input_ids"].shape)), with_kwargs=True
    )
    try:
        _loss_and_grads(trainer, samples)
    finally:
        handle.remove()
    real = sum(len(s["prompt_ids"]) * 2 + len(s["chosen_ids"]) + len(s["rejected_ids"]) for s in samples)
    assert seen and all(shape == (1, real) for shape in seen), seen


def test_other_preference_recipes_refuse_padding_free(tiny_model_dir, plugins, write_jsonl) -> None:
    from swiftcore_recipe_preference.common import prepare

    from swiftcore.api import SwiftcoreError

    cfg = TrainConfig(
        model=str(tiny_model_dir("qwen3_5")), dataset=(str(write_jsonl(PAIRS)),), recipe="cpo", padding_free=True
    )
    with pytest.raises(SwiftcoreError, match="--padding-free not supported"):
        prepare(cfg, plugins, "cpo")
