"""Collators: shapes and masks, and loss parity of packed batches on real tiny HF models."""

from __future__ import annotations

import pytest
import torch
from swiftcore_data import DataError, PaddingCollator, PaddingFreeCollator, pack_samples

IGNORE = -100
VOCAB = 128


def samples_with_prompts() -> list[dict]:
    """Three samples of different lengths; prompt tokens carry no loss, as a template emits them."""
    gen = torch.Generator().manual_seed(1)
    out = []
    for n, prompt in ((7, 3), (12, 5), (5, 0)):  # the last learns every token (no prompt)
        ids = torch.randint(0, VOCAB, (n,), generator=gen).tolist()
        out.append({"input_ids": ids, "labels": [IGNORE] * prompt + ids[prompt:]})
    return out


# ----------------------------------------------------------------------------------- PaddingCollator


@pytest.mark.parametrize("side", ["right", "left"])
def test_padding_collator_shapes_and_masks(side: str) -> None:
    batch = PaddingCollator(pad_token_id=0, padding_side=side)(
        [{"input_ids": [5, 6, 7], "labels": [IGNORE, 6, 7]}, {"input_ids": [8], "labels": [8]}]
    )
    assert set(batch) == {"input_ids", "labels", "attention_mask"}
    assert all(t.dtype == torch.long and t.shape == (2, 3) for t in batch.values())
    if side == "right":
        assert batch["input_ids"].tolist() == [[5, 6, 7], [8, 0, 0]]
        assert batch["labels"].tolist() == [[IGNORE, 6, 7], [8, IGNORE, IGNORE]]
        assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    else:
        assert batch["input_ids"].tolist() == [[5, 6, 7], [0, 0, 8]]
        assert batch["labels"].tolist() == [[IGNORE, 6, 7], [IGNORE, IGNORE, 8]]
        assert batch["attention_mask"].tolist() == [[1, 1, 1], [0, 0, 1]]


def test_padding_collator_pad_to_multiple_of_and_no_labels() -> None:
    batch = PaddingCollator(pad_token_id=9, pad_to_multiple_of=8)([{"input_ids": [1] * 9}, {"input_ids": [2]}])
    assert set(batch) == {"input_ids", "attention_mask"}
    assert batch["input_ids"].shape == (2, 16)
    assert batch["attention_mask"].sum(1).tolist() == [9, 1]
    assert batch["input_ids"][1, 1:].eq(9).all()


def test_padding_collator_errors() -> None:
    with pytest.raises(DataError, match="'right' or 'left'"):
        PaddingCollator(pad_token_id=0, padding_side="middle")
    with pytest.raises(DataError, match=r"^train\.jsonl:3: labels: 1 labels for 2 input_ids"):
        PaddingCollator(0)([{"input_ids": [1, 2], "labels": [1], "_source": "train.jsonl:3"}])
    with pytest.raises(DataError, match="empty batch"):
        PaddingCollator(0)([])


# ------------------------------------------------------------------------------- PaddingFreeCollator


def test_padding_free_layout() -> None:
    batch = PaddingFreeCollator()(
        [
            {"input_ids": [1, 2, 3], "labels": [IGNORE, 2, 3]},
            {"input_ids": [4, 5], "labels": [4, 5]},
            {"input_ids": [6, 7, 8, 9], "labels": [6, 7, 8, 9]},
        ]
    )
    assert batch["input_ids"].tolist() == [[1, 2, 3, 4, 5, 6, 7, 8, 9]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 1, 0, 1, 2, 3]]
    # The first label of each sample is masked: the model shifts labels, so it would be predicted from
    # the previous sample's last token.
    assert batch["labels"].tolist() == [[IGNORE, 2, 3, IGNORE, 5, IGNORE, 7, 8, 9]]
    assert batch["seq_lens"].tolist() == [3, 2, 4] and batch["seq_lens"].dtype == torch.int32
    for key in ("cu_seq_lens_q", "cu_seq_lens_k"):
        assert batch[key].tolist() == [0, 3, 5, 9] and batch[key].dtype == torch.int32
    assert batch["max_length_q"] == batch["max_length_k"] == 4
    assert batch["input_ids"].dtype == batch["labels"].dtype == batch["position_ids"].dtype == torch.long
    assert batch["use_cache"] is False


def test_padding_free_matches_transformers_flattening_collator() -> None:
    from transformers import DataCollatorWithFlattening

    samples = samples_with_prompts()
    ours = PaddingFreeCollator()(samples)
    theirs = DataCollatorWithFlattening(return_flash_attn_kwargs=True)(samples)
    for key in ("input_ids", "labels", "position_ids", "cu_seq_lens_q", "cu_seq_lens_k"):
        assert torch.equal(ours[key], theirs[key]), key
    assert ours["max_length_q"] == theirs["max_length_q"]


def test_padding_free_flattens_bins_from_pack_samples() -> None:
    samples = samples_with_prompts()
    bins = pack_samples(samples, max_length=20, seed=0)
    batch = PaddingFreeCollator()(bins)
    flat = [s for b in bins for s in b]
    assert batch["seq_lens"].tolist() == [len(s["input_ids"]) for s in flat]
    assert batch["input_ids"][0].tolist() == [t for s in flat for t in s["input_ids"]]


# --------------------------------------------------------------------------- parity on real HF models


def _tiny_model(arch: str, attn: str):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    config_cls, model_cls = {"qwen3": (Qwen3Config, Qwen3ForCausalLM), "llama": (LlamaConfig, LlamaForCausalLM)}[arch]
    config = config_cls(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        max_position_embeddings=64,
        use_cache=True,  # the default of real checkpoints; the collator must defeat it
        attn_implementation=attn,
    )
    torch.manual_seed(0)
    model = model_cls(config).eval()
    assert model.config._attn_implementation == attn
    return model


@pytest.fixture(
    scope="module",
    params=[("qwen3", "sdpa"), ("qwen3", "eager"), ("llama", "sdpa"), ("llama", "eager")],
    ids=lambda p: "-".join(p),
)
def tiny_model(request: pytest.FixtureRequest):
    return _tiny_model(*request.param)


def _token_losses(logits, labels):
    """Per-position loss of predicting ``labels[t + 1]`` from ``logits[t]`` (0 where the label is -100)."""
    losses = torch.nn.functional.cross_entropy(
        logits[0, :-1].double(), labels[0, 1:], ignore_index=IGNORE, reduction="none"
    )
    return losses, labels[0, 1:] != IGNORE


def _alone(model, sample) -> tuple[float, float, int]:
    """(mean loss from the model itself, summed loss, token count) of one sample run alone."""
    ids = torch.tensor([sample["input_ids"]])
    labels = torch.tensor([sample["labels"]])
    with torch.no_grad():
        out = model(input_ids=ids, labels=labels)
    losses, mask = _token_losses(out.logits, labels)
    return out.loss.item(), losses.sum().item(), int(mask.sum())


def test_padding_free_per_sample_losses_equal_one_by_one(tiny_model) -> None:
    samples = samples_with_prompts()
    batch = PaddingFreeCollator()(samples)
    with torch.no_grad():
        out = tiny_model(**batch)
    losses, mask = _token_losses(out.logits, batch["labels"])
    cu = batch["cu_seq_lens_q"].tolist()
    total_sum, total_count = 0.0, 0
    for k, sample in enumerate(samples):
        # Shifted position t predicts token t + 1: sample k owns t in [cu[k], cu[k + 1] - 1).
        span = slice(cu[k], cu[k + 1] - 1)
        packed_mean = (losses[span].sum() / mask[span].sum()).item()
        alone_mean, alone_sum, alone_count = _alone(tiny_model, sample)
        assert int(mask[span].sum()) == alone_count
        assert packed_mean == pytest.approx(alone_mean, abs=1e-5)
        total_sum, total_count = total_sum + alone_sum, total_count + alone_count
    # Masked boundary labels: no position predicts the next sample's first token.
    assert int(mask.sum()) == total_count
    assert out.loss.item() == pytest.approx(total_sum / total_count, abs=1e-5)


def test_padding_free_without_cache_off_leaks_across_samples(tiny_model) -> None:
    """Why the collator sends use_cache=False: with a cache, transformers ignores the packing."""
    samples = samples_with_prompts()
    batch = PaddingFreeCollator(disable_cache=False)(samples)
    with torch.no_grad():
        leaky = tiny_model(**batch).logits
        clean = tiny_model(**batch, use_cache=False).logits
    first = len(samples[0]["input_ids"])
    assert torch.allclose(leaky[:, :first], clean[:, :first], atol=1e-5)  # the first sample sees nothing else
    assert not torch.allclose(leaky[:, first:], clean[:, first:], atol=1e-3)


def test_padded_batch_per_sample_losses_equal_one_by_one(tiny_model) -> None:
    samples = samples_with_prompts()
    batch = PaddingCollator(pad_token_id=0)(samples)
    with torch.no_grad():
        logits = tiny_model(**batch).logits
    for k, sample in enumerate(samples):
        losses, mask = _token_losses(logits[k : k + 1], batch["labels"][k : k + 1])
        alone_mean, _, _ = _alone(tiny_model, sample)
        assert (losses.sum() / mask.sum()).item() == pytest.approx(alone_mean, abs=1e-5)
