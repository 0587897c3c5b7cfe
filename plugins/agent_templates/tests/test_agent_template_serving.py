"""``--agent-template`` on ``swiftcore infer``, ``swiftcore deploy`` and ``swiftcore eval --model``: a base
(untrained) tiny OLMoE served in an agent format, through swiftcore-infer's ``swiftcore_infer_template`` hook.

The observable is the prompt's token count the engine reports (``usage.prompt_tokens``; ``eval`` records it per
question in ``samples.jsonl``): with the option it is the count of the Hermes rendering (the ``<tools>`` block inside
OLMoE's turns), which is longer than OLMoE's own prompt.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from swiftcore_testing import ADD_TOOL as ADD
from swiftcore_testing import deploy_process, run_cli, user_env

ASKED = {"tools": [ADD], "messages": [{"role": "user", "content": "What is 3 plus 4?"}]}
API_KEY = "agent-template-serving-key"
#: ``ADD`` as EvalScope sends it (its ToolInfo adds ``additionalProperties: false`` to the parameters): an eval
#: question offering it is rendered from exactly this.
EVAL_ADD = {**ADD, "function": {**ADD["function"], "parameters": {**ADD["function"]["parameters"],
                                                                     "additionalProperties": False}}}  # fmt: skip
EVAL_ASKED = {**ASKED, "tools": [EVAL_ADD]}


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
        # As swiftcore eval's requests carry the tool (EvalScope's ToolInfo adds additionalProperties: false).
        out[f"eval:{name}"] = len(tpl.encode(tok, EVAL_ASKED, add_generation_prompt=True).input_ids)
    assert len(set(out.values())) == 5 and out["olmoe"] == out["eval:olmoe"], out  # OLMoE's own drops the tool
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


def _eval_questions(tmp_path: Path) -> Path:
    """One eval question offering the add tool (the training format with ``tools``; the answer is the last turn)."""
    path = tmp_path / "questions.jsonl"
    row = {"tools": [EVAL_ADD], "messages": [*ASKED["messages"], {"role": "assistant", "content": "7"}]}
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    return path


def test_eval_agent_template_prompts_in_the_agent_format(
    tmp_path: Path, tiny_model_dir: Any, prompt_tokens: dict[str, int]
) -> None:
    """``swiftcore eval --model OLMOE --agent-template hermes`` on a question offering a tool: the in-process server's
    prompt is ``olmoe_hermes``'s rendering of it (the count in samples.jsonl), not OLMoE's own (which drops the
    tool)."""
    out = run_cli(
        "eval", "--model", str(tiny_model_dir("olmoe")), "--dataset", str(_eval_questions(tmp_path)),
        "--agent-template", "hermes", "--max-tokens", "1", "--output", str(tmp_path / "eval"), "--json",
    )  # fmt: skip
    summary = json.loads(out.strip().splitlines()[-1])
    sample = json.loads((Path(summary["output_dir"]) / "samples.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert sample["prompt_tokens"] == prompt_tokens["eval:olmoe_hermes"], (sample, prompt_tokens)


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("qwen3_5", "has its own tool format"),  # refused by the hook, before the model loads
        ("api-url", "with --model only"),  # the option builds the in-process engine: not for another server's
    ],
)
def test_eval_agent_template_refusals(target: str, message: str, tmp_path: Path, tiny_model_dir: Any) -> None:
    """``eval --agent-template`` on Qwen3.5 (its own tool format) names the option and the template; with --api-url
    (a server serving its own template) it is a usage error naming the option."""
    from click.testing import CliRunner

    from swiftcore.api.cli import cli

    where = ["--model", str(tiny_model_dir("qwen3_5"))] if target == "qwen3_5" else ["--api-url", "http://127.0.0.1:9"]
    args = ["eval", *where, "--dataset", str(_eval_questions(tmp_path)), "--agent-template", "hermes"]
    args += ["--output", str(tmp_path / "eval")]
    result = CliRunner().invoke(cli, args, env={"SWIFTCORE_PLUGINS": None, "SWIFTCORE_PLUGINS_STRICT": None})
    assert result.exit_code != 0
    text = str(result.exception) + result.output
    assert "--agent-template" in text and message in text, text
    if target == "qwen3_5":
        assert "'qwen3_5'" in text, text
    assert not (tmp_path / "eval").exists()  # nothing was asked
