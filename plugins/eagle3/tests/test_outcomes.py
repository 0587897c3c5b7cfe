"""Outcomes on a tiny Qwen3.5 target: the draft's training inputs and loss against a reference computation, a draft
trained by ``swiftcore train --recipe eagle3`` on the target's own replies accepted far more often on held-out
prompts than an untrained one, speculative output token-identical to plain greedy generation, and the draft
written in speculators' format."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

K = 3  # proposals per verification step


def _samples(encoder: Any) -> list[dict[str, Any]]:
    records = [
        {"messages": [{"role": "user", "content": "Tell me of a quib."}, {"role": "assistant", "content": "A quib."}]},
        {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there, friend."}]},
    ]
    return encoder.train_samples(records, loss_policy="all_assistant", max_length=256, truncation="error")


def test_training_inputs_and_loss_match_a_reference(
    tiny_model_dir: Callable[[str], Path], plugins: Any, encoder: Any
) -> None:
    """On a fixed batch of two packed chats: the draft's targets are the target's own next-token logits, its input
    the target's chosen hidden states, and speculators' loss (one TTT step) equals the KL divergence computed here,
    chat by chat, with the draft's layers under a plain causal mask."""
    import torch
    import torch.nn.functional as F
    from speculators.losses import resolve_loss_config
    from swiftcore_eagle3.draft import _fused_input, _run_layers, build_draft
    from swiftcore_eagle3.recipe import packed_batch

    from swiftcore.api.models import load_model, resolve_model_spec

    target_dir = tiny_model_dir("qwen3_5")  # random weights: this checks wiring and arithmetic, not learning
    target = load_model(resolve_model_spec(str(target_dir), plugins), str(target_dir), plugins).eval()
    aux = [1, 2, 3]
    draft = build_draft(target, str(target_dir), aux_layer_ids=aux, seed=0)
    with torch.no_grad():  # a draft that is not the identity of its init: random, non-zero weights everywhere
        for p in draft.layers.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    samples = _samples(encoder)
    batch = packed_batch(target, samples, aux)
    with torch.no_grad():
        _, loss, _ = draft(**batch, ttt_steps=1, loss_config=resolve_loss_config("kl_div", "eager"))

    total, count, start = torch.tensor(0.0, dtype=torch.float64), 0, 0
    for sample in samples:
        ids = torch.tensor([sample["input_ids"]])
        with torch.no_grad():
            out = target(input_ids=ids, output_hidden_states=True)
            n = ids.shape[1] - 1
            # the batch's slice of this chat: the target's logits one position on, its hidden states at aux layers
            span = slice(start, start + n)
            got = draft.verifier_lm_head(batch["verifier_last_hidden_states"][:, span])
            torch.testing.assert_close(got, out.logits[:, 1:], rtol=1e-5, atol=1e-5)
            hidden = torch.cat([out.hidden_states[i] for i in aux], dim=-1)[:, :-1]
            torch.testing.assert_close(batch["hidden_states"][:, span], hidden)
            x = torch.cat([draft.embed_tokens(ids[:, 1:]), draft.fc(_fused_input(draft, hidden))], dim=-1)
            mask = torch.full((n, n), float("-inf")).triu(1)[None, None]
            h = _run_layers(draft, x, torch.arange(1, n + 1)[None], mask, None)
            logits = draft.lm_head(draft.norm(h))[0].double()
            p = F.softmax(out.logits[0, 1:].double(), dim=-1)
            kl = (p * (p.log() - F.log_softmax(logits, dim=-1))).sum(-1)
            trained = torch.tensor(sample["labels"][1:]) != -100
            total += kl[trained].sum()
            count += int(trained.sum())
        start += n
    assert count > 0
    assert float(loss) == pytest.approx(float(total / count), rel=1e-4)


@pytest.mark.slow  # a 40-step full fine-tune, a 40-step eagle3 run, 16 speculative generations
def test_trained_draft_is_accepted_more_and_output_is_unchanged(
    target: Any,
    target_dir: Path,
    encoder: Any,
    trained_draft: Path,
    greedy: Callable[[dict[str, Any], int], list[int]],
    held_out: list[dict[str, Any]],
    reply_tokens: int,
) -> None:
    """Held-out prompts: every speculative output equals the target's plain greedy output (transformers'
    ``generate``), with the trained draft and with an untrained one, and the trained draft's proposals are accepted
    at least one token per verification step more often (k = 3)."""
    from swiftcore_eagle3 import load_draft, speculative_generate
    from swiftcore_eagle3.draft import build_draft

    trained = load_draft(trained_draft, target)
    untrained = build_draft(
        target, str(target_dir), aux_layer_ids=list(trained.config.eagle_aux_hidden_state_layer_ids), seed=0
    ).eval()
    eos = [target.generation_config.eos_token_id]
    accepted: dict[str, list[int]] = {"trained": [], "untrained": []}
    for record in held_out:
        ids, _ = encoder.prompt(record)
        expected = greedy(record, reply_tokens)
        for name, draft in (("trained", trained), ("untrained", untrained)):
            out = speculative_generate(
                target, draft, ids, max_new_tokens=reply_tokens, num_speculative_tokens=K, eos_token_ids=eos
            )
            assert out.tokens == expected, (name, record)
            accepted[name].extend(out.accepted)
    mean = {name: sum(a) / len(a) for name, a in accepted.items()}
    print(f"mean accepted tokens per verification step (k={K}): {mean}")
    assert mean["trained"] >= mean["untrained"] + 1.0, mean


@pytest.mark.slow  # the trained draft's run
def test_draft_is_written_in_speculators_format(trained_draft: Path, target_dir: Path) -> None:
    """``config.json`` is a speculators Eagle3 config naming the target as verifier (what vLLM reads), the weights
    hold the fused ``fc`` and the first layer's doubled-width attention input, not the verifier's copies."""
    from safetensors import safe_open

    config = json.loads((trained_draft / "config.json").read_text())
    assert config["speculators_model_type"] == "eagle3"
    assert config["speculators_config"]["algorithm"] == "eagle3"
    assert config["speculators_config"]["verifier"]["name_or_path"] == str(target_dir)
    assert config["speculators_config"]["proposal_methods"][0]["speculative_tokens"] == 3
    assert config["eagle_aux_hidden_state_layer_ids"] == [1, 2, 3]
    hidden = config["transformer_layer_config"]["hidden_size"]
    with safe_open(str(trained_draft / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
        assert f.get_tensor("fc.weight").shape == (hidden, 3 * hidden)
        assert f.get_tensor("layers.0.self_attn.q_proj.weight").shape[1] == 2 * hidden
    assert not any(k.startswith("verifier_") for k in keys), keys
    assert (trained_draft.parent / "logs.jsonl").exists()
