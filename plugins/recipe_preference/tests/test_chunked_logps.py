"""``--loss-chunk-size`` for DPO and KTO: the policy's and the reference's log-probs come from swiftcore-train's
chunked lm_head (a few tokens' logits at a time, recomputed in the backward) in place of TRL's fused head, and the
trainer's loss and every gradient are TRL's own on a fixed batch (fp32, to 1e-6).

Chunks of 3 tokens, so every sequence spans several chunks. Gemma 4 (full fine-tuning, a frozen reference, its
logits softcapped at 30), Qwen3.5 (LoRA, the reference is the adapter disabled) and OLMoE (LoRA; TRL adds its
load-balancing loss, which the chunked head computes from the router logits as the model does: it used to keep TRL's
head, its full logits, on every MoE model).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from swiftcore_train import TrainConfig

ROWS = [
    {"prompt": "say apple", "chosen": "apple apple", "rejected": "pear"},
    {"prompt": "name a colour", "chosen": "blue", "rejected": "a loud noise, very loud"},
    {"prompt": "count to three", "chosen": "one two three", "rejected": "three"},
]


def _dpo_step(tmp_path: Path, model_dir: str, plugins: Any, write_jsonl: Any, tuner: str, chunk: int) -> tuple:
    """``(loss, {name: grad})`` of one DPO batch of :data:`ROWS` (the policy moved off the reference first)."""
    import torch
    from swiftcore_recipe_preference.common import prepare
    from swiftcore_recipe_preference.dpo import build_dpo_trainer
    from swiftcore_recipe_preference.encoding import encode_dpo_pairs
    from swiftcore_recipe_preference.options import DPOOptions

    cfg = TrainConfig(model=model_dir, dataset=(str(write_jsonl(ROWS)),), output_dir=str(tmp_path / f"out{chunk}"),
                      tuner=tuner, batch_size=len(ROWS), plot=False, recipe="dpo")  # fmt: skip
    prepared = prepare(cfg, plugins, "dpo")
    samples = encode_dpo_pairs(prepared.train, prepared.template, prepared.tokenizer, cfg)
    options = DPOOptions(beta=0.3, loss_type=("sigmoid", "sft"), loss_chunk_size=chunk)
    trainer = build_dpo_trainer(cfg, options, plugins, samples, [], prepared, tmp_path)
    model = trainer.model.train()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            if param.requires_grad:  # LoRA B is 0 at the start: the policy would equal the reference
                param.add_(torch.randn(param.shape, generator=gen) * 0.02)
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(len(ROWS))])
    loss = trainer.compute_loss(model, batch)
    loss.backward()
    loss = loss.detach()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad and p.grad is not None}
    return float(loss), grads


@pytest.mark.parametrize(("family", "tuner"), [("gemma4", "full"), ("qwen3_5", "lora"), ("olmoe", "lora")])
def test_chunked_dpo_equals_trl(family, tuner, tmp_path, tiny_model_dir, plugins, write_jsonl, caplog) -> None:
    model_dir = str(tiny_model_dir(family))
    plain_loss, plain = _dpo_step(tmp_path, model_dir, plugins, write_jsonl, tuner, 0)
    with caplog.at_level(logging.INFO, logger="swiftcore.train"):
        chunked_loss, chunked = _dpo_step(tmp_path, model_dir, plugins, write_jsonl, tuner, 3)
    assert "chunked lm_head, 3 tokens per chunk" in caplog.text  # the chunked head did score the batch
    assert plain.keys() == chunked.keys() and len(plain) > 0
    # Each tensor's largest difference over its largest gradient: the two sum the batch in other orders, and a
    # float32 gradient of 36 (Gemma's embedding) is exact to 4e-6 (10 ulp differ: 1e-6 of it).
    # Each tensor's largest difference, over its largest gradient where that is above 1: the two sum the batch in
    # other orders, and a float32 gradient of 36 (Gemma's embedding) is exact to 4e-6 only (10 ulp: 1e-6 of it).
    worst = max((chunked[n] - g).abs().max().item() / max(1.0, g.abs().max().item()) for n, g in plain.items())
    print(f"{family} {tuner}: loss TRL {plain_loss:.8f} chunked {chunked_loss:.8f}; worst grad diff {worst:.2e}")
    # a loss of about 8.4 is 1e-6 of its size apart on an AVX2-only CPU (1.9e-6 measured; one ulp there is 9.5e-7)
    assert chunked_loss == pytest.approx(plain_loss, rel=1e-6, abs=1e-6)
    assert min(g.abs().max().item() for g in plain.values()) > 1e-4  # no gradient is trivially zero
    assert worst < 2e-6


@pytest.mark.parametrize(("softcap", "temperature"), [(None, 1.0), (5.0, 0.7)])
def test_chunked_token_logps_equals_the_full_log_softmax(softcap, temperature) -> None:
    """swiftcore-train's chunked log-probs (the kernel under the DPO/KTO/GRPO head), float64 against the full
    ``log_softmax`` of the same logits: every field and the gradients of both differentiable ones, to 1e-12."""
    import torch
    from swiftcore_train import chunked_token_logps

    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(37, 16, dtype=torch.float64, generator=gen).requires_grad_()
    weight = torch.randn(101, 16, dtype=torch.float64, generator=gen).requires_grad_()
    target = torch.randint(0, 101, (37,), generator=gen)
    a, b = torch.randn(37, dtype=torch.float64, generator=gen), torch.randn(37, dtype=torch.float64, generator=gen)
    logits = hidden @ weight.t()
    logits = logits if softcap is None else softcap * torch.tanh(logits / softcap)
    logits = logits / temperature
    log_p = logits.log_softmax(-1)
    want = (log_p.gather(1, target[:, None])[:, 0], -(log_p.exp() * log_p).sum(-1), (2 * log_p).logsumexp(-1),
            logits.mean(-1), logits.argmax(-1) == target)  # fmt: skip
    outputs = ("log_probs", "entropy", "log_sum_sq_probs", "mean_logits", "is_top1")
    got = chunked_token_logps(hidden, weight, target, 8, softcap=softcap, temperature=temperature, outputs=outputs)
    for name, w, g in zip(outputs, want, got, strict=True):
        assert torch.equal(w, g) if name == "is_top1" else torch.allclose(w, g, rtol=0, atol=1e-12), name
    grad_want = torch.autograd.grad((want[0] * a + want[1] * b).sum(), (hidden, weight))
    grad_got = torch.autograd.grad((got[0] * a + got[1] * b).sum(), (hidden, weight))
    for w, g in zip(grad_want, grad_got, strict=True):
        assert torch.allclose(w, g, rtol=0, atol=1e-12)
