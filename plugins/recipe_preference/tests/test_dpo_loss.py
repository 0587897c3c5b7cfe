"""The ``dpo`` recipe's trainer computes the papers' losses: on a fixed batch, the loss it reports equals the
formula applied to policy and reference log-probs computed here independently (fp32, to 1e-5).

The independent computation scores each sequence alone (no padding, no fused LM head): the sum of the
log-softmax of the model's ordinary logits over the reply tokens. The policy is moved away from the
reference first (random LoRA B / weight noise), or every log-ratio would be 0.

- sigmoid (DPO, Rafailov et al. eq. 7): ``-log σ(β·Δ)``, Δ = (log π_c − log π_ref_c) − (log π_r − log π_ref_r)
- hinge (SLiC, Zhao et al.): ``max(0, 1 − β·Δ)``
- ipo (Azar et al. eq. 17): ``(Δ̄ − 1/(2β))²``, with each log-ratio averaged over its reply's tokens, as TRL
  implements it (and documents having confirmed with the IPO authors).
"""

from __future__ import annotations

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
BETA = 0.3


def _trainer(tmp_path: Path, model_dir: str, plugins: Any, write_jsonl, tuner: str, **options: Any) -> Any:
    from swiftcore_recipe_preference.common import prepare
    from swiftcore_recipe_preference.dpo import build_dpo_trainer
    from swiftcore_recipe_preference.encoding import encode_dpo_pairs
    from swiftcore_recipe_preference.options import DPOOptions

    cfg = TrainConfig(
        model=model_dir,
        dataset=(str(write_jsonl(ROWS)),),
        output_dir=str(tmp_path / "out"),
        tuner=tuner,
        batch_size=len(ROWS),
        plot=False,
        recipe="dpo",
    )
    prepared = prepare(cfg, plugins, "dpo")
    samples = encode_dpo_pairs(prepared.train, prepared.template, prepared.tokenizer, cfg)
    trainer = build_dpo_trainer(cfg, DPOOptions(beta=BETA, **options), plugins, samples, [], prepared, tmp_path)
    return trainer, samples


def _perturb(model: Any, tuner: str) -> None:
    import torch

    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if (tuner == "lora" and "lora_B" in name) or (tuner == "full" and param.requires_grad):
                param.add_(torch.randn(param.shape, generator=gen) * 0.02)


def _logps(model: Any, samples: list[dict], key: str) -> Any:
    """Sum of the reply tokens' log-probs, each sequence scored alone with the model's ordinary forward."""
    import torch

    out = []
    for s in samples:
        ids = torch.tensor([s["prompt_ids"] + s[key]])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, :-1].float()
        token_logps = logits.log_softmax(-1).gather(-1, ids[0, 1:, None])[:, 0]
        out.append(token_logps[len(s["prompt_ids"]) - 1 :].sum())
    return torch.stack(out)


def _paper_loss(loss_type: str, pol: tuple, ref: tuple, samples: list[dict]) -> Any:
    import torch
    import torch.nn.functional as F

    chosen_ratio, rejected_ratio = pol[0] - ref[0], pol[1] - ref[1]
    delta = chosen_ratio - rejected_ratio
    if loss_type == "sigmoid":
        return -F.logsigmoid(BETA * delta).mean()
    if loss_type == "hinge":
        return torch.relu(1 - BETA * delta).mean()
    assert loss_type == "ipo"
    n_chosen = torch.tensor([len(s["chosen_ids"]) for s in samples], dtype=torch.float32)
    n_rejected = torch.tensor([len(s["rejected_ids"]) for s in samples], dtype=torch.float32)
    return ((chosen_ratio / n_chosen - rejected_ratio / n_rejected) - 1 / (2 * BETA)).pow(2).mean()


def _trainer_loss(trainer: Any, samples: list[dict]) -> float:
    import torch

    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(len(samples))])
    with torch.no_grad():
        return float(trainer.compute_loss(trainer.model, batch))


@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo", "hinge"])
def test_lora_loss_equals_the_formula(loss_type: str, tmp_path: Path, tiny_model_dir, plugins, write_jsonl) -> None:
    model_dir = str(tiny_model_dir("qwen3_5"))
    trainer, samples = _trainer(tmp_path, model_dir, plugins, write_jsonl, "lora", loss_type=(loss_type,))
    model = trainer.model.eval()
    assert trainer.ref_model is None and list(model.peft_config) == ["default"]  # reference = adapter disabled
    _perturb(model, "lora")
    pol = (_logps(model, samples, "chosen_ids"), _logps(model, samples, "rejected_ids"))
    with model.disable_adapter():
        ref = (_logps(model, samples, "chosen_ids"), _logps(model, samples, "rejected_ids"))
    expected = float(_paper_loss(loss_type, pol, ref, samples))
    got = _trainer_loss(trainer, samples)
    print(f"{loss_type}: trainer {got:.8f} formula {expected:.8f} |diff| {abs(got - expected):.2e}")
    assert abs((pol[0] - ref[0]) - (pol[1] - ref[1])).max() > 1e-2  # the ratios are not trivially zero
    assert got == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize("precompute", [False, True])
def test_full_fine_tuning_uses_a_frozen_reference(
    precompute: bool, tmp_path: Path, tiny_model_dir, plugins, write_jsonl
) -> None:
    from swiftcore.api.models import load_model, resolve_model_spec

    model_dir = str(tiny_model_dir("gemma4"))
    trainer, samples = _trainer(tmp_path, model_dir, plugins, write_jsonl, "full", precompute_ref_logps=precompute)
    assert (trainer.ref_model is None) == precompute  # precomputed: no reference model held during training
    reference = load_model(resolve_model_spec(model_dir, plugins), model_dir, plugins, torch_dtype="float32").eval()
    ref = (_logps(reference, samples, "chosen_ids"), _logps(reference, samples, "rejected_ids"))
    if precompute:
        stored = trainer.train_dataset["ref_chosen_logps"]
        assert stored == pytest.approx(ref[0].tolist(), abs=1e-4)
    model = trainer.model.eval()
    _perturb(model, "full")
    pol = (_logps(model, samples, "chosen_ids"), _logps(model, samples, "rejected_ids"))
    expected = float(_paper_loss("sigmoid", pol, ref, samples))
    got = _trainer_loss(trainer, samples)
    print(f"full (precompute={precompute}): trainer {got:.8f} formula {expected:.8f} |diff| {abs(got - expected):.2e}")
    assert got == pytest.approx(expected, abs=1e-5)


def test_a_reference_with_another_tokenizer_is_refused(tmp_path: Path, tiny_model_dir, plugins, write_jsonl) -> None:
    from swiftcore.api import SwiftcoreError

    with pytest.raises(SwiftcoreError, match="another tokenizer"):
        _trainer(
            tmp_path,
            str(tiny_model_dir("qwen3_5")),
            plugins,
            write_jsonl,
            "full",
            ref_model=str(tiny_model_dir("gemma4")),
        )
