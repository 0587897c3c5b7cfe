"""One LoRA-only weight sync, without a training run: the engine ends up generating what the policy generates.

The policy is the tiny qwen3_5 checkpoint under swiftcore's own LoRA; its adapter is attached to a colocated
transformers engine (``B = 0``), then ``lora_B`` is moved and :meth:`WeightSync.push` runs once. After the push the
engine's greedy tokens equal the policy's; before it they differ (negative control: the move changes the output,
so the equality is no accident). What crossed is checked by name: exactly the adapter's LoRA tensors (peft's
``get_peft_model_state_dict``), through ``update_adapter`` only.

The slow learning run in ``test_rollout_engine.py`` checks the same after each of 20 GRPO steps; this check takes
seconds, so ``scripts/mutation_check.py`` can run it against a broken sync.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

GREEDY_TOKENS = 6


def test_one_lora_sync_gives_the_engine_the_policys_adapter(
    tiny_dir: Path, plugins: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch
    from peft import get_peft_model_state_dict
    from swiftcore_infer import Engine, Request, SamplingParams
    from swiftcore_recipe_rl.sync import WeightSync, create_rollout_engine, greedy_tokens
    from swiftcore_train import TrainConfig, apply_tuner

    from swiftcore.api.models import load_model, resolve_model_spec

    data = tmp_path / "prompts.jsonl"
    data.write_text('{"prompt": "Write a word."}\n')
    cfg = TrainConfig(model=str(tiny_dir), dataset=(str(data),), output_dir=str(tmp_path / "out"), tuner="lora")
    spec = resolve_model_spec(cfg.model, plugins)
    torch.manual_seed(0)
    policy = apply_tuner(load_model(spec, cfg.model, plugins, torch_dtype="float32"), spec, cfg)
    engine = create_rollout_engine("transformers", cfg, plugins, template=None, device="cpu")

    sent: dict[str, list[list[str]]] = {"update_adapter": [], "update_weights": []}
    for method in sent:
        original = getattr(Engine, method)

        def recording(self: Any, *args: Any, _method: str = method, _original: Any = original) -> Any:
            tensors = args[-1]
            sent[_method].append(list(tensors) if isinstance(tensors, dict) else [name for name, _ in tensors])
            return _original(self, *args)

        monkeypatch.setattr(Engine, method, recording)

    records = [{"messages": [{"role": "user", "content": f"Write a word, number {i}."}]} for i in range(3)]
    prompts = [list(engine.template.encode(engine.tokenizer, r, add_generation_prompt=True).input_ids) for r in records]
    sync = WeightSync(engine)

    def engine_greedy() -> list[list[int]]:
        sampling = SamplingParams(max_new_tokens=GREEDY_TOKENS)  # temperature 0: greedy
        requests = [Request(prompt=ids, sampling=sampling, adapter=sync.adapter) for ids in prompts]
        return [engine.generate_rollouts([request])[0][1] for request in requests]

    def policy_greedy() -> list[list[int]]:
        return greedy_tokens(
            policy, prompts, max_new_tokens=GREEDY_TOKENS, stop_ids=engine.stop_token_ids, pad_id=engine.pad_token_id
        )

    import peft

    walks: list[bool] = []  # peft's walks of a state dict to find the adapter's tensors: the policy's?
    real = peft.get_peft_model_state_dict
    monkeypatch.setattr(
        peft, "get_peft_model_state_dict", lambda m, *a, **k: walks.append(m is policy) or real(m, *a, **k)
    )
    sync.push(policy)  # attaches the adapter (B = 0: the base model's output)
    with torch.no_grad():
        generator = torch.Generator().manual_seed(0)
        for name, param in policy.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.5)
    stale = engine_greedy()
    assert stale != policy_greedy(), "moving lora_B changed nothing: the check below would prove nothing"

    stats = sync.push(policy)
    assert engine_greedy() == policy_greedy()
    # Found once (the first push), then read from the same parameters: the second push sent lora_B's new values.
    assert walks.count(True) == 1, walks

    adapter_names = set(get_peft_model_state_dict(policy))
    assert adapter_names and all(".lora_A." in n or ".lora_B." in n for n in adapter_names), sorted(adapter_names)
    assert sent["update_weights"] == [] and len(sent["update_adapter"]) == 2, {k: len(v) for k, v in sent.items()}
    assert all(set(names) == adapter_names and len(names) == len(adapter_names) for names in sent["update_adapter"])
    assert stats.tensors == len(adapter_names) and stats.buckets == 1
