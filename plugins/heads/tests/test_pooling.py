"""Pooling picks the right token for left padding, right padding and packed batches."""

from __future__ import annotations

import pytest
import torch
from swiftcore_data import PaddingCollator, PaddingFreeCollator
from swiftcore_heads.model import HeadModel, extract_decoder
from swiftcore_heads.pooling import last_token_indices, pool

SAMPLES = [[5, 17, 30, 41, 9], [12, 8], [33, 34, 35, 36, 37, 38, 39], [101]]


def _batches(pad_id: int = 0) -> dict[str, dict]:
    samples = [{"input_ids": s} for s in SAMPLES]
    packed = PaddingFreeCollator()(samples)
    return {
        "right": PaddingCollator(pad_id, padding_side="right")(samples),
        "left": PaddingCollator(pad_id, padding_side="left")(samples),
        "packed": {k: packed[k] for k in ("input_ids", "position_ids", "seq_lens", "cu_seq_lens_q", "cu_seq_lens_k",
                                          "max_length_q", "max_length_k")},
    }  # fmt: skip


def test_last_token_indices_left_and_right():
    mask = torch.tensor([[1, 1, 0, 0], [0, 0, 1, 1], [1, 1, 1, 1]])
    assert last_token_indices(mask).tolist() == [1, 3, 3]


def test_pool_on_labelled_hidden_states():
    # hidden[b, t] = the token id, so pooling returns ids we can predict by hand.
    batches = _batches()
    expected_last = [s[-1] for s in SAMPLES]
    expected_mean = [sum(s) / len(s) for s in SAMPLES]
    for name, batch in batches.items():
        hidden = batch["input_ids"].float().unsqueeze(-1)
        kw = {"seq_lens": batch["seq_lens"]} if name == "packed" else {"attention_mask": batch["attention_mask"]}
        assert pool(hidden, "last", **kw).squeeze(-1).tolist() == expected_last, name
        assert pool(hidden, "mean", **kw).squeeze(-1).tolist() == pytest.approx(expected_mean), name


@pytest.mark.parametrize("name", ["qwen3_5", "gemma4"])
@pytest.mark.parametrize("pooling", ["last", "mean"])
def test_same_vectors_for_left_right_and_packed(backbone, name, pooling):
    model, spec, _, _ = backbone(name)
    head = HeadModel(extract_decoder(model, spec), "embedding", pooling=pooling).eval()
    batches = _batches()
    with torch.no_grad():
        alone = torch.cat([head(torch.tensor([s])) for s in SAMPLES])
        got = {k: head(**b) for k, b in batches.items()}
    for key, vectors in got.items():
        assert vectors.shape == alone.shape
        torch.testing.assert_close(vectors, alone, atol=1e-5, rtol=1e-4, msg=f"{name} {pooling} {key}")
