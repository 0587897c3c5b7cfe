"""The SGLang backend without a GPU: what swiftcore sends to SGLang, and what it makes of SGLang's answers.

SGLang cannot start on a CPU (its wheel needs CUDA), so ``sglang`` is replaced by a stand-in with the
signatures swiftcore calls (``Engine(**options)``, ``generate(input_ids=, sampling_params=, lora_path=,
stream=)``, ``load_lora_adapter``, ``update_weights_from_tensor``, ``update_weights_from_disk``, the
embedding request). The stand-in computes nothing: it records each call and answers with token ids (or
vectors) the test scripted. The tests assert swiftcore's side of the exchange, against expectations built
without swiftcore's engine code:

* requests: the engine options, the prompt ids (the checkpoint's own Hugging Face chat template), the
  sampling parameters, the LoRA names, the tensors of a weight update;
* answers: cutting at the stop tokens and stop strings, decoding (special tokens hidden), parsing into
  content / reasoning / tool calls, token counts, streaming pieces, and failures kept to their request;
* media: a prompt with images or audio goes to SGLang alone, as training's expanded ids with training's processor
  tensors in ``processor_output`` mappings (``image_data`` / ``audio_data``), on tiny Qwen3.5, Gemma 4 and Qwen3-ASR
  checkpoints; a model SGLang started without a multimodal processor refuses media.

Whether SGLang itself generates what the transformers backend does is *not* checked here: a stand-in that
answered with the transformers engine would make that comparison true by construction. The real comparison,
greedy / LoRA / streaming / update_weights / image and audio token parity of SGLang against transformers on a GPU,
is ``gpu_check_sglang.py``, run by ``scripts/gpu_check.sh sglang``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from swiftcore_backend_sglang import probe as probe_module
from swiftcore_backend_sglang.engine import SglangEngine, new_token_ids, sglang_media, to_sglang_sampling
from swiftcore_infer import (
    BackendUnavailableError,
    InferError,
    InvalidRequestError,
    Prompt,
    Request,
    SamplingParams,
    UnsupportedError,
)


class FakeSglangEngine:
    """Stands in for ``sglang.Engine``: records every call and returns what the test put in :attr:`replies`.

    ``replies`` is a queue with one entry per ``generate`` / embedding call: SGLang's answer (a list of
    ``{"output_ids": [...]}``, a bare dict, or for ``stream=True`` a list of chunks), or an exception to raise.
    """

    instances: list[FakeSglangEngine] = []
    #: Whether the next stand-in starts with a multimodal processor (SGLang's ``tokenizer_manager.mm_processor``: set
    #: for a multimodal architecture, even with ``skip_tokenizer_init``).
    multimodal = False

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.calls: list[tuple[str, Any]] = []
        self.replies: list[Any] = []
        self.control: dict[str, Any] = {}  # method name -> the result a control call returns
        self.stream_closed = 0
        self.tokenizer_manager = self
        self.mm_processor = object() if FakeSglangEngine.multimodal else None
        self.loop = asyncio.new_event_loop()
        FakeSglangEngine.instances.append(self)

    def _next(self) -> Any:
        assert self.replies, "swiftcore made a call the test did not script"
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply

    def generate(
        self,
        input_ids: Any = None,
        sampling_params: Any = None,
        lora_path: Any = None,
        stream: bool = False,
        **extra: Any,
    ) -> Any:
        call = {"input_ids": input_ids, "sampling_params": sampling_params, "lora_path": lora_path, "stream": stream}
        self.calls.append(("generate", {**call, **extra}))
        reply = self._next()
        return self._chunks(reply) if stream else reply

    def _chunks(self, chunks: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        try:
            yield from chunks
        finally:
            self.stream_closed += 1

    def load_lora_adapter(self, lora_name: str, lora_path: str, pinned: bool = False) -> Any:
        self.calls.append(("load_lora_adapter", {"lora_name": lora_name, "lora_path": lora_path}))
        return self.control.get("load_lora_adapter", types.SimpleNamespace(success=True, error_message=""))

    def update_weights_from_tensor(self, named_tensors: list, load_format: Any = None, flush_cache: bool = True) -> Any:
        self.calls.append(("update_weights_from_tensor", {"named_tensors": named_tensors, "flush_cache": flush_cache}))
        return self.control.get("update_weights_from_tensor", (True, "Success"))

    def update_weights_from_disk(self, model_path: str, load_format: Any = None) -> Any:
        self.calls.append(("update_weights_from_disk", {"model_path": model_path}))
        return self.control.get("update_weights_from_disk", (True, "Success"))

    async def _embed(self, reply: Any) -> Any:
        yield reply

    def generate_request(self, request: Any, _: Any) -> Any:
        self.calls.append(("embed", {"input_ids": request.input_ids}))
        return self._embed(self._next())

    def shutdown(self) -> None:
        self.calls.append(("shutdown", None))


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A tiny Qwen3 checkpoint (only its config and tokenizer matter: SGLang's stand-in never loads it)."""
    from swiftcore_testing import make_tiny_qwen3, plugins_with_tiny_qwen3
    from transformers import AutoTokenizer

    root = tmp_path_factory.mktemp("sglang")
    model_dir = make_tiny_qwen3(root / "tiny")
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    im_end, endoftext = tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    return types.SimpleNamespace(
        plugins=plugins_with_tiny_qwen3(),
        model_dir=model_dir,
        root=root,
        tokenizer=tokenizer,
        im_end=im_end,
        endoftext=endoftext,
        # The Qwen3 template's end-of-turn tokens: <|im_end|> (also eos) and <|endoftext|>.
        stop_ids=sorted([im_end, endoftext]),
    )


@pytest.fixture
def fake_sglang(monkeypatch: pytest.MonkeyPatch) -> Any:
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
    FakeSglangEngine.instances.clear()
    monkeypatch.setattr(FakeSglangEngine, "multimodal", False)
    return module


def _engine(work: Any, **kwargs: Any) -> tuple[SglangEngine, FakeSglangEngine]:
    engine = SglangEngine(work.model_dir, work.plugins, **kwargs)
    return engine, FakeSglangEngine.instances[-1]


def _ids(work: Any, text: str) -> list[int]:
    return list(work.tokenizer(text, add_special_tokens=False)["input_ids"])


def _prompt_ids(work: Any, messages: list[dict[str, Any]]) -> list[int]:
    """The prompt as the checkpoint's own Hugging Face chat template renders it (not swiftcore's encoder)."""
    text = work.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return _ids(work, text)


def _user(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def _out(ids: list[int]) -> dict[str, Any]:
    return {"output_ids": ids, "meta_info": {"finish_reason": {"type": "stop"}}}


def _fake_adapter(root: Path, base: Path, name: str) -> Path:
    """A directory that looks like a peft adapter to swiftcore (the stand-in never reads the weights)."""
    path = root / name
    path.mkdir(exist_ok=True)
    config = {"peft_type": "LORA", "base_model_name_or_path": str(base), "r": 8, "lora_alpha": 16}
    (path / "adapter_config.json").write_text(json.dumps(config))
    return path


# --------------------------------------------------------------------------- no engine needed


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
    from swiftcore_infer import backend_spec, create_engine

    if probe_module.probe() is None:  # scripts/gpu_check.sh runs this file where SGLang is installed and works
        pytest.skip("SGLang can run here: gpu_check_sglang.py runs it for real")
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


# --------------------------------------------------------------------------- requests: what SGLang is asked


def test_engine_options(fake_sglang: Any, work: Any) -> None:
    engine, fake = _engine(work, max_model_len=512, dtype="float32", seed=5, max_lora_rank=32, mem_fraction_static=0.4)
    assert fake.kwargs == {
        "model_path": str(work.model_dir),
        "dtype": "float32",
        "random_seed": 5,
        "context_length": 512,
        "skip_tokenizer_init": True,  # swiftcore tokenizes and decodes; SGLang sees ids only
        "is_embedding": False,
        "log_level": "error",
        "enable_lora": True,
        "max_lora_rank": 32,
        "max_loras_per_batch": 4,
        "lora_target_modules": "all",
        "mem_fraction_static": 0.4,  # passed through
    }
    assert engine.max_model_len == 512
    _, fake = _engine(work, enable_lora=False)
    assert "enable_lora" not in fake.kwargs and fake.kwargs["context_length"] == 1024  # the config's maximum
    engine.close()
    assert fake.calls == [] and FakeSglangEngine.instances[-2].calls == [("shutdown", None)]


def test_generate_sends_template_ids_and_each_requests_sampling(fake_sglang: Any, work: Any) -> None:
    engine, fake = _engine(work)
    records = [_user("What is two plus two?"), _user("Name a colour."), _user("Bye")]
    sampling = [
        SamplingParams(max_new_tokens=5),
        SamplingParams(max_new_tokens=7, temperature=0.7, top_p=0.9, top_k=20, repetition_penalty=1.1, seed=3),
        SamplingParams(max_new_tokens=3, temperature=1.0),
    ]
    fake.replies.append([_out([work.im_end]), _out([work.im_end]), _out([work.im_end])])
    engine.generate_requests([Request(record=r, sampling=s) for r, s in zip(records, sampling, strict=True)])

    ((name, call),) = fake.calls
    assert name == "generate" and call["stream"] is False and call["lora_path"] is None
    assert call["input_ids"] == [_prompt_ids(work, r["messages"]) for r in records]
    assert call["sampling_params"] == [
        {"max_new_tokens": 5, "temperature": 0.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0,
         "stop_token_ids": work.stop_ids},
        {"max_new_tokens": 7, "temperature": 0.7, "top_p": 0.9, "top_k": 20, "repetition_penalty": 1.1,
         "stop_token_ids": work.stop_ids, "sampling_seed": 3},
        {"max_new_tokens": 3, "temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0,
         "stop_token_ids": work.stop_ids},
    ]  # fmt: skip


def test_bad_requests_never_reach_sglang(fake_sglang: Any, work: Any) -> None:
    engine, fake = _engine(work, max_model_len=64)
    good = _user("hello")
    records: list[Any] = [good, {"messages": "bad"}, _user("word " * 80), good]  # unrenderable, too long
    fake.replies.append([_out(_ids(work, "hi") + [work.im_end])] * 2)
    out = engine.generate(records, max_new_tokens=4)
    assert [g.ok for g in out] == [True, False, False, True]
    assert out[1].error_status == 400 and "messages" in out[1].error
    assert "exceeds the model's context of 64 tokens" in out[2].error
    assert fake.calls[-1][1]["input_ids"] == [_prompt_ids(work, good["messages"])] * 2
    assert [g.text for g in out if g.ok] == ["hi", "hi"]


def test_batch_failure_is_retried_one_by_one(fake_sglang: Any, work: Any) -> None:
    engine, fake = _engine(work)
    records = [_user("first"), _user("second"), _user("third")]
    fake.replies += [
        RuntimeError("CUDA error: an illegal memory access"),  # the batch
        _out(_ids(work, "one") + [work.im_end]),  # then each request alone (a bare dict: a batch of one)
        RuntimeError("request 2 is cursed"),
        [_out(_ids(work, "three") + [work.im_end])],
    ]
    out = engine.generate(records, max_new_tokens=4)
    assert [g.text for g in out] == ["one", "", "three"]
    assert out[1].finish_reason == "error" and "request 2 is cursed" in out[1].error
    assert out[1].prompt_tokens == len(_prompt_ids(work, records[1]["messages"]))
    prompts = [_prompt_ids(work, r["messages"]) for r in records]
    assert [c[1]["input_ids"] for c in fake.calls] == [prompts, [prompts[0]], [prompts[1]], [prompts[2]]]


# --------------------------------------------------------------------------- answers: what swiftcore makes of them


def test_output_ids_are_cut_decoded_and_parsed(fake_sglang: Any, work: Any) -> None:
    engine, fake = _engine(work)
    im_start = work.tokenizer.convert_tokens_to_ids("<|im_start|>")
    reasoning = _ids(work, "<think>\nweighing it\n</think>\n\nThe answer is 4.")
    tool = _ids(work, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>')
    plain = _ids(work, "Hello there")
    scripted = [
        reasoning + [work.im_end] + _ids(work, "ignored after the stop token"),
        tool + [work.endoftext],
        plain[:2] + [im_start] + plain[2:],  # no stop token (max tokens): a special token inside is hidden
        _ids(work, "keep this STOP not this") + [work.im_end],
    ]
    fake.replies.append([_out(ids) for ids in scripted])
    requests = [Request(record=_user(f"q{i}"), sampling=SamplingParams(max_new_tokens=40)) for i in range(3)]
    requests.append(Request(record=_user("q3"), sampling=SamplingParams(max_new_tokens=40, stop=("STOP",))))
    thought, called, cut, stopped = engine.generate_requests(requests)

    assert thought.reasoning_content == "weighing it" and thought.content == "The answer is 4."
    assert thought.finish_reason == "stop" and thought.token_ids == reasoning
    assert thought.completion_tokens == len(reasoning) + 1  # the stop token counts
    assert thought.prompt_tokens == len(_prompt_ids(work, requests[0].record["messages"]))

    assert called.content == "" and called.finish_reason == "stop" and called.token_ids == tool
    assert called.tool_calls == [
        {"type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    ]

    assert cut.text == cut.content == "Hello there" and cut.finish_reason == "length"
    assert cut.completion_tokens == len(plain) + 1 and cut.reasoning_content is None

    assert stopped.text == "keep this " and stopped.finish_reason == "stop"


def test_a_prompt_completion_is_not_parsed(fake_sglang: Any, work: Any) -> None:
    engine, fake = _engine(work)
    fake.replies.append([_out(_ids(work, "<think>x</think> y") + [work.im_end])])
    (gen,) = engine.generate_requests([Request(prompt="Once upon a time")])
    assert fake.calls[-1][1]["input_ids"] == [_ids(work, "Once upon a time")]
    assert gen.text == gen.content == "<think>x</think> y" and gen.reasoning_content is None


def test_streaming_sends_one_request_and_pieces_the_reply(fake_sglang: Any, work: Any) -> None:
    engine, fake = _engine(work)
    reply = _ids(work, "Streaming works fine")
    # SGLang's default: each chunk carries all output ids so far; the stop token ends the reply.
    chunks = [reply[: k + 1] for k in range(len(reply))] + [[*reply, work.im_end, 99]]
    fake.replies.append([{"output_ids": ids} for ids in chunks])
    record = _user("stream please")
    sampling = SamplingParams(max_new_tokens=16, temperature=0.5)
    deltas = list(engine.stream(Request(record=record, sampling=sampling)))

    ((name, call),) = fake.calls
    assert name == "generate" and call["stream"] is True and call["lora_path"] is None
    assert call["input_ids"] == _prompt_ids(work, record["messages"])  # one prompt, not a batch
    assert call["sampling_params"] == to_sglang_sampling(sampling, work.stop_ids)
    assert "".join(d.text for d in deltas) == "Streaming works fine"
    final = deltas[-1].final
    assert final is not None and final.token_ids == reply and final.finish_reason == "stop"
    assert all(d.final is None for d in deltas[:-1]) and len(deltas) > 2  # pieces, not one block
    assert fake.stream_closed == 1


def test_streaming_incremental_chunks_and_early_close(fake_sglang: Any, work: Any) -> None:
    engine, fake = _engine(work)
    reply = _ids(work, "one two three four five six")
    fake.replies.append([{"output_ids": [t]} for t in reply])  # incremental: each chunk only its new id
    deltas = list(engine.stream(Request(record=_user("count"), sampling=SamplingParams(max_new_tokens=3))))
    assert deltas[-1].final.token_ids == reply[:3] and deltas[-1].final.finish_reason == "length"
    assert fake.stream_closed == 1  # max_new_tokens reached: SGLang's stream is closed, not drained

    fake.replies.append([{"output_ids": reply[: k + 1]} for k in range(len(reply))])
    stream = engine.stream(Request(record=_user("count"), sampling=SamplingParams(max_new_tokens=16)))
    next(stream)
    stream.close()  # the client went away
    assert fake.stream_closed == 2


# --------------------------------------------------------------------------- adapters and weights


def test_adapters_are_loaded_by_name_and_picked_per_request(fake_sglang: Any, work: Any) -> None:
    engine, fake = _engine(work)
    adapter = _fake_adapter(work.root, work.model_dir, "styled")
    engine.load_adapter("styled", adapter)
    assert fake.calls[-1] == ("load_lora_adapter", {"lora_name": "styled", "lora_path": str(adapter)})

    fake.replies.append([_out([work.im_end])] * 4)
    names = [None, "styled", "base", "styled"]
    engine.generate_requests([Request(record=_user(f"q{i}"), adapter=a) for i, a in enumerate(names)])
    assert fake.calls[-1][1]["lora_path"] == [None, "styled", None, "styled"]

    fake.replies.append([{"output_ids": [work.im_end]}])
    list(engine.stream(Request(record=_user("q"), adapter="styled")))
    assert fake.calls[-1][1]["lora_path"] == "styled"

    fake.control["load_lora_adapter"] = types.SimpleNamespace(success=False, error_message="rank 64 > max_lora_rank")
    with pytest.raises(InferError, match="rank 64 > max_lora_rank"):
        engine.load_adapter("too_big", _fake_adapter(work.root, work.model_dir, "too_big"))
    assert "too_big" not in engine.adapters
    calls = len(fake.calls)
    failed = engine.generate_requests([Request(record=_user("q"), adapter="too_big")])[0]
    assert not failed.ok and "unknown adapter 'too_big'" in failed.error and len(fake.calls) == calls


def test_constructor_adapter_is_the_default(fake_sglang: Any, work: Any) -> None:
    adapter = _fake_adapter(work.root, work.model_dir, "default_one")
    engine = SglangEngine(adapter, work.plugins)  # an adapter directory as the model: its base is served
    fake = FakeSglangEngine.instances[-1]
    assert fake.kwargs["model_path"] == str(work.model_dir)
    assert fake.calls == [("load_lora_adapter", {"lora_name": "default", "lora_path": str(adapter)})]
    fake.replies.append([_out([work.im_end])] * 2)
    engine.generate_requests([Request(record=_user("a")), Request(record=_user("b"), adapter="base")])
    assert fake.calls[-1][1]["lora_path"] == ["default", None]


def test_merge_lora_serves_merged_weights(fake_sglang: Any, work: Any, tmp_path: Path) -> None:
    """``merge_lora=True``: SGLang gets a merged checkpoint (W + alpha/r * B @ A) and no adapter."""
    import torch
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(str(work.model_dir), dtype=torch.float32)
    torch.manual_seed(0)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"], init_lora_weights=False)
    get_peft_model(base, config).save_pretrained(str(tmp_path / "adapter"))
    adapter = load_file(str(tmp_path / "adapter" / "adapter_model.safetensors"))
    config_file = tmp_path / "adapter" / "adapter_config.json"
    saved = json.loads(config_file.read_text())
    config_file.write_text(json.dumps({**saved, "base_model_name_or_path": str(work.model_dir)}))

    engine = SglangEngine(tmp_path / "adapter", work.plugins, merge_lora=True)
    fake = FakeSglangEngine.instances[-1]
    served = Path(fake.kwargs["model_path"])
    assert served != work.model_dir and not any(c[0] == "load_lora_adapter" for c in fake.calls)
    assert engine.default_adapter is None
    weights = load_file(str(served / "model.safetensors"))
    original = load_file(str(work.model_dir / "model.safetensors"))
    for name, tensor in original.items():
        if "q_proj" in name:
            prefix = name.removesuffix(".weight").replace("model.", "base_model.model.model.", 1)
            a, b = adapter[f"{prefix}.lora_A.weight"].double(), adapter[f"{prefix}.lora_B.weight"].double()
            expected = (tensor.double() + 8 / 4 * b @ a).float()
            torch.testing.assert_close(weights[name], expected, rtol=0, atol=1e-6)
            assert not torch.equal(weights[name], tensor)
        else:
            assert torch.equal(weights[name], tensor), name
    engine.close()
    assert not served.exists()  # the merged copy was temporary


def test_weight_updates_pass_tensors_or_a_directory(fake_sglang: Any, work: Any) -> None:
    engine, fake = _engine(work)
    first, second = object(), object()  # SGLang gets the very objects, named as in the HF checkpoint
    assert engine.update_weights({"model.norm.weight": first, "lm_head.weight": second}) == 2
    assert fake.calls[-1] == (
        "update_weights_from_tensor",
        {"named_tensors": [("model.norm.weight", first), ("lm_head.weight", second)], "flush_cache": True},
    )
    assert engine.update_weights([("model.norm.weight", first)]) == 1
    assert engine.update_weights(work.model_dir) == 1  # one safetensors file, reloaded by SGLang from disk
    assert fake.calls[-1] == ("update_weights_from_disk", {"model_path": str(work.model_dir)})

    fake.control["update_weights_from_tensor"] = (False, "shape mismatch for lm_head.weight")
    with pytest.raises(InferError, match="update_weights_from_tensor failed: shape mismatch for lm_head.weight"):
        engine.update_weights({"lm_head.weight": first})
    fake.control["update_weights_from_disk"] = types.SimpleNamespace(success=False, error_message="no such dir")
    with pytest.raises(InferError, match="no such dir"):
        engine.update_weights(work.model_dir)
    with pytest.raises(InvalidRequestError, match="no tensors"):
        engine.update_weights({})


def test_embeddings_with_the_pooling_runner(fake_sglang: Any, work: Any) -> None:
    engine, fake = _engine(work, runner="pooling")
    assert fake.kwargs["is_embedding"] is True and "enable_lora" not in fake.kwargs
    assert engine.capabilities == frozenset({"embed"})
    texts = ["hello world", "bye"]
    fake.replies.append([{"embedding": [3.0, 4.0]}, {"embedding": [0.0, -2.0]}])
    assert engine.embed(texts) == [[0.6, 0.8], [0.0, -1.0]]  # L2-normalised by swiftcore
    assert fake.calls[-1] == ("embed", {"input_ids": [_ids(work, t) for t in texts]})
    fake.replies.append({"embedding": [3.0, 4.0]})  # a batch of one may come back unwrapped
    assert engine.embed([[5, 6, 7]], normalize=False) == [[3.0, 4.0]]
    assert fake.calls[-1] == ("embed", {"input_ids": [[5, 6, 7]]})

    calls = len(fake.calls)
    with pytest.raises(InvalidRequestError, match="input 0 is empty"):
        engine.embed([""])
    with pytest.raises(UnsupportedError):
        engine.update_weights(work.model_dir)
    assert len(fake.calls) == calls


# --------------------------------------------------------------------------- images and audio


def _media_record(root: Path, kinds: list[str]) -> dict[str, Any]:
    """A question with an image and / or a clip (files under ``root``), thinking off."""
    import io
    import wave

    import numpy as np
    from PIL import Image

    parts: list[dict[str, Any]] = []
    for kind in kinds:
        if kind == "image":
            path = root / "p.png"
            Image.fromarray((np.random.RandomState(0).rand(32, 48, 3) * 255).astype(np.uint8)).save(path)
        else:
            path, buffer = root / "a.wav", io.BytesIO()
            with wave.open(buffer, "wb") as out:
                out.setnchannels(1)
                out.setsampwidth(2)
                out.setframerate(16000)
                wave_ = 0.4 * np.sin(2 * np.pi * 440.0 * np.arange(8000) / 16000)
                out.writeframes((wave_ * 32767).astype(np.int16).tobytes())
            path.write_bytes(buffer.getvalue())
        parts.append({"type": kind, kind: str(path)})
    parts.append({"type": "text", "text": "What is this?"})
    return {"messages": [{"role": "user", "content": parts}], "chat_template_kwargs": {"enable_thinking": False}}


def _training_prompt(model_dir: Path, plugins: Any, record: dict[str, Any]) -> tuple[list[int], dict[str, Any]]:
    """``(ids, tensors)`` training's sample path makes of ``record``'s prompt: the core's SampleEncoder with the
    family's template and swiftcore-media's preparer (what ``swiftcore train`` encodes with)."""
    from swiftcore_media import prepare_media

    from swiftcore.api.models import load_tokenizer, resolve_model_spec
    from swiftcore.api.template import SampleEncoder, get_template

    spec = resolve_model_spec(str(model_dir), plugins, None)
    tokenizer = load_tokenizer(str(model_dir))
    encoder = SampleEncoder(
        get_template(spec.default_template, plugins), tokenizer, media=prepare_media(spec, model_dir, tokenizer)
    )
    ids, tensors = encoder.prompt(record)
    assert tensors is not None
    return ids, tensors


def _reply(stop: int, prompt_tokens: int) -> dict[str, Any]:
    return {"output_ids": [stop], "meta_info": {"prompt_tokens": prompt_tokens, "finish_reason": {"type": "stop"}}}


MEDIA_CASES = {"qwen3_5": ["image"], "gemma4": ["image", "audio"], "qwen3_asr": ["audio"]}


@pytest.mark.parametrize("family", sorted(MEDIA_CASES))
def test_a_media_prompt_goes_alone_with_training_s_ids_and_tensors(
    family: str, fake_sglang: Any, work: Any, tiny_model_dir: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    monkeypatch.setattr(FakeSglangEngine, "multimodal", True)
    model_dir, kinds = tiny_model_dir(family), MEDIA_CASES[family]
    engine = SglangEngine(model_dir, work.plugins)
    fake = FakeSglangEngine.instances[-1]
    assert engine.accepts_media
    record = _media_record(tmp_path, kinds)
    ids, tensors = _training_prompt(model_dir, work.plugins, record)
    texts = [_user("first"), _user("third")]
    stop = engine.stop_token_ids[0]
    fake.replies += [[_out([stop]), _out([stop])], _reply(stop, len(ids))]
    out = engine.generate_requests([Request(record=texts[0]), Request(record=record), Request(record=texts[1])])
    assert [g.ok for g in out] == [True, True, True] and out[1].prompt_tokens == len(ids)

    (_, batch), (_, alone) = fake.calls
    assert batch["input_ids"] == [_training_prompt_text(model_dir, work.plugins, r) for r in texts]
    assert not {"image_data", "audio_data"} & set(batch)
    # SGLang's single-request form: training's expanded ids as they are, each media type's tensors in one mapping.
    assert alone["input_ids"] == ids and alone["stream"] is False and alone["lora_path"] is None
    assert {key for key in alone if key.endswith("_data")} == {f"{kind}_data" for kind in kinds}
    sent: dict[str, Any] = {}
    for kind in set(kinds):
        [output] = alone[f"{kind}_data"]
        assert isinstance(output, dict) and output["format"] == "processor_output" and output["modality"] == kind
        sent.update({key: value for key, value in output.items() if key not in ("format", "modality")})
    assert set(sent) == set(tensors) - {"mm_token_type_ids"}  # SGLang works out its own token types
    for key, tensor in sent.items():
        assert torch.equal(torch.as_tensor(tensor), torch.as_tensor(tensors[key])), key
    first = alone[f"{kinds[0]}_data"][0]
    key = next(k for k in first if k not in ("format", "modality"))
    assert getattr(first, key) is first[key]  # read as attributes too, as SGLang's processors read it


def _training_prompt_text(model_dir: Path, plugins: Any, record: dict[str, Any]) -> list[int]:
    """Training's prompt ids of a text-only record."""
    from swiftcore.api.models import load_tokenizer, resolve_model_spec
    from swiftcore.api.template import SampleEncoder, get_template

    spec = resolve_model_spec(str(model_dir), plugins, None)
    ids, _ = SampleEncoder(get_template(spec.default_template, plugins), load_tokenizer(str(model_dir))).prompt(record)
    return ids


def test_a_media_prompt_sglang_counted_otherwise_fails_alone(
    fake_sglang: Any, work: Any, tiny_model_dir: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(FakeSglangEngine, "multimodal", True)
    engine = SglangEngine(tiny_model_dir("qwen3_5"), work.plugins)
    fake = FakeSglangEngine.instances[-1]
    record = _media_record(tmp_path, ["image"])
    ids, _ = _training_prompt(tiny_model_dir("qwen3_5"), work.plugins, record)
    stop = engine.stop_token_ids[0]
    fake.replies += [_reply(stop, len(ids) + 3)]
    [failed] = engine.generate_requests([Request(record=record)])
    assert not failed.ok and f"SGLang ran this prompt with {len(ids) + 3} tokens, not the {len(ids)}" in failed.error

    # Streaming: the same request with stream=True and its media; the count is checked before any piece is sent.
    reply = [stop]
    fake.replies.append([{"output_ids": reply, "meta_info": {"prompt_tokens": len(ids)}}])
    deltas = list(engine.stream(Request(record=record, sampling=SamplingParams(max_new_tokens=4))))
    call = fake.calls[-1][1]
    assert call["stream"] is True and call["input_ids"] == ids and call["image_data"][0]["format"] == "processor_output"
    assert deltas[-1].final is not None and deltas[-1].final.finish_reason == "stop"
    fake.replies.append([{"output_ids": [5], "meta_info": {"prompt_tokens": 1}}])
    with pytest.raises(InferError, match="SGLang ran this prompt with 1 tokens"):
        list(engine.stream(Request(record=record, sampling=SamplingParams(max_new_tokens=4))))


def test_media_is_refused_when_sglang_has_no_multimodal_processor(
    fake_sglang: Any, work: Any, tiny_model_dir: Any, tmp_path: Path
) -> None:
    engine = SglangEngine(tiny_model_dir("qwen3_5"), work.plugins)  # the stand-in starts without one
    fake = FakeSglangEngine.instances[-1]
    assert not engine.accepts_media
    [refused] = engine.generate_requests([Request(record=_media_record(tmp_path, ["image"]))])
    assert refused.error_status == 400
    assert "SGLang started this model without a multimodal processor" in refused.error
    assert "--backend transformers" in refused.error and fake.calls == []


def test_processor_tensors_of_no_known_media_type_are_not_dropped() -> None:
    assert sglang_media([1, 2]) == {} and sglang_media(Prompt([1], {"mm_token_type_ids": [0]})) == {}
    with pytest.raises(InferError, match="'mystery_values' belongs to no media type"):
        sglang_media(Prompt([1], {"pixel_values": 1, "mystery_values": 2}))
