"""The chunked loss (``--loss-chunk-size``) is the plain loss: the same value and the same gradient for every weight.

:class:`~swiftcore_train.loss.ChunkedCausalLMLoss` never builds the full-vocabulary logits; it must still give what
:func:`~swiftcore_train.loss.causal_lm_loss` (transformers' ``ForCausalLMLoss``, what the Trainer trains on) gives,
on padded and packed batches, under two-step gradient accumulation (``num_items_in_batch`` counts the whole step),
with Gemma's final logit softcapping and tied embeddings, for full and LoRA (lm_head adapted too) training.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import torch
from swiftcore_testing import run_cli

CHUNK = 5  # supervised tokens per chunk: several chunks per micro-batch, the last one ragged


def _samples(vocab: int, seed: int) -> list[dict]:
    """Four samples of different lengths, each with an unsupervised prompt of 3 tokens."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for length in (9, 14, 6, 11):
        ids = torch.randint(10, vocab, (length,), generator=gen).tolist()
        out.append({"input_ids": ids, "labels": [-100] * 3 + ids[3:]})
    return out


def _micro_batches(layout: str, vocab: int) -> list[dict]:
    """Two micro-batches (one accumulated step) of padded or packed rows."""
    from swiftcore_data import PaddingCollator, PaddingFreeCollator

    collate = PaddingCollator(0) if layout == "padded" else PaddingFreeCollator()
    samples = _samples(vocab, seed=1)
    return [collate(samples[:2]), collate(samples[2:])]


def _model(family: str, tuner: str, tiny_model_dir: Any, plain_class: Any) -> Any:
    torch.manual_seed(0)
    model = plain_class(family).from_pretrained(str(tiny_model_dir(family)), dtype=torch.float32)
    if family == "gemma4":
        model.config.get_text_config().final_logit_softcapping = 30.0  # Gemma 2/3's value: exercise the softcap
    if tuner != "full":
        from peft import LoraConfig, get_peft_model

        # init_lora_weights=False: B is random, so every A gets a gradient too. "lora": the lm_head is adapted as
        # well (the checkpointed path); "lora_body": the lm_head stays a frozen nn.Linear (the fused path).
        head = "|lm_head" if tuner == "lora" else ""
        lora = LoraConfig(r=4, lora_alpha=8, target_modules=rf".*language_model.*(q_proj|down_proj){head}",
                          init_lora_weights=False)  # fmt: skip
        model = get_peft_model(model, lora)
    model.train()  # dropout is 0 in these configs: both passes see the same function
    return model


def _step(model: Any, batches: list[dict], chunked: Any) -> tuple[list[float], dict[str, torch.Tensor]]:
    """One accumulated step as the Trainer runs it: each micro-batch's loss over the step's label count, backward."""
    from swiftcore_train.loss import causal_lm_loss

    model.zero_grad(set_to_none=True)
    count = sum(int((b["labels"][..., 1:] != -100).sum()) for b in batches)
    losses = []
    for batch in batches:
        inputs = {k: v for k, v in batch.items() if k != "labels"}
        if chunked is None:
            loss = causal_lm_loss(model(**inputs), batch["labels"], torch.tensor(count))
        else:
            loss = chunked(model(**inputs, **chunked.forward_kwargs), batch["labels"], torch.tensor(count))
        loss.backward()
        losses.append(loss.item())
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return losses, grads


def _chunked_loss(model: Any, chunk: int = CHUNK) -> Any:
    from swiftcore_train.loss import ChunkedCausalLMLoss

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    text = base.config.get_text_config()
    softcap = getattr(text, "final_logit_softcapping", None)
    return ChunkedCausalLMLoss(base.get_output_embeddings(), chunk, softcap=softcap)


#: Relative gradient error allowed: (of every parameter's gradient, of the whole gradient). The chunked and the plain
#: loss compute the same function with other float sums (the lm_head matmul over a chunk, not the whole batch; the
#: fused path's softmax - onehot instead of autograd's log-softmax backward), and both run the cross-entropy in float32
#: (transformers' ``logits.float()``, a downcast for a float64 model), so even float64 is not bit-equal. Measured worst
#: cases (both families, every tuner and layout): float64 2.4e-7 for the whole gradient, 8.9e-6 for one parameter (the
#: A_log of Qwen3.5's linear attention, whose gradient nearly cancels; 2e-16 on the checkpointed LoRA path); float32
#: 1.2e-6 and 2.2e-5. A wrong reduction (a chunk's count for the step's) is off by order 1.
GRAD_RTOL = {torch.float64: (2e-5, 1e-6), torch.float32: (1e-4, 5e-6)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
@pytest.mark.parametrize("layout", ["padded", "packed"])
@pytest.mark.parametrize("tuner", ["full", "lora", "lora_body"])
@pytest.mark.parametrize("family", ["qwen3_5", "gemma4"])
def test_chunked_loss_equals_plain_loss_and_gradients(
    tiny_model_dir: Any, plain_class: Any, family: str, tuner: str, layout: str, dtype: torch.dtype
) -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the same float sums in both passes
    try:
        model = _model(family, tuner, tiny_model_dir, plain_class).to(dtype)
        batches = _micro_batches(layout, model.config.get_text_config().vocab_size)
        plain_losses, plain_grads = _step(model, batches, None)
        chunked_losses, chunked_grads = _step(model, batches, _chunked_loss(model))
    finally:
        torch.set_num_threads(threads)
    assert all(loss > 0 for loss in plain_losses)
    assert chunked_losses == pytest.approx(plain_losses, rel=1e-6, abs=0)
    assert chunked_grads.keys() == plain_grads.keys()
    # LoRA on lm_head; the head's (tied) weight in full training; the last adapted body layer under lora_body.
    reached = {"lora": "lm_head.lora_B", "full": "embed_tokens", "lora_body": "down_proj.lora_B"}[tuner]
    assert any(reached in name for name in plain_grads), f"no gradient reached {reached}"
    per_parameter, whole = GRAD_RTOL[dtype]
    for name, grad in plain_grads.items():
        error = (chunked_grads[name] - grad).norm().item()
        limit = per_parameter * grad.norm().item()
        assert error <= limit, f"{name}: |chunked - plain| {error:.3g} > {limit:.3g}"
    error = sum(((chunked_grads[n] - g) ** 2).sum() for n, g in plain_grads.items()) ** 0.5
    norm = sum((g**2).sum() for g in plain_grads.values()) ** 0.5
    assert error <= whole * norm, f"whole gradient: |chunked - plain| {error:.3g}, |plain| {norm:.3g}"


def test_chunked_loss_mean_without_item_count(tiny_model_dir: Any, plain_class: Any) -> None:
    """No ``num_items_in_batch`` (evaluation): the mean over this batch's supervised tokens, as the plain loss."""
    from swiftcore_train.loss import causal_lm_loss

    model = _model("gemma4", "full", tiny_model_dir, plain_class)
    batch = _micro_batches("padded", model.config.get_text_config().vocab_size)[0]
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    chunked = _chunked_loss(model, chunk=3)
    with torch.no_grad():
        plain = causal_lm_loss(model(**inputs), batch["labels"]).item()
        outputs = model(**inputs, **chunked.forward_kwargs)
        assert outputs.logits.shape[1] == 1  # the full logits were never computed
        assert chunked(outputs, batch["labels"]).item() == pytest.approx(plain, rel=1e-6)


def test_loss_chunk_size_refuses_a_negative_value() -> None:
    from swiftcore_train.sft import _loss_chunk_size

    from swiftcore.api import SwiftcoreError

    assert _loss_chunk_size({}) == 1024 and _loss_chunk_size({"loss_chunk_size": 0}) == 0
    with pytest.raises(SwiftcoreError, match="--loss-chunk-size: -1 must be 0"):
        _loss_chunk_size({"loss_chunk_size": -1})


def test_train_with_chunked_loss_logs_the_plain_losses(
    tiny_model_dir: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``swiftcore train``: --loss-chunk-size 3 trains what --loss-chunk-size 0 trains (packing, accumulation 2)."""
    rows = [{"messages": [{"role": "user", "content": f"Count to {n}."},
                          {"role": "assistant", "content": " ".join(str(j) for j in range(1, n + 1))}]}
            for n in (1, 9, 2, 14, 3, 11, 1, 7)]  # fmt: skip
    data = tmp_path / "chats.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    caplog.set_level(logging.INFO, logger="swiftcore.train")
    try:
        for chunk in ("0", "3"):
            run_cli("train", "--model", str(tiny_model_dir("qwen3_5")), "--dataset", str(data), "--output-dir",
                    str(tmp_path / chunk), "--tuner", "full", "--max-steps", "2", "--logging-steps", "1",
                    "--save-steps", "100", "--learning-rate", "1e-3", "--seed", "3", "--no-plot", "--batch-size", "2",
                    "--gradient-accumulation-steps", "2", "--packing", "--max-length", "64",
                    "--loss-chunk-size", chunk)  # fmt: skip
    finally:
        torch.set_num_threads(threads)

    def steps(out: Path) -> list[dict]:
        rows = [json.loads(line) for line in (out / "logs.jsonl").read_text().splitlines() if line.strip()]
        return [r for r in rows if "loss" in r]

    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("loss: ")]
    assert len(said) == 2 and "as asked (--loss-chunk-size 0)" in said[0], said
    assert said[1].startswith("loss: chunked lm_head + cross-entropy, 3 supervised tokens per chunk"), said
    plain, chunked = steps(tmp_path / "0"), steps(tmp_path / "3")
    assert len(plain) == len(chunked) == 2
    for a, b in zip(plain, chunked):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5), f"step {a['step']}"
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-5), f"step {a['step']}: grad norm"
