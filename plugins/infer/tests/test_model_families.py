"""The transformers engine on the installed model families' tiny checkpoints (hybrid attention included).

Left padding must not change any row's answer (Qwen3.5's linear-attention layers see the padding too),
and streaming must give what batch generation gives.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from swiftcore_infer.types import Request, SamplingParams

FAMILIES = ("qwen3_5", "gemma4")


def _installed() -> list[str]:
    import swiftcore

    names = set(swiftcore.load_plugins().registry.names("model"))
    return [name for name in FAMILIES if name in names]


@pytest.fixture(scope="module", params=_installed())
def family_engine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    from swiftcore_infer.transformers_engine import TransformersEngine
    from swiftcore_tiny import make_tiny

    import swiftcore

    plugins = swiftcore.load_plugins()
    model_dir: Path = make_tiny(
        plugins.registry.get("model", request.param), tmp_path_factory.mktemp(request.param) / "tiny"
    )
    return TransformersEngine(model_dir, plugins)


def test_left_padding_changes_no_answer(family_engine: Any) -> None:
    records = [
        {"messages": [{"role": "user", "content": f"question number {i} " + "word " * (i % 5)}]} for i in range(5)
    ]
    batched = family_engine.generate(records, max_new_tokens=6, batch_size=5)
    single = [family_engine.generate([r], max_new_tokens=6, batch_size=1)[0] for r in records]
    assert [g.token_ids for g in batched] == [g.token_ids for g in single]


def test_stream_equals_generate(family_engine: Any) -> None:
    record = {"messages": [{"role": "user", "content": "hello"}]}
    expected = family_engine.generate([record], max_new_tokens=6)[0]
    deltas = list(family_engine.stream(Request(record=record, sampling=SamplingParams(max_new_tokens=6))))
    assert deltas[-1].final.token_ids == expected.token_ids
    assert "".join(d.text for d in deltas) == expected.text


#: family -> thinking mode -> [(scripted reply, stopped normally, expected (content, reasoning_content))]
SCRIPTED = {
    "qwen3_5": {
        True: [
            ("even<|im_end|>", True, ("even", None)),
            ("two is even\n</think>\n\neven<|im_end|>", True, ("even", "two is even")),
            ("two is", False, ("", "two is")),
        ],
        False: [("even<|im_end|>", True, ("even", None)), ("even odd", False, ("even odd", None))],
    },
    "gemma4": {
        True: [
            ("<|channel>thought\ntwo is even\n<channel|>even<turn|>", True, ("even", "two is even")),
            ("even<turn|>", True, ("even", None)),
        ],
        False: [("even<turn|>", True, ("even", None)), ("even odd", False, ("even odd", None))],
    },
    "deepseek_v4": {
        True: [
            ("two is even</think>even<｜end▁of▁sentence｜>", True, ("even", "two is even")),
            ("even<｜end▁of▁sentence｜>", True, ("even", None)),
            ("two is", False, ("", "two is")),
        ],
        False: [("even<｜end▁of▁sentence｜>", True, ("even", None))],
    },
}


@pytest.mark.parametrize("family", sorted(SCRIPTED))
def test_scripted_replies_parse_by_how_they_ended(family: str, tiny_model_dir: Any, monkeypatch: Any) -> None:
    """A reply that closes the thinking block its prompt opened has its answer in ``content``; one that
    stopped normally without a block is content; only a reply cut (max tokens) inside the opened block
    is reasoning. The model's output is scripted (its ids), everything after it is the engine's own path,
    generate and stream alike."""
    from swiftcore_infer.transformers_engine import TransformersEngine

    import swiftcore

    engine = TransformersEngine(tiny_model_dir(family), swiftcore.load_plugins())
    for thinking, cases in SCRIPTED[family].items():
        record = {
            "messages": [{"role": "user", "content": "Is 2 even or odd?"}],
            "chat_template_kwargs": {"enable_thinking": thinking},
        }
        for text, stopped, expected in cases:
            ids = engine.tokenizer(text, add_special_tokens=False)["input_ids"]
            budget = len(ids) + (4 if stopped else 0)  # a cut reply used its whole budget
            monkeypatch.setattr(engine, "_generate_ids", lambda prompts, params, adapters, ids=ids: [ids])
            monkeypatch.setattr(
                engine, "_stream_many_ids", lambda prompts, params, adapters, ids=ids: iter([(0, [t]) for t in ids])
            )
            generated = engine.generate([record], max_new_tokens=budget)[0]
            deltas = list(engine.stream(Request(record=record, sampling=SamplingParams(max_new_tokens=budget))))
            for reply in (generated, deltas[-1].final):
                assert reply.finish_reason == ("stop" if stopped else "length"), (family, thinking, text)
                assert (reply.content, reply.reasoning_content) == expected, (family, thinking, text)
            assert "".join(d.text for d in deltas) == generated.text


def test_special_tokens_never_leak_into_replies(tiny_model_dir: Any, monkeypatch: Any) -> None:
    """Special tokens a reply may contain (``<|vision_start|>``, ``<|image_pad|>``) are not text; the ones the
    parser reads (tool-call markers) are kept, so a tool call still parses."""
    from swiftcore_infer.transformers_engine import TransformersEngine

    import swiftcore

    engine = TransformersEngine(tiny_model_dir("qwen3_5"), swiftcore.load_plugins())
    record = {
        "messages": [{"role": "user", "content": "Is 2 even or odd?"}],
        "chat_template_kwargs": {"enable_thinking": False},
    }
    cases = [
        ("even<|vision_start|> odd<|image_pad|><|im_end|>", "even odd", []),
        ("<tool_call>\n<function=f>\n<parameter=x>\n1\n</parameter>\n</function>\n</tool_call><|im_end|>", "", ["f"]),
    ]
    for text, content, calls in cases:
        ids = engine.tokenizer(text, add_special_tokens=False)["input_ids"]
        monkeypatch.setattr(engine, "_generate_ids", lambda prompts, params, adapters, ids=ids: [ids])
        reply = engine.generate([record], max_new_tokens=len(ids) + 4)[0]
        assert "<|vision_start|>" not in reply.text and "<|image_pad|>" not in reply.text
        assert reply.content == content
        assert [c["function"]["name"] for c in reply.tool_calls or []] == calls
