"""The transformers engine: batching, error isolation, stops, streaming, embeddings, adapters, weight updates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from swiftcore_infer.errors import InvalidRequestError, UnsupportedError
from swiftcore_infer.types import Request, SamplingParams


def _records(n: int) -> list[dict[str, Any]]:
    return [{"messages": [{"role": "user", "content": f"question number {i} " + "word " * (i % 5)}]} for i in range(n)]


def test_greedy_matches_hf_generate_on_the_template_encoding(engine: Any) -> None:
    import torch

    record = _records(1)[0]
    ids = engine.template.encode(engine.tokenizer, record, add_generation_prompt=True).input_ids
    # The swiftcore template renders what the checkpoint's own chat template renders.
    assert engine.tokenizer.apply_chat_template(record["messages"], add_generation_prompt=True, tokenize=True)[
        "input_ids"
    ] == list(ids)
    with torch.no_grad():
        expected = engine.model.generate(
            torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            max_new_tokens=10,
            do_sample=False,
            eos_token_id=engine.stop_token_ids,
            pad_token_id=engine.pad_token_id,
        )[0, len(ids) :].tolist()
    got = engine.generate([record], max_new_tokens=10)[0]
    stop = next((i for i, t in enumerate(expected) if t in engine.stop_token_ids), None)
    assert got.token_ids == expected[:stop]
    assert got.prompt_tokens == len(ids)


def test_left_padded_batches_equal_one_by_one(engine: Any) -> None:
    records = _records(6)  # prompts of different lengths
    batched = engine.generate(records, max_new_tokens=8, batch_size=6)
    single = [engine.generate([r], max_new_tokens=8, batch_size=1)[0] for r in records]
    assert [g.token_ids for g in batched] == [g.token_ids for g in single]
    assert len({tuple(g.token_ids) for g in batched}) > 1  # the prompts really get different answers


def test_32_requests_with_3_invalid(engine: Any) -> None:
    records: list[Any] = _records(32)
    records[3] = {"messages": "not a list"}
    records[17] = {"messages": [{"content": "no role"}]}
    records[30] = {"messages": [{"role": "user", "content": "x " * 2000}]}  # longer than the context
    out = engine.generate(records, max_new_tokens=4, batch_size=8)
    assert len(out) == 32
    failed = [i for i, g in enumerate(out) if not g.ok]
    assert failed == [3, 17, 30]
    assert "messages" in out[3].error and "role" in out[17].error and "context" in out[30].error
    assert all(out[i].error_status == 400 for i in failed)
    assert all(g.completion_tokens == 4 or g.finish_reason == "stop" for i, g in enumerate(out) if i not in failed)


def test_a_batch_that_fails_in_the_engine_is_retried_one_by_one(engine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    real = engine._generate_ids
    poison = engine.encode(Request(record=_records(3)[1]))

    def flaky(prompts: list, params: list, adapters: list) -> list:
        if poison in prompts:
            raise RuntimeError("kernel failure on this prompt")
        return real(prompts, params, adapters)

    monkeypatch.setattr(engine, "_generate_ids", flaky)
    out = engine.generate(_records(3), max_new_tokens=3)
    assert [g.ok for g in out] == [True, False, True]
    assert "kernel failure" in out[1].error and out[1].error_status == 500


def test_a_failure_without_a_message_still_says_what_failed(engine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A backend error with no text (a bare assertion in a kernel, an error re-raised with none) reaches the
    client as its cause's message or at least its type, never as an empty error."""

    def bare(prompts: list, params: list, adapters: list) -> list:
        try:
            raise KeyError("expert 3 has no kernel")
        except KeyError as exc:
            raise RuntimeError() from exc

    monkeypatch.setattr(engine, "_generate_ids", bare)
    failed = engine.generate(_records(2), max_new_tokens=3)
    assert [g.error for g in failed] == ["RuntimeError: KeyError: 'expert 3 has no kernel'"] * 2
    monkeypatch.setattr(engine, "_generate_ids", lambda *a: (_ for _ in ()).throw(AssertionError()))
    assert engine.generate(_records(1), max_new_tokens=3)[0].error == "AssertionError (the engine gave no message)"


def test_stop_strings_and_finish_reasons(engine: Any) -> None:
    record = _records(1)[0]
    full = engine.generate([record], max_new_tokens=12)[0]
    assert full.finish_reason in ("length", "stop") and full.text
    # Stop at a piece of the reply itself: the reply must end right before it.
    word = full.text[len(full.text) // 2 :][:3]
    cut = engine.generate([record], max_new_tokens=12, stop=[word])[0]
    assert cut.finish_reason == "stop"
    assert cut.text == full.text[: full.text.find(word)]


def test_stream_equals_generate(engine: Any) -> None:
    record = _records(2)[1]
    expected = engine.generate([record], max_new_tokens=10)[0]
    deltas = list(engine.stream(Request(record=record, sampling=SamplingParams(max_new_tokens=10))))
    assert deltas[-1].final is not None and all(d.final is None for d in deltas[:-1])
    assert "".join(d.text for d in deltas) == expected.text
    assert deltas[-1].final.token_ids == expected.token_ids
    assert deltas[-1].final.finish_reason == expected.finish_reason


def test_stream_rejects_invalid_request_before_yielding(engine: Any) -> None:
    with pytest.raises(InvalidRequestError, match="messages"):
        engine.stream(Request(record={"messages": 5}))


def test_checkpoint_generation_defaults_do_not_override_switched_off_settings(
    engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint's generation_config (top_k 1 here) must not fill settings a request leaves off."""
    import copy

    record = _records(1)[0]
    before = engine.generate([record], max_new_tokens=12, temperature=1.0, seed=5)[0]
    custom = copy.deepcopy(engine.model.generation_config)
    custom.top_k, custom.top_p, custom.temperature = 1, 0.1, 0.01  # would make sampling greedy
    monkeypatch.setattr(engine.model, "generation_config", custom)
    config = engine._generate_kwargs(SamplingParams(temperature=1.0), 12)["generation_config"]
    assert (config.top_k, config.top_p, config.temperature, config.do_sample) == (0, 1.0, 1.0, True)
    assert engine.generate([record], max_new_tokens=12, temperature=1.0, seed=5)[0].token_ids == before.token_ids


def test_sampling_with_seed_is_reproducible(engine: Any) -> None:
    record = _records(1)[0]
    a = engine.generate([record], max_new_tokens=10, temperature=1.0, seed=3)[0]
    b = engine.generate([record], max_new_tokens=10, temperature=1.0, seed=3)[0]
    c = engine.generate([record], max_new_tokens=10, temperature=1.0, seed=4)[0]
    assert a.token_ids == b.token_ids
    assert a.token_ids != c.token_ids


def test_embeddings(engine: Any) -> None:
    vectors = engine.embed(["hello world", "a different sentence", "hello world"])
    assert len(vectors) == 3 and len(vectors[0]) == engine.model.config.hidden_size
    assert vectors[0] == pytest.approx(vectors[2], abs=1e-5)
    assert vectors[0] != pytest.approx(vectors[1], abs=1e-3)
    assert sum(x * x for x in vectors[1]) == pytest.approx(1.0, abs=1e-4)
    with pytest.raises(InvalidRequestError):
        engine.embed([""])


def test_unknown_adapter_fails_alone(engine: Any) -> None:
    requests = [Request(record=r) for r in _records(2)]
    requests[0].adapter = "nope"
    out = engine.generate_requests(requests)
    assert not out[0].ok and "unknown adapter 'nope'" in out[0].error
    assert out[1].ok


def test_lora_adapters_per_request(tiny_qwen3: Path, trained_lora: Path, infer_plugins: Any) -> None:
    from peft import PeftModel
    from swiftcore_infer.transformers_engine import TransformersEngine

    from swiftcore.models import load_model, resolve_model_spec

    eng = TransformersEngine(tiny_qwen3, infer_plugins)
    eng.load_adapter("parity", trained_lora)
    records = _records(4)
    base = eng.generate(records, max_new_tokens=8)
    tuned = eng.generate(records, max_new_tokens=8, adapter="parity")
    assert [g.token_ids for g in base] != [g.token_ids for g in tuned]  # the adapter changes the model

    # Reference: peft's own model, plain generate(), one prompt at a time.
    import torch

    spec = resolve_model_spec(tiny_qwen3, infer_plugins)
    ref = PeftModel.from_pretrained(load_model(spec, tiny_qwen3), str(trained_lora)).eval()
    for record, got in zip(records, tuned, strict=True):
        ids = eng.encode(Request(record=record, adapter="parity"))  # its prompt defaults apply
        with torch.no_grad():
            out = ref.generate(
                input_ids=torch.tensor([ids]),
                attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                max_new_tokens=8,
                do_sample=False,
                eos_token_id=eng.stop_token_ids,
                pad_token_id=eng.pad_token_id,
            )[0, len(ids) :].tolist()
        stop = next((i for i, t in enumerate(out) if t in eng.stop_token_ids), None)
        assert got.token_ids == out[:stop]

    # One batch mixing the adapter and the base model gives each row its own model's answer.
    mixed = eng.generate_requests(
        [
            Request(record=r, sampling=SamplingParams(max_new_tokens=8), adapter="parity" if i % 2 else None)
            for i, r in enumerate(records)
        ]
    )
    assert [g.token_ids for g in mixed] == [(tuned if i % 2 else base)[i].token_ids for i in range(4)]

    # Embeddings come from the base model, whichever adapter peft last activated.
    assert eng.embed(["hello"])[0] == pytest.approx(
        TransformersEngine(tiny_qwen3, infer_plugins).embed(["hello"])[0], abs=1e-5
    )

    with pytest.raises(InvalidRequestError, match="taken"):
        eng.load_adapter("parity", trained_lora)
    with pytest.raises(InvalidRequestError, match="adapter_config"):
        eng.load_adapter("other", tiny_qwen3)


def test_adapter_directory_as_model_uses_it_by_default(trained_lora: Path, infer_plugins: Any, engine: Any) -> None:
    from swiftcore_infer.transformers_engine import TransformersEngine

    records = _records(3)
    eng = TransformersEngine(trained_lora, infer_plugins)
    assert eng.default_adapter == "default"
    merged = TransformersEngine(trained_lora, infer_plugins, merge_lora=True)
    assert merged.adapters == {}
    tuned = [g.token_ids for g in eng.generate(records, max_new_tokens=8)]
    assert [g.token_ids for g in merged.generate(records, max_new_tokens=8)] == tuned
    assert [g.token_ids for g in eng.generate(records, max_new_tokens=8, adapter="base")] == [
        g.token_ids for g in engine.generate(records, max_new_tokens=8)
    ]


def test_update_weights_matches_a_fresh_load(tiny_qwen3: Path, infer_plugins: Any, tmp_path: Path) -> None:
    import torch
    from safetensors.torch import save_file
    from swiftcore_infer.transformers_engine import TransformersEngine
    from swiftcore_testing import make_tiny_qwen3

    other = make_tiny_qwen3(tmp_path / "other", seed=1)
    records = _records(3)
    eng = TransformersEngine(tiny_qwen3, infer_plugins)
    before = [g.token_ids for g in eng.generate(records, max_new_tokens=8)]
    expected = [g.token_ids for g in TransformersEngine(other, infer_plugins).generate(records, max_new_tokens=8)]
    assert before != expected

    from safetensors.torch import load_file

    tensors = load_file(str(other / "model.safetensors"))
    assert eng.update_weights(tensors) == len(tensors)
    assert [g.token_ids for g in eng.generate(records, max_new_tokens=8)] == expected

    # From a directory, back to the original weights.
    save_file(load_file(str(tiny_qwen3 / "model.safetensors")), str(tmp_path / "model.safetensors"))
    eng.update_weights(tmp_path)
    assert [g.token_ids for g in eng.generate(records, max_new_tokens=8)] == before

    with pytest.raises(InvalidRequestError, match="no parameter"):
        eng.update_weights({"model.nope.weight": torch.zeros(1)})
    with pytest.raises(InvalidRequestError, match="shape"):
        eng.update_weights({"model.norm.weight": torch.zeros(3)})


def test_update_weights_under_a_lora_adapter(
    tiny_qwen3: Path, trained_lora: Path, infer_plugins: Any, tmp_path: Path
) -> None:
    from safetensors.torch import load_file
    from swiftcore_infer.transformers_engine import TransformersEngine
    from swiftcore_testing import make_tiny_qwen3

    other = make_tiny_qwen3(tmp_path / "other", seed=1)
    records = _records(2)
    expected = TransformersEngine(other, infer_plugins, adapter=trained_lora).generate(records, max_new_tokens=8)
    eng = TransformersEngine(tiny_qwen3, infer_plugins, adapter=trained_lora)
    eng.update_weights(load_file(str(other / "model.safetensors")))  # names without peft's base_layer
    assert [g.token_ids for g in eng.generate(records, max_new_tokens=8)] == [g.token_ids for g in expected]


def test_capabilities_are_enforced(engine: Any) -> None:
    from swiftcore_infer.engine import Engine

    class GenerateOnly(Engine):
        backend = "toy"

    toy = GenerateOnly.__new__(GenerateOnly)
    with pytest.raises(UnsupportedError, match="toy"):
        toy.embed(["x"])
    with pytest.raises(UnsupportedError, match="LoRA"):
        toy.load_adapter("a", ".")
    with pytest.raises(UnsupportedError, match="update weights"):
        toy.update_weights({})


def test_stream_many_batches_rows_and_isolates_errors(engine: Any) -> None:
    requests = [Request(record=r, sampling=SamplingParams(max_new_tokens=6 + 2 * i)) for i, r in enumerate(_records(3))]
    requests.insert(1, Request(record={"messages": 1}))
    pieces = list(engine.stream_many(requests))
    assert pieces[0][0] == 1 and isinstance(pieces[0][1], InvalidRequestError)
    assert [i for i, p in pieces if isinstance(p, Exception)] == [1]
    expected = engine.generate_requests([requests[0], requests[2], requests[3]])
    for index, want in zip((0, 2, 3), expected, strict=True):
        mine = [p for i, p in pieces if i == index]
        assert "".join(p.text for p in mine) == want.text
        assert mine[-1].final.token_ids == want.token_ids and mine[-1].final.finish_reason == want.finish_reason
        assert mine[-1].final.completion_tokens == want.completion_tokens
    order = [i for i, p in pieces if not isinstance(p, Exception)]
    assert order != sorted(order)  # the rows were generated together, not one after the other


def test_a_scoring_checkpoint_is_refused_not_served_as_a_causal_lm(
    tiny_qwen3: Path, infer_plugins: Any, tmp_path: Path
) -> None:
    """A reward model or classifier (``*ForSequenceClassification``) would generate noise: it is refused by name."""
    import json
    import shutil

    from swiftcore_infer import TransformersEngine
    from swiftcore_infer.errors import UnsupportedError

    scorer = tmp_path / "reward-model"
    shutil.copytree(tiny_qwen3, scorer)
    config = json.loads((scorer / "config.json").read_text())
    config["architectures"] = ["Qwen3ForSequenceClassification"]
    (scorer / "config.json").write_text(json.dumps(config))
    with pytest.raises(
        UnsupportedError, match=r"score text, they do not generate it .*AutoModelForSequenceClassification"
    ):
        TransformersEngine(scorer, infer_plugins)
