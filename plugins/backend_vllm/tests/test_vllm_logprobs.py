"""The vLLM backend's log-probabilities (``Engine.prompt_logprobs``: vLLM's ``prompt_logprobs``), and ``swiftcore
deploy``'s ``echo`` + ``logprobs`` on it, equal plain transformers' ``log_softmax`` on the same tiny float32 Qwen3
(to 1e-4), the base model and a LoRA adapter alike."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

openai = pytest.importorskip("openai")
pytestmark = pytest.mark.slow

IDS = [9, 40, 41, 7, 100, 55, 3, 77, 12]


@pytest.fixture(scope="module")
def setup() -> Any:
    from swiftcore_backend_vllm.testing import shared_setup
    from swiftcore_infer import probe_backend

    result = shared_setup()
    assert probe_backend(result.plugins.registry.get("backend", "vllm")) is None
    return result


def _reference(model_dir: Any, ids: list[int], adapter: Any = None) -> Any:
    """``(T - 1, vocab)`` log p(. | ids[:t]) by plain transformers (and peft for an adapter)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32").eval()
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter).eval()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].float()
    return torch.log_softmax(logits, dim=-1)[:-1]


@pytest.mark.parametrize("adapter", [None, "parity"], ids=["base", "lora"])
def test_prompt_logprobs_equal_transformers(setup: Any, adapter: str | None) -> None:
    engine = setup.engine
    if adapter is not None and adapter not in engine.adapters:
        engine.load_adapter(adapter, setup.lora_dir)
    scored = engine.prompt_logprobs([IDS], top_logprobs=4, adapters=[adapter])[0]
    expected = _reference(setup.model_dir, IDS, setup.lora_dir if adapter else None)
    assert scored[0] is None and len(scored) == len(IDS)
    for t, entry in enumerate(scored[1:]):
        assert entry.token_id == IDS[t + 1]
        assert entry.logprob == pytest.approx(expected[t, IDS[t + 1]].item(), abs=1e-4)
        values, indices = expected[t].topk(4)
        assert [v for _, v in entry.top] == pytest.approx(values.tolist(), abs=1e-4)
        assert [i for i, _ in entry.top] == indices.tolist()


@pytest.fixture(scope="module")
def client(setup: Any) -> Iterator[Any]:
    from swiftcore_serve import ServerConfig, build_app
    from swiftcore_testing import ServerThread

    app = build_app(setup.engine, ServerConfig(model_name="tiny"))
    with ServerThread(app) as url:
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=120)


def test_deploy_echo_logprobs_on_vllm(setup: Any, client: Any) -> None:
    reply = client.completions.create(model="tiny", prompt=IDS, echo=True, logprobs=1, max_tokens=0)
    values = reply.choices[0].logprobs.token_logprobs
    expected = _reference(setup.model_dir, IDS)
    assert values[0] is None
    assert values[1:] == pytest.approx([expected[t, i].item() for t, i in enumerate(IDS[1:])], abs=1e-4)
