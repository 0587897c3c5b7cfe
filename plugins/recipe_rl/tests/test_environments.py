"""Multi-turn environments: the ``calculator`` (safe arithmetic, malformed calls answered, never raised), its
registration, the options (``--environment-option`` included: it reaches the environment's factory, bad values are
refused), and one real rollout on the tiny qwen3_5 whose tool call the family's template parses, the calculator
executes, the result reaches the next prompt as the template renders it, and the tool tokens stay out of the loss."""

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
    from swiftcore_recipe_rl.expression import evaluate_expression

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
    from swiftcore_recipe_rl.expression import CalculatorError, evaluate_expression

    with pytest.raises(CalculatorError, match=message):
        evaluate_expression(expression)


def _call(name: str = "calculator", arguments: Any = None) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def test_calculator_episode_answers_calls_and_rewards_a_correct_answer_reached_with_a_call() -> None:
    from swiftcore_recipe_rl.calculator import CALCULATOR_TOOL, Calculator

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
    from swiftcore_recipe_rl.calculator import Calculator

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
    assert spec.provider.plugin == "rl" and spec.factory == "swiftcore_recipe_rl.calculator:Calculator"
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


# ---------------------------------------------------------------------------------------------- --environment-option


def test_calculator_max_calls_refuses_the_calls_past_it() -> None:
    from swiftcore_recipe_rl.calculator import Calculator

    env = Calculator(max_calls=1)
    env.reset({"messages": [{"role": "user", "content": "6*7?"}], "answer": "42"})
    out = env.step({"tool_calls": [_call(arguments={"expression": "6*7"}), _call(arguments={"expression": "1+1"})]})
    first, second = out["messages"]
    assert first["content"] == "42" and second["content"].startswith("error: no calls left: at most 1")
    assert env.calls == 2 and env.successes == 1 and env.errors == 1
    assert env.step({"tool_calls": [_call(arguments={"expression": "2"})]})["messages"][0]["content"].startswith(
        "error"
    )
    assert env.step({"content": "42"})["reward"] == 1.0  # the call within the limit counted
    env.reset({"messages": [{"role": "user", "content": "?"}], "answer": "2"})  # a new episode: a fresh count
    assert env.step({"tool_calls": [_call(arguments={"expression": "1+1"})]})["messages"][0]["content"] == "2"
    with pytest.raises(ValueError, match="max_calls: -1 must be a whole number >= 0"):
        Calculator(max_calls=-1)
    assert Calculator().max_calls is None  # no limit by default


class _ScriptedTrainer:
    """What :class:`EpisodeRollout` reads of TRL's trainer, its replies scripted (one list of ids per turn)."""

    def __init__(self, turns: list[list[int]], eos: int) -> None:
        from types import SimpleNamespace

        self.turns = turns
        self.max_completion_length = 200
        self.eos_token_ids = [eos]
        self.model = SimpleNamespace(training=True)
        self.num_generations = self.num_generations_eval = 1

    def _generate_single_turn(self, ids: list, images: Any, fields: Any, n: int) -> tuple[list, None]:
        return [list(self.turns.pop(0)) for _ in ids], None


def test_an_environment_option_reaches_the_environment_and_changes_its_episodes(tiny_dir: Path, plugins: Any) -> None:
    """The recipe's episode loop for ``--environment calculator --environment-option max_calls=0`` makes each
    episode's calculator with ``max_calls=0``: the episode's call is answered with an error, so its correct answer
    earns nothing, where the same scripted episode without the option earns 1."""
    from swiftcore_recipe_rl.options import GRPOOptions
    from swiftcore_recipe_rl.plan import plan_environment
    from swiftcore_recipe_rl.rollout import PromptCodec

    from swiftcore.api.models import load_tokenizer
    from swiftcore.api.template import get_template

    tokenizer = load_tokenizer(str(tiny_dir))
    codec = PromptCodec(get_template("qwen3_5", plugins), tokenizer)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    call, answer = (tokenizer.encode(t, add_special_tokens=False) for t in (QWEN35_CALL, "42<|im_end|>"))
    row = {"messages": [{"role": "user", "content": "What is 6*7?"}], "answer": "42",
           "chat_template_kwargs": {"enable_thinking": False}}  # fmt: skip

    def episode(*environment_option: str) -> dict[str, Any]:
        options = GRPOOptions(reward=("environment",), environment="calculator", environment_option=environment_option)
        episodes = plan_environment(options, plugins).episodes(codec)
        episodes.rows["p"] = row
        episodes(["p"], _ScriptedTrainer([call, answer], eos))
        (e,) = episodes.episodes
        return e

    free, limited = episode(), episode("max_calls=0")
    assert free["env"].max_calls is None and limited["env"].max_calls == 0
    assert free["messages"][-2] == {"role": "tool", "name": "calculator", "content": "42"}
    assert limited["messages"][-2]["content"].startswith("error: no calls left: at most 0 calculator call(s)")
    assert free["turns"] == limited["turns"] == 2 and free["tool_calls"] == limited["tool_calls"] == 1
    assert (free["env_reward"], limited["env_reward"]) == (1.0, 0.0)


@pytest.mark.parametrize(
    ("environment_option", "message"),
    [
        (("max_calls",), r"--environment-option 'max_calls': expected KEY=VALUE, e.g. --environment-option max_calls"),
        (("=2",), r"--environment-option '=2': expected KEY=VALUE"),
        (("max calls=2",), r"--environment-option 'max calls=2': expected KEY=VALUE"),
    ],
)
def test_a_malformed_environment_option_is_refused(environment_option: tuple[str, ...], message: str) -> None:
    from swiftcore_recipe_rl.options import GRPOOptions, ReinforcePPOptions

    for options in (GRPOOptions, ReinforcePPOptions):
        with pytest.raises(ValueError, match=message):
            options(reward=("environment",), environment="calculator", environment_option=environment_option)


def test_an_environment_option_without_an_environment_is_refused() -> None:
    from swiftcore_recipe_rl.options import GRPOOptions

    with pytest.raises(ValueError, match=r"--environment-option 'max_calls=2': .*give --environment NAME too"):
        GRPOOptions(reward=("format",), environment_option=("max_calls=2",))
    # Given once (a config file's string), a value that itself holds '=', and the last of a key given twice.
    assert GRPOOptions(
        reward=("format",), environment="calculator", environment_option="max_calls=2"
    ).environment_options() == {"max_calls": "2"}
    many = GRPOOptions(reward=("format",), environment="x", environment_option=["a=b=c", " k =1", "k=2"])
    assert many.environment_options() == {"a": "b=c", "k": "2"}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("bogus=1", r"--environment-option bogus=1: environment 'calculator' \(rl .*\) does not take 'bogus'; "
                    r"it takes max_calls$"),
        ("max_calls=many", r"--environment-option max_calls=many: environment 'calculator' .* takes max_calls as a "
                           r"whole number or none, not 'many'; e.g. --environment-option max_calls=2"),
        ("max_calls=1.5", r"takes max_calls as a whole number or none, not '1.5'"),
        ("max_calls=-1", r"--environment-option max_calls=-1: environment 'calculator' .* refused its options: "
                         r"max_calls: -1 must be a whole number >= 0"),
    ],
)  # fmt: skip
def test_an_environment_option_the_environment_does_not_take_is_refused(value: str, message: str, plugins: Any) -> None:
    from swiftcore_recipe_rl.options import GRPOOptions
    from swiftcore_recipe_rl.plan import plan_environment

    from swiftcore.api import SwiftcoreError

    options = GRPOOptions(reward=("environment",), environment="calculator", environment_option=(value,))
    with pytest.raises(SwiftcoreError, match=message):
        plan_environment(options, plugins)


def test_environment_option_values_take_the_factorys_types() -> None:
    from swiftcore_recipe_rl.environment_options import environment_factory

    from swiftcore.api import SwiftcoreError

    def typed(rate: float = 0.5, strict: bool = False, label: str = "", limit: int | None = None, loose=3) -> dict:
        return {"rate": rate, "strict": strict, "label": label, "limit": limit, "loose": loose}

    made = environment_factory(typed, {"rate": "2.5", "strict": "yes", "label": "a b", "limit": "none", "loose": "4"})()
    assert made == {"rate": 2.5, "strict": True, "label": "a b", "limit": None, "loose": 4}  # loose: its default's type
    assert environment_factory(typed, {}) is typed  # no options: the factory itself
    for bad, kind in (
        ("rate=nan", "a finite number"),
        ("strict=maybe", "true or false"),
        ("loose=x", "a whole number"),
    ):
        key, _, value = bad.partition("=")
        with pytest.raises(SwiftcoreError, match=f"takes {key} as {kind}, not '{value}'"):
            environment_factory(typed, {key: value}, name="typed")

    def anything(**kwargs: Any) -> dict:  # takes any key, its values as given
        return kwargs

    assert environment_factory(anything, {"k": "v"})() == {"k": "v"}

    def bare() -> None:
        return None

    with pytest.raises(SwiftcoreError, match=r"environment 'bare' does not take 'k'; it takes no options \(drop"):
        environment_factory(bare, {"k": "v"}, name="bare")


def _cli(*args: str) -> tuple[int, str]:
    """``swiftcore ARGS`` in-process: its exit code, and its output with the exception's message."""
    from click.testing import CliRunner

    from swiftcore.api.cli import cli

    result = CliRunner().invoke(cli, list(args), env={"SWIFTCORE_PLUGINS": None, "SWIFTCORE_PLUGINS_STRICT": None})
    return result.exit_code, result.output + (str(result.exception) if result.exception else "")


def test_the_environment_option_flag_from_the_cli(tiny_dir: Path, tmp_path: Path) -> None:
    """``--environment-option`` is in ``train --recipe grpo --help`` (grpo and reinforce_pp), reaches the calculator's
    factory from the command line (a value it refuses fails before the model loads, naming the option), and is refused
    without ``--environment``, malformed, or with ``--recipe rloo``; no output directory is made."""
    code, shown = _cli("train", "--recipe", "grpo", "--help")
    assert code == 0 and "--environment-option" in " ".join(shown.split()), shown
    assert "The calculator takes max_calls=N" in " ".join(shown.split())
    data = tmp_path / "calc.jsonl"
    data.write_text(json.dumps({"prompt": "What is 6*7?", "answer": "42"}) + "\n")
    out = tmp_path / "out"
    base = ("train", "--model", str(tiny_dir), "--dataset", str(data), "--reward", "environment", "--max-steps", "1",
            "--output-dir", str(out))  # fmt: skip
    calc = ("--environment", "calculator")
    for args, message in [
        (("--recipe", "grpo", *calc, "--environment-option", "max_calls=-1"),
         "--environment-option max_calls=-1: environment 'calculator' (rl"),
        (("--recipe", "reinforce_pp", *calc, "--environment-option", "max_calls=two"),
         "takes max_calls as a whole number or none, not 'two'"),
        (("--recipe", "grpo", *calc, "--environment-option", "maxcalls=2"),
         "does not take 'maxcalls'; it takes max_calls"),
        (("--recipe", "grpo", *calc, "--environment-option", "max_calls"),
         "--environment-option 'max_calls': expected KEY=VALUE"),
        (("--recipe", "grpo", "--environment-option", "max_calls=2"), "give --environment NAME too"),
        (("--recipe", "rloo", "--environment-option", "max_calls=2"), "--environment-option belongs to recipe"),
    ]:  # fmt: skip
        code, said = _cli(*base, *args)
        assert code != 0 and message in said, (args, said)
        assert not out.exists()


def test_importing_the_environments_imports_no_torch() -> None:
    import subprocess

    modules = ("expression", "calculator", "environment_reward", "environment_options", "episodes", "plugin")
    code = f"import sys; import {', '.join(f'swiftcore_recipe_rl.{m}' for m in modules)}; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ---------------------------------------------------------------------------------------------- a real rollout

#: The tool call a Qwen3.5 reply carries (the family's XML format), and the stop token that ends the reply.
QWEN35_CALL = (
    "<tool_call>\n<function=calculator>\n<parameter=expression>\n6*7\n</parameter>\n</function>\n</tool_call><|im_end|>"
)


@pytest.mark.parametrize("rollouts", ["trainer", "server"])
def test_a_tool_call_is_parsed_executed_rendered_and_masked(
    rollouts: str, tiny_dir: Path, plugins: Any, tmp_path: Path, rollout_servers: Any
) -> None:
    """One GRPO rollout batch on the tiny qwen3_5: the first reply is scripted (a tiny random model emits no tool
    call); after the tool result one episode answers 42 (scripted) and the other is the model's own. The reply is
    parsed by the qwen3_5 template, the calculator answers 42, the next turn's input is exactly the template's
    encoding of the conversation with the tool message, the loss mask is 0 on the tool tokens and 1 on the model's,
    and the environment rewards the episode that answered 42 after its call (1) and not the other (0).

    ``server``: the model's own reply comes from a ``swiftcore rollout`` server (``--rollout-server``), the later
    turn sent to it as token ids."""
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
    from swiftcore_train import TrainConfig

    cfg = TrainConfig(
        model=str(tiny_dir), dataset=(str(data),), output_dir=str(tmp_path / "out"), tuner="lora", max_steps=1,
        batch_size=1, logging_steps=1, save_steps=10_000, seed=0, plot=False, max_length=1024, enable_thinking=False,
    )  # fmt: skip
    served = rollout_servers(tiny_dir) if rollouts == "server" else None
    options = GRPOOptions(
        reward=("environment",), environment="calculator", max_turns=2, num_generations=2, max_completion_length=96,
        **({"rollout_server": served.url} if served else {}),
    )
    mp = pytest.MonkeyPatch()
    mp.setattr(cls, "_generate_single_turn", generate)
    mp.setattr(cls, "_generate_and_score_completions", score)
    try:
        run(cfg, plugins, options)
    finally:
        mp.undo()

    if served is not None:  # the policy's adapter went to the server, which generated the model's own reply
        assert served.health()["weight_version"] >= 2 and len(served.health()["adapters"]) == 1
    first, second = seen["inputs"][:2]
    record = {**row, "chat_template_kwargs": {"enable_thinking": False}}
    from swiftcore_recipe_rl.calculator import CALCULATOR_TOOL

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
