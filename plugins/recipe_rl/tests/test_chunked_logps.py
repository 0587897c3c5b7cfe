"""``--loss-chunk-size`` for GRPO: the per-token log-probs of the completion (policy, old policy, reference) come
from swiftcore-train's chunked lm_head (a few tokens' logits at a time, recomputed in the backward) in place of TRL's
fused head; on a fixed batch the old and reference log-probs, the trainer's loss and every gradient are the plain
(TRL's head's) ones (fp32, to 1e-6).

The batch: 8 completions of 1-6 random tokens after 3-token prompts, fixed advantages, a KL term (beta 0.05), at
temperature 0.7; the policy (LoRA on the tiny Qwen3.5) is moved twice, so its ratio to the old policy and its
log-ratio to the reference (the adapter disabled) are not 1 and 0. Chunks of 3 tokens: every completion spans two.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

LENGTHS = (3, 6, 1, 4, 5, 2, 6, 3)
ADVANTAGES = (1.2, -0.7, 0.4, -0.9, 0.8, 0.8, -1.1, -0.5)


def _grpo_step(tiny_dir: Path, plugins: Any, tmp_path: Path, make: Any, chunk: int) -> dict[str, Any]:
    import torch
    from swiftcore_recipe_rl.trainer import chunk_lm_heads

    torch.manual_seed(0)
    trainer = make("grpo", tiny_dir, plugins, tmp_path / f"grpo{chunk}", grpo_beta=0.05, rollout_temperature=0.7)
    chunk_lm_heads(trainer, chunk)
    model = trainer.model.train()

    def move(seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in model.parameters():
                if p.requires_grad:
                    p.add_(torch.randn(p.shape, generator=gen) * 0.01)

    gen = torch.Generator().manual_seed(1)
    vocab = model.get_output_embeddings().weight.shape[0]
    width = max(LENGTHS)
    batch = {
        "prompt_ids": torch.randint(0, vocab, (len(LENGTHS), 3), generator=gen),
        "prompt_mask": torch.ones(len(LENGTHS), 3, dtype=torch.long),
        "completion_ids": torch.randint(0, vocab, (len(LENGTHS), width), generator=gen),
        "completion_mask": (torch.arange(width)[None, :] < torch.tensor(LENGTHS)[:, None]).long(),
        "advantages": torch.tensor(ADVANTAGES),
        "num_items_in_batch": torch.tensor(float(sum(LENGTHS))),
    }
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    move(0)
    with torch.no_grad():
        old, entropy, _ = trainer._get_per_token_logps_and_entropies(model, ids, attention, width, compute_entropy=True)
        with model.disable_adapter():
            ref, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, attention, width)
    move(1)
    trainer.current_gradient_accumulation_steps = 1
    loss = trainer._compute_loss(model, {**batch, "old_per_token_logps": old, "ref_per_token_logps": ref})
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad and p.grad is not None}
    mask = batch["completion_mask"].bool()
    aux = list(trainer._metrics["train"].get("aux_loss", []))  # TRL logs the load-balancing loss it adds
    return {"old": old[mask], "entropy": entropy[mask], "ref": ref[mask], "loss": loss.detach(), "grads": grads,
            "aux": aux}  # fmt: skip


@pytest.mark.parametrize("family", ["qwen3_5", "olmoe"])
def test_chunked_grpo_equals_the_plain_head(family, tiny_model_dir, plugins, tmp_path, trainer_factory, caplog) -> None:
    """On the fixed batch, the chunked head's log-probs, loss and gradients are TRL's head's. OLMoE: TRL adds
    ``router_aux_loss_coef * aux_loss`` to the loss (its ``aux_loss_enabled``); the chunked head computes that
    load-balancing loss from the router logits as the model's own forward does (it used to return none, and the
    first step failed; then the recipes kept TRL's head and its full logits on every MoE model)."""
    import torch

    model = tiny_model_dir(family)
    plain = _grpo_step(model, plugins, tmp_path, trainer_factory, 0)
    with caplog.at_level(logging.INFO, logger="swiftcore.train"):
        chunked = _grpo_step(model, plugins, tmp_path, trainer_factory, 3)
    assert "chunked lm_head, 3 tokens per chunk" in caplog.text  # the chunked head did score the batch
    if family == "olmoe":
        print(f"olmoe: aux loss plain {plain['aux']} chunked {chunked['aux']}")
        assert len(plain["aux"]) == 1 and plain["aux"][0] > 0
        assert chunked["aux"] == pytest.approx(plain["aux"], abs=1e-6)
    else:
        assert plain["aux"] == chunked["aux"] == []
    for name in ("old", "ref"):
        # Log-probs down to about -15, where one float32 ulp is about 1e-6: to 1e-6 of their size (an AVX2-only CPU
        # sums the head's matmul in another order than an AVX-512 one: 1.9e-6 apart at -14.85 measured, rtol=0 failed)
        gap = (chunked[name] - plain[name]).abs().max().item()
        print(f"grpo {name} log-probs: largest gap {gap:.2e}")
        assert torch.allclose(chunked[name], plain[name], rtol=1e-6, atol=1e-6), (name, gap)
    # entropies of about 5 (a metric, summed otherwise than TRL's online log-sum-exp): to 1e-6 of their size
    assert torch.allclose(chunked["entropy"], plain["entropy"], rtol=1e-6, atol=1e-6)
    assert (plain["old"] - plain["ref"]).abs().max() > 1e-2  # the KL term is not trivially zero
    worst = max((chunked["grads"][n] - g).abs().max().item() for n, g in plain["grads"].items())
    print(f"grpo: loss plain {plain['loss']:.8f} chunked {chunked['loss']:.8f}; worst grad diff {worst:.2e}")
    assert plain["grads"].keys() == chunked["grads"].keys() and len(plain["grads"]) > 0
    assert abs(float(chunked["loss"]) - float(plain["loss"])) < 1e-6
    largest = max(g.abs().max().item() for g in plain["grads"].values())
    assert largest > 1e-3  # the gradients are not trivially zero
    # to 2e-6 of the largest gradient (at least 2e-6): float32 sums over the batch's tokens in another order differ by
    # some ulps of it (an AVX2-only CPU: 1.6e-6 apart for a largest gradient of 1.34; an AVX-512 one: below 1e-6)
    print(f"grpo: largest gradient {largest:.3f}")
    assert worst < 2e-6 * max(1.0, largest), (worst, largest)


def test_a_negative_chunk_size_is_refused(tiny_dir, plugins, tmp_path, trainer_factory) -> None:
    from swiftcore_recipe_rl.trainer import chunk_lm_heads

    from swiftcore.api import SwiftcoreError

    trainer = trainer_factory("grpo", tiny_dir, plugins, tmp_path / "bad")
    with pytest.raises(SwiftcoreError, match="--loss-chunk-size"):
        chunk_lm_heads(trainer, -1)


def _rloo_logps(tiny_dir: Path, plugins: Any, tmp_path: Path, make: Any, chunk: int) -> dict[str, Any]:
    """The RLOO trainer's (TRL's RLOOTrainer) policy log-probs and entropies of the fixed completions, and the
    gradient of an advantage-weighted sum of them, after :func:`chunk_lm_heads` as the recipe runs it."""
    import torch
    from swiftcore_recipe_rl.trainer import chunk_lm_heads

    torch.manual_seed(0)
    trainer = make("rloo", tiny_dir, plugins, tmp_path / f"rloo{chunk}", rloo_beta=0.05, rollout_temperature=0.7)
    chunk_lm_heads(trainer, chunk)
    model = trainer.model.train()
    gen = torch.Generator().manual_seed(1)
    vocab = model.get_output_embeddings().weight.shape[0]
    width = max(LENGTHS)
    ids = torch.randint(0, vocab, (len(LENGTHS), 3 + width), generator=gen)
    mask = (torch.arange(width)[None, :] < torch.tensor(LENGTHS)[:, None]).long()
    attention = torch.cat([torch.ones(len(LENGTHS), 3, dtype=torch.long), mask], dim=1)
    logps, entropy = trainer._get_per_token_logps_and_entropies(model, ids, attention, width, compute_entropy=True)[:2]
    (-(logps * mask * torch.tensor(ADVANTAGES)[:, None]).sum()).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad and p.grad is not None}
    return {"logps": logps[mask.bool()].detach(), "entropy": entropy[mask.bool()], "grads": grads}


def test_chunked_rloo_equals_the_plain_head(tiny_dir, plugins, tmp_path, trainer_factory, caplog) -> None:
    """``--recipe rloo`` (and so ``reinforce_pp``, a GRPO trainer) scores with the chunked head too: log-probs,
    entropies and gradients equal TRL's fused head's (fp32, to 1e-6 of their size)."""
    import torch

    plain = _rloo_logps(tiny_dir, plugins, tmp_path, trainer_factory, 0)
    with caplog.at_level(logging.INFO, logger="swiftcore.train"):
        chunked = _rloo_logps(tiny_dir, plugins, tmp_path, trainer_factory, 3)
    assert "chunked lm_head, 3 tokens per chunk" in caplog.text
    for name in ("logps", "entropy"):
        gap = (chunked[name] - plain[name]).abs().max().item()
        print(f"rloo {name}: largest gap {gap:.2e}")
        assert torch.allclose(chunked[name], plain[name], rtol=1e-6, atol=1e-6), (name, gap)
    assert plain["grads"].keys() == chunked["grads"].keys() and len(plain["grads"]) > 0
    worst = max((chunked["grads"][n] - g).abs().max().item() for n, g in plain["grads"].items())
    largest = max(g.abs().max().item() for g in plain["grads"].values())
    print(f"rloo: largest gradient {largest:.3f}, worst diff {worst:.2e}")
    assert largest > 1e-3 and worst < 2e-6 * max(1.0, largest), (worst, largest)


@pytest.mark.parametrize("recipe", ["grpo", "rloo"])
def test_a_moe_model_s_load_balancing_loss_comes_from_the_chunked_head(
    recipe, tiny_model_dir, plugins, tmp_path, trainer_factory, caplog
) -> None:
    """OLMoE's config has ``output_router_logits`` false and a coefficient: TRL still adds the load-balancing loss
    (its rule: the attribute, whatever its value) from the forward's ``aux_loss``. The chunked head takes over and
    returns it: the value of the model's own forward (full logits) with ``output_router_logits=True``."""
    import torch
    from swiftcore_recipe_rl.trainer import chunk_lm_heads

    trainer = trainer_factory(recipe, tiny_model_dir("olmoe"), plugins, tmp_path / recipe)
    assert trainer.aux_loss_enabled
    with caplog.at_level(logging.INFO, logger="swiftcore.train"):
        chunk_lm_heads(trainer, None)
    assert "chunked lm_head" in caplog.text
    assert trainer.loss_chunk_size > 0  # CHORD's and a teacher's scores chunk too
    ids = torch.randint(0, 100, (2, 6), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    with torch.no_grad():
        *_, aux = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, 3, compute_aux_loss=True)
        want = trainer.model(input_ids=ids, attention_mask=mask, output_router_logits=True).aux_loss
    print(f"{recipe}: aux loss chunked head {float(aux):.8f}, the model's forward {float(want):.8f}")
    assert aux is not None and float(aux) > 0
    assert abs(float(aux) - float(want)) < 1e-6
