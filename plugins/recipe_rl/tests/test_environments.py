"""Multi-turn environments: the ``calculator`` (safe arithmetic, malformed calls answered, never raised), its
registration, the options, and one real rollout on the tiny qwen3_5 whose tool call the family's template parses,
the calculator executes, the result reaches the next prompt as the template renders it, and the tool tokens stay out
of the loss."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

# ---------------------------------------------------------------------------------------------- the calculator


@pytest.mark.parametrize(
    ("expression", "value"),
    [("6*7", 42), ("(3 + 4) * 12", 84), ("-2 ** 2", -4), ("7 / 2", 3.5), ("7 // 2", 3), ("7 % 4", 3),
     ("2^10", 1024), ("1.5 * 4", 6.0), ("+3 - -3", 6), (" 12 ", 12)],
)  # fmt: skip
def test_calculator_evaluates_arithmetic(expression: str, value: float) -> None:
    from swiftcore_recipe_rl.environments import evaluate_expression

    assert evaluate_expression(expression) == value


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("1/0", "division by zero"),
        ("5 // 0", "division by zero"),
        ("3 % 0", "division by zero"),
        ("0 ** -1", "division by zero"),
        ("9**9**9", "more than 100 digits"),
        ("2**10000", "more than 100 digits"),
        ("0.5 ** -1000", "more than 100 digits"),
        ("10.0 ** 400", "more than 100 digits"),
        ("(-8) ** 0.5", "not a real number"),
        ("__import__('os').system('true')", "not allowed"),
        ("x + 1", "not allowed"),
        ("abs(-1)", "not allowed"),
        ("[1, 2]", "not allowed"),
        ("True + 1", "not allowed"),
        ("1 if 1 else 2", "not allowed"),
        ("6 *", "not an arithmetic expression"),
        ("", "non-empty string"),
        ("1+" * 150 + "1", "longer than 200"),
    ],
)
def test_calculator_refuses_what_it_must(expression: str, message: str) -> None:
    from swiftcore_recipe_rl.environments import CalculatorError, evaluate_expression

    with pytest.raises(CalculatorError, match=message):
        evaluate_expression(expression)


def _call(name: str = "calculator", arguments: Any = None) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def test_calculator_episode_answers_calls_and_rewards_a_correct_answer_reached_with_a_call() -> None:
    from swiftcore_recipe_rl.environments import CALCULATOR_TOOL, Calculator

    env = Calculator()
    record = env.reset({"messages": [{"role": "user", "content": "6*7?"}], "answer": "42", "tools": [CALCULATOR_TOOL]})
    assert record["tools"] == [CALCULATOR_TOOL] and record["messages"][0]["content"] == "6*7?"  # not shown twice
    out = env.step({"content": "", "tool_calls": [_call(arguments=json.dumps({"expression": "6*7"}))]})
    assert out == {"messages": [{"role": "tool", "name": "calculator", "content": "42"}], "done": False, "reward": 0.0}
    out = env.step({"content": "It is 42.", "tool_calls": []})
    assert out["done"] and out["messages"] == [] and out["reward"] == 1.0
    # The same answer without a calculator call, or a wrong one after a call, earns nothing.
    env.reset({"messages": [{"role": "user", "content": "6*7?"}], "answer": "42"})
    assert env.step({"content": "42"}) == {"messages": [], "done": True, "reward": 0.0}
    env.reset({"messages": [{"role": "user", "content": "6*7?"}], "answer": "42"})
    env.step({"tool_calls": [_call(arguments={"expression": 6})]})  # a bare number is an expression too
    assert env.step({"content": "41"})["reward"] == 0.0


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (_call("search", {"query": "x"}), "unknown tool 'search'"),
        (_call(arguments="{not json"), "not a JSON object"),
        (_call(arguments={"expr": "1+1"}), "'expression' argument"),
        (_call(arguments=["1+1"]), "'expression' argument"),
        (_call(arguments={"expression": "1/0"}), "division by zero"),
        (_call(arguments={"expression": "2**100000"}), "more than 100 digits"),
        (_call(arguments={"expression": None}), "non-empty string"),
        ("not a mapping", "unknown tool None"),
    ],
)
def test_calculator_answers_a_malformed_call_with_an_error_message(call: Any, error: str) -> None:
    from swiftcore_recipe_rl.environments import Calculator

    env = Calculator()
    env.reset({"messages": [{"role": "user", "content": "?"}], "answer": "2"})
    out = env.step({"content": "", "tool_calls": [call]})
    (message,) = out["messages"]
    assert message["role"] == "tool" and message["content"].startswith("error: ") and error in message["content"]
    assert not out["done"] and env.errors == 1 and env.successes == 0
    assert env.step({"content": "2"})["reward"] == 0.0  # a failed call is not a calculator call that counted


def test_calculator_is_registered_and_conforms(plugins: Any) -> None:
    from swiftcore.api import resolve
    from swiftcore.api.protocols import EnvironmentProtocol, conformance_problems

    spec = plugins.registry.get("environment", "calculator")
    assert spec.provider.plugin == "rl" and spec.factory == "swiftcore_recipe_rl.environments:Calculator"
    factory = resolve(spec.factory)
    assert conformance_problems(factory, EnvironmentProtocol, "calculator") == []
    assert isinstance(factory(), EnvironmentProtocol)
    assert plugins.registry.get("reward", "environment").provider.plugin == "rl"


def test_environment_options_are_checked() -> None:
    from swiftcore_recipe_rl.options import GRPOOptions, ReinforcePPOptions, RLOOOptions

    assert GRPOOptions(reward=("environment",), environment="calculator").max_turns == 3
    ReinforcePPOptions(reward=("environment",), environment="calculator", max_turns=1)
    with pytest.raises(ValueError, match="--environment: not supported by rloo"):
        RLOOOptions(reward=("format",), environment="calculator")
    with pytest.raises(ValueError, match="--max-turns: 0"):
        GRPOOptions(reward=("format",), environment="calculator", max_turns=0)
    with pytest.raises(ValueError, match="--reward environment: .*give --environment"):
        GRPOOptions(reward=("environment",))
    with pytest.raises(ValueError, match="--rollout-engine vllm: not supported yet"):
        GRPOOptions(reward=("format",), environment="calculator", rollout_engine="vllm")


def test_importing_the_environments_imports_no_torch() -> None:
    import subprocess

    code = "import swiftcore_recipe_rl.environments, swiftcore_recipe_rl.plugin, sys; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ---------------------------------------------------------------------------------------------- a real rollout

#: The tool call a Qwen3.5 reply carries (the family's XML format), and the stop token that ends the reply.
QWEN35_CALL = (
    "<tool_call>\n<function=calculator>\n<parameter=expression>\n6*7\n</parameter>\n</function>\n</tool_call><|im_end|>"
)


def test_a_tool_call_is_parsed_executed_rendered_and_masked(tiny_dir: Path, plugins: Any, tmp_path: Path) -> None:
    """One GRPO rollout batch on the tiny qwen3_5: the first reply is scripted (a tiny random model emits no tool
    call); after the tool result one episode answers 42 (scripted) and the other is the model's own. The reply is
    parsed by the qwen3_5 template, the calculator answers 42, the next turn's input is exactly the template's
    encoding of the conversation with the tool message, the loss mask is 0 on the tool tokens and 1 on the model's,
    and the environment rewards the episode that answered 42 after its call (1) and not the other (0)."""
    from swiftcore_recipe_rl import trainer as trainer_module
    from swiftcore_recipe_rl.options import GRPOOptions
    from swiftcore_recipe_rl.recipe import run
    from swiftcore_recipe_rl.rollout import PromptCodec

    from swiftcore.api.models import load_tokenizer
    from swiftcore.api.template import get_template

    tokenizer = load_tokenizer(str(tiny_dir))
    template = get_template("qwen3_5", plugins)
    codec = PromptCodec(template, tokenizer)
    scripted = [int(t) for t in tokenizer.encode(QWEN35_CALL, add_special_tokens=False)]
    seen: dict[str, Any] = {"inputs": []}

    cls = trainer_module.grpo_trainer_class()
    real_generate = cls._generate_single_turn
    real_score = cls._generate_and_score_completions

    answer = [int(t) for t in tokenizer.encode("42<|im_end|>", add_special_tokens=False)]

    def generate(self: Any, prompt_ids: Any, *args: Any, **kwargs: Any) -> Any:
        seen["inputs"].append([list(p) for p in prompt_ids])
        if len(seen["inputs"]) == 1:
            return [list(scripted) for _ in prompt_ids], None
        # After the tool result: the first episode answers 42 (scripted), the second is the model's own reply.
        ids, _ = real_generate(self, prompt_ids, *args, **kwargs)
        return [list(answer), *[list(i) for i in ids[1:]]], None

    def score(self: Any, inputs: Any) -> Any:
        out = real_score(self, inputs)
        seen.setdefault("out", out)
        seen.setdefault("episodes", list(self.rollout_func.episodes))
        return out

    data = tmp_path / "prompts.jsonl"
    row = {"messages": [{"role": "user", "content": "What is 6*7? Use the calculator."}], "answer": "42"}
    data.write_text(json.dumps(row) + "\n")
    from swiftcore_train.config import TrainConfig

    cfg = TrainConfig(
        model=str(tiny_dir), dataset=(str(data),), output_dir=str(tmp_path / "out"), tuner="lora", max_steps=1,
        batch_size=1, logging_steps=1, save_steps=10_000, seed=0, plot=False, max_length=1024, enable_thinking=False,
    )  # fmt: skip
    options = GRPOOptions(
        reward=("environment",), environment="calculator", max_turns=2, num_generations=2, max_completion_length=96
    )
    mp = pytest.MonkeyPatch()
    mp.setattr(cls, "_generate_single_turn", generate)
    mp.setattr(cls, "_generate_and_score_completions", score)
    try:
        run(cfg, plugins, options)
    finally:
        mp.undo()

    first, second = seen["inputs"][:2]
    record = {**row, "chat_template_kwargs": {"enable_thinking": False}}
    from swiftcore_recipe_rl.environments import CALCULATOR_TOOL

    prompt_record = {"messages": row["messages"], "chat_template_kwargs": {"enable_thinking": False},
                     "tools": [CALCULATOR_TOOL]}  # fmt: skip
    _, prompt_ids = codec.encode(prompt_record)
    assert first == [prompt_ids, prompt_ids]  # the prompt shows the calculator, as the template renders tools
    assert "calculator" in tokenizer.decode(prompt_ids)
    call = {"type": "function", "function": {"name": "calculator", "arguments": json.dumps({"expression": "6*7"})}}
    conversation = [
        *row["messages"],
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "name": "calculator", "content": "42"},
    ]
    _, expected = codec.encode({**prompt_record, "messages": conversation})
    assert second == [expected, expected]  # the next turn sees the result as the family renders tool messages
    # Rewarded: the episode that answered 42 after its executed call scores 1, the model's own random reply 0;
    # the run logs their mean as the environment reward.
    assert [e["env_reward"] for e in seen["episodes"]] == [1.0, 0.0]
    logged = [json.loads(line) for line in (tmp_path / "out" / "logs.jsonl").read_text().splitlines()]
    assert [r["rewards/environment/mean"] for r in logged if "rewards/environment/mean" in r] == [0.5]
    assert "<tool_response>\n42\n</tool_response>" in tokenizer.decode(second[0][len(prompt_ids) :])
    tool_ids = expected[len(prompt_ids) + len(scripted) :]

    episode = seen["episodes"][1]  # the model's own second reply
    assert episode["tool_calls"] == 1 and episode["turns"] == 2 and record["answer"] == "42"
    assert episode["messages"][-2] == {"role": "tool", "name": "calculator", "content": "42"}
    completion = episode["completion_ids"]
    n_reply = len(completion) - len(scripted) - len(tool_ids)
    assert (
        completion[: len(scripted)] == scripted
        and completion[len(scripted) : len(scripted) + len(tool_ids)] == tool_ids
    )
    assert episode["mask"] == [1] * len(scripted) + [0] * len(tool_ids) + [1] * n_reply

    assert seen["episodes"][0]["completion_ids"] == scripted + tool_ids + answer
    out = seen["out"]  # what the loss sees: completion_mask * tool_mask, on the ids above
    ids = out["completion_ids"][1].tolist()[: len(completion)]
    assert ids == completion
    loss_mask = (out["completion_mask"] * out["tool_mask"])[1].tolist()[: len(completion)]
    assert loss_mask == [1] * len(scripted) + [0] * len(tool_ids) + [1] * n_reply
    assert sum(loss_mask) == len(completion) - len(tool_ids)
