"""The agent templates on OLMoE's and Qwen3-ASR's templates: byte-exact renderings (hand-written), the training
encoding (call tokens in the loss, the tool's result not), the call parser's round trip (whole and streamed), and
the refusal of tool rows without an agent template."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from swiftcore_testing import loss_runs

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}
ADD = {"type": "function", "function": {"name": "add", "description": "Add two integers.", "parameters": SCHEMA}}
CALL = {"id": "c0", "type": "function", "function": {"name": "add", "arguments": '{"a": 3, "b": 4}'}}
# Qwen3-ASR's user turn holds audio only (its official template drops user text): the question is audio there.
QUESTION = {
    "olmoe": "3 plus 4?",
    "qwen3_asr": [{"type": "audio", "audio": "question.wav"}, {"type": "text", "text": "3 plus 4?"}],
}


def _row(family: str) -> dict[str, Any]:
    return {"tools": [ADD], "messages": [
        {"role": "system", "content": "You add."},
        {"role": "user", "content": QUESTION[family]},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "c0", "content": "7"},
        {"role": "assistant", "content": "7"},
    ]}  # fmt: skip


HERMES_TOOLS = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    '{"type": "function", "function": {"name": "add", "description": "Add two integers.", "parameters": '
    '{"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}}\n</tools>\n\n'
    "For each function call, return a json object with function name and arguments within <tool_call></tool_call> "
    'XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)
REACT_TOOLS = (
    "Answer the following questions as best you can. You have access to the following tools:\n\n"
    'add: Add two integers. Parameters: {"type": "object", "properties": {"a": {"type": "integer"}, '
    '"b": {"type": "integer"}}}\n\n'
    "Use the following format:\n\nThought: you should always think about what to do\n"
    "Action: the action to take, should be one of [add]\nAction Input: the input to the action, a JSON object\n"
    "Observation: the result of the action\n... (this Thought/Action/Action Input/Observation can repeat)\n\n"
    "When you know the final answer, reply with it alone."
)
HERMES_CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 3, "b": 4}}\n</tool_call>'
REACT_CALL = 'Action: add\nAction Input: {"a": 3, "b": 4}'
AUDIO = "<|audio_start|><|audio_pad|><|audio_end|>"

EXPECTED = {
    "olmoe_hermes": (
        "<|endoftext|><|system|>\nYou add.\n\n" + HERMES_TOOLS + "\n<|user|>\n3 plus 4?\n"
        "<|assistant|>\n" + HERMES_CALL + "<|endoftext|>\n"
        "<|user|>\n<tool_response>\n7\n</tool_response>\n<|assistant|>\n7<|endoftext|>"
    ),
    "olmoe_react": (
        "<|endoftext|><|system|>\nYou add.\n\n" + REACT_TOOLS + "\n<|user|>\n3 plus 4?\n"
        "<|assistant|>\n" + REACT_CALL + "<|endoftext|>\n<|user|>\nObservation: 7\n<|assistant|>\n7<|endoftext|>"
    ),
    "qwen3_asr_hermes": (
        "<|im_start|>system\nYou add.\n\n" + HERMES_TOOLS + "<|im_end|>\n<|im_start|>user\n" + AUDIO + "<|im_end|>\n"
        "<|im_start|>assistant\n" + HERMES_CALL + "<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n7\n</tool_response><|im_end|>\n<|im_start|>assistant\n7<|im_end|>\n"
    ),
    "qwen3_asr_react": (
        "<|im_start|>system\nYou add.\n\n" + REACT_TOOLS + "<|im_end|>\n<|im_start|>user\n" + AUDIO + "<|im_end|>\n"
        "<|im_start|>assistant\n" + REACT_CALL + "<|im_end|>\n"
        "<|im_start|>user\nObservation: 7<|im_end|>\n<|im_start|>assistant\n7<|im_end|>\n"
    ),
}
EOS = {"olmoe": "<|endoftext|>", "qwen3_asr": "<|im_end|>"}
CALL_TEXT = {"hermes": HERMES_CALL, "react": REACT_CALL}
RESULT_TEXT = {"hermes": "<tool_response>\n7\n</tool_response>", "react": "Observation: 7"}


@pytest.fixture(scope="module")
def plugins() -> Any:
    import swiftcore

    return swiftcore.load_plugins(env={})


def _template(name: str, plugins: Any) -> Any:
    from swiftcore.api.template import get_template

    return get_template(name, plugins)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_renders_byte_exact(name: str, plugins: Any) -> None:
    """The rendering is the family's own turns with the tools, the call and the result written in the agent
    format, byte for byte; the family's generation prompt after the history is what training put before the call."""
    tpl = _template(name, plugins)
    row = _row(name.rsplit("_", 1)[0])
    assert tpl.render(row) == EXPECTED[name]
    asked = {**row, "messages": row["messages"][:2]}
    prompt = tpl.render(asked, add_generation_prompt=True)
    assert EXPECTED[name].startswith(prompt) and prompt.endswith(tpl.generation_prompt(tpl.normalize(asked))), prompt


@pytest.mark.parametrize("name", list(EXPECTED))
def test_call_tokens_carry_the_loss(name: str, plugins: Any, tiny_model_dir: Any) -> None:
    """Encoded with the tiny family tokenizer: the ids are the tokenizer's of the rendering, the loss covers the
    call (and its end of turn) and the final answer, never the tools block or the tool's result."""
    from transformers import AutoTokenizer

    family, agent = name.rsplit("_", 1)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir(family))
    enc = _template(name, plugins).encode(tok, _row(family))
    assert enc.text == EXPECTED[name]
    if family == "olmoe":  # (Qwen3-ASR's ids expand the audio placeholder, which a plain tokenizer call does not)
        assert enc.input_ids == tok(enc.text, add_special_tokens=False)["input_ids"]
    runs = loss_runs(enc.input_ids, enc.labels, tok)
    assert runs == [CALL_TEXT[agent] + EOS[family], "7" + EOS[family]], runs
    assert RESULT_TEXT[agent] in enc.text


def _reply(name: str, plugins: Any, message: dict[str, Any]) -> tuple[Any, str]:
    """``(template, generated text)``: what a model that learnt ``message`` writes after the generation prompt."""
    tpl = _template(name, plugins)
    family = name.rsplit("_", 1)[0]
    asked = {"tools": [ADD], "messages": [{"role": "user", "content": QUESTION[family]}]}
    prompt = tpl.render(asked, add_generation_prompt=True)
    full = tpl.render({**asked, "messages": [*asked["messages"], message]})
    assert full.startswith(prompt)
    return tpl, full[len(prompt) :]


TWO_CALLS = {
    "role": "assistant",
    "content": "Adding twice.",
    "tool_calls": [CALL, {"type": "function", "function": {"name": "add", "arguments": {"a": 12, "b": -30}}}],
}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_parser_round_trip(name: str, plugins: Any) -> None:
    """A rendered turn with content and two calls parses back into the same OpenAI tool calls and content."""
    tpl, text = _reply(name, plugins, TWO_CALLS)
    parsed = tpl.parse_response(text)
    got = [(c["type"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in parsed["tool_calls"]]
    assert got == [("function", "add", {"a": 3, "b": 4}), ("function", "add", {"a": 12, "b": -30})]
    assert parsed["content"] == "Adding twice."
    # A final answer (no call) parses as the family's reply.
    tpl, text = _reply(name, plugins, {"role": "assistant", "content": "7"})
    assert tpl.parse_response(text)["tool_calls"] == [] and tpl.parse_response(text)["content"] == "7"


@pytest.mark.parametrize("size", [1, 3, 7])
@pytest.mark.parametrize("name", list(EXPECTED))
def test_streamed_reply_holds_the_calls(name: str, size: int, plugins: Any) -> None:
    """Streamed in chunks through deploy's stream parser (with the template's markers): the content before the calls
    comes out as content, equal to the whole reply's parsed content (ReAct's ``Thought:`` label dropped as the parse
    drops it), and nothing of the call markup does (the calls are sent parsed at the end). A final answer with a
    thought and no call streams as its parse too."""
    from swiftcore_serve import StreamParser, markers_for

    replies = [_reply(name, plugins, TWO_CALLS), _reply(name, plugins, {"role": "assistant", "content": "7"})]
    if name.endswith("react"):  # a thought, then the answer: the label is markup, the rest is content
        replies.append((replies[0][0], "Thought: It is 7.\n7"))
    for tpl, text in replies:
        text = text.split(EOS[name.rsplit("_", 1)[0]])[0]  # the engine stops at the stop word
        start, end, tool_start = markers_for(tpl)
        parser = StreamParser(
            False,
            start,
            end,
            tool_start,
            content_start=getattr(tpl, "content_start", None),
            content_label=getattr(tpl, "content_label", None),
        )
        pieces = [p for i in range(0, len(text), size) for p in parser.feed(text[i : i + size])] + parser.flush()
        assert {field for field, _ in pieces} <= {"content"}
        streamed = "".join(t for _, t in pieces)
        assert streamed == tpl.parse_response(text)["content"], (text, pieces)
        assert "Thought:" not in streamed and "Action" not in streamed and "<tool_call>" not in streamed


def test_tool_rows_refused_without_agent_template(tmp_path: Path) -> None:
    """swiftcore_data's check names each tool row's file:line, the template, and --agent-template hermes; rows
    without tools pass."""
    from swiftcore_data import DataError, load_records, refuse_tool_rows

    plain = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in (plain, _row("olmoe"), plain)) + "\n", encoding="utf-8")
    records = load_records([str(path)])
    refuse_tool_rows([r for r in records if "tools" not in r], "olmoe")  # no tool row: nothing to refuse
    with pytest.raises(DataError) as caught:
        refuse_tool_rows(records, "olmoe")
    message = str(caught.value)
    assert "mixed.jsonl:2" in message and "'olmoe'" in message and "--agent-template hermes" in message, message


def _train(*args: str) -> Any:
    from click.testing import CliRunner

    from swiftcore.api.cli import cli

    env = {"SWIFTCORE_PLUGINS": None, "SWIFTCORE_PLUGINS_STRICT": None}
    return CliRunner().invoke(cli, ["train", *args], env=env)


def test_train_refuses_tool_rows_on_olmoe(tmp_path: Path, tiny_model_dir: Any) -> None:
    """``swiftcore train`` on OLMoE with a tool row and no --agent-template fails before anything is written."""
    data = tmp_path / "tools.jsonl"
    data.write_text(json.dumps(_row("olmoe")) + "\n", encoding="utf-8")
    out = tmp_path / "run"
    result = _train("--model", str(tiny_model_dir("olmoe")), "--dataset", str(data), "--output-dir", str(out))
    assert result.exit_code != 0
    message = str(result.exception) + result.output
    assert "tools.jsonl:1" in message and "--agent-template hermes" in message, message
    assert not out.exists()


def test_agent_template_refused_where_the_template_has_tools(tmp_path: Path, tiny_model_dir: Any) -> None:
    """--agent-template on a template with its own tool format (qwen3's Hermes calls) is an error saying so."""
    data = tmp_path / "tools.jsonl"
    data.write_text(json.dumps(_row("olmoe")) + "\n", encoding="utf-8")
    args = ["--model", str(tiny_model_dir("olmoe")), "--dataset", str(data), "--output-dir", str(tmp_path / "run")]
    result = _train(*args, "--template", "qwen3", "--agent-template", "hermes")
    assert result.exit_code != 0
    message = str(result.exception) + result.output
    assert "has its own tool format" in message and "'qwen3'" in message, message
