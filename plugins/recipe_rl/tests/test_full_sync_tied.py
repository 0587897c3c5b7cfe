"""One full weight sync of a model whose output head is tied to its embedding (the tiny Gemma 4).

The rule under test (:meth:`WeightSync._blocks`): a tensor shared by two names crosses once. The engine ties the
head to the embedding itself, so sending ``lm_head.weight`` too would move the largest tensor twice (the reported
bytes counted it once). The untied tiny Qwen3.5 of ``test_rollout_engine.py`` cannot show this rule broken.

After the push the engine's greedy tokens equal the policy's, with the embedding (and so the tied head) moved;
before it they differ (negative control).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

GREEDY_TOKENS = 6


def test_a_tied_head_crosses_once_and_the_engine_follows(
    tiny_model_dir: Any, plugins: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, one_thread: None
) -> None:
    import torch
    from swiftcore_infer import Engine, Request, SamplingParams
    from swiftcore_recipe_rl.sync import WeightSync, create_rollout_engine, greedy_tokens
    from swiftcore_train import TrainConfig

    from swiftcore.api.models import load_model, resolve_model_spec

    model_dir = tiny_model_dir("gemma4")
    data = tmp_path / "prompts.jsonl"
    data.write_text('{"prompt": "Write a word."}\n')
    cfg = TrainConfig(model=str(model_dir), dataset=(str(data),), output_dir=str(tmp_path / "out"), tuner="full")
    spec = resolve_model_spec(cfg.model, plugins)
    policy = load_model(spec, cfg.model, plugins, torch_dtype="float32")
    tied = {n for n, p in policy.named_parameters(remove_duplicate=False) if p is policy.get_output_embeddings().weight}
    assert len(tied) >= 1 and policy.get_output_embeddings().weight is policy.get_input_embeddings().weight, tied
    engine = create_rollout_engine("transformers", cfg, plugins, template=None, device="cpu")

    sent: list[list[str]] = []
    original = Engine.update_weights

    def recording(self: Any, tensors: Any) -> Any:
        sent.append(list(tensors) if isinstance(tensors, dict) else [name for name, _ in tensors])
        return original(self, tensors)

    monkeypatch.setattr(Engine, "update_weights", recording)

    records = [{"messages": [{"role": "user", "content": f"Write a word, number {i}."}]} for i in range(3)]
    prompts = [list(engine.template.encode(engine.tokenizer, r, add_generation_prompt=True).input_ids) for r in records]

    def engine_greedy() -> list[list[int]]:
        sampling = SamplingParams(max_new_tokens=GREEDY_TOKENS)  # temperature 0: greedy
        return [engine.generate_rollouts([Request(prompt=ids, sampling=sampling)])[0][1] for ids in prompts]

    def policy_greedy() -> list[list[int]]:
        return greedy_tokens(
            policy, prompts, max_new_tokens=GREEDY_TOKENS, stop_ids=engine.stop_token_ids, pad_id=engine.pad_token_id
        )

    with torch.no_grad():  # move the shared embedding/head: only the tied tensor carries the change
        generator = torch.Generator().manual_seed(0)
        weight = policy.get_input_embeddings().weight
        weight.add_(torch.randn(weight.shape, generator=generator) * 2.0)
    assert engine_greedy() != policy_greedy(), "moving the embedding changed nothing: the check would prove nothing"

    stats = WeightSync(engine).push(policy)
    assert engine_greedy() == policy_greedy()

    names = [name for bucket in sent for name in bucket]
    state = policy.state_dict()
    shared = [n for n in names if state[n].data_ptr() == weight.data_ptr()]
    assert len(shared) == 1, f"the tied embedding/head crossed as {shared}: once is enough, the engine ties it"
    assert len(names) == len(set(names)) == stats.tensors
    assert stats.bytes == sum(state[n].numel() * state[n].element_size() for n in names)
