"""``--agent-template`` on ``swiftcore infer`` and ``swiftcore deploy``: a base (untrained) tiny OLMoE served in an
agent format, through swiftcore-infer's ``swiftcore_infer_template`` hook.

The observable is the prompt's token count the engine reports (``usage.prompt_tokens``): with the option it is the
count of the Hermes rendering (the ``<tools>`` block inside OLMoE's turns), which is longer than OLMoE's own prompt.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from swiftcore_testing import deploy_process, run_cli, user_env

ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}
ASKED = {"tools": [ADD], "messages": [{"role": "user", "content": "What is 3 plus 4?"}]}
API_KEY = "agent-template-serving-key"


@pytest.fixture(scope="module")
def prompt_tokens(tiny_model_dir: Any) -> dict[str, int]:
    """Template name -> the token count of ``ASKED``'s generation prompt on the tiny OLMoE tokenizer."""
    from transformers import AutoTokenizer

    import swiftcore
    from swiftcore.api.template import get_template

    plugins = swiftcore.load_plugins(env={})
    tok = AutoTokenizer.from_pretrained(tiny_model_dir("olmoe"))
    out = {}
    for name in ("olmoe", "olmoe_hermes", "olmoe_react"):
        tpl = get_template(name, plugins)
        enc = tpl.encode(tok, ASKED, add_generation_prompt=True)
        assert name == "olmoe" or "add" in enc.text  # the agent templates render the schema
        out[name] = len(enc.input_ids)
    assert len(set(out.values())) == 3, out  # the three prompts tell apart
    return out


def _infer(tmp_path: Path, model: Path, *extra: str) -> dict[str, Any]:
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(ASKED) + "\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    run_cli("infer", "--model", str(model), "--input", str(rows), "--output", str(out), "--max-new-tokens", "1", *extra)
    return json.loads(out.read_text(encoding="utf-8").splitlines()[0])


@pytest.mark.parametrize("agent", ["hermes", "react"])
def test_infer_agent_template_prompts_in_the_agent_format(
    agent: str, tmp_path: Path, tiny_model_dir: Any, prompt_tokens: dict[str, int]
) -> None:
    """``swiftcore infer --agent-template AGENT`` on the base OLMoE: the engine's prompt is ``olmoe_AGENT``'s
    rendering of the tool row, token for token in count (not OLMoE's own, which has no tools)."""
    row = _infer(tmp_path, tiny_model_dir("olmoe"), "--agent-template", agent)
    assert "error" not in row, row
    assert row["usage"]["prompt_tokens"] == prompt_tokens[f"olmoe_{agent}"], (row, prompt_tokens)


def test_infer_agent_template_matches_template_by_name(
    tmp_path: Path, tiny_model_dir: Any, prompt_tokens: dict[str, int]
) -> None:
    """``--template olmoe --agent-template hermes`` is ``--template olmoe_hermes``; an agent template given by name
    with another agent format is switched to that format on its family (``olmoe_react`` + hermes)."""
    model = tiny_model_dir("olmoe")
    for extra in (("--template", "olmoe"), ("--template", "olmoe_react")):
        row = _infer(tmp_path, model, *extra, "--agent-template", "hermes")
        assert row["usage"]["prompt_tokens"] == prompt_tokens["olmoe_hermes"], (extra, row)


def test_infer_agent_template_refused_on_a_tool_format(tmp_path: Path, tiny_model_dir: Any) -> None:
    """On a model whose template has its own tool format (Qwen3.5's calls), ``--agent-template`` is an error naming
    the option and the template, before the engine loads."""
    from click.testing import CliRunner

    from swiftcore.api.cli import cli

    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(ASKED) + "\n", encoding="utf-8")
    args = ["infer", "--model", str(tiny_model_dir("qwen3_5")), "--input", str(rows), "--agent-template", "hermes"]
    result = CliRunner().invoke(cli, args, env={"SWIFTCORE_PLUGINS": None, "SWIFTCORE_PLUGINS_STRICT": None})
    assert result.exit_code != 0
    message = str(result.exception) + result.output
    assert "--agent-template hermes" in message and "has its own tool format" in message, message
    assert "'qwen3_5'" in message, message
    assert not (tmp_path / "rows.out.jsonl").exists()


def test_deploy_serves_the_agent_template(tiny_model_dir: Any, prompt_tokens: dict[str, int]) -> None:
    """``swiftcore deploy --agent-template hermes`` on the base OLMoE: a chat request with ``tools`` is prompted
    with the Hermes rendering (its usage counts ``olmoe_hermes``'s prompt)."""
    import httpx

    env = user_env(SWIFTCORE_API_KEY=API_KEY)
    model = str(tiny_model_dir("olmoe"))
    with deploy_process("--model", model, "--agent-template", "hermes", served_model_name="agent", env=env) as (
        base,
        _,
    ):
        reply = httpx.post(
            f"{base}/v1/chat/completions",
            headers={"Authorization": f"Bearer {API_KEY}"},
            json={"model": "agent", **ASKED, "max_tokens": 1, "temperature": 0},
            timeout=120,
        )
    assert reply.status_code == 200, reply.text
    assert reply.json()["usage"]["prompt_tokens"] == prompt_tokens["olmoe_hermes"], reply.json()
