"""The SGLang backend without a GPU: probe, and everything around the engine calls.

SGLang cannot start on a CPU (its wheel needs CUDA), so ``sglang`` is replaced by a stand-in with the
signatures swiftcore calls (``Engine.generate(input_ids=, sampling_params=, lora_path=, stream=)``,
``load_lora_adapter``, ``update_weights_from_tensor``, ``update_weights_from_disk``, the embedding
request) that answers with a real transformers model, so request building, id handling, streaming,
adapters, weight updates and error paths are all checked. ``gpu_check_sglang.py`` runs real SGLang.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest
from swiftcore_backend_sglang import probe as probe_module
from swiftcore_backend_sglang.engine import SglangEngine, new_token_ids, to_sglang_sampling

from swiftcore.infer.errors import BackendUnavailableError, InferError
from swiftcore.infer.types import Request, SamplingParams


class FakeSglangEngine:
    """Stands in for ``sglang.Engine``: same call signatures, answers computed by a transformers model."""

    instances: list[FakeSglangEngine] = []

    def __init__(self, **kwargs: Any) -> None:
        from swiftcore.infer.transformers_engine import TransformersEngine

        self.kwargs = kwargs
        self.calls: list[tuple[str, Any]] = []
        self.reference = TransformersEngine(kwargs["model_path"], FakeSglangEngine.plugins)
        self.tokenizer_manager = self
        import asyncio

        self.loop = asyncio.new_event_loop()
        FakeSglangEngine.instances.append(self)

    def _run(self, ids: list[int], params: dict[str, Any], lora: str | None) -> list[int]:
        assert params["temperature"] == 0, "the stand-in only does greedy decoding"
        out = self.reference._generate_ids([ids], [SamplingParams(max_new_tokens=params["max_new_tokens"])], [lora])
        tokens = out[0]
        stop = next((i for i, t in enumerate(tokens) if t in params["stop_token_ids"]), None)
        return tokens if stop is None else tokens[: stop + 1]  # SGLang returns the stop token too

    def generate(
        self, input_ids: Any = None, sampling_params: Any = None, lora_path: Any = None, stream: bool = False, **_: Any
    ) -> Any:
        self.calls.append(
            (
                "generate",
                {"input_ids": input_ids, "sampling_params": sampling_params, "lora_path": lora_path, "stream": stream},
            )
        )
        if stream:
            ids = self._run(input_ids, sampling_params, lora_path)
            return ({"output_ids": ids[: k + 1], "meta_info": {}} for k in range(len(ids)))  # cumulative
        loras = lora_path or [None] * len(input_ids)
        return [
            {"output_ids": self._run(ids, params, lora), "meta_info": {}}
            for ids, params, lora in zip(input_ids, sampling_params, loras, strict=True)
        ]

    def load_lora_adapter(self, lora_name: str, lora_path: str, pinned: bool = False) -> Any:
        self.calls.append(("load_lora_adapter", lora_name))
        if not Path(lora_path, "adapter_model.safetensors").exists():
            return types.SimpleNamespace(success=False, error_message=f"no adapter weights in {lora_path}")
        self.reference.load_adapter(lora_name, lora_path)
        return types.SimpleNamespace(success=True, error_message="")

    def update_weights_from_tensor(
        self, named_tensors: list, load_format: Any = None, flush_cache: bool = True
    ) -> tuple[bool, str]:
        self.calls.append(("update_weights_from_tensor", len(named_tensors)))
        self.reference.update_weights(named_tensors)
        return True, "Success"

    def update_weights_from_disk(self, model_path: str, load_format: Any = None) -> tuple[bool, str]:
        self.calls.append(("update_weights_from_disk", model_path))
        self.reference.update_weights(model_path)
        return True, "Success"

    async def _embed(self, request: Any) -> Any:
        yield [{"embedding": v} for v in self.reference._embed_ids(request.input_ids, False)]

    def generate_request(self, request: Any, _: Any) -> Any:
        self.calls.append(("embed", len(request.input_ids)))
        return self._embed(request)

    def shutdown(self) -> None:
        self.calls.append(("shutdown", None))


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from swiftcore.infer.testing import make_tiny_qwen3, plugins_with_tiny_qwen3, train_tiny_lora

    plugins = plugins_with_tiny_qwen3()
    root = tmp_path_factory.mktemp("sglang")
    model_dir = make_tiny_qwen3(root / "tiny")
    return types.SimpleNamespace(plugins=plugins, model_dir=model_dir, lora=train_tiny_lora(model_dir, root, plugins))


@pytest.fixture
def fake_sglang(monkeypatch: pytest.MonkeyPatch, work: Any) -> Any:
    module = types.ModuleType("sglang")
    module.Engine = FakeSglangEngine
    io_struct = types.ModuleType("sglang.srt.managers.io_struct")
    io_struct.EmbeddingReqInput = lambda input_ids: types.SimpleNamespace(input_ids=input_ids)
    for name, mod in {
        "sglang": module,
        "sglang.srt": types.ModuleType("sglang.srt"),
        "sglang.srt.managers": types.ModuleType("sglang.srt.managers"),
        "sglang.srt.managers.io_struct": io_struct,
    }.items():
        monkeypatch.setitem(sys.modules, name, mod)
    FakeSglangEngine.plugins = work.plugins
    FakeSglangEngine.instances.clear()
    return module


def _records(n: int) -> list[dict[str, Any]]:
    return [{"messages": [{"role": "user", "content": f"question {i} " + "more " * (i % 4)}]} for i in range(n)]


def test_probe_reasons(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe_module, "find_spec", lambda name: None)
    assert "not installed" in probe_module.probe() and "CUDA" in probe_module.probe()
    monkeypatch.setattr(probe_module, "find_spec", lambda name: object())
    monkeypatch.setattr(probe_module, "_cuda_available", lambda: False)
    monkeypatch.delenv("SGLANG_USE_CPU_ENGINE", raising=False)
    assert "needs a CUDA GPU" in probe_module.probe()
    monkeypatch.setenv("SGLANG_USE_CPU_ENGINE", "1")
    assert probe_module.probe() is None
    monkeypatch.delenv("SGLANG_USE_CPU_ENGINE")
    monkeypatch.setattr(probe_module, "_cuda_available", lambda: True)
    assert probe_module.probe() is None


def test_unavailable_here_with_a_reason(work: Any) -> None:
    from swiftcore.infer.backends import backend_spec, create_engine

    spec = backend_spec("sglang", work.plugins)
    assert spec.provider.distribution == "swiftcore-backend-sglang"
    with pytest.raises(BackendUnavailableError, match="sglang.*cannot run here"):
        create_engine("sglang", work.model_dir, work.plugins)


def test_sampling_translation() -> None:
    out = to_sglang_sampling(SamplingParams(max_new_tokens=9, temperature=0.3, top_p=0.8, seed=4), [7])
    assert out == {
        "max_new_tokens": 9,
        "temperature": 0.3,
        "top_p": 0.8,
        "top_k": -1,
        "repetition_penalty": 1.0,
        "stop_token_ids": [7],
        "sampling_seed": 4,
    }
    assert "sampling_seed" not in to_sglang_sampling(SamplingParams(top_k=5), [])
    assert to_sglang_sampling(SamplingParams(top_k=5), [])["top_k"] == 5


def test_new_token_ids_handles_cumulative_and_incremental_chunks() -> None:
    seen: list[int] = []
    for chunk, expected in [
        ({"output_ids": [1]}, [1]),
        ({"output_ids": [1, 2, 3]}, [2, 3]),
        ({"output_ids": [4]}, [4]),
    ]:
        new = new_token_ids(chunk, seen)
        assert new == expected
        seen.extend(new)


def test_engine_requests_ids_and_parses_back(fake_sglang: Any, work: Any) -> None:
    from swiftcore.infer.transformers_engine import TransformersEngine

    engine = SglangEngine(work.model_dir, work.plugins, max_model_len=512)
    fake = FakeSglangEngine.instances[-1]
    assert fake.kwargs["skip_tokenizer_init"] is True and fake.kwargs["is_embedding"] is False
    assert fake.kwargs["context_length"] == 512 and fake.kwargs["enable_lora"] is True

    records: list[Any] = _records(8)
    records[2] = {"messages": "bad"}
    out = engine.generate(records, max_new_tokens=8)
    assert [g.ok for g in out] == [i != 2 for i in range(8)]
    call = fake.calls[-1][1]
    assert len(call["input_ids"]) == 7 and call["lora_path"] is None  # the bad record never reached SGLang
    assert call["sampling_params"][0]["stop_token_ids"] == engine.stop_token_ids
    expected = TransformersEngine(work.model_dir, work.plugins).generate(records, max_new_tokens=8)
    assert [g.token_ids for g in out] == [g.token_ids for g in expected]
    assert [g.finish_reason for g in out] == [g.finish_reason for g in expected]

    deltas = list(engine.stream(Request(record=records[0], sampling=SamplingParams(max_new_tokens=8))))
    assert "".join(d.text for d in deltas) == out[0].text and deltas[-1].final.token_ids == out[0].token_ids
    engine.close()
    assert fake.calls[-1] == ("shutdown", None)


def test_adapters_and_weight_updates(fake_sglang: Any, work: Any, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    from swiftcore.infer.testing import make_tiny_qwen3
    from swiftcore.infer.transformers_engine import TransformersEngine

    engine = SglangEngine(work.model_dir, work.plugins)
    fake = FakeSglangEngine.instances[-1]
    engine.load_adapter("parity", work.lora)
    assert ("load_lora_adapter", "parity") in fake.calls
    records = _records(4)
    requests = [
        Request(record=r, sampling=SamplingParams(max_new_tokens=8), adapter="parity" if i % 2 else None)
        for i, r in enumerate(records)
    ]
    got = engine.generate_requests(requests)
    assert fake.calls[-1][1]["lora_path"] == [None, "parity", None, "parity"]
    reference = TransformersEngine(work.model_dir, work.plugins)
    reference.load_adapter("parity", work.lora)
    assert [g.token_ids for g in got] == [g.token_ids for g in reference.generate_requests(requests)]

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "adapter_config.json").write_text("{}")
    with pytest.raises(InferError, match="no adapter weights"):
        engine.load_adapter("broken", broken)
    assert "broken" not in engine.adapters
    failed = engine.generate_requests([Request(record=records[0], adapter="broken")])[0]
    assert not failed.ok and "unknown adapter 'broken'" in failed.error

    other = make_tiny_qwen3(tmp_path / "other", seed=1)
    engine.update_weights(load_file(str(other / "model.safetensors")))
    assert fake.calls[-1][0] == "update_weights_from_tensor"
    expected = TransformersEngine(other, work.plugins).generate(records, max_new_tokens=8)
    assert [g.token_ids for g in engine.generate(records, max_new_tokens=8)] == [g.token_ids for g in expected]
    engine.update_weights(work.model_dir)  # a checkpoint directory: reloaded from disk by SGLang
    assert fake.calls[-1] == ("update_weights_from_disk", str(work.model_dir))


def test_embeddings_with_the_pooling_runner(fake_sglang: Any, work: Any) -> None:
    from swiftcore.infer.transformers_engine import TransformersEngine

    engine = SglangEngine(work.model_dir, work.plugins, runner="pooling")
    assert FakeSglangEngine.instances[-1].kwargs["is_embedding"] is True
    assert engine.capabilities == frozenset({"embed"})
    texts = ["hello world", "bye"]
    expected = TransformersEngine(work.model_dir, work.plugins).embed(texts)
    for got, want in zip(engine.embed(texts), expected, strict=True):
        assert got == pytest.approx(want, abs=1e-5)
