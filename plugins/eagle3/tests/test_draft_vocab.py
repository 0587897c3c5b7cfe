"""``--draft-vocab-size``: the draft's reduced vocabulary (speculators' ``d2t`` / ``t2d``) built from the trained
tokens' frequencies, the loss over it against a float64 reference, a reduced draft trained by ``swiftcore train
--recipe eagle3`` accepted far more often than an untrained one with output token-identical to plain greedy, and the
refusals."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

K = 3  # proposals per verification step
DRAFT_VOCAB = 96  # of the tiny target's 512 tokens: covers the 75 distinct tokens the greetings train on
DRAFT_STEPS = 40

# Encoded chats with known ids: prompt tokens (label -100) are not counted, however frequent.
FIXED_SAMPLES = [
    {"input_ids": [1, 1, 1, 1, 5, 7, 7, 9], "labels": [-100, -100, -100, -100, 5, 7, 7, 9]},
    {"input_ids": [1, 1, 3, 9, 9, 4, 2], "labels": [-100, -100, 3, 9, 9, 4, 2]},
    {"input_ids": [1, 6, 4, 7], "labels": [-100, -100, 4, 7]},
]
# Counted by hand: 7 x3, 9 x3, 4 x2, then 2, 3, 5 once each (6 is under the prompt: -100 after its position).
FIXED_FREQ = {7: 3, 9: 3, 4: 2, 2: 1, 3: 1, 5: 1}


def test_mapping_is_the_top_n_of_the_trained_tokens() -> None:
    """Frequencies count the trained tokens only; the draft vocabulary is the N most frequent (ties to the lower
    id, as speculators breaks them), draft ids in target-id order, padded with the lowest unseen ids when fewer
    tokens were seen; d2t and t2d describe the same set both ways."""
    import torch
    from swiftcore_eagle3.draft import token_frequencies, vocab_mappings

    freq = token_frequencies(FIXED_SAMPLES)
    assert freq == FIXED_FREQ
    # N = 4: 7, 9 (3 each), 4 (2), then the tie 2/3/5 at one each goes to 2.
    cases = {4: [2, 4, 7, 9], 1: [7], 6: [2, 3, 4, 5, 7, 9], 8: [0, 1, 2, 3, 4, 5, 7, 9]}
    for n, kept in cases.items():
        d2t, t2d = vocab_mappings(freq, n, 16)
        assert d2t.dtype == torch.long and t2d.dtype == torch.bool
        assert (torch.arange(n) + d2t).tolist() == kept, n  # draft id i is target id i + d2t[i]
        assert t2d.shape == (16,) and torch.nonzero(t2d).flatten().tolist() == kept, n
        # round trip: target id -> draft id (its rank among the kept ids) -> target id
        t2d_index = torch.cumsum(t2d.long(), 0) - 1
        for target_id in kept:
            draft_id = int(t2d_index[target_id])
            assert draft_id + int(d2t[draft_id]) == target_id


def _samples(encoder: Any) -> list[dict[str, Any]]:
    records = [
        {"messages": [{"role": "user", "content": "Tell me of a quib."}, {"role": "assistant", "content": "A quib."}]},
        {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there, friend."}]},
    ]
    return encoder.train_samples(records, loss_policy="all_assistant", max_length=256, truncation="error")


def test_reduced_vocab_loss_matches_a_float64_reference(
    tiny_model_dir: Callable[[str], Path], plugins: Any, encoder: Any, tmp_path: Path
) -> None:
    """A draft over 24 tokens of the tiny target's vocabulary: its head is the target's rows of those tokens,
    speculators' loss (one TTT step) equals the KL divergence computed here in float64 between the target's
    distribution renormalised over the 24 tokens and the draft's, on the trained positions; saved and loaded back,
    the checkpoint keeps the vocabulary (config ``draft_vocab_size``, ``d2t`` / ``t2d`` buffers, a 24-row head)."""
    import torch
    import torch.nn.functional as F
    from safetensors import safe_open
    from speculators.losses import resolve_loss_config
    from swiftcore_eagle3.draft import (
        _fused_input,
        _run_layers,
        build_draft,
        load_draft,
        save_draft,
        token_frequencies,
        vocab_mappings,
    )
    from swiftcore_eagle3.recipe import packed_batch

    from swiftcore.api.models import load_model, resolve_model_spec

    n_vocab = 24
    target_dir = tiny_model_dir("qwen3_5")  # random weights: this checks wiring and arithmetic, not learning
    target = load_model(resolve_model_spec(str(target_dir), plugins), str(target_dir), plugins).eval()
    vocab = target.config.get_text_config().vocab_size
    samples = _samples(encoder)
    freq = token_frequencies(samples)
    d2t, t2d = vocab_mappings(freq, n_vocab, vocab)
    aux = [1, 2, 3]
    draft = build_draft(target, str(target_dir), aux_layer_ids=aux, seed=0, draft_vocab_size=n_vocab, token_freq=freq)
    assert torch.equal(draft.d2t, d2t) and torch.equal(draft.t2d, t2d)
    head = target.get_output_embeddings().weight
    assert torch.equal(draft.lm_head.weight, head[t2d]) and draft.lm_head.weight.shape == (n_vocab, head.shape[1])
    with torch.no_grad():  # a draft that is not the identity of its init: random, non-zero weights everywhere
        for p in draft.layers.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    batch = packed_batch(target, samples, aux)
    with torch.no_grad():
        _, loss, _ = draft(**batch, ttt_steps=1, loss_config=resolve_loss_config("kl_div", "eager"))

    total, count = torch.tensor(0.0, dtype=torch.float64), 0
    for sample in samples:
        ids = torch.tensor([sample["input_ids"]])
        with torch.no_grad():
            out = target(input_ids=ids, output_hidden_states=True)
            n = ids.shape[1] - 1
            hidden = torch.cat([out.hidden_states[i] for i in aux], dim=-1)[:, :-1]
            x = torch.cat([draft.embed_tokens(ids[:, 1:]), draft.fc(_fused_input(draft, hidden))], dim=-1)
            mask = torch.full((n, n), float("-inf")).triu(1)[None, None]
            h = _run_layers(draft, x, torch.arange(1, n + 1)[None], mask, None)
            logits = draft.lm_head(draft.norm(h))[0].double()
            assert logits.shape[-1] == n_vocab
            p = F.softmax(out.logits[0, 1:, t2d].double(), dim=-1)  # the target over the draft's tokens only
            kl = (p * (p.log() - F.log_softmax(logits, dim=-1))).sum(-1)
            trained = torch.tensor(sample["labels"][1:]) != -100
            total += kl[trained].sum()
            count += int(trained.sum())
    assert count > 0
    assert float(loss) == pytest.approx(float(total / count), rel=1e-4)

    out_dir = save_draft(draft, tmp_path / "draft")
    assert json.loads((out_dir / "config.json").read_text())["draft_vocab_size"] == n_vocab
    with safe_open(str(out_dir / "model.safetensors"), "pt") as f:
        assert torch.equal(f.get_tensor("d2t"), d2t) and torch.equal(f.get_tensor("t2d"), t2d)
        assert f.get_tensor("lm_head.weight").shape == (n_vocab, head.shape[1])
    loaded = load_draft(out_dir, target)
    assert torch.equal(loaded.d2t, d2t) and torch.equal(loaded.t2d, t2d)
    assert torch.equal(loaded.lm_head.weight, draft.lm_head.weight)


def test_refuses_a_draft_vocab_outside_the_target_vocab(tiny_model_dir: Callable[[str], Path], plugins: Any) -> None:
    """``--draft-vocab-size`` below 1 is refused when the options are read, above the target's vocabulary when the
    draft is built, each naming the option and the range."""
    from swiftcore_eagle3.draft import build_draft
    from swiftcore_eagle3.options import Eagle3Options

    from swiftcore.api import SwiftcoreError
    from swiftcore.api.models import load_model, resolve_model_spec

    with pytest.raises(SwiftcoreError, match=r"--draft-vocab-size 0: give at least 1"):
        Eagle3Options(draft_vocab_size=0)
    target_dir = tiny_model_dir("qwen3_5")
    target = load_model(resolve_model_spec(str(target_dir), plugins), str(target_dir), plugins).eval()
    vocab = target.config.get_text_config().vocab_size
    with pytest.raises(SwiftcoreError, match=rf"--draft-vocab-size {vocab + 1}: .* {vocab} tokens; give 1 to {vocab}"):
        build_draft(target, str(target_dir), aux_layer_ids=[1, 2, 3], draft_vocab_size=vocab + 1, token_freq={})


@pytest.fixture(scope="module")
def reduced_draft(target_dir: Path, greetings_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``swiftcore train --recipe eagle3 --draft-vocab-size 96`` for the target on the greetings."""
    from swiftcore_testing import run_cli

    out = tmp_path_factory.mktemp("eagle3-vocab-run") / "run"
    run_cli(
        "train", "--recipe", "eagle3", "--model", str(target_dir), "--dataset", str(greetings_file),
        "--output-dir", str(out), "--max-steps", str(DRAFT_STEPS), "--batch-size", "8", "--learning-rate", "3e-3",
        "--lr-scheduler", "constant", "--logging-steps", "10", "--no-plot", "--seed", "0",
        "--draft-vocab-size", str(DRAFT_VOCAB),
    )  # fmt: skip
    return out / f"checkpoint-{DRAFT_STEPS}"


@pytest.mark.slow  # the shared fine-tune, a 40-step eagle3 run, 16 speculative generations
def test_reduced_draft_is_accepted_more_and_output_is_unchanged(
    target: Any,
    target_dir: Path,
    encoder: Any,
    reduced_draft: Path,
    greetings_file: Path,
    greedy: Callable[[dict[str, Any], int], list[int]],
    held_out: list[dict[str, Any]],
    reply_tokens: int,
) -> None:
    """A draft over 96 of the target's 512 tokens (covering every token the greetings train on): held-out
    outputs equal plain greedy with it and with an untrained full-vocabulary draft, and it is accepted at least one
    token per verification step more often (k = 3); its head has 96 rows."""
    from swiftcore_eagle3 import load_draft, speculative_generate
    from swiftcore_eagle3.draft import build_draft, token_frequencies

    rows = [json.loads(line) for line in greetings_file.read_text().splitlines()]
    samples = encoder.train_samples(rows, loss_policy="all_assistant", max_length=256, truncation="error")
    trained_tokens = token_frequencies(samples)
    reduced = load_draft(reduced_draft, target)
    kept = set((reduced.t2d.nonzero().flatten()).tolist())
    assert reduced.lm_head.weight.shape[0] == DRAFT_VOCAB and len(trained_tokens) <= DRAFT_VOCAB
    assert set(trained_tokens) <= kept  # the answer's tokens are all in the draft vocabulary
    untrained = build_draft(
        target, str(target_dir), aux_layer_ids=list(reduced.config.eagle_aux_hidden_state_layer_ids), seed=0
    ).eval()
    eos = [target.generation_config.eos_token_id]
    accepted: dict[str, list[int]] = {"reduced": [], "untrained": []}
    for record in held_out:
        ids, _ = encoder.prompt(record)
        expected = greedy(record, reply_tokens)
        for name, draft in (("reduced", reduced), ("untrained", untrained)):
            out = speculative_generate(
                target, draft, ids, max_new_tokens=reply_tokens, num_speculative_tokens=K, eos_token_ids=eos
            )
            assert out.tokens == expected, (name, record)
            accepted[name].extend(out.accepted)
    mean = {name: sum(a) / len(a) for name, a in accepted.items()}
    params = {
        name: sum(p.numel() for n, p in d.named_parameters() if not n.startswith("verifier_"))
        for name, d in (("reduced", reduced), ("full", untrained))
    }
    print(f"mean accepted tokens per verification step (k={K}): {mean}; draft parameters: {params}")
    assert mean["reduced"] >= mean["untrained"] + 1.0, mean
