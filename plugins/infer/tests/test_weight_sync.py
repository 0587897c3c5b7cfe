"""The engine's weight-sync additions for online RL: ``update_adapter`` (LoRA-only sync) and ``generate_rollouts``
(replies with the raw ids a trainer scores)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from swiftcore_infer.errors import InvalidRequestError, UnsupportedError
from swiftcore_infer.types import Request, SamplingParams


def _records(n: int) -> list[dict[str, Any]]:
    # Thinking set explicitly: the trained adapter records thinking off as its default, the base model none.
    return [
        {
            "messages": [{"role": "user", "content": f"tell me about number {i}"}],
            "chat_template_kwargs": {"enable_thinking": False},
        }
        for i in range(n)
    ]


def test_update_adapter_moves_only_the_adapter_tensors(
    tiny_qwen3: Path, trained_lora: Path, infer_plugins: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import peft
    import torch
    from safetensors.torch import load_file
    from swiftcore_infer.transformers_engine import TransformersEngine

    records = _records(3)
    tuned = [g.token_ids for g in TransformersEngine(tiny_qwen3, infer_plugins, adapter=trained_lora).generate(
        records, max_new_tokens=8)]  # fmt: skip
    eng = TransformersEngine(tiny_qwen3, infer_plugins)
    base = [g.token_ids for g in eng.generate(records, max_new_tokens=8)]
    assert tuned != base
    eng.load_adapter("policy", trained_lora)
    tensors = load_file(str(trained_lora / "adapter_model.safetensors"))
    zeros = {k: torch.zeros_like(v) for k, v in tensors.items()}
    through_peft: list[int] = []
    real = peft.set_peft_model_state_dict
    monkeypatch.setattr(peft, "set_peft_model_state_dict", lambda *a, **k: through_peft.append(1) or real(*a, **k))
    assert eng.update_adapter("policy", zeros) == len(tensors)  # B = 0: the adapter is the identity
    assert [g.token_ids for g in eng.generate(records, max_new_tokens=8, adapter="policy")] == base
    eng.update_adapter("policy", tensors)
    assert [g.token_ids for g in eng.generate(records, max_new_tokens=8, adapter="policy")] == tuned
    # The second update (the same names and shapes: online RL's every sync after the first) was copied in place into
    # the tensors the first one found, without peft's walk of the whole model; the answers above show it arrived.
    assert through_peft == [1]

    with pytest.raises(InvalidRequestError, match="no adapter 'other'"):
        eng.update_adapter("other", tensors)
    with pytest.raises(InvalidRequestError, match="no tensors"):
        eng.update_adapter("policy", {})
    with pytest.raises(InvalidRequestError, match="has no tensor"):
        eng.update_adapter("policy", {"base_model.model.model.nope.lora_A.weight": torch.zeros(1)})
    name = next(iter(tensors))
    with pytest.raises(InvalidRequestError, match="size mismatch|shape"):
        eng.update_adapter("policy", {name: torch.zeros(1, 1)})


def test_update_adapter_is_refused_by_a_backend_without_it() -> None:
    from swiftcore_infer.engine import Engine

    class GenerateOnly(Engine):
        backend = "toy"

    toy = GenerateOnly.__new__(GenerateOnly)
    with pytest.raises(UnsupportedError, match="LoRA"):
        toy.update_adapter("a", {})


def test_generate_rollouts_returns_the_served_reply_and_its_raw_ids(engine: Any) -> None:
    sampling = SamplingParams(max_new_tokens=12)
    requests = [Request(record=r, sampling=sampling) for r in _records(3)]
    served = engine.generate_requests([Request(record=r, sampling=sampling) for r in _records(3)])
    out = engine.generate_rollouts(requests)
    assert [g.text for g, _ in out] == [g.text for g in served]
    for (generation, ids), request in zip(out, requests, strict=True):
        assert ids[: len(generation.token_ids)] == generation.token_ids
        if generation.finish_reason == "stop":  # the stop token that ended it is kept
            assert len(ids) == len(generation.token_ids) + 1 and ids[-1] in engine.stop_token_ids
        else:
            assert len(ids) == 12
        assert request.encoded is not None
    with pytest.raises(InvalidRequestError):
        engine.generate_rollouts([Request(prompt=[10**9], sampling=sampling)])


@pytest.mark.parametrize(
    "sampling",
    [
        SamplingParams(max_new_tokens=10, temperature=0.7, seed=3),
        SamplingParams(max_new_tokens=10, temperature=1.3, top_k=5, seed=4),
    ],
    ids=["temperature", "top-k"],
)
def test_rollout_logprobs_are_the_sampling_distributions(engine: Any, sampling: SamplingParams) -> None:
    """``logprobs=True``: each rollout token's log-probability under the distribution it was drawn from, equal to a
    forward pass of the model over prompt + rollout (logits / temperature, top-k renormalised) to 1e-4."""
    import torch
    from swiftcore_testing import sampled_logprobs

    requests = [Request(record=r, sampling=sampling) for r in _records(3)]
    out = engine.generate_rollouts(requests, logprobs=True)
    for (generation, ids), request in zip(out, requests, strict=True):
        assert generation.logprobs is not None and len(generation.logprobs) == len(ids)
        expected = sampled_logprobs(
            engine.model, list(request.encoded), ids, temperature=sampling.temperature, top_k=sampling.top_k
        )
        assert torch.allclose(torch.tensor(generation.logprobs), expected, atol=1e-4), (generation.logprobs, expected)
    assert all(g.logprobs is None for g, _ in engine.generate_rollouts(requests))  # not asked: none


def test_rollout_logprobs_are_refused_by_a_backend_without_them() -> None:
    from swiftcore_infer.engine import Engine

    class IdsOnly(Engine):
        backend = "toy"
        capabilities = frozenset({"generate"})

        def _prompt(self, request: Any) -> list[int]:
            return [1]

        def _adapter_for(self, request: Any) -> None:
            return None

    toy = IdsOnly.__new__(IdsOnly)
    with pytest.raises(UnsupportedError, match="log-probabilities"):
        toy.generate_rollouts([Request(prompt=[1])], logprobs=True)
